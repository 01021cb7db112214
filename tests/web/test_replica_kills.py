"""Kill tests of the web front on Temporal, with real processes: two ``agentloop serve --temporal``
replicas behind a round-robin proxy (``tests/support/proxy.py``, as a load balancer), two
``agentloop worker`` processes, a Temporal dev server, and Chromium on the built-in page.

- The replica a browser streams from is SIGKILLed mid-answer: the page reconnects through the
  proxy (``Last-Event-ID``), lands on the other replica, and shows the whole answer once.
- The worker running a tool is SIGKILLed: the run finishes on the other worker, the tool run
  again with the same idempotency key.
- Every replica and worker is SIGKILLed while a run waits for an approval; one replica and one
  worker start afresh; the approval given on the page runs the tool once.

The processes live for the module (each test starts only what the one before killed). They
are forked from one warm process that imported the SDKs once (``_zygote.py``), where ``fork``
exists: each still a process of its own, SIGKILLed by its pid."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.from_thread
import httpx2
import pytest

from agentloop.testing import ProviderServer
from tests.support.proxy import RoundRobinProxy
from tests.support.temporal import free_port, import_temporal
from tests.support.warm import warm_process

from ._replicated import ANSWER, GUARD, GUARD_ANSWER, SLOW, SLOW_ANSWER, STORY, WORDS, Provider
from ._serving import Frame, frames
from .test_browser import _page

import_temporal()

pytestmark = [pytest.mark.temporal, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
# The replicas serve the Agent; the workers its TemporalAgent (an activity is lost after 2 s
# without a heartbeat), on the same task queue. A run's next task leaves a killed worker after
# 1 s (--sticky-timeout), not the default 10 s.
AGENT = "tests.web._replicated:agent"
DURABLE = "tests.web._replicated:durable"
START_TIMEOUT = 60.0  # a process imports the SDKs first, slowly on a busy machine
ZYGOTE = Path(__file__).with_name("_zygote.py")
LAUNCHER = [sys.executable, "-S", str(ROOT / "tests" / "support" / "zygote.py")]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # Playwright's, uvicorn's and Temporal's


@dataclass
class Process:
    """A replica or worker: the process that stands in for it (its launcher, when forked) and
    its own pid, the one its worker identity and the tools' log lines carry."""

    stand_in: subprocess.Popen[bytes]
    pid: int

    def poll(self) -> int | None:
        return self.stand_in.poll()


@dataclass
class Cluster:
    """The processes of the module, and the proxy in front of the replicas."""

    target: str
    queue: str
    env: dict[str, str]
    log: Path
    folder: Path
    proxy: RoundRobinProxy
    url: str
    zygote: str | None  # the warm process's socket; None: each process starts from scratch
    replicas: dict[int, Process] = field(default_factory=dict)
    workers: list[Process] = field(default_factory=list)

    def _start(self, files: Path, *args: str) -> subprocess.Popen[bytes]:
        """``agentloop ARGS --temporal TARGET`` (forked: its pid in ``files.pid``), its stderr
        in ``files.err``."""
        arguments = [*args, "--temporal", self.target]
        if self.zygote is None:
            command = [sys.executable, "-m", "agentloop", *arguments]
        else:
            pid_file = str(files.with_suffix(".pid"))
            command = [*LAUNCHER, "--pid-file", pid_file, self.zygote, *arguments]
        with files.with_suffix(".err").open("wb") as errors:
            return subprocess.Popen(
                command, env=self.env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=errors
            )

    async def _spawn(self, name: str, *args: str) -> Process:
        files = self.folder / f"{name}-{uuid.uuid4().hex[:6]}"
        stand_in = self._start(files, *args)
        if self.zygote is None:
            return Process(stand_in, stand_in.pid)
        pid_file = files.with_suffix(".pid")
        with anyio.fail_after(START_TIMEOUT):
            while not pid_file.exists():
                if stand_in.poll() is not None:
                    raise AssertionError(f"a {name} was not forked: {self._errors()}")
                await anyio.sleep(0.01)
        return Process(stand_in, int(pid_file.read_text()))

    async def start_replica(self) -> None:
        port = free_port()
        process = await self._spawn(
            "replica", "serve", AGENT, "--port", str(port), "--task-queue", self.queue
        )
        async with httpx2.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
            with anyio.fail_after(START_TIMEOUT):
                while True:
                    if process.poll() is not None:
                        raise AssertionError(f"a replica exited: {self._errors()}")
                    try:
                        if (await client.get("/app.js")).status_code == 200:
                            break
                    except httpx2.TransportError:
                        pass
                    await anyio.sleep(0.1)
        self.replicas[port] = process
        self.proxy.backends = [*self.replicas]

    async def start_worker(self) -> None:
        """A worker process, once it polls the task queue (its pid is in its identity)."""
        from temporalio.api.enums.v1 import TaskQueueType
        from temporalio.api.taskqueue.v1 import TaskQueue
        from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

        from agentloop.temporal import connect

        process = await self._spawn("worker", "worker", DURABLE, "--sticky-timeout", "1")
        client = await connect(self.target)
        kinds = [TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW, TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY]
        with anyio.fail_after(START_TIMEOUT):
            while True:
                if process.poll() is not None:
                    raise AssertionError(f"a worker exited: {self._errors()}")
                polling = 0
                for kind in kinds:
                    described = await client.workflow_service.describe_task_queue(
                        DescribeTaskQueueRequest(
                            namespace=client.namespace,
                            task_queue=TaskQueue(name=self.queue),
                            task_queue_type=kind,
                        )
                    )
                    polling += any(
                        p.identity.startswith(f"{process.pid}@") for p in described.pollers
                    )
                if polling == len(kinds):
                    break
                await anyio.sleep(0.1)
        self.workers.append(process)

    async def ensure(self, *, replicas: int, workers: int) -> None:
        """Start what the test before killed, up to ``replicas`` and ``workers`` live ones."""
        self.replicas = {p: r for p, r in self.replicas.items() if r.poll() is None}
        self.workers = [w for w in self.workers if w.poll() is None]
        self.proxy.backends = [*self.replicas] or self.proxy.backends
        async with anyio.create_task_group() as tg:
            for _ in range(replicas - len(self.replicas)):
                tg.start_soon(self.start_replica)
            for _ in range(workers - len(self.workers)):
                tg.start_soon(self.start_worker)

    def kill(self, process: Process) -> None:
        """SIGKILL it, and wait until it is gone (its stand-in exits once it has)."""
        if process.poll() is None:  # else its pid may be another process's by now
            try:
                os.kill(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        process.stand_in.wait()

    def kill_all(self) -> None:
        for process in [*self.replicas.values(), *self.workers]:
            self.kill(process)

    def lines(self) -> list[list[str]]:
        return (
            [line.split() for line in self.log.read_text().splitlines()]
            if self.log.exists()
            else []
        )

    def _errors(self) -> str:
        return "\n".join(f.read_text()[-1500:] for f in sorted(self.folder.glob("*.err")))


@contextmanager
def _warm_process(folder: Path, env: dict[str, str]) -> Generator[str | None]:
    """The socket of a process (``_zygote.py``) that forks the ``agentloop`` command, for the
    module; ``None`` without ``fork``."""
    if not hasattr(os, "fork"):
        yield None
        return
    path = folder / "zygote.sock"
    with warm_process(
        ZYGOTE, path, env=env, cwd=ROOT, timeout=START_TIMEOUT, what="the agentloop zygote"
    ):
        yield str(path)


@pytest.fixture(scope="module")
def cluster(temporal_target: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    folder = tmp_path_factory.mktemp("replicas")
    log = folder / "tools.log"
    proxy = RoundRobinProxy([])
    queue = f"replicas-{uuid.uuid4().hex[:8]}"
    with (
        ProviderServer(Provider()) as provider,
        anyio.from_thread.start_blocking_portal("asyncio") as portal,
    ):
        serving, port = portal.start_task(proxy.serve)
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "AGENTLOOP_TEST_PROVIDER_URL": provider.url,
            "AGENTLOOP_TEST_LOG": str(log),
            "AGENTLOOP_TEST_STORE": str(folder / "sessions.db"),
            "AGENTLOOP_TEST_QUEUE": queue,
        }
        with _warm_process(folder, env) as zygote:
            cluster = Cluster(
                temporal_target,
                queue,
                env,
                log,
                folder,
                proxy,
                f"http://127.0.0.1:{port}",
                zygote,
            )
            try:
                yield cluster
            finally:
                cluster.kill_all()
                serving.cancel()


async def _wait_for(
    cluster: Cluster, found: Callable[[list[str]], bool], seconds: float = 30
) -> list[str]:
    with anyio.move_on_after(seconds):
        while True:
            for line in cluster.lines():
                if found(line):
                    return line
            await anyio.sleep(0.05)
    raise AssertionError(f"not in the log after {seconds:g}s: {cluster.lines()}")


async def test_a_browser_on_a_replica_killed_mid_answer_sees_the_whole_answer_once(
    cluster: Cluster,
) -> None:
    await cluster.ensure(replicas=2, workers=2)
    cluster.proxy.routes.clear()
    reply = "() => document.querySelector('#chat .turn .reply')?.textContent ?? ''"
    async with _page(cluster.url) as page:
        await page.fill("#input", STORY)
        await page.click("#send")
        await page.wait_for_function(f"() => ({reply})().includes('{WORDS[9]}')", timeout=30_000)
        before = await page.evaluate(reply)
        # the page's one stream so far: the answer to the POST that started the run
        [(streaming, head)] = cluster.proxy.requests("POST /api/runs ")
        assert "accept: text/event-stream" in head.lower() and not cluster.proxy.requests("/events")
        cluster.kill(cluster.replicas[streaming])
        await page.wait_for_selector("[data-testid=answer]", timeout=30_000)
        after = await page.evaluate(reply)
        answers = await page.evaluate(
            "() => [...document.querySelectorAll('#chat [data-testid=answer]')]"
            ".map(n => n.textContent)"
        )
    assert WORDS[-1] not in before  # killed mid-answer
    assert answers == [ANSWER]
    assert [after.count(word) for word in WORDS] == [1] * len(WORDS)  # no gap, no repeat
    assert after.index(WORDS[0]) < after.index(WORDS[-1])
    # The page reconnected through the proxy, after the last event it had, on the other one.
    again = cluster.proxy.requests("/events")
    assert again and {port for port, _ in again} == {
        next(p for p in cluster.replicas if p != streaming)
    }
    assert all("last-event-id:" in head.lower() for _, head in again)


async def test_a_worker_killed_mid_tool_and_the_tool_run_again_with_the_same_key(
    cluster: Cluster,
) -> None:
    await cluster.ensure(replicas=2, workers=2)
    seen = len(cluster.lines())
    workers = {w.pid: w for w in cluster.workers}
    got: list[Frame] = []
    async with httpx2.AsyncClient(base_url=cluster.url, timeout=60) as client:
        started = await client.post("/api/runs", json={"input": SLOW})
        assert started.status_code == 201, started.text

        async def read() -> None:
            async with client.stream("GET", started.json()["events"]) as response:
                got.extend(await frames(response))

        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            running = await _wait_for(cluster, lambda line: line[:2] == ["start", "slow"])
            cluster.kill(workers[int(running[-2])])
    slow = [line for line in cluster.lines()[seen:] if line[1:2] == ["slow"]]
    assert [line[0] for line in slow] == ["start", "start", "done"]
    assert len({line[2] for line in slow}) == 1  # the same idempotency key
    assert slow[0][-2] != slow[1][-2] == slow[2][-2]  # on the other worker
    assert got[-1].json()["type"] == "run_finished"
    assert got[-1].json()["result"]["output"] == SLOW_ANSWER
    ids = [int(f.id) for f in got if f.id is not None]
    assert len(ids) == len(got) and ids == sorted(set(ids))  # each event once, in order


async def test_everything_killed_while_a_run_waits_then_approved_on_the_page(
    cluster: Cluster,
) -> None:
    await cluster.ensure(replicas=2, workers=2)
    seen = len(cluster.lines())
    async with _page(cluster.url) as page:
        await page.fill("#input", GUARD)
        await page.click("#send")
        await page.wait_for_selector("#chat .action button.approve", timeout=30_000)
        cluster.kill_all()
        await cluster.ensure(replicas=1, workers=1)
        await page.locator("#chat .action button.approve").click()
        await page.wait_for_selector("[data-testid=answer]", timeout=30_000)
        answers = await page.evaluate(
            "() => [...document.querySelectorAll('#chat [data-testid=answer]')]"
            ".map(n => n.textContent)"
        )
    ran = [line for line in cluster.lines()[seen:] if line[:2] == ["run", "guarded"]]
    assert answers == [GUARD_ANSWER]
    [worker] = cluster.workers
    assert len(ran) == 1 and int(ran[0][-2]) == worker.pid  # once, on the new worker
