"""Tools: ``@tool`` functions and ``Toolkit`` classes with several activities."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, final, get_origin, overload

from typing_extensions import ParamSpec, TypeVar

from .._errors import UserError, warn
from ..models._types import TOOL_NAME_SEPARATOR, ToolSpec, wire_tool_name
from ._context import ToolContext
from ._schema import args_model, json_schema, parse_docstring
from ._schema_check import SchemaCheck, checked_args_model, tool_parameters

if TYPE_CHECKING:
    from pydantic import BaseModel, ValidationError

    from .._decisions import ApprovalRule
    from ..models._types import RunContext

P = ParamSpec("P")
R = TypeVar("R")
# A Tool's parameters and result, for calling a plain tool directly: any, when not known.
ToolP = ParamSpec("ToolP", default=...)
ToolR = TypeVar("ToolR", default=Any)

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_WIRE_NAME = 64


def check_name(kind: str, name: str) -> str:
    if not _NAME.match(name) or TOOL_NAME_SEPARATOR in name:
        raise UserError(
            f"{kind} name {name!r} must be 1-64 characters of [A-Za-z0-9_-] without "
            f"{TOOL_NAME_SEPARATOR!r} (it is sent to providers as a function name)"
        )
    return name


def check_unique_names(tools: Sequence[Tool]) -> None:
    """Tool names are unique: the model calls a tool by its name. Checked when an agent is
    made (its tools) and when a run starts (with its toolsets' tools)."""
    names = [t.name for t in tools]
    if len(set(names)) == len(names):
        return
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise UserError(f"duplicate tool names: {', '.join(duplicates)}")


@final
@dataclass(frozen=True, kw_only=True, slots=True)
class Activity:
    """One callable of a tool: a plain ``@tool`` has one, a ``Toolkit`` one per method.

    Args:
        path: The activity's name in its toolkit (``None`` for a plain tool).
        description: What it does, for the model.
        fn: The function or bound method it runs.
        args: The pydantic model its arguments are validated with.
        parameters: The JSON schema of its arguments, as sent to the model.
        context_param: The name of its ``ToolContext`` parameter, if it has one.
        is_async: Whether ``fn`` is a coroutine function (else it runs in a worker thread).
        eager: Start as soon as its call is sealed in the stream.
        timeout: Seconds a call may take.
        serial_key: Calls with equal keys run one at a time, in the model's order.
        side_effects: In a session, start only once the reply is committed.
        on_invalid: Answers arguments that break the schema (see ``tool``).
        requires_approval: A call waits for a decision before it runs (``True``, or a
            predicate on the call and the run's context).
        external: The caller runs it (``Tool.external``): a call waits for its result.
        retries: How often it may raise ``ModelRetry`` in one run (``None``: the agent's
            ``ToolLimits.max_retries``).
    """

    path: str | None
    description: str
    fn: Callable[..., Any]
    args: type[BaseModel]
    parameters: Mapping[str, Any]
    context_param: str | None
    is_async: bool
    eager: bool
    timeout: float | None
    serial_key: Callable[[RunContext], str] | None = None
    side_effects: bool = False
    on_invalid: Callable[[ValidationError], Any] | None = None
    requires_approval: bool | ApprovalRule = False
    external: bool = False
    retries: int | None = None

    @property
    def may_wait(self) -> bool:
        """Whether a call may wait for a decision: it never starts as soon as it is sealed."""
        return self.external or self.requires_approval is not False

    def spec(self, tool_name: str) -> ToolSpec:
        """The activity as the model is sent it.

        Args:
            tool_name: The name of its tool (the wire name joins it to ``path``).
        """
        return ToolSpec(
            name=wire_tool_name(tool_name, self.path),
            description=self.description,
            parameters=self.parameters,
        )


@final
class Tool(Generic[ToolP, ToolR]):
    """A tool the model can call. ``activities`` maps a path (``None`` for a plain tool) to the
    activity it runs. Calling the tool object calls a plain tool's function directly, with its
    signature (``Tool[P, R]`` for type checkers; an ``async def`` tool's call is awaited).

    Make one with ``@tool`` (its schema from a signature), a ``Toolkit``, or
    ``Tool.from_schema`` (a name and a JSON schema, for tools defined by data).

    Args:
        name: The tool's name (1-64 of ``[A-Za-z0-9_-]``, no ``__``).
        description: What it does, for the model.
        activities: Its activities by path (``{None: activity}`` for a plain tool).
    """

    __slots__ = ("_specs", "activities", "description", "name")

    def __init__(self, *, name: str, description: str, activities: Mapping[str | None, Activity]):
        self.name = check_name("tool", name)
        self.description = description
        self.activities = dict(activities)
        for path in self.activities:
            if path is not None:
                check_name("activity", path)
                if len(wire_tool_name(name, path)) > MAX_WIRE_NAME:
                    raise UserError(
                        f"tool {name!r} activity {path!r}: {wire_tool_name(name, path)!r} is "
                        f"longer than {MAX_WIRE_NAME} characters"
                    )
        # Built once: the same ToolSpec objects on every run let the drivers reuse the JSON
        # they encoded for them (their fragment caches are keyed by identity).
        self._specs = tuple(a.spec(self.name) for a in self.activities.values())

    @classmethod
    def from_schema(
        cls,
        name: str,
        description: str,
        schema: Mapping[str, Any],
        fn: Callable[..., Any],
        *,
        eager: bool = True,
        timeout: float | None = None,
        side_effects: bool = False,
        serial_key: Callable[[RunContext], str] | None = None,
        on_invalid: Callable[[ValidationError], Any] | None = None,
        requires_approval: bool | ApprovalRule = False,
    ) -> Tool:
        """A tool declared by a name and a JSON schema instead of a Python signature: for tools
        that come from data (a config file, an OpenAPI operation, another framework).

        ``schema`` is the arguments' object schema, sent to the provider as given (without
        ``$schema``). ``fn(arguments)`` (``async def`` or plain ``def``; an extra parameter
        annotated ``ToolContext`` gets the context) receives the decoded arguments as one
        dict, once they pass a bounded check of the schema's common keywords: ``type``,
        ``enum``, ``const``, ``required``, ``properties``, ``additionalProperties``, items,
        lengths, ``pattern``, numeric bounds, ``anyOf``/``oneOf``/``allOf``/``not`` and local
        ``$ref``. Arguments that fail it get the usual ``invalid_arguments`` error result (or
        ``on_invalid``'s answer); keywords it does not check (``format``, ``if``/``then``, ...)
        are the function's to check. Other options are as for ``tool``.

        Args:
            name: The tool's name (1-64 of ``[A-Za-z0-9_-]``, no ``__``).
            description: What it does, for the model.
            schema: The arguments' JSON object schema.
            fn: Called with the checked arguments as one dict (and the context, if it asks).
            eager: Start as soon as its call is sealed in the stream.
            timeout: Seconds a call may take before it is a ``timeout`` error result.
            side_effects: In a session run, start only once the reply is committed.
            serial_key: Calls whose ``serial_key(run_context)`` is equal run one at a time.
            on_invalid: Makes the action's output from a ``pydantic.ValidationError`` of its
                arguments.
            requires_approval: A call waits for a decision first (``True``, or a predicate
                ``(action, run_context) -> bool``, maybe async).
        """
        return _schema_tool(
            name,
            description,
            schema,
            fn,
            eager=eager,
            timeout=timeout,
            side_effects=side_effects,
            serial_key=serial_key,
            on_invalid=on_invalid,
            requires_approval=requires_approval,
        )

    @classmethod
    def external(cls, name: str, description: str, schema: Mapping[str, Any]) -> Tool:
        """A tool the caller runs (a browser, a phone): declared by a name, a description and
        the arguments' JSON object schema, with no Python function. A run that calls it waits
        (``RunWaiting``) with the call in ``result.pending``; the caller supplies its result on
        resume: ``decisions={call.id: ExternalResult(output=...)}``.

        Args:
            name: The tool's name (1-64 of ``[A-Za-z0-9_-]``, no ``__``).
            description: What it does, for the model.
            schema: The arguments' JSON object schema.
        """
        return _schema_tool(
            name,
            description,
            schema,
            _runs_elsewhere,
            eager=False,
            timeout=None,
            side_effects=False,
            serial_key=None,
            on_invalid=None,
            external=True,
        )

    def activity(self, path: str | None) -> Activity | None:
        """The activity at ``path``. A plain tool also answers to its own name as the path.

        Args:
            path: The activity's name, or ``None``.
        """
        found = self.activities.get(path)
        if found is None and path == self.name and None in self.activities:
            found = self.activities[None]
        return found

    def specs(self) -> Iterator[ToolSpec]:
        return iter(self._specs)

    def __call__(self, *args: ToolP.args, **kwargs: ToolP.kwargs) -> ToolR:
        plain = self.activities.get(None)
        if plain is None:
            raise TypeError(f"toolkit {self.name!r} is not callable; call its activities")
        result: ToolR = plain.fn(*args, **kwargs)
        return result

    def __repr__(self) -> str:
        paths = [p for p in self.activities if p is not None]
        return f"Tool({self.name!r}{', activities=' + repr(paths) if paths else ''})"


def _is_context(param: inspect.Parameter, annotation: Any) -> bool:
    """Whether the parameter is the injected ``ToolContext`` (also ``ToolContext[Deps]``)."""
    return (
        annotation is ToolContext
        or get_origin(annotation) is ToolContext
        or param.annotation in ("ToolContext", ToolContext)
    )


def _is_async(fn: Callable[..., Any]) -> bool:
    target = inspect.unwrap(fn)
    return inspect.iscoroutinefunction(target) or inspect.iscoroutinefunction(
        getattr(target, "__call__", None)  # noqa: B004 - callable objects with async __call__
    )


class _CallWithArguments:
    """Calls a schema tool's function with the arguments as one dict (and the context, by
    name, when the function asks for it). The executor passes both as keywords."""

    __slots__ = ("_context_param", "_fn")

    def __init__(self, fn: Callable[..., Any], context_param: str | None) -> None:
        self._fn = fn
        self._context_param = context_param

    def __call__(self, arguments: Mapping[str, Any], context: ToolContext | None = None) -> Any:
        if self._context_param is None:
            return self._fn(arguments)
        return self._fn(arguments, **{self._context_param: context})


def _context_param_of(name: str, fn: Callable[..., Any]) -> str | None:
    """The parameter of a schema tool's function that takes the ``ToolContext``, if any;
    checks that the function takes the arguments as its one other (positional) parameter."""
    if not callable(fn):
        raise UserError(f"tool {name!r}: {fn!r} is not callable")
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature: trust it with one argument
        return None
    context = [p for p in params if _is_context(p, p.annotation)]
    others = [p for p in params if p not in context and p.default is p.empty]
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    takes_one = (len(others) == 1 and others[0].kind in positional) or (
        not others and any(p.kind is p.VAR_POSITIONAL for p in params)
    )
    if (
        len(context) > 1
        or not takes_one
        or (context and context[0].kind is context[0].POSITIONAL_ONLY)
    ):
        raise UserError(
            f"tool {name!r}: a schema tool's function takes the arguments as one parameter "
            "(and, optionally, a parameter annotated ToolContext)"
        )
    return context[0].name if context else None


def _runs_elsewhere(arguments: Mapping[str, Any]) -> Any:
    """An external tool's function: never called, as its calls wait for the caller's result."""
    raise RuntimeError("an external tool runs on the caller's side, never in the run")


def _check_rule(name: str, requires_approval: object) -> None:
    if not isinstance(requires_approval, bool) and not callable(requires_approval):
        raise UserError(
            f"tool {name!r}: requires_approval must be True, False or a predicate "
            f"(action, run_context) -> bool, not {requires_approval!r}"
        )


def _schema_tool(
    name: str,
    description: str,
    schema: Mapping[str, Any],
    fn: Callable[..., Any],
    *,
    eager: bool,
    timeout: float | None,
    side_effects: bool,
    serial_key: Callable[[RunContext], str] | None,
    on_invalid: Callable[[ValidationError], Any] | None,
    requires_approval: bool | ApprovalRule = False,
    external: bool = False,
) -> Tool:
    name = check_name("tool", name)
    if timeout is not None and timeout <= 0:
        raise UserError(f"tool {name!r}: timeout must be positive, not {timeout}")
    _check_rule(name, requires_approval)
    parameters = tool_parameters(name, schema)
    context_param = _context_param_of(name, fn)
    activity = Activity(
        path=None,
        description=description.strip(),
        fn=_CallWithArguments(fn, context_param),
        args=checked_args_model(name, SchemaCheck(parameters)),
        parameters=parameters,
        context_param="context" if context_param is not None else None,
        is_async=_is_async(fn),
        eager=eager,
        timeout=timeout,
        serial_key=serial_key,
        side_effects=side_effects,
        on_invalid=on_invalid,
        requires_approval=requires_approval,
        external=external,
    )
    return Tool(name=name, description=activity.description, activities={None: activity})


def make_activity(
    fn: Callable[..., Any],
    *,
    tool_name: str,
    path: str | None,
    description: str | None,
    eager: bool,
    timeout: float | None,
    serial_key: Callable[[RunContext], str] | None = None,
    side_effects: bool = False,
    on_invalid: Callable[[ValidationError], Any] | None = None,
    requires_approval: bool | ApprovalRule = False,
) -> Activity:
    """The activity running ``fn``, with its argument model and schema from the signature.

    ``on_invalid`` lets the tool answer arguments that break its schema itself: instead of the
    runtime's ``invalid_arguments`` error result, the action succeeds with
    ``on_invalid(validation_error)`` as its output (``fn`` is not called). Arguments that are
    not a JSON object at all still get the runtime's error.
    """
    if timeout is not None and timeout <= 0:
        raise UserError(f"tool {tool_name!r}: timeout must be positive, not {timeout}")
    _check_rule(tool_name, requires_approval)
    summary, param_docs = parse_docstring(inspect.getdoc(fn))
    context_params: list[str] = []

    def injected(param: inspect.Parameter, annotation: Any) -> bool:
        # Judged on the resolved annotation: ``ToolContext[Deps]`` (a string under
        # ``from __future__ import annotations``) is a ToolContext only once resolved.
        if _is_context(param, annotation):
            context_params.append(param.name)
            return True
        return False

    model = args_model(
        fn,
        name=wire_tool_name(tool_name, path),
        skip=injected,
        descriptions=param_docs,
        localns={"ToolContext": ToolContext},
    )
    described = (description or summary or "").strip()
    label = tool_name if path is None else f"{tool_name}.{path}"
    _warn_if_unclear(fn, label, described, context_params)
    is_async = _is_async(fn)
    return Activity(
        path=path,
        description=described,
        fn=fn,
        args=model,
        parameters=json_schema(model),
        context_param=context_params[0] if context_params else None,
        is_async=is_async,
        eager=eager,
        timeout=timeout,
        serial_key=serial_key,
        side_effects=side_effects,
        on_invalid=on_invalid,
        requires_approval=requires_approval,
    )


def _warn_if_unclear(
    fn: Callable[..., Any], name: str, description: str, context_params: Sequence[str]
) -> None:
    """Tell the developer, when the tool is made, what the model would otherwise guess at: a
    tool without a description, a parameter without a type (any JSON value, unvalidated)."""
    if not description:
        warn(
            f"tool {name!r} has no description: the model sees only its name. Give its "
            "function a docstring, or pass description=..."
        )
    for param in inspect.signature(fn).parameters.values():
        if param.annotation is param.empty and param.name not in context_params:
            warn(
                f"tool {name!r}: parameter {param.name!r} has no type annotation, so the model "
                "may send any JSON value and it is not validated; annotate it (e.g. "
                f"{param.name}: str)"
            )


@overload
def tool(fn: Callable[P, R], /) -> Tool[P, R]: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    schema: Mapping[str, Any] | None = None,
    eager: bool = True,
    timeout: float | None = None,
    side_effects: bool = False,
    serial_key: Callable[[RunContext], str] | None = None,
    on_invalid: Callable[[ValidationError], Any] | None = None,
    requires_approval: bool | ApprovalRule = False,
    retries: int | None = None,
) -> Callable[[Callable[P, R]], Tool[P, R]]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    schema: Mapping[str, Any] | None = None,
    eager: bool = True,
    timeout: float | None = None,
    side_effects: bool = False,
    serial_key: Callable[[RunContext], str] | None = None,
    on_invalid: Callable[[ValidationError], Any] | None = None,
    requires_approval: bool | ApprovalRule = False,
    retries: int | None = None,
) -> Tool[..., Any] | Callable[[Callable[..., Any]], Tool[..., Any]]:
    """Make a tool of an ``async def`` or plain ``def`` function.

    The argument schema comes from the signature (validated with pydantic), descriptions from
    the docstring. A parameter annotated ``ToolContext`` is injected, not shown to the model.
    Plain functions run in worker threads. ``eager=False`` waits for the whole reply to pass the
    middleware chain before starting; ``timeout`` (seconds) turns a slow call into an error
    result. ``side_effects=True``: in a session run the tool starts only once its reply is
    committed, so that a re-run after a crash repeats the same ``idempotency_key``.
    Calls whose ``serial_key(run_context)`` is equal run one at a time, in the order the model
    gave them. ``on_invalid(validation_error)`` answers arguments that break the schema itself
    (its value is the action's output; the function is not called), instead of the runtime's
    ``invalid_arguments`` error result. ``requires_approval`` (``True``, or a predicate
    ``(action, run_context) -> bool``, maybe async) makes a call wait for a decision before
    it runs, never starting eagerly: the agent's ``approver`` decides it at once, else the run
    waits (``RunWaiting``) for ``Agent.resume(decisions=...)``.

    ``schema=`` (a JSON object schema) declares the arguments instead of the signature: the
    function then takes them as one dict, as with ``Tool.from_schema``.

    Args:
        fn: The function (when used as ``@tool`` without parentheses).
        name: The tool's name (default: the function's).
        description: What it does, for the model (default: the docstring's summary).
        schema: A JSON object schema for the arguments, instead of the signature's.
        eager: Start as soon as its call is sealed in the stream (``False``: after the whole
            reply passed the model middleware).
        timeout: Seconds a call may take before it is a ``timeout`` error result.
        side_effects: In a session run, start only once the reply is committed.
        serial_key: Calls whose ``serial_key(run_context)`` is equal run one at a time.
        on_invalid: Makes the action's output from a ``pydantic.ValidationError`` of its
            arguments.
        requires_approval: A call waits for a decision first (``True``, or a predicate on the
            call and the run's context).
        retries: How often it may raise ``ModelRetry`` in one run before the run ends with
            ``tool_retries_exceeded`` (``None``: the agent's ``ToolLimits.max_retries``).
    """
    if retries is not None and retries < 0:
        raise UserError(f"tool {name or ''!r}: retries must not be negative")

    def wrap(f: Callable[..., Any]) -> Tool[..., Any]:
        made = _wrap(f)
        if retries is None:
            return made
        activities = {
            k: dataclasses.replace(a, retries=retries) for k, a in made.activities.items()
        }
        return Tool(name=made.name, description=made.description, activities=activities)

    def _wrap(f: Callable[..., Any]) -> Tool[..., Any]:
        tool_name = check_name("tool", name or f.__name__)
        if schema is not None:
            summary, _ = parse_docstring(inspect.getdoc(f))
            return _schema_tool(
                tool_name,
                description or summary,
                schema,
                f,
                eager=eager,
                timeout=timeout,
                side_effects=side_effects,
                serial_key=serial_key,
                on_invalid=on_invalid,
                requires_approval=requires_approval,
            )
        activity = make_activity(
            f,
            tool_name=tool_name,
            path=None,
            description=description,
            eager=eager,
            timeout=timeout,
            side_effects=side_effects,
            serial_key=serial_key,
            on_invalid=on_invalid,
            requires_approval=requires_approval,
        )
        return Tool(name=tool_name, description=activity.description, activities={None: activity})

    return wrap(fn) if fn is not None else wrap


@dataclass(frozen=True, kw_only=True, slots=True)
class _ActivityOptions:
    name: str | None
    description: str | None
    eager: bool
    timeout: float | None
    side_effects: bool
    requires_approval: bool | ApprovalRule = False


_MARK = "__agentloop_activity__"


@overload
def activity(fn: Callable[P, R], /) -> Callable[P, R]: ...


@overload
def activity(
    *,
    name: str | None = None,
    description: str | None = None,
    eager: bool = True,
    timeout: float | None = None,
    side_effects: bool = False,
    requires_approval: bool | ApprovalRule = False,
) -> Callable[[Callable[P, R]], Callable[P, R]]: ...


def activity(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    eager: bool = True,
    timeout: float | None = None,
    side_effects: bool = False,
    requires_approval: bool | ApprovalRule = False,
) -> Any:
    """Mark a ``Toolkit`` method as an activity (the action's ``path`` is its name); options
    as for ``tool``.

    Args:
        fn: The method (when used as ``@activity`` without parentheses).
        name: The activity's name (default: the method's).
        description: What it does, for the model (default: the docstring's summary).
        eager: Start as soon as its call is sealed in the stream.
        timeout: Seconds a call may take.
        side_effects: In a session run, start only once the reply is committed.
        requires_approval: A call waits for a decision first (as for ``tool``).
    """

    def mark(f: Callable[..., Any]) -> Callable[..., Any]:
        setattr(
            f,
            _MARK,
            _ActivityOptions(
                name=name,
                description=description,
                eager=eager,
                timeout=timeout,
                side_effects=side_effects,
                requires_approval=requires_approval,
            ),
        )
        return f

    return mark(fn) if fn is not None else mark


class Toolkit:
    """A tool with several activities: subclass it and mark methods with ``@activity``.

    ``name`` defaults to the class name in snake case and ``description`` to the class docstring.
    An instance is accepted wherever a tool is.
    """

    name: ClassVar[str | None] = None
    description: ClassVar[str | None] = None

    @functools.cached_property
    def tool(self) -> Tool[..., Any]:
        cls = type(self)
        tool_name = check_name("tool", cls.name or _snake(cls.__name__))
        activities: dict[str | None, Activity] = {}
        for attr in dir(cls):
            options = getattr(getattr(cls, attr, None), _MARK, None)
            if not isinstance(options, _ActivityOptions):
                continue
            path = check_name("activity", options.name or attr)
            activities[path] = make_activity(
                getattr(self, attr),
                tool_name=tool_name,
                path=path,
                description=options.description,
                eager=options.eager,
                timeout=options.timeout,
                side_effects=options.side_effects,
                requires_approval=options.requires_approval,
            )
        if not activities:
            raise UserError(f"toolkit {tool_name!r} has no @activity methods")
        description = cls.description or inspect.cleandoc(cls.__doc__ or "")
        return Tool(name=tool_name, description=description.strip(), activities=activities)


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
