"""Shared machinery of the benchmarks that run clients against the loopback provider server.

A *configuration* is one client: ``floor`` (a bare loop on ``aiohttp`` + ``json``, no SDK),
``primitives[-stream]`` (the floor inside the anyio primitives the runtime's design requires, with
no engine code: the lowest ``Agent.run`` or ``Agent.stream`` could cost),
``sdk-aiohttp`` / ``sdk-httpx`` (a bare loop on the ``openai`` SDK with its aiohttp or default
httpx2 client), ``<api>-<transport>`` (an agentloop driver through ``Model.stream``, e.g.
``openai-chat-aiohttp``) and ``agent-<api>[-stream]`` (the full ``agentloop.Agent``: two async
tools, native mode; ``-stream`` consumes every event of ``Agent.stream``). Each session is a
two-turn conversation: a user message answered with two parallel tool calls, then the tool
results answered with a short text.

Every measurement runs in a fresh worker process (``measure``), so that its CPU time, heap and peak
memory are its own: a worker imports only what its configuration needs (the floor imports neither
agentloop nor an SDK). The worker checks that the open-file limit it inherited covers its
connection cap and fails loudly otherwise.

Worker command (internal): ``python -m benchmarks._loopback --worker CONFIG --url URL
--sessions S --rounds R --cap C``; ``--worker first-event`` and ``--worker history`` run the
latency and history measurements of ``bench_latency`` and ``bench_history``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from typing import TYPE_CHECKING, Any, TypeAlias

import anyio
import anyio.lowlevel

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectSendStream

TOOLS_CHAT: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"The {name} tool.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}},
                "required": ["query"],
            },
        },
    }
    for name in ("weather", "clock")
]

LABELS = {
    "floor": "floor: aiohttp + json",
    "primitives": "floor + the design's anyio primitives for a run, no engine",
    "primitives-stream": "floor + the design's anyio primitives for a streamed run, no engine",
    "sdk-aiohttp": "openai SDK, aiohttp client",
    "sdk-httpx": "openai SDK (default httpx2 client)",
    "openai-chat-aiohttp": "agentloop OpenAIChatModel, aiohttp",
    "openai-responses-aiohttp": "agentloop OpenAIResponsesModel, aiohttp",
    "anthropic-aiohttp": "agentloop AnthropicModel, aiohttp",
    "openai-chat-httpx": "agentloop OpenAIChatModel, httpx2",
    "agent-openai-chat": "agentloop Agent.run, OpenAI Chat",
    "agent-openai-responses": "agentloop Agent.run, OpenAI Responses",
    "agent-anthropic": "agentloop Agent.run, Anthropic",
    "agent-openai-chat-stream": "agentloop Agent.stream (all events), OpenAI Chat",
    "agent-openai-chat-trio": "agentloop Agent.run, OpenAI Chat, trio (httpx2)",
}

Runner: TypeAlias = Callable[[int], Awaitable[None]]
FD_MARGIN = 100


def rss_kib() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)


def peak_rss_kib() -> int:
    """This process's peak resident size (``VmHWM``). Not ``ru_maxrss``: on Linux that carries the
    parent's size over fork and exec, so a worker started by a big process would report it."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return rss_kib()  # pragma: no cover - no VmHWM


def reset_peak_rss() -> None:
    """Measure the peak from now on (Linux ``clear_refs``); the peak so far is kept otherwise."""
    with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def check_fds(needed: int) -> None:
    """Fail loudly when the open-file limit (raised by the parent, inherited) is too low."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        raise RuntimeError(
            f"open-file limit is {soft} (hard {hard}), below the {needed} descriptors this "
            "benchmark needs; raise the hard limit (ulimit -Hn) and try again"
        )


def concurrently(session: Callable[[], Coroutine[Any, Any, None]]) -> Runner:
    """A runner that starts ``n`` sessions at once and waits for all of them."""

    async def run(n: int) -> None:
        async with anyio.create_task_group() as tg:
            for _ in range(n):
                tg.start_soon(session)

    return run


# -- the configurations ------------------------------------------------------------------------


Turn: TypeAlias = Callable[[list[dict[str, Any]]], Awaitable[tuple[str, list[dict[str, Any]]]]]


def _floor_turn(http: Any, url: str) -> Turn:
    """One streamed Chat Completions call on a bare ``aiohttp`` session: its text and calls."""
    headers = {"content-type": "application/json", "authorization": "Bearer k"}

    async def turn(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
        body = json.dumps(
            {
                "model": "m",
                "messages": messages,
                "tools": TOOLS_CHAT,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
        ).encode()
        text: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        async with http.post(url + "/v1/chat/completions", data=body, headers=headers) as r:
            async for line in r.content:
                if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                    continue
                chunk = json.loads(line[6:])
                for choice in chunk["choices"]:
                    delta = choice["delta"]
                    if delta.get("content"):
                        text.append(delta["content"])
                    for tc in delta.get("tool_calls") or ():
                        call = calls.setdefault(tc["index"], {"arguments": ""})
                        if tc.get("id"):
                            call["id"] = tc["id"]
                            call["name"] = tc["function"]["name"]
                        call["arguments"] += tc["function"].get("arguments") or ""
        return "".join(text), [calls[i] for i in sorted(calls)]

    return turn


@contextlib.asynccontextmanager
async def floor(url: str, cap: int) -> AsyncIterator[Runner]:
    """The floor: what a two-turn session costs with no SDK and no runtime at all."""
    import aiohttp

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=cap)) as http:
        turn = _floor_turn(http, url)

        async def session() -> None:
            messages: list[dict[str, Any]] = [{"role": "user", "content": "weather and time?"}]
            _, calls = await turn(messages)
            messages.append(_assistant_turn(calls))
            messages += [{"role": "tool", "tool_call_id": c["id"], "content": "ok"} for c in calls]
            text, _ = await turn(messages)
            assert text

        yield concurrently(session)


EVENTS_PER_TURN = 12  # Agent.stream sends 24 events in this two-turn conversation


@contextlib.asynccontextmanager
async def primitives(url: str, cap: int, stream: bool) -> AsyncIterator[Runner]:
    """The floor's client inside the anyio primitives the runtime's design requires, and
    nothing else: a task group per run, a deadline around each model call, a task per tool
    call (the run waits for their results), and for ``stream`` a task group and a task that
    drive the run, a bounded memory object stream, and a cancellation check per event read.
    No engine code: what ``agent-*`` costs above this is the engine's own work."""
    import aiohttp

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=cap)) as http:
        floor_turn = _floor_turn(http, url)

        async def turn(
            messages: list[dict[str, Any]], events: MemoryObjectSendStream[int] | None
        ) -> tuple[str, list[dict[str, Any]]]:
            with anyio.CancelScope(deadline=anyio.current_time() + 600):  # the call's deadline
                reply = await floor_turn(messages)
            if events is not None:
                for n in range(EVENTS_PER_TURN):
                    events.send_nowait(n)
            return reply

        async def tool(results: list[str | None], i: int, done: anyio.Event) -> None:
            results[i] = "ok"
            if None not in results:
                done.set()

        async def session(events: MemoryObjectSendStream[int] | None) -> None:
            messages: list[dict[str, Any]] = [{"role": "user", "content": "weather and time?"}]
            async with anyio.create_task_group() as tg:
                _, calls = await turn(messages, events)
                results: list[str | None] = [None] * len(calls)
                done = anyio.Event()
                for i in range(len(calls)):
                    tg.start_soon(tool, results, i, done)
                await done.wait()
                messages.append(_assistant_turn(calls))
                messages += [
                    {"role": "tool", "tool_call_id": c["id"], "content": r}
                    for c, r in zip(calls, results, strict=True)
                ]
                text, _ = await turn(messages, events)
                assert text

        async def streamed_session() -> None:
            send, receive = anyio.create_memory_object_stream[int](64)

            async def drive() -> None:
                async with send:
                    with anyio.CancelScope():
                        await session(send)

            with receive:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(drive)
                    while True:
                        await anyio.lowlevel.checkpoint_if_cancelled()
                        try:
                            receive.receive_nowait()
                            continue
                        except anyio.WouldBlock:
                            pass
                        except anyio.EndOfStream:
                            break
                        try:
                            await receive.receive()
                        except anyio.EndOfStream:
                            break

        yield concurrently(streamed_session if stream else lambda: session(None))


def _assistant_turn(calls: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": c["arguments"]},
            }
            for c in calls
        ],
    }


@contextlib.asynccontextmanager
async def sdk(url: str, cap: int, transport: str) -> AsyncIterator[Runner]:
    """A bare loop on the ``openai`` SDK (``chat.completions.create(stream=True)``)."""
    import httpx2
    import openai

    limits = httpx2.Limits(max_connections=cap, max_keepalive_connections=cap)
    http_client = (
        openai.DefaultAioHttpClient(limits=limits)
        if transport == "aiohttp"
        else openai.DefaultAsyncHttpxClient(limits=limits)
    )
    # The floor waits for a connection as long as it takes; so does every client here (the
    # SDK's default connect timeout, 5 s, is short for 10,000 sessions on 1,000 connections).
    client = openai.AsyncOpenAI(
        api_key="k", base_url=url + "/v1", max_retries=0, http_client=http_client, timeout=600.0
    )

    async def turn(messages: list[Any]) -> tuple[str, list[dict[str, Any]]]:
        stream = await client.chat.completions.create(  # type: ignore[call-overload]
            model="m",
            messages=messages,
            tools=TOOLS_CHAT,
            stream=True,
            stream_options={"include_usage": True},
        )
        text: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        async for chunk in stream:
            for choice in chunk.choices:
                if choice.delta.content:
                    text.append(choice.delta.content)
                for tc in choice.delta.tool_calls or ():
                    call = calls.setdefault(tc.index, {"arguments": ""})
                    if tc.id:
                        call["id"] = tc.id
                        call["name"] = tc.function.name if tc.function else ""
                    if tc.function and tc.function.arguments:
                        call["arguments"] += tc.function.arguments
        return "".join(text), [calls[i] for i in sorted(calls)]

    async def session() -> None:
        messages: list[Any] = [{"role": "user", "content": "weather and time?"}]
        _, calls = await turn(messages)
        messages.append(_assistant_turn(calls))
        messages += [{"role": "tool", "tool_call_id": c["id"], "content": "ok"} for c in calls]
        text, _ = await turn(messages)
        assert text

    try:
        yield concurrently(session)
    finally:
        await client.close()


def make_model(api: str, url: str, cap: int, transport: str = "aiohttp") -> Any:
    """An agentloop driver for the emulated provider at ``url``, with connection cap ``cap``."""
    from agentloop.models.anthropic import AnthropicModel
    from agentloop.models.openai import OpenAIChatModel, OpenAIResponsesModel

    cls = {
        "openai-chat": OpenAIChatModel,
        "openai-responses": OpenAIResponsesModel,
        "anthropic": AnthropicModel,
    }[api]
    base = url if api == "anthropic" else url + "/v1"
    return cls(
        "m", base_url=base, api_key="k", transport=transport, max_connections=cap, timeout=600.0
    )


@contextlib.asynccontextmanager
async def driver(url: str, cap: int, config: str) -> AsyncIterator[Runner]:
    """An agentloop driver alone, through the ``Model.stream`` seam."""
    from agentloop.models import Message, ModelRequest, ResponseBuilder, ToolResultPart, ToolSpec

    api, _, transport = config.rpartition("-")
    model = make_model(api, url, cap, transport)
    tools = tuple(
        ToolSpec(
            name=t["function"]["name"],
            description=t["function"]["description"],
            parameters=t["function"]["parameters"],
        )
        for t in TOOLS_CHAT
    )

    async def session() -> None:
        request = ModelRequest(messages=(Message.user("weather and time?"),), tools=tools)
        builder = ResponseBuilder(provider=model.provider)
        async with model.stream(request) as stream:
            async for delta in stream:
                builder.add(delta)
        first = builder.build()
        results = tuple(
            ToolResultPart(id=c.id, name=c.name, content="ok") for c in first.tool_calls
        )
        request = request.replace(
            messages=(
                *request.messages,
                Message(role="assistant", parts=first.parts),
                Message(role="tool", parts=results),
            )
        )
        builder = ResponseBuilder(provider=model.provider)
        async with model.stream(request) as stream:
            async for delta in stream:
                builder.add(delta)
        assert builder.build().text

    async with model:
        yield concurrently(session)
        _ran(model)


def make_agent(model: Any, feature: str = "", **options: Any) -> Any:
    """The benchmark agent: two async tools (the emulated provider calls both), native mode;
    with ``feature`` (one of ``FEATURES``) on, as a run that uses it and is not stopped by it."""
    from agentloop import Agent, tool

    approval = feature == "approvals"

    @tool(requires_approval=approval)
    async def weather(query: str) -> str:
        """The weather at a place."""
        return f"sunny at {query}"

    @tool(requires_approval=approval)
    async def clock(query: str) -> str:
        """The time at a place."""
        return f"noon at {query}"

    bot = Agent(model, tools=[weather, clock], tool_mode=options.pop("tool_mode", "native"),
                **_feature_options(feature, model), **options)  # fmt: skip
    if feature == "goals":
        from agentloop.goals import setup_goal

        bot = setup_goal(bot)
    return bot


# Each optional feature, turned on alone (``agent-openai-chat+<feature>``): bench_instructions
# counts a plain agent beside each.
FEATURES = ("approvals", "controls", "guardrails", "handoffs", "window", "tracing", "goals")


def _feature_options(feature: str, model: Any) -> dict[str, Any]:
    """The ``Agent`` options that turn ``feature`` on (none of them ends the run)."""
    import agentloop as al

    async def approve(call: Any, run: Any) -> Any:
        return al.Approve()

    async def passes(*args: Any) -> None:
        return None

    match feature:
        case "" | "goals":
            return {}
        case "approvals":
            return {"approver": approve}
        case "controls":
            return {"usage_limits": al.UsageLimits(requests=10, tool_calls=10, total_tokens=10**6)}
        case "guardrails":
            return {
                "guardrails": [
                    al.InputGuardrail(passes),
                    al.OutputGuardrail(passes),
                    al.ToolGuardrail(before=passes, after=passes),
                ]
            }
        case "handoffs":
            return {"handoffs": [al.Agent(model, name="other")]}  # offered, never taken
        case "window":
            return {"context_window": al.ContextWindow(max_tokens=100_000)}
        case "tracing":
            return {"instrument": True}  # OpenTelemetry's global (no-op) tracer provider
    raise ValueError(f"unknown feature {feature!r}; one of {FEATURES}")


@contextlib.asynccontextmanager
async def agent(url: str, cap: int, config: str) -> AsyncIterator[Runner]:
    """The full ``Agent``: ``run`` (no event stream), or ``stream`` with every event read."""
    config, _, feature = config.partition("+")
    api = config.removeprefix("agent-").removesuffix("-stream").removesuffix("-trio")
    # On trio the portable path: the SDK's httpx2 client (aiohttp is asyncio's alone).
    model = make_model(api, url, cap, "httpx" if config.endswith("-trio") else "aiohttp")
    bot = make_agent(model, feature)

    async def run_session() -> None:
        result = await bot.run("weather and time?")
        assert result.error is None and len(result.steps) == 2, result

    async def stream_session() -> None:
        async with bot.stream("weather and time?") as run:
            async for _ in run:
                pass
        assert run.result.error is None and len(run.result.steps) == 2, run.result

    async with model:
        yield concurrently(stream_session if config.endswith("-stream") else run_session)
        _ran(model)


# The transport a worker's driver actually sent on (``Model.transport``), for its result; and, in
# the parent, each configuration's, for the report (``paths_ran``): a direct path turned off (a
# dependency newer than ``_transport.CHECKED``) shows there, not only as slower figures.
_RAN: list[str] = []
PATHS: dict[str, str] = {}


def _ran(model: Any) -> None:
    if model.transport is not None:
        _RAN[:] = [model.transport]


def paths_ran() -> str:
    """One line naming the transport each agentloop configuration measured so far ran on."""
    if not PATHS:
        return ""
    ran = ", ".join(f"`{config}` {transport}" for config, transport in sorted(PATHS.items()))
    return f"Transports that ran: {ran}."


def setup(config: str, url: str, cap: int) -> contextlib.AbstractAsyncContextManager[Runner]:
    if config == "floor":
        return floor(url, cap)
    if config.startswith("primitives"):
        return primitives(url, cap, stream=config.endswith("-stream"))
    if config.startswith("sdk-"):
        return sdk(url, cap, config.removeprefix("sdk-"))
    if config.startswith("agent-"):
        return agent(url, cap, config)
    return driver(url, cap, config)


# -- workers -----------------------------------------------------------------------------------


class GcMeter:
    """Counts the garbage collector's passes per generation and the CPU time they take (a
    callback on every pass: a little overhead of its own, so it is opt-in)."""

    def __init__(self) -> None:
        self.passes = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self.collected = 0  # objects found unreachable: the cyclic garbage
        self._start = 0.0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.process_time()
        else:
            generation = info["generation"]
            self.passes[generation] += 1
            self.seconds[generation] += time.process_time() - self._start
            self.collected += info["collected"]

    def __enter__(self) -> GcMeter:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)


@contextlib.contextmanager
def counting_allocations(into: dict[str, int]) -> Iterator[None]:
    """Counts every allocation of the process meanwhile (memray's tracker, Python's allocator
    included; frees are not counted) into ``into["allocations"]``: objects made per turn are
    CPU spent and garbage to collect, and no timer shows them apart."""
    import tempfile

    import memray

    frees = {int(memray.AllocatorType.FREE), int(memray.AllocatorType.PYMALLOC_FREE)}
    frees.add(int(memray.AllocatorType.MUNMAP))
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "allocations.bin")
        with memray.Tracker(path, trace_python_allocators=True):
            yield
        records = memray.FileReader(path).get_allocation_records()
        into["allocations"] = sum(1 for r in records if int(r.allocator) not in frees)


def _scale_worker(
    config: str,
    url: str,
    sessions: int,
    rounds: int,
    cap: int,
    profile: str | None,
    *,
    gc_freeze: bool = False,
    gc_stats: bool = False,
    allocations: bool = False,
) -> dict[str, Any]:
    check_fds(cap + FD_MARGIN)
    meter = GcMeter()
    counted: dict[str, int] = {}

    async def main() -> dict[str, Any]:
        async with setup(config, url, cap) as run:
            await run(min(sessions, 4))  # warm-up: imports, first connections, caches
            if gc_freeze:  # what a service does after start-up (docs: many sessions)
                gc.collect()
                gc.freeze()
            if gc_stats:
                gc.collect()  # the warm-up's garbage is not the measured rounds'
            startup_peak = peak_rss_kib()
            base = rss_kib()
            reset_peak_rss()
            cpu0, wall0 = time.process_time(), time.perf_counter()
            if profile:
                import cProfile

                prof = cProfile.Profile()
                prof.enable()
            with (
                meter if gc_stats else contextlib.nullcontext(),
                counting_allocations(counted) if allocations else contextlib.nullcontext(),
            ):
                await run(sessions)
                # Memory per session from the first round: later rounds measure the
                # allocator's high-water mark more than the sessions.
                first_peak = peak_rss_kib()
                for _ in range(rounds - 1):
                    await run(sessions)
            if profile:
                prof.disable()
                prof.dump_stats(profile)
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
            if gc_stats:
                # Cycles of sessions that were alive at a young pass were moved to the oldest
                # generation, which a short measurement may never pass over (at S = 1,000, one
                # round, none): collected here, outside the timed window, they count too.
                meter.collected += gc.collect()
        peak = max(startup_peak, peak_rss_kib())
        result: dict[str, Any] = {
            "cpu": cpu,
            "wall": wall / rounds,
            "turns": 2 * sessions * rounds,
            "rss_base": base,
            "rss_peak": peak,
            "rss_first_peak": first_peak,
        }
        if gc_stats:
            result["gc_passes"], result["gc_seconds"] = meter.passes, meter.seconds
            result["gc_collected"] = meter.collected
        result.update(counted)
        if _RAN:
            result["transport"] = _RAN[0]
        return result

    return anyio.run(main, backend="trio" if config.endswith("-trio") else "asyncio")


def measure(
    config: str,
    url: str,
    sessions: int,
    cap: int,
    *,
    rounds: int = 1,
    profile: str | None = None,
    gc_freeze: bool = False,
    gc_stats: bool = False,
    allocations: bool = False,
) -> dict[str, Any]:
    """Run ``rounds`` rounds of ``sessions`` concurrent sessions of ``config`` in a fresh worker
    process: CPU seconds, wall seconds per round, turns, resident KiB after warm-up
    (``rss_base``), at its peak after the first round (``rss_first_peak``) and overall. With
    ``gc_freeze`` the worker freezes its heap after warm-up; with ``gc_stats`` it also reports
    the collector's passes and CPU seconds per generation (``gc_passes``, ``gc_seconds``); with
    ``allocations`` the allocations made in the measured rounds (``allocations``: memray
    traces them, so that run's CPU and memory figures do not count)."""
    cmd = [*_worker_cmd(config, url), "--sessions", str(sessions), "--rounds", str(rounds)]
    cmd += ["--cap", str(cap)]
    if profile:
        cmd += ["--profile", profile]
    if gc_freeze:
        cmd.append("--gc-freeze")
    if gc_stats:
        cmd.append("--gc-stats")
    if allocations:
        cmd.append("--allocations")
    result: dict[str, Any] = _run_worker(cmd, f"{config} at S={sessions}")
    if "transport" in result:
        PATHS[config] = result["transport"]
    return result


def _worker_cmd(worker: str, url: str) -> list[str]:
    return [sys.executable, "-m", "benchmarks._loopback", "--worker", worker, "--url", url]


def _run_worker(cmd: list[str], what: str) -> Any:
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def first_event_delays(config: str, url: str, runs: int) -> list[float]:
    """Sequential runs of ``config`` (see ``bench_latency``): for each, µs from the first bytes
    of SSE data reaching the client process to its consumer holding the first text or thought."""
    cmd = [*_worker_cmd("first-event", url), "--configs", config, "--rounds", str(runs)]
    result: list[float] = _run_worker(cmd, f"first event of {config}")
    return result


def _watch_first_bytes() -> list[int]:
    """Note when bytes of SSE data first reach aiohttp's protocol (every client here reads
    through it): the returned list gets that monotonic time in ns; clear it before a request."""
    import aiohttp.client_proto

    protocol = aiohttp.client_proto.ResponseHandler
    original = protocol.data_received
    seen: list[int] = []

    def data_received(self: Any, data: bytes) -> None:
        if not seen and b"data:" in data:
            seen.append(time.monotonic_ns())
        original(self, data)

    protocol.data_received = data_received  # type: ignore[method-assign]
    return seen


def _first_event_worker(config: str, url: str, runs: int) -> list[float]:
    """The client side of ``bench_latency``: ``runs`` one-request runs, one after another."""
    arrived = _watch_first_bytes()
    delays: list[float] = []
    now = time.monotonic_ns

    def record(first: int) -> None:
        assert arrived and first, "no text arrived"
        delays.append((first - arrived[0]) / 1000)
        arrived.clear()

    async def floor_runs() -> None:
        import aiohttp

        body = json.dumps(
            {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        ).encode()
        headers = {"content-type": "application/json", "authorization": "Bearer k"}
        async with aiohttp.ClientSession() as http:
            for _ in range(runs):
                first = 0
                async with http.post(url + "/v1/chat/completions", data=body, headers=headers) as r:
                    async for line in r.content:
                        if not first and line.startswith(b"data: {"):
                            chunk = json.loads(line[6:])
                            if chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                                first = now()
                record(first)

    async def main() -> None:
        if config == "floor":
            return await floor_runs()
        from agentloop import TextDelta, ThoughtDelta
        from agentloop.models import Message, ModelRequest, TextPiece

        model = make_model("openai-chat", url, 10)
        async with model:
            if config == "driver":
                request = ModelRequest(messages=(Message.user("hi"),))
                for _ in range(runs):
                    first = 0
                    async with model.stream(request) as deltas:
                        async for delta in deltas:
                            if not first and isinstance(delta, TextPiece):
                                first = now()
                    record(first)
                return
            bot = make_agent(model, tool_mode=config.removeprefix("agent-"))
            for _ in range(runs):
                first = 0
                async with bot.stream("hi") as run:
                    async for event in run:
                        if not first and isinstance(event, TextDelta | ThoughtDelta):
                            first = now()
                record(first)

    anyio.run(main, backend="asyncio")
    return delays


def history_step_cpu(url: str, steps: int, runs: int) -> list[list[float]]:
    """``runs`` sessions of ``steps`` tool steps (see ``bench_history``): per run, the CPU
    seconds of each step."""
    cmd = [*_worker_cmd("history", url), "--sessions", str(steps), "--rounds", str(runs)]
    result: list[list[float]] = _run_worker(cmd, "history")
    return result


def _history_worker(url: str, steps: int, runs: int) -> list[list[float]]:
    from agentloop import ModelCallStarted, StepFinished

    cpu = time.process_time

    async def main() -> list[list[float]]:
        out: list[list[float]] = []
        model = make_model("openai-chat", url, 10)
        bot = make_agent(model, max_steps=steps + 10)
        async with model:
            for _ in range(runs + 1):  # the first run warms up (imports, connection, caches)
                costs: list[float] = []
                start: float | None = None
                async with bot.stream("weather and time, step by step?") as run:
                    async for event in run:
                        if isinstance(event, ModelCallStarted) and start is None:
                            start = cpu()  # step 1 starts at its model call (see bench_history)
                        elif isinstance(event, StepFinished):
                            now = cpu()
                            assert start is not None
                            costs.append(now - start)
                            start = now  # the next step starts where this one ended
                result = run.result
                assert result.error is None and len(result.steps) == steps + 1, result.error
                out.append(costs)
        return out[1:]

    return anyio.run(main, backend="asyncio")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks._loopback")
    parser.add_argument("--worker", required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--configs", default="")
    parser.add_argument("--sessions", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--cap", type=int, default=1000)
    parser.add_argument("--profile", default=None)
    parser.add_argument("--gc-freeze", action="store_true")
    parser.add_argument("--gc-stats", action="store_true")
    parser.add_argument("--allocations", action="store_true")
    args = parser.parse_args(argv)
    result: Any
    if args.worker == "first-event":
        result = _first_event_worker(args.configs, args.url, args.rounds)
    elif args.worker == "history":
        result = _history_worker(args.url, args.sessions, args.rounds)
    else:
        result = _scale_worker(
            args.worker,
            args.url,
            args.sessions,
            args.rounds,
            args.cap,
            args.profile,
            gc_freeze=args.gc_freeze,
            gc_stats=args.gc_stats,
            allocations=args.allocations,
        )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
