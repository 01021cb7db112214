"""The agent the replica kill tests serve and work on: ``agentloop serve
tests.web._replicated:durable --temporal ADDRESS`` and ``agentloop worker ... --temporal ADDRESS``.

Its model is the emulated provider at ``AGENTLOOP_TEST_PROVIDER_URL`` (``Provider`` below: the
question picks the script), its sessions in the SQLite file ``AGENTLOOP_TEST_STORE`` that every
replica and worker shares, its runs on task queue ``AGENTLOOP_TEST_QUEUE``. Its tools append a
line to ``AGENTLOOP_TEST_LOG`` with this process's pid and the call's idempotency key, so the
test knows whom to kill and what ran. An activity counts as lost after 2 s without a heartbeat,
so a killed worker's tool is taken up again by another within seconds.
"""

from __future__ import annotations

import os
import time
from typing import Any

import anyio

from agentloop import Agent, RetryPolicy, ToolContext, tool
from agentloop.models.openai import OpenAIChatModel
from agentloop.sessions import SQLiteStore
from agentloop.temporal import ActivityOptions, TemporalAgent
from agentloop.testing import (
    EmulatedCall,
    EmulatedProvider,
    EmulatedTurn,
    RecordedRequest,
    ScriptedResponse,
)

STORY = "Tell me a story."
SLOW = "Run the slow tool."
GUARD = "Guard it."
# Sixty numbered words, streamed over about four seconds: a gap or a repeat shows.
WORDS = [f"w{i:02d}" for i in range(1, 61)]
ANSWER = " ".join(WORDS) + "."
SLOW_ANSWER = "The slow tool gave 20."
GUARD_ANSWER = "The guarded tool gave 3."


def _log(line: str) -> None:
    path = os.environ.get("AGENTLOOP_TEST_LOG")
    if path:
        with open(path, "a") as f:
            f.write(f"{line} {os.getpid()} {time.time():.2f}\n")


@tool
async def slow(ctx: ToolContext, n: int) -> int:
    """Return ten times n after a while (the test kills its worker meanwhile).

    Args:
        n: the number
    """
    _log(f"start slow {ctx.idempotency_key}")
    await anyio.sleep(1.5)
    _log(f"done slow {ctx.idempotency_key}")
    return n * 10


@tool(requires_approval=True)
async def guarded(ctx: ToolContext, n: int) -> int:
    """Return n, once a person approves.

    Args:
        n: the number
    """
    _log(f"run guarded {ctx.idempotency_key}")
    return n


class Provider:
    """The emulated provider, its script chosen by the conversation's first question."""

    def __init__(self) -> None:
        self._scripts = {
            STORY: EmulatedProvider(script=[ANSWER], text_chunks=40, chunk_delay=0.1),
            SLOW: EmulatedProvider(
                script=[EmulatedTurn(calls=[EmulatedCall("slow", {"n": 2})]), SLOW_ANSWER]
            ),
            GUARD: EmulatedProvider(
                script=[EmulatedTurn(calls=[EmulatedCall("guarded", {"n": 3})]), GUARD_ANSWER]
            ),
        }

    def __call__(self, request: RecordedRequest) -> ScriptedResponse:
        body = request.json if isinstance(request.json, dict) else {}
        first = next(
            (m.get("content") for m in body.get("messages", []) if m.get("role") == "user"), ""
        )
        for question, provider in self._scripts.items():
            if question in str(first):
                return provider(request)
        return self._scripts[STORY](request)


agent: Agent[Any, Any] = Agent(
    OpenAIChatModel(
        "emulated",
        base_url=os.environ.get("AGENTLOOP_TEST_PROVIDER_URL", "http://127.0.0.1:9") + "/v1",
        api_key="test-key",
    ),
    name="replicated",
    tools=[slow, guarded],
    retry=RetryPolicy(initial_wait=0.01, jitter=0.0),
    store=SQLiteStore(os.environ.get("AGENTLOOP_TEST_STORE", ":memory:")),
)
durable: TemporalAgent[Any] = TemporalAgent(
    agent,
    task_queue=os.environ.get("AGENTLOOP_TEST_QUEUE", "replicated"),
    model_activity=ActivityOptions(heartbeat=2.0),
    tool_activity=ActivityOptions(heartbeat=2.0),
    workflow_task_timeout=4.0,
)
