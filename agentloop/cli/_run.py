"""``agentloop run PROMPT``: one run against a real model, shown live or as JSON lines."""

from __future__ import annotations

import sys
import uuid
from contextlib import AsyncExitStack
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

from .. import Agent, Plain, RetryPolicy, RunError, UserError
from ._follow import Style, follow, make_view
from ._setup import default_store_url, load_tools, make_model, open_store, shown_url
from ._track import Tracker

if TYPE_CHECKING:
    from ..sessions import SessionStore

AGENT_NAME = "agent"


@dataclass(frozen=True, kw_only=True, slots=True)
class AgentOptions:
    """What ``run`` and ``chat`` share: the model, its tools and limits."""

    model: str | None = None
    base_url: str | None = None
    tools: tuple[str, ...] = ()
    mode: Literal["native", "react", "auto"] = "auto"
    max_steps: int = 20
    instructions: str | None = None
    retries: int = 3
    goals: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class RunOptions:
    prompt: str
    agent: AgentOptions = field(default_factory=AgentOptions)
    goal: str | None = None
    session: str | None = None
    store: str | None = None
    style: Style = "auto"


def build_agent(options: AgentOptions) -> Agent:
    """The agent the options describe (raises ``UserError`` on a bad model or tool path)."""
    model = make_model(options.model, base_url=options.base_url)
    agent = Agent(
        model,
        name=AGENT_NAME,
        # Typed on a command line, with no variables to fill in: text, not a template.
        instructions=Plain(options.instructions) if options.instructions else None,
        tools=load_tools(options.tools),
        tool_mode=options.mode,
        max_steps=options.max_steps,
        retry=RetryPolicy(max_attempts=options.retries + 1),
    )
    if not options.goals:
        return agent
    from ..goals import setup_goal  # only here: with pydantic, a third of the command's start

    return setup_goal(agent)


def store_url(url: str | None, *, session: str | None, needed: bool) -> str | None:
    """``--store``; else the default SQLite file for a named session; else memory if needed."""
    if url:
        return url
    if session:
        return default_store_url()
    return "memory://" if needed else None


async def enter_store(stack: AsyncExitStack, url: str) -> SessionStore:
    """Open the store now, so that a store that cannot be opened (a bad URL, a server that is
    down) is one clear error, exit status 2."""
    store = open_store(url)
    try:
        return await stack.enter_async_context(store)
    except UserError:
        raise
    except Exception as exc:
        detail = " ".join(str(exc).split()) or type(exc).__name__
        raise UserError(f"cannot open the session store {shown_url(url)}: {detail}") from None


async def run_command(options: RunOptions) -> int:
    agent = build_agent(replace(options.agent, goals=True) if options.goal else options.agent)
    session = options.session
    url = store_url(options.store, session=session, needed=options.goal is not None)
    if url is not None and session is None:
        session = f"run-{uuid.uuid4().hex[:12]}"
    tracker = Tracker()
    async with AsyncExitStack() as stack:
        stack.push_async_callback(agent.resolved_model().aclose)
        store = await enter_store(stack, url) if url is not None else None
        if options.goal:
            if store is None or session is None:  # store_url(needed=True) made both
                raise RuntimeError("--goal needs a session store")
            from ..goals import start_goal

            tracker.goal = await start_goal(
                store, session_id=session, objective=options.goal, agent=agent
            )
        view = make_view(options.style, tracker)
        async with agent.stream(options.prompt, session=session, store=store) as run:
            await follow(run, view, tracker)
        result = run.result  # raises what the run raised (a model error after retries, …)
    try:
        result.unwrap()  # a run that waits on decisions has no answer either
    except RunError as exc:
        print(f"agentloop: error: the run ended without an answer: {exc}", file=sys.stderr)
        return 1
    return 0
