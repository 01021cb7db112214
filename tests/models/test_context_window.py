"""A context window that holds: ``Agent(context_window=ContextWindow(...))`` bounds each
request's prompt over a long run, against the emulated provider (which reports prompt tokens
from each request's size, and refuses what each API refuses: a tool result without its call).
Older tool results are elided first, then older steps summarised (by a summarizer, which may
call a model) or dropped; each trim is a ``ContextTrimmed`` event; the requests stay valid for
all three APIs."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import pytest

from agentloop import (
    Agent,
    ContextTrimmed,
    ContextWindow,
    Message,
    ModelRequest,
    ModelResponse,
    RunContext,
    RunFinished,
    UserError,
    summarize_with,
    tool,
)
from agentloop.models._anthropic_wire import build_anthropic_body
from agentloop.models._encode import FragmentCache
from agentloop.models._openai_chat import build_chat_body
from agentloop.models._openai_responses import build_responses_body
from agentloop.testing import EmulatedProvider, ProviderServer, RecordedRequest
from agentloop.testing._checks import request_problem

from ._provider_helpers import make_model

BIG = 20_000  # characters each tool returns


@tool
async def fetch(query: str) -> str:
    """A long document for a query."""
    return f"{query}: " + "lorem ipsum " * (BIG // 12)


@tool
async def scan(query: str) -> str:
    """A long listing for a query."""
    return f"{query}: " + "0123456789 " * (BIG // 11)


class Recorder:
    """Model middleware that keeps every request (the prompt as sent)."""

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []

    async def __call__(self, request: ModelRequest, call_next: Any) -> ModelResponse:
        self.requests.append(request)
        response: ModelResponse = await call_next(request)
        return response


def _bodies(request: ModelRequest) -> dict[str, bytes]:
    """The request as each driver encodes it."""
    settings = request.settings
    return {
        "chat": build_chat_body(request, settings, model="m", stream=True,
                                max_tokens_key="max_completion_tokens",
                                messages=FragmentCache(), tools=FragmentCache()),
        "responses": build_responses_body(request, settings, model="m", stream=True,
                                          encrypted_reasoning=None,
                                          messages=FragmentCache(), tools=FragmentCache()),
        "anthropic": build_anthropic_body(request, settings, model="m", stream=True,
                                          messages=FragmentCache(), tools=FragmentCache()),
    }  # fmt: skip


_PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "anthropic": "/v1/messages"}


@pytest.mark.slow
async def test_a_200_step_run_stays_under_its_budget_and_every_request_is_valid() -> None:
    """200 steps of two 20 KB results each (8 MB of results) under a 40,000-token window:
    every request's prompt, as the provider counts it, stays under the budget; trims come as
    events; between trims each prompt starts with the previous one (the very objects, so the
    driver's encoding and the provider's prefix cache are reused); and every prompt, encoded
    for each of the three APIs, passes the emulated provider's request checks."""
    budget = 40_000
    recorder = Recorder()
    # The emulator keeps calling tools (it counts rounds in the prompt, which the window
    # trims): the run makes its 200 steps and ends at max_steps.
    provider = EmulatedProvider(tool_rounds=1_000, prompt_tokens=None)
    async with ProviderServer(provider) as server:
        async with make_model("openai-chat", server.url) as model:
            agent = Agent(
                model,
                tools=[fetch, scan],
                max_steps=200,
                context_window=ContextWindow(max_tokens=budget),
                model_middleware=[recorder],
            )
            trims: list[ContextTrimmed] = []
            async with agent.stream("survey everything") as stream:
                async for event in stream:
                    if isinstance(event, ContextTrimmed):
                        trims.append(event)
            result = stream.result
    assert result.error is not None and result.error.kind == "max_steps_exceeded"
    assert len(result.steps) == 200
    counted = [s.usage.input_tokens for s in result.steps if s.usage is not None]
    assert len(counted) == 200 and max(counted) <= budget
    assert sum(s.usage.input_tokens for s in result.steps if s.usage) < 200 * budget
    assert trims and all(t.tokens_after < t.tokens_before for t in trims)
    assert sum(t.elided_results for t in trims) > 100
    assert sum(t.summarized_steps for t in trims) > 100  # without a summarizer: dropped
    trimmed_at = {t.step for t in trims}
    prompts = [r.messages for r in recorder.requests]
    for step, (before, after) in enumerate(itertools.pairwise(prompts), start=1):
        if step not in trimmed_at:
            assert all(a is b for a, b in zip(before, after, strict=False)), step
    checker = EmulatedProvider(prompt_tokens=None)
    for request in recorder.requests:
        for api, body in _bodies(request.replace(run=None)).items():
            recorded = RecordedRequest(method="POST", path=_PATHS[api], headers={}, body=body)
            assert request_problem(api, recorded.json) is None
            assert checker(recorded).status == 200


def _text(body: dict[str, Any]) -> str:
    return repr(body)


async def test_older_steps_are_summarised_by_the_summarizer() -> None:
    """Over budget, older results are elided, then older steps go to the summarizer; its
    summary follows the user's input; the recent steps stay whole; every call keeps its
    result (the emulator would refuse an orphan)."""
    seen: list[Sequence[Message]] = []

    async def summarizer(messages: Sequence[Message], run: RunContext[Any]) -> str:
        seen.append(messages)
        return f"summary #{len(seen)}: fetched and scanned {run.agent_name}'s queries"

    window = ContextWindow(max_tokens=9_000, keep_steps=2, summarizer=summarizer)
    async with ProviderServer(EmulatedProvider(tool_rounds=99, prompt_tokens=None)) as server:
        async with make_model("anthropic", server.url) as model:
            agent = Agent(
                model, name="surveyor", tools=[fetch, scan], context_window=window, max_steps=8
            )
            async with agent.stream("survey") as run:
                events = [e async for e in run]
        bodies = [r.json for r in server.requests]
    trims = [e for e in events if isinstance(e, ContextTrimmed)]
    assert events[-1].type == "run_finished"
    error = run.result.error  # max_steps, not a 400: every request was valid
    assert error is not None and error.kind == "max_steps_exceeded"
    assert trims and sum(t.summarized_steps for t in trims) >= 2
    assert all(t.max_tokens == 9_000 for t in trims)
    assert seen and seen[0][0].role == "assistant"  # whole steps, from the call on
    if len(seen) > 1:  # a later summary sees the earlier one first
        assert seen[1][0].text.endswith("summary #1: fetched and scanned surveyor's queries")
    last = bodies[-1]
    first_user = last["messages"][0]["content"]
    assert first_user[0] == {"type": "text", "text": "survey"}
    assert first_user[1]["text"].startswith("\n\n[Summary of the earlier steps")
    assert "summary #" in first_user[1]["text"]
    assert max(len(repr(b)) for b in bodies) // 4 <= 9_000 * 1.3


async def test_without_a_summarizer_older_steps_are_dropped_with_a_note() -> None:
    """No summarizer: the note says how many steps went, and the run still answers."""
    window = ContextWindow(max_tokens=8_000, keep_steps=1)
    async with ProviderServer(EmulatedProvider(tool_rounds=99, prompt_tokens=None)) as server:
        async with make_model("openai-responses", server.url) as model:
            agent = Agent(model, tools=[fetch, scan], context_window=window, max_steps=6)
            result = await agent.run("go")
        last = server.requests[-1].json
    assert result.error is not None and result.error.kind == "max_steps_exceeded"
    user = next(i for i in last["input"] if i.get("role") == "user")
    assert "earlier step(s) were removed to fit the context window" in _text(user)


async def test_summarize_with_asks_a_model() -> None:
    """``summarize_with(model)`` sends the steps to a model as a transcript; its answer is
    the summary the run's next request carries."""
    provider = EmulatedProvider(tool_rounds=99, prompt_tokens=None, answer="The steps, in short.")
    async with ProviderServer(provider) as server:
        async with make_model("openai-chat", server.url) as model:
            window = ContextWindow(max_tokens=8_000, keep_steps=1, summarizer=summarize_with(model))
            agent = Agent(model, tools=[fetch, scan], context_window=window, max_steps=5)
            result = await agent.run("go")
        requests = [r.json for r in server.requests]
    assert result.error is not None and result.error.kind == "max_steps_exceeded"
    asked = [b for b in requests if "tools" not in b]
    assert asked and "Summarise the earlier steps" in asked[0]["messages"][0]["content"]
    assert (
        "result call_1_0 of fetch: [elided to fit the context window: 19999 characters"
        in asked[0]["messages"][1]["content"]
    )
    later = requests[requests.index(asked[0]) + 1]
    user = later["messages"][0]["content"]  # the input, then the summary the model wrote
    assert user.startswith("go\n\n[Summary of the earlier steps, to fit the context window]\n")
    assert user.endswith("The steps, in short.")  # the summariser's request offers no tools


def test_bad_windows_are_user_errors() -> None:
    with pytest.raises(UserError, match="max_tokens"):
        ContextWindow(max_tokens=0)
    with pytest.raises(UserError, match="keep_steps"):
        ContextWindow(max_tokens=10, keep_steps=0)
    with pytest.raises(UserError, match="headroom"):
        ContextWindow(max_tokens=10, headroom=1.0)


async def test_an_input_over_the_budget_is_an_error_before_any_call() -> None:
    """What a trim never touches (the system message, memory and the input) over the window's
    budget: no request is sent whole and silently; the run ends before its first call with
    ``context_window_exceeded``, naming the budget and the estimate."""
    from agentloop import ContextWindowExceeded
    from agentloop.testing import ScriptedModel

    model = ScriptedModel(["never"])
    agent = Agent(model, context_window=ContextWindow(max_tokens=1_000))
    async with agent.stream("x " * 20_000) as run:
        events = [e async for e in run]
    assert model.requests == []
    finished = events[-1]
    assert isinstance(finished, RunFinished)
    result = finished.result
    assert result.error is not None and result.error.kind == "context_window_exceeded"
    details = result.error.details or {}
    assert details["max_tokens"] == 1_000 and details["tokens"] > 1_000
    assert "context window" in result.error.message and "1000" in result.error.message
    with pytest.raises(ContextWindowExceeded):
        result.unwrap()
    fine = await Agent(ScriptedModel(["ok"]), context_window=ContextWindow(max_tokens=1_000)).run(
        "a short question"
    )
    assert fine.output == "ok"
