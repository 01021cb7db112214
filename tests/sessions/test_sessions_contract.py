"""The SessionStore contract: every back end (memory, SQLite, PostgreSQL) passes the same tests."""

from __future__ import annotations

import math
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from agentloop._errors import SessionBusy, SessionConflict, SessionNotFound, UserError
from agentloop.sessions import (
    Lease,
    Record,
    RunEndRecord,
    RunRecord,
    SessionStore,
    StateChangeRecord,
    StepRecord,
)
from agentloop.sessions._base import BaseStore

from ._session_helpers import ManualClock, StoreSpec, run_records

ODD_TEXT = [
    "it's",
    'say "hi"',
    "'; DROP TABLE agentloop_sessions; --",
    "x' OR '1'='1",
    "%s %(name)s ? $1 :name {}",
    "back\\slash\nnew line\ttab",
    "ünïcødé ✓ 日本語 🚀",
    " ",
    "temp",
    "a" * 500,
]


# -- create / get / list / delete ------------------------------------------------------------


async def test_create_then_get(store: SessionStore, clock: ManualClock) -> None:
    """A created session is at version 0, with its state (minus temp: keys) and no history."""
    made = await store.create("s1", app="app", user="ann", state={"goal": {"x": 1}, "temp:t": 2})
    got = await store.get("s1")
    assert got is not None
    for session in (made, got):
        assert (session.id, session.app, session.user) == ("s1", "app", "ann")
        assert dict(session.state) == {"goal": {"x": 1}}
        assert (session.version, session.history, session.lease) == (0, (), None)
        assert session.created_at == session.updated_at == clock.now


async def test_create_generates_distinct_ids(store: SessionStore) -> None:
    """Without an id the store makes a fresh one each time."""
    ids = {(await store.create()).id for _ in range(5)}
    assert len(ids) == 5


async def test_create_existing_id_is_a_conflict(store: SessionStore) -> None:
    """Creating an id twice is a SessionConflict and leaves the first session alone."""
    await store.create("dup", state={"a": 1})
    with pytest.raises(SessionConflict):
        await store.create("dup", state={"a": 2})
    got = await store.get("dup")
    assert got is not None
    assert dict(got.state) == {"a": 1}
    assert store.stats.conflicts == 1


async def test_get_missing_is_none(store: SessionStore) -> None:
    """Getting an unknown id returns None."""
    assert await store.get("nope") is None


async def test_list_newest_first_with_filters(store: SessionStore, clock: ManualClock) -> None:
    """list() orders by last update, filters by app and user, and pages with limit/offset."""
    for sid, app, user in [("a", "x", "u1"), ("b", "x", "u2"), ("c", "y", "u1")]:
        await store.create(sid, app=app, user=user)
        clock.advance(1)
    await store.commit("a", expected_version=0, set_state={"k": 1})  # "a" becomes the newest
    assert [i.id for i in await store.list()] == ["a", "c", "b"]
    assert [i.id for i in await store.list(app="x")] == ["a", "b"]
    assert [i.id for i in await store.list(user="u1")] == ["a", "c"]
    assert [i.id for i in await store.list(app="x", user="u2")] == ["b"]
    assert [i.id for i in await store.list(limit=1, offset=1)] == ["c"]
    first = (await store.list())[0]
    assert (first.version, first.app, first.user, first.updated_at) == (1, "x", "u1", clock.now)


async def test_delete(store: SessionStore) -> None:
    """delete() removes the session and its history; False when there was none."""
    await store.create("gone")
    await store.commit("gone", expected_version=0, records=run_records("r1"))
    assert await store.delete("gone") is True
    assert await store.get("gone") is None
    assert await store.delete("gone") is False
    await store.create("gone")  # the id is free again, with no leftover history
    again = await store.get("gone")
    assert again is not None
    assert again.history == ()


# -- commit ----------------------------------------------------------------------------------


async def test_commit_appends_records_with_seq(store: SessionStore) -> None:
    """Each commit bumps the version by one and numbers its records after the previous ones."""
    await store.create("s")
    v1 = await store.commit("s", expected_version=0, records=run_records("r1", steps=2))
    v2 = await store.commit("s", expected_version=v1, records=run_records("r2"))
    got = await store.get("s")
    assert got is not None
    assert (v1, v2, got.version) == (1, 2, 2)
    assert [r.seq for r in got.history] == [1, 2, 3, 4, 5, 6, 7]
    kinds = [r.type for r in got.history]
    assert kinds == ["run", "step", "step", "run_end", "run", "step", "run_end"]
    assert store.stats.commits == 2


async def test_records_round_trip(store: SessionStore) -> None:
    """Every record type is read back equal, with the seq the store gave it."""
    records: list[Record] = [
        StateChangeRecord(changes={"goal": {"objective": "ship"}}, deleted=["old"], note="host"),
        RunRecord(run_id="r", agent="a", branch="a.b#1", input="hello", parent_run_id="p"),
        StepRecord(
            run_id="r", index=0, step={"actions": [{"name": "t", "result": [1, 2.5, None]}]}
        ),
        RunEndRecord(run_id="r", status="failed", output={"partial": True}, error="boom", usage={}),
    ]
    await store.create("s")
    await store.commit("s", expected_version=0, records=records)
    got = await store.get("s")
    assert got is not None
    assert list(got.history) == [r.model_copy(update={"seq": i + 1}) for i, r in enumerate(records)]


async def test_commit_changes_only_given_keys(store: SessionStore) -> None:
    """A commit upserts and deletes the keys it names and leaves every other key as it was."""
    await store.create("s", state={"a": 1, "b": 2, "c": 3})
    await store.commit("s", expected_version=0, set_state={"b": 20, "d": [4]}, delete_state=["a"])
    got = await store.get("s")
    assert got is not None
    assert dict(got.state) == {"b": 20, "c": 3, "d": [4]}


async def test_stale_version_is_a_conflict_and_writes_nothing(store: SessionStore) -> None:
    """A commit at a stale version raises SessionConflict and changes nothing."""
    await store.create("s", state={"n": 1})
    await store.commit("s", expected_version=0, set_state={"n": 2})
    with pytest.raises(SessionConflict, match="version 1"):
        await store.commit("s", expected_version=0, records=run_records("r"), set_state={"n": 99})
    got = await store.get("s")
    assert got is not None
    assert (got.version, dict(got.state), got.history) == (1, {"n": 2}, ())
    assert store.stats.conflicts == 1


async def test_commit_to_missing_session(store: SessionStore) -> None:
    """Committing to an unknown session raises SessionNotFound."""
    with pytest.raises(SessionNotFound):
        await store.commit("nope", expected_version=0, set_state={"a": 1})


async def test_temp_keys_are_never_stored(store: SessionStore) -> None:
    """temp: keys in create, set_state, delete_state and state-change records are dropped."""
    await store.create("s", state={"temp:a": 1, "keep": 1})
    await store.commit(
        "s",
        expected_version=0,
        records=[StateChangeRecord(changes={"temp:x": 1, "y": 2}, deleted=["temp:z", "w"])],
        set_state={"temp:scratch": "big", "k": "v"},
        delete_state=["temp:other"],
    )
    got = await store.get("s")
    assert got is not None
    assert dict(got.state) == {"keep": 1, "k": "v"}
    change = got.history[0]
    assert isinstance(change, StateChangeRecord)
    assert (change.changes, change.deleted) == ({"y": 2}, ["w"])


@pytest.mark.parametrize(
    "bad",
    [{1, 2}, object(), math.nan, math.inf, (1, 2), b"bytes", {1: "int key"}, "\ud800", [[{"x"}]]],
    ids=["set", "object", "nan", "inf", "tuple", "bytes", "int-key", "surrogate", "nested"],
)
async def test_non_json_value_is_rejected_with_nothing_written(
    store: SessionStore, bad: Any
) -> None:
    """A value that is not JSON raises UserError naming its key; the commit writes nothing."""
    await store.create("s", state={"a": 1})
    with pytest.raises(UserError, match="'the-key'"):
        await store.commit(
            "s",
            expected_version=0,
            records=run_records("r"),
            set_state={"fine": 1, "the-key": bad},
        )
    with pytest.raises(UserError, match="'the-key'"):
        await store.create("s2", state={"the-key": bad})
    got = await store.get("s")
    assert got is not None
    assert (got.version, dict(got.state), got.history) == (0, {"a": 1}, ())
    assert await store.get("s2") is None


async def test_same_key_set_and_deleted_is_rejected(store: SessionStore) -> None:
    """Setting and deleting one key in a commit is ambiguous: UserError, nothing written."""
    await store.create("s")
    with pytest.raises(UserError, match="both set and deleted"):
        await store.commit("s", expected_version=0, set_state={"k": 1}, delete_state=["k"])
    assert (await store.get("s")).version == 0  # type: ignore[union-attr]


@pytest.mark.parametrize("text", ODD_TEXT, ids=range(len(ODD_TEXT)))
async def test_odd_ids_and_keys_round_trip(store: SessionStore, text: str) -> None:
    """Ids, keys, app/user and values with quotes, unicode and SQL fragments come back unchanged."""
    await store.create(text, app=text, user=text, state={text: text})
    records: list[Record] = [RunRecord(run_id=text, agent=text, branch=text, input=text)]
    await store.commit(text, expected_version=0, records=records, set_state={text + "2": [text]})
    got = await store.get(text)
    assert got is not None
    assert (got.id, got.app, got.user) == (text, text, text)
    assert dict(got.state) == {text: text, text + "2": [text]}
    assert got.history[0] == records[0].model_copy(update={"seq": 1})
    assert [i.id for i in await store.list(app=text, user=text)] == [text]
    lease = await store.acquire_lease(text, owner=text, ttl=10)
    assert lease.owner == text
    await store.commit(text, expected_version=1, delete_state=[text], lease=lease)
    assert dict((await store.get(text)).state) == {text + "2": [text]}  # type: ignore[union-attr]
    assert await store.delete(text) is True


async def test_values_keep_nul_characters(store: SessionStore) -> None:
    """NUL is refused in ids and keys (databases cannot store it) but survives inside values."""
    await store.create("s")
    await store.commit(
        "s",
        expected_version=0,
        records=[RunRecord(run_id="r", agent="a", branch="a", input="x\x00y")],
        set_state={"k": "a\x00b"},
    )
    got = await store.get("s")
    assert got is not None
    assert got.state["k"] == "a\x00b"
    assert isinstance(got.history[0], RunRecord)
    assert got.history[0].input == "x\x00y"
    with pytest.raises(UserError, match="NUL"):
        await store.create("a\x00b")
    with pytest.raises(UserError, match="NUL"):
        await store.commit("s", expected_version=1, set_state={"k\x00": 1})


# -- history_limit ---------------------------------------------------------------------------


async def test_history_limit_loads_the_last_runs(store: SessionStore) -> None:
    """history_limit=N returns the records from the N-th most recent run record onwards."""
    await store.create("s")
    version = await store.commit("s", expected_version=0, records=[StateChangeRecord(note="pre")])
    for n in range(5):
        version = await store.commit("s", expected_version=version, records=run_records(f"r{n}"))
    version = await store.commit(
        "s", expected_version=version, records=[StateChangeRecord(note="post")]
    )

    async def run_ids(limit: int | None) -> list[str | None]:
        got = await store.get("s", history_limit=limit)
        assert got is not None
        assert got.version == version
        return [getattr(r, "run_id", None) or getattr(r, "note", None) for r in got.history]

    assert await run_ids(2) == ["r3", "r3", "r3", "r4", "r4", "r4", "post"]
    assert await run_ids(1) == ["r4", "r4", "r4", "post"]
    assert (await run_ids(5))[0] == "r0"
    assert (await run_ids(6))[0] == "pre"
    assert len(await run_ids(None)) == 17
    assert await run_ids(0) == []
    with pytest.raises(UserError):
        await store.get("s", history_limit=-1)


# -- leases ----------------------------------------------------------------------------------


async def test_lease_excludes_other_owners(store: SessionStore, clock: ManualClock) -> None:
    """A held lease makes other owners' acquire and lease-less commits SessionBusy."""
    await store.create("s")
    lease = await store.acquire_lease("s", owner="run-a", ttl=30)
    assert lease == Lease(session_id="s", owner="run-a", fence=1, expires_at=clock.now + 30)
    with pytest.raises(SessionBusy, match="run-a"):
        await store.acquire_lease("s", owner="run-b", ttl=30)
    with pytest.raises(SessionBusy):
        await store.commit("s", expected_version=0, set_state={"k": 1})
    assert await store.commit("s", expected_version=0, set_state={"k": 1}, lease=lease) == 1
    got = await store.get("s")
    assert got is not None
    assert got.lease == lease
    assert store.stats.busy == 2


async def test_expired_lease_is_taken_over_and_old_fence_refused(
    store: SessionStore, clock: ManualClock
) -> None:
    """After expiry a new owner takes over with a higher fence; the old holder is fenced off."""
    await store.create("s")
    old = await store.acquire_lease("s", owner="crashed", ttl=10)
    clock.advance(11)
    new = await store.acquire_lease("s", owner="resumer", ttl=10)
    assert (new.owner, new.fence) == ("resumer", old.fence + 1)
    assert store.stats.lease_takeovers == 1
    with pytest.raises(SessionBusy, match="lost"):
        await store.commit("s", expected_version=0, set_state={"k": "old"}, lease=old)
    with pytest.raises(SessionBusy, match="lost"):
        await store.renew_lease(old, 10)
    await store.release_lease(old)  # a stale release does not free the new holder's lease
    with pytest.raises(SessionBusy):
        await store.acquire_lease("s", owner="third", ttl=10)
    assert await store.commit("s", expected_version=0, set_state={"k": "new"}, lease=new) == 1
    got = await store.get("s")
    assert got is not None
    assert dict(got.state) == {"k": "new"}


async def test_expired_lease_still_fences_without_takeover(
    store: SessionStore, clock: ManualClock
) -> None:
    """An expired lease nobody took over still commits; lease-less commits pass after expiry."""
    await store.create("s")
    lease = await store.acquire_lease("s", owner="slow", ttl=5)
    clock.advance(6)
    version = await store.commit("s", expected_version=0, set_state={"a": 1}, lease=lease)
    version = await store.commit("s", expected_version=version, set_state={"b": 1})
    assert version == 2


async def test_renew_and_release(store: SessionStore, clock: ManualClock) -> None:
    """renew moves the expiry, release frees the lease (twice is fine) and ends fencing."""
    await store.create("s")
    lease = await store.acquire_lease("s", owner="a", ttl=5)
    clock.advance(4)
    renewed = await store.renew_lease(lease, 5)
    assert (renewed.fence, renewed.expires_at) == (lease.fence, clock.now + 5)
    clock.advance(4)  # past the first expiry, within the renewed one
    with pytest.raises(SessionBusy):
        await store.acquire_lease("s", owner="b", ttl=5)
    await store.release_lease(renewed)
    await store.release_lease(renewed)
    assert (await store.get("s")).lease is None  # type: ignore[union-attr]
    with pytest.raises(SessionBusy, match="lost"):
        await store.commit("s", expected_version=0, lease=renewed)
    other = await store.acquire_lease("s", owner="b", ttl=5)
    assert other.fence == lease.fence + 1


async def test_renew_leases_renews_many_at_once(store: SessionStore, clock: ManualClock) -> None:
    """``renew_leases`` renews many leases in one call, each with its own TTL and each as
    ``renew_lease`` would: a lease taken over or a missing session is that lease's answer, and
    the others are renewed all the same."""
    assert isinstance(store, BaseStore)
    for sid in ("a", "b", "c"):
        await store.create(sid)
    a = await store.acquire_lease("a", owner="x", ttl=5)
    b = await store.acquire_lease("b", owner="x", ttl=5)
    c = await store.acquire_lease("c", owner="x", ttl=5)
    clock.advance(6)
    await store.acquire_lease("b", owner="y", ttl=30)  # b's lease expired and is taken over
    ghost = Lease(session_id="ghost", owner="x", fence=1, expires_at=0.0)
    answers = await store.renew_leases([(a, 10), (b, 10), (ghost, 10), (c, 20)])
    assert answers[0] == Lease(session_id="a", owner="x", fence=a.fence, expires_at=clock.now + 10)
    assert isinstance(answers[1], SessionBusy) and isinstance(answers[2], SessionNotFound)
    assert answers[3] == Lease(session_id="c", owner="x", fence=c.fence, expires_at=clock.now + 20)
    assert (await store.get("a")).lease == answers[0]  # type: ignore[union-attr]
    assert (await store.get("c")).lease == answers[3]  # type: ignore[union-attr]
    assert (await store.get("b")).lease.owner == "y"  # type: ignore[union-attr]
    assert await store.renew_leases([]) == []


async def test_same_owner_reacquires_with_new_fence(store: SessionStore) -> None:
    """Acquiring again as the same owner succeeds and fences off the earlier lease."""
    await store.create("s")
    first = await store.acquire_lease("s", owner="a", ttl=30)
    second = await store.acquire_lease("s", owner="a", ttl=30)
    assert second.fence == first.fence + 1
    with pytest.raises(SessionBusy):
        await store.commit("s", expected_version=0, lease=first)


async def test_lease_on_missing_session(store: SessionStore) -> None:
    """Lease operations on an unknown session raise SessionNotFound (release is a no-op)."""
    with pytest.raises(SessionNotFound):
        await store.acquire_lease("nope", owner="a", ttl=1)
    ghost = Lease(session_id="nope", owner="a", fence=1, expires_at=0.0)
    with pytest.raises(SessionNotFound):
        await store.renew_lease(ghost, 1)
    await store.release_lease(ghost)


async def test_wait_gets_the_lease_when_released(store: SessionStore) -> None:
    """wait=True polls until the holder releases, then takes the lease."""
    await store.create("s")
    held = await store.acquire_lease("s", owner="a", ttl=60)
    got: list[Lease] = []

    async def waiter() -> None:
        got.append(await store.acquire_lease("s", owner="b", ttl=60, wait=True, timeout=30))

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        await anyio.sleep(0.05)
        assert got == []
        await store.release_lease(held)
    assert (got[0].owner, got[0].fence) == ("b", held.fence + 1)


async def test_wait_takes_over_on_expiry(store: SessionStore, clock: ManualClock) -> None:
    """A waiter takes over a lease that expires while it waits (what resume relies on)."""
    await store.create("s")
    held = await store.acquire_lease("s", owner="a", ttl=10)
    got: list[Lease] = []

    async def waiter() -> None:
        got.append(await store.acquire_lease("s", owner="b", ttl=10, wait=True))

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        await anyio.sleep(0.05)
        assert got == []
        clock.advance(10)
    assert got[0].fence == held.fence + 1
    assert store.stats.lease_takeovers == 1


async def test_wait_times_out(store: SessionStore) -> None:
    """wait=True with a timeout raises SessionBusy when the lease stays held."""
    await store.create("s")
    await store.acquire_lease("s", owner="a", ttl=60)
    with pytest.raises(SessionBusy, match="after waiting"):
        await store.acquire_lease("s", owner="b", ttl=60, wait=True, timeout=0.05)
    assert store.stats.busy == 1


async def test_bad_arguments(store: SessionStore) -> None:
    """Misuse is a UserError before anything is written."""
    await store.create("s")
    lease = await store.acquire_lease("s", owner="a", ttl=5)
    with pytest.raises(UserError):
        await store.acquire_lease("s", owner="a", ttl=0)
    with pytest.raises(UserError):
        await store.commit("other", expected_version=0, lease=lease)
    with pytest.raises(UserError):
        await store.commit("s", expected_version="0", lease=lease)  # type: ignore[arg-type]
    with pytest.raises(UserError):
        await store.commit("s", expected_version=0, records=[{"type": "run"}])  # type: ignore[list-item]
    with pytest.raises(UserError):
        await store.list(limit=-1)
    with pytest.raises(UserError):
        await store.create("")


# -- concurrency and lifecycle ---------------------------------------------------------------


async def test_concurrent_tasks_never_lose_an_update(store: SessionStore) -> None:
    """Tasks doing read-modify-write with expected_version lose no increment."""
    await store.create("s", state={"n": 0})
    done = conflicts = 0

    async def writer() -> None:
        nonlocal done, conflicts
        for _ in range(3):
            while True:
                session = await store.get("s", history_limit=0)
                assert session is not None
                n = session.state["n"]
                assert isinstance(n, int)
                try:
                    await store.commit(
                        "s",
                        expected_version=session.version,
                        records=[StateChangeRecord(changes={"n": n + 1}, source="run")],
                        set_state={"n": n + 1},
                    )
                except SessionConflict:
                    conflicts += 1
                    await anyio.lowlevel.checkpoint()
                    continue
                done += 1
                break

    async with anyio.create_task_group() as tg:
        for _ in range(10):
            tg.start_soon(writer)
    got = await store.get("s")
    assert got is not None
    assert (got.state["n"], len(got.history), got.version) == (30, 30, 30), conflicts
    assert store.stats.conflicts == conflicts


async def test_reopen_sees_the_same_data(store_spec: StoreSpec, clock: ManualClock) -> None:
    """A durable store opened again (another process would) sees committed sessions and leases."""
    if not store_spec.shared:
        pytest.skip("an in-memory store is private to its object")
    async with store_spec.open(clock=clock) as first:
        await first.create("s", state={"a": 1})
        lease = await first.acquire_lease("s", owner="a", ttl=30)
        await first.commit("s", expected_version=0, records=run_records("r"), lease=lease)
    async with store_spec.open(clock=clock) as second:
        got = await second.get("s")
        assert got is not None
        assert (got.version, len(got.history), got.lease) == (1, 3, lease)
        with pytest.raises(SessionBusy):
            await second.acquire_lease("s", owner="b", ttl=30)


async def test_closed_store_refuses_work(store_spec: StoreSpec) -> None:
    """After aclose() every operation is a UserError; aclose() twice is fine."""
    opened = store_spec.open()
    async with opened:
        await opened.create("s")
    await opened.aclose()
    with pytest.raises(UserError, match="closed"):
        await opened.get("s")
