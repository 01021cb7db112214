"""``agentloop demo``: the whole loop, offline, in a terminal and in a pipe."""

from __future__ import annotations

import io
import re
import subprocess
import sys

import pytest

from agentloop import AttemptDiscarded, RunFinished, event_from_json
from agentloop.cli._demo import demo_agent, run_demo
from agentloop.cli._follow import follow
from agentloop.cli._plain import PlainView
from agentloop.cli._track import Tracker

from ._proc import run, run_in_terminal

ANSWER = "Go to Paris."
DRAFT = "Paris it is: sunny and 21 °C"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def test_demo_in_a_pipe_prints_a_plain_timeline() -> None:
    """In a pipe: no escape codes; tools start mid-reply; the draft is withdrawn; it answers."""
    done = run(["demo", "--speed", "8"])
    assert done.code == 0, done.err
    assert done.err == ""
    assert "\x1b[" not in done.out
    started = [line for line in done.out.splitlines() if "▶ " in line]
    assert any(
        "get_weather" in line and "started while the reply streams" in line for line in started
    )
    assert any("travel_desk.train" in line for line in started)
    withdrawn = done.out.index("✗ withdrawn: draft of attempt 3")
    assert done.out.index(DRAFT) < withdrawn  # the draft streamed first, then was withdrawn
    assert f"~~{DRAFT}" in done.out[withdrawn:]
    assert "goal [active]" in done.out and "goal [complete]" in done.out
    assert done.out.index("goal [complete]") > withdrawn
    assert ANSWER in done.out[done.out.index("goal [complete]") :]
    assert "■ answer" in done.out
    assert "timing" in done.out and "saved" in done.out


def test_demo_in_a_terminal_draws_a_live_view() -> None:
    """In a pseudo-terminal: rich draws the view; the withdrawn draft is struck through."""
    done = run_in_terminal(["demo", "--speed", "8"])
    assert done.code == 0, done.err
    assert "Traceback" not in done.err
    out = done.out.replace("\r\n", "\n")
    assert "\x1b[" in out  # drawn with escape codes, not plain text
    assert re.search(r"\x1b\[[0-9;]*\b9m" + re.escape(DRAFT), out), "draft not struck through"
    text = ANSI.sub("", out)
    assert "withdrawn: the session goal is still active" in text
    assert "⚡ started mid-reply" in text
    assert "╭─ answer" in text and "Go to Paris." in text
    assert "timing" in text


def test_demo_json_is_one_event_per_line() -> None:
    """``--json``: every stdout line parses as an event; a goal discard; one run_finished."""
    done = run(["demo", "--speed", "20", "--json"])
    assert done.code == 0, done.err
    events = [event_from_json(line) for line in done.out.splitlines()]
    discards = [e for e in events if isinstance(e, AttemptDiscarded)]
    assert [(d.attempt, d.reason) for d in discards] == [(3, "goal")]
    finished = [e for e in events if isinstance(e, RunFinished)]
    assert len(finished) == 1 and finished[0].result.unwrap().startswith("**Go to Paris.**")
    assert [e.seq for e in events] == list(range(1, len(events) + 1))


@pytest.mark.process
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_ctrl_c_exits_cleanly_with_130(backend: str) -> None:
    """SIGINT while the live view runs: exit status 130, one line, no traceback (from scratch:
    the interpreter's own exit is part of what is checked)."""
    args = ["demo", "--speed", "3", "--backend", backend]
    done = run_in_terminal(args, interrupt_after=b"get_weather", fresh=True)
    assert done.code == 130
    assert done.err_lines == ["agentloop: error: interrupted"]


@pytest.mark.process  # from scratch: an interpreter without rich
def test_without_rich_a_terminal_gets_plain_text() -> None:
    """rich missing (the [cli] extra not installed): plain text on a terminal, no traceback."""
    hide_rich = (
        "import sys; sys.modules['rich'] = None; from agentloop.cli import main; "
        "sys.exit(main(sys.argv[1:]))"
    )
    done = run_in_terminal(["demo", "--speed", "20"], command=[sys.executable, "-c", hide_rich])
    assert done.code == 0, done.err
    assert "\x1b[" not in done.out
    assert "✗ withdrawn" in done.out and "■ answer" in done.out


def test_import_agentloop_does_not_import_rich() -> None:
    """rich belongs to the command: neither agentloop nor agentloop.cli imports it up front."""
    check = "import sys, agentloop, agentloop.cli; print('rich' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "False"


async def test_demo_in_process_shows_the_interception(timescale: float) -> None:
    """The demo runs on both backends; the plain view shows the withdrawn draft, then the answer."""
    out = io.StringIO()
    assert await run_demo(1 / timescale, style="plain", out=out) == 0
    text = out.getvalue()
    assert text.index("✗ withdrawn") < text.index("goal [complete]") < text.index("■ answer")


@pytest.mark.fake_clock
async def test_demo_timing_counts_the_tools_overlap(fake_time: bool, timescale: float) -> None:
    """The summary's figures: four tools of 0.9 s and 1.1 s (twice each), five model calls, and
    a wall time shorter than doing it all one after another."""
    tracker = Tracker()
    view = PlainView(io.StringIO(), tracker)
    async with demo_agent(1 / timescale).stream("Paris or Oslo?") as stream:
        await follow(stream, view, tracker)
    timing = tracker.timing()
    assert timing.model_calls == 5
    assert timing.actions == 6  # four lookups and two goal tools
    if fake_time:
        assert timing.tools == pytest.approx(4.0)
        assert timing.wall < timing.sequential
        assert timing.overlapped == pytest.approx(0.8 + 0.6 + 0.4 + 0.2)
