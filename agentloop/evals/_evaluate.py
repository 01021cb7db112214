"""``evaluate``: every case of a dataset, concurrently, each in isolation, into a ``Report``."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator, Sequence
from datetime import UTC, datetime
from typing import Any, TypeAlias

import anyio

from .. import (
    ActionArgsDelta,
    Agent,
    AnswerDelta,
    Event,
    ImagePart,
    Message,
    Model,
    PriceTable,
    RunResult,
    TextDelta,
    ThoughtDelta,
    UserError,
)
from ..sessions import InMemoryStore, SessionStore
from ._base import Evaluator
from ._case import Case, SimulatedUser, UserInput
from ._context import EvalContext, SpanRecord
from ._dataset import Dataset
from ._report import CaseReport, CaseRun, Report
from ._result import EvalResult
from ._spans import SpanCollector

# A target other than an Agent: ``(message, session) -> RunResult``, one turn of a case on
# the session named (a fresh one per run of a case).
Target: TypeAlias = Callable[[UserInput, str], Awaitable[RunResult[Any]]]

# Events kept for evaluators: the deltas are left out, so a long answer costs nothing.
_DELTAS = (TextDelta, ThoughtDelta, AnswerDelta, ActionArgsDelta)
MAX_EVENTS_PER_CASE = 10_000

USER_GUIDANCE = """\
You are the user in this conversation with an AI assistant: the assistant's messages are your
input. Write only your next message to it, in the first person, as the user would. When what
you wanted is done, or you cannot get further, reply with {stop} alone."""


def durable(agent: Any, client: Any) -> Target:
    """A target for a durable agent on Temporal (``agentloop.temporal.TemporalAgent``): each
    turn is ``agent.run(client, message, session=...)``, the session in the workers' store.
    As for an ``Agent``, a case of one message runs without a session when the agent has no
    store.

    Args:
        agent: The ``TemporalAgent``.
        client: A Temporal client (``agentloop.temporal.connect``).
    """
    return _Durable(agent, client)


class _Durable:
    def __init__(self, agent: Any, client: Any) -> None:
        self.agent = agent
        self.client = client
        self.sessionless = getattr(agent, "agent", None) is not None and agent.agent.store is None

    async def __call__(self, message: UserInput, session: str | None) -> RunResult[Any]:
        result: RunResult[Any] = await self.agent.run(self.client, message, session=session)
        return result


async def evaluate(
    target: Agent[Any, Any] | Target,
    dataset: Dataset,
    *,
    evaluators: Sequence[Evaluator] = (),
    concurrency: int = 8,
    repeat: int = 1,
    timeout: float | None = 120.0,  # noqa: ASYNC109 - each case's own deadline
    prices: PriceTable | None = None,
    user_model: Model | str | None = None,
    judge_model: Model | str | None = None,
    deps: Any = None,
    name: str | None = None,
    on_run: Callable[[Case, CaseRun], None] | None = None,
) -> Report:
    """Run every case ``repeat`` times, ``concurrency`` at a time, and score each run.

    Each run of a case is isolated, with its own deadline: a case of several turns (or a
    simulated user) runs on a fresh session (in the agent's store, else in one in memory for
    this evaluation); a case of one message, too, when the agent has a store, else without a
    session (it has nothing to remember). A case that fails, raises or times out is recorded as
    failed; the others go on. Cancelling ``evaluate`` cancels every run.

    Args:
        target: The agent, or ``(message, session) -> RunResult`` (``durable(...)`` for a
            ``TemporalAgent``).
        dataset: The cases, and the evaluators of every case.
        evaluators: More evaluators, after the dataset's (any ``Evaluator``, ``Check``).
        concurrency: Runs at once.
        repeat: Runs of each case: its pass rate shows flaky behaviour.
        timeout: Seconds each run of a case may take, all its turns (``None``: no limit).
        prices: Prices the runs (``EvalContext.cost``, ``Budget(max_cost=...)``, reports).
        user_model: The model of simulated users that name none.
        judge_model: The model of ``LLMJudge`` evaluators that name none.
        deps: Passed to each run of an ``Agent`` (``ToolContext.deps``).
        name: Names the report (default: the dataset's name).
        on_run: Called after each run of a case (progress bars).
    """
    if concurrency < 1 or repeat < 1:
        raise UserError("evaluate: concurrency and repeat must be at least 1")
    if timeout is not None and not timeout > 0:
        raise UserError("evaluate: timeout must be positive (or None)")
    checks: list[Evaluator] = [*dataset.evaluators, *evaluators]
    names = [e.name for e in checks]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise UserError(f"evaluators share a name ({', '.join(twice)}): give each a label")
    runner = _Runner(
        checks=checks,
        needs_sessions=any(c.user is not None or len(c.messages()) > 1 for c in dataset.cases),
        timeout=timeout,
        prices=prices,
        user_model=user_model,
        judge_model=judge_model,
        on_run=on_run,
    )
    started = datetime.now(UTC)
    clock = time.perf_counter()
    runs: list[list[CaseRun | None]] = [[None] * repeat for _ in dataset.cases]
    # Every case once, then every case again (repeat): a bounded number of workers take the
    # jobs in turn, so memory follows the concurrency, not the number of cases.
    jobs = ((i, r) for r in range(repeat) for i in range(len(dataset.cases)))
    async with runner.prepared(target, deps) as play:

        async def worker() -> None:
            for i, r in jobs:  # shared: each job is taken once
                runs[i][r] = await runner.run_case(dataset.cases[i], r, play)

        async with anyio.create_task_group() as tg:
            for _ in range(min(concurrency, len(dataset.cases) * repeat)):
                tg.start_soon(worker)
    return Report(
        name=name or dataset.name,
        dataset=dataset.name,
        started_at=started.isoformat(timespec="seconds"),
        duration=time.perf_counter() - clock,
        repeat=repeat,
        evaluators=names,
        cases=[
            CaseReport(name=c.name, tags=list(c.tags), runs=[r for r in rs if r is not None])
            for c, rs in zip(dataset.cases, runs, strict=True)
        ],
    )


Play: TypeAlias = Callable[
    [UserInput, "str | None", "list[Event] | None"], Awaitable[RunResult[Any]]
]


class _Runner:
    def __init__(
        self,
        *,
        checks: list[Evaluator],
        needs_sessions: bool,
        timeout: float | None,
        prices: PriceTable | None,
        user_model: Model | str | None,
        judge_model: Model | str | None,
        on_run: Callable[[Case, CaseRun], None] | None,
    ) -> None:
        self.checks = checks
        self.needs_sessions = needs_sessions
        self.timeout = timeout
        self.prices = prices
        self.user_model = user_model
        self.judge_model = judge_model
        self.on_run = on_run
        self.needs_events = any(c.needs_events for c in checks)
        self.spans = SpanCollector() if any(c.needs_spans for c in checks) else None
        self.output_type: Any = None
        # A case of one message remembers nothing: without a store of its own, the agent runs
        # it without a session (isolated all the same, at half the cost).
        self.sessionless = False
        # Simulated users' agents, by instructions and model; those on a model string are
        # this evaluation's to close (a Model given in code stays its owner's).
        self.users: dict[tuple[str, str | int], tuple[Agent[Any, Any], bool]] = {}

    @contextlib.asynccontextmanager
    async def prepared(self, target: Agent[Any, Any] | Target, deps: Any) -> AsyncGenerator[Play]:
        """How one turn is played, with the store and simulated users for the evaluation."""
        async with contextlib.AsyncExitStack() as stack:
            stack.callback(self._shutdown_spans)
            stack.push_async_callback(self._close_users)
            if not isinstance(target, Agent):
                if not callable(target):
                    raise UserError(
                        f"evaluate needs an Agent or (message, session) -> RunResult, not "
                        f"{type(target).__name__} (a TemporalAgent: evals.durable(agent, client))"
                    )
                if isinstance(target, _Durable):
                    self.sessionless = target.sessionless
                    durable_target = target

                    async def play_durable(
                        message: UserInput, session: str | None, events: list[Event] | None
                    ) -> RunResult[Any]:
                        return await durable_target(message, session)

                    yield play_durable
                    return
                function = target

                async def play_function(
                    message: UserInput, session: str | None, events: list[Event] | None
                ) -> RunResult[Any]:
                    return await function(message, session or f"eval-{uuid.uuid4().hex}")

                yield play_function
                return
            agent: Agent[Any, Any] = target
            self.output_type = agent.output_type
            self.sessionless = agent.store is None
            if self.spans is not None:
                agent = agent.replace(instrument=self.spans.instrumentation)
            store: SessionStore | None = agent.store
            if store is None and self.needs_sessions:
                store = await stack.enter_async_context(InMemoryStore())

            async def play_agent(
                message: UserInput, session: str | None, events: list[Event] | None
            ) -> RunResult[Any]:
                on = store if session is not None else None
                if events is None:
                    return await agent.run(message, session=session, store=on, deps=deps)
                async with agent.stream(message, session=session, store=on, deps=deps) as run:
                    async for event in run:
                        if not isinstance(event, _DELTAS) and len(events) < MAX_EVENTS_PER_CASE:
                            events.append(event)
                return run.result

            yield play_agent

    def _shutdown_spans(self) -> None:
        if self.spans is not None:
            self.spans.shutdown()

    async def _close_users(self) -> None:
        users, self.users = list(self.users.values()), {}
        for user, owned in users:
            if owned:
                await user.aclose()

    async def run_case(self, case: Case, repetition: int, play: Play) -> CaseRun:
        alone = case.user is None and len(case.messages()) == 1
        session = None if alone and self.sessionless else f"eval-{uuid.uuid4().hex}"
        events: list[Event] | None = [] if self.needs_events else None
        results: list[RunResult[Any]] = []
        transcript: list[tuple[str, str]] = []
        spans: list[SpanRecord] | None = None
        error: str | None = None
        start = anyio.current_time()
        try:
            # The case's own deadline (a TimeoutError the run raises is an error like another).
            with anyio.move_on_after(self.timeout) as deadline, self._case_spans(case) as spans:
                await self._converse(case, session, play, events, results, transcript)
            if deadline.cancelled_caught:
                error = f"timed out after {self.timeout:g}s"
        except Exception as exc:
            error = _describe(exc)
        latency = anyio.current_time() - start
        cost, complete = self._cost(results)
        ctx = EvalContext(
            case=case,
            results=tuple(results),
            transcript=tuple(transcript),
            latency=latency,
            cost=cost,
            cost_complete=complete,
            output_type=self.output_type,
            events=events,
            spans=spans,
            repetition=repetition,
            judge_model=self.judge_model,
        )
        scores = [] if error is not None else await self._score(ctx)
        run = CaseRun.of(ctx, scores, error)
        if self.on_run is not None:
            self.on_run(case, run)
        return run

    @contextlib.contextmanager
    def _case_spans(self, case: Case) -> Generator[list[SpanRecord] | None]:
        if self.spans is None:
            yield None
            return
        with self.spans.case(case.name) as records:
            yield records

    def _cost(self, results: list[RunResult[Any]]) -> tuple[float | None, bool]:
        if self.prices is None:
            return None, True
        costs = [self.prices.cost(r) for r in results]
        return float(sum(c.total for c in costs)), all(c.complete for c in costs)

    async def _score(self, ctx: EvalContext) -> list[EvalResult]:
        scores: list[EvalResult] = []
        for check in self.checks:
            if not check.applies_to(ctx.case):
                continue
            found: EvalResult | None = None
            try:
                with anyio.move_on_after(self.timeout) as deadline:
                    found = await check.evaluate(ctx)
                if deadline.cancelled_caught:
                    found = EvalResult.of(check.name, False, f"timed out after {self.timeout:g}s")
            except Exception as exc:
                found = EvalResult.of(check.name, False, f"raised {_describe(exc)}")
            if found is not None:
                scores.append(found)
        return scores

    async def _converse(
        self,
        case: Case,
        session: str | None,
        play: Play,
        events: list[Event] | None,
        results: list[RunResult[Any]],
        transcript: list[tuple[str, str]],
    ) -> None:
        user = case.user
        if user is None:
            for fixed in case.messages():
                result = await play(fixed, session, events)
                results.append(result)
                transcript += [("user", text_of(fixed)), ("agent", result.text or "")]
                if not result.ok:
                    return  # a failed turn ends the conversation
            return
        message: UserInput | None = case.input
        if message is None:
            message = await self._user_says(user, transcript)
        for turn in range(user.max_turns):
            if message is None:
                return
            result = await play(message, session, events)
            results.append(result)
            transcript += [("user", text_of(message)), ("agent", result.text or "")]
            if not result.ok or turn == user.max_turns - 1:
                return
            if user.until is not None and user.until(tuple(transcript)):
                return
            message = await self._user_says(user, transcript)

    async def _user_says(
        self, user: SimulatedUser, transcript: list[tuple[str, str]]
    ) -> str | None:
        """The simulated user's next message (``None``: it said its stop phrase)."""
        model = user.model or self.user_model
        if model is None:
            raise UserError(
                "a simulated user needs a model: SimulatedUser(model=...) or "
                "evaluate(user_model=...)"
            )
        key = (user.instructions + "\0" + user.stop, model if isinstance(model, str) else id(model))
        found = self.users.get(key)
        if found is None:
            agent = Agent(
                model,
                name="simulated_user",
                instructions=f"{user.instructions}\n\n{USER_GUIDANCE.format(stop=user.stop)}",
                max_steps=1,
            )
            found = self.users[key] = (agent, isinstance(model, str))
        agent = found[0]
        # The roles swap: the agent's replies are the simulated user's input.
        memory = [
            Message.assistant(text) if role == "user" else Message.user(text)
            for role, text in transcript[:-1]
        ]
        last = transcript[-1][1] if transcript else "(Start the conversation.)"
        result = await agent.run(last, memory=memory)
        text = (result.text or "").strip()
        if not text or user.stop in text:
            return None
        return text


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def text_of(message: UserInput) -> str:
    """A message as text: its text parts, and a placeholder for each image or file."""
    if isinstance(message, str):
        return message
    return " ".join(
        p if isinstance(p, str) else "[image]" if isinstance(p, ImagePart) else "[file]"
        for p in message
    )
