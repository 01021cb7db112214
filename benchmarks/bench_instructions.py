"""Instructions per turn: round three's CPU targets counted, not timed.

``bench_scale`` times CPU per turn, and on a shared 2-core machine the floor's own time moves by up
to 2x between runs (0.48 to 0.96 ms per turn in one hour), so its ratios swing with the load.
This counts the instructions each client executes instead (valgrind's callgrind), which do not
depend on what else the machine runs: three runs of the floor at S = 100, beside test suites
and other benchmarks, counted 1,349 K, 1,394 K and 1,398 K instructions per turn, within 4%.
(What varies is how the replies' bytes happen to be split between reads.)

The clients and the conversation are ``bench_scale``'s (S concurrent sessions of two turns each,
the emulated provider in a separate process). Each client runs twice under callgrind, with one
round and with ``1 + rounds`` rounds of S sessions; the difference is the instructions of the
extra rounds (start-up, imports and warm-up cancel out), divided by their turns. Targets (issue
36, round three): ``Agent.run`` within 1.45x the floor, ``Agent.stream`` reading every event
within 1.8x. An instruction is not a nanosecond: cache misses and the collector's walks over a large
heap count as one each, so this complements ``bench_scale`` at S = 1,000 rather than replacing
it.

``primitives`` and ``primitives-stream`` are the floor's client inside only the anyio primitives
the design requires (a task group per run, a deadline per model call, a task per tool call; for
a stream, its task, memory object stream and a cancellation check per event read), with no
engine code. The difference between an agent configuration and its ``primitives`` is the
engine's own work, and the report says how much of it a target leaves room for.

Pay for what you use (issue 36): the same ``Agent.run`` with each optional feature on, one at
a time (``agent-openai-chat+<feature>``: approvals with a live approver that approves each call,
usage limits, an input, an output and a tool guardrail that pass, a handoff never taken, a
context window, tracing to OpenTelemetry's no-op provider, goals), beside the plain agent: what
each costs when used, and so that a feature which is off (the plain agent) pays for none of it.

Run: ``python -m benchmarks.bench_instructions [--sessions 100] [--rounds 2]
[--configs floor,agent-openai-chat,...] [--no-features]`` (about 25 minutes on 2 cores; 12 without
the features). It needs valgrind
(``apt-get install valgrind``) and says so, passing, when it is missing; ``--smoke`` runs each
client once at S = 2 without it (minutes under callgrind even at S = 10).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys

from benchmarks._loopback import FD_MARGIN, FEATURES, LABELS, _worker_cmd, measure
from benchmarks.bench_scale import ROUND_THREE
from tests.support.provider_process import ProviderServerProcess, raise_fd_limit

# The openai SDK's own loop (``sdk-httpx``) can be added: 15x the floor, and 20 minutes under
# callgrind at S = 100.
CONFIGS = [
    "floor",
    "primitives",
    "agent-openai-chat",
    "primitives-stream",
    "agent-openai-chat-stream",
]
PLAIN = "agent-openai-chat"  # the agent that each feature is turned on in, one at a time
# Each agent configuration, and the client of the same shape with no engine code.
ENGINE_OF = {"agent-openai-chat": "primitives", "agent-openai-chat-stream": "primitives-stream"}
_COLLECTED = re.compile(r"Collected : (\d+)")


def instructions(valgrind: str, url: str, config: str, sessions: int, rounds: int) -> int:
    """Instructions the client ``config`` executes in ``rounds`` rounds of ``sessions``."""
    cmd = [valgrind, "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    cmd += _worker_cmd(config, url)
    cmd += ["--sessions", str(sessions), "--rounds", str(rounds), "--cap", str(sessions)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=3600)
    found = _COLLECTED.findall(out.stderr)
    if out.returncode != 0 or not found:
        raise RuntimeError(f"{config} under callgrind failed:\n{out.stderr[-3000:]}")
    return int(found[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_instructions")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--sessions", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=2, help="measured rounds")
    parser.add_argument("--configs", default=None, help="comma-separated configurations")
    parser.add_argument("--no-features", action="store_true", help="leave out each feature on")
    args = parser.parse_args(argv)
    configs = args.configs.split(",") if args.configs else list(CONFIGS)
    featured = [] if args.no_features else [f"{PLAIN}+{feature}" for feature in FEATURES]
    if featured and PLAIN not in configs:
        configs.append(PLAIN)
    if args.smoke:
        return _smoke([*configs, *featured])
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        print("Skipped: valgrind is not installed (`apt-get install valgrind`).")
        return 0
    sessions = args.sessions or 100
    if "floor" not in configs:
        configs.insert(0, "floor")
    raise_fd_limit(sessions + FD_MARGIN)
    per_turn: dict[str, float] = {}
    with ProviderServerProcess(min_fds=sessions + FD_MARGIN) as server:
        for config in [*configs, *featured]:
            base = instructions(valgrind, server.url, config, sessions, 1)
            more = instructions(valgrind, server.url, config, sessions, 1 + args.rounds)
            per_turn[config] = (more - base) / (2 * sessions * args.rounds)
    floor = per_turn["floor"]
    print("| client | instructions per turn | x floor | target |")
    print("|---|---:|---:|---|")
    for config in configs:
        ratio = per_turn[config] / floor
        target = ROUND_THREE.get(config)
        verdict = (
            "" if target is None else f"≤ {target}x: {'met' if ratio <= target else 'NOT met'}"
        )
        label = LABELS.get(config, config)
        print(f"| {label} | {per_turn[config] / 1000:,.0f} K | {ratio:.2f}x | {verdict} |")
    print(
        f"\nS = {sessions} concurrent sessions of two turns, per turn of {args.rounds} measured"
        " round(s): callgrind's count with 1 + that many rounds minus its count with 1."
    )
    engine_lines = [
        _engine_line(config, per_turn, floor)
        for config, bare in ENGINE_OF.items()
        if config in per_turn and bare in per_turn
    ]
    if engine_lines:
        print("\nThe engine's own work (the agent minus the same client with no engine code):")
        print("\n".join(engine_lines))
    if featured:
        _features_table(per_turn, featured)
    return 0


def _features_table(per_turn: dict[str, float], featured: list[str]) -> None:
    """Each feature on, one at a time, beside the plain agent (which has them all off)."""
    plain = per_turn[PLAIN]
    print(f"\nEach optional feature on alone, beside the plain {LABELS[PLAIN]}:\n")
    print("| feature on | instructions per turn | − plain agent | × plain agent |")
    print("|---|---:|---:|---:|")
    print(f"| none (the plain agent) | {plain / 1000:,.0f} K | | |")
    for config in featured:
        n = per_turn[config]
        print(
            f"| {config.partition('+')[2]} | {n / 1000:,.0f} K | {(n - plain) / 1000:+,.0f} K "
            f"| {n / plain:.2f}x |"
        )


def _smoke(configs: list[str]) -> int:
    """Each client once at S = 2, not counted: minutes under callgrind even at S = 10, but the
    clients themselves (``primitives`` is nowhere else) must keep working."""
    with ProviderServerProcess(min_fds=2 + FD_MARGIN) as server:
        for config in configs:
            measure(config, server.url, 2, 2)
    print(f"Smoke: {len(configs)} clients each ran 2 sessions, uncounted (callgrind skipped).")
    return 0


def _engine_line(config: str, per_turn: dict[str, float], floor: float) -> str:
    """What the engine adds per turn, and what a round-three target leaves it."""
    bare = per_turn[ENGINE_OF[config]]
    line = (
        f"- {LABELS[config]}: {(per_turn[config] - bare) / 1000:,.0f} K per turn above"
        f" {bare / floor:.2f}x for the primitives alone"
    )
    target = ROUND_THREE.get(config)
    if target is not None:
        allowed = target * floor - bare
        line += f"; the ≤ {target}x target leaves it {max(allowed, 0) / 1000:,.0f} K"
    return line


if __name__ == "__main__":
    sys.exit(main())
