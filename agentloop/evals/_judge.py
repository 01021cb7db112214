"""LLM-as-judge: another agentloop model scores the answer against a rubric."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, Field, InstanceOf, PrivateAttr, field_serializer
from pydantic.json_schema import SkipJsonSchema

from .. import Agent, Model, UserError
from ._base import Builtin
from ._context import EvalContext
from ._result import EvalResult

JUDGE_INSTRUCTIONS = """\
You grade an AI agent's work against a rubric. Read the conversation and the agent's final
answer, then decide whether the answer satisfies the rubric. Be strict: an answer passes only
when it meets every point of the rubric. Reply with a JSON object: "passed" (true or false),
"score" (a number from 0 to 1: how well it meets the rubric) and "reason" (one or two
sentences)."""

_LIMIT = 20_000  # characters of conversation shown to the judge


class Verdict(BaseModel):
    """A judge's answer.

    Attributes:
        passed: Whether the answer meets the rubric.
        score: How well, from 0 to 1.
        reason: Why, briefly.
    """

    passed: bool
    score: float = Field(ge=0.0, le=1.0)
    reason: str = ""


class LLMJudge(Builtin):
    """A model grades the answer against ``rubric`` (a ``Verdict``: passed, score, reason).

    The judge is an ``Agent`` on any agentloop model: ``model`` (a ``Model``, or a
    ``"provider:model"`` string a dataset file can hold), else ``evaluate(judge_model=...)``.
    It sees the user's messages, the agent's replies, the expected output when the case has
    one (``include_expected``), and the rubric.

    Attributes:
        kind: ``llm_judge``.
        rubric: What a good answer does.
        model: The judge's model (default: ``evaluate``'s ``judge_model``).
        include_expected: Show the judge the case's ``expected_output``.
        threshold: The lowest score that passes, when given (else the judge's ``passed``).
    """

    kind: Literal["llm_judge"] = "llm_judge"
    rubric: str
    model: str | SkipJsonSchema[InstanceOf[Model]] | None = None
    include_expected: bool = True
    threshold: float | None = Field(default=None, ge=0.0, le=1.0)
    _agents: dict[int, Agent[Any, Verdict]] = PrivateAttr(default_factory=dict)

    @field_serializer("model")
    def _model_name(self, model: str | Model | None) -> str | None:
        if model is None or isinstance(model, str):
            return model
        return f"{model.provider}:{model.name}"

    def default_name(self) -> str:
        return "llm_judge"

    def _judge(self, fallback: Model | str | None) -> Agent[Any, Verdict]:
        model = self.model if self.model is not None else fallback
        if model is None:
            raise UserError("LLMJudge has no model: give it one, or pass evaluate(judge_model=...)")
        key = id(model)
        agent = self._agents.get(key)
        if agent is None:
            agent = Agent(
                model,
                name="judge",
                instructions=JUDGE_INSTRUCTIONS,
                output_type=Verdict,
                max_steps=2,
            )
            self._agents[key] = agent
        return agent

    async def evaluate(self, ctx: EvalContext) -> EvalResult | None:
        judge = self._judge(ctx.judge_model)
        result = await judge.run(self._prompt(ctx))
        verdict = result.output
        if verdict is None:
            why = result.error.message if result.error is not None else "no verdict"
            return self._result(False, f"the judge gave no verdict: {why}")
        passed = verdict.passed if self.threshold is None else verdict.score >= self.threshold
        return EvalResult(name=self.name, score=verdict.score, passed=passed, reason=verdict.reason)

    def _prompt(self, ctx: EvalContext) -> str:
        lines = ["# Conversation"]
        for role, text in ctx.transcript:
            lines.append(f"{role.upper()}: {text}")
        if ctx.result is not None and ctx.result.error is not None:
            lines.append(f"(the agent's run ended with an error: {ctx.result.error.message})")
        if self.include_expected and ctx.case.expected_output is not None:
            expected = ctx.case.expected_output
            shown = expected if isinstance(expected, str) else json.dumps(expected, default=str)
            lines += ["", "# Expected answer", shown]
        conversation = "\n".join(lines)
        if len(conversation) > _LIMIT:
            conversation = "…" + conversation[-_LIMIT:]
        return f"{conversation}\n\n# Rubric\n{self.rubric}"

    async def aclose(self) -> None:
        """Close the judge's agents (and their models)."""
        agents, self._agents = list(self._agents.values()), {}
        for agent in agents:
            await agent.aclose()
