"""ReAct mode against an OpenAI-compatible server (vLLM, Ollama, llama.cpp, LM Studio, …).

Shows: ``OpenAIChatModel(base_url=..., api_key=...)`` pointed at a server that speaks the Chat
Completions API, and ``tool_mode="react"``: no native tool calling is asked of the server; the
system prompt teaches the ``Thought:`` / ``Actions: [...]`` / ``Answer:`` format, the stop
sequence ``<|Response|>`` is sent, and agentloop's incremental parser starts each action the
moment its JSON object closes in the stream. Two actions of one reply run in parallel.

Offline (no ``OPENAI_BASE_URL``), the example starts agentloop's loopback ``ProviderServer``
emulating such a server: it streams Chat Completions chunks whose text is ReAct. With
``OPENAI_BASE_URL`` set (for example ``http://localhost:11434/v1`` for Ollama) it talks to that
server instead, with the model ``$OPENAI_MODEL`` (default ``llama3.1``).

Run: ``python examples/react_openai_compatible.py``
"""

from __future__ import annotations

import json
import os
from typing import Any

import anyio

from agentloop import ActionStarted, Agent, ModelCallFinished, ThoughtDelta, tool
from agentloop.models.openai import OpenAIChatModel
from agentloop.testing import Chunk, ProviderServer, RecordedRequest, ScriptedResponse


@tool
async def population(city: str) -> int:
    """The population of a city.

    Args:
        city: the city's English name
    """
    await anyio.sleep(0.1)
    return {"Paris": 2_102_650, "Oslo": 717_710}.get(city, 0)


# -- the emulated server --------------------------------------------------------------------------

FIRST = """Thought: I need both populations; I can look them up at the same time.
Actions: [{"tag": "p1", "name": "population", "path": "population", "input": {"city": "Paris"}},
 {"tag": "p2", "name": "population", "path": "population", "input": {"city": "Oslo"}}]"""

SECOND = """Thought: Paris has 2,102,650 people and Oslo 717,710; the ratio is about 2.9.
Answer: Paris has about 2.9 times as many people as Oslo (2,102,650 vs 717,710)."""


def chat_completion_stream(text: str, size: int = 12) -> ScriptedResponse:
    """Chat Completions streaming chunks carrying ``text``, ``size`` characters at a time."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        body = {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "local-model",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return f"data: {json.dumps(body)}\n\n".encode()

    pieces = [chunk({"role": "assistant", "content": ""})]
    pieces += [chunk({"content": text[i : i + size]}) for i in range(0, len(text), size)]
    pieces += [chunk({}, "stop"), b"data: [DONE]\n\n"]
    return ScriptedResponse.sse([Chunk(piece, delay=0.03) for piece in pieces])


def answer(request: RecordedRequest) -> ScriptedResponse:
    """Reply like a model would: first the actions, then (once results came back) the answer."""
    body = request.json
    assert "tools" not in body, "ReAct mode sends no native tool definitions"
    replied = any(m["role"] == "assistant" for m in body["messages"])
    return chat_completion_stream(SECOND if replied else FIRST)


# -- the run --------------------------------------------------------------------------------------


async def ask(model: OpenAIChatModel) -> None:
    agent = Agent(model, tools=[population], tool_mode="react")
    async with model, agent.stream("How many times more people live in Paris than in Oslo?") as run:
        mid_line = False
        start = anyio.current_time()
        async for event in run:
            if isinstance(event, ThoughtDelta):
                print(event.text, end="", flush=True)
                mid_line = not event.text.endswith("\n")
            elif isinstance(event, ModelCallFinished):
                print(
                    f"{chr(10) if mid_line else ''}  (reply stream ended at {anyio.current_time() - start:.2f}s)"
                )
                mid_line = False
            elif isinstance(event, ActionStarted):
                at = anyio.current_time() - start
                print(f"{chr(10) if mid_line else ''}  → {event.name}({event.input}) at {at:.2f}s")
                mid_line = False
    result = run.result
    print(f"\nAnswer: {result.output}")


async def main() -> None:
    base_url = os.environ.get("OPENAI_BASE_URL")
    if base_url:
        name = os.environ.get("OPENAI_MODEL", "llama3.1")
        await ask(
            OpenAIChatModel(name, base_url=base_url, api_key=os.environ.get("OPENAI_API_KEY"))
        )
        return
    async with ProviderServer(answer) as server:
        print(f"emulated OpenAI-compatible server at {server.url}/v1\n")
        await ask(OpenAIChatModel("local-model", base_url=server.url + "/v1", api_key="test"))
        first = server.requests[0].json
        print(
            f"\nthe server got {len(server.requests)} requests; the first had stop={first['stop']}"
        )
        print(
            "its system prompt begins: " + first["messages"][0]["content"][:70].replace("\n", " ")
        )


if __name__ == "__main__":
    anyio.run(main)
