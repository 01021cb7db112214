# mypy: ignore-errors
# (pydantic-evals and pydantic-ai are not dependencies: this file runs in another interpreter.)
"""pydantic-evals' side of ``bench_evals``, run by an interpreter that has pydantic-evals and
pydantic-ai (it imports nothing of agentloop): the same two-turn case against the same loopback
server, scored by equals, type and span-count evaluators. Prints one JSON line.

Run (internal): ``python benchmarks/_pydantic_evals_worker.py --url URL --cases N
--concurrency C --expected TEXT``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import time
from dataclasses import dataclass
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--cases", type=int, required=True)
    parser.add_argument("--concurrency", type=int, required=True)
    parser.add_argument("--expected", required=True)
    args = parser.parse_args()

    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_evals import Case, Dataset
    from pydantic_evals.evaluators import EqualsExpected, Evaluator, EvaluatorContext, IsInstance

    trace.set_tracer_provider(TracerProvider())  # span trees need an SDK provider
    Agent.instrument_all()
    model = OpenAIChatModel("m", provider=OpenAIProvider(base_url=args.url + "/v1", api_key="k"))
    agent = Agent(model)

    @agent.tool_plain
    async def weather(query: str) -> str:
        """The weather at a place."""
        return f"sunny at {query}"

    @agent.tool_plain
    async def clock(query: str) -> str:
        """The time at a place."""
        return f"noon at {query}"

    @dataclass
    class ToolSpans(Evaluator[Any, Any, Any]):
        def evaluate(self, ctx: EvaluatorContext[Any, Any, Any]) -> bool:
            return len(ctx.span_tree.find(lambda n: n.name.startswith("execute_tool"))) == 2

    async def task(question: str) -> str:
        return (await agent.run(question)).output

    def dataset(n: int) -> Any:
        return Dataset(
            name="bench",
            cases=[Case(name=f"c{i}", inputs="weather and time?", expected_output=args.expected)
                   for i in range(n)],
            evaluators=[EqualsExpected(), IsInstance(type_name="str"), ToolSpans()],
        )  # fmt: skip

    async def run() -> dict[str, Any]:
        warm = await dataset(4).evaluate(task, max_concurrency=4, progress=False)
        rss_base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        cases = dataset(args.cases)
        cpu, wall = time.process_time(), time.perf_counter()
        report = await cases.evaluate(task, max_concurrency=args.concurrency, progress=False)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        passed = sum(all(a.value for a in c.assertions.values()) for c in report.cases)
        assert len(warm.cases) == 4
        return {
            "wall": wall,
            "cpu": cpu,
            "cases": args.cases,
            "passed": passed,
            "failures": len(report.failures),
            "rss_base": rss_base,
            "rss_peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        }

    print(json.dumps(asyncio.run(run())))


if __name__ == "__main__":
    main()
