"""Keys that hold with real providers: a committed reply is never asked again, so resume repeats
its actions' idempotency keys even when the provider mints fresh call ids; and ``run_key`` makes
a whole run idempotent within its session."""

from __future__ import annotations

import uuid
from pathlib import Path

import anyio
import pytest

from agentloop import Agent, ModelRequest, NothingToResume, ToolContext, UserError, tool
from agentloop.models import ToolResultPart
from agentloop.sessions import InMemoryStore, ReplyRecord, SessionStore, SQLiteStore
from agentloop.testing import FunctionModel, Reply, call


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path):
    made: SessionStore = (
        InMemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "s.db")
    )
    async with made:
        yield made


class Ledger:
    """A tool with side effects that deduplicates by idempotency key."""

    def __init__(self, *, block_first: bool = False) -> None:
        self.keys: list[str] = []
        self.acted: list[str] = []
        self.block_first = block_first
        self.entered = anyio.Event()
        self.history_at_start: list[list[str]] = []

    def tool(self, store: SessionStore) -> object:
        @tool(side_effects=True)
        async def charge(ctx: ToolContext, amount: int) -> str:
            """Charge the card."""
            session = await store.get(ctx.session_id or "")
            assert session is not None
            self.history_at_start.append([r.type for r in session.history])
            self.keys.append(ctx.idempotency_key)
            if ctx.idempotency_key not in self.acted:
                self.acted.append(ctx.idempotency_key)
            if self.block_first and len(self.keys) == 1:
                self.entered.set()
                await anyio.sleep_forever()
            return f"charged {amount}"

        return charge


def minting_model(calls: list[str]) -> FunctionModel:
    """Mints a fresh call id on every call, as OpenAI (``call_…``) and Anthropic do."""

    def reply(request: ModelRequest) -> Reply | str:
        calls.append("model")
        if any(isinstance(p, ToolResultPart) for m in request.messages for p in m.parts):
            return "paid"
        return Reply(calls=[call("charge", {"amount": 5}, id=f"call_{uuid.uuid4().hex}")])

    return FunctionModel(reply)


async def _cancel_when(event: anyio.Event, coro_fn: object) -> None:
    async with anyio.create_task_group() as tg:

        async def run() -> None:
            await coro_fn()  # type: ignore[operator]

        tg.start_soon(run)
        await event.wait()
        tg.cancel_scope.cancel()


async def test_resume_repeats_the_committed_reply_with_the_same_keys(store: SessionStore) -> None:
    calls: list[str] = []
    ledger = Ledger(block_first=True)
    agent = Agent(minting_model(calls), tools=[ledger.tool(store)], store=store)  # type: ignore[list-item]
    await _cancel_when(ledger.entered, lambda: agent.run("pay", session="s"))
    assert calls == ["model"]
    result = await agent.resume(session="s")
    assert result.output == "paid"
    assert calls == ["model", "model"]  # the committed step was not asked again
    assert len(ledger.keys) == 2 and ledger.keys[0] == ledger.keys[1]
    assert ledger.acted == [ledger.keys[0]]


async def test_a_tool_with_side_effects_starts_only_after_its_reply_is_committed(
    store: SessionStore,
) -> None:
    ledger = Ledger()
    agent = Agent(minting_model([]), tools=[ledger.tool(store)], store=store)  # type: ignore[list-item]
    result = await agent.run("pay", session="s")
    assert result.output == "paid"
    assert ledger.history_at_start == [["run", "reply"]]
    session = await store.get("s")
    assert session is not None
    (reply,) = [r for r in session.history if isinstance(r, ReplyRecord)]
    assert reply.index == 0 and reply.step["parts"]


async def test_tools_without_side_effects_add_no_commit() -> None:
    @tool
    async def look(q: str) -> str:
        """Look."""
        return q

    store = InMemoryStore()
    model = FunctionModel(
        lambda r: "ok" if len(r.messages) > 2 else Reply(calls=[call("look", {"q": "x"})])
    )
    await Agent(model, tools=[look], store=store).run("x", session="s")
    session = await store.get("s")
    assert session is not None
    assert [r.type for r in session.history] == ["run", "step", "step", "run_end"]


async def test_a_plain_tools_key_survives_a_crash_with_fresh_provider_call_ids(
    store: SessionStore,
) -> None:
    """A tool without ``side_effects=True`` is asked again after a crash (its reply was not
    committed), and the provider mints new call ids: the key is made of the step, the tool, its
    canonical arguments and its place among equal calls, so it is the same, and a tool that
    deduplicates by it acts once. Two equal calls of one reply still get two keys."""
    keys: list[str] = []
    acted: set[str] = set()
    entered = anyio.Event()

    @tool
    async def notify(ctx: ToolContext, who: str, text: str) -> str:
        """Send a notice."""
        keys.append(ctx.idempotency_key)
        acted.add(ctx.idempotency_key)
        if len(keys) == 1:
            entered.set()
            await anyio.sleep_forever()
        return "sent"

    calls: list[str] = []

    def reply(request: ModelRequest) -> Reply | str:
        calls.append("model")
        if any(isinstance(p, ToolResultPart) for m in request.messages for p in m.parts):
            return "done"
        args = {"text": "hi", "who": "ann"}
        reordered = {"who": "ann", "text": "hi"}  # the same arguments, in another order
        return Reply(
            calls=[
                call("notify", args if len(calls) == 1 else reordered, id=f"c_{uuid.uuid4().hex}"),
                call("notify", {"who": "bob", "text": "hi"}, id=f"c_{uuid.uuid4().hex}"),
            ]
        )

    agent = Agent(FunctionModel(reply), tools=[notify], store=store)
    await _cancel_when(entered, lambda: agent.run("tell them", session="s"))
    result = await agent.resume(session="s")
    assert result.output == "done"
    assert calls == ["model", "model", "model"]  # the uncommitted step was asked again
    assert keys[0] in keys[1:]  # ann's notice: the same key after the crash
    assert len(acted) == 2  # ann's and bob's, each acted once


async def test_equal_calls_of_one_reply_get_distinct_keys() -> None:
    keys: list[str] = []

    @tool
    async def ping(ctx: ToolContext, n: int) -> str:
        """Ping."""
        keys.append(ctx.idempotency_key)
        return "pong"

    model = FunctionModel(
        lambda r: (
            "ok"
            if len(r.messages) > 2
            else Reply(
                calls=[call("ping", {"n": 1}), call("ping", {"n": 1}), call("ping", {"n": 2})]
            )
        )
    )
    await Agent(model, tools=[ping], store=InMemoryStore()).run("x", session="s")
    assert len(set(keys)) == 3 and all(k.startswith("s:") for k in keys)


def test_ordinals_count_equal_calls_in_reply_order() -> None:
    """A call's ordinal is how many equal calls (tool, path, arguments in any key order) came
    before it in its reply; the digest is taken only for a tool called more than once."""
    from agentloop._actions import Ordinals
    from agentloop._steps import Action
    from agentloop.tools._context import call_identity

    calls = [
        ("ping", None, {"n": 1, "m": 2}),
        ("pong", None, {"n": 1, "m": 2}),
        ("ping", None, {"m": 2, "n": 1}),
        ("ping", "x", {"n": 1, "m": 2}),
        ("ping", None, {"n": 3}),
        ("ping", None, {"n": 1, "m": 2}),
        ("pong", None, {"n": 1, "m": 2}),
    ]
    ordinals = Ordinals()
    found = [
        ordinals.next(Action(tag=str(i), name=n, path=p, input=a, attempt=1))
        for i, (n, p, a) in enumerate(calls)
    ]
    digests = [call_identity(n, p, a) for n, p, a in calls]
    assert found == [digests[:i].count(d) for i, d in enumerate(digests)] == [0, 0, 1, 0, 0, 2, 1]


# -- run keys -------------------------------------------------------------------------------------


async def test_a_run_key_seen_before_returns_the_first_runs_result(store: SessionStore) -> None:
    calls: list[str] = []
    ledger = Ledger()
    agent = Agent(minting_model(calls), tools=[ledger.tool(store)], store=store)  # type: ignore[list-item]
    first = await agent.run("pay", session="s", run_key="order-1")
    again = await agent.run("pay", session="s", run_key="order-1")
    assert calls == ["model", "model"] and len(ledger.keys) == 1
    assert again.run_id == first.run_id and again.output == first.output == "paid"
    assert [s.index for s in again.steps] == [0, 1]
    other = await agent.run("pay", session="s", run_key="order-2")
    assert other.run_id != first.run_id and len(ledger.keys) == 2


async def test_a_run_key_of_a_failed_run_returns_its_error_and_no_output(
    store: SessionStore,
) -> None:
    """The stored result of a run that ended with an error has no output, as the live one."""
    agent = Agent(FunctionModel(lambda r: "many"), output_type=int, max_steps=1, store=store)
    first = await agent.run("count", session="s", run_key="k")
    again = await agent.run("count", session="s", run_key="k")
    assert first.error is not None and first.error.kind == "output_invalid"
    assert again.run_id == first.run_id and again.error == first.error
    assert (first.output, again.output, again.text) == (None, None, "many")


async def test_a_run_key_of_an_unfinished_run_resumes_it(store: SessionStore) -> None:
    calls: list[str] = []
    ledger = Ledger(block_first=True)
    agent = Agent(minting_model(calls), tools=[ledger.tool(store)], store=store)  # type: ignore[list-item]
    await _cancel_when(ledger.entered, lambda: agent.run("pay", session="s", run_key="k"))
    unfinished = await agent.unfinished_run(session="s")
    assert unfinished is not None and unfinished.run_key == "k"
    result = await agent.run("pay", session="s", run_key="k")
    assert result.run_id == unfinished.run_id and result.output == "paid"
    assert ledger.acted == [ledger.keys[0]] and ledger.keys[0] == ledger.keys[1]
    assert await agent.unfinished_run(session="s") is None


async def test_resume_with_nothing_to_resume_raises_its_own_error(store: SessionStore) -> None:
    agent = Agent(FunctionModel(lambda r: "hi"), store=store)
    assert await agent.unfinished_run(session="nobody") is None
    await agent.run("x", session="s")
    assert await agent.unfinished_run(session="s") is None
    with pytest.raises(NothingToResume):
        await agent.resume(session="s")


async def test_a_run_key_needs_a_session() -> None:
    agent = Agent(FunctionModel(lambda r: "hi"))
    with pytest.raises(UserError, match="run_key needs session"):
        await agent.run("x", run_key="k")
