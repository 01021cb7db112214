"""Controls: usage limits, a fallback model, guardrails, an output validator and ModelRetry.

1. ``UsageLimits`` cap a run's requests, tokens, tool calls and cost; passing one ends the run
   with ``usage_limit_exceeded``, whose ``details`` name the limit and the figures.
2. ``FallbackModel`` asks a second model when the first fails after its retries (here it is
   overloaded); ``ModelCallStarted.model`` says which model each attempt went to.
3. An input guardrail trips before any model call; an output guardrail withdraws a streamed
   answer (``AttemptDiscarded(reason="guardrail")``); both end with ``guardrail_tripped``.
4. An output validator rejects an answer with ``ModelRetry``: the model is told why and tries
   again, within ``output_retries``. A tool raising ``ModelRetry`` works the same way.

Runs offline on scripted models. Run: ``python examples/guardrails_and_limits.py``
"""

from __future__ import annotations

from typing import Any

import anyio

from agentloop import (
    Agent,
    AttemptDiscarded,
    FallbackModel,
    InputGuardrail,
    ModelCallStarted,
    ModelOverloaded,
    ModelRetry,
    OutputGuardrail,
    RetryPolicy,
    RunContext,
    RunFinished,
    Tripwire,
    UsageLimits,
    tool,
)
from agentloop.testing import Reply, ScriptedModel, call


@tool
async def lookup(city: str) -> str:
    """Look up the weather.

    Args:
        city: the city
    """
    return f"{city}: sunny"


async def no_passwords(ctx: RunContext[Any], text: str) -> Tripwire | None:
    """An input guardrail: nothing about passwords reaches the model."""
    if "password" in text.lower():
        return Tripwire(reason="asks about a password", info={"matched": "password"})
    return None


async def no_digits(ctx: RunContext[Any], output: Any) -> Tripwire | None:
    """An output guardrail: no answer with digits leaves the run."""
    if any(ch.isdigit() for ch in str(output)):
        return Tripwire(reason="the answer holds digits")
    return None


async def polite(ctx: RunContext[Any], output: Any) -> Any:
    """An output validator: the answer must say please."""
    if "please" not in str(output).lower():
        raise ModelRetry("answer politely: say please")
    return output


async def main() -> None:
    # 1. A request limit: the second model call would pass it, so it is never made.
    model = ScriptedModel([Reply(calls=[call("lookup", {"city": "Oslo"})]), "It is sunny."])
    agent = Agent(model, tools=[lookup], usage_limits=UsageLimits(requests=1))
    result = await agent.run("Weather in Oslo?")
    assert result.error is not None and result.error.kind == "usage_limit_exceeded"
    print("limit:", result.error.details)

    # 2. A fallback model: the primary is overloaded (after its one attempt), the backup answers.
    primary = ScriptedModel([ModelOverloaded("busy", status=529)], name="primary")
    backup = ScriptedModel(["Sunny, from the backup."], name="backup")
    agent = Agent(FallbackModel(primary, backup), retry=RetryPolicy(max_attempts=1))
    async with agent.stream("Weather?") as run:
        async for event in run:
            if isinstance(event, ModelCallStarted):
                print("attempt", event.attempt, "went to", event.model)
            elif isinstance(event, AttemptDiscarded):
                print("attempt", event.attempt, "withdrawn:", event.reason)
            elif isinstance(event, RunFinished):
                print("answer:", event.result.output)

    # 3. Guardrails: the input one trips before any model call; the output one withdraws.
    guarded = ScriptedModel(["The code is 1234."])
    agent = Agent(guarded, guardrails=[InputGuardrail(no_passwords), OutputGuardrail(no_digits)])
    result = await agent.run("What is my password?")
    assert result.error is not None and guarded.requests == []
    print("input guardrail:", result.error.details)
    async with agent.stream("What is the code?") as run:
        async for event in run:
            if isinstance(event, AttemptDiscarded):
                print("streamed answer withdrawn:", event.reason)
            elif isinstance(event, RunFinished) and event.result.error is not None:
                print("output guardrail:", event.result.error.message)

    # 4. An output validator asks again with its reason.
    model = ScriptedModel(["Give me the report.", "Please give me the report."])
    result = await Agent(model, output_validators=[polite]).run("Ask for the report")
    print("validated:", result.output)


if __name__ == "__main__":
    anyio.run(main)
