"""The views and resolvers behind the command, in-process."""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path

import pytest
from rich.console import Console

from agentloop import Tool, Toolkit, UserError
from agentloop.cli._demo import demo_agent
from agentloop.cli._follow import follow, make_view
from agentloop.cli._live import LiveView
from agentloop.cli._plain import AnswerView, JsonView, PlainView
from agentloop.cli._setup import data_dir, default_store_url, load_tools, make_model
from agentloop.cli._track import Tracker

TOOLS = '''
from agentloop import Toolkit, activity, tool

@tool
def add(a: int, b: int) -> int:
    """Add."""
    return a + b

def plain(x: str) -> str:
    """A plain function."""
    return x

class Kit(Toolkit):
    """A toolkit."""

    @activity
    async def one(self) -> int:
        """One."""
        return 1

NESTED = [add, (plain, Kit())]
'''


@pytest.fixture
def tools_file(tmp_path: Path) -> Path:
    path = tmp_path / "cli_view_tools.py"
    path.write_text(TOOLS)
    return path


def test_load_tools_accepts_every_kind(tools_file: Path) -> None:
    """A tool, a function, a toolkit class or instance, and nested lists of them."""
    loaded = load_tools([f"{tools_file}:add", f"{tools_file}:Kit", f"{tools_file}:NESTED"])
    assert [type(t).__name__ for t in loaded] == ["Tool", "Kit", "Tool", "function", "Kit"]
    assert isinstance(loaded[1], Toolkit) and loaded[1].tool.name == "kit"


def test_load_tools_from_a_module_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A module with no :attr gives every tool it defines, in order: a toolkit class is made
    once unless an instance is there, tools imported from elsewhere are left out, and a
    toolkit that needs arguments is a UserError that says so."""
    (tmp_path / "cli_shared_tools.py").write_text(TOOLS)
    (tmp_path / "cli_all_tools.py").write_text(
        """
from agentloop import Toolkit, activity, tool
from cli_shared_tools import add, Kit

@tool
def first(x: int) -> int:
    \"\"\"First.\"\"\"
    return x

class Made(Toolkit):
    \"\"\"Made here, and an instance is below.\"\"\"

    @activity
    async def go(self) -> int:
        \"\"\"Go.\"\"\"
        return 1

class Fresh(Toolkit):
    \"\"\"Made by the loader.\"\"\"

    @activity
    async def go(self) -> int:
        \"\"\"Go.\"\"\"
        return 2

made = Made()

def helper(x: int) -> int:
    return x
"""
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    for name in ("cli_shared_tools", "cli_all_tools"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    loaded = load_tools([str(tmp_path / "cli_all_tools.py")])
    assert [type(t).__name__ for t in loaded] == ["Tool", "Fresh", "Made"]
    assert isinstance(loaded[0], Tool) and loaded[0].name == "first"
    by_name = load_tools(["cli_all_tools"])
    assert [type(t).__name__ for t in by_name] == ["Tool", "Fresh", "Made"]

    (tmp_path / "cli_needy_tools.py").write_text(
        """
from agentloop import Toolkit, activity

class Needy(Toolkit):
    \"\"\"Needs a key.\"\"\"

    def __init__(self, key: str) -> None:
        self.key = key

    @activity
    async def go(self) -> str:
        \"\"\"Go.\"\"\"
        return self.key
"""
    )
    with pytest.raises(UserError, match="toolkit Needy needs arguments"):
        load_tools([str(tmp_path / "cli_needy_tools.py")])


def test_load_tools_by_module_name(tools_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``module:attr`` imports from the current directory, like ``python -m``."""
    monkeypatch.chdir(tools_file.parent)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".")])
    monkeypatch.delitem(sys.modules, "cli_view_tools", raising=False)
    [add] = load_tools(["cli_view_tools:add"])
    assert isinstance(add, Tool) and add.name == "add"


def test_make_model_with_a_base_url() -> None:
    """--base-url picks the provider's driver class and keeps the model name."""
    chat = make_model("openai:local", base_url="http://127.0.0.1:8000/v1")
    responses = make_model("openai-responses:local", base_url="http://127.0.0.1:8000/v1")
    claude = make_model("anthropic:claude", base_url="http://127.0.0.1:8000")
    assert [type(m).__name__ for m in (chat, responses, claude)] == [
        "OpenAIChatModel",
        "OpenAIResponsesModel",
        "AnthropicModel",
    ]
    assert chat.name == "local"
    with pytest.raises(UserError, match="needs an HTTP provider"):
        make_model("test:echo", base_url="http://127.0.0.1:1")


def test_default_store_lives_in_the_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """$AGENTLOOP_DATA_DIR, else $XDG_DATA_HOME/agentloop; the directory is created."""
    monkeypatch.delenv("AGENTLOOP_DATA_DIR", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert data_dir() == tmp_path / "xdg" / "agentloop"
    monkeypatch.setenv("AGENTLOOP_DATA_DIR", str(tmp_path / "mine"))
    assert default_store_url() == f"sqlite:///{tmp_path / 'mine' / 'sessions.db'}"
    assert (tmp_path / "mine").is_dir()


async def test_make_view_picks_by_style_and_terminal() -> None:
    """A pipe gets the plain view; --json and -q get theirs."""
    tracker = Tracker()
    out = io.StringIO()
    assert isinstance(make_view("auto", tracker, out=out), PlainView)
    assert isinstance(make_view("json", tracker, out=out), JsonView)
    assert isinstance(make_view("quiet", tracker, out=out), AnswerView)


async def test_live_view_strikes_the_withdrawn_draft(timescale: float) -> None:
    """The rich view, on a forced terminal: the draft is drawn struck through and marked."""
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100, height=40, color_system="truecolor")
    tracker = Tracker()
    view = LiveView(console, tracker)
    async with demo_agent(1 / timescale).stream("Paris or Oslo?") as run:
        await follow(run, view, tracker)
    text = out.getvalue()
    assert re.search(r"\x1b\[[0-9;]*\b9m" + re.escape("Paris it is"), text)
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)
    assert "withdrawn: the session goal is still active" in plain
    assert "╭─ answer" in plain
    assert tracker.result is not None and tracker.result.ok


async def test_quiet_view_prints_only_the_answer(timescale: float) -> None:
    """-q: the answer text, nothing else."""
    out = io.StringIO()
    tracker = Tracker()
    async with demo_agent(1 / timescale).stream("Paris or Oslo?") as run:
        await follow(run, AnswerView(out), tracker)
    assert out.getvalue().startswith("**Go to Paris.**") and "withdrawn" not in out.getvalue()


async def test_plain_view_starts_a_new_line_for_each_answer_section() -> None:
    """ReAct answer sections are told apart by ``AnswerDelta.section``: a later one gets a line
    of its own instead of being glued to the first."""
    from agentloop import Agent
    from agentloop.testing import Reply, ScriptedModel

    model = ScriptedModel(
        [Reply(timeline=[(0.0, "Answer: first try\nAnswer: second")])], native_tools=False
    )
    out = io.StringIO()
    tracker = Tracker()
    async with Agent(model, tools=[], tool_mode="react").stream("q") as run:
        await follow(run, PlainView(out, tracker), tracker)
    lines = [line for line in out.getvalue().splitlines() if "answer" in line]
    assert any(line.endswith("first try") for line in lines), out.getvalue()
    assert any(line.endswith("second") for line in lines), out.getvalue()
    assert tracker.result is not None and tracker.result.output == "second"


async def test_the_live_view_shows_calls_awaiting_and_decided_and_stands_aside_to_ask() -> None:
    """An approver that asks while the live view runs: the view holds (nothing drawn while the
    person answers), then shows how the call was decided, and the run waiting on the other."""
    from agentloop import Agent, Approve, PendingCall, RunContext, tool
    from agentloop.testing import Reply, ScriptedModel, call

    @tool(requires_approval=True)
    async def transfer(amount: int) -> str:
        """Move money."""
        return f"sent {amount}"

    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120, height=40)
    tracker = Tracker()
    view = LiveView(console, tracker)
    drawn_while_asking: list[int] = []

    async def approver(pending: PendingCall, ctx: RunContext) -> Approve | None:
        with view.hold():
            before = len(out.getvalue())
            view.tick()
            drawn_while_asking.append(len(out.getvalue()) - before)
        return Approve() if pending.id == "a" else None

    calls = [call("transfer", {"amount": 1}, id="a"), call("transfer", {"amount": 2}, id="b")]
    agent = Agent(ScriptedModel([Reply(calls=calls)]), tools=[transfer], approver=approver)
    async with agent.stream("pay") as run:
        await follow(run, view, tracker)
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())
    assert drawn_while_asking == [0, 0]
    assert "awaits approval: transfer(amount=1) · id 'a'" in plain
    assert "approved transfer (by the approver)" in plain
    assert "waiting on decisions for 'b'" in plain
    assert tracker.result is not None and tracker.result.status == "waiting"


async def test_plain_view_tells_what_the_context_window_trimmed() -> None:
    """A ``ContextTrimmed`` event is a line of the timeline: what was elided and summarised,
    and the prompt's size before and after."""
    from agentloop import Agent, ContextWindow, tool
    from agentloop.testing import Reply, ScriptedModel, call

    @tool
    async def fetch(query: str) -> str:
        """A long document."""
        return "x" * 8_000

    model = ScriptedModel(
        [Reply(calls=[call("fetch", {"query": str(i)}, id=f"c{i}")]) for i in range(4)]
        + [Reply(text="done")]
    )
    window = ContextWindow(max_tokens=3_000, keep_steps=1)
    out = io.StringIO()
    tracker = Tracker()
    async with Agent(model, tools=[fetch], context_window=window).stream("q") as run:
        await follow(run, PlainView(out, tracker), tracker)
    trimmed = [line for line in out.getvalue().splitlines() if "✂ context trimmed" in line]
    assert trimmed, out.getvalue()
    assert re.search(r"to fit 3,000 tokens: \d+ results? elided, \d+ steps? summarised", trimmed[0])
