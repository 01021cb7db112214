"""The direct aiohttp path of the OpenAI drivers computes its URL and headers without the SDK.

``_sdk_free`` reproduces what ``openai.AsyncOpenAI`` computes from the same inputs; these tests
compare the two senders field by field on the installed (checked) SDK, and check in a fresh
process that a first request imports no SDK at all.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import pytest

from agentloop.models._driver import _unused_http_client
from agentloop.models._transport import DirectSender
from agentloop.models.anthropic import AnthropicModel
from agentloop.models.openai import OpenAIChatModel, OpenAIResponsesModel
from agentloop.testing import ProviderServer, ScriptedResponse

from ._provider_helpers import direct_paths_only, load

ENVS: list[dict[str, str]] = [
    {},
    {"OPENAI_ORG_ID": "org-1", "OPENAI_PROJECT_ID": "proj-1"},
    {"OPENAI_BASE_URL": "http://127.0.0.1:9/custom", "OPENAI_API_KEY": "sk-from-env"},
]
OPTIONS: list[dict[str, Any]] = [
    {"api_key": "sk-explicit", "base_url": "http://127.0.0.1:9/v1"},
    {"api_key": "sk-explicit", "timeout": 7.5},
    {"base_url": "http://127.0.0.1:9/v1/", "stream": False},
    {"api_key": "sk-explicit"},
]


def _first_run_in_a_fresh_process(module: str, model: str) -> list[str]:
    """``Agent(model).run("hi")`` in a fresh interpreter (``model``: the driver's constructor
    call, from ``module``): the transport it took, then which of openai, anthropic and jinja2
    it imported."""
    name = model.partition("(")[0]
    code = textwrap.dedent(
        f"""
        import sys, anyio
        from agentloop import Agent
        from {module} import {name}

        async def main():
            async with {model} as m:
                result = await Agent(m).run("hi")
                assert result.error is None, result.error
                print(m.transport)

        anyio.run(main, backend="asyncio")
        print(",".join(n for n in ("openai", "anthropic", "jinja2") if n in sys.modules))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def _fields(sender: Any) -> dict[str, Any]:
    names = ("base_url", "_url", "_headers", "_secrets", "_timeout", "_max_connections", "kind")
    return {name: getattr(sender, name) for name in names}


@direct_paths_only
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the direct path is asyncio's
@pytest.mark.parametrize("cls", [OpenAIChatModel, OpenAIResponsesModel])
@pytest.mark.parametrize("env", ENVS)
async def test_the_sdk_free_sender_is_the_one_the_sdk_client_gives(
    cls: type[Any], env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    for options in OPTIONS:
        if "api_key" not in options and "base_url" not in options and not env:
            continue
        model = cls("m", transport="aiohttp", max_connections=3, **options)
        sdk_free = model._sdk_free_request()
        assert sdk_free is not None, options
        client = model._make_client(_unused_http_client())
        via_sdk = DirectSender.from_client(
            client, model._endpoint, provider=model.provider, model="m", max_connections=3
        )
        assert _fields(model._sender_for_loop()) == _fields(via_sdk), (env, options)
        assert model._client is None  # no SDK client was made for the sender
        await client.close()


@direct_paths_only
def test_custom_headers_from_the_environment_take_the_sdk_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``OPENAI_CUSTOM_HEADERS`` is the SDK's to parse: the driver asks the SDK client."""
    monkeypatch.setenv("OPENAI_CUSTOM_HEADERS", "X-Team: blue")
    model = OpenAIChatModel("m", api_key="sk-explicit", transport="aiohttp")
    assert model._sdk_free_request() is None


@direct_paths_only
def test_a_first_run_on_the_direct_path_imports_no_sdk(server: ProviderServer) -> None:
    """In a fresh process, ``Agent.run`` on the aiohttp transport reaches the provider without
    importing ``openai`` (0.3-0.5 s and about 30 MiB before the first request byte), nor jinja2
    for an agent without instructions."""
    server.enqueue(ScriptedResponse.sse(load("openai-chat/stream_text_short_usage").body))
    model = f"OpenAIChatModel('m', base_url={server.url + '/v1'!r}, api_key='sk-k')"
    assert _first_run_in_a_fresh_process("agentloop.models.openai", model) == ["aiohttp", ""]
    (request,) = server.requests
    assert request.headers["authorization"] == "Bearer sk-k"
    assert request.headers["user-agent"].startswith("AsyncOpenAI/Python ")


def test_the_sdk_version_and_platform_are_read_as_the_sdk_reads_them() -> None:
    """The version comes from the SDK's ``_version.py`` (no metadata scan), the platform from
    ``uname`` (not ``platform.platform()``, 50 ms): both as the SDK's own functions say."""
    from importlib.metadata import version

    from openai._base_client import get_platform

    from agentloop.models import _sdk_free

    assert _sdk_free.openai_version() == version("openai")
    assert _sdk_free._platform_name() == str(get_platform())


ANTHROPIC_ENVS: list[dict[str, str]] = [
    {},
    {"ANTHROPIC_API_KEY": "sk-ant-env"},
    {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9/custom", "ANTHROPIC_API_KEY": "sk-ant-env"},
    {"ANTHROPIC_AUTH_TOKEN": "token-env"},  # ignored beside an explicit key, as by the SDK
]
ANTHROPIC_OPTIONS: list[dict[str, Any]] = [
    {"api_key": "sk-ant-explicit", "base_url": "http://127.0.0.1:9"},
    {"api_key": "sk-ant-explicit", "timeout": 7.5},
    {"base_url": "http://127.0.0.1:9/", "stream": False},
    {"api_key": "sk-ant-explicit"},
]
_ANTHROPIC_ENV_NAMES = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_CUSTOM_HEADERS",
)


@direct_paths_only
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the direct path is asyncio's
@pytest.mark.parametrize("env", ANTHROPIC_ENVS)
async def test_the_sdk_free_anthropic_sender_is_the_one_the_sdk_client_gives(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Key, base URL, ``anthropic-version`` and the platform headers, field by field."""
    for name in _ANTHROPIC_ENV_NAMES:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    compared = 0
    for options in ANTHROPIC_OPTIONS:
        model = AnthropicModel("m", transport="aiohttp", max_connections=3, **options)
        sdk_free = model._sdk_free_request()
        if "api_key" not in options and "ANTHROPIC_API_KEY" not in env:
            assert sdk_free is None, (env, options)  # no static key: the SDK's lookup
            continue
        assert sdk_free is not None, (env, options)
        client = model._make_client(_unused_http_client())
        via_sdk = DirectSender.from_client(
            client, model._endpoint, provider=model.provider, model="m", max_connections=3
        )
        assert _fields(model._sender_for_loop()) == _fields(via_sdk), (env, options)
        assert model._client is None  # no SDK client was made for the sender
        await client.close()
        compared += 1
    assert compared >= 3 if env.get("ANTHROPIC_API_KEY") else compared == 3


@direct_paths_only
@pytest.mark.parametrize(
    "env", [{"ANTHROPIC_CUSTOM_HEADERS": "X-Team: blue"}, {"ANTHROPIC_AUTH_TOKEN": "token-env"}]
)
def test_what_only_the_anthropic_sdk_resolves_takes_its_client(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Custom headers from the environment, and an auth token without a key, are the SDK's."""
    for name in _ANTHROPIC_ENV_NAMES:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    key = "sk-ant-explicit" if "ANTHROPIC_CUSTOM_HEADERS" in env else None
    model = AnthropicModel("m", transport="aiohttp", api_key=key)
    assert model._sdk_free_request() is None


@direct_paths_only
def test_a_first_anthropic_run_on_the_direct_path_imports_no_sdk(server: ProviderServer) -> None:
    """In a fresh process, ``Agent.run`` on Anthropic's aiohttp transport reaches the provider
    without importing ``anthropic`` (about 4,000 modules)."""
    server.enqueue(ScriptedResponse.sse(load("anthropic/stream_text_ping").body))
    model = f"AnthropicModel('m', base_url={server.url!r}, api_key='sk-ant-k')"
    assert _first_run_in_a_fresh_process("agentloop.models.anthropic", model) == ["aiohttp", ""]
    (request,) = server.requests
    assert request.headers["authorization"] == "Bearer sk-ant-k"
    assert request.headers["user-agent"].startswith("AsyncAnthropic/Python ")
    assert request.headers["anthropic-version"]


@direct_paths_only  # read only where the direct path runs: older SDKs keep it elsewhere
def test_the_anthropic_api_version_is_read_as_the_sdk_has_it() -> None:
    from anthropic._constants import ANTHROPIC_API_VERSION

    from agentloop.models import _sdk_free

    assert _sdk_free._sdk_constant("anthropic", "_constants.py", "ANTHROPIC_API_VERSION") == (
        ANTHROPIC_API_VERSION
    )


_BUILT_AT_START_UP = """
import sys, anyio
from agentloop import Agent, tool
from agentloop.models.openai import OpenAIChatModel

@tool
async def get_current_weather(location: str) -> str:
    '''The weather at a place.'''
    return f"sunny in {location}"

model = OpenAIChatModel("m", base_url=URL, api_key="sk-k")
agent = Agent(model, instructions="You are terse.", tools=[get_current_weather])

async def main():
    before = set(sys.modules)  # the service is up: its loop runs, its agent is built
    async with model:
        result = await agent.run("What's the weather in Seattle and San Francisco?")
        print(model.transport)
    assert result.error is None and len(result.steps) == 2, result
    print(" ".join(sorted(set(sys.modules) - before)))

anyio.run(main, backend="asyncio")
"""


@direct_paths_only
def test_a_first_run_imports_nothing_when_the_agent_was_built_at_start_up(
    server: ProviderServer,
) -> None:
    """A service builds its agent at start-up: the first request's run imports no module on
    the event loop (before, aiohttp and its dependencies: about 100 modules, 100-150 ms of the
    user's first request). Instructions, a tool and its two-turn session on the direct path."""
    server.enqueue(
        ScriptedResponse.sse(load("openai-chat/stream_parallel_2_tool_calls_usage").body)
    )
    server.enqueue(ScriptedResponse.sse(load("openai-chat/stream_text_after_2_tool_results").body))
    code = f"URL = {server.url + '/v1'!r}\n{_BUILT_AT_START_UP}"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120
    )
    assert out.returncode == 0, out.stderr
    transport, imported = [*out.stdout.splitlines(), ""][:2]
    assert transport == "aiohttp"
    assert imported.split() == [], imported
