"""Crash survival of durable runs: three worker processes; SIGKILL the one running a tool, then
the one streaming the next reply. Another worker carries the run on each time; the finished
tool never runs again, the one in flight runs again with the same idempotency key, and the
result is the uninterrupted run's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentloop import AttemptDiscarded, RunResult
from agentloop.testing import EmulatedCall, EmulatedProvider, EmulatedTurn, ProviderServer
from tests.support.temporal import import_temporal
from tests.support.warm import warm_process

import_temporal()
from agentloop.temporal import connect, replayer  # noqa: E402
from tests._temporal_worker import crash_agent  # noqa: E402

pytestmark = [pytest.mark.temporal, pytest.mark.slow]

WORKER = Path(__file__).with_name("_temporal_worker.py")
ROOT = Path(__file__).resolve().parent.parent
ZYGOTE = Path(__file__).with_name("_temporal_zygote.py")
LAUNCHER = [sys.executable, "-S", str(ROOT / "tests" / "support" / "zygote.py")]
START_TIMEOUT = 60.0
SCRIPT: list[EmulatedTurn | str] = [
    EmulatedTurn(
        text="Both at once.",
        calls=[EmulatedCall("quick", {"n": 1}), EmulatedCall("slow", {"n": 2})],
    ),
    "Quick gave 1 and slow gave 20, so the answer is 21.",
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def provider() -> Iterator[ProviderServer]:
    # Slow text: each reply streams for most of a second, so a worker can die mid-stream.
    with ProviderServer(EmulatedProvider(script=SCRIPT, chunk_delay=0.1, text_chunks=8)) as server:
        yield server


Spawn = Callable[[str, str, str, Path], "subprocess.Popen[bytes]"]


@pytest.fixture(scope="module")
def spawn_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Spawn]:
    """Start a worker process (``_temporal_worker.py TARGET QUEUE URL LOG``): forked from a warm
    process (``_temporal_zygote.py``) that imported the SDKs once, where ``fork`` exists. The
    worker's pid is the one it logs; killing the returned process kills the worker too."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if not hasattr(os, "fork"):

        def fresh(target: str, queue: str, url: str, log: Path) -> subprocess.Popen[bytes]:
            return subprocess.Popen(
                [sys.executable, str(WORKER), target, queue, url, str(log)], env=env
            )

        yield fresh
        return
    path = tmp_path_factory.mktemp("temporal") / "zygote.sock"

    def forked(target: str, queue: str, url: str, log: Path) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [*LAUNCHER, str(path), str(WORKER), target, queue, url, str(log)], env=env
        )

    with warm_process(
        ZYGOTE, path, env=env, cwd=ROOT, timeout=START_TIMEOUT, what="the Temporal worker zygote"
    ):
        yield forked


def _lines(log: Path) -> list[list[str]]:
    return [line.split() for line in log.read_text().splitlines()] if log.exists() else []


async def _wait_for(
    log: Path, predicate: Callable[[list[str]], bool], seconds: float = 30.0
) -> list[str]:
    with anyio.move_on_after(seconds):
        while True:
            for line in _lines(log):
                if predicate(line):
                    return line
            await anyio.sleep(0.05)
    raise AssertionError(f"not in the log after {seconds:g}s: {_lines(log)}")


@pytest.fixture
def workers(
    temporal_target: str, provider: ProviderServer, tmp_path: Path, spawn_worker: Spawn
) -> Iterator[tuple[Path, str]]:
    """Three worker processes on a fresh task queue, and the log they write."""
    log = tmp_path / "log.txt"
    queue = f"crash-{uuid.uuid4().hex[:8]}"
    processes = [spawn_worker(temporal_target, queue, provider.url, log) for _ in range(3)]
    try:
        yield log, queue
    finally:
        for process in processes:
            process.kill()
            process.wait()


async def test_a_run_survives_workers_killed_mid_tool_and_mid_stream(
    temporal_target: str, provider: ProviderServer, workers: tuple[Path, str], tmp_path: Path
) -> None:
    log, queue = workers
    reference = crash_agent(provider.url, str(tmp_path / "uninterrupted.txt"))
    durable = crash_agent(provider.url, str(log))
    durable.task_queue = queue
    uninterrupted: list[RunResult[Any]] = []
    killed: list[int] = []

    async def run_uninterrupted() -> None:
        # The uninterrupted run's result, in this process, while the workers start and the
        # durable run goes on (the emulated provider answers each conversation on its own).
        uninterrupted.append(await reference.agent.run("add them"))
        await reference.agent.resolved_model().aclose()

    async def kill_mid_tool_then_mid_stream() -> None:
        first = await _wait_for(log, lambda line: line[:2] == ["start", "slow"])
        os.kill(int(first[-2]), signal.SIGKILL)
        killed.append(int(first[-2]))
        # The next reply streams only once the slow tool is done: count the streams before.
        streams = len([line for line in _lines(log) if line[0] == "stream"])
        second = await _wait_for(
            log,
            lambda line: (
                line[0] == "stream"
                and [x for x in _lines(log) if x[0] == "stream"].index(line) >= streams
            ),
        )
        await anyio.sleep(0.3)  # mid-stream
        os.kill(int(second[-2]), signal.SIGKILL)
        killed.append(int(second[-2]))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run_uninterrupted)
        await _wait_for(log, lambda _: sum(x[0] == "ready" for x in _lines(log)) == 3, 60)
        client = await connect(temporal_target)
        run = await durable.start(client, "add them")
        tg.start_soon(kill_mid_tool_then_mid_stream)
        events = [event async for event in run]
    result = await run.result()
    [uninterrupted_result] = uninterrupted
    # Its history, with the lost activities and the retries in it, replays deterministically.
    history = await client.get_workflow_handle(run.run_id).fetch_history()
    replay = await replayer([durable]).replay_workflow(history, raise_on_replay_failure=False)
    assert replay.replay_failure is None
    assert len(killed) == 2
    lines = _lines(log)
    quick = [line for line in lines if line[1:2] == ["quick"]]
    slow = [line for line in lines if line[1:2] == ["slow"]]
    assert [line[0] for line in quick] == ["start", "done"]  # finished: never ran again
    assert [line[0] for line in slow] == ["start", "start", "done"]  # in flight: ran again
    assert len({line[2] for line in slow}) == 1  # with the same idempotency key
    assert slow[0][-2] != slow[1][-2]  # on another worker
    assert any(isinstance(e, AttemptDiscarded) and e.reason == "retry" for e in events)
    assert result.output == "Quick gave 1 and slow gave 20, so the answer is 21."
    assert [(a.name, a.output) for a in result.steps[0].actions] == [("quick", 1), ("slow", 20)]
    assert result.output == uninterrupted_result.output
    assert [s.answer for s in result.steps] == [s.answer for s in uninterrupted_result.steps]
    assert [[(a.name, a.input, a.output) for a in s.actions] for s in result.steps] == [
        [(a.name, a.input, a.output) for a in s.actions] for s in uninterrupted_result.steps
    ]


async def test_a_worker_killed_while_its_run_waits_and_the_decision_reaching_another(
    temporal_target: str, tmp_path: Path, spawn_worker: Spawn
) -> None:
    """The run waits on an approval; every worker that ran it is SIGKILLed; a new worker
    process takes the decision, rebuilds the run from its history, and runs the call."""
    script: list[EmulatedTurn | str] = [
        EmulatedTurn(calls=[EmulatedCall("guarded", {"n": 3})]),
        "guarded gave 3",
    ]
    log = tmp_path / "log.txt"
    queue = f"wait-{uuid.uuid4().hex[:8]}"
    processes: list[subprocess.Popen[bytes]] = []

    def spawn(url: str) -> None:
        processes.append(spawn_worker(temporal_target, queue, url, log))

    from agentloop import Approve
    from agentloop import _events as ev

    with ProviderServer(EmulatedProvider(script=script)) as provider:
        try:
            spawn(provider.url)
            await _wait_for(log, lambda line: line[0] == "ready", 60)
            durable = crash_agent(provider.url, str(log))
            durable.task_queue = queue
            client = await connect(temporal_target)
            run = await durable.start(client, "guard it")
            with anyio.fail_after(30):
                async for event in run:
                    if isinstance(event, ev.RunWaiting):
                        break
            first = processes[0]
            first.kill()
            first.wait()
            spawn(provider.url)
            await _wait_for(log, lambda _: sum(x[0] == "ready" for x in _lines(log)) == 2, 60)
            with anyio.fail_after(30):
                await run.decide({event.result.pending[0].id: Approve()})
                result = await run.result()
        finally:
            for process in processes:
                process.kill()
                process.wait()
    history = await client.get_workflow_handle(run.run_id).fetch_history()
    replay = await replayer([durable]).replay_workflow(history, raise_on_replay_failure=False)
    assert replay.replay_failure is None
    assert result.output == "guarded gave 3"
    ran = [line for line in _lines(log) if line[:2] == ["run", "guarded"]]
    ready = [line for line in _lines(log) if line[0] == "ready"]
    # Two workers, each a process of its own; the call ran once, in the second one.
    assert len(ready) == 2 and ready[0][-2] != ready[1][-2]
    assert len(ran) == 1 and ran[0][-2] == ready[1][-2]
