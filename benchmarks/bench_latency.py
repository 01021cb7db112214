"""Time from the first byte of a reply to the first thought the caller sees.

The emulated provider (in a separate process) answers every request with the same short reply,
``Thought: … Answer: …``, streamed as Chat Completions SSE events the way a provider streams
tokens: the first two events (the role, then the first piece of text) at once, the rest 5 ms
later. Clients, each in its own worker process, make one request after another; for each, the time
from the first bytes of SSE data reaching the client process (aiohttp's protocol callback, which
every client here reads through) to the consumer holding the first piece of text:

- **floor**: a bare ``aiohttp`` + ``json`` loop: the first content delta parsed;
- **driver**: ``OpenAIChatModel.stream``: the first ``TextPiece``;
- **Agent.stream, native**: the first ``TextDelta`` event read from ``Agent.stream``;
- **Agent.stream, ReAct**: the first ``ThoughtDelta`` event (through the incremental parser).

The clients take turns, a few passes each. Reported: median and p99 over the runs (after a few
warm-up runs in each pass), and the median over the floor's:
what the driver, the runtime and the event stream add to the path every thought takes. (The
loopback hop before, from the server's write to the client's read, is the same for every client.)

Run: ``python -m benchmarks.bench_latency [--smoke] [--runs 600]``
"""

from __future__ import annotations

import argparse
import statistics
import sys

from benchmarks._loopback import first_event_delays
from benchmarks._server import BenchServer

REPLY = "Thought: The weather tool says sunny; the clock says noon.\nAnswer: Sunny, and noon."
CONFIGS = {
    "floor": "floor: aiohttp + json",
    "driver": "agentloop OpenAIChatModel.stream",
    "agent-native": "agentloop Agent.stream, native (TextDelta)",
    "agent-react": "agentloop Agent.stream, ReAct (ThoughtDelta)",
}
WARMUP = 5
PAUSE = 0.005  # between the first piece of text and the rest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_latency")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--runs", type=int, default=None)
    args = parser.parse_args(argv)
    runs = args.runs or (30 if args.smoke else 600)
    passes = 1 if args.smoke else 3
    per_pass = runs // passes + WARMUP
    delays: dict[str, list[float]] = {config: [] for config in CONFIGS}
    total = per_pass * passes * len(CONFIGS)
    with BenchServer(script=REPLY, count=total, pause=PAUSE) as server:
        # Clients take turns (a few passes each), so that another process busy for a while
        # slows every client a little rather than one a lot.
        for _ in range(passes):
            for config in CONFIGS:
                delays[config] += first_event_delays(config, server.url, per_pass)[WARMUP:]
    for values in delays.values():
        values.sort()
    print("| client | median µs | p99 µs | median − floor µs |")
    print("|---|---:|---:|---:|")
    floor = statistics.median(delays["floor"])
    for config, label in CONFIGS.items():
        values = delays[config]
        median = statistics.median(values)
        p99 = values[min(len(values) - 1, round(0.99 * (len(values) - 1)))]
        print(f"| {label} | {median:.0f} | {p99:.0f} | {median - floor:+.0f} |")
    print(
        f"\n{runs} sequential one-request runs per client, in {passes} passes taking turns with "
        f"the other clients ({WARMUP} warm-up runs first in each); from the "
        "first bytes of SSE data reaching the client process to the consumer holding the first "
        "text or thought."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
