"""Durable runs that continue as new (Temporal's continue-as-new) at safe points, so that a run
can stream and wait for hours within Temporal's history limits: between two steps, and while
it waits on decisions. ``continue_after`` is forced small here. Callers follow the run by its
workflow id, across the chain; every run of a chain replays."""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentloop import Agent, Approve, Handoff, RunDeadlineExceeded, ToolContext, UserError, tool
from agentloop import _events as ev
from agentloop._waiting import DecisionError
from agentloop.models import ImagePart
from agentloop.sessions import RunEndRecord, RunRecord, SQLiteStore
from agentloop.testing import Reply, ScriptedModel, call
from tests.support.temporal import (
    NO_REUSE_INTERVAL,
    ONE_PARTITION,
    UNTHROTTLED,
    import_temporal,
    start_dev_server,
)

import_temporal()
from temporalio.service import RPCError, RPCStatusCode  # noqa: E402

from agentloop.temporal import (  # noqa: E402
    DurableRunFailed,
    TemporalAgent,
    _carry,
    connect,
    replayer,
    worker,
)
from agentloop.temporal._durable import CONTINUED, DELTAS_SIGNAL, start_of  # noqa: E402
from tests.support.temporal_hold import (  # noqa: E402
    HELD_QUERY,
    REFUSED_QUERY,
    RELEASE_SIGNAL,
    HoldCuts,
    StaleSignals,
)
from tests.test_temporal_payloads import _document, bulky  # noqa: E402

pytestmark = pytest.mark.temporal

ran: Counter[str] = Counter()
keys: list[str] = []


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # Temporal's SDK is asyncio-only


@pytest.fixture(autouse=True)
def _fresh() -> None:
    ran.clear()
    keys.clear()


@tool
async def note(ctx: ToolContext, n: int) -> str:
    """Note a number.

    Args:
        n: The number.
    """
    ran[f"note:{n}"] += 1
    keys.append(ctx.idempotency_key)
    return f"noted {n}"


@tool(requires_approval=True)
async def transfer(amount: int) -> str:
    """Move money.

    Args:
        amount: How much.
    """
    ran[f"transfer:{amount}"] += 1
    return f"sent {amount}"


def _script(steps: int) -> list[Reply]:
    """``steps`` steps of a streamed text and one tool call each, then a streamed answer."""
    replies = [
        Reply(
            timeline=[
                (0.01, f"step {i} "),
                (0.02, "goes on. "),
                (0.03, call("note", {"n": i}, id=f"n{i}")),
                (0.04, ""),
            ]
        )
        for i in range(steps)
    ]
    return [*replies, Reply(timeline=[(0.01, "all "), (0.02, "done.")])]


async def _runs_of(client: Any, run_id: str) -> list[str]:
    """The Temporal run ids of the chain of the run, and how each closed."""
    found = [
        f"{w.run_id}:{w.status.name if w.status else '?'}"
        async for w in client.list_workflows(f"WorkflowId = '{run_id}'")
    ]
    return found


async def _replay_chain(client: Any, durable: TemporalAgent[Any]) -> int:
    """Replay every run of every chain on the durable's task queue; how many there were."""
    count = 0

    async def histories() -> AsyncIterator[Any]:
        nonlocal count
        query = f"TaskQueue = '{durable.task_queue}'"
        async for history in client.list_workflows(query).map_histories():
            count += 1
            yield history

    results = await replayer([durable]).replay_workflows(histories())
    assert results.replay_failures == {}
    return count


@pytest.fixture(scope="module")
def quick_cuts(temporal_target: str) -> Iterator[str]:
    """A dev server of this module's own on which a run continued as new starts at once (the
    suite's holds the next run a second, as production servers do), for the tests whose
    subject is what a cut carries, not the moment between two runs: they cut a run three to
    twelve times. (After the suite's server: it skips, or fails, where none can start.)"""
    server = start_dev_server(*ONE_PARTITION, *UNTHROTTLED, *NO_REUSE_INTERVAL)
    try:
        yield server.target
    finally:
        server.stop()


@asynccontextmanager
async def serving(target: str, durable: TemporalAgent[Any]) -> AsyncIterator[Any]:
    client = await connect(target)
    async with worker(client, [durable], sticky_queue_schedule_to_start_timeout=1.0):
        yield client


def _plain(events: list[ev.Event]) -> list[tuple[str, str]]:
    """The events but text deltas, as what they say but their seq."""
    return [
        (e.type, re.sub(r'"seq":\d+,?', "", e.to_json().replace(e.run_id, "R")))
        for e in events
        if not isinstance(e, ev.TextDelta)
    ]


def _text(events: list[ev.Event]) -> str:
    return "".join(e.text for e in events if isinstance(e, ev.TextDelta))


@pytest.mark.parametrize("session", [False, True], ids=["no-session", "session"])
async def test_a_streamed_run_continues_as_new_and_its_stream_and_result_stay_whole(
    quick_cuts: str, tmp_path: Any, session: bool
) -> None:
    """Eight streamed steps and an answer, cut between steps at least three times: the caller
    sees every event once, seqs 1..n in order, the same events as the run uncut; the result
    (steps, usage) is the uncut run's; the idempotency keys count up across the cuts; every
    run of the chain replays. A session's run goes on from its store, where it ends."""
    queue = f"c-{uuid.uuid4().hex[:8]}"
    async with SQLiteStore(str(tmp_path / "s.db")) as store:

        def agent() -> Agent[Any, str]:
            model = ScriptedModel(_script(8))
            return Agent(model, name="long", tools=[note], store=store if session else None)

        uncut = TemporalAgent(agent(), task_queue=queue)
        cut = TemporalAgent(agent(), task_queue=queue + "-cut", continue_after=20)
        results = []
        streams = []
        chains = []
        for durable, name in ((uncut, "s-uncut"), (cut, "s-cut")):
            async with serving(quick_cuts, durable) as client:
                run = await durable.start(client, "go", session=name if session else None)
                with anyio.fail_after(60):
                    streams.append([e async for e in run])
                    results.append(await run.result())
                chains.append(await _runs_of(client, run.run_id))
                assert await _replay_chain(client, durable) == len(chains[-1])
        if session:
            stored = await store.get("s-cut")
            assert stored is not None and await cut.agent.unfinished_run(session="s-cut") is None
            ends = [r for r in stored.history if isinstance(r, RunEndRecord)]
            assert [(r.status, r.output) for r in ends] == [("finished", "all done.")]
            assert sum(isinstance(r, RunRecord) for r in stored.history) == 1  # one run
    whole, events = streams
    assert len(chains[0]) == 1 and len(chains[1]) >= 4, chains  # three cuts at least
    assert sum(r.endswith("CONTINUED_AS_NEW") for r in chains[1]) == len(chains[1]) - 1
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    # The same events, none twice (a tool's end and its reply's may swap: eager dispatch;
    # text comes in batches as it streams), and the same text.
    assert Counter(_plain(events)) == Counter(_plain(whole))
    assert _text(events) == _text(whole)
    assert [e.type for e in events].count("run_started") == 1
    a, b = results
    assert b.output == a.output == "all done."
    assert len(b.steps) == len(a.steps) == 9
    assert b.usage == a.usage and b.usage_by_model == a.usage_by_model
    assert sum(len(s.actions) for s in b.steps) == 8
    assert [s.index for s in b.steps] == list(range(9))
    assert ran == {f"note:{i}": 2 for i in range(8)}
    uncut_keys, cut_keys = keys[:8], keys[8:]
    assert [k.split(":")[2] for k in cut_keys] == [str(i) for i in range(8)]

    def plain(key: str, run_id: str) -> str:
        return key.replace(run_id, "R").replace("s-uncut", "S").replace("s-cut", "S")

    assert [plain(k, a.run_id) for k in uncut_keys] == [plain(k, b.run_id) for k in cut_keys]


async def test_a_caller_attached_from_the_start_reads_the_earlier_runs_of_the_chain(
    quick_cuts: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each run of the chain holds only its last few events (the tail's bound forced small): a
    fresh caller attached after seq 0 reads the events from the runs before (by their run
    ids), then the latest run's, and ends at the end; from the middle, the rest."""
    monkeypatch.setattr(_carry, "TAIL_BYTES", 2048)
    durable = TemporalAgent(
        Agent(ScriptedModel(_script(4)), name="late", tools=[note]),
        task_queue=f"c-{uuid.uuid4().hex[:8]}",
        continue_after=20,
    )
    async with serving(quick_cuts, durable) as client:
        run = await durable.start(client, "go")
        with anyio.fail_after(60):
            result = await run.result()
            events = [e async for e in durable.attach(await connect(quick_cuts), run.run_id)]
            middle = [e async for e in durable.attach(client, run.run_id, after_seq=events[5].seq)]
        chain = [w async for w in client.list_workflows(f"WorkflowId = '{run.run_id}'")]
        assert len(chain) >= 3
        assert await _replay_chain(client, durable) == len(chain)
        # A run of the chain Temporal no longer keeps (past its retention): refused, saying so.
        gone = durable.attach(client, run.run_id)
        with anyio.fail_after(60), pytest.raises(DurableRunFailed, match="could not be read"):
            await gone._earlier({"previous": str(uuid.uuid4()), "base": 10})
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert events[-1].type == "run_finished" and result.output == "all done."
    assert [e.seq for e in middle] == [e.seq for e in events[6:]]
    assert sum(e.type == "run_started" for e in events) == 1


async def test_a_run_continues_as_new_while_it_waits_and_the_decision_lands(
    temporal_target: str,
) -> None:
    """The run waits on an approval; signals grow its history past ``continue_after``, so it
    continues as new while it waits; the decision, sent by run id, lands in the new run and the
    tool runs once. The stream goes on across the cut, whole."""
    model = ScriptedModel([Reply(calls=[call("transfer", {"amount": 5}, id="pay")]), "paid"])
    durable = TemporalAgent(
        Agent(model, name="patient", tools=[transfer]),
        task_queue=f"c-{uuid.uuid4().hex[:8]}",
        continue_after=20,
    )
    async with serving(temporal_target, durable) as client:
        run = await durable.start(client, "pay")
        seen: list[ev.Event] = []
        with anyio.fail_after(60):
            async for event in run:
                seen.append(event)
                if isinstance(event, ev.RunWaiting):
                    break
            await _continued_while_waiting(client, run)
            waiting = await run.waiting()
            assert waiting is not None and [p.id for p in waiting.pending] == ["pay"]
            await durable.decide(client, run.run_id, {"pay": Approve()})
            seen.extend([e async for e in run])
            result = await run.result()
        assert len(await _runs_of(client, run.run_id)) >= 2
        assert await _replay_chain(client, durable) >= 2
    assert result.output == "paid" and ran == {"transfer:5": 1}
    assert [e.seq for e in seen] == list(range(1, len(seen) + 1))
    assert [e.type for e in seen].count("run_waiting") == 1
    assert seen[-1].type == "run_finished"


async def test_a_decide_sent_during_the_cut_is_sent_again_and_lands_once(
    temporal_target: str,
) -> None:
    """A decide sent as the waiting run continues as new reaches the run before as it closes,
    or the next run before it waits again: either refuses it unrecorded, the caller sends it
    again, and the next run takes it, once. Raced at staggered moments, twelve runs each
    end paid, their tool run once; none refuses the decision. (Before, the next run could say
    it did not wait, about one race in ten.)"""
    model = ScriptedModel(
        [
            r
            for _ in range(12)
            for r in (Reply(calls=[call("transfer", {"amount": 5}, id="pay")]), "paid")
        ]
    )
    durable = TemporalAgent(
        Agent(model, name="racing", tools=[transfer]),
        task_queue=f"c-{uuid.uuid4().hex[:8]}",
        continue_after=20,
    )
    outputs, cuts = [], 0
    async with serving(temporal_target, durable) as client:
        for round in range(12):
            run = await durable.start(client, "pay")
            with anyio.fail_after(60):
                async for event in run:
                    if isinstance(event, ev.RunWaiting):
                        break
                await _decide_as_it_cuts(client, durable, run.run_id, 0.01 * round)
                outputs.append((await run.result()).output)
            cuts += len(await _runs_of(client, run.run_id)) > 1
    assert outputs == ["paid"] * 12 and ran == {"transfer:5": 12}
    assert cuts >= 6, f"the decisions came before the cut in {12 - cuts} of 12 runs"


async def _decide_as_it_cuts(
    client: Any, durable: TemporalAgent[Any], run_id: str, delay: float
) -> None:
    """Acks grow the waiting run's history past ``continue_after`` while, ``delay`` seconds
    in, the decision is sent."""
    handle = client.get_workflow_handle(run_id)

    async def acks() -> None:
        with contextlib.suppress(RPCError):  # the run ended meanwhile
            for _ in range(40):
                await handle.signal("agentloop.ack", 0)

    async with anyio.create_task_group() as tg:
        tg.start_soon(acks)
        await anyio.sleep(delay)
        await durable.decide(client, run_id, {"pay": Approve()})


async def _continued_while_waiting(client: Any, run: Any) -> None:
    """Acks grow the waiting run's history until it continues as new."""
    handle = client.get_workflow_handle(run.run_id)
    first = (await handle.describe()).run_id
    while (await handle.describe()).run_id == first:
        await handle.signal("agentloop.ack", 0)
        await anyio.sleep(0.05)


async def test_a_session_run_continues_as_new_while_it_waits(
    temporal_target: str, tmp_path: Any
) -> None:
    """A session's run waits (its step committed to the store), continues as new, and the
    next run resumes it from the store once decided: the tool runs once, the run ends there."""
    async with SQLiteStore(str(tmp_path / "s.db")) as store:
        model = ScriptedModel([Reply(calls=[call("transfer", {"amount": 7}, id="pay")]), "paid"])
        agent = Agent(model, name="kept", tools=[transfer], store=store)
        durable = TemporalAgent(agent, task_queue=f"c-{uuid.uuid4().hex[:8]}", continue_after=20)
        async with serving(temporal_target, durable) as client:
            run = await durable.start(client, "pay", session="s1", memo={"owner": "ann"})
            with anyio.fail_after(60):
                async for event in run:
                    if isinstance(event, ev.RunWaiting):
                        break
                await _continued_while_waiting(client, run)
                await durable.decide(client, run.run_id, {"pay": Approve()})
                result = await run.result()
            description = await client.get_workflow_handle(run.run_id).describe()
            assert await _replay_chain(client, durable) >= 2
        assert await agent.unfinished_run(session="s1") is None
    assert result.output == "paid" and ran == {"transfer:7": 1}
    assert await description.memo() == {"owner": "ann"}  # the web front's owner goes on


async def test_a_late_deltas_signal_of_the_run_before_is_dropped(temporal_target: str) -> None:
    """A deltas batch numbered as the first model call (always one of the run before the cut),
    arriving while the next run's first call streams, is not taken for that call: model calls
    go on being numbered across the chain."""

    def slow(text: str, *calls: Any) -> Reply:
        return Reply(timeline=[(1.5, text), *((1.55, c) for c in calls), (1.6, "")])

    replies = [
        slow("one ", call("note", {"n": 0}, id="n0")),
        slow("two ", call("note", {"n": 1}, id="n1")),
        slow("three ", call("note", {"n": 2}, id="n2")),
        slow("the real answer"),
    ]
    durable = TemporalAgent(
        Agent(ScriptedModel(replies), name="dropping", tools=[note]),
        task_queue=f"c-{uuid.uuid4().hex[:8]}",
        continue_after=20,
    )
    forged = {"call": 1, "index": 0, "deltas": [["TextPiece", {"text": "INJECTED "}]]}
    async with serving(temporal_target, durable) as client:
        run = await durable.start(client, "go")
        handle = client.get_workflow_handle(run.run_id)
        first: str | None = (await handle.describe()).run_id
        texts: list[str] = []
        with anyio.fail_after(60):
            async for event in run:
                if isinstance(event, ev.StepFinished) and first is not None:
                    for _ in range(20):  # the cut comes as the next step's call starts
                        if (await handle.describe()).run_id != first:
                            break
                        await anyio.sleep(0.05)
                    if (await handle.describe()).run_id != first:
                        await handle.signal(DELTAS_SIGNAL, forged)  # the new run's call streams
                        first = None
                if isinstance(event, ev.TextDelta):
                    texts.append(event.text)
            result = await run.result()
        assert first is None, "the run did not continue as new"
        assert await _replay_chain(client, durable) >= 2
    assert "INJECTED" not in "".join(texts)
    assert result.output == "the real answer"


async def test_the_deadline_counts_across_the_cuts(temporal_target: str) -> None:
    """An agent's ``deadline`` bounds the whole invocation, not each run of the chain: six
    steps of a 1 s tool under a 3.5 s deadline end with ``RunDeadlineExceeded``, cut or not."""

    @tool(name="slow")
    async def slow(n: int) -> str:
        """Take a second.

        Args:
            n: Which.
        """
        await anyio.sleep(1.0)
        return f"slow {n}"

    replies = [Reply(calls=[call("slow", {"n": i}, id=f"s{i}")]) for i in range(6)]
    durable = TemporalAgent(
        Agent(ScriptedModel([*replies, "done"]), name="hurried", tools=[slow], deadline=3.5),
        task_queue=f"c-{uuid.uuid4().hex[:8]}",
        continue_after=20,
    )
    async with serving(temporal_target, durable) as client:
        run = await durable.start(client, "go")
        with anyio.fail_after(60), pytest.raises(RunDeadlineExceeded):
            await run.result()
        assert len(await _runs_of(client, run.run_id)) >= 2
        assert await _replay_chain(client, durable) >= 2


async def test_a_conversation_over_the_payload_limit_is_carried_by_reference(
    quick_cuts: str,
) -> None:
    """24 steps of 99 KB tool outputs: past some 2 MB the steps no longer fit whole in the next
    run's start, so the cut carries their large strings by digest, and the next run reads them
    back from the run before; the run ends with every output, and every run replays."""
    steps = 24
    script: list[Reply | str] = [
        Reply(calls=[call("bulky", {"n": n}, id=f"c{n}")]) for n in range(steps)
    ]
    durable = TemporalAgent(
        Agent(ScriptedModel([*script, "done"]), name="bulky", tools=[bulky], max_steps=30),
        task_queue=f"c-{uuid.uuid4().hex[:8]}",
        continue_after=20,
    )
    async with serving(quick_cuts, durable) as client:
        run = await durable.start(client, "read them all")
        with anyio.fail_after(120):
            result = await run.result()
        chain = await _runs_of(client, run.run_id)
        starts = []
        async for info in client.list_workflows(f"WorkflowId = '{run.run_id}'"):
            handle = client.get_workflow_handle(run.run_id, run_id=info.run_id)
            async for event in handle.fetch_history_events(page_size=1):
                starts.append(start_of(event))
                break
        assert await _replay_chain(client, durable) == len(chain)
    assert result.output == "done" and len(result.steps) == steps + 1
    assert [s.actions[0].output for s in result.steps[:-1]] == [_document(n) for n in range(steps)]
    by_reference = [s for s in starts if s.get("carry") and '"agentloop.blob"' in json.dumps(s)]
    assert by_reference, f"no cut carried by reference in {len(chain)} runs"
    # A continued run's fingerprint is marked: an agentloop from before would start it over.
    marked = durable.fingerprint + CONTINUED
    assert sorted(s["fingerprint"] for s in starts) == sorted(
        [durable.fingerprint] + [marked] * (len(starts) - 1)
    )


async def test_a_run_waiting_in_its_sub_agent_continues_as_new_and_goes_on(
    temporal_target: str,
) -> None:
    """The sub-agent's call waits for approval, so the parent's run waits; it continues as new
    meanwhile, and the decision continues the sub-run where it stopped, in the next run."""
    child = Agent(
        ScriptedModel([Reply(calls=[call("transfer", {"amount": 3}, id="pay")]), "paid"]),
        name="teller",
        tools=[transfer],
    )
    parent = ScriptedModel([Reply(calls=[call("teller", {"task": "pay 3"}, id="t1")]), "done"])
    durable = TemporalAgent(
        Agent(parent, name="bank", tools=[child.as_tool()]),
        task_queue=f"c-{uuid.uuid4().hex[:8]}",
        continue_after=20,
    )
    async with serving(temporal_target, durable) as client:
        run = await durable.start(client, "pay")
        with anyio.fail_after(60):
            async for event in run:
                if isinstance(event, ev.RunWaiting) and event.branch == "bank":
                    break
            await _continued_while_waiting(client, run)
            await run.decide({"t1/pay": Approve()})
            result = await run.result()
        assert await _replay_chain(client, durable) >= 2
    assert result.output == "done" and ran == {"transfer:3": 1}
    subrun = result.steps[0].actions[0].subrun
    assert subrun is not None and subrun.steps[0].actions[0].output == "sent 3"


async def test_a_changed_worker_ends_a_continued_run_with_agent_mismatch(
    temporal_target: str,
) -> None:
    """The next run of a chain checks the fingerprint it was started with first: a run that
    continued as new while waiting, taken up by a worker whose agent changed, ends with
    ``AgentMismatch``."""
    queue = f"c-{uuid.uuid4().hex[:8]}"

    def made(version: str) -> TemporalAgent[Any]:
        model = ScriptedModel([Reply(calls=[call("transfer", {"amount": 1}, id="pay")]), "x"])
        agent = Agent(model, name="versioned", tools=[transfer])
        return TemporalAgent(agent, task_queue=queue, continue_after=20, version=version)

    old, new = made("1"), made("2")
    client = await connect(temporal_target)
    async with worker(client, [old], sticky_queue_schedule_to_start_timeout=1.0):
        run = await old.start(client, "pay")
        with anyio.fail_after(60):
            async for event in run:
                if isinstance(event, ev.RunWaiting):
                    break
            await _continued_while_waiting(client, run)
    async with worker(client, [new], sticky_queue_schedule_to_start_timeout=1.0):
        with contextlib.suppress(DecisionError, DurableRunFailed):  # it may have ended already
            await new.decide(client, run.run_id, {"pay": Approve()})
        with anyio.fail_after(60), pytest.raises(DurableRunFailed) as failed:
            await new.attach(client, run.run_id).result()
    assert failed.value.kind == "AgentMismatch" and not ran
    assert old.fingerprint in str(failed.value) and new.fingerprint in str(failed.value)


# Histories recorded at 23b7dbf, before runs continued as new and lingered within the lease:
# a decided wait, a wait that timed out, a run streamed to its end, and one whose caller
# stopped reading (it lingered its whole 60 s). Recorded with these agents on a dev server.
OLD_HISTORIES = Path(__file__).parent / "fixtures" / "temporal-histories"


@tool(name="transfer", requires_approval=True)
async def _old_transfer(amount: int) -> str:
    """Move.

    Args:
        amount: How much.
    """
    return f"sent {amount}"


@tool(name="note")
async def _old_note(n: int) -> str:
    """Note.

    Args:
        n: n.
    """
    await anyio.sleep(0.3)
    return f"noted {n}"


def _old_agents(queue: str) -> list[TemporalAgent[Any]]:
    paying = [Reply(calls=[call("transfer", {"amount": 5}, id="pay")])]
    streaming = [
        Reply(timeline=[(0.01, "a "), (0.02, call("note", {"n": 1}, id="n1")), (0.03, "")]),
        Reply(timeline=[(0.01, "done "), (0.02, "now")]),
    ]
    return [
        TemporalAgent(
            Agent(ScriptedModel([*paying, "paid"]), name="oldwait", tools=[_old_transfer]),
            task_queue=queue,
        ),
        TemporalAgent(
            Agent(ScriptedModel([*paying, "gave up"]), name="oldtimed", tools=[_old_transfer]),
            task_queue=queue,
            decision_timeout=1,
        ),
        TemporalAgent(
            Agent(ScriptedModel(streaming), name="oldstream", tools=[_old_note]),
            task_queue=queue,
            stream_lease=1.0,
        ),
    ]


async def test_histories_recorded_before_continuing_as_new_replay_unchanged() -> None:
    """The patched changes (continuing as new, lingering within the lease) leave the histories
    recorded before them replaying as they ran."""
    from temporalio.client import WorkflowHistory

    recorded = json.loads((OLD_HISTORIES / "before-continue-as-new.json").read_text())
    agents = _old_agents(recorded["queue"])
    histories = recorded["histories"]
    assert len(histories) == 4
    for workflow_id, history in histories.items():
        await replayer(agents).replay_workflow(WorkflowHistory.from_json(workflow_id, history))


async def test_callers_attaching_across_the_cuts_each_see_every_event(
    temporal_target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ten callers attach from seq 0 at staggered times while the run continues as new
    again and again, each run holding only a short tail: each reads every event, in order, no
    gap, no duplicate, none failing."""
    monkeypatch.setattr(_carry, "TAIL_BYTES", 2048)
    durable = TemporalAgent(
        Agent(ScriptedModel(_script(6)), name="crowded", tools=[note]),
        task_queue=f"c-{uuid.uuid4().hex[:8]}",
        continue_after=20,
    )
    seen: dict[int, list[int]] = {}
    failed: dict[int, BaseException] = {}
    async with serving(temporal_target, durable) as client:
        run = await durable.start(client, "go")

        async def follow(n: int) -> None:
            await anyio.sleep(0.3 * n)
            try:
                seen[n] = [e.seq async for e in durable.attach(client, run.run_id)]
            except Exception as exc:
                failed[n] = exc

        with anyio.fail_after(90):
            async with anyio.create_task_group() as tg:
                for n in range(10):
                    tg.start_soon(follow, n)
            result = await run.result()
        assert len(await _runs_of(client, run.run_id)) >= 3
    assert result.output == "all done." and failed == {}
    last = max(max(s) for s in seen.values())
    gaps = {n: s for n, s in seen.items() if s != list(range(1, last + 1))}
    assert gaps == {}, f"{len(gaps)} of 10 callers went wrong: {list(gaps.items())[:2]}"


class _CountQueries:
    """A client interceptor counting the queries of each run addressed by its run id (only
    the earlier runs of a chain are: each such query is a worker replaying that closed run),
    and of the latest run."""

    def __init__(self) -> None:
        self.by_run: Counter[str] = Counter()

    def intercept_client(self, next: Any) -> Any:
        from temporalio.client import OutboundInterceptor

        counts = self.by_run

        class Outbound(OutboundInterceptor):
            async def query_workflow(self, input: Any) -> Any:
                reply = await super().query_workflow(input)
                counts[input.run_id or "latest"] += 1  # answered (a worker replayed the run)
                return reply

        return Outbound(next)


async def test_callers_reading_far_behind_replay_each_closed_run_once(
    temporal_target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Thirty callers of one process attach from seq 0 to a run that continued as new, each
    run holding a 2 KiB tail: each earlier run of the chain is queried (replayed by a worker)
    once in all, not once per query of each caller (a caller went back from the latest run
    hop by hop for every batch: its chain's length squared, times thirty)."""
    monkeypatch.setattr(_carry, "TAIL_BYTES", 2048)
    durable = TemporalAgent(
        Agent(ScriptedModel(_script(6)), name="far", tools=[note]),
        task_queue=f"c-{uuid.uuid4().hex[:8]}",
        continue_after=20,
    )
    counting = _CountQueries()
    async with serving(temporal_target, durable) as client:
        run = await durable.start(client, "go")
        result = await run.result()
        chain = await _runs_of(client, run.run_id)
        readers = await connect(temporal_target, interceptors=[counting])
        seen: dict[int, list[int]] = {}

        async def follow(n: int) -> None:
            seen[n] = [e.seq async for e in durable.attach(readers, run.run_id)]

        with anyio.fail_after(90):
            async with anyio.create_task_group() as tg:
                for n in range(30):
                    tg.start_soon(follow, n)
    assert result.output == "all done." and len(chain) >= 3
    last = max(max(s) for s in seen.values())
    assert all(s == list(range(1, last + 1)) for s in seen.values())
    earlier = {k: v for k, v in counting.by_run.items() if k != "latest"}
    assert len(earlier) == len(chain) - 1, earlier
    # Each closed run replayed at most twice in all: for its events, and (for a caller before
    # them) to say which run before it has them.
    assert all(n <= 2 for n in earlier.values()), earlier
    assert sum(earlier.values()) <= 2 * len(earlier) - 1, earlier


def _big(n: int, chars: int) -> str:
    """ASCII text of ``chars`` characters (one byte each in a payload), varied by ``n``."""
    return "".join(chr(ord("a") + (n + i) % 26) for i in range(chars))


@pytest.mark.parametrize(
    "where",
    ["input", "image", "state", "variables"],
    ids=["big-input", "big-image", "big-state", "big-variables"],
)
async def test_a_run_whose_start_nearly_fills_the_payload_limit_still_continues_as_new(
    temporal_target: str, where: str
) -> None:
    """A start of some 1.9 MB (an input, an image, a state or template variables: near the
    most a start may be), then eight streamed steps with a small ``continue_after``: the
    start travels to each next run by reference, read back from the run before, so the run
    is cut at least twice; its events, result and every prompt are the uncut run's. Every run
    of the chain replays. (Before, it logged that it could not continue as new, and never
    was cut.)"""
    size = 1_900_000
    image = ImagePart(data=b"\x89PNG\r\n\x1a\n" + bytes(1_400_000), media_type="image/png")
    input: Any = (
        _big(0, size) if where == "input" else ["look", image] if where == "image" else "go"
    )
    state = {"doc": _big(1, size)} if where == "state" else None
    variables = {"doc": _big(2, size)} if where == "variables" else None
    queue = f"c-{uuid.uuid4().hex[:8]}"

    models: list[ScriptedModel] = []

    def agent() -> Agent[Any, str]:
        instructions = "Read {doc}." if where == "variables" else "Read."
        models.append(ScriptedModel(_script(8)))
        return Agent(models[-1], name="heavy", tools=[note], instructions=instructions)

    uncut = TemporalAgent(agent(), task_queue=queue)
    cut = TemporalAgent(agent(), task_queue=queue + "-cut", continue_after=20)
    results, streams, chains = [], [], []
    for durable in (uncut, cut):
        async with serving(temporal_target, durable) as client:
            run = await durable.start(client, input, state=state, variables=variables)
            with anyio.fail_after(90):
                streams.append([e async for e in run])
                results.append(await run.result())
            chains.append(await _runs_of(client, run.run_id))
            assert await _replay_chain(client, durable) == len(chains[-1])
    whole, events = streams
    assert len(chains[0]) == 1 and len(chains[1]) >= 3, chains  # two cuts at least
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert Counter(_plain(events)) == Counter(_plain(whole))
    a, b = results
    assert b.output == a.output == "all done."
    assert b.usage == a.usage and len(b.steps) == len(a.steps) == 9
    assert b.state == a.state
    asked = [[r.messages for r in m.requests] for m in models]
    assert len(asked[1]) == 9 and asked[1] == asked[0]
    assert ran == {f"note:{i}": 2 for i in range(8)}


async def test_a_start_that_could_never_continue_as_new_is_refused_before_it_starts(
    temporal_target: str,
) -> None:
    """A start under the payload limit, but made of so many small values that by reference
    it would still not leave room in the next run's start (a state of 120,000 numbers): the
    caller is refused with ``UserError``, saying why, before any workflow starts; the same
    state's values as a few long strings start."""
    queue = f"c-{uuid.uuid4().hex[:8]}"
    durable = TemporalAgent(Agent(ScriptedModel(["ok"]), name="crammed"), task_queue=queue)
    client = await connect(temporal_target)
    crammed = {f"k{i}": i for i in range(120_000)}
    assert len(json.dumps(crammed, separators=(",", ":"))) < 2_000_000  # under the limit
    with pytest.raises(UserError, match="continue as new"):
        await durable.start(client, "go", state=crammed)
    started = [w async for w in client.list_workflows(f"TaskQueue = '{queue}'")]
    assert started == []
    run = await durable.start(client, "go", state={"doc": _big(0, 1_900_000)})
    await run.cancel()


@pytest.mark.parametrize("history", ["input", "full"])
async def test_a_run_handed_over_continues_as_new_between_steps(
    temporal_target: str, history: str
) -> None:
    """``triage`` hands over to ``billing`` (``Handoff(history=...)``), which streams eight
    steps of a tool and an answer, with a small ``continue_after``: the run is cut between
    billing's steps at least twice, each next run going on under billing with the history
    the handoff gave it; the events, the result and each of billing's prompts are the uncut
    run's; billing's model calls and tools are activities (its tools found on the worker);
    every run of the chain replays. (Before, a run handed over was never cut, and the agent
    handed over to called its model inside the workflow and its tools were unknown.)"""
    queue = f"c-{uuid.uuid4().hex[:8]}"
    models: list[ScriptedModel] = []

    def agent() -> Agent[Any, str]:
        models.append(ScriptedModel(_script(8)))
        billing = Agent(models[-1], name="billing", tools=[note], instructions="Bill.")
        hand = Reply(calls=[call("transfer_to_billing", {}, id="t")])
        handoff = Handoff(billing, history=history)  # type: ignore[arg-type]
        return Agent(ScriptedModel([hand]), name="triage", handoffs=[handoff])

    uncut = TemporalAgent(agent(), task_queue=queue)
    cut = TemporalAgent(agent(), task_queue=queue + "-cut", continue_after=20)
    results, streams, chains, activities = [], [], [], []
    for durable in (uncut, cut):
        async with serving(temporal_target, durable) as client:
            run = await durable.start(client, "bill me")
            with anyio.fail_after(90):
                streams.append([e async for e in run])
                results.append(await run.result())
            chains.append(await _runs_of(client, run.run_id))
            with anyio.fail_after(60):  # (before, billing's model ran in the replay: it hung)
                assert await _replay_chain(client, durable) == len(chains[-1])
            scheduled: Counter[str] = Counter()
            async for info in client.list_workflows(f"WorkflowId = '{run.run_id}'"):
                handle = client.get_workflow_handle(run.run_id, run_id=info.run_id)
                async for event in handle.fetch_history_events():
                    if event.HasField("activity_task_scheduled_event_attributes"):
                        name = event.activity_task_scheduled_event_attributes.activity_type.name
                        scheduled[name] += 1
            activities.append(scheduled)
    whole, events = streams
    assert len(chains[0]) == 1 and len(chains[1]) >= 3, chains  # two cuts at least
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert Counter(_plain(events)) == Counter(_plain(whole))
    assert {e.branch for e in events if e.type == "step_finished"} == {"triage", "billing"}
    a, b = results
    assert b.output == a.output == "all done."
    assert b.usage == a.usage and len(b.steps) == len(a.steps) == 10
    assert [act.error for s in b.steps for act in s.actions] == [None] * 9
    assert ran == {f"note:{i}": 2 for i in range(8)}
    assert activities[0]["agentloop.model"] == activities[1]["agentloop.model"] == 10
    asked = [[r.messages for r in m.requests] for m in models]
    assert len(asked[1]) == 9 and asked[1] == asked[0]
    sees_triage = any("transfer_to_billing" in repr(m) for m in asked[1][-1])
    assert sees_triage == (history == "full")


@pytest.mark.parametrize("hold", ["cut", "start"], ids=["closing-run", "next-run"])
async def test_a_decide_held_inside_the_cut_is_sent_again_and_lands_once(
    temporal_target: str, hold: str
) -> None:
    """The cut held open by a worker interceptor (``tests/support/temporal_hold``): the
    waiting run has decided to continue as new and holds before it does, or the next run
    holds before it takes up the wait. A ``decide`` sent then is refused unrecorded (the
    interceptor counts the refusal); the run is released; the caller, following the run by
    its workflow id, sends it again with the same update id, and the next run takes it: the
    tool runs once, the run ends paid, and every run of the chain replays."""
    model = ScriptedModel([Reply(calls=[call("transfer", {"amount": 9}, id="pay")]), "paid"])
    durable = TemporalAgent(
        Agent(model, name="held", tools=[transfer]),
        task_queue=f"c-{uuid.uuid4().hex[:8]}",
        continue_after=20,
    )
    client = await connect(temporal_target)
    async with worker(
        client, [durable], sticky_queue_schedule_to_start_timeout=1.0, interceptors=[HoldCuts()]
    ):
        run = await durable.start(client, "pay", memo={"hold": hold})
        handle = client.get_workflow_handle(run.run_id)
        with anyio.fail_after(60):
            async for event in run:
                if isinstance(event, ev.RunWaiting):
                    break
            first = (await handle.describe()).run_id
            # Acks grow the history until the run holds (in the next run, for "start").
            for _ in range(500):
                if await handle.query(HELD_QUERY):
                    break
                with contextlib.suppress(RPCError):
                    await handle.signal("agentloop.ack", 0)
            held = (await handle.describe()).run_id
            assert (held == first) == (hold == "cut")
            async with anyio.create_task_group() as tg:
                tg.start_soon(durable.decide, client, run.run_id, {"pay": Approve()})
                for _ in range(2000):  # the refusal is what is waited for, not a time
                    if await handle.query(REFUSED_QUERY):
                        break
                    await anyio.sleep(0.01)
                assert await handle.query(REFUSED_QUERY) >= 1
                await handle.signal(RELEASE_SIGNAL)
            result = await run.result()
        chain = await _runs_of(client, run.run_id)
        histories = [
            await client.get_workflow_handle(run.run_id, run_id=r.split(":")[0]).fetch_history()
            for r in chain
        ]
        await replayer([durable], interceptors=[HoldCuts()]).replay_workflows(_each(histories))
    assert result.output == "paid" and ran == {"transfer:9": 1}
    assert len(chain) >= 2


async def _each(items: list[Any]) -> AsyncIterator[Any]:
    for item in items:
        yield item


async def test_an_ack_that_reaches_the_run_before_the_cut_follows_to_the_next_run(
    temporal_target: str,
) -> None:
    """A caller's ack signal, sent as the run continues as new, reaches the run that just
    closed (the client interceptor sends it there, as the server may): the server answers
    "already completed", and the caller, seeing the run go on by its workflow id, sends it
    again: the next run records it. (Before, the ack was dropped.) A decide sent there is
    sent again too, with its update id, and lands once."""
    model = ScriptedModel([Reply(calls=[call("transfer", {"amount": 4}, id="pay")]), "paid"])
    durable = TemporalAgent(
        Agent(model, name="acking", tools=[transfer]),
        task_queue=f"c-{uuid.uuid4().hex[:8]}",
        continue_after=20,
    )
    stale = StaleSignals()
    client = await connect(temporal_target, interceptors=[stale])
    async with worker(client, [durable], sticky_queue_schedule_to_start_timeout=1.0):
        run = await durable.start(client, "pay")
        handle = client.get_workflow_handle(run.run_id)
        with anyio.fail_after(60):
            async for event in run:
                if isinstance(event, ev.RunWaiting):
                    break
            first = (await handle.describe()).run_id
            await _continued_while_waiting(client, run)
            now = client.get_workflow_handle(run.run_id, run_id=(await handle.describe()).run_id)

            async def acks() -> int:
                history = await now.fetch_history()
                signalled = [e.workflow_execution_signaled_event_attributes for e in history.events]
                return sum(s.signal_name == "agentloop.ack" for s in signalled)

            before = await acks()
            stale.stale = first
            await run._ack()
            assert [e.status for e in stale.refused] == [RPCStatusCode.NOT_FOUND]
            assert await acks() == before + 1
            stale.stale = first  # and a decide: sent again by its update id, it lands once
            await run.decide({"pay": Approve()})
            assert [e.status for e in stale.refused] == [RPCStatusCode.NOT_FOUND] * 2
            assert (await run.result()).output == "paid"
    assert ran == {"transfer:4": 1}


def test_two_agents_of_one_name_reached_through_handoffs_are_refused() -> None:
    """A durable run finds the agent handed over to by its name (its path ``@<name>``): two
    different agents of one name would be one of them, silently; refused at once."""
    one = Agent(ScriptedModel(["a"]), name="billing")
    two = Agent(ScriptedModel(["b"]), name="billing", instructions="Other.")
    sales = Agent(ScriptedModel(["c"]), name="sales", handoffs=[two])
    triage = Agent(ScriptedModel(["d"]), name="triage", handoffs=[one, sales])
    with pytest.raises(UserError, match="two agents named 'billing'"):
        TemporalAgent(triage)
    assert TemporalAgent(triage.replace(handoffs=[one])).agent_paths() == ["", "@billing"]


async def test_a_streaming_caller_of_a_run_whose_workflow_fails_sees_it_end(
    temporal_target: str,
) -> None:
    """A run whose workflow fails without a terminal event (here ``AgentMismatch``: the
    worker's agent changed before it started) ends for a caller that streams it, with the
    failure, rather than answering its polls with nothing for ever. (Before, the caller hung.)"""
    queue = f"c-{uuid.uuid4().hex[:8]}"

    def made(version: str) -> TemporalAgent[Any]:
        agent = Agent(ScriptedModel(["x"]), name="failing")
        return TemporalAgent(agent, task_queue=queue, version=version)

    old, new = made("1"), made("2")
    client = await connect(temporal_target)
    run = await old.start(client, "go")
    async with worker(client, [new], sticky_queue_schedule_to_start_timeout=1.0):
        with anyio.fail_after(30), pytest.raises(DurableRunFailed) as failed:
            async for _ in run:
                pass
    assert failed.value.kind == "AgentMismatch"


@pytest.mark.parametrize("history", ["input", "full"])
async def test_a_run_that_waits_under_the_agent_handed_over_to_goes_on_under_it(
    temporal_target: str, history: str
) -> None:
    """``triage`` hands over to ``billing``, whose tool needs approval: the run waits under
    billing, continues as new while it waits, and the decision goes on under billing (its tool
    runs once, it answers), its prompt the history the handoff gave it; the chain replays.
    (Before, the resume looked for the waiting run under triage, and the run failed.)"""
    billing_model = ScriptedModel(
        [Reply(calls=[call("transfer", {"amount": 6}, id="pay")]), "paid"]
    )
    billing = Agent(billing_model, name="billing", tools=[transfer])
    hand = Reply(calls=[call("transfer_to_billing", {}, id="t")])
    handoff = Handoff(billing, history=history)  # type: ignore[arg-type]
    triage = Agent(ScriptedModel([hand]), name="triage", handoffs=[handoff])
    durable = TemporalAgent(triage, task_queue=f"c-{uuid.uuid4().hex[:8]}", continue_after=20)
    async with serving(temporal_target, durable) as client:
        run = await durable.start(client, "refund me")
        with anyio.fail_after(60):
            async for event in run:
                if isinstance(event, ev.RunWaiting):
                    break
            await _continued_while_waiting(client, run)
            await run.decide({"pay": Approve()})
            result = await run.result()
        assert await _replay_chain(client, durable) >= 2
    assert result.output == "paid" and ran == {"transfer:6": 1}
    assert result.agent == "billing" and len(result.steps) == 3
    last = billing_model.requests[-1].messages
    assert any("transfer_to_billing" in repr(m) for m in last) == (history == "full")


async def test_a_sub_agent_of_the_agent_handed_over_to_runs_durably(
    temporal_target: str,
) -> None:
    """billing, handed over to, calls its sub-agent ``clerk`` (``Agent.as_tool``), whose tool
    is an activity found on the worker at clerk's path under billing; the run ends with
    clerk's answer in billing's step, and replays."""
    clerk = Agent(
        ScriptedModel([Reply(calls=[call("note", {"n": 5}, id="c")]), "clerked"]),
        name="clerk",
        tools=[note],
    )
    billing_model = ScriptedModel([Reply(calls=[call("clerk", {"task": "file"}, id="k")]), "filed"])
    billing = Agent(billing_model, name="billing", tools=[clerk.as_tool()])
    hand = Reply(calls=[call("transfer_to_billing", {}, id="t")])
    triage = Agent(ScriptedModel([hand]), name="triage", handoffs=[billing])
    durable = TemporalAgent(triage, task_queue=f"c-{uuid.uuid4().hex[:8]}")
    assert "@billing/clerk" in durable.agent_paths()
    async with serving(temporal_target, durable) as client:
        with anyio.fail_after(60):
            result = await durable.run(client, "file it")
        assert await _replay_chain(client, durable) == 1
    assert result.output == "filed" and ran == {"note:5": 1}
    subrun = result.steps[1].actions[0].subrun
    assert subrun is not None and subrun.output == "clerked"
    assert subrun.steps[0].actions[0].output == "noted 5"
