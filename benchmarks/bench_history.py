"""Cost per step as the history grows: one ``Agent`` session of 50 tool steps.

The emulated provider (in a separate process) answers with two parallel tool calls until the
conversation holds 50 rounds of them, then with a short text: a run of 51 steps whose prompt grows
by an assistant turn and two tool results per step. The agent is the one of ``bench_scale`` (two
async tools, native mode, the OpenAI Chat Completions driver), streamed, and the client CPU
(``process_time``) is read at each ``StepFinished``: a step costs the CPU from the end of the step
before it (for step 1, from its ``ModelCallStarted``, after the run's setup) to its own end:
building the prompt and the request body, the HTTP exchange, decoding, the tools, the step record.
Median over several sessions (after one warm-up session). Target: step 50 costs at most 1.2x
step 1 (a driver that re-encodes or re-validates the history on every request is quadratic over
a run).

Run: ``python -m benchmarks.bench_history [--smoke] [--steps 50] [--runs 20]``
"""

from __future__ import annotations

import argparse
import statistics
import sys

from benchmarks._loopback import history_step_cpu
from benchmarks._server import BenchServer

TARGET = 1.2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_history")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--runs", type=int, default=None)
    args = parser.parse_args(argv)
    runs = args.runs or (3 if args.smoke else 20)
    steps = args.steps
    with BenchServer(tool_rounds=steps) as server:
        costs = history_step_cpu(server.url, steps, runs)
    per_step = [statistics.median(run[i] for run in costs) * 1e6 for i in range(steps)]
    first, second, last = per_step[0], per_step[1], per_step[-1]
    mid = steps // 2
    print("| step | prompt messages | CPU µs (median) | × step 1 |")
    print("|---:|---:|---:|---:|")
    for i in sorted({0, 1, 9, mid - 1, steps - 1}):
        messages = 1 + 2 * i  # the user message, then an assistant turn and tool results per step
        print(f"| {i + 1} | {messages} | {per_step[i]:.0f} | {per_step[i] / first:.2f}× |")
    verdict = "met" if last / first <= TARGET else "NOT met"
    print(
        f"\nStep {steps} / step 1 = {last / first:.2f}× (target ≤ {TARGET}×: {verdict}); "
        f"step {steps} / step 2 = {last / second:.2f}×. {runs} sessions of {steps} tool steps "
        "(two parallel tool calls each) and an answer, median per step."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
