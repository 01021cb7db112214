"""``agentloop chat``: a conversation kept in a session store, one run per line you type.

Each turn is a run of the same session, so the model sees the earlier turns as memory, and the
conversation can be picked up later with ``--session``. ``/goal OBJECTIVE`` gives the session a
goal the model must close before it may answer; ``/goal`` shows it; ``/exit`` (or end of input)
leaves. Ctrl-C cancels the turn in flight and comes back to the prompt; at the prompt it leaves
quietly, as end of input does.
A tool that needs approval is asked about in the terminal: ``y`` runs it, ``n [reason]`` denies
it, ``e`` reads new arguments (JSON) to run it with.
"""

from __future__ import annotations

import json
import sys
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field, replace
from typing import cast

from .. import (
    AgentLoopError,
    Approve,
    Deny,
    Edit,
    PendingCall,
    RunContext,
    RunResult,
)
from ..goals import GoalRecord, get_goal_record, render_goal, start_goal
from ._follow import Style, View, follow, make_view
from ._interrupt import Interrupts
from ._run import AgentOptions, build_agent, enter_store
from ._setup import default_store_url, shown_url
from ._stdin import kept_terminal, read_line
from ._track import Tracker, call_text, waiting_text

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
    asker = _TerminalApprover(say, interactive)
    agent = agent.replace(approver=asker, approval_timeout=None)  # a person takes their time
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
            with interrupts.prompt() as asking:  # Ctrl-C here leaves, as end of input does
                line = await read_line("you› " if interactive else "")
            if asking.cancel_called or line is None:
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
            asker.view = view
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
            if turn.cancel_called:
                say("(interrupted: the turn was cancelled · Ctrl-C at the prompt leaves)")
                continue
            if result.pending:  # external tools: their results cannot be typed in here
                failures += 1
                print(f"agentloop: error: the run is {waiting_text(result)}", file=sys.stderr)
            elif result.error is not None:
                failures += 1
                print(
                    f"agentloop: error: the run ended without an answer: {result.error.message}",
                    file=sys.stderr,
                )
    say("bye")
    return 0 if failures == 0 else 1


class _TerminalApprover:
    """``Agent(approver=...)`` asking the person at the terminal: ``y`` approves, ``n`` (with
    an optional reason) denies, ``e`` reads new arguments as a JSON object; end of input denies."""

    def __init__(self, say: _Say, interactive: bool) -> None:
        self.say = say
        self.interactive = interactive
        self.view: View | None = None  # the turn's view, which stands aside while asking

    async def __call__(self, call: PendingCall, ctx: RunContext) -> Approve | Deny | Edit:
        if self.view is None:
            return await self._ask(call)
        with self.view.hold():
            return await self._ask(call)

    async def _ask(self, call: PendingCall) -> Approve | Deny | Edit:
        where = f" [{call.branch}]" if "." in call.branch else ""
        self.say(f"approve{where} {call_text(call.name, call.path, call.input, 200)}?")
        self.say("  y: run it · n [reason]: deny it · e: edit its arguments")
        while True:
            answer = await self._read("approve› ")
            if answer is None:
                return Deny("no answer (end of input)")
            word, _, rest = answer.partition(" ")
            match word.lower():
                case "y" | "yes":
                    return Approve()
                case "n" | "no":
                    return Deny(rest.strip() or "the user denied it")
                case "e" | "edit":
                    edited = await self._arguments()
                    if edited is not None:
                        return Edit(edited)
                case _:
                    self.say("  answer y, n [reason] or e")

    async def _arguments(self) -> dict[str, object] | None:
        line = await self._read("arguments (a JSON object)› ")
        if line is None:
            return None
        try:
            value = json.loads(line)
        except ValueError as exc:
            self.say(f"  not JSON ({exc}); asking again")
            return None
        if not isinstance(value, dict):
            self.say("  the arguments must be a JSON object; asking again")
            return None
        return cast("dict[str, object]", value)

    async def _read(self, prompt: str) -> str | None:
        line = await read_line(prompt if self.interactive else "")
        if line is not None and not self.interactive:
            self.say(f"{prompt}{line.strip()}")
        return None if line is None else line.strip()


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
