"""Session goals: the goal tools, host-side start_goal, and goal enforcement."""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentloop import (
    ActionResult,
    Agent,
    AttemptDiscarded,
    Event,
    ModelRequest,
    RunFinished,
    SessionBusy,
    TextDelta,
    UserError,
)
from agentloop.goals import (
    DEFAULT_GUIDANCE,
    GoalOptions,
    GoalRecord,
    GoalStatus,
    RetryEvent,
    get_goal_record,
    render_goal,
    setup_goal,
    start_goal,
)
from agentloop.goals._record import decode_goal, encode_goal, state_key
from agentloop.models import ToolResultPart
from agentloop.sessions import (
    InMemoryStore,
    PostgresStore,
    SessionStore,
    SQLiteStore,
    StateChangeRecord,
)
from agentloop.testing import FunctionModel, Reply, ScriptedModel, call

MARKER = DEFAULT_GUIDANCE.splitlines()[0]


def goal_agent(script: list[Any], *, name: str = "worker", **options: Any) -> Agent:
    return setup_goal(Agent(ScriptedModel(script), name=name), GoalOptions(**options))


def outputs(result: Any, step: int = 0) -> list[Any]:
    actions: tuple[ActionResult, ...] = result.steps[step].actions
    return [a.output for a in actions]


# -- records ------------------------------------------------------------------------------------


def test_goal_records_round_trip_as_camel_case_json() -> None:
    """encode_goal writes camelCase; decode_goal reads it back and never raises on junk."""
    goal = GoalRecord.new("ship it", now=100).with_status(GoalStatus.COMPLETE, now=160)
    stored = json.loads(encode_goal(goal))
    assert stored == {
        "id": goal.id,
        "objective": "ship it",
        "status": "complete",
        "createdAtUnix": 100,
        "updatedAtUnix": 160,
        "terminalAtUnix": 160,
    }
    assert decode_goal(encode_goal(goal)) == goal
    assert decode_goal(stored) == goal
    for junk in (None, 3, "not json", "[]", '{"id": 1}', {"foreign": True}, b"\xff"):
        assert decode_goal(junk) is None


def test_state_keys_and_the_status_card() -> None:
    """Keys are goal / goal:<branch>; render_goal shows status and objective."""
    assert state_key() == "goal" and state_key("goal", "a.b") == "goal:a.b"
    assert state_key("g", "x") == "g:x"
    assert render_goal(None) == "(no goal)"
    card = render_goal(GoalRecord.new("write tests", now=5))
    assert "[active]" in card and "write tests" in card


def test_the_status_card_shows_dates_not_epoch_seconds() -> None:
    """The card's times are UTC dates a person reads; the record keeps the seconds."""
    goal = GoalRecord.new("ship it", now=1_764_590_400)
    card = render_goal(goal.with_status(GoalStatus.COMPLETE, now=1_764_590_730))
    assert "created:   2025-12-01 12:00:00 UTC" in card
    assert "terminal:  2025-12-01 12:05:30 UTC" in card
    assert "1764590" not in card


# -- the tools ----------------------------------------------------------------------------------


async def test_create_goal_makes_an_active_goal_in_the_branch_key() -> None:
    """create_goal stores an active goal under goal:<branch> and returns {message, goal}."""
    agent = goal_agent(
        [Reply(calls=[call("create_goal", {"objective": " tests pass "})]), "ok"], max_retries=0
    )
    result = await agent.run("go")
    answer = outputs(result)[0]
    assert answer["message"] == "Goal created."
    assert answer["goal"]["status"] == "active" and answer["goal"]["objective"] == "tests pass"
    assert set(answer["goal"]) == {"id", "objective", "status", "createdAtUnix", "updatedAtUnix"}
    stored = decode_goal((result.state or {})["goal:worker"])
    assert stored is not None and stored.status is GoalStatus.ACTIVE


async def test_goal_tool_errors_are_returned_not_raised() -> None:
    """Blank objective, second create, bad status, no goal and terminal goals are errors."""
    agent = goal_agent(
        [
            Reply(calls=[call("update_goal", {"status": "complete"}), call("get_goal", {})]),
            Reply(calls=[call("create_goal", {"objective": "  "})]),
            Reply(calls=[call("create_goal", {"objective": "first"})]),
            Reply(calls=[call("create_goal", {"objective": "second"})]),
            Reply(calls=[call("update_goal", {"status": "active"})]),
            Reply(calls=[call("update_goal", {"status": "blocked"})]),
            Reply(calls=[call("update_goal", {"status": "complete"}), call("get_goal", {})]),
            Reply(calls=[call("create_goal", {"objective": "third"})]),
            Reply(calls=[call("update_goal", {"status": "complete"})]),
            "done",
        ]
    )
    result = await agent.run("go")
    no_goal_update, no_goal_get = outputs(result, 0)
    assert no_goal_update["error"].startswith("INVALID_STATE:")
    assert no_goal_get == {"message": "No session goal is set."}
    assert outputs(result, 1)[0]["error"].startswith("INVALID_ARGS:")
    first = outputs(result, 2)[0]["goal"]
    second = outputs(result, 3)[0]
    assert "active goal already exists" in second["error"]
    assert outputs(result, 4)[0]["error"].startswith("INVALID_ARGS:")
    blocked = outputs(result, 5)[0]["goal"]
    assert blocked["status"] == "blocked" and "terminalAtUnix" in blocked
    terminal_update, got = outputs(result, 6)
    assert "terminal" in terminal_update["error"]
    assert got["goal"]["status"] == "blocked" and got["goal"]["id"] == first["id"]
    third = outputs(result, 7)[0]["goal"]
    assert third["status"] == "active" and third["id"] != first["id"]
    completed = outputs(result, 8)[0]["goal"]
    assert (
        completed["status"] == "complete" and completed["terminalAtUnix"] >= third["createdAtUnix"]
    )


BAD_CREATES: list[Any] = [
    {},
    {"objective": ""},
    {"objective": "   "},
    {"objective": 42},
    {"objective": None},
    {"objective": ["x"]},
    {"objective": "x", "oops": 1},
]
BAD_UPDATES: list[Any] = [
    {},
    {"status": "active"},
    {"status": "COMPLETE"},
    {"status": 1},
    {"status": None},
    {"status": True},
    {"status": "complete", "x": 0},
]


async def test_goal_tools_answer_their_own_schema_violations() -> None:
    """Missing, empty or wrongly typed arguments get the tool's own INVALID_ARGS answer (a
    successful result the model sees), not the runtime's generic invalid_arguments error."""
    model = ScriptedModel(
        [
            Reply(calls=[call("create_goal", a, id=f"c{i}") for i, a in enumerate(BAD_CREATES)]),
            Reply(calls=[call("create_goal", {"objective": "real"})]),
            Reply(calls=[call("update_goal", a, id=f"u{i}") for i, a in enumerate(BAD_UPDATES)]),
            Reply(calls=[call("get_goal", {"extra": 1})]),
            Reply(calls=[call("update_goal", {"status": "complete"})]),
            "done",
        ]
    )
    agent = setup_goal(Agent(model, name="worker"), GoalOptions(max_retries=0))
    result = await agent.run("go")
    for step in (0, 2, 3):
        for action in result.steps[step].actions:
            assert not action.is_error and action.error_kind is None, action
            assert set(action.output) == {"error"}, action.output
            assert action.output["error"].startswith("INVALID_ARGS: "), action.output
    assert all("objective" in o["error"] for o in outputs(result, 0))
    assert all("'complete' or 'blocked'" in o["error"] for o in outputs(result, 2))
    # The bad updates changed nothing: the goal was still active until the last call.
    assert outputs(result, 4)[0]["goal"]["status"] == "complete"
    # The model is shown each answer as a plain (not error) tool result.
    shown = [
        part
        for message in model.requests[1].messages
        for part in message.parts
        if isinstance(part, ToolResultPart)
    ]
    assert len(shown) == len(BAD_CREATES)
    assert all(
        not p.is_error and json.loads(p.content)["error"].startswith("INVALID_ARGS:") for p in shown
    )


def test_goal_tool_schemas_still_say_what_is_required() -> None:
    """objective is a required string; status a required enum of complete and blocked."""
    from agentloop.goals import GoalToolSet

    specs = {s.name: s.parameters for t in GoalToolSet()._tools for s in t.specs()}
    create, update, get = specs["create_goal"], specs["update_goal"], specs["get_goal"]
    assert create["required"] == ["objective"]
    assert create["properties"]["objective"]["type"] == "string"
    assert update["required"] == ["status"]
    assert update["properties"]["status"]["type"] == "string"
    assert update["properties"]["status"]["enum"] == ["complete", "blocked"]
    assert get["properties"] == {}


async def test_ten_parallel_creates_leave_exactly_one_active_goal() -> None:
    """Goal tools of one reply apply in the model's order: the first create wins."""
    calls = [call("create_goal", {"objective": f"goal {i}"}, id=f"c{i}") for i in range(10)]
    result = await goal_agent([Reply(calls=calls), "ok"], max_retries=0).run("go")
    answers = outputs(result)
    assert answers[0]["message"] == "Goal created."
    assert all("active goal already exists" in a["error"] for a in answers[1:])
    goal = decode_goal((result.state or {})["goal:worker"])
    assert goal is not None and goal.objective == "goal 0"


# -- host side ----------------------------------------------------------------------------------


async def test_start_goal_writes_the_goal_and_records_the_change(tmp_path: Path) -> None:
    """start_goal creates the session, strips the objective and records a host change."""
    async with SQLiteStore(tmp_path / "g.db") as store:
        goal = await start_goal(store, session_id="s1", objective="  write docs  ", branch="bot")
        session = await store.get("s1")
        assert session is not None
        assert goal.objective == "write docs"
        assert session.state["goal:bot"] == encode_goal(goal)
        change = session.history[-1]
        assert isinstance(change, StateChangeRecord) and change.source == "host"
        assert change.changes == {"goal:bot": encode_goal(goal)}
        again = await start_goal(store, session_id="s1", objective="other", branch="bot")
        assert again.id != goal.id
        assert get_goal_record(await store.get("s1"), branch="bot") == again


async def test_start_goal_on_an_existing_session_and_with_a_prefix() -> None:
    """An existing session keeps its state; a custom prefix names the key; blank objectives
    raise."""
    store = InMemoryStore()
    await store.create("s2", state={"other": 1})
    agent = Agent(ScriptedModel([]), name="bot")
    goal = await start_goal(
        store, session_id="s2", objective="x", agent=agent, state_key_prefix="g"
    )
    session = await store.get("s2")
    assert session is not None and session.state == {"other": 1, "g:bot": encode_goal(goal)}
    with pytest.raises(UserError, match="blank"):
        await start_goal(store, session_id="s2", objective="   ", branch="bot")


async def test_start_goal_refuses_a_temp_prefix_and_stores_nothing() -> None:
    """A temp: key would not persist: start_goal refuses it, as GoalOptions does."""
    store = InMemoryStore()
    with pytest.raises(UserError, match="temp:"):
        await start_goal(
            store, session_id="t", objective="x", branch="bot", state_key_prefix="temp:goal"
        )
    assert await store.get("t") is None


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SessionStore]:
    """A fresh store of each back end."""
    kind: str = request.param
    opened: SessionStore
    if kind == "memory":
        opened = InMemoryStore()
    elif kind == "sqlite":
        opened = SQLiteStore(tmp_path / "goals.db")
    else:
        opened = PostgresStore(request.getfixturevalue("pg_schema_dsn"))
    async with opened:
        yield opened


async def test_start_goal_on_a_busy_session_raises_session_busy(any_store: SessionStore) -> None:
    """While another holds the session's lease, start_goal raises SessionBusy (as a run would)
    and stores nothing; once it is released, start_goal works and leaves no lease behind."""
    await any_store.create("busy")
    lease = await any_store.acquire_lease("busy", owner="a-run", ttl=30)
    with pytest.raises(SessionBusy):
        await start_goal(any_store, session_id="busy", objective="x", branch="bot")
    with pytest.raises(SessionBusy):
        await start_goal(
            any_store, session_id="busy", objective="x", branch="bot", wait_for_session=0.05
        )
    session = await any_store.get("busy")
    assert session is not None and "goal:bot" not in session.state and session.version == 0
    await any_store.release_lease(lease)
    goal = await start_goal(any_store, session_id="busy", objective="x", branch="bot")
    assert get_goal_record(await any_store.get("busy"), branch="bot") == goal
    again = await any_store.acquire_lease("busy", owner="next-run", ttl=30)  # not left held
    assert again.fence == lease.fence + 2  # start_goal took (and released) the lease in between


async def test_start_goal_waits_for_a_busy_session(any_store: SessionStore) -> None:
    """wait_for_session=: start_goal waits for the lease, commits under it and releases it."""
    await any_store.create("wait")
    lease = await any_store.acquire_lease("wait", owner="a-run", ttl=30)
    done = anyio.Event()
    goals: list[GoalRecord] = []

    async def host() -> None:
        goals.append(
            await start_goal(
                any_store, session_id="wait", objective="later", branch="bot", wait_for_session=30
            )
        )
        done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(host)
        await anyio.sleep(0.05)
        assert not done.is_set()
        await any_store.commit("wait", expected_version=0, set_state={"run": 1}, lease=lease)
        await any_store.release_lease(lease)
    session = await any_store.get("wait")
    assert session is not None and session.state["run"] == 1
    assert get_goal_record(session, branch="bot") == goals[0]
    await any_store.acquire_lease("wait", owner="next-run", ttl=30)  # not left held


async def test_start_goal_during_a_run_of_the_session() -> None:
    """A run holds its session: start_goal raises SessionBusy, or with wait_for_session waits
    for the run to end; the run's own changes are kept."""
    store = InMemoryStore()
    started, go_on = anyio.Event(), anyio.Event()

    async def slow(request: ModelRequest) -> str:
        started.set()
        await go_on.wait()
        return "finished"

    agent = Agent(FunctionModel(slow), name="bot", store=store)
    await store.create("live", state={"mine": 1})
    goals: list[GoalRecord] = []

    async def host() -> None:
        goals.append(
            await start_goal(
                store, session_id="live", objective="next", agent=agent, wait_for_session=30
            )
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(functools.partial(agent.run, "hi", session="live"))
        await started.wait()
        with pytest.raises(SessionBusy):
            await start_goal(store, session_id="live", objective="now", agent=agent)
        tg.start_soon(host)
        await anyio.sleep(0.05)
        assert not goals
        go_on.set()
    session = await store.get("live")
    assert session is not None and session.state["mine"] == 1
    assert [type(r).__name__ for r in session.history] == [
        "RunRecord",
        "StepRecord",
        "RunEndRecord",
        "StateChangeRecord",
    ]
    assert get_goal_record(session, branch="bot") == goals[0]


async def test_a_host_goal_is_seen_by_the_tools_and_enforced() -> None:
    """After start_goal: create_goal is refused, get_goal sees it, a premature final is
    intercepted."""
    store = InMemoryStore()
    await start_goal(store, session_id="s3", objective="finish the report", branch="worker")
    blocked: list[RetryEvent] = []
    agent = goal_agent(
        [
            Reply(calls=[call("create_goal", {"objective": "mine"}), call("get_goal", {})]),
            "All done!",
            Reply(calls=[call("update_goal", {"status": "complete"})]),
            "Report finished.",
        ],
        on_retry=blocked.append,
    ).replace(store=store)
    result = await agent.run("write the report", session="s3")
    refused, seen = outputs(result)
    assert "active goal already exists" in refused["error"]
    assert seen["goal"]["objective"] == "finish the report"
    assert [e.reason for e in blocked] == ["blocked"]
    assert result.output == "Report finished."
    stored = get_goal_record(await store.get("s3"), branch="worker")
    assert stored is not None and stored.status is GoalStatus.COMPLETE


async def test_the_goal_survives_a_commit_and_a_reload_from_sqlite(tmp_path: Path) -> None:
    """A goal created in one run is there, unchanged, after reopening the database."""
    path = tmp_path / "persist.db"
    async with SQLiteStore(path) as store:
        agent = goal_agent(
            [Reply(calls=[call("create_goal", {"objective": "persist me"})]), "noted"],
            max_retries=0,
        )
        await agent.replace(store=store).run("go", session="p")
    async with SQLiteStore(path) as store:
        goal = get_goal_record(await store.get("p"), branch="worker")
    assert goal is not None and goal.objective == "persist me"
    assert goal.status is GoalStatus.ACTIVE


# -- enforcement --------------------------------------------------------------------------------


def _active_state(objective: str = "the objective", branch: str = "worker") -> dict[str, Any]:
    return {f"goal:{branch}": encode_goal(GoalRecord.new(objective))}


async def test_guidance_is_injected_once_into_every_request() -> None:
    """Goal or no goal, each system message holds the guidance exactly once."""
    model = ScriptedModel([Reply(calls=[call("get_goal", {})]), "fine"])
    agent = setup_goal(Agent(model, name="worker", instructions="Be useful."))
    await agent.run("hi")
    for request in model.requests:
        assert (request.system or "").count(MARKER) == 1
        assert request.system is not None and request.system.startswith("Be useful.")


async def test_a_premature_final_is_suppressed_and_the_model_nudged() -> None:
    """One interception: a blocked event, then a request ending in one nudge for attempt 1."""
    events: list[RetryEvent] = []
    model = ScriptedModel(
        ["Done!", Reply(calls=[call("update_goal", {"status": "complete"})]), "Really done."]
    )
    agent = setup_goal(Agent(model, name="worker"), GoalOptions(on_retry=events.append))
    result = await agent.run("go", state=_active_state("ship v2"))
    assert [(e.reason, e.attempt_number, e.max_retries) for e in events] == [("blocked", 1, 3)]
    assert events[0].goal.objective == "ship v2" and events[0].agent_name == "worker"
    nudges = [m for m in model.requests[1].messages if "still active" in m.text]
    assert len(nudges) == 1 and nudges[0] is model.requests[1].messages[-1]
    assert "ship v2" in nudges[0].text and "attempt 1" in nudges[0].text
    assert all("still active" not in m.text for m in model.requests[0].messages)
    assert result.output == "Really done."


async def test_the_budget_is_spent_then_the_final_passes() -> None:
    """With max_retries=2: two interceptions, then an exhausted event and the final."""
    events: list[RetryEvent] = []
    agent = setup_goal(
        Agent(ScriptedModel(["one", "two", "three"]), name="worker"),
        GoalOptions(max_retries=2, on_retry=events.append),
    )
    result = await agent.run("go", state=_active_state())
    assert [(e.reason, e.attempt_number) for e in events] == [
        ("blocked", 1),
        ("blocked", 2),
        ("exhausted", 2),
    ]
    assert result.output == "three" and len(result.steps) == 1


@pytest.mark.parametrize(
    "reply",
    [
        Reply(text="partial", finish="length"),
        Reply(thought="only thinking"),
        Reply(text="let me check", calls=[call("get_goal", {})]),
    ],
    ids=["truncated", "thought-only", "with-actions"],
)
async def test_replies_that_are_not_premature_finals_pass(reply: Reply) -> None:
    """Truncated, thought-only and action replies are not intercepted."""
    events: list[RetryEvent] = []
    complete = Reply(calls=[call("update_goal", {"status": "complete"})])
    model = ScriptedModel([reply, complete, "after"])
    agent = setup_goal(Agent(model, name="worker"), GoalOptions(on_retry=events.append))
    await agent.run("go", state=_active_state())
    assert events == []


@pytest.mark.parametrize("status", [None, GoalStatus.COMPLETE, GoalStatus.BLOCKED])
async def test_no_goal_or_a_terminal_goal_lets_the_final_pass(status: GoalStatus | None) -> None:
    """Without an active goal the first final answer ends the run."""
    state = {}
    if status is not None:
        state["goal:worker"] = encode_goal(GoalRecord.new("x").with_status(status))
    events: list[RetryEvent] = []
    model = ScriptedModel(["final"])
    agent = setup_goal(Agent(model, name="worker"), GoalOptions(on_retry=events.append))
    result = await agent.run("go", state=state)
    assert result.output == "final" and events == [] and len(model.requests) == 1


async def test_an_exception_in_on_retry_is_logged_not_raised(caplog: Any) -> None:
    """A failing observer does not break the run."""

    def broken(event: RetryEvent) -> None:
        raise RuntimeError("observer bug")

    agent = setup_goal(
        Agent(ScriptedModel(["a", "b"]), name="worker"),
        GoalOptions(on_retry=broken, max_retries=1),
    )
    result = await agent.run("go", state=_active_state())
    assert result.output == "b"
    assert "on_retry callback failed" in caplog.text


async def test_streaming_shows_the_draft_then_withdraws_it() -> None:
    """The premature answer streams under its attempt, is discarded, and is never the output."""
    agent = setup_goal(
        Agent(ScriptedModel(["Premature!", "The real answer."], chunk_size=3), name="worker"),
        GoalOptions(max_retries=1),
    )
    async with agent.stream("go", state=_active_state()) as run:
        events: list[Event] = [e async for e in run]
    draft = "".join(e.text for e in events if isinstance(e, TextDelta) and e.attempt == 1)
    assert draft == "Premature!"
    discarded = [e for e in events if isinstance(e, AttemptDiscarded)]
    assert [(e.attempt, e.reason) for e in discarded] == [(1, "goal")]
    first_of_attempt_2 = next(
        i for i, e in enumerate(events) if isinstance(e, TextDelta) and e.attempt == 2
    )
    assert events.index(discarded[0]) < first_of_attempt_2
    finished = [e for e in events if isinstance(e, RunFinished)]
    assert len(finished) == 1 and finished[0].result.output == "The real answer."


async def test_two_concurrent_runs_of_one_goal_agent_each_get_the_full_budget() -> None:
    """The retry budget is per run: two runs at once are each intercepted max_retries times."""
    events: list[RetryEvent] = []

    def reply(request: ModelRequest) -> str:
        return "final"

    agent = setup_goal(
        Agent(FunctionModel(reply, delay=0.001), name="worker"),
        GoalOptions(max_retries=2, on_retry=events.append),
    )
    async with anyio.create_task_group() as tg:
        for _ in range(2):
            tg.start_soon(lambda: agent.run("go", state=_active_state()))
    reasons = [e.reason for e in events]
    assert reasons.count("blocked") == 4 and reasons.count("exhausted") == 2


async def test_sub_agents_with_goals_keep_separate_budgets() -> None:
    """Each sub-agent's goal lives on its branch with its own budget."""
    events: list[RetryEvent] = []
    options = GoalOptions(max_retries=1, on_retry=events.append)

    def child_reply(request: ModelRequest) -> Reply | str:
        if any(m.role == "tool" for m in request.messages):
            return "child final"
        return Reply(calls=[call("create_goal", {"objective": "child work"})])

    children = [setup_goal(Agent(FunctionModel(child_reply), name=n), options) for n in ("a", "b")]
    parent = Agent(
        ScriptedModel(
            [
                Reply(calls=[call("a", {"task": "x"}, id="ca"), call("b", {"task": "y"}, id="cb")]),
                "parent final",
            ]
        ),
        name="lead",
        tools=[c.as_tool() for c in children],
    )
    result = await parent.run("go")
    by_branch = sorted((e.branch, e.reason) for e in events)
    assert by_branch == [
        ("lead.a", "blocked"),
        ("lead.a", "exhausted"),
        ("lead.b", "blocked"),
        ("lead.b", "exhausted"),
    ]
    assert {"goal:lead.a", "goal:lead.b"} <= set(result.state or {})
    assert result.output == "parent final"


async def test_end_to_end_interception_then_completion() -> None:
    """Call 1 'Done!' is intercepted, call 2 completes the goal, call 3 answers."""
    store = InMemoryStore()
    await start_goal(store, session_id="e2e", objective="tidy the repo", branch="worker")
    model = ScriptedModel(
        ["Done!", Reply(calls=[call("update_goal", {"status": "complete"})]), "Tidy now."]
    )
    agent = setup_goal(Agent(model, name="worker", store=store))
    result = await agent.run("tidy", session="e2e")
    assert result.output == "Tidy now." and len(model.requests) == 3
    assert "tidy the repo" in model.requests[1].messages[-1].text
    assert all("still active" not in m.text for m in model.requests[2].messages)
    stored = get_goal_record(await store.get("e2e"), branch="worker")
    assert stored is not None and stored.status is GoalStatus.COMPLETE


def test_goal_options_are_checked() -> None:
    """A temp: prefix and a nudge with unknown fields are UserErrors."""
    with pytest.raises(UserError, match="temp:"):
        GoalOptions(state_key_prefix="temp:goal")
    with pytest.raises(UserError, match="nudge_template"):
        GoalOptions(nudge_template="{unknown}")


def test_goal_enforcement_needs_reflection() -> None:
    """Without reflection the run would end before the goal could matter."""
    agent = setup_goal(Agent(ScriptedModel([]), name="worker"))
    with pytest.raises(UserError, match="goal enforcement"):
        agent.replace(reflect_on_tool_use=False)
