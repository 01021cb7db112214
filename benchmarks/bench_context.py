"""The context window's CPU per step: a 200-step run of two 20 KB tool results per step.

The policy of ``Agent(context_window=ContextWindow(...))`` runs before every request: it
estimates the new step, and when the prompt would exceed the budget it elides older results and
drops (or summarises) older steps. Here it is timed alone, in-process (no provider, no
summarizer): 200 steps as the engine replays them (an assistant turn with two tool calls, and
their two 20 KB results), each step's prompt fitted to a 40,000-token window; beside it, the
prompt the engine builds without a window (``build_prompt``, every step replayed). CPU
(``process_time``) per step, median over runs; the mean over steps 181-200 includes the trims
(here one every other step: each step adds a quarter of the window). Target: the policy's cost
per step stays flat (its mean over steps 181-200 within 2x its mean over steps 11-30: the work
per step is the new step's, not the history's) and under 100 µs.

Run: ``python -m benchmarks.bench_context [--smoke] [--steps 200] [--runs 20]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import anyio

from agentloop import ContextWindow
from agentloop._prompt import build_prompt, replay_step
from agentloop._steps import ActionResult, Step
from agentloop._window import ContextFitter
from agentloop.models import Message, ToolCallPart

RESULT = "lorem ipsum " * (20_000 // 12)
TARGET_FLAT = 2.0
TARGET_US = 100.0


def _step(i: int) -> Step:
    calls = tuple(
        ToolCallPart(id=f"call_{i}_{k}", name=name, arguments=f'{{"query": "q{i}"}}')
        for k, name in enumerate(("fetch", "scan"))
    )
    actions = tuple(
        ActionResult(tag=c.id, name=c.name, input={"query": f"q{i}"}, output=RESULT) for c in calls
    )
    return Step(index=i, attempt=i, actions=actions, parts=calls)


async def _one_run(steps: int, budget: int) -> tuple[list[float], list[float], int]:
    replayed = [replay_step(_step(i), "native") for i in range(steps)]
    system, user = Message.system("You survey things."), Message.user("survey everything")
    fitter = ContextFitter(ContextWindow(max_tokens=budget))
    fitted: list[float] = []
    plain: list[float] = []
    trims = 0
    run: Any = None  # the summarizer's argument; there is none
    for n in range(steps):
        start = time.process_time()
        _, trim = await fitter.fit((system,), user, replayed[:n], run)
        fitted.append(time.process_time() - start)
        trims += trim is not None
        start = time.process_time()
        build_prompt(system=system, memory=(), user_input=user, replayed=replayed[:n])
        plain.append(time.process_time() - start)
    return fitted, plain, trims


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_context")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--runs", type=int, default=None)
    args = parser.parse_args(argv)
    runs = args.runs or (3 if args.smoke else 20)
    steps, budget = args.steps, 40_000
    results = [anyio.run(_one_run, steps, budget) for _ in range(runs + 1)][1:]  # one warm-up
    fit = [statistics.median(r[0][i] for r in results) * 1e6 for i in range(steps)]
    plain = [statistics.median(r[1][i] for r in results) * 1e6 for i in range(steps)]
    trims = results[0][2]
    print("| step | window: CPU µs (median) | no window: CPU µs (median) |")
    print("|---:|---:|---:|")
    for i in sorted({0, 9, 49, 99, steps - 1}):
        if i < steps:
            print(f"| {i + 1} | {fit[i]:.1f} | {plain[i]:.1f} |")
    tail = slice(max(0, steps - 20), steps)
    mean_fit = statistics.fmean(fit[tail])
    mean_plain = statistics.fmean(plain[tail])
    print(
        f"| mean of steps {tail.start + 1}-{steps} (with the trims) | {mean_fit:.1f} "
        f"| {mean_plain:.1f} |"
    )
    early = slice(min(10, steps - 1), min(30, steps))
    ref = statistics.fmean(fit[early])
    flat = mean_fit / ref if ref else 0.0
    verdict = "met" if flat <= TARGET_FLAT and mean_fit <= TARGET_US else "NOT met"
    print(
        f"\nThe policy's mean at steps {tail.start + 1}-{steps} / at steps {early.start + 1}-"
        f"{early.stop} = {flat:.2f}× and "
        f"{mean_fit:.0f} µs (target ≤ {TARGET_FLAT}× and ≤ {TARGET_US:.0f} µs: {verdict}). "
        f"{steps} steps of two 20 KB results, a {budget:,}-token window, {trims} trims per run; "
        f"{runs} runs."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
