"""Durable runs take images and files as input, as ``Agent.run`` does: the start payload
carries them (bytes as base64), every model activity's request reaches the provider with them,
a large one goes to each model activity by reference (history does not grow by it per step),
and an input over Temporal's payload limit is refused before anything starts."""

from __future__ import annotations

import base64
import uuid
from typing import Any

import pytest

from agentloop import Agent, UserError
from agentloop._inputs import RunInput
from agentloop.models import FilePart, ImagePart
from agentloop.sessions import RunRecord, SQLiteStore
from agentloop.testing import (
    EmulatedCall,
    EmulatedProvider,
    EmulatedTurn,
    ProviderServer,
    ScriptedModel,
)
from tests.support.temporal import import_temporal

import_temporal()
from agentloop.temporal import TemporalAgent, connect  # noqa: E402
from tests.test_temporal import _same, add, emulated_agent, remember, serving  # noqa: E402

pytestmark = pytest.mark.temporal

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)
PDF = b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n"
ADDING: list[EmulatedTurn | str] = [
    EmulatedTurn(text="Adding.", calls=[EmulatedCall("add", {"a": 2, "b": 3})]),
    "The sum is 5.",
]
# Five steps: four that call a tool, then the answer.
FIVE_STEPS: list[EmulatedTurn | str] = [
    *(
        EmulatedTurn(text=f"Step {n}.", calls=[EmulatedCall("add", {"a": n, "b": 1})])
        for n in range(4)
    ),
    "Done.",
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # Temporal's SDK is asyncio-only


def _queue() -> str:
    return f"q-{uuid.uuid4().hex[:8]}"


def _image(size: int) -> ImagePart:
    return ImagePart(data=PNG + bytes(size - len(PNG)), media_type="image/png")


def _user_content(body: dict[str, Any]) -> Any:
    return next(m for m in body["messages"] if m["role"] == "user")["content"]


async def test_a_durable_run_takes_text_images_and_files_as_agent_run_does(
    temporal_target: str,
) -> None:
    """Small parts (inline) and a large one (by reference) reach the provider in every
    request exactly as in-process, and the run ends as the same run."""
    big = _image(100_000)
    given: list[str | ImagePart | FilePart] = [
        "What is in the pictures and the report?",
        ImagePart(data=PNG, media_type="image/png"),
        ImagePart(url="https://example.com/cat.jpg"),
        big,
        FilePart(data=PDF, media_type="application/pdf", filename="report.pdf"),
    ]
    with ProviderServer(EmulatedProvider(script=ADDING)) as server:
        async with emulated_agent(server.url, name="looker", tools=[add, remember]) as agent:
            local = await agent.run(given)
            in_process = [_user_content(r.json) for r in server.requests]
            durable = TemporalAgent(agent, task_queue=_queue())
            async with serving(temporal_target, durable) as client:
                result = await durable.run(client, given)
        durable_requests = [_user_content(r.json) for r in server.requests][len(in_process) :]
    _same(result, local)
    assert len(durable_requests) == 2
    assert durable_requests == in_process
    big_url = "data:image/png;base64," + base64.b64encode(big.data or b"").decode()
    assert durable_requests[0][3] == {"type": "image_url", "image_url": {"url": big_url}}


async def _history_bytes(client: Any, run_id: str) -> tuple[int, list[int]]:
    """The run's history size, and the size of each model activity's scheduled event."""
    history = await client.get_workflow_handle(run_id).fetch_history()
    model_events = [
        e.ByteSize()
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == "agentloop.model"
    ]
    return sum(e.ByteSize() for e in history.events), model_events


async def test_a_large_image_is_not_copied_into_every_steps_history(temporal_target: str) -> None:
    """A 100 KB image over five steps: the history holds it once (the start payload); each
    model activity's event stays small, and every request still carries the image."""
    image = _image(100_000)
    encoded_size = len(base64.b64encode(image.data or b""))
    sizes: dict[str, tuple[int, list[int]]] = {}
    inputs: dict[str, RunInput] = {"text": "describe it", "image": ["describe it", image]}
    for name, given in inputs.items():
        with ProviderServer(EmulatedProvider(script=FIVE_STEPS)) as server:
            async with emulated_agent(server.url, name="stepper", tools=[add]) as agent:
                durable = TemporalAgent(agent, task_queue=_queue())
                async with serving(temporal_target, durable) as client:
                    run = await durable.start(client, given)
                    await run.result()
                    sizes[name] = await _history_bytes(client, run.run_id)
            bodies = [r.json for r in server.requests]
        assert len(bodies) == 5
        if name == "image":
            url = "data:image/png;base64," + base64.b64encode(image.data or b"").decode()
            sent = {"type": "image_url", "image_url": {"url": url}}
            assert all(_user_content(b)[1] == sent for b in bodies)
    (text_total, text_steps), (image_total, image_steps) = sizes["text"], sizes["image"]
    print(f"history: text {text_total} B, with a 100 KB image {image_total} B")
    print(f"model activity events: text {text_steps}, image {image_steps}")
    assert len(image_steps) == 5
    assert image_total - text_total < encoded_size * 1.2  # the image once, not once per step
    assert max(image_steps) < 4 * 1024


async def test_an_input_over_temporals_payload_limit_is_refused_before_it_starts(
    temporal_target: str,
) -> None:
    with ProviderServer(EmulatedProvider(script=ADDING)) as server:
        async with emulated_agent(server.url, name="toolarge", tools=[add]) as agent:
            queue = _queue()
            durable = TemporalAgent(agent, task_queue=queue)
            client = await connect(temporal_target)
            with pytest.raises(UserError, match=r"2 MB payload limit.*by URL"):
                await durable.start(client, ["look", _image(1_600_000)])
            started = [w async for w in client.list_workflows(f"TaskQueue = '{queue}'")]
    assert started == []


# Older aiohttp (the dependency floors) warns about a raw body this large; the suite makes
# warnings errors, and the warning is the library's, not a fault of the run.
@pytest.mark.filterwarnings("ignore:Sending a large body directly with raw bytes:ResourceWarning")
async def test_an_input_just_under_the_limit_runs_durably(temporal_target: str) -> None:
    """1.4 MB of image (1.9 MB as base64): the start, the session-less run and its replay."""
    image = _image(1_400_000)
    with ProviderServer(EmulatedProvider(script=ADDING)) as server:
        async with emulated_agent(server.url, name="nearlimit", tools=[add]) as agent:
            durable = TemporalAgent(agent, task_queue=_queue())
            async with serving(temporal_target, durable) as client:
                result = await durable.run(client, ["look", image])
        assert len(server.requests) == 2
    assert result.output == "The sum is 5."


async def test_a_durable_session_run_keeps_its_images_as_in_process(
    temporal_target: str, tmp_path: Any
) -> None:
    """The session's run record holds the input's parts whether the run was durable or not."""
    given: list[str | ImagePart | FilePart] = [
        "look",
        _image(20_000),
        ImagePart(url="https://x.io/a.png"),
    ]
    async with SQLiteStore(str(tmp_path / "sessions.db")) as store:
        agent = Agent(ScriptedModel(["seen", "seen"]), name="keeper", store=store)
        durable = TemporalAgent(agent, task_queue=_queue())
        await agent.run(given, session="local")
        async with serving(temporal_target, durable) as client:
            await durable.run(client, given, session="durable")
        local, kept = await store.get("local"), await store.get("durable")
    assert local is not None and kept is not None
    records = [s.history[0] for s in (local, kept)]
    assert all(isinstance(r, RunRecord) for r in records)
    local_record, durable_record = records
    assert isinstance(local_record, RunRecord) and isinstance(durable_record, RunRecord)
    assert durable_record.input == local_record.input == "look"
    assert durable_record.input_parts is not None
    assert durable_record.input_parts == local_record.input_parts
