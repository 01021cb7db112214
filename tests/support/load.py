"""Load with faults: many concurrent sessions of a two-tool agent against the emulated provider,
counting what must never happen.

Each session runs ``agent.run(..., session=id)`` once through a real driver (the three APIs in
turn, or one) against a loopback provider — normally ``ProviderServerProcess(faults=...)``, which
injects the faults. The emulated provider answers a new conversation with two parallel tool calls
and the tool results with a text. Afterwards every session is checked: it returned the answer,
its stored history is complete (one run, its steps in order, the end ``finished`` with that
answer, every action that ran recorded in a committed step), and its lease is released. Tool
invocations are counted by idempotency key and by (session, tool, argument): any beyond the first
is a duplicated action. Tasks still running afterwards are leaked tasks.

Used by ``tests/reliability/test_load.py`` (200 sessions in CI) and ``benchmarks/bench_load.py``
(10,000 sessions).

``run_cancel_load`` starts many session runs that wait in their model call, cancels them all at
once and measures how long until every run has returned; then checks that each run raised the
cancellation (not a store error), recorded its end as ``cancelled`` and released its lease.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.lowlevel

from agentloop import Agent, RetryPolicy, Tool, ToolContext, tool
from agentloop.sessions import InMemoryStore, RunEndRecord, RunRecord, SessionStore, StepRecord
from agentloop.testing import FunctionModel
from agentloop.testing._scenarios import _ANSWER
from agentloop.tools._context import call_identity

__all__ = ["LOAD_RETRY", "CancelReport", "LoadReport", "run_cancel_load", "run_load"]

APIS = ("openai-chat", "openai-responses", "anthropic")
ANSWER = _ANSWER
LOAD_RETRY = RetryPolicy(max_attempts=10, initial_wait=0.1, max_wait=2.0, max_retry_after=5.0)
"""Retries for the load: with ~7% of requests faulty, four attempts would fail one model call
in about 40,000; ten make that about one in 10^12."""


@dataclass
class LoadReport:
    """What a load run saw. ``lost`` sessions did not return the answer or have an incomplete
    stored history; ``duplicated`` counts tool invocations beyond the first of an action."""

    sessions: int
    answered: int = 0
    lost: int = 0
    actions: int = 0
    duplicated: int = 0
    tasks_leaked: int = 0
    model_requests: int = 0
    seconds: float = 0.0
    errors: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (
            self.answered == self.sessions
            and self.lost == 0
            and self.duplicated == 0
            and self.tasks_leaked == 0
        )


class _Ledger:
    """Every tool invocation, by idempotency key and by (session, tool, argument)."""

    def __init__(self) -> None:
        self.by_key: Counter[str] = Counter()
        self.by_call: Counter[tuple[str, str, str]] = Counter()
        self.by_session: dict[str, set[str]] = {}

    def tools(self) -> list[Tool]:
        ledger = self

        @tool
        async def weather(ctx: ToolContext, query: str) -> str:
            """The weather for a query."""
            ledger.record(ctx, "weather", query)
            await anyio.lowlevel.checkpoint()
            return f"sunny in {query}"

        @tool
        async def clock(ctx: ToolContext, query: str) -> str:
            """The time for a query."""
            ledger.record(ctx, "clock", query)
            await anyio.lowlevel.checkpoint()
            return f"noon in {query}"

        return [weather, clock]

    def record(self, ctx: ToolContext, name: str, arg: str) -> None:
        session = ctx.session_id or "-"
        self.by_key[ctx.idempotency_key] += 1
        self.by_call[(session, name, arg)] += 1
        self.by_session.setdefault(session, set()).add(ctx.idempotency_key)

    def duplicated(self) -> int:
        extra_keys = sum(n - 1 for n in self.by_key.values() if n > 1)
        extra_calls = sum(n - 1 for n in self.by_call.values() if n > 1)
        return max(extra_keys, extra_calls)


def _make_model(api: str, url: str, max_connections: int) -> Any:
    if api == "anthropic":
        from agentloop.models.anthropic import AnthropicModel

        return AnthropicModel(
            "emulated", base_url=url, api_key="load-key", max_connections=max_connections
        )
    from agentloop.models.openai import OpenAIChatModel, OpenAIResponsesModel

    cls = OpenAIChatModel if api == "openai-chat" else OpenAIResponsesModel
    return cls(
        "emulated", base_url=url + "/v1", api_key="load-key", max_connections=max_connections
    )


async def _task_ids() -> set[int]:
    await anyio.lowlevel.checkpoint()
    return {t.id for t in anyio.get_running_tasks()}


async def run_load(
    url: str,
    *,
    sessions: int,
    apis: tuple[str, ...] = APIS,
    store: SessionStore | None = None,
    max_connections: int = 256,
    retry: RetryPolicy = LOAD_RETRY,
    prefix: str = "load",
) -> LoadReport:
    """Run ``sessions`` concurrent sessions against the provider at ``url`` and check them."""
    report = LoadReport(sessions=sessions)
    ledger = _Ledger()
    store = store if store is not None else InMemoryStore()
    models = {api: _make_model(api, url, max_connections) for api in apis}
    agents = {
        api: Agent(model, tools=ledger.tools(), store=store, retry=retry, tool_mode="native")
        for api, model in models.items()
    }
    answers: dict[str, Any] = {}
    before = await _task_ids()
    start = time.perf_counter()
    try:

        async def one(i: int) -> None:
            session = f"{prefix}-{i}"
            try:
                result = await agents[apis[i % len(apis)]].run("weather and time?", session=session)
            except Exception as exc:
                report.errors[type(exc).__name__] += 1
                if len(report.problems) < 10:
                    report.problems.append(f"{session}: {type(exc).__name__}: {exc}")
                return
            answers[session] = result
            report.model_requests += result.usage.requests

        async with anyio.create_task_group() as tg:
            for i in range(sessions):
                tg.start_soon(one, i)
        report.seconds = time.perf_counter() - start
    finally:
        with anyio.CancelScope(shield=True):
            for model in models.values():
                await model.aclose()
    with anyio.move_on_after(2.0):
        while await _task_ids() - before:  # noqa: ASYNC110 - polling the loop's task list
            await anyio.sleep(0.01)
    report.tasks_leaked = len(await _task_ids() - before)
    report.actions = sum(ledger.by_key.values())
    report.duplicated = ledger.duplicated()
    for i in range(sessions):
        session = f"{prefix}-{i}"
        problem = await _check_session(store, session, answers.get(session), ledger)
        if problem is None:
            report.answered += 1
        else:
            report.lost += 1
            if len(report.problems) < 10:
                report.problems.append(f"{session}: {problem}")
    return report


async def _check_session(
    store: SessionStore, session_id: str, result: Any, ledger: _Ledger
) -> str | None:
    """Why the session is not complete, or None."""
    if result is None:
        return "the run raised"
    if result.error is not None or result.text != ANSWER:
        return f"no answer: {result.error or result.text!r}"
    session = await store.get(session_id)
    if session is None:
        return "the session is gone"
    if session.lease is not None:
        return "its lease was not released"
    runs = [r for r in session.history if isinstance(r, RunRecord)]
    steps = [r for r in session.history if isinstance(r, StepRecord)]
    ends = [r for r in session.history if isinstance(r, RunEndRecord)]
    if len(runs) != 1 or len(ends) != 1 or ends[0].status != "finished":
        return f"history has {len(runs)} runs and ends {[e.status for e in ends]}"
    if ends[0].output != ANSWER or session.history[-1] is not ends[0]:
        return "the end record does not close the run with its answer"
    if [s.index for s in steps] != list(range(len(steps))) or len(steps) != len(result.steps):
        return f"steps {[s.index for s in steps]} for {len(result.steps)} run steps"
    committed = {
        key for s in steps for key in step_keys(session_id, s.run_id, s.index, _actions(s.step))
    }
    ran = ledger.by_session.get(session_id, set())
    if not ran <= committed:
        return f"actions ran but are not in the history: {sorted(ran - committed)}"
    return None


def step_keys(session_id: str, run_id: str, index: int, actions: list[dict[str, Any]]) -> list[str]:
    """The idempotency keys of a stored step's actions, as ``ToolContext`` makes them: equal
    calls of one reply told apart by their ordinal."""
    seen: Counter[str] = Counter()
    keys = []
    for action in actions:
        what = call_identity(action["name"], action.get("path"), action["input"])
        keys.append(f"{session_id}:{run_id}:{index}:{what}:{seen[what]}")
        seen[what] += 1
    return keys


def _actions(step: dict[str, Any]) -> list[dict[str, Any]]:
    """A stored step's own and carried actions."""
    return [*(step.get("actions") or []), *(step.get("carried") or [])]


@dataclass
class CancelReport:
    """What cancelling ``sessions`` waiting runs at once did. ``seconds`` runs from the cancel
    to the last run returning; ``cancelled`` runs raised the cancellation; ``errors`` counts
    what others raised instead; ``no_end`` runs have no ``cancelled`` end record and
    ``leased`` sessions still hold a lease afterwards."""

    sessions: int
    seconds: float = 0.0
    start_seconds: float = 0.0
    cancelled: int = 0
    no_end: int = 0
    leased: int = 0
    errors: Counter[str] = field(default_factory=Counter)

    @property
    def ok(self) -> bool:
        return self.cancelled == self.sessions and not self.errors and not self.no_end


async def run_cancel_load(
    store: SessionStore, *, sessions: int, prefix: str = "cancel", lease_ttl: float = 30.0
) -> CancelReport:
    """Start ``sessions`` runs that wait in their model call, cancel them all at once."""
    report = CancelReport(sessions=sessions)
    waiting = 0
    all_waiting = anyio.Event()

    async def reply(request: Any) -> str:
        nonlocal waiting
        waiting += 1
        if waiting == sessions:
            all_waiting.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    agent = Agent(FunctionModel(reply), store=store, lease_ttl=lease_ttl)
    cancelled = anyio.get_cancelled_exc_class()

    async def one(i: int) -> None:
        try:
            await agent.run("wait", session=f"{prefix}-{i}")
        except cancelled:
            report.cancelled += 1
            raise
        except Exception as exc:
            report.errors[type(exc).__name__] += 1

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for i in range(sessions):
            tg.start_soon(one, i)
        await all_waiting.wait()
        report.start_seconds = time.perf_counter() - start
        start = time.perf_counter()
        tg.cancel_scope.cancel()
    report.seconds = time.perf_counter() - start
    for i in range(sessions):
        session = await store.get(f"{prefix}-{i}")
        if session is None:
            report.no_end += 1
            continue
        ends = [r for r in session.history if isinstance(r, RunEndRecord)]
        report.no_end += [e.status for e in ends] != ["cancelled"]
        report.leased += session.lease is not None
    return report
