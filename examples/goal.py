"""Session goals: a run may not end on an answer that merely looks final.

Shows both ways a goal is set, and the interception that keeps the run going:

1. Model side: ``setup_goal(agent)`` gives the model ``create_goal`` / ``get_goal`` /
   ``update_goal`` and the enforcement middleware. The model creates a goal, answers too early, is
   intercepted (the draft it streamed is withdrawn with ``AttemptDiscarded(reason="goal")`` and
   ``on_retry`` sees a ``RetryEvent``), works on, closes the goal, and answers.
2. Host side: ``start_goal(store, session_id=…, objective=…, agent=…)`` sets the goal before the
   run, as a ``/goal`` command would; the model must close it before its answer counts.

The goal lives in the session's state (``goal:<agent name>``) and is read back with
``get_goal_record`` and ``render_goal``. Runs offline on a scripted model (this example shows the
mechanism, so it always uses the scripted model).

Run: ``python examples/goal.py``
"""

from __future__ import annotations

import anyio

from agentloop import ActionStarted, Agent, AttemptDiscarded, ModelCallStarted, TextDelta, tool
from agentloop.goals import (
    GoalOptions,
    RetryEvent,
    get_goal_record,
    render_goal,
    setup_goal,
    start_goal,
)
from agentloop.sessions import InMemoryStore
from agentloop.testing import Reply, ScriptedModel, call

RELEASE_NOTES: dict[str, str] = {}


@tool
async def write_section(title: str, text: str) -> str:
    """Write one section of the release notes.

    Args:
        title: the section's title
        text: its text
    """
    await anyio.sleep(0.05)
    RELEASE_NOTES[title] = text
    return f"written: {title} ({len(RELEASE_NOTES)} sections so far)"


RETRIES: list[RetryEvent] = []


async def show(agent: Agent, prompt: str, *, session: str, store: InMemoryStore) -> None:
    """Stream a run: each attempt's text on its own line, a withdrawn draft marked as such."""
    drafts: dict[int, str] = {}
    async with agent.stream(prompt, session=session, store=store) as run:
        async for event in run:
            if isinstance(event, ModelCallStarted):
                print(f"\n  [attempt {event.attempt}] ", end="")
            elif isinstance(event, TextDelta):
                drafts[event.attempt] = drafts.get(event.attempt, "") + event.text
                print(event.text, end="", flush=True)
            elif isinstance(event, ActionStarted):
                print(f"→ {event.name}({event.input}) ", end="")
            elif isinstance(event, AttemptDiscarded):
                print(
                    f"\n  ✗ withdrawn ({event.reason}): ~~{drafts.get(event.attempt, '')}~~", end=""
                )
    result = run.result
    print(f"\n  answer: {result.output}  ({result.usage.requests} model calls)")
    for retry in RETRIES:
        print(
            f"  on_retry saw: {retry.reason}, attempt {retry.attempt_number} of {retry.max_retries}"
        )
    RETRIES.clear()


async def main() -> None:
    store = InMemoryStore()
    options = GoalOptions(max_retries=2, on_retry=RETRIES.append)

    print("1. The model sets its own goal")
    model = ScriptedModel(
        [
            Reply(
                text="Several sections: I'll set a goal.",
                calls=[call("create_goal", {"objective": "Release notes with Added and Fixed"})],
            ),
            Reply(calls=[call("write_section", {"title": "Added", "text": "Streaming SSE."})]),
            "Done! The release notes are ready.",  # too early: the goal is still active
            Reply(
                calls=[
                    call("write_section", {"title": "Fixed", "text": "A lease leak."}),
                ]
            ),
            Reply(calls=[call("update_goal", {"status": "complete"})]),
            "The release notes have an Added and a Fixed section.",
        ],
        chunk_size=8,
        delay=0.005,
    )
    agent = setup_goal(Agent(model, name="writer", tools=[write_section]), options)
    async with agent:
        await show(agent, "Write the release notes.", session="notes", store=store)
    session = await store.get("notes")
    print(render_goal(get_goal_record(session, branch=agent.name)))

    print("\n2. The host sets the goal before the run")
    goal = await start_goal(
        store, session_id="review", objective="Review both sections", agent=agent
    )
    print(render_goal(goal))
    model = ScriptedModel(
        [
            "Looks good to me!",  # intercepted: the host's goal is active
            Reply(calls=[call("update_goal", {"status": "complete"})]),
            "Reviewed: both sections read well.",
        ],
        chunk_size=8,
        delay=0.005,
    )
    agent = setup_goal(Agent(model, name="writer", tools=[write_section]), options)
    async with agent:
        await show(agent, "Review the notes.", session="review", store=store)
    session = await store.get("review")
    print(render_goal(get_goal_record(session, branch=agent.name)))


if __name__ == "__main__":
    anyio.run(main)
