"""Provider drivers: client CPU per streamed turn, against the loopback provider server.

S concurrent sessions (S = 1, 100, 1,000; 50 and four configurations with ``--smoke``) each run a two-turn
conversation (a user message answered with two parallel tool calls, then the tool results
answered with a short text streamed in several SSE events) against the emulated provider running
in a separate process. Every configuration runs in its own worker process (so peak memory is its
own) with the same connection cap; each client is made once, warmed up with a few sessions, then
timed over the S sessions: wall time, client CPU per turn (``process_time`` of the worker), and
resident memory growth per session. Configurations:

- **floor**: a bare loop on ``aiohttp`` + ``json`` with no SDK (Chat Completions wire format);
- **openai SDK**: a bare loop on ``openai`` (``chat.completions.create(stream=True)``), with its
  aiohttp client and with its default httpx2 client;
- **agentloop**: the three drivers (``OpenAIChatModel``, ``OpenAIResponsesModel``,
  ``AnthropicModel``) through the ``Model.stream`` seam, on the aiohttp fast path and on the
  portable httpx2 path.

Ratios are against the floor measured in the same run. Run:
``python -m benchmarks.bench_providers [--smoke] [--sessions 1,100,1000] [--chunk-delay 0.0]``
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, TypeAlias

import anyio

from agentloop.testing._server import raise_fd_limit
from agentloop.testing._server_main import ProviderServerProcess

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

Runner: TypeAlias = Callable[[int], Awaitable[None]]

CONFIGS = [
    "floor",
    "sdk-aiohttp",
    "sdk-httpx",
    "openai-chat-aiohttp",
    "openai-responses-aiohttp",
    "anthropic-aiohttp",
    "openai-chat-httpx",
]
SMOKE = ["floor", "sdk-aiohttp", "openai-chat-aiohttp", "anthropic-aiohttp"]
LABELS = {
    "floor": "floor: aiohttp + json",
    "sdk-aiohttp": "openai SDK, aiohttp client",
    "sdk-httpx": "openai SDK, httpx2 client",
    "openai-chat-aiohttp": "agentloop OpenAIChatModel, aiohttp",
    "openai-responses-aiohttp": "agentloop OpenAIResponsesModel, aiohttp",
    "anthropic-aiohttp": "agentloop AnthropicModel, aiohttp",
    "openai-chat-httpx": "agentloop OpenAIChatModel, httpx2",
}


def _rss_kib() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)


# -- the session bodies ------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _floor(url: str, cap: int) -> AsyncIterator[Runner]:
    import aiohttp

    connector = aiohttp.TCPConnector(limit=cap)
    headers = {"content-type": "application/json", "authorization": "Bearer k"}
    async with aiohttp.ClientSession(connector=connector) as http:

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

        async def session() -> None:
            messages: list[dict[str, Any]] = [{"role": "user", "content": "weather and time?"}]
            _, calls = await turn(messages)
            messages.append(
                {
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
            )
            messages += [{"role": "tool", "tool_call_id": c["id"], "content": "ok"} for c in calls]
            text, _ = await turn(messages)
            assert text

        yield _runner(session)


def _runner(session: Callable[[], Coroutine[Any, Any, None]]) -> Runner:
    async def run(sessions: int) -> None:
        async with anyio.create_task_group() as tg:
            for _ in range(sessions):
                tg.start_soon(session)

    return run


@contextlib.asynccontextmanager
async def _sdk(url: str, cap: int, transport: str) -> AsyncIterator[Runner]:
    import httpx2
    import openai

    limits = httpx2.Limits(max_connections=cap, max_keepalive_connections=cap)
    http_client = (
        openai.DefaultAioHttpClient(limits=limits)
        if transport == "aiohttp"
        else openai.DefaultAsyncHttpxClient(limits=limits)
    )
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
        messages.append(
            {
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
        )
        messages += [{"role": "tool", "tool_call_id": c["id"], "content": "ok"} for c in calls]
        text, _ = await turn(messages)
        assert text

    try:
        yield _runner(session)
    finally:
        await client.close()


@contextlib.asynccontextmanager
async def _driver(url: str, cap: int, config: str) -> AsyncIterator[Runner]:
    from agentloop.models import (
        Message,
        ModelRequest,
        ResponseBuilder,
        ToolResultPart,
        ToolSpec,
    )
    from agentloop.models.anthropic import AnthropicModel
    from agentloop.models.openai import OpenAIChatModel, OpenAIResponsesModel

    api, _, transport = config.rpartition("-")
    cls = {
        "openai-chat": OpenAIChatModel,
        "openai-responses": OpenAIResponsesModel,
        "anthropic": AnthropicModel,
    }[api]
    base = url if api == "anthropic" else url + "/v1"
    # The floor waits for connections as long as it takes; so do the drivers here (the SDKs'
    # default connect timeout is 5 s, short for 10,000 simultaneous connects to one server).
    model = cls(
        "m", base_url=base, api_key="k", transport=transport, max_connections=cap, timeout=600.0
    )
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
        yield _runner(session)


def _setup(config: str, url: str, cap: int) -> contextlib.AbstractAsyncContextManager[Runner]:
    if config == "floor":
        return _floor(url, cap)
    if config.startswith("sdk-"):
        return _sdk(url, cap, config.removeprefix("sdk-"))
    return _driver(url, cap, config)


def _worker(config: str, url: str, sessions: int, cap: int, profile: str | None) -> None:
    raise_fd_limit(sessions + 100)

    async def main() -> dict[str, Any]:
        async with _setup(config, url, cap) as run:
            await run(min(sessions, 4))  # warm-up: imports, first connections
            base = _rss_kib()
            cpu0, wall0 = time.process_time(), time.perf_counter()
            if profile:
                import cProfile

                prof = cProfile.Profile()
                prof.enable()
            await run(sessions)
            if profile:
                prof.disable()
                prof.dump_stats(profile)
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return {"cpu": cpu, "wall": wall, "turns": 2 * sessions, "rss_base": base, "rss_peak": peak}

    print(json.dumps(anyio.run(main, backend="asyncio")))


def _history(steps: int) -> list[Any]:
    from agentloop.models import Message, TextPart, ToolCallPart, ToolResultPart

    messages: list[Any] = [Message.system("You are terse."), Message.user("Start.")]
    for i in range(steps - 1):
        call = ToolCallPart(
            id=f"call_{i}", name="weather", arguments=json.dumps({"query": f"q{i}"})
        )
        messages.append(Message(role="assistant", parts=(TextPart(text=f"Step {i}."), call)))
        content = json.dumps({"step": i, "result": "x" * 200})
        result = ToolResultPart(id=f"call_{i}", name="weather", content=content)
        messages.append(Message(role="tool", parts=(result,)))
    return messages


def _growth_worker(url: str, config: str, reps: int) -> None:
    """CPU per request at step 1 and at step 50 of one growing session (same driver)."""

    async def main() -> dict[str, float]:
        from agentloop.models import ModelRequest, ToolSpec

        results: dict[str, float] = {}
        tools = tuple(
            ToolSpec(
                name=t["function"]["name"], description="", parameters=t["function"]["parameters"]
            )
            for t in TOOLS_CHAT
        )
        if config == "sdk":
            import openai

            client = openai.AsyncOpenAI(api_key="k", base_url=url + "/v1", max_retries=0,
                                        http_client=openai.DefaultAioHttpClient())  # fmt: skip
            from agentloop.models._openai_chat import encode_chat_message

            for steps in (1, 50):
                wire = [
                    json.loads(b"[" + encode_chat_message(m) + b"]")[0] for m in _history(steps)
                ]
                wire = [
                    w
                    for m in _history(steps)
                    for w in json.loads(b"[" + encode_chat_message(m) + b"]")
                ]
                cpu = 0.0
                create: Any = client.chat.completions.create
                for i in range(reps + 5):
                    msgs = [*wire, {"role": "user", "content": f"go {i}"}]
                    t = time.process_time()
                    chunks = await create(model="m", messages=msgs, tools=TOOLS_CHAT, stream=True)
                    async for _ in chunks:
                        pass
                    if i >= 5:
                        cpu += time.process_time() - t
                results[str(steps)] = cpu / reps * 1000
            await client.close()
            return results
        from agentloop.models import Message
        from agentloop.models.openai import OpenAIChatModel

        async with OpenAIChatModel("m", base_url=url + "/v1", api_key="k") as model:
            for steps in (1, 50):
                history = _history(steps)  # the same message objects every step, as a run has
                cpu = 0.0
                for i in range(reps + 5):
                    request = ModelRequest(
                        messages=(*history, Message.user(f"go {i}")), tools=tools
                    )
                    t = time.process_time()
                    async with model.stream(request) as stream:
                        async for _ in stream:
                            pass
                    if i >= 5:
                        cpu += time.process_time() - t
                results[str(steps)] = cpu / reps * 1000
        return results

    print(json.dumps(anyio.run(main, backend="asyncio")))


def measure(config: str, url: str, sessions: int, cap: int, profile: str | None = None) -> Any:
    cmd = [sys.executable, "-m", "benchmarks.bench_providers", "--worker", config, "--url", url]
    cmd += ["--sessions", str(sessions), "--cap", str(cap)]
    if profile:
        cmd += ["--profile", profile]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"{config} at S={sessions} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_providers")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--sessions", default=None, help="comma-separated S values")
    parser.add_argument("--configs", default=None, help="comma-separated configurations")
    parser.add_argument("--chunk-delay", type=float, default=0.0)
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--url", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--cap", type=int, default=1000, help="connection cap for every client")
    parser.add_argument("--profile", default=None, help="write a cProfile of the timed run")
    args = parser.parse_args(argv)
    if args.worker == "growth":
        _growth_worker(args.url, args.configs, int(args.sessions))
        return 0
    if args.worker:
        _worker(args.worker, args.url, int(args.sessions), args.cap, args.profile)
        return 0
    sizes = [int(s) for s in (args.sessions or ("50" if args.smoke else "1,100,1000")).split(",")]
    configs = args.configs.split(",") if args.configs else (SMOKE if args.smoke else CONFIGS)
    raise_fd_limit(max(sizes) + 100)
    rows: list[str] = []
    growth: dict[str, Any] = {}
    with ProviderServerProcess(chunk_delay=args.chunk_delay, min_fds=max(sizes) + 100) as server:
        reps = "20" if args.smoke else "200"
        for config in ("agentloop", "sdk"):
            cmd = [sys.executable, "-m", "benchmarks.bench_providers", "--worker", "growth"]
            cmd += ["--url", server.url, "--configs", config, "--sessions", reps]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=900)
            growth[config] = json.loads(out.stdout.strip().splitlines()[-1])
        for size in sizes:
            cap = min(args.cap, size)
            results = {c: measure(c, server.url, size, cap) for c in configs}
            floor = results.get("floor")
            for config in configs:
                r = results[config]
                per_turn = r["cpu"] / r["turns"] * 1000
                kib = max(0, r["rss_peak"] - r["rss_base"]) / size
                ratio = (
                    f"{per_turn / (floor['cpu'] / floor['turns'] * 1000):.2f}x" if floor else "-"
                )
                rows.append(
                    f"| {size:,} | {LABELS[config]} | {r['wall']:.2f} | {per_turn:.3f} | {ratio} "
                    f"| {r['rss_peak'] / 1024:.0f} | {kib:.1f} |"
                )
    print(
        "| S | client | wall s | CPU ms/turn | vs floor | peak RSS MiB | KiB/session |\n"
        "|---:|---|---:|---:|---:|---:|---:|"
    )
    print("\n".join(rows))
    print(
        "\nCost per request as one session's history grows (CPU ms per request, one driver):\n\n"
        "| client | step 1 | step 50 | step 50 / step 1 |\n|---|---:|---:|---:|"
    )
    for config, label in (("agentloop", "agentloop OpenAIChatModel"), ("sdk", "openai SDK")):
        g = growth[config]
        print(f"| {label} | {g['1']:.3f} | {g['50']:.3f} | {g['50'] / g['1']:.2f}x |")
    print(
        f"\nTwo turns per session, two parallel tool calls then a text answer; emulated provider "
        f"in a separate process (chunk delay {args.chunk_delay} s); connection cap "
        f"min({args.cap}, S) for every client."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
