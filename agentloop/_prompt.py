"""Prompts: the sandboxed template environment, the system message, and ``build_prompt``.

``build_prompt`` derives the whole message list from the run's state on every model call:
system message, conversation memory right after it, the user input, then every earlier step
replayed. Templates are rendered in a sandbox, and only the agent author's templates are ever
template source: user input, tool output, model text and session state are data.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._errors import UserError
from ._react_parser import render_actions
from ._steps import ActionResult, Step
from .models._types import (
    Message,
    Part,
    TextPart,
    ThoughtPart,
    ToolCallPart,
    ToolMode,
    ToolResultPart,
)
from .tools._tool import Tool

if TYPE_CHECKING:
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

RESPONSE_MARKER = "<|Response|>"


@dataclass(frozen=True, kw_only=True, slots=True)
class Ruleset:
    """A named list of rules, added to the system message.

    Args:
        name: The ruleset's name, its heading in the system message.
        rules: The rules, one line each.
    """

    name: str
    rules: tuple[str, ...]


class Plain(str):
    """Instructions that are text, never rendered as a template: ``{{``, ``{%`` and ``{#``
    reach the model as written, as in ``Agent(instructions=Plain("Keep {{ name }} as is."))``.
    (A plain ``str`` is a jinja2 template, rendered with ``variables``.)"""

    __slots__ = ()


@functools.cache
def _env() -> ImmutableSandboxedEnvironment:
    # jinja2 is imported on first use (a third of ``import agentloop`` otherwise).
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    return ImmutableSandboxedEnvironment(
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=False,
        autoescape=False,
    )


@functools.cache
def _builtin(name: str) -> jinja2.Template:
    from importlib import resources

    source = resources.files("agentloop").joinpath("templates", name).read_text("utf-8")
    return _env().from_string(source)


_TEMPLATE_SYNTAX = ("{{", "{%", "{#")
_NEWLINES = re.compile(r"\r\n|\r|\n")


def untemplated(source: str) -> str | None:
    """What ``source`` renders to when it holds no template syntax (``None`` when it does), as
    ``_env`` renders it: newlines made ``\\n``, one trailing newline dropped. Instructions that
    are plain text need no jinja2 (50 ms of importing when the agent is made)."""
    if any(mark in source for mark in _TEMPLATE_SYNTAX):
        return None
    lines = _NEWLINES.split(source)
    if lines[-1] == "":
        del lines[-1]
    return "\n".join(lines)


@functools.lru_cache(maxsize=256)
def compile_template(source: str) -> jinja2.Template:
    """Compile an author's template in the sandbox (cached: agents are shared)."""
    env = _env()
    import jinja2  # imported by _env()

    try:
        return env.from_string(source)
    except jinja2.TemplateSyntaxError as exc:
        raise UserError(f"template syntax error on line {exc.lineno}: {exc.message}") from exc


def render(template: jinja2.Template, variables: Mapping[str, Any]) -> str:
    import jinja2  # imported when the template was compiled

    try:
        return template.render(**variables)
    except jinja2.UndefinedError as exc:
        raise UserError(f"template variable missing: {exc.message}") from exc
    except jinja2.exceptions.SecurityError as exc:
        raise UserError(f"template refused by the sandbox: {exc}") from exc


def actions_schema(tools: Sequence[Tool]) -> dict[str, Any]:
    """The JSON schema of a ReAct ``Actions:`` array: one ``anyOf`` branch per activity."""
    branches: list[dict[str, Any]] = []
    for tool in tools:
        for path, activity in tool.activities.items():
            branches.append(
                {
                    "type": "object",
                    "properties": {
                        "tag": {"type": "string"},
                        "name": {"const": tool.name},
                        "path": {"const": path if path is not None else tool.name},
                        "input": activity.parameters,
                    },
                    "required": ["tag", "name", "path", "input"],
                    "additionalProperties": False,
                }
            )
    return {"type": "array", "minItems": 1, "items": {"anyOf": branches}}


def system_message(
    *,
    instructions: str | None,
    rulesets: Sequence[Ruleset],
    tools: Sequence[Tool],
    tool_mode: ToolMode,
    reflect: bool,
    output_schema: Mapping[str, Any] | None,
    react_template: str | None,
) -> Message | None:
    """The system message of a run (rendered once per run)."""
    react = ""
    if tool_mode == "react" and tools:
        template = compile_template(react_template) if react_template else _builtin("react.j2")
        react = render(
            template,
            {
                "actions_schema": json.dumps(actions_schema(tools), ensure_ascii=False),
                "reflect": reflect,
                "tools": [
                    {
                        "name": t.name,
                        "plain": None in t.activities,
                        "description": t.description,
                        "activities": [
                            {"path": p if p is not None else t.name, "description": a.description}
                            for p, a in t.activities.items()
                        ],
                    }
                    for t in tools
                ],
            },
        )
    if not (rulesets or react or output_schema):
        # What system.j2 renders to with instructions alone, without importing jinja2 (about
        # 50 ms of a first run) for an agent whose instructions are none or ``Plain``.
        text = (instructions or "").strip()
        return Message.system(text) if text else None
    text = render(
        _builtin("system.j2"),
        {
            "instructions": instructions or "",
            "rulesets": rulesets,
            "react": react,
            "output_schema": json.dumps(output_schema, ensure_ascii=False) if output_schema else "",
        },
    ).strip()
    return Message.system(text) if text else None


def replay_step(step: Step, tool_mode: ToolMode) -> tuple[Message, ...]:
    """The messages that show the model an earlier step."""
    messages: list[Message] = []
    if step.carried:
        messages.extend(_replay_actions(step.carried, "", tool_mode))
    if tool_mode == "react":
        messages.extend(_replay_react(step))
    else:
        parts = tuple(
            p for p in step.parts if not (isinstance(p, ThoughtPart) and p.provider is None)
        )
        if step.actions:
            messages.extend(_replay_actions(step.actions, "", tool_mode, parts=parts))
        elif parts:
            messages.append(Message(role="assistant", parts=parts))
    if step.feedback:
        messages.append(Message.user(step.feedback))
    return tuple(messages)


def _replay_actions(
    results: Sequence[ActionResult],
    thought: str,
    tool_mode: ToolMode,
    *,
    parts: tuple[Part, ...] | None = None,
) -> list[Message]:
    if tool_mode == "react":
        text = f"Thought: {thought}\n" if thought else ""
        text += "Actions: " + render_actions([_action_dict(r) for r in results])
        images = tuple(image for r in results for image in r.images)
        response = TextPart(text=react_results(results))
        return [Message.assistant(text), Message(role="user", parts=(response, *images))]
    if parts is None:
        parts = tuple(r.as_call() for r in results)
    calls = {p.id for p in parts if isinstance(p, ToolCallPart)}
    # Every call gets a result, and every result a call.
    extra = tuple(r.as_call() for r in results if r.tag not in calls)
    return [
        Message(role="assistant", parts=parts + extra),
        Message(
            role="tool",
            parts=tuple(
                ToolResultPart(
                    id=r.tag,
                    name=r.name,
                    path=r.path,
                    content=r.content,
                    is_error=r.is_error,
                    images=r.images,
                )
                for r in results
            ),
        ),
    ]


def _replay_react(step: Step) -> list[Message]:
    if step.actions:
        return _replay_actions(step.actions, step.thought, "react")
    text = f"Thought: {step.thought}\n" if step.thought else ""
    if step.answer is not None:
        text += f"Answer: {step.answer}"
    return [Message.assistant(text)] if text.strip() else []


def _action_dict(result: ActionResult) -> dict[str, Any]:
    return {
        "tag": result.tag,
        "name": result.name,
        "path": result.path if result.path is not None else result.name,
        "input": result.input,
    }


def react_results(results: Sequence[ActionResult]) -> str:
    """The ``<|Response|>:`` turn: one JSON object per action, labelled with its tag."""
    lines = [f"{RESPONSE_MARKER}:"]
    for r in results:
        entry: dict[str, Any] = {"tag": r.tag}
        if r.is_error:
            entry["error"] = r.error
        else:
            entry["output"] = r.output
        lines.append(json.dumps(entry, ensure_ascii=False, default=str))
    return "\n".join(lines)


def build_prompt(
    *,
    system: Message | None,
    memory: Sequence[Message],
    user_input: str | Message,
    replayed: Sequence[tuple[Message, ...]],
) -> tuple[Message, ...]:
    """System message, memory (index 1, or 0 without a system message), input, earlier steps.
    ``user_input`` may be given as the user message already made (the loop makes it once)."""
    messages: list[Message] = []
    if system is not None:
        messages.append(system)
    messages.extend(memory)
    messages.append(Message.user(user_input) if isinstance(user_input, str) else user_input)
    for step_messages in replayed:
        messages.extend(step_messages)
    return tuple(messages)


def text_of(parts: Sequence[Part]) -> str:
    return "".join(p.text for p in parts if isinstance(p, TextPart))
