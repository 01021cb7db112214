"""Evaluations: cases per second, CPU per case and memory, agentloop.evals beside pydantic-evals.

The case is the one the issue measured: a two-turn agent case (the emulated provider answers
with two parallel tool calls, then, after their results, a text), scored by an equals, a type
and a span-count evaluator, against the loopback provider server (a separate process, real
sockets). Each side runs in a fresh worker process: agentloop's ``evaluate`` on
``OpenAIChatModel``; pydantic-evals' ``Dataset.evaluate`` on pydantic-ai's OpenAI model, in
an interpreter that has both (``--pydantic-evals-python``, else ``$PYDANTIC_EVALS_PYTHON``,
else this one when it can import them; without one that side is skipped, with a note).
Memory is the worker's peak resident size over its size after a warm-up evaluation.

Run: ``python -m benchmarks.bench_evals [--smoke] [--cases N] [--pydantic-evals-python PATH]``
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PEER_WORKER = ROOT / "benchmarks" / "_pydantic_evals_worker.py"


def _ours(url: str, cases: int, concurrency: int) -> dict[str, Any]:
    """agentloop's side, in this (worker) process."""
    import anyio

    from agentloop.evals import Case, Dataset, Equals, OutputValid, SpanCount, evaluate
    from benchmarks._loopback import make_agent, make_model

    async def run() -> dict[str, Any]:
        # At most 100 connections, as the peer's client (httpx's default pool).
        model = make_model("openai-chat", url, min(concurrency, 100))
        async with make_agent(model) as agent:
            first = await agent.run("weather and time?")
            expected = first.text

            def dataset(n: int) -> Dataset:
                return Dataset(
                    cases=[
                        Case(name=f"c{i}", input="weather and time?", expected_output=expected)
                        for i in range(n)
                    ],
                    evaluators=[
                        Equals(),
                        OutputValid(),
                        SpanCount(name_contains="execute_tool", min=2, max=2),
                    ],
                )

            await evaluate(agent, dataset(4), concurrency=4)  # warm-up
            rss_base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            cpu, wall = time.process_time(), time.perf_counter()
            report = await evaluate(agent, dataset(cases), concurrency=concurrency)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        return {
            "wall": wall,
            "cpu": cpu,
            "cases": cases,
            "passed": sum(c.pass_rate == 1.0 for c in report.cases),
            "expected": expected,
            "rss_base": rss_base,
            "rss_peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        }

    return anyio.run(run)


def _peer_python(given: str | None) -> str | None:
    found = given or os.environ.get("PYDANTIC_EVALS_PYTHON")
    if found:
        return found
    if importlib.util.find_spec("pydantic_evals") and importlib.util.find_spec("pydantic_ai"):
        return sys.executable
    return None


def _worker(cmd: list[str]) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{cmd[:3]} failed:\n{out.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--smoke", action="store_true", help="small numbers, for CI")
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--pydantic-evals-python", help="an interpreter with pydantic-evals")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--concurrency", type=int, default=8, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker == "agentloop":
        print(json.dumps(_ours(args.url, args.cases, args.concurrency)))
        return 0

    from benchmarks._server import BenchServer

    cases = 40 if args.smoke else args.cases
    peer = _peer_python(args.pydantic_evals_python)
    rows: list[tuple[str, int, dict[str, Any]]] = []
    with BenchServer() as server:
        for concurrency in (8, cases):
            ours = _worker(
                [sys.executable, "-m", "benchmarks.bench_evals", "--worker", "agentloop",
                 "--url", server.url, "--cases", str(cases), "--concurrency", str(concurrency)]
            )  # fmt: skip
            rows.append(("agentloop.evals", concurrency, ours))
            if peer is not None:
                theirs = _worker(
                    [peer, str(PEER_WORKER), "--url", server.url, "--cases", str(cases),
                     "--concurrency", str(concurrency), "--expected", ours["expected"]]
                )  # fmt: skip
                rows.append(("pydantic-evals", concurrency, theirs))
    print(f"{cases} two-turn cases over loopback HTTP, scored by equals, type and span-count")
    print("evaluators; memory: peak resident size over the size after a warm-up.\n")
    print("| | concurrency | cases/s | CPU ms per case | memory MiB |")
    print("|---|---|---|---|---|")
    for name, concurrency, r in rows:
        grown = (r["rss_peak"] - r["rss_base"]) / 1024
        shown = f"all ({cases})" if concurrency == cases else str(concurrency)
        failed = "" if r["passed"] == r["cases"] else f" ({r['passed']} of {r['cases']} passed)"
        print(
            f"| {name}{failed} | {shown} | {r['cases'] / r['wall']:.0f} | "
            f"{r['cpu'] / r['cases'] * 1e3:.2f} | {grown:.1f} |"
        )
    if peer is None:
        print("\npydantic-evals: not measured (pass --pydantic-evals-python, or install it)")
        return 0
    print()
    for concurrency in (8, cases):
        ours = next(r for n, c, r in rows if n == "agentloop.evals" and c == concurrency)
        theirs = next(r for n, c, r in rows if n == "pydantic-evals" and c == concurrency)
        speed = (ours["cases"] / ours["wall"]) / (theirs["cases"] / theirs["wall"])
        memory = (theirs["rss_peak"] - theirs["rss_base"]) / max(
            1, ours["rss_peak"] - ours["rss_base"]
        )
        where = "all" if concurrency == cases else concurrency
        print(
            f"- concurrency {where}: {speed:.1f}x the cases per second, {memory:.1f}x less memory"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
