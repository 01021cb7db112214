"""``agentloop chat``: turns read from stdin, one session, memory across turns and processes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentloop.testing import ProviderServer, RecordedRequest, ScriptedResponse

from ._proc import run
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
