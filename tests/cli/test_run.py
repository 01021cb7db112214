"""``agentloop run``: JSON events against the loopback provider server, sessions, goals, errors."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentloop import (
    ActionFinished,
    ActionStarted,
    AttemptDiscarded,
    Event,
    RunFinished,
    RunStarted,
    event_from_json,
)
from agentloop.cli import main
from agentloop.testing import ProviderServer, RecordedRequest, ScriptedResponse

from ._proc import KEYS, environment, run
from ._wire import text_stream, tool_call_stream

TOOLS = '''
from agentloop import Toolkit, activity, tool

@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b

def shout(text: str) -> str:
    """A plain function."""
    return text.upper()

class Maths(Toolkit):
    """Arithmetic."""

    @activity
    async def mul(self, a: int, b: int) -> int:
        """Multiply."""
        return a * b

ALL = [add, shout, Maths()]
NOT_A_TOOL = 42
'''


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "mytools.py").write_text(TOOLS)
    return tmp_path


@pytest.fixture
def server() -> Iterator[ProviderServer]:
    with ProviderServer() as server:
        yield server


def openai_args(server: ProviderServer) -> list[str]:
    return ["--model", "openai:test-model", "--base-url", server.url + "/v1"]


def events_of(stdout: str) -> list[Event]:
    return [event_from_json(line) for line in stdout.splitlines()]


def test_run_json_streams_the_events(server: ProviderServer, workdir: Path) -> None:
    """--json: one event per line, from run_started to run_finished with the answer."""
    server.enqueue(tool_call_stream("add", {"a": 2, "b": 3}), text_stream("2 + 3 = 5."))
    done = run(
        ["run", "What is 2 + 3?", *openai_args(server), "--tools", "mytools:add", "--json"],
        cwd=workdir,
    )
    assert done.code == 0, done.err
    assert done.err == ""
    events = events_of(done.out)
    types = [e.type for e in events]
    assert types[0] == "run_started" and types[-1] == "run_finished"
    assert types.index("action_started") < types.index("action_finished")
    assert types.index("action_finished") < types.index("text_delta")
    started = next(e for e in events if isinstance(e, ActionStarted))
    assert (started.name, started.input) == ("add", {"a": 2, "b": 3})
    finished = next(e for e in events if isinstance(e, ActionFinished))
    assert finished.result.output == 5
    last = events[-1]
    assert isinstance(last, RunFinished) and last.result.output == "2 + 3 = 5."
    assert isinstance(events[0], RunStarted) and events[0].input == "What is 2 + 3?"
    tool_message = server.requests[1].json["messages"][-1]
    assert tool_message["role"] == "tool" and tool_message["content"] == "5"


def test_run_quiet_prints_the_answer_only(
    server: ProviderServer, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """-q: stdout is the answer and nothing else; tools from a file path and a list work."""
    server.enqueue(tool_call_stream("maths__mul", {"a": 6, "b": 7}), text_stream("42"))
    tools = f"{workdir / 'mytools.py'}:ALL"
    assert main(["run", "6 × 7?", *openai_args(server), "--tools", tools, "-q"]) == 0
    assert capsys.readouterr().out == "42\n"
    names = [t["function"]["name"] for t in server.requests[0].json["tools"]]
    assert names == ["add", "shout", "maths__mul"]


def test_instructions_are_plain_text(
    server: ProviderServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """--instructions reach the model as typed: braces are not a template."""
    server.enqueue(text_stream("ok"))
    instructions = "Answer as {{ name }}; {# is not a comment here."
    assert main(["run", "hi", *openai_args(server), "--instructions", instructions, "-q"]) == 0
    assert capsys.readouterr().out == "ok\n"
    system = server.requests[0].json["messages"][0]
    assert system == {"role": "system", "content": instructions}


def test_tools_from_a_file_alone_are_every_tool_it_defines(
    server: ProviderServer, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--tools path/file.py (no :attr): its @tool functions and toolkits, not its plain
    functions or lists, each once."""
    server.enqueue(tool_call_stream("maths__mul", {"a": 6, "b": 7}), text_stream("42"))
    tools = str(workdir / "mytools.py")
    assert main(["run", "6 × 7?", *openai_args(server), "--tools", tools, "-q"]) == 0
    assert capsys.readouterr().out == "42\n"
    names = [t["function"]["name"] for t in server.requests[0].json["tools"]]
    assert names == ["add", "maths__mul"]


def test_run_plain_shows_the_timeline(
    server: ProviderServer, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Into a pipe without --json: a plain timeline with the action and the answer."""
    server.enqueue(tool_call_stream("add", {"a": 1, "b": 1}), text_stream("Two."))
    tools = f"{workdir / 'mytools.py'}:add"
    assert main(["run", "1+1", *openai_args(server), "--tools", tools]) == 0
    out = capsys.readouterr().out
    assert "▶ add(a=1, b=1)" in out
    assert "✔ add → 2" in out
    assert "Two." in out and "■ answer" in out


def test_run_plain_summary_shows_tokens_and_cached_tokens(
    server: ProviderServer, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The end summary counts the prompt tokens, those read from the provider's cache among
    them, and the reply tokens."""
    server.enqueue(tool_call_stream("add", {"a": 1, "b": 1}), text_stream("Two.", cached=16))
    tools = f"{workdir / 'mytools.py'}:add"
    assert main(["run", "1+1", *openai_args(server), "--tools", tools]) == 0
    out = capsys.readouterr().out
    assert "(2 steps, 2 model calls, 50 tokens in (16 cached), 11 out)" in out


def test_run_goal_intercepts_a_premature_answer(
    server: ProviderServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """--goal: the first answer is withdrawn; the model closes the goal, then answers."""
    server.enqueue(
        text_stream("Done already!"),
        tool_call_stream("update_goal", {"status": "complete"}),
        text_stream("Finished, goal complete."),
    )
    assert main(["run", "Do it", *openai_args(server), "--goal", "Do the thing", "--json"]) == 0
    events = events_of(capsys.readouterr().out)
    discards = [e for e in events if isinstance(e, AttemptDiscarded)]
    assert [(d.attempt, d.reason) for d in discards] == [(1, "goal")]
    last = events[-1]
    assert isinstance(last, RunFinished) and last.result.output == "Finished, goal complete."
    system = server.requests[0].json["messages"][0]["content"]
    assert "Session goal protocol:" in system
    nudge = server.requests[1].json["messages"][-1]["content"]
    assert "Do the thing" in nudge


def test_run_sessions_remember_earlier_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--session with a SQLite store: the second run's request holds the first run."""

    def echo(request: RecordedRequest) -> ScriptedResponse:
        users = [m["content"] for m in request.json["messages"] if m["role"] == "user"]
        return text_stream(json.dumps(users))

    store = f"sqlite:///{tmp_path / 'sessions.db'}"
    with ProviderServer(echo) as server:
        args = [*openai_args(server), "--session", "s1", "--store", store, "-q"]
        assert main(["run", "My name is Ada.", *args]) == 0
        first = capsys.readouterr().out
        assert main(["run", "What is my name?", *args]) == 0
        second = capsys.readouterr().out
    assert json.loads(first) == ["My name is Ada."]
    assert json.loads(second) == ["My name is Ada.", "What is my name?"]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--model", "nosuch:model"], "unknown model provider 'nosuch'"),
        (["--model", "openai:gpt-4o-mini"], "no OpenAI API key"),
        (["--model", "test:echo", "--tools", "mytools:nope"], "has no attribute 'nope'"),
        (["--model", "test:echo", "--store", "mysql://x/y"], "unknown session store URL"),
    ],
    ids=["unknown-model", "missing-key", "bad-tool-path", "bad-store-url"],
)
def test_errors_are_one_line(args: list[str], says: str, workdir: Path) -> None:
    """A bad model string, a missing key, a bad tool path or store URL: one line, exit 2."""
    done = run(["run", "hi", *args], cwd=workdir)
    assert done.code == 2
    assert len(done.err_lines) == 1, done.err
    assert done.err_lines[0].startswith("agentloop: error: ")
    assert says in done.err_lines[0]
    assert "Traceback" not in done.out + done.err


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--model", "gpt-4o"], "not of the form 'provider:model'"),
        ([], "no model"),
        (["--model", "test:echo", "--base-url", "http://127.0.0.1:1"], "needs an HTTP provider"),
        (["--model", "openai:m", "--base-url", "127.0.0.1:1"], "must be an http://"),
        (["--model", "test:echo", "--tools", "nosuchmodule:x"], "cannot import 'nosuchmodule'"),
        (["--model", "test:echo", "--tools", "{tools}:"], "expected module:attr"),
        (["--model", "test:echo", "--tools", "{empty}"], "defines no tools"),
        (["--model", "test:echo", "--tools", "{tools}:NOT_A_TOOL"], "is a int"),
        (["--model", "test:echo", "--tools", "{tools}:BROKEN"], "has no attribute"),
        (["--model", "test:echo", "--tools", "nofile.py:x"], "no such file"),
        (["--model", "test:echo", "--store", "sqlite://"], "bad SQLite URL"),
        (["--model", "test:echo", "--store", "sqlite:///no/such/dir/x.db"], "does not exist"),
        (
            ["--model", "test:echo", "--store", "sqlite:///no/such/dir/x.db"],
            "relative to the current directory; an absolute path takes four slashes: "
            "sqlite:////no/such/dir/x.db",
        ),
    ],
)
def test_more_errors_are_one_line(
    args: list[str],
    says: str,
    workdir: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every configuration mistake is one line on stderr and exit status 2 (in-process)."""
    for key in (*KEYS, "AGENTLOOP_MODEL", "AGENTLOOP_DEBUG"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))  # module:attr may add the cwd to it
    (workdir / "empty.py").write_text("def helper() -> None: ...\n")
    args = [a.replace("{tools}", str(workdir / "mytools.py")) for a in args]
    args = [a.replace("{empty}", str(workdir / "empty.py")) for a in args]
    assert main(["run", "hi", *args]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("agentloop: error: ")
    assert says in lines[0]
    assert "Traceback" not in captured.out + captured.err


def test_unreachable_server_is_one_line() -> None:
    """A server that refuses connections: one line naming the failure, exit 1."""
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    done = run(["run", "hi", "--model", "openai:m", "--base-url", url, "--retries", "0"])
    assert done.code == 1
    assert len(done.err_lines) == 1, done.err
    assert "connection to openai failed" in done.err_lines[0]
    assert "Traceback" not in done.out + done.err


def test_echo_model_runs_without_a_server() -> None:
    """``test:echo`` answers with the prompt: the command works with no network at all."""
    done = run(["run", "ping", "--model", "test:echo", "-q"])
    assert done.code == 0, done.err
    assert done.out == "ping\n"


def test_run_without_a_goal_imports_neither_goals_nor_pydantic() -> None:
    """``agentloop.goals`` (and the pydantic it loads, about 0.3 s of a command's start) is
    imported for ``--goal`` only."""
    check = (
        "import contextlib, io, sys\n"
        "from agentloop.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "    code = main(['run', 'ping', '--model', 'test:echo', '-q'])\n"
        "print(code, repr(out.getvalue()), sorted({'agentloop.goals', 'pydantic'} & set(sys.modules)))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", check], capture_output=True, text=True, env=environment(), check=True
    )
    assert proc.stdout.split("\n")[0] == "0 'ping\\n' []", proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["run", "ping", "--model", "test:echo", "-q"],
        ["run", "hi", "--model", "nosuch:model"],
        ["run", "hi", "--model", "openai:gpt-4o-mini"],
        ["run"],
    ],
    ids=["answer", "bad-model", "missing-key", "usage"],
)
def test_a_forked_command_does_what_a_fresh_one_does(args: list[str], workdir: Path) -> None:
    """``run`` forks the command from a warm process (conftest.py): same output, errors and
    exit status as ``python -m agentloop`` started from scratch."""
    assert run(args, cwd=workdir) == run(args, cwd=workdir, fresh=True)


def test_a_retry_line_says_why_and_when(
    server: ProviderServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """A retried model call: the timeline says which error (class and status) and the wait."""
    overloaded = {"error": {"message": "try later", "type": "server_error"}}
    server.enqueue(ScriptedResponse.json(overloaded, status=503), text_stream("Fine now."))
    assert main(["run", "hi", *openai_args(server), "--retries", "1", "--plain"]) == 0
    out = capsys.readouterr().out
    [line] = [line for line in out.splitlines() if "↻ attempt 1" in line]
    assert "ModelOverloaded" in line and "status=503" in line, line
    assert re.search(r"retrying in \d+(\.\d+)? s$", line), line
    assert "Fine now." in out


def _max_steps(server: ProviderServer) -> list[str]:
    server.enqueue(tool_call_stream("add", {"a": 1, "b": 2}))
    return ["--max-steps", "1", "--tools", "mytools:add"]


@pytest.mark.parametrize("failure", ["unreachable", "no-answer"])
@pytest.mark.parametrize("mode", ["run", "chat"])
def test_an_error_is_printed_once(
    failure: str, mode: str, server: ProviderServer, workdir: Path
) -> None:
    """A run that fails (the model unreachable) or ends without an answer (the step limit):
    its error is one line on stderr, and the timeline does not say it again."""
    if failure == "unreachable":
        args = ["--model", "openai:m", "--base-url", f"http://127.0.0.1:{_closed_port()}/v1"]
        args += ["--retries", "0"]
        says, detail = "connection to openai failed", "ConnectionRefusedError"
    else:
        args = [*openai_args(server), *_max_steps(server)]
        says, detail = "the run ended without an answer", "max_steps=1"
    if mode == "run":
        done = run(["run", "hi", *args, "--plain"], cwd=workdir)
    else:
        done = run(["chat", *args, "--plain", "--store", "memory://"], input="hi\n", cwd=workdir)
    assert done.code == 1
    assert len(done.err_lines) == 1 and done.err_lines[0].startswith("agentloop: error: ")
    assert says in done.err_lines[0] and detail in done.err_lines[0], done.err
    assert detail not in done.out, done.out


def test_a_bad_postgresql_url_fails_fast_in_one_line() -> None:
    """A PostgreSQL server that is not there: one line naming the store (its password hidden)
    and the reason, exit 2, in about the time it takes to start, not the pool's 10 s of
    retries with a log line each."""
    pytest.importorskip("psycopg")
    url = f"postgresql://agent:secret@127.0.0.1:{_closed_port()}/db"
    started = time.monotonic()
    done = run(["run", "hi", "--model", "test:echo", "--store", url])
    took = time.monotonic() - started
    assert done.code == 2
    assert len(done.err_lines) == 1, done.err
    line = done.err_lines[0]
    assert line.startswith(
        "agentloop: error: cannot open the session store postgresql://agent:***@"
    )
    assert "Connection refused" in line and "secret" not in done.err
    assert took < 8, took  # the pool's own retries alone took connect_timeout (10 s)


def test_a_busy_session_is_one_line_with_a_readable_time(tmp_path: Path) -> None:
    """Another run holds the session: one line saying who holds it and until when, as a date
    and a wait (not epoch seconds), exit 1."""
    import anyio

    from agentloop.sessions import SQLiteStore

    async def hold() -> None:
        async with SQLiteStore(tmp_path / "s.db") as store:
            await store.create("busy")
            await store.acquire_lease("busy", owner="another-run", ttl=600)

    anyio.run(hold)
    store = f"sqlite:///{tmp_path / 's.db'}"
    done = run(["run", "hi", "--model", "test:echo", "--session", "busy", "--store", store])
    assert done.code == 1
    assert len(done.err_lines) == 1, done.err
    line = done.err_lines[0]
    assert "session 'busy' is leased by 'another-run' until" in line
    assert re.search(r"until \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(in (9|10) min", line), line
    assert "is leased by" not in done.out


def test_a_run_that_waits_on_an_approval_says_so_and_fails(
    server: ProviderServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No one to ask on the command line: the call waits, the timeline says so, exit 1."""
    (tmp_path / "paytools.py").write_text(
        "from agentloop import tool\n\n"
        "@tool(requires_approval=True)\n"
        "def transfer(amount: int) -> str:\n"
        '    """Move money."""\n'
        "    return 'sent'\n"
    )
    server.enqueue(tool_call_stream("transfer", {"amount": 5}, call_id="t1"))
    tools = str(tmp_path / "paytools.py")
    assert main(["run", "pay", *openai_args(server), "--tools", tools]) == 1
    captured = capsys.readouterr()
    assert "⏸ awaits approval: transfer(amount=5) · id 't1'" in captured.out
    assert "■ waiting on decisions for 't1'" in captured.out
    assert "the run waits on decisions for 't1'" in captured.err


def test_serve_takes_the_agent_options_of_run(
    server: ProviderServer, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``agentloop serve -m MODEL --tools TOOLS`` serves the agent ``run`` would build (no
    module of one's own needed); with AGENT, ``-m`` replaces its model and ``--tools`` adds
    tools."""
    from agentloop import web

    served: list[Any] = []

    async def serve(agent: Any, **options: Any) -> None:
        served.append(await agent.run("What is 2 + 3?"))

    monkeypatch.setattr(web, "serve", serve)
    add = f"{workdir / 'mytools.py'}:add"
    server.enqueue(tool_call_stream("add", {"a": 2, "b": 3}), text_stream("2 + 3 = 5."))
    assert main(["serve", *openai_args(server), "--tools", add]) == 0
    assert served[-1].output == "2 + 3 = 5."
    assert served[-1].steps[0].actions[0].output == 5

    mine = workdir / "served_by_cli.py"
    monkeypatch.syspath_prepend(str(workdir))
    mine.write_text(
        "import agentloop.testing\nfrom agentloop import Agent\n\n"
        "agent = Agent('test:echo', name='mine')  # -m replaces its model\n"
    )
    server.enqueue(tool_call_stream("add", {"a": 2, "b": 3}), text_stream("five"))
    args = ["serve", "served_by_cli:agent", *openai_args(server), "--tools", add]
    assert main(args) == 0
    assert served[-1].output == "five" and served[-1].agent == "mine"
    assert "add" in [t["function"]["name"] for t in server.requests[-2].json["tools"]]
