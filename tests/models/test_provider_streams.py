"""The stream seam's lifecycle and the drivers' configuration: leaving a stream early or being
cancelled closes the HTTP response at once (the server sees the connection close, nothing leaks),
finished streams keep their connection alive, remote calls are blocked in tests, missing keys
are clear errors, and ``import agentloop`` imports no provider SDK."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import anyio
import pytest

from agentloop import UserError
from agentloop import _errors as errors
from agentloop.models import (
    Message,
    ModelRequest,
    ModelSettings,
    TextPiece,
    _registry,
    register_provider,
    resolve_model,
)
from agentloop.models._driver import merge_settings
from agentloop.models.anthropic import AnthropicModel
from agentloop.models.openai import OpenAIChatModel, OpenAIResponsesModel
from agentloop.testing import Chunk, ProviderServer, ScriptedResponse

from ._provider_helpers import check_transport, direct_paths_only, load, make_model

REQUEST = ModelRequest(messages=(Message.user("hi"),))

FIRST = {
    "openai-chat": "openai-chat/stream_text_short_usage",
    "openai-responses": "openai-responses/stream_text_basic",
    "anthropic": "anthropic/stream_text_ping",
}


def _stalling(key: str) -> ScriptedResponse:
    """The recorded stream up to its first text delta, then a stall (the rest 60 s later)."""
    body = load(key).body
    marker = {"openai-chat": b'"content":"\\"This', "openai-responses": b"output_text.delta"}.get(
        key.split("/")[0], b"text_delta"
    )
    cut = body.index(b"\n\n", body.index(marker)) + 2
    return ScriptedResponse.sse([Chunk(body[:cut]), Chunk(body[cut:], delay=60.0)])


async def _wait_closed(server: ProviderServer, count: int) -> bool:
    return await anyio.to_thread.run_sync(
        server.wait_until, lambda s: s.client_closed >= count, 10.0
    )


@pytest.mark.parametrize("api", sorted(FIRST))
async def test_leaving_the_stream_early_closes_the_response(
    api: str, transport: str, server: ProviderServer
) -> None:
    """Breaking out after the first delta closes the connection mid-reply (no ResourceWarning:
    warnings are errors in this suite)."""
    server.enqueue(_stalling(FIRST[api]))
    async with make_model(api, server.url, transport=transport) as model:
        with anyio.fail_after(10):
            async with model.stream(REQUEST) as stream:
                async for delta in stream:
                    if isinstance(delta, TextPiece):
                        break
    assert isinstance(delta, TextPiece)
    assert await _wait_closed(server, 1)


@pytest.mark.parametrize("api", sorted(FIRST))
async def test_cancellation_closes_the_response(
    api: str, transport: str, server: ProviderServer
) -> None:
    """A deadline that expires while the stream waits closes the connection too."""
    server.enqueue(_stalling(FIRST[api]))
    seen: list[object] = []
    async with make_model(api, server.url, transport=transport) as model:
        # The deadline starts once text has arrived, so that a slow first request (the SDK's
        # import, a loaded machine) cannot make the test fail for the wrong reason.
        with anyio.fail_after(30), anyio.CancelScope() as scope:
            async with model.stream(REQUEST) as stream:
                async for delta in stream:
                    seen.append(delta)
                    if isinstance(delta, TextPiece) and scope.deadline == float("inf"):
                        scope.deadline = anyio.current_time() + 0.2
    assert scope.cancelled_caught
    assert any(isinstance(d, TextPiece) for d in seen)
    assert await _wait_closed(server, 1)


@pytest.mark.parametrize("api", sorted(FIRST))
async def test_finished_streams_reuse_the_connection(
    api: str, transport: str, server: ProviderServer
) -> None:
    """Reading a reply to its end returns the connection to the pool: three calls, one socket."""
    before = server.stats.connections
    rec = load(FIRST[api])
    async with make_model(api, server.url, transport=transport) as model:
        for _ in range(3):
            server.enqueue(ScriptedResponse.sse(rec.body))
            async with model.stream(REQUEST) as stream:
                [d async for d in stream]
    assert server.stats.connections - before == 1
    assert server.stats.requests == 3


async def test_remote_calls_are_blocked_in_tests(monkeypatch: pytest.MonkeyPatch) -> None:
    """With AGENTLOOP_BLOCK_REMOTE_MODELS=1 a non-loopback base URL fails before any request."""
    assert os.environ.get("AGENTLOOP_BLOCK_REMOTE_MODELS") == "1"
    for model in (
        OpenAIChatModel("gpt-4o", api_key="sk-test"),
        OpenAIResponsesModel("gpt-4o", api_key="sk-test", base_url="https://example.com/v1"),
        AnthropicModel("claude-sonnet-4-5", api_key="sk-test"),
    ):
        with pytest.raises(UserError, match="remote model calls are blocked"):
            async with model.stream(REQUEST):
                pass
        await model.aclose()


async def test_missing_keys_name_the_environment_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    """No key anywhere: a UserError naming OPENAI_API_KEY / ANTHROPIC_API_KEY."""
    for name in (
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_PROFILE",
        "ANTHROPIC_CONFIG_DIR",
        "ANTHROPIC_FEDERATION_RULE_ID",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no credentials profile on disk either
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    with pytest.raises(UserError, match="OPENAI_API_KEY"):
        async with OpenAIChatModel("gpt-4o").stream(REQUEST):
            pass
    with pytest.raises(UserError, match="ANTHROPIC_API_KEY"):
        async with AnthropicModel("claude-sonnet-4-5").stream(REQUEST):
            pass


async def test_compatible_server_needs_no_key(
    monkeypatch: pytest.MonkeyPatch, server: ProviderServer
) -> None:
    """With an explicit base_url (vLLM, Ollama, llama.cpp) no key is needed."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server.enqueue(ScriptedResponse.sse(load(FIRST["openai-chat"]).body))
    async with OpenAIChatModel("local", base_url=server.url + "/v1") as model:
        async with model.stream(REQUEST) as stream:
            assert [d async for d in stream]
    assert server.requests[-1].json["model"] == "local"
    assert server.requests[-1].headers["authorization"] == "Bearer agentloop-no-key"


async def test_openai_base_url_alone_needs_no_key(
    monkeypatch: pytest.MonkeyPatch, server: ProviderServer
) -> None:
    """``OPENAI_BASE_URL`` names a server of one's own as ``base_url=`` does (the quick start's
    way to Ollama or vLLM): no key needed, on every transport."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
    for transport in ("auto", "httpx"):
        server.enqueue(ScriptedResponse.sse(load(FIRST["openai-chat"]).body))
        async with OpenAIChatModel("local", transport=transport) as model:
            async with model.stream(REQUEST) as stream:
                assert [d async for d in stream]
        assert server.requests[-1].json["model"] == "local"
        assert server.requests[-1].headers["authorization"] == "Bearer agentloop-no-key"


async def test_aiohttp_transport_refuses_trio(anyio_backend: object) -> None:
    """transport='aiohttp' is asyncio-only: on trio it is a clear UserError."""
    model = OpenAIChatModel(
        "gpt-4o", api_key="k", base_url="http://127.0.0.1:9/v1", transport="aiohttp"
    )
    if anyio_backend == "trio":
        with pytest.raises(UserError, match="asyncio"):
            async with model.stream(REQUEST):
                pass
    else:
        assert model._choose_transport() == "aiohttp"
    await model.aclose()


async def test_auto_transport_picks_aiohttp_on_asyncio_only(
    anyio_backend: object, server: ProviderServer
) -> None:
    """``transport="auto"`` uses the SDK's aiohttp client under asyncio, httpx2 under trio."""
    server.enqueue(ScriptedResponse.sse(load(FIRST["anthropic"]).body))
    async with make_model("anthropic", server.url) as model:
        async with model.stream(REQUEST) as stream:
            [d async for d in stream]
        check_transport(model, "httpx" if anyio_backend == "trio" else "aiohttp")


async def test_a_client_passed_in_is_used_and_not_closed(server: ProviderServer) -> None:
    """A caller's SDK client is used as it is (retries stay off per request) and stays open."""
    import anthropic

    client = anthropic.AsyncAnthropic(api_key="k", base_url=server.url, max_retries=5)
    server.enqueue(ScriptedResponse.json({"error": {"type": "api_error"}}, status=500))
    model = AnthropicModel("claude", client=client)
    with pytest.raises(Exception, match=r"api_error|HTTP 500"):
        async with model.stream(REQUEST):
            pass
    await model.aclose()
    assert len(server.requests) == 1
    assert not client.is_closed()
    await client.close()


def test_resolve_model_strings() -> None:
    """Provider strings resolve to the drivers."""
    assert type(resolve_model("openai:gpt-4o")) is OpenAIChatModel
    assert type(resolve_model("openai-responses:gpt-5")) is OpenAIResponsesModel
    assert type(resolve_model("anthropic:claude-sonnet-4-5")) is AnthropicModel
    assert resolve_model("openai:gpt-4o").name == "gpt-4o"


def test_providers_are_registered_explicitly() -> None:
    """``test:`` models exist once ``agentloop.testing`` is imported (it registers them); an
    unknown provider's error says how to add one."""
    code = textwrap.dedent(
        """
        from agentloop import UserError
        from agentloop.models import resolve_model
        try:
            resolve_model("test:echo")
        except UserError as exc:
            print(exc)
        import agentloop.testing
        print(type(resolve_model("test:echo")).__name__, resolve_model("test:echo").name)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    refused, resolved = out.stdout.strip().splitlines()
    assert "unknown model provider 'test'" in refused
    assert "register_provider" in refused and "agentloop.testing" in refused
    assert resolved == "EchoModel echo"


def test_register_provider() -> None:
    """A registered prefix resolves to its factory; a prefix with ':' is refused."""
    register_provider("mine", lambda name: OpenAIChatModel(name))
    try:
        assert resolve_model("mine:m").name == "m"
    finally:
        del _registry._PROVIDERS["mine"]
    with pytest.raises(errors.UserError, match="unknown model provider 'mine'"):
        resolve_model("mine:m")
    with pytest.raises(errors.UserError, match="without ':'"):
        register_provider("a:b", OpenAIChatModel)


def test_profiles() -> None:
    """Profiles tell the runtime about stop sequences and native structured output."""
    chat, responses, claude = (
        OpenAIChatModel("m").profile,
        OpenAIResponsesModel("m").profile,
        AnthropicModel("m").profile,
    )
    assert (chat.stop_sequences, chat.native_output) == (True, True)
    assert (responses.stop_sequences, responses.native_output) == (False, True)
    assert (claude.stop_sequences, claude.native_output) == (True, False)


def test_driver_settings_are_defaults_under_request_settings() -> None:
    """A driver's settings fill what a request leaves unset; ``extra`` dicts merge."""
    base = ModelSettings(max_tokens=100, temperature=0.1, extra={"a": 1, "b": 1})
    merged = merge_settings(base, ModelSettings(temperature=0.9, extra={"b": 2}))
    assert (merged.max_tokens, merged.temperature, dict(merged.extra)) == (
        100,
        0.9,
        {"a": 1, "b": 2},
    )


def test_importing_agentloop_imports_no_provider_sdk() -> None:
    """``import agentloop`` (and the drivers' modules, and making a driver) imports neither SDK
    nor their httpx2 stack; they load on first use. Making a driver imports aiohttp, which its
    first request on the direct path needs (issue 36: a service's first request imports
    nothing), and only then."""
    code = textwrap.dedent(
        """
        import sys
        import agentloop, agentloop.models
        from agentloop.models import resolve_model
        import agentloop.models.openai, agentloop.models.anthropic
        assert "aiohttp" not in sys.modules
        m = resolve_model("openai:gpt-4o"); a = resolve_model("anthropic:claude")
        assert "aiohttp" in sys.modules or __import__("importlib.util").util.find_spec("aiohttp") is None
        m.build_body(__import__("agentloop.models", fromlist=["x"]).ModelRequest(messages=()))
        bad = [n for n in ("openai", "anthropic", "httpx2", "httpcore2") if n in sys.modules]
        print(",".join(bad))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == ""


@direct_paths_only
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the direct path is asyncio's
@pytest.mark.parametrize("api", sorted(FIRST))
async def test_direct_path_sends_the_sdk_headers(api: str, server: ProviderServer) -> None:
    """The direct aiohttp path sends the URL, auth and identifying headers the SDK itself
    sends (it takes them from the SDK client)."""
    rec = load(FIRST[api])
    for transport in ("httpx", "aiohttp"):
        server.enqueue(ScriptedResponse.sse(rec.body))
        async with make_model(api, server.url, transport=transport, api_key="sk-same") as model:
            async with model.stream(REQUEST) as stream:
                [d async for d in stream]
            assert model.transport == transport
    via_sdk, direct = server.requests
    assert direct.path == via_sdk.path
    assert direct.body == via_sdk.body
    same = {"authorization", "content-type", "accept", "user-agent", "anthropic-version"}
    same |= {k for k in via_sdk.headers if k.startswith("x-stainless-") and "timeout" not in k}
    assert {k: direct.headers.get(k) for k in same} == {k: via_sdk.headers.get(k) for k in same}
    assert direct.headers["authorization"] == "Bearer sk-same"


def test_interleaved_parallel_calls_are_refused() -> None:
    """A server that goes back to a call after the next one started cannot be sealed eagerly:
    that is a clear stream error, not silently lost arguments."""
    from agentloop.models._openai_chat import ChatDecoder
    from agentloop.models._sse import SSEEvent

    def chunk(index: int, **fn: str) -> SSEEvent:
        call: dict[str, object] = {"index": index, "function": fn}
        if "name" in fn:
            call["id"] = f"call_{index}"
        data = {"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]}
        return SSEEvent(json.dumps(data))

    decoder = ChatDecoder()
    out: list[object] = []
    decoder.event(chunk(0, name="a", arguments='{"x":'), out)  # type: ignore[arg-type]
    decoder.event(chunk(1, name="b", arguments="{}"), out)  # type: ignore[arg-type]
    with pytest.raises(errors.ModelStreamError, match="after the next call"):
        decoder.event(chunk(0, arguments="1}"), out)  # type: ignore[arg-type]


def test_a_decoder_and_builder_make_their_own_tables_with_their_first_call() -> None:
    """A reply of text alone holds no tables of calls (each decoder and builder starts on one
    shared empty one): the first call or refusal makes its own, and the shared stay empty."""
    from agentloop.models import ResponseBuilder, _assemble, _openai_chat
    from agentloop.models._openai_chat import ChatDecoder
    from agentloop.models._sse import SSEEvent

    delta = {"tool_calls": [{"index": 0, "id": "c0", "function": {"name": "a", "arguments": "{}"}}]}
    refusal = {"refusal": "no"}
    for body in (delta, refusal):
        decoder, builder = ChatDecoder(), ResponseBuilder()
        out: list[object] = []
        decoder.event(SSEEvent(json.dumps({"choices": [{"index": 0, "delta": body}]})), out)  # type: ignore[arg-type]
        finish = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
        decoder.event(SSEEvent(json.dumps(finish)), out)  # type: ignore[arg-type]
        for item in out:
            builder.add(item)  # type: ignore[arg-type]
        assert builder.build().tool_calls or builder.build().refusal == "no"
    assert _openai_chat._NO_CALLS == {} and _openai_chat._NO_REFUSAL == []  # pyright: ignore[reportPrivateUsage]
    assert _assemble._NO_CALLS == {}  # pyright: ignore[reportPrivateUsage]


def test_direct_path_needs_static_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Credentials that change per request (a token provider, workload identity) rule the
    direct path out; a static key allows it (on a checked version, as if installed here)."""
    from types import SimpleNamespace

    from agentloop.models import _transport
    from agentloop.models._transport import direct_eligible

    monkeypatch.setattr(_transport, "internals_checked", lambda *dists: True)

    class Client(SimpleNamespace):
        """Stands for an SDK client (its module names the SDK whose version is checked)."""

    Client.__module__ = "openai._client"
    static = Client(custom_auth=None, auth_headers={"Authorization": "Bearer k"})
    assert direct_eligible(static)
    cases: list[dict[str, object]] = [
        {"custom_auth": object()},
        {"_api_key_provider": object()},
        {"workload_identity": object()},
        {"credentials": object()},
        {"auth_headers": {}},
    ]
    for dynamic in cases:
        client = Client(**{**vars(static), **dynamic})
        assert not direct_eligible(client), dynamic


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_dynamic_credentials_fall_back_to_the_sdk_client(
    monkeypatch: pytest.MonkeyPatch, server: ProviderServer
) -> None:
    """When the direct path is ruled out, ``transport="aiohttp"`` sends through the SDK's own
    aiohttp client instead."""
    import agentloop.models._driver as driver
    from agentloop.models.anthropic import AnthropicModel

    # Ruled out both ways: no URL and headers of our own (``_sdk_free``), and the SDK
    # client's credentials not static.
    monkeypatch.setattr(AnthropicModel, "_sdk_free_request", lambda self: None)
    monkeypatch.setattr(driver, "direct_eligible", lambda client: False)
    server.enqueue(ScriptedResponse.sse(load(FIRST["anthropic"]).body))
    async with make_model("anthropic", server.url, transport="aiohttp") as model:
        async with model.stream(REQUEST) as stream:
            assert [d async for d in stream]
        assert model.transport == "aiohttp-sdk"
