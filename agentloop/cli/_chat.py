"""``agentloop chat``: a conversation kept in a session store, one run per line you type.

Each turn is a run of the same session, so the model sees the earlier turns as memory, and the
conversation can be picked up later with ``--session``. ``/goal OBJECTIVE`` gives the session a
goal the model must close before it may answer; ``/goal`` shows it; ``/exit`` (or end of input)
leaves. Ctrl-C cancels the turn in flight and comes back to the prompt; at the prompt it leaves.
"""

from __future__ import annotations

import sys
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field, replace

from .. import AgentLoopError, RunResult
from ..goals import GoalRecord, get_goal_record, render_goal, start_goal
from ._follow import Style, follow, make_view
from ._interrupt import Interrupts
from ._run import AgentOptions, build_agent, enter_store
from ._setup import default_store_url, shown_url
from ._stdin import kept_terminal, read_line
from ._track import Tracker

HELP = "/goal OBJECTIVE sets a goal · /goal shows it · /exit leaves (or end of input)"


@dataclass(frozen=True, kw_only=True, slots=True)
class ChatOptions:
    agent: AgentOptions = field(default_factory=AgentOptions)
    session: str | None = None
    store: str | None = None
    style: Style = "auto"


async def chat_command(options: ChatOptions) -> int:
    agent = build_agent(replace(options.agent, goals=True))
    url = options.store or default_store_url()
    session = options.session or time.strftime("chat-%Y%m%d-%H%M%S")
    interactive = sys.stdin.isatty()
    say = _Say(options.style != "json")
    interrupts = Interrupts.current()
    async with AsyncExitStack() as stack:
        stack.enter_context(kept_terminal())
        model = agent.resolved_model()
        stack.push_async_callback(model.aclose)
        store = await enter_store(stack, url)
        say(f"agentloop chat · {model.provider}:{model.name} · session {session!r}")
        say(f"  store {shown_url(url)}  (resume with --session {session})")
        say(f"  {HELP}")
        failures = 0
        while True:
            line = await read_line("you› " if interactive else "")
            if line is None:
                if interactive:
                    say("")  # off the prompt line
                break
            text = line.strip()
            if not text:
                continue
            if not interactive:
                say(f"you› {text}")
            if text in ("/exit", "/quit"):
                break
            if text == "/goal" or text.startswith("/goal "):
                objective = text[len("/goal") :].strip()
                goal: GoalRecord | None
                if objective:
                    goal = await start_goal(
                        store, session_id=session, objective=objective, agent=agent
                    )
                else:
                    loaded = await store.get(session, history_limit=0)
                    goal = get_goal_record(loaded, branch=agent.name) if loaded else None
                say(render_goal(goal))
                continue
            if text.startswith("/"):
                say(f"unknown command {text.split()[0]!r}: {HELP}")
                continue
            tracker = Tracker()
            view = make_view(options.style, tracker, show_input=False, final_panel=False)
            result: RunResult | None = None
            with interrupts.turn() as turn:  # Ctrl-C cancels the turn, not the chat
                try:
                    async with agent.stream(text, session=session, store=store) as run:
                        await follow(run, view, tracker)
                    result = run.result
                except AgentLoopError as exc:  # the turn failed; the conversation goes on
                    failures += 1
                    print(f"agentloop: error: {_one_line(exc)}", file=sys.stderr)
                    continue
            if turn.cancel_called or result is None:
                say("(interrupted: the turn was cancelled · Ctrl-C at the prompt leaves)")
                continue
            if result.error is not None:
                failures += 1
                print(
                    f"agentloop: error: the run ended without an answer: {result.error.message}",
                    file=sys.stderr,
                )
    say("bye")
    return 0 if failures == 0 else 1


class _Say:
    """Status lines for a person; silent in ``--json`` mode (stdout is for events only)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def __call__(self, text: str) -> None:
        if self.enabled:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()


def _one_line(exc: AgentLoopError) -> str:
    return " ".join(str(exc).split())
