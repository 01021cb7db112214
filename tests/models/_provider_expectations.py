"""What each recorded provider fixture must normalise to (one entry per fixture).

Every value here was read off the fixture files themselves (the SSE events or JSON body), never
computed by the drivers under test. Long strings are given as ``Long(prefix, suffix, length)``.
Conventions asserted here (they are the drivers' documented normalisation):

- ``text`` is all visible text joined; ``thoughts`` are the reasoning parts in order, with the
  provider's signature (Anthropic signature, redacted-thinking data, or a Responses reasoning
  item's encrypted content, ``""`` when it has none) and the Responses item id;
- Chat Completions reads choice 0 only; ``finish_reason: "stop"`` with tool calls (a forced tool
  choice) is ``"tool_calls"``; a refusal (``delta.refusal`` / ``message.refusal``) is
  ``"refusal"`` with its text;
- Anthropic ``input_tokens`` counts cached prompt tokens too (all zero in these recordings), and
  the latest ``message_delta`` usage wins; ``thinking_tokens`` are ``reasoning_tokens``;
- server-tool blocks and items are ``blocks`` (``ProviderBlock``), never tool calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentloop import _errors as errors
from agentloop.models import Usage


@dataclass(frozen=True)
class Long:
    """A long string: its first and last characters and its length."""

    prefix: str
    suffix: str
    length: int

    def matches(self, value: str) -> bool:
        return (
            len(value) == self.length
            and value.startswith(self.prefix)
            and value.endswith(self.suffix)
        )


@dataclass(frozen=True)
class Thought:
    text: str | Long
    signature: str | Long | None = None
    redacted: bool = False
    id: str | None = None


@dataclass(frozen=True)
class Call:
    id: str
    name: str
    args: dict[str, Any]


@dataclass(frozen=True)
class Expect:
    text: str | Long = ""
    thoughts: tuple[Thought, ...] = ()
    calls: tuple[Call, ...] = ()
    usage: Usage | None = None
    finish: str = "stop"
    refusal: str | None = None
    blocks: tuple[str, ...] = ()
    citations: int = 0
    error: type[errors.ModelError] | None = None
    status: int | None = None
    request_id: str | None = None
    notes: tuple[str, ...] = field(default=())


def matches(expected: str | Long | None, value: str | None) -> bool:
    if isinstance(expected, Long):
        return value is not None and expected.matches(value)
    return expected == value


EXPECTED: dict[str, Expect] = {
    "openai-chat/error_400_unsupported_parameter": Expect(
        error=errors.ModelBadRequest, status=400, request_id=None
    ),
    "openai-chat/error_401_invalid_api_key_stream": Expect(
        error=errors.ModelAuthError, status=401, request_id=None
    ),
    "openai-chat/error_404_model_not_found_stream": Expect(
        error=errors.ModelNotFound, status=404, request_id=None
    ),
    "openai-chat/nonstream_parallel_2_tool_calls": Expect(
        calls=(
            Call(
                "call_vwOezSsB5j9ei1SSMlZjqx7g", "get_current_weather", {"location": "Seattle, WA"}
            ),
            Call(
                "call_LzeIYcKhHnVF60u4LmBpT1tv",
                "get_current_weather",
                {"location": "San Francisco, CA"},
            ),
        ),
        usage=Usage(
            requests=1,
            input_tokens=75,
            output_tokens=51,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=0,
        ),
        finish="tool_calls",
    ),
    "openai-chat/nonstream_refusal": Expect(
        usage=Usage(
            requests=1,
            input_tokens=65,
            output_tokens=13,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=0,
        ),
        finish="refusal",
        refusal="I'm very sorry, but I can't assist with that request.",
    ),
    "openai-chat/nonstream_single_tool_call": Expect(
        calls=(Call("call_TTY8UFNo7rNCaOBUNtlRSvMG", "lookup_population", {"country": "Crumpet"}),),
        usage=Usage(
            requests=1,
            input_tokens=92,
            output_tokens=17,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=0,
        ),
        finish="tool_calls",
    ),
    "openai-chat/stream_finish_length_empty_reasoning_model": Expect(
        usage=Usage(
            requests=1,
            input_tokens=13,
            output_tokens=50,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=50,
        ),
        finish="length",
    ),
    "openai-chat/stream_finish_length_text": Expect(
        text="Here is a list of all 50 U.S. states:\n\n1. Alabama\n2. Alaska\n3. Arizona\n4. Arkansas\n5. California\n6. Colorado\n7. Connecticut\n8. Delaware\n9. Florida\n10",
        usage=Usage(
            requests=1,
            input_tokens=14,
            output_tokens=50,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=0,
        ),
        finish="length",
    ),
    "openai-chat/stream_forced_tool_finish_stop": Expect(
        calls=(
            Call(
                "call_sigJkGcvZrYCOQPEbptSxluC",
                "__mirascope_formatted_output_tool__",
                {
                    "title": "THE NAME OF THE WIND",
                    "author": {"first_name": "Patrick", "last_name": "Rothfuss"},
                    "rating": 7,
                },
            ),
        ),
        usage=Usage(
            requests=1,
            input_tokens=172,
            output_tokens=29,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=0,
        ),
        finish="tool_calls",
    ),
    "openai-chat/stream_n2_choices": Expect(
        text=Long(
            "I'm unable to provide real-time weather ", "he current weather conditions.", 277
        ),
        usage=Usage(
            requests=1,
            input_tokens=26,
            output_tokens=104,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=0,
        ),
        finish="stop",
    ),
    "openai-chat/stream_parallel_2_tool_calls_no_usage": Expect(
        calls=(
            Call(
                "call_cCPjAyfwTzboEKjVlqFrArNF",
                "get_current_weather",
                {"location": "San Francisco"},
            ),
            Call("call_Zi4He1Ns0mozwT6f85nW1BOW", "get_current_weather", {"location": "Boston"}),
        ),
        usage=None,
        finish="tool_calls",
    ),
    "openai-chat/stream_parallel_2_tool_calls_obfuscation": Expect(
        calls=(
            Call("call_M26z19sncd7b4LBgzKRRbaUE", "secret_retrieval_tool", {"password": "mellon"}),
            Call(
                "call_KPXe5NX7IcKkaBUhc6dto2QV", "secret_retrieval_tool", {"password": "radiance"}
            ),
        ),
        usage=Usage(
            requests=1,
            input_tokens=75,
            output_tokens=53,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=0,
        ),
        finish="tool_calls",
    ),
    "openai-chat/stream_parallel_2_tool_calls_usage": Expect(
        calls=(
            Call(
                "call_fHCjJqt9Pysde6vcJcvbXGBx", "get_current_weather", {"location": "Seattle, WA"}
            ),
            Call(
                "call_3J9foSw3CUb48lrqIXoTky6U",
                "get_current_weather",
                {"location": "San Francisco, CA"},
            ),
        ),
        usage=Usage(
            requests=1,
            input_tokens=75,
            output_tokens=51,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=0,
        ),
        finish="tool_calls",
    ),
    "openai-chat/stream_refusal": Expect(
        usage=Usage(
            requests=1,
            input_tokens=64,
            output_tokens=13,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=0,
        ),
        finish="refusal",
        refusal="I'm very sorry, but I can't assist with that request.",
    ),
    "openai-chat/stream_text_after_2_tool_results": Expect(
        text='The secrets associated with the passwords are:\n\n- "mellon": Welcome to Moria!\n- "radiance": Life before Death',
        usage=Usage(
            requests=1,
            input_tokens=149,
            output_tokens=28,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=0,
        ),
        finish="stop",
    ),
    "openai-chat/stream_text_after_tool_result_usage": Expect(
        text="The capital of the UK is London.",
        usage=Usage(
            requests=1,
            input_tokens=78,
            output_tokens=9,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=0,
        ),
        finish="stop",
    ),
    "openai-chat/stream_text_no_usage": Expect(
        text="Why did the developer break up with Opentelemetry? Because it couldn't handle the baggage of all their tracing requests!",
        usage=None,
        finish="stop",
    ),
    "openai-chat/stream_text_obfuscation_usage": Expect(
        text="4200 + 42 equals 4242.",
        usage=Usage(
            requests=1,
            input_tokens=16,
            output_tokens=10,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=0,
        ),
        finish="stop",
    ),
    "openai-chat/stream_text_short_usage": Expect(
        text='"This is a test."',
        usage=Usage(
            requests=1,
            input_tokens=12,
            output_tokens=5,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=0,
        ),
        finish="stop",
    ),
    "openai-chat/stream_tool_call_single_no_usage": Expect(
        calls=(
            Call(
                "call_P9Ayqu3UQNYuTBVAg2sLimh9",
                "get_current_weather",
                {"location": "San Francisco"},
            ),
        ),
        usage=None,
        finish="tool_calls",
    ),
    "openai-chat/stream_tool_call_single_usage": Expect(
        calls=(Call("call_ZR5UUuTt3pf61kjwAJIYdVMj", "get_capital", {"country": "UK"}),),
        usage=Usage(
            requests=1,
            input_tokens=53,
            output_tokens=15,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=0,
        ),
        finish="tool_calls",
    ),
    "openai-chat/stream_trailing_moderation_chunk": Expect(
        text="Paris.",
        usage=Usage(
            requests=1,
            input_tokens=13,
            output_tokens=11,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=0,
        ),
        finish="stop",
    ),
    "openai-responses/error_400_invalid_param_stream": Expect(
        error=errors.ModelBadRequest, status=400, request_id=None
    ),
    "openai-responses/error_400_model_not_found_stream": Expect(
        error=errors.ModelBadRequest, status=400, request_id=None
    ),
    "openai-responses/error_401_invalid_api_key_stream": Expect(
        error=errors.ModelAuthError, status=401, request_id=None
    ),
    "openai-responses/nonstream_2_function_calls": Expect(
        calls=(
            Call("call_tYDv1bhtioyX33juEGDY4D6H", "get_weather", {"location": "London"}),
            Call("call_lC079UhGnLJngBlPQO0FS6sv", "get_weather", {"location": "London"}),
        ),
        usage=Usage(
            requests=1,
            input_tokens=58,
            output_tokens=44,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=0,
        ),
        finish="tool_calls",
    ),
    "openai-responses/nonstream_function_call": Expect(
        calls=(Call("call_nJmCK7SJe3ajdYYplIbH0KgL", "multiply", {"a": 1231, "b": 2331}),),
        usage=Usage(
            requests=1,
            input_tokens=58,
            output_tokens=23,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=0,
        ),
        finish="tool_calls",
    ),
    "openai-responses/nonstream_reasoning_5_function_calls": Expect(
        thoughts=(
            Thought(
                "",
                signature=Long(
                    "gAAAAABp-r_xmA0UxYPtwh_j40lMaQmCCqiqsEev",
                    "lRy4C7py0RD7rZtWW6LDNaZ09vIlY=",
                    1016,
                ),
                id="rs_0429c1fcf5cbfa350169fabfeff8708197a93aabe0257d06a5",
            ),
        ),
        calls=(
            Call("call_WbWwKw4J6EXQ7Sn93fgmuZe3", "db_lookup", {"key": "begin"}),
            Call("call_et3hsNc1ipjCfuBylmAwqkEy", "db_lookup", {"key": "value"}),
            Call("call_J4rpPS0QEz4CIdsVGKEKG6k3", "db_lookup", {"key": "the value 7"}),
            Call("call_gd2cYY61KkICSgB6qNd7ZC66", "db_lookup", {"key": "Begin with the value 7."}),
            Call("call_nInKAmdZObYpqc3OR3WC61K3", "db_lookup", {"key": "start2"}),
        ),
        usage=Usage(
            requests=1,
            input_tokens=532,
            output_tokens=119,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=17,
        ),
        finish="tool_calls",
    ),
    "openai-responses/stream_function_call": Expect(
        calls=(Call("call_sVidsfFJ6zlzRpelrPkTPlpd", "multiply", {"a": 1231, "b": 2331}),),
        usage=Usage(
            requests=1,
            input_tokens=58,
            output_tokens=23,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=0,
        ),
        finish="tool_calls",
    ),
    "openai-responses/stream_incomplete_max_output_tokens": Expect(
        text="Sure! Here is a list of all 50 U.S. states:\n\n1. Alabama\n2. Alaska\n3. Arizona\n4. Arkansas\n5. California\n6. Colorado\n7. Connecticut\n8. Delaware\n9. Florida",
        usage=Usage(
            requests=1,
            input_tokens=14,
            output_tokens=50,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=0,
        ),
        finish="length",
    ),
    "openai-responses/stream_message_then_function_call": Expect(
        text='{"title":"Mistborn: The Final Empire","author":"Brandon Sanderson","pages":544,"publication_year":2006}',
        calls=(Call("call_gLsRpyrJp2V40WOFb5Cbbey0", "get_book_info", {"isbn": "0-7653-1178-X"}),),
        usage=Usage(
            requests=1,
            input_tokens=197,
            output_tokens=56,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=0,
        ),
        finish="tool_calls",
    ),
    "openai-responses/stream_reasoning_function_call_usage": Expect(
        thoughts=(
            Thought(
                "",
                signature=Long(
                    "gAAAAABoyXvxI6jwG5j6rvTGC7PD6JN5758K-WDl",
                    "t6A7e5ztUnIVgXKYQko02bg-rk3VE=",
                    3896,
                ),
                id="rs_0050471a34b36ae60068c97bac4dcc819595fd0f80d6b3c405",
            ),
        ),
        calls=(Call("call_CWXgs68YprAjp6t0371hiPOI", "final_result", {"result": 6666}),),
        usage=Usage(
            requests=1,
            input_tokens=53,
            output_tokens=469,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=448,
        ),
        finish="tool_calls",
    ),
    "openai-responses/stream_reasoning_message_function_call": Expect(
        text="I’ll check the capital lookup tool for “PotatoLand.”",
        thoughts=(
            Thought(
                "",
                signature=Long(
                    "gAAAAABqaR3-pGgSyJcPT3y2_26v61vCZmE9M2P6",
                    "PEPgeI-QScqnYrFieJls_UcqGK8PU=",
                    1080,
                ),
                id="rs_0fabc13af1ee0049006a691dfe60b081a1baa444d3cf19afba",
            ),
        ),
        calls=(Call("call_LabG58Uhrq9kZvR52BYKjToD", "get_capital", {"country": "PotatoLand"}),),
        usage=Usage(
            requests=1,
            input_tokens=63,
            output_tokens=69,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=26,
        ),
        finish="tool_calls",
    ),
    "openai-responses/stream_reasoning_summary_text": Expect(
        text=Long(
            "I'm not a road safety professional, but ", "cific to your area. Stay safe!", 1251
        ),
        thoughts=(
            Thought(
                Long(
                    "**Providing street crossing instructions",
                    " clear and easy to understand!",
                    2028,
                ),
                signature=Long(
                    "gAAAAABoxC0m_QWpOlSt8wyPk_gtnjiI4mNLOryY",
                    "TwMom016P3dgWwgP5AtWmQ30zeXDs=",
                    440,
                ),
                id="rs_68c42d1d0878819d8266007cd3d1402c08fbf9b1584184ff",
            ),
        ),
        usage=Usage(
            requests=1,
            input_tokens=13,
            output_tokens=1680,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=1408,
        ),
        finish="stop",
    ),
    "openai-responses/stream_text_after_function_call_output": Expect(
        text="1231 × 2331 = **2,869,461**",
        usage=Usage(
            requests=1,
            input_tokens=94,
            output_tokens=18,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=0,
        ),
        finish="stop",
    ),
    "openai-responses/stream_text_basic": Expect(
        text="pong",
        usage=Usage(
            requests=1,
            input_tokens=11,
            output_tokens=5,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=0,
        ),
        finish="stop",
    ),
    "openai-responses/stream_two_function_calls": Expect(
        calls=(
            Call("call_tVwplip8EyrgMsD2ZarNBIFJ", "secret_retrieval_tool", {"password": "mellon"}),
            Call(
                "call_MHKI6t2Q3p5qwBAm21ysBMIc", "secret_retrieval_tool", {"password": "radiance"}
            ),
        ),
        usage=Usage(
            requests=1,
            input_tokens=36,
            output_tokens=54,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=0,
        ),
        finish="tool_calls",
    ),
    "openai-responses/stream_web_search_annotations": Expect(
        text=Long(
            "Alberta’s tallest mountain (highest poin", "t-Columbia?utm_source=openai))", 179
        ),
        usage=Usage(
            requests=1,
            input_tokens=8234,
            output_tokens=79,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=34,
        ),
        finish="stop",
        blocks=("web_search_call",),
        citations=1,
    ),
    "anthropic/error_400_invalid_request": Expect(
        error=errors.ModelBadRequest, status=400, request_id="req_011Ca7jT9AHpgXgdv8igm4z9"
    ),
    "anthropic/error_401_authentication_stream": Expect(
        error=errors.ModelAuthError, status=401, request_id="req_011CWdMFGmmtqDd5uETFt98k"
    ),
    "anthropic/error_404_not_found_stream": Expect(
        error=errors.ModelNotFound, status=404, request_id="req_011CWbziqGSV3t3Ax2Wza1WH"
    ),
    "anthropic/nonstream_text_2_tool_use": Expect(
        text=Long(
            "Certainly! I'd be happy to help you with", " get this information for you.", 168
        ),
        calls=(
            Call(
                "toolu_012r6TBCWjRHG71j6zruYyUL",
                "get_weather",
                {"location": "New York, NY", "unit": "fahrenheit"},
            ),
            Call("toolu_01SkeBKkLCNYWNuivqFerGDd", "get_time", {"timezone": "America/New_York"}),
        ),
        usage=Usage(
            requests=1,
            input_tokens=514,
            output_tokens=152,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=0,
        ),
        finish="tool_calls",
    ),
    "anthropic/nonstream_thinking_text_tool_use": Expect(
        text="I'll compute the 100th Fibonacci number for you.",
        thoughts=(
            Thought(
                Long(
                    "The user is asking for the 100th Fibonac",
                    "ers to make the function call.",
                    258,
                ),
                signature=Long(
                    "EqsDCkYICxgCKkDlyJ5F08q1ul9N4Sb7iho/bgJZ",
                    "kLArkioDjAji/Cy+ae8H8jdfzOohgB",
                    576,
                ),
            ),
        ),
        calls=(Call("toolu_016feRCAQERKZe9apWg1fnsJ", "compute_fib", {"n": 100}),),
        usage=Usage(
            requests=1,
            input_tokens=433,
            output_tokens=138,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=0,
        ),
        finish="tool_calls",
    ),
    "anthropic/nonstream_tool_use_only": Expect(
        calls=(
            Call("toolu_01K5KhMEdg2McN7dAkB4Y4hi", "get_time", {"timezone": "America/Los_Angeles"}),
        ),
        usage=Usage(
            requests=1,
            input_tokens=568,
            output_tokens=58,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=0,
        ),
        finish="tool_calls",
    ),
    "anthropic/stream_adaptive_thinking_text_first": Expect(
        text="\n\n1. **Captain Scoop**\n2. **Gullet**",
        thoughts=(
            Thought(
                "Brief answer with two pet pelican names.",
                signature=Long(
                    "EtABCkYICxgCKkCVRmhlD4SUFC1JfxwvjOHbkC3C",
                    "gKF0vzMKik41tZsSGAoENhIz4SWxgB",
                    284,
                ),
            ),
        ),
        usage=Usage(
            requests=1,
            input_tokens=34,
            output_tokens=44,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=0,
        ),
        finish="stop",
    ),
    "anthropic/stream_pause_turn_web_search": Expect(
        text=Long(
            "I'll run these searches one at a time as", "g with the remaining searches:", 166
        ),
        thoughts=(
            Thought(
                Long(
                    "The user wants me to run a series of web",
                    "me as requested. Let me start.",
                    1051,
                ),
                signature=Long(
                    "EuwJCm4IDxgCKkBjID0+egpRzHnlwt9pXf871ag+",
                    "t36aLg5h/n+3fwB2JU3RNwqNCIGAE=",
                    1688,
                ),
            ),
        ),
        usage=Usage(
            requests=1,
            input_tokens=404500,
            output_tokens=943,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=261,
        ),
        finish="pause_turn",
        blocks=("server_tool_use", "web_search_tool_result") * 10 + ("server_tool_use",),
    ),
    "anthropic/stream_redacted_thinking": Expect(
        text=Long(
            "I notice that you've sent what appears t", "a legitimate task or question?", 359
        ),
        thoughts=(
            Thought(
                "",
                signature=Long(
                    "EqkECkYIBxgCKkA8AZ4noDfV5VcOJe/p3JTRB6Xz",
                    "kkWuR0AhDIXXjpot45vnBd4ewJ/hgB",
                    744,
                ),
                redacted=True,
            ),
            Thought(
                "",
                signature=Long(
                    "EtgBCkYIBxgCKkDQfGkwzflEJP5asG3oQfJXcTwJ",
                    "Z2k/6RjRRFuab/DBV3yRYdZ1J0GAE=",
                    296,
                ),
                redacted=True,
            ),
        ),
        usage=Usage(
            requests=1,
            input_tokens=92,
            output_tokens=189,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=0,
        ),
        finish="stop",
    ),
    "anthropic/stream_server_web_search_citations": Expect(
        text=Long(
            "Let me search for historical events that", "n women gained the same right.", 338
        ),
        usage=Usage(
            requests=1,
            input_tokens=12251,
            output_tokens=153,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=0,
        ),
        finish="stop",
        blocks=("server_tool_use", "web_search_tool_result"),
        citations=1,
    ),
    "anthropic/stream_text_2_tool_use_legacy": Expect(
        text=Long(
            "Certainly! I can help you with that info", "et me fetch that data for you.", 175
        ),
        calls=(
            Call(
                "toolu_014x5X91kx3fvdhpLvwXZWE2",
                "get_weather",
                {"location": "San Francisco, CA", "unit": "celsius"},
            ),
            Call("toolu_0121kXsENLvoDZ72LCuAnCCz", "get_time", {"timezone": "America/Los_Angeles"}),
        ),
        usage=Usage(
            requests=1,
            input_tokens=506,
            output_tokens=153,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=0,
        ),
        finish="tool_calls",
    ),
    "anthropic/stream_text_after_2_tool_results": Expect(
        text=Long(
            "Here are the secrets retrieved for each ", "e been successfully retrieved!", 192
        ),
        usage=Usage(
            requests=1,
            input_tokens=602,
            output_tokens=52,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=0,
        ),
        finish="stop",
    ),
    "anthropic/stream_text_max_tokens": Expect(
        text="Here are all 50 U.S. states in alphabetical order:\n\n1. Alabama\n2. Alaska\n3. Arizona\n4. Arkansas\n5. California\n6. Colorado\n7. Connecticut\n8. Delaware\n9",
        usage=Usage(
            requests=1,
            input_tokens=15,
            output_tokens=50,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=0,
        ),
        finish="length",
    ),
    "anthropic/stream_text_no_ping_legacy": Expect(
        text="Hello there!",
        usage=Usage(
            requests=1,
            input_tokens=11,
            output_tokens=6,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=0,
        ),
        finish="stop",
    ),
    "anthropic/stream_text_ping": Expect(
        text="- Captain\n- Scoop",
        usage=Usage(
            requests=1,
            input_tokens=17,
            output_tokens=10,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=0,
        ),
        finish="stop",
    ),
    "anthropic/stream_text_stop_sequence": Expect(
        text='\ndef pelican():\n    return "A large waterbird with a long bill and a throat pouch for catching fish."\n',
        usage=Usage(
            requests=1,
            input_tokens=16,
            output_tokens=28,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=0,
        ),
        finish="stop",
    ),
    "anthropic/stream_text_then_2_tool_use": Expect(
        text="I'll retrieve the secrets for both passwords you provided.",
        calls=(
            Call("toolu_015cUijgET79LXjgeYQerN2h", "secret_retrieval_tool", {"password": "mellon"}),
            Call(
                "toolu_01XZTimPexA7h3EVKesnKt5T", "secret_retrieval_tool", {"password": "radiance"}
            ),
        ),
        usage=Usage(
            requests=1,
            input_tokens=416,
            output_tokens=109,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=0,
        ),
        finish="tool_calls",
    ),
    "anthropic/stream_thinking_text": Expect(
        text=Long(
            "Here are the basic steps for safely cros", "r speed when crossing streets.", 1021
        ),
        thoughts=(
            Thought(
                Long(
                    "This is a straightforward question about",
                    " could help prevent accidents.",
                    202,
                ),
                signature=Long(
                    "EvMCCkYICxgCKkCHP2cSuEdcJK/0rFwqES/ecn+V",
                    "xb7XsYeb1vgb7wwzDvP/UhjfQYAQ==",
                    504,
                ),
            ),
        ),
        usage=Usage(
            requests=1,
            input_tokens=43,
            output_tokens=282,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=0,
        ),
        finish="stop",
    ),
    "anthropic/stream_thinking_tool_use": Expect(
        thoughts=(
            Thought(
                Long(
                    "The user wants me to:\n1. Use the fixed_v",
                    "o see what version it returns.",
                    180,
                ),
                signature=Long(
                    "EoQDCm0IDhgCKkCDzGs2kL2PgnDCZU/nM2wG2P1V",
                    "neYwyxQQtUVgzhVGhhANWRjSBwUxgB",
                    524,
                ),
            ),
        ),
        calls=(Call("toolu_01825dXWLSoJwCst1qTsiWdb", "fixed_version", {}),),
        usage=Usage(
            requests=1,
            input_tokens=598,
            output_tokens=92,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=53,
        ),
        finish="tool_calls",
    ),
    "anthropic/stream_tool_result_followup_text": Expect(
        text='The version is **0.32a0**.\n\nHere\'s a joke: I guess you could say this version is still in the "alpha" stages of being useful! 😄',
        usage=Usage(
            requests=1,
            input_tokens=617,
            output_tokens=41,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=0,
        ),
        finish="stop",
    ),
    "anthropic/stream_tool_use_empty_input": Expect(
        calls=(Call("toolu_01CzN6riCPqw4pVSuTd9Dwn7", "pelican_name_generator", {}),),
        usage=Usage(
            requests=1,
            input_tokens=543,
            output_tokens=40,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=0,
        ),
        finish="tool_calls",
    ),
    "anthropic/stream_tool_use_forced_args_no_ping": Expect(
        calls=(
            Call(
                "toolu_01WMZPyKjDKM3JTnyDSeCyp1",
                "__mirascope_formatted_output_tool__",
                {
                    "title": "THE NAME OF THE WIND",
                    "author": {"first_name": "Patrick", "last_name": "Rothfuss"},
                    "rating": 7,
                },
            ),
        ),
        usage=Usage(
            requests=1,
            input_tokens=880,
            output_tokens=81,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=0,
        ),
        finish="tool_calls",
    ),
    "anthropic/stream_two_tool_use_no_text": Expect(
        calls=(
            Call("toolu_01LtHJmixrs9NcWQkK8hu8hj", "pelican_name_generator", {}),
            Call("toolu_01N8a4jWyf116qKTMqKKmjyt", "pelican_name_generator", {}),
        ),
        usage=Usage(
            requests=1,
            input_tokens=542,
            output_tokens=62,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=0,
        ),
        finish="tool_calls",
    ),
}
