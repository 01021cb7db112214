"""1,000 concurrent SSE clients against ``agentloop serve``, in-process and on Temporal.

The same load twice, in the same run. First ``agentloop serve`` (uvicorn, one process: runs live
in it), the baseline; then ``agentloop serve --temporal`` twice (two replicas: runs are
workflows) with two ``agentloop worker`` processes, on a Temporal dev server, the clients taking
the replicas in turn. The agent's model is the emulated provider, in a process of its own.
Clients, all at once from this process (aiohttp), each ``POST /api/runs`` and read ``GET
/api/runs/{run}/events`` to the run's end. Reported: how many streams completed (all must), the
time from a client's POST to the first ``text_delta`` frame it reads, p50 and p99, the wall time
for them all (after one warm-up run per replica, which imports the model SDK), and the durable
figures as ratios of the in-process ones. Both keep their sessions in a SQLite file (the
durable replicas and workers share one).

With ``--floor``, instead: the web path against its floor, ``benchmarks._web_floor`` (bare
Starlette and uvicorn relaying the same emulated stream with aiohttp, one SSE event per text
delta, no engine), beside one in-memory ``agentloop serve`` streaming in its three protocols
(agentloop's own SSE as documented, ``agentloop``: one ``POST /api/runs`` that accepts only
``text/event-stream``; the same as ``POST`` then ``GET`` its events, ``agentloop-get``, the
path a reconnecting client takes; AG-UI: ``POST /api/ag-ui``; the Vercel stream: ``POST
/api/chat``). For 100 and 1,000 clients at once, the targets take turns (the order rotated
each repetition); reported per target, medians of the repetitions: the server process's CPU
per streamed run (``/proc``), p50 and p99 time to the first delta, and each as a ratio of the
floor's. Before each target's measured round, one round of as many clients warms both
servers' connection pools to the provider: without it, only the first target on a server paid
for opening them (the floor in every round, agentloop's first target alone), some 900 K
instructions a run.

With ``--floor --count``, the gate that does not move with the machine's load: both servers run
under valgrind's callgrind with instrumentation off, and for each target, after warm-up runs,
instrumentation is switched on (``callgrind_control -i on``) for the ``clients`` runs at once and
off after them, so the count is the server's own instructions per streamed run, start-up,
imports and warm-up left out. The run takes minutes at 100 clients (callgrind slows the server
some 50×); it needs valgrind and says so, passing, when it is missing.

Run: ``python -m benchmarks.bench_web [--smoke] [--clients 1000]`` (``--smoke``: 20 clients)
or ``python -m benchmarks.bench_web --floor [--clients 100,1000] [--repeat 3] [--count]``
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.provider_process import ProviderServerProcess, raise_fd_limit

ROOT = Path(__file__).resolve().parent.parent
AGENT = "benchmarks._web_agent:agent"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def _client(session, base: str, target: str = "agentloop") -> tuple[float, bool]:
    """One client's time to its first delta, and whether its stream reached the run's end (a
    connection the server dropped is a stream that did not)."""
    import aiohttp

    try:
        return await _stream(session, base, target)
    except aiohttp.ClientError:
        return float("nan"), False


# How each target is asked for a run: (path, body), and the event types of a delta and an end.
_TARGETS: dict[str, tuple[str, dict[str, object], str, str]] = {
    "floor": ("/relay", {"input": "hello"}, "text_delta", "run_finished"),
    # the documented flow: one POST that accepts only text/event-stream answers with the stream
    "agentloop": ("/api/runs", {"input": "hello"}, "text_delta", "run_finished"),
    # the POST answered 201, then GET /api/runs/{run}/events: what a reconnect reads
    "agentloop-get": ("/api/runs", {"input": "hello"}, "text_delta", "run_finished"),
    "ag-ui": (
        "/api/ag-ui",
        {"messages": [{"id": "m1", "role": "user", "content": "hello"}]},
        "TEXT_MESSAGE_CONTENT",
        "RUN_FINISHED",
    ),
    "vercel": (
        "/api/chat",
        {"messages": [{"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hello"}]}]},
        "text-delta",
        "finish",
    ),
}


async def _stream(session, base: str, target: str = "agentloop") -> tuple[float, bool]:
    path, body, delta, end = _TARGETS[target]
    start = time.perf_counter()
    headers = {"accept": "text/event-stream"} if target == "agentloop" else {}
    async with session.post(base + path, json=body, headers=headers) as started:
        if target != "agentloop-get":  # the POST streams
            return await _read(started, start, delta, end)
        if started.status != 201:
            return float("nan"), False
        events = (await started.json())["events"]
    async with session.get(base + events) as response:
        return await _read(response, start, delta, end)


async def _read(response, start: float, delta: str, end: str) -> tuple[float, bool]:
    if response.status != 200:
        return float("nan"), False
    first: float | None = None
    finished = False
    async for raw in response.content:
        line = raw.decode().strip()
        if not line.startswith("data:") or line == "data: [DONE]":
            continue
        kind = json.loads(line[5:])["type"]
        if first is None and kind == delta:
            first = time.perf_counter() - start
        finished = finished or kind == end
    return (first if first is not None else float("nan")), finished


async def _load(bases: list[str], clients: int) -> tuple[list[float], int, float]:
    import aiohttp

    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        for base in bases:
            for _ in range(600):  # the server is up when it answers
                try:
                    async with session.get(base + "/app.js") as ready:
                        if ready.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)
            await _client(session, base, "agentloop-get")  # warm-up: imports the SDK, connects
        start = time.perf_counter()
        results = await asyncio.gather(
            *(_client(session, bases[i % len(bases)], "agentloop-get") for i in range(clients))
        )
        wall = time.perf_counter() - start
    firsts = [first for first, _ in results]
    done = sum(finished for _, finished in results)
    return firsts, done, wall


def _percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


@dataclass
class Measured:
    mode: str
    clients: int
    done: int
    p50: float
    p99: float
    wall: float
    errors: str


def _spawn(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """``agentloop ARGS``, its standard error to ``log`` (a pipe nobody reads would fill, and
    stop the process at its next log line)."""
    with log.open("wb") as errors:
        return subprocess.Popen(
            [sys.executable, "-m", "agentloop", *args],
            env=env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=errors,
        )


def _stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _errors(logs: list[Path]) -> str:
    """The distinct error lines the processes logged, with how often each came."""
    seen: collections.Counter[str] = collections.Counter()
    for log in logs:
        for line in log.read_text(errors="replace").splitlines():
            if re.match(r"^\w[\w.]*(Error|Exception|Conflict|Busy|Failed)\b", line):
                seen[re.sub(r"[0-9a-f]{16,}", "…", line)[:300]] += 1
    return "\n".join(f"{count} × {line}" for line, count in seen.most_common(20))


def _measure(
    mode: str, clients: int, env: dict[str, str], target: str | None, folder: Path
) -> Measured:
    """``clients`` at once against one in-process server, or (``target``: a Temporal server)
    two replicas and two workers; their sessions in one SQLite file in ``folder``."""
    name = "in-process" if target is None else "durable"
    store = ["--store", f"sqlite:///{folder / name}.db"]
    limits = ["--max-runs-per-caller", str(clients), "--max-streams-per-caller", str(clients)]
    limits += ["--max-pending-connections", str(clients)]  # all connect at once
    ports = [_free_port() for _ in range(1 if target is None else 2)]
    durable = [] if target is None else ["--temporal", target, "--task-queue", f"web-{ports[0]}"]
    commands = [["worker", AGENT, *durable, *store] for _ in range(0 if target is None else 2)]
    commands += [["serve", AGENT, "--port", str(p), *limits, *store, *durable] for p in ports]
    logs = [folder / f"{name}-{i}.err" for i in range(len(commands))]
    processes = [_spawn(command, env, log) for command, log in zip(commands, logs, strict=True)]
    try:
        bases = [f"http://127.0.0.1:{port}" for port in ports]
        firsts, done, wall = asyncio.run(_load(bases, clients))
    finally:
        _stop(processes)
    measured = [f for f in firsts if f == f]  # NaN: no delta seen
    p50 = statistics.median(measured) * 1000 if measured else float("nan")
    p99 = _percentile(measured, 0.99) * 1000 if measured else float("nan")
    return Measured(mode, clients, done, p50, p99, wall, _errors(logs))


def _cpu(pid: int) -> float:
    """Seconds of CPU (user and system) process ``pid`` has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Sample:
    target: str
    clients: int
    cpu_ms: float  # the server's CPU per streamed run (with ``--count``: K instructions)
    p50: float
    p99: float
    done: int


_TOTALS = re.compile(r"^totals:\s*(\d+)", re.MULTILINE)


@dataclass
class Counted:
    """A server process under callgrind, instrumentation off but inside ``window``s."""

    pid: int
    out: Path  # its ``--callgrind-out-file``; each dump is a file beside it

    def _control(self, *args: str) -> None:
        # Always this process's pid: without one, callgrind_control acts on every callgrind.
        subprocess.run(["callgrind_control", *args, str(self.pid)], check=True, capture_output=True)

    def on(self) -> None:
        self._control("--zero")
        self._control("--instr=on")

    def off(self, keep: Path | None = None) -> int:
        """Instrumentation off; the instructions counted since ``on`` (the profile copied to
        ``keep``, for ``callgrind_annotate``, when given)."""
        self._control("--instr=off")
        before = set(self.out.parent.glob(self.out.name + "*"))
        self._control("--dump")
        (dump,) = set(self.out.parent.glob(self.out.name + "*")) - before
        if keep is not None:
            shutil.copyfile(dump, keep)
        return int(_TOTALS.findall(dump.read_text())[-1])


async def _round(
    servers: dict[str, tuple[str, int]],
    order: list[str],
    clients: int,
    counted: dict[int, Counted] | None = None,
    keep: Path | None = None,
) -> list[Sample]:
    """``clients`` at once against each target in ``order``, one target after another; with
    ``counted``, the servers' instructions instead of their CPU (each profile kept in the
    folder ``keep``, when given)."""
    import aiohttp

    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=3600 if counted else 600)
    samples = []
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        for target in order:
            base, pid = servers[target]
            for _ in range(3 if counted else 1):  # warm: imports, the provider connection
                await _client(session, base, target)
            # as many connections to the provider as the round needs, on both servers alike
            await asyncio.gather(*(_client(session, base, target) for _ in range(clients)))
            before = _cpu(pid)
            if counted:
                counted[pid].on()
            results = await asyncio.gather(
                *(_client(session, base, target) for _ in range(clients))
            )
            if counted:
                profile = None if keep is None else keep / f"{target}-{clients}.callgrind"
                used = counted[pid].off(profile) / 1000
            else:
                used = (_cpu(pid) - before) * 1000
            firsts = sorted(first for first, _ in results if first == first)
            samples.append(
                Sample(
                    target,
                    clients,
                    used / clients,
                    statistics.median(firsts) * 1000 if firsts else float("nan"),
                    _percentile(firsts, 0.99) * 1000 if firsts else float("nan"),
                    sum(finished for _, finished in results),
                )
            )
    return samples


async def _ready(bases: list[str], path: str = "/app.js") -> None:
    import aiohttp

    async with aiohttp.ClientSession() as session:
        for base in bases:
            for _ in range(3000):  # minutes under callgrind
                try:
                    async with session.get(base + path) as ready:
                        if ready.status < 500:
                            break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)


def floor(
    counts: list[int],
    repeat: int,
    *,
    count: bool = False,
    only: list[str] | None = None,
    keep: Path | None = None,
) -> int:
    """The web path against its floor (``--floor``): prints a table, nonzero if a stream failed.
    With ``count``, the servers run under callgrind and the table gives instructions (each
    target's profile kept in the folder ``keep``, when given); ``only`` names the targets to
    measure (the floor always)."""
    valgrind = shutil.which("valgrind")
    if count and (valgrind is None or shutil.which("callgrind_control") is None):
        print("Skipped: valgrind is not installed (`apt-get install valgrind`).")
        return 0
    raise_fd_limit(8 * max(counts) + 400)
    targets = [t for t in _TARGETS if only is None or t == "floor" or t in only]
    samples: list[Sample] = []
    with (
        ProviderServerProcess(min_fds=4 * max(counts)) as provider,
        tempfile.TemporaryDirectory() as folder,
    ):
        env = {**os.environ, "AGENTLOOP_BENCH_PROVIDER_URL": provider.url, "PYTHONPATH": str(ROOT)}
        n = str(max(counts))
        limits = ["--max-runs-per-caller", n, "--max-streams-per-caller", n]
        limits += ["--max-pending-connections", n]
        if count:  # callgrind slows the server: heads take longer to be read
            limits += ["--head-timeout", "600"]
        ports = [_free_port(), _free_port()]
        outs = [Path(folder) / "serve.cg", Path(folder) / "floor.cg"]
        logs = [Path(folder) / "serve.err", Path(folder) / "floor.err"]
        commands = [
            ["-m", "agentloop", "serve", AGENT, "--port", str(ports[0]), *limits],
            ["-m", "benchmarks._web_floor", str(ports[1])],
        ]
        processes = []
        for command, out, log in zip(commands, outs, logs, strict=True):
            prefix = [sys.executable]
            if count:
                assert valgrind is not None
                prefix = [valgrind, "--tool=callgrind", "--instr-atstart=no"]
                prefix += [f"--callgrind-out-file={out}", sys.executable]
            with log.open("wb") as errors:
                processes.append(
                    subprocess.Popen(
                        [*prefix, *command],
                        env=env,
                        cwd=ROOT,
                        stdout=subprocess.DEVNULL,
                        stderr=errors,
                    )
                )
        serve, relay = processes
        counted = {p.pid: Counted(p.pid, out) for p, out in zip(processes, outs, strict=True)}
        try:
            bases = [f"http://127.0.0.1:{port}" for port in ports]
            asyncio.run(_ready(bases[:1]))
            asyncio.run(_ready(bases[1:], "/"))
            servers = dict.fromkeys(targets, (bases[0], serve.pid))
            servers["floor"] = (bases[1], relay.pid)
            for clients in counts:
                for rep in range(repeat):
                    order = targets[rep % len(targets) :] + targets[: rep % len(targets)]
                    samples += asyncio.run(
                        _round(servers, order, clients, counted if count else None, keep)
                    )
        finally:
            _stop([serve, relay])
        failed = _report(counts, repeat, targets, samples, count)
        if failed:
            print(_errors(logs))
    return 1 if failed else 0


def _report(
    counts: list[int], repeat: int, targets: list[str], samples: list[Sample], count: bool
) -> bool:
    """Prints the table; whether a stream failed."""
    cost = "instructions per run" if count else "CPU per run"
    print(
        f"| clients | target | completed | {cost} | × floor | first delta p50 | × floor "
        "| first delta p99 | × floor |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    failed = False
    for clients in counts:
        rows = {t: [s for s in samples if s.target == t and s.clients == clients] for t in targets}
        med = {
            t: [statistics.median(getattr(s, f) for s in rows[t]) for f in ("cpu_ms", "p50", "p99")]
            for t in targets
        }
        for t in targets:
            done = sum(s.done for s in rows[t])
            failed = failed or done != clients * repeat
            used, p50, p99 = med[t]
            base = med["floor"]
            shown = f"{used:,.0f} K" if count else f"{used:.2f} ms"
            print(
                f"| {clients} | {t} | {done}/{clients * repeat} | {shown} | "
                f"{used / base[0]:.2f}× | {p50:.0f} ms | {p50 / base[1]:.2f}× | {p99:.0f} ms | "
                f"{p99 / base[2]:.2f}× |"
            )
    print(f"\n(medians of {repeat} repetitions, the targets taking turns in a rotated order)")
    if count:
        print("(instructions: callgrind, the server's own in the measured window; the times are")
        print("under callgrind and tell nothing)")
    return failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_web")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--clients", default=None, help="a count; with --floor, a list: 100,1000")
    parser.add_argument("--floor", action="store_true", help="the web path against its floor")
    parser.add_argument("--repeat", type=int, default=3, help="with --floor: repetitions")
    parser.add_argument(
        "--count", action="store_true", help="with --floor: instructions under callgrind"
    )
    parser.add_argument("--targets", help=f"with --floor: some of {','.join(_TARGETS)}")
    parser.add_argument(
        "--keep", type=Path, help="with --floor --count: a folder to keep each target's profile in"
    )
    args = parser.parse_args(argv)
    if args.floor:
        counts = [int(c) for c in (args.clients or ("20" if args.smoke else "100,1000")).split(",")]
        repeat = 1 if args.smoke or args.count else args.repeat
        only = args.targets.split(",") if args.targets else None
        if args.keep is not None:
            args.keep.mkdir(parents=True, exist_ok=True)
        return floor(counts, repeat, count=args.count, only=only, keep=args.keep)
    clients = int(args.clients) if args.clients else (20 if args.smoke else 1000)
    raise_fd_limit(8 * clients + 400)  # the children inherit it
    from tests.support.temporal import TemporalUnavailableHere, start_dev_server

    rows: list[Measured] = []
    note = ""
    with (
        ProviderServerProcess(min_fds=4 * clients) as provider,
        tempfile.TemporaryDirectory() as folder,
    ):
        env = {**os.environ, "AGENTLOOP_BENCH_PROVIDER_URL": provider.url, "PYTHONPATH": str(ROOT)}
        rows.append(_measure("in-process `serve`", clients, env, None, Path(folder)))
        try:
            server = start_dev_server()
        except TemporalUnavailableHere as exc:
            note = f"\nThe durable rows are missing: {exc}."
        else:
            try:
                mode = "`serve --temporal`: 2 replicas, 2 workers"
                rows.append(_measure(mode, clients, env, server.target, Path(folder)))
            finally:
                server.stop()
    print("| mode | clients | completed | first delta p50 | first delta p99 | wall |")
    print("|---|---:|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row.mode} | {row.clients} | {row.done} | {row.p50:.0f} ms | {row.p99:.0f} ms "
            f"| {row.wall:.1f} s |"
        )
    if len(rows) == 2:
        base, durable = rows
        print(
            f"\nDurable / in-process: first delta p50 {durable.p50 / base.p50:.2f}×, "
            f"p99 {durable.p99 / base.p99:.2f}×, wall {durable.wall / base.wall:.2f}×."
        )
    print(note, end="")
    failed = [row for row in rows if row.done != row.clients]
    for row in failed:
        print(f"\n{row.mode}: {row.clients - row.done} streams did not complete:\n{row.errors}")
    return 1 if failed or note else 0


if __name__ == "__main__":
    raise SystemExit(main())
