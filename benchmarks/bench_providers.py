"""Provider drivers: client CPU per streamed turn, against the loopback provider server.

S concurrent sessions (S = 1, 100, 1,000; 50 and four configurations with ``--smoke``) each
run a two-turn conversation (a user message answered with two parallel tool calls, then the tool results
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

Each client is measured twice, interleaved with the others, and the run with the least CPU per
turn is reported (once with ``--smoke``). Ratios are against the floor measured in the same run. The clients and the workers are shared
with ``bench_scale`` (``benchmarks._loopback``). Run:
``python -m benchmarks.bench_providers [--smoke] [--sessions 1,100,1000] [--chunk-delay 0.0]``
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from typing import Any

import anyio

from benchmarks._loopback import FD_MARGIN, LABELS, TOOLS_CHAT, measure
from tests.support.provider_process import ProviderServerProcess, raise_fd_limit

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


def _cpu(r: dict[str, Any]) -> float:
    return float(r["cpu"]) / int(r["turns"])


def _profile(prefix: str | None, config: str, size: int) -> str | None:
    return f"{prefix}.{config}.{size}" if prefix else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_providers")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--sessions", default=None, help="comma-separated S values")
    parser.add_argument("--configs", default=None, help="comma-separated configurations")
    parser.add_argument("--chunk-delay", type=float, default=0.0)
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--url", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--cap", type=int, default=1000, help="connection cap for every client")
    parser.add_argument("--profile", default=None, help="cProfile files: PREFIX.config.S")
    args = parser.parse_args(argv)
    if args.worker == "growth":
        _growth_worker(args.url, args.configs, int(args.sessions))
        return 0
    sizes = [int(s) for s in (args.sessions or ("50" if args.smoke else "1,100,1000")).split(",")]
    configs = args.configs.split(",") if args.configs else (SMOKE if args.smoke else CONFIGS)
    raise_fd_limit(max(sizes) + FD_MARGIN)
    rows: list[str] = []
    growth: dict[str, Any] = {}
    with ProviderServerProcess(
        chunk_delay=args.chunk_delay, min_fds=max(sizes) + FD_MARGIN
    ) as server:
        reps = "20" if args.smoke else "200"
        for config in ("agentloop", "sdk"):
            cmd = [sys.executable, "-m", "benchmarks.bench_providers", "--worker", "growth"]
            cmd += ["--url", server.url, "--configs", config, "--sessions", reps]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=900)
            growth[config] = json.loads(out.stdout.strip().splitlines()[-1])
        for size in sizes:
            cap = min(args.cap, size)
            # Each client twice, interleaved; the run with the least CPU per turn counts (another
            # process busy meanwhile inflates one run, not the ratio).
            results: dict[str, Any] = {}
            for _ in range(1 if args.smoke else 2):
                for c in configs:
                    r = measure(c, server.url, size, cap, profile=_profile(args.profile, c, size))
                    if c not in results or _cpu(r) < _cpu(results[c]):
                        results[c] = r
            floor = results.get("floor")
            for config in configs:
                r = results[config]
                per_turn = r["cpu"] / r["turns"] * 1000
                kib = max(0, r["rss_first_peak"] - r["rss_base"]) / size
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
