"""``agentloop chat``: turns read from stdin, one session, memory across turns and processes."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentloop.testing import Chunk, ProviderServer, RecordedRequest, ScriptedResponse

from ._proc import Terminal, run
from ._wire import text_stream


def remembering(request: RecordedRequest) -> ScriptedResponse:
    """Answers with every user message it was sent, as JSON: what the model remembers."""
    users = [m["content"] for m in request.json["messages"] if m["role"] == "user"]
    return text_stream("heard " + json.dumps(users))


@pytest.fixture
def server() -> Iterator[ProviderServer]:
    with ProviderServer(remembering) as server:
        yield server


def chat_args(server: ProviderServer, store: str, *more: str) -> list[str]:
    return [
        "chat",
        "--model",
        "openai:m",
        "--base-url",
        server.url + "/v1",
        "--store",
        store,
        *more,
    ]


def heard(stdout: str) -> list[list[str]]:
    """What the model said it heard, turn by turn."""
    return [
        json.loads(line.split("heard ", 1)[1])
        for line in stdout.splitlines()
        if "heard [" in line and "~~" not in line
    ]


def test_two_turns_share_the_session(server: ProviderServer, tmp_path: Path) -> None:
    """The second turn's request holds the first turn; /goal sets and shows the goal; /exit."""
    store = f"sqlite:///{tmp_path / 'chat.db'}"
    lines = [
        "My name is Ada.",
        "/goal",
        "What is my name?",
        "/goal Write Ada a poem",
        "/nope",
        "/exit",
        "never read",
    ]
    done = run(chat_args(server, store, "--session", "ada"), input="\n".join(lines) + "\n")
    assert done.code == 0, done.err
    assert heard(done.out) == [["My name is Ada."], ["My name is Ada.", "What is my name?"]]
    assert "(no goal)" in done.out
    assert "🎯 Goal [active]" in done.out and "objective: Write Ada a poem" in done.out
    assert re.search(r"created: +\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", done.out)  # not epoch s
    assert "unknown command '/nope'" in done.out
    assert "never read" not in done.out
    assert done.out.rstrip().endswith("bye")
    assert len(server.requests) == 2

    # A later chat on the same session continues it, goal included: the goal is active and the
    # model never closes it, so its answers are withdrawn until the budget (3) is spent.
    again = run(chat_args(server, store, "--session", "ada", "--plain"), input="And now?\n")
    assert again.code == 0, again.err
    answers = heard(again.out)
    assert answers[0] == ["My name is Ada.", "What is my name?", "And now?"]
    assert again.out.count("✗ withdrawn") == 3
    assert "Write Ada a poem" in answers[-1][-1]  # the last request carried the goal's nudge


def test_end_of_input_leaves_cleanly(server: ProviderServer, tmp_path: Path) -> None:
    """No input at all: the chat says goodbye and exits 0; the default store is in the data dir."""
    done = run(
        ["chat", "--model", "openai:m", "--base-url", server.url + "/v1"],
        input="",
        env={"AGENTLOOP_DATA_DIR": str(tmp_path)},
    )
    assert done.code == 0, done.err
    assert done.out.rstrip().endswith("bye")
    assert (tmp_path / "sessions.db").exists()
    assert str(tmp_path / "sessions.db") in done.out


PROMPT = "you› "
SLOW = "take your time"


def slow_or_remembering(request: RecordedRequest) -> ScriptedResponse:
    """Starts an answer to SLOW and then stalls for a minute; answers anything else at once."""
    users = [m["content"] for m in request.json["messages"] if m["role"] == "user"]
    if users[-1] != SLOW:
        return remembering(request)
    stalled = text_stream("working on it... and here is the rest.", size=16)
    pieces = stalled.pieces()
    return ScriptedResponse.sse([*pieces[:2], Chunk(pieces[2].data, 60.0), *pieces[3:]])


@pytest.mark.parametrize(
    "options",
    [["--plain", "--backend", "asyncio"], ["--plain", "--backend", "trio"], []],
    ids=["plain-asyncio", "plain-trio", "live-asyncio"],
)
def test_ctrl_c_cancels_the_turn_and_comes_back_to_the_prompt(
    options: list[str], tmp_path: Path
) -> None:
    """Ctrl-C while the model streams cancels that turn only: the prompt comes back and the
    next turn is answered; Ctrl-C at the prompt then leaves quietly, as end of input does:
    "bye", status 0, nothing on stderr."""
    with (
        ProviderServer(slow_or_remembering) as server,
        Terminal(chat_args(server, f"sqlite:///{tmp_path / 'chat.db'}", *options)) as chat,
    ):
        chat.expect(PROMPT)
        chat.type(SLOW)
        chat.expect("working on it")
        chat.interrupt()
        chat.expect("interrupted: the turn was cancelled")
        chat.expect(PROMPT)
        chat.type("Still there?")
        chat.expect("heard [")
        chat.expect("Still there?")
        chat.expect(PROMPT)
        chat.interrupt()
        done = chat.wait()
    assert done.code == 0, done
    assert done.err_lines == []
    assert done.out.rstrip().endswith("bye"), done.out
    assert "and here is the rest" not in done.out
    assert len(server.requests) == 2


@pytest.mark.process
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("turn", ["cancelled", "answered"])
def test_more_ctrl_c_while_leaving_exit_cleanly(backend: str, turn: str, tmp_path: Path) -> None:
    """After a turn (cancelled by Ctrl-C, or answered), Ctrl-C at the prompt leaves quietly;
    more presses right after it land while the chat is leaving (the store closing, the process
    ending): still quiet, status 0, never a traceback."""
    store = f"sqlite:///{tmp_path / 'chat.db'}"
    with (
        ProviderServer(slow_or_remembering) as server,
        # From scratch: the last presses land while the interpreter itself exits, which a
        # forked child only imitates.
        Terminal(chat_args(server, store, "--plain", "--backend", backend), fresh=True) as chat,
    ):
        chat.expect(PROMPT)
        if turn == "cancelled":
            chat.type(SLOW)
            chat.expect("working on it")
            chat.interrupt()
            chat.expect("interrupted: the turn was cancelled")
        else:
            chat.type("Hello")
            chat.expect("heard [")
        chat.expect(PROMPT)
        for _ in range(3):
            chat.interrupt()
            time.sleep(0.05)
        done = chat.wait()
    assert done.code == 0, done
    assert done.err_lines == [], done.err
    assert "Traceback" not in done.out + done.err


APPROVAL_TOOLS = '''
from agentloop import tool

@tool(requires_approval=True)
def transfer(amount: int, to: str) -> str:
    """Move money."""
    return f"sent {amount} to {to}"
'''


def test_a_tool_that_needs_approval_is_asked_about_in_the_terminal(tmp_path: Path) -> None:
    """y runs the call, e runs it with edited arguments, n with a reason denies it; the
    timeline shows each call awaiting and how it was decided."""
    from ._wire import tool_call_stream

    (tmp_path / "paytools.py").write_text(APPROVAL_TOOLS)
    with ProviderServer() as server:
        for i, amount in enumerate((5, 6, 7)):
            server.enqueue(
                tool_call_stream("transfer", {"amount": amount, "to": "bob"}, call_id=f"c{i}"),
                text_stream(f"turn {i} over"),
            )
        lines = [
            "pay bob 5",
            "y",
            "pay bob 6",
            "maybe",
            "e",
            "not json",
            "e",
            '{"amount": 60, "to": "bob"}',
            "pay bob 7",
            "n bob has enough",
            "/exit",
        ]
        args = chat_args(server, f"sqlite:///{tmp_path / 'c.db'}", "--plain")
        args += ["--tools", str(tmp_path / "paytools.py")]
        done = run(args, input="\n".join(lines) + "\n", cwd=tmp_path)
        assert done.code == 0, done.err
        results = [
            m["content"]
            for r in server.requests
            for m in r.json["messages"][-1:]
            if m["role"] == "tool"
        ]
    out = done.out
    assert results == ["sent 5 to bob", "sent 60 to bob", "denied: bob has enough"]
    assert out.count("⏸ awaits approval: transfer(amount=") == 3
    assert 'approve transfer(amount=5, to="bob")?' in out
    assert "✔ approved transfer (by the approver)" in out
    assert "answer y, n [reason] or e" in out and "not JSON" in out
    assert '✔ edited transfer(amount=60, to="bob") (by the approver)' in out
    assert "✗ denied transfer: bob has enough (by the approver)" in out
