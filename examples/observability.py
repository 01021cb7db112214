"""Observability: OpenTelemetry spans of a run, and its cost from your own price table.

Shows: ``Agent(instrument=Instrumentation(tracer_provider=...))`` traces a run as an
``invoke_agent`` span with a ``chat`` span per model call and an ``execute_tool`` span per action;
the two weather lookups run at the same time and a sub-agent's run hangs under its action. The
first model call is rate limited once and retried (one ``chat`` span with a failed-attempt
event). Spans go to an in-memory exporter here and are printed as a tree; in a service you would
install an OTLP exporter instead. ``PriceTable`` then prices ``RunResult.usage_by_model``, for the
run and for the sub-run alone. Runs offline on scripted models; with ``OPENAI_API_KEY`` set both
agents use ``openai:gpt-4o-mini``.

Needs the OpenTelemetry SDK (``pip install opentelemetry-sdk``; the ``dev`` extra has it).

Run: ``python examples/observability.py``
"""

from __future__ import annotations

import os
from typing import Any

import anyio
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentloop import Agent, Instrumentation, ModelPrice, ModelRateLimited, PriceTable, tool
from agentloop.testing import Reply, ScriptedModel, call

PRICES = PriceTable(
    {
        "openai:gpt-4o-mini": ModelPrice(input="0.15", output="0.60", cache_read="0.075"),
        # The scripted models, priced like it so that the offline run shows a cost too.
        "test:planner": ModelPrice(input="0.15", output="0.60"),
        "test:scout": ModelPrice(input="0.15", output="0.60"),
    }
)


@tool
async def weather(city: str) -> str:
    """Today's weather in a city.

    Args:
        city: the city
    """
    await anyio.sleep(0.05)
    return {"Oslo": "4 °C, rain", "Bergen": "7 °C, showers"}.get(city, "unknown")


def models() -> tuple[Any, Any]:
    if os.environ.get("OPENAI_API_KEY"):
        return "openai:gpt-4o-mini", "openai:gpt-4o-mini"
    planner = ScriptedModel(
        [
            ModelRateLimited("slow down", status=429, retry_after=0.05),
            Reply(calls=[call("weather", {"city": "Oslo"}), call("weather", {"city": "Bergen"})]),
            Reply(calls=[call("scout", {"task": "Is the Bergen railway running?"})]),
            "Oslo is wet, Bergen a little warmer, and the train runs: go to Bergen.",
        ],
        name="planner",
        chunk_size=8,
        delay=0.01,
    )
    scout = ScriptedModel(["The Bergen railway runs as scheduled."], name="scout", delay=0.01)
    return planner, scout


def print_tree(spans: tuple[ReadableSpan, ...]) -> None:
    children: dict[int | None, list[ReadableSpan]] = {}
    for span in sorted(spans, key=lambda s: s.start_time or 0):
        children.setdefault(span.parent.span_id if span.parent else None, []).append(span)
    origin = min(s.start_time or 0 for s in spans)

    def show(parent: int | None, depth: int) -> None:
        for span in children.get(parent, []):
            attrs = dict(span.attributes or {})
            start = ((span.start_time or 0) - origin) / 1e9
            took = ((span.end_time or 0) - (span.start_time or 0)) / 1e9
            notes = []
            if attrs.get("agentloop.retries"):
                notes.append(f"retries={attrs['agentloop.retries']}")
            if "gen_ai.response.time_to_first_chunk" in attrs:
                notes.append(f"first chunk {attrs['gen_ai.response.time_to_first_chunk']:.3f}s")
            if "gen_ai.usage.output_tokens" in attrs:
                notes.append(
                    f"tokens {attrs['gen_ai.usage.input_tokens']}→"
                    f"{attrs['gen_ai.usage.output_tokens']}"
                )
            notes += [event.name for event in span.events]
            indent = "  " * depth
            print(f"{start:6.3f}s {took:6.3f}s {indent}{span.name}  {' '.join(notes)}")
            show(span.context.span_id, depth + 1)

    show(None, 0)


async def main() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    traced = Instrumentation(tracer_provider=provider)

    planner_model, scout_model = models()
    scout = Agent(scout_model, name="scout", instructions="Answer briefly.")
    planner = Agent(
        planner_model,
        name="planner",
        instructions="Plan a day trip. Check the weather of every candidate at once.",
        tools=[weather, scout.as_tool(description="Ask the scout a question about travel.")],
        instrument=traced,  # the scout's sub-runs inherit it
    )
    async with planner:  # closes the models it made, the scout's (a tool of it) too
        result = await planner.run("Oslo or Bergen tomorrow?")
    print(result.output, "\n")
    print("  start   took  span")
    print_tree(exporter.get_finished_spans())

    cost = PRICES.cost(result)
    print(f"\ncost of the run: ${cost.total:.8f}  by model: {dict(cost.by_model)}")
    subrun = next(a.subrun for s in result.steps for a in s.actions if a.subrun is not None)
    print(f"of which the scout's sub-run: ${PRICES.cost(subrun).total:.8f}")
    if not cost.complete:
        print(f"(a lower bound: unpriced {cost.unpriced}, {cost.unknown_requests} unknown calls)")
    provider.shutdown()


if __name__ == "__main__":
    anyio.run(main)
