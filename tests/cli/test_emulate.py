"""``agentloop emulate``: the emulated provider as a process, used by agents over a real socket
through the OpenAI and Anthropic SDKs, stopped with Ctrl-C."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentloop import Agent, tool
from agentloop.models.anthropic import AnthropicModel
from agentloop.models.openai import OpenAIChatModel, OpenAIResponsesModel

from ._proc import COMMAND, ROOT, environment, run

URL = re.compile(r"listening on (http://127\.0\.0\.1:(\d+)) ")


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Emulator:
    """``agentloop emulate ARGS`` in a child process, its URL read from what it prints."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [*COMMAND, "emulate", "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            cwd=ROOT,
            env=environment(),
            # Ctrl-C reaches the command as it does from a terminal, even when the suite was
            # started with SIGINT ignored (``cmd &`` in a script): Python then keeps ignoring it.
            preexec_fn=_default_sigint,
        )
        assert self.proc.stdout is not None
        first = self.proc.stdout.readline()
        found = URL.search(first)
        if found is None:
            self.proc.kill()
            _, err = self.proc.communicate(timeout=10)
            raise AssertionError(f"no URL in {first!r}; stderr: {err!r}")
        self.url, self.port = found.group(1), int(found.group(2))

    def interrupt(self) -> tuple[int, str, str]:
        """Ctrl-C: the exit status, and the rest of stdout (after the first line) and stderr."""
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self.proc.send_signal(signal.SIGINT)
        deadline = threading.Timer(20, self.proc.kill)  # a hung process fails, not hangs
        deadline.start()
        try:  # read through the text wrapper: it holds what came with the first line
            with self.proc.stdout, self.proc.stderr:
                out, err = self.proc.stdout.read(), self.proc.stderr.read()
            return self.proc.wait(), out, err
        finally:
            deadline.cancel()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate(timeout=10)


@pytest.fixture(scope="module")
def emulator() -> Iterator[Emulator]:
    process = Emulator()
    try:
        yield process
    finally:
        process.kill()


SEEN: list[tuple[str, str]] = []


@tool
async def forecast(city: str, unit: str = "celsius") -> str:
    """The forecast for a city."""
    SEEN.append(("forecast", city))
    return f"sunny in {city}"


@tool
async def book(city: str, nights: int) -> str:
    """Book a hotel."""
    SEEN.append(("book", f"{city}/{nights}"))
    return f"booked {nights} nights in {city}"


def _model(
    api: str, url: str, transport: Any
) -> OpenAIChatModel | OpenAIResponsesModel | AnthropicModel:
    if api == "anthropic":
        return AnthropicModel("emulated", base_url=url, api_key="unused", transport=transport)
    cls = OpenAIChatModel if api == "openai-chat" else OpenAIResponsesModel
    return cls("emulated", base_url=f"{url}/v1", api_key="unused", transport=transport)


# The SDKs' own HTTP clients: httpx on both event loops, aiohttp on asyncio (its only one).
@pytest.mark.parametrize(
    ("anyio_backend", "transport"),
    [("asyncio", "httpx"), ("trio", "httpx"), ("asyncio", "aiohttp-sdk")],
    indirect=["anyio_backend"],
)
@pytest.mark.parametrize("api", ["openai-chat", "openai-responses", "anthropic"])
async def test_an_agent_runs_against_the_emulator_process(
    emulator: Emulator, api: str, transport: str
) -> None:
    """Through each SDK's own HTTP client: two parallel tool calls with arguments made up from
    the tools' schemas, then the answer."""
    SEEN.clear()
    async with _model(api, emulator.url, transport) as model:
        result = await Agent(model, tools=[forecast, book]).run("weekend in Oslo?")
    assert result.error is None
    assert sorted(SEEN) == [("book", "second/2"), ("forecast", "first")]
    assert result.text is not None and result.text.startswith("Both lookups are done")


def test_ctrl_c_stops_a_scripted_emulator_cleanly(tmp_path: Path) -> None:
    """``--script FILE``: the turns are played; each request is logged; Ctrl-C ends it with
    status 0 and no traceback."""
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            [{"text": "Checking.", "calls": [{"name": "book", "arguments": {"city": "Rome",
                                                                           "nights": 3}}]},
             "Booked: three nights in Rome."]
        )
    )  # fmt: skip
    process = Emulator("--script", str(script))
    try:

        async def go() -> Any:
            async with _model("openai-chat", process.url, "httpx") as model:
                return await Agent(model, tools=[book]).run("book Rome")

        result = anyio.run(go)
        code, out, err = process.interrupt()
    finally:
        process.kill()
    assert result.text == "Booked: three nights in Rome."
    assert [a.output for a in result.steps[0].actions] == ["booked 3 nights in Rome"]
    assert code == 0, err
    assert "Traceback" not in err and err == ""
    assert out.count("POST /v1/chat/completions (stream) → 200") == 2
    assert "replies: the turns of" in out
    assert out.rstrip().endswith("stopped")


def test_mistakes_are_one_line_and_status_2(emulator: Emulator, tmp_path: Path) -> None:
    """A port in use, a script that is not one: one line on stderr, exit status 2."""
    busy = run(["emulate", "--port", str(emulator.port)], timeout=20)
    assert busy.code == 2
    assert busy.err_lines == [f"agentloop: error: cannot listen on 127.0.0.1:{emulator.port}: "
                              "Address already in use"]  # fmt: skip
    bad = tmp_path / "bad.json"
    bad.write_text('[{"text": 1}]')
    done = run(["emulate", "--port", "0", "--script", str(bad)], timeout=20)
    assert done.code == 2
    assert done.err_lines == [
        f"agentloop: error: script {str(bad)!r}, turn 1: text must be a string"
    ]


def test_the_readme_showcase_answers_truthfully_without_tools(emulator: Emulator) -> None:
    """The README's two commands, as written (no ``--tools``): no tool ran, and the answer says
    so instead of reporting lookups that never happened."""
    done = run(
        ["run", "What is the weather in Paris?", "-m", "openai:emulated",
         "--base-url", f"{emulator.url}/v1"],
        timeout=30,
    )  # fmt: skip
    assert done.code == 0, done
    assert "lookups" not in done.out
    assert "no tools" in done.out.lower()
