"""Images, files and the settings users reach for, on the wire: an ``Agent`` runs against the
emulated provider (which refuses, with a 400, what each API documents it refuses) through each
real driver, and each request body is asserted against the API's documented shape: Chat
Completions ``image_url``/``file`` parts, Responses ``input_image``/``input_file`` items,
Anthropic ``image``/``document`` blocks; images a tool returns; ``tool_choice``,
``parallel_tool_calls``, ``prompt_cache_key``; Anthropic cache breakpoints, and a request prefix
that stays byte-identical from step to step."""

from __future__ import annotations

import base64
import itertools
import json
from typing import Any

import pytest

from agentloop import Agent, UserError, tool
from agentloop.models import FilePart, ImagePart, ModelSettings
from agentloop.testing import EmulatedProvider, ProviderServer

from ._provider_helpers import make_model

APIS = ("openai-chat", "openai-responses", "anthropic")
# A 1x1 transparent PNG, and the head of a PDF (the emulator, like the APIs, reads the type).
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)
PDF = b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n"
PNG_B64 = base64.b64encode(PNG).decode()
PDF_B64 = base64.b64encode(PDF).decode()
INPUT: list[str | ImagePart | FilePart] = [
    "What is in the picture and the report?",
    ImagePart(data=PNG, media_type="image/png"),
    ImagePart(url="https://example.com/cat.jpg"),
    FilePart(data=PDF, media_type="application/pdf", filename="report.pdf"),
]


@tool
async def snapshot(query: str) -> list[Any]:
    """A picture for a query."""
    return [f"the picture for {query}", ImagePart(data=PNG, media_type="image/png")]


@tool
async def weather(query: str) -> str:
    """The weather for a query."""
    return f"sunny in {query}"


async def _run(api: str, agent_input: Any, **agent: Any) -> tuple[Any, list[dict[str, Any]]]:
    async with ProviderServer(EmulatedProvider()) as server:
        async with make_model(api, server.url) as model:
            result = await Agent(model, tool_mode="native", **agent).run(agent_input)
        return result, [r.json for r in server.requests]


def _user_content(api: str, body: dict[str, Any]) -> Any:
    if api == "openai-responses":
        return next(i for i in body["input"] if i.get("role") == "user")["content"]
    return next(m for m in body["messages"] if m["role"] == "user")["content"]


EXPECTED_INPUT: dict[str, list[dict[str, Any]]] = {
    "openai-chat": [
        {"type": "text", "text": "What is in the picture and the report?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_B64}"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
        {
            "type": "file",
            "file": {
                "file_data": f"data:application/pdf;base64,{PDF_B64}",
                "filename": "report.pdf",
            },
        },
    ],
    "openai-responses": [
        {"type": "input_text", "text": "What is in the picture and the report?"},
        {"type": "input_image", "image_url": f"data:image/png;base64,{PNG_B64}", "detail": "auto"},
        {"type": "input_image", "image_url": "https://example.com/cat.jpg", "detail": "auto"},
        {
            "type": "input_file",
            "filename": "report.pdf",
            "file_data": f"data:application/pdf;base64,{PDF_B64}",
        },
    ],
    "anthropic": [
        {"type": "text", "text": "What is in the picture and the report?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": PDF_B64},
            "title": "report.pdf",
            "cache_control": {"type": "ephemeral"},  # the history's end, on the first request
        },
    ],
}


@pytest.mark.parametrize("api", APIS)
async def test_images_and_files_in_the_input(api: str) -> None:
    """A run's input of text, an image's bytes, an image URL and a PDF goes out in the API's
    own content shape; every later request replays it (the emulator accepts each)."""
    result, bodies = await _run(api, INPUT, tools=[weather])
    assert result.error is None, result.error
    assert _user_content(api, bodies[0]) == EXPECTED_INPUT[api]
    replayed = _user_content(api, bodies[1])
    assert [part["type"] for part in replayed] == [p["type"] for p in EXPECTED_INPUT[api]]


def _tool_images(api: str, body: dict[str, Any]) -> Any:
    if api == "openai-chat":  # a tool message takes text: the images follow in a user message
        tool_at = max(i for i, m in enumerate(body["messages"]) if m["role"] == "tool")
        return body["messages"][tool_at + 1]["content"]
    if api == "openai-responses":
        return [i["output"] for i in body["input"] if i.get("type") == "function_call_output"]
    results = [b for b in body["messages"][-1]["content"] if b["type"] == "tool_result"]
    return [r["content"] for r in results]


async def test_a_tool_returns_an_image_on_each_api() -> None:
    """A tool's image goes back where the API takes it: in Responses' ``function_call_output``
    and Anthropic's ``tool_result``; after the tool messages, in a user message, on Chat."""
    png = f"data:image/png;base64,{PNG_B64}"
    seen = {}
    for api in APIS:
        result, bodies = await _run(api, "look", tools=[snapshot, weather])
        assert result.error is None, result.error
        picture = next(a for a in result.steps[0].actions if a.name == "snapshot")
        assert picture.output == "the picture for first"
        assert picture.images == (ImagePart(data=PNG, media_type="image/png"),)
        seen[api] = _tool_images(api, bodies[1])
    assert seen["openai-chat"] == [
        {"type": "text", "text": "Image returned by snapshot (call_1_0):"},
        {"type": "image_url", "image_url": {"url": png}},
    ]
    assert seen["openai-responses"] == [
        [
            {"type": "input_text", "text": "the picture for first"},
            {"type": "input_image", "image_url": png, "detail": "auto"},
        ],
        "sunny in second",
    ]
    assert seen["anthropic"] == [
        [
            {"type": "text", "text": "the picture for first"},
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64},
            },
        ],
        "sunny in second",
    ]


@pytest.mark.parametrize(
    ("api", "part", "message"),
    [
        ("openai-chat", FilePart(url="https://example.com/r.pdf", media_type="application/pdf"),
         "Chat Completions takes a file only as bytes"),
        ("openai-responses", FilePart(data=b"x", media_type="text/csv"),
         "OpenAI Responses does not take files of type 'text/csv'"),
        ("anthropic", ImagePart(data=b"\0" * (5 * 1024 * 1024 + 1), media_type="image/png"),
         "Anthropic Messages takes images of up to 5 MB; this one is 5.0 MB"),
    ],
)  # fmt: skip
async def test_what_an_api_cannot_take_fails_before_any_request(
    api: str, part: ImagePart | FilePart, message: str
) -> None:
    """A file type or a size the API refuses is a ``UserError`` that says so; nothing is sent."""
    async with ProviderServer(EmulatedProvider()) as server:
        async with make_model(api, server.url) as model:
            with pytest.raises(UserError, match=message):
                await Agent(model).run(["read this", part], raise_on_error=True)
        assert server.requests == []


def test_bad_parts_and_inputs_are_user_errors() -> None:
    """An image needs exactly one source and a type providers take; an input of another type
    is refused when the run is asked for."""
    with pytest.raises(ValueError, match="exactly one"):
        ImagePart()
    with pytest.raises(ValueError, match="media_type must be one of"):
        ImagePart(data=PNG, media_type="image/bmp")
    with pytest.raises(ValueError, match="http"):
        FilePart(url="file:///etc/passwd", media_type="application/pdf")
    agent = Agent("test:echo")
    with pytest.raises(UserError, match="not int"):
        agent.run_sync(["hi", 3])  # type: ignore[list-item]
    with pytest.raises(UserError, match="not bytes"):
        agent.run_sync(b"hi")  # type: ignore[arg-type]


@pytest.mark.parametrize("api", APIS)
async def test_tool_choice_parallel_calls_and_cache_key(api: str) -> None:
    """``tool_choice`` naming a tool, ``parallel_tool_calls=False`` and ``prompt_cache_key``
    are first-class settings, each in the API's own field."""
    settings = ModelSettings(
        tool_choice="weather", parallel_tool_calls=False, prompt_cache_key="tenant-7"
    )
    _, bodies = await _run(api, "go", tools=[weather, snapshot], settings=settings)
    body = bodies[0]
    if api == "openai-chat":
        assert body["tool_choice"] == {"type": "function", "function": {"name": "weather"}}
    elif api == "openai-responses":
        assert body["tool_choice"] == {"type": "function", "name": "weather"}
    else:
        assert body["tool_choice"] == {
            "type": "tool",
            "name": "weather",
            "disable_parallel_tool_use": True,
        }
        assert "prompt_cache_key" not in body
        return
    assert body["parallel_tool_calls"] is False
    assert body["prompt_cache_key"] == "tenant-7"


async def test_a_forced_tool_choice_holds_until_a_tool_was_called() -> None:
    """``required`` forces the first step's call; the next request leaves the choice to the
    model, which answers (a choice forced on every step would never let the run end)."""
    settings = ModelSettings(tool_choice="required")
    result, bodies = await _run("openai-chat", "go", tools=[weather], settings=settings)
    assert result.error is None and len(bodies) == 2
    assert bodies[0]["tool_choice"] == "required" and "tool_choice" not in bodies[1]


async def test_tool_choice_modes() -> None:
    """``required`` is Anthropic's ``any``; ``none`` is ``none`` everywhere; no tools, no
    ``tool_choice`` (the APIs refuse one without tools)."""
    required = ModelSettings(tool_choice="required")
    _, [anthropic, *_] = await _run("anthropic", "go", tools=[weather], settings=required)
    assert anthropic["tool_choice"] == {"type": "any"}
    _, [chat, *_] = await _run("openai-chat", "go", tools=[weather], settings=required)
    assert chat["tool_choice"] == "required"
    _, [bare] = await _run("openai-chat", "go", settings=ModelSettings(tool_choice="none"))
    assert "tool_choice" not in bare


def _marked(value: Any) -> list[str]:
    """Where the ``cache_control`` breakpoints are, as JSON paths."""
    found: list[str] = []

    def walk(v: Any, path: str) -> None:
        if isinstance(v, dict):
            if "cache_control" in v:
                found.append(path)
            for k, item in v.items():
                walk(item, f"{path}.{k}")
        elif isinstance(v, list):
            for i, item in enumerate(v):
                walk(item, f"{path}[{i}]")

    walk(value, "")
    return found


def _without_breakpoints(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_breakpoints(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_without_breakpoints(v) for v in value]
    return value


def _history(api: str, body: dict[str, Any]) -> list[Any]:
    return list(body["input"] if api == "openai-responses" else body["messages"])


@pytest.mark.parametrize("api", APIS)
async def test_the_prefix_stays_byte_identical_from_step_to_step(api: str) -> None:
    """Over a three-round run, each request's system, tools and history are, byte for byte,
    the start of the next one's (Anthropic's moving history breakpoint aside: it marks the
    end, and the API matches the prefix without it), so the provider's cache can hit."""
    async with ProviderServer(EmulatedProvider(tool_rounds=3)) as server:
        async with make_model(api, server.url) as model:
            agent = Agent(model, instructions="Be brief.", tools=[weather, snapshot])
            result = await agent.run("go")
        bodies = [r.json for r in server.requests]
        raw = [r.body for r in server.requests]
    assert result.error is None and len(bodies) == 4
    if api != "anthropic":  # the very bytes: everything up to the end of the history
        for before, after in itertools.pairwise(raw):
            cut = before.index(b'],"tools":')
            assert after[:cut] == before[:cut]
    for before, after in itertools.pairwise(bodies):
        for key in ("tools", "system", "instructions"):
            assert json.dumps(before.get(key)) == json.dumps(after.get(key))
        earlier = _history(api, _without_breakpoints(before))
        later = _history(api, _without_breakpoints(after))
        assert len(later) > len(earlier)
        assert json.dumps(later[: len(earlier)]) == json.dumps(earlier)
    if api == "anthropic":  # tools, system and the history's last block: 3 of the 4 allowed
        last = len(bodies[-1]["messages"]) - 1
        count = len(bodies[-1]["messages"][last]["content"]) - 1
        assert _marked(bodies[-1]) == [
            ".system[0]",
            f".messages[{last}].content[{count}]",
            ".tools[1]",
        ]


async def test_anthropic_breakpoints_can_be_turned_off() -> None:
    """``prompt_caching=False``: no breakpoint, and ``system`` is plain text."""
    settings = ModelSettings(prompt_caching=False)
    _, bodies = await _run(
        "anthropic", "go", tools=[weather], settings=settings, instructions="Be brief."
    )
    assert _marked(bodies) == []
    assert bodies[0]["system"] == "Be brief."


async def test_react_mode_sends_a_tools_images_after_its_results() -> None:
    """ReAct results are a user turn of text: a tool's images follow the text in that turn."""
    from agentloop.testing import EmulatedCall, EmulatedTurn

    script: list[EmulatedTurn | str] = [
        EmulatedTurn(calls=(EmulatedCall(name="snapshot", arguments={"query": "x"}),)),
        "ok",
    ]
    async with ProviderServer(EmulatedProvider(script=script)) as server:
        async with make_model("openai-chat", server.url) as model:
            result = await Agent(model, tools=[snapshot], tool_mode="react").run("look")
        second = server.requests[1].json
    assert result.error is None and result.output == "ok"
    content = second["messages"][-1]["content"]
    assert [part["type"] for part in content] == ["text", "image_url"]
    assert content[0]["text"].startswith("<|Response|>:")
    assert content[1]["image_url"]["url"] == f"data:image/png;base64,{PNG_B64}"


async def test_a_waiting_run_resumes_with_its_images_and_files() -> None:
    """A run whose input holds an image and a PDF waits for an approval; resumed from its
    ``resume_state`` (through JSON), its next request still carries them."""
    from agentloop import Approve

    @tool(requires_approval=True)
    async def publish(query: str) -> str:
        """Publish a finding."""
        return f"published {query}"

    async with ProviderServer(EmulatedProvider()) as server:
        async with make_model("anthropic", server.url) as model:
            agent = Agent(model, tools=[publish, weather])
            waiting = await agent.run(INPUT)
            assert [p.name for p in waiting.pending] == ["publish"]
            state = json.loads(json.dumps(waiting.resume_state))
            decisions = {waiting.pending[0].id: Approve()}
            result = await agent.resume(resume_state=state, decisions=decisions)
        resumed = server.requests[-1].json
    assert result.error is None, result.error
    expected = [dict(p) for p in EXPECTED_INPUT["anthropic"]]
    expected[-1].pop("cache_control")  # the history's end has moved on
    assert _user_content("anthropic", resumed) == expected
