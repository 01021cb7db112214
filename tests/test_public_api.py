"""The public surface: each package's __all__ is pinned, sorted and matches its namespace; no
provider SDK on import."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import agentloop

# What users import. A change here is a change to the public API: say it in the CHANGELOG.
PUBLIC_API: dict[str, list[str]] = {
    "agentloop": [
        "Action",
        "ActionArgsDelta",
        "ActionAwaiting",
        "ActionDecided",
        "ActionFinished",
        "ActionProgress",
        "ActionResult",
        "ActionStarted",
        "Agent",
        "AgentLoopError",
        "AgentLoopWarning",
        "AnswerDelta",
        "Approve",
        "Approver",
        "AttemptDiscarded",
        "ContentFiltered",
        "ContextTrimmed",
        "ContextWindow",
        "ContextWindowExceeded",
        "Cost",
        "Decision",
        "DecisionsPending",
        "Deny",
        "Edit",
        "Event",
        "ExternalResult",
        "FallbackModel",
        "FilePart",
        "GuardrailTripped",
        "Handoff",
        "ImagePart",
        "InputGuardrail",
        "Instrumentation",
        "MaxStepsExceeded",
        "Memory",
        "Message",
        "Model",
        "ModelAuthError",
        "ModelBadRequest",
        "ModelCall",
        "ModelCallFinished",
        "ModelCallStarted",
        "ModelConnectionError",
        "ModelError",
        "ModelHTTPError",
        "ModelMiddleware",
        "ModelNotFound",
        "ModelOverloaded",
        "ModelPrice",
        "ModelRateLimited",
        "ModelRefused",
        "ModelRequest",
        "ModelResponse",
        "ModelRetry",
        "ModelServerError",
        "ModelSettings",
        "ModelStreamError",
        "ModelTimeout",
        "NonceStore",
        "NothingToResume",
        "OutputGuardrail",
        "OutputInvalid",
        "OutputValidator",
        "PartialOutput",
        "PayloadTooLarge",
        "PendingCall",
        "Plain",
        "PriceTable",
        "ProviderEvent",
        "ReplyTooLarge",
        "ReplyTruncated",
        "ResumeSealer",
        "RetryPolicy",
        "Ruleset",
        "RunCancelled",
        "RunContext",
        "RunDeadlineExceeded",
        "RunError",
        "RunErrorInfo",
        "RunFailed",
        "RunFinished",
        "RunResult",
        "RunStarted",
        "RunStream",
        "RunWaiting",
        "SessionBusy",
        "SessionConflict",
        "SessionError",
        "SessionNotFound",
        "SessionStoreError",
        "StateView",
        "Step",
        "StepFinished",
        "Summarizer",
        "TextDelta",
        "ThoughtDelta",
        "Tool",
        "ToolCall",
        "ToolCallNext",
        "ToolContext",
        "ToolError",
        "ToolGuardrail",
        "ToolLimits",
        "ToolMiddleware",
        "ToolRetriesExceeded",
        "Toolkit",
        "Toolset",
        "Tripwire",
        "Usage",
        "UsageLimitExceeded",
        "UsageLimits",
        "UsedNonces",
        "UserError",
        "activity",
        "event_from_json",
        "summarize_with",
        "tool",
    ],
    "agentloop.cli": [
        "main",
    ],
    "agentloop.evals": [
        "Budget",
        "Case",
        "CaseReport",
        "CaseRun",
        "Change",
        "Check",
        "Comparison",
        "Contains",
        "Dataset",
        "Equals",
        "EvalContext",
        "EvalResult",
        "Evaluator",
        "GoalOutcome",
        "HasSpan",
        "LLMJudge",
        "OutputValid",
        "Regex",
        "Report",
        "SimulatedUser",
        "SpanCount",
        "SpanRecord",
        "ToolCallSpec",
        "ToolTrajectory",
        "Verdict",
        "assert_case",
        "compare",
        "durable",
        "evaluate",
        "parametrize",
    ],
    "agentloop.goals": [
        "DEFAULT_GUIDANCE",
        "DEFAULT_NUDGE",
        "GoalEnforcement",
        "GoalOptions",
        "GoalRecord",
        "GoalStatus",
        "GoalToolSet",
        "RetryEvent",
        "get_goal_record",
        "render_goal",
        "setup_goal",
        "start_goal",
    ],
    "agentloop.mcp": [
        "DEFAULT_TIMEOUT",
        "DEFAULT_TOOL_TIMEOUT",
        "Elicitor",
        "MCPElicitation",
        "MCPElicitationReply",
        "MCPHttpServer",
        "MCPPrompt",
        "MCPPromptArgument",
        "MCPPromptMessages",
        "MCPResource",
        "MCPResourceContents",
        "MCPResourceTemplate",
        "MCPSamplingReply",
        "MCPSamplingRequest",
        "MCPServer",
        "MCPServerError",
        "MCPStdioServer",
        "Sampler",
    ],
    "agentloop.web": [
        "PROTOCOLS",
        "Auth",
        "Encoder",
        "EventLog",
        "LogTrimmed",
        "RunBackend",
        "RunHub",
        "RunLog",
        "TooMany",
        "WebLimits",
        "bearer_token",
        "check_bind",
        "create_app",
        "encoder",
        "last_event_id",
        "load_agent",
        "serve",
        "sse_response",
    ],
    "agentloop.models": [
        "IMAGE_TYPES",
        "CitationDelta",
        "FallbackModel",
        "FilePart",
        "FinishDelta",
        "FinishReason",
        "ImagePart",
        "InputPart",
        "Message",
        "Model",
        "ModelDelta",
        "ModelProfile",
        "ModelRequest",
        "ModelResponse",
        "ModelSettings",
        "ModelStream",
        "OutputSchema",
        "Part",
        "ProviderBlock",
        "ProviderPart",
        "ResponseBuilder",
        "TextPart",
        "TextPiece",
        "ThoughtDone",
        "ThoughtPart",
        "ThoughtPiece",
        "ToolCallArgsDelta",
        "ToolCallEnd",
        "ToolCallPart",
        "ToolCallStart",
        "ToolMode",
        "ToolResultPart",
        "ToolSpec",
        "Usage",
        "UsageDelta",
        "collect",
        "register_provider",
        "resolve_model",
        "wire_tool_name",
    ],
    "agentloop.sessions": [
        "JSON",
        "InMemoryStore",
        "Lease",
        "PostgresStore",
        "Record",
        "ReplyRecord",
        "RunEndRecord",
        "RunRecord",
        "SQLiteStore",
        "Session",
        "SessionInfo",
        "SessionStore",
        "StateChangeRecord",
        "StepRecord",
        "StoreStats",
        "open_store",
        "record_from_json",
        "record_to_json",
    ],
    "agentloop.testing": [
        "Chunk",
        "EchoModel",
        "EmulatedCall",
        "EmulatedProvider",
        "EmulatedTurn",
        "FaultInjector",
        "FaultProfile",
        "FunctionModel",
        "ProviderServer",
        "RecordedRequest",
        "Reply",
        "ScriptError",
        "ScriptedCall",
        "ScriptedModel",
        "ScriptedResponse",
        "ServerStats",
        "Thought",
        "call",
        "corrupted",
        "load_recording",
        "rate_limited",
        "reset_midway",
        "server_failed",
        "slowed",
    ],
    "agentloop.temporal": [
        "ActivityOptions",
        "AgentChanged",
        "DurableRun",
        "DurableRunFailed",
        "TemporalAgent",
        "TemporalUnavailable",
        "connect",
        "default_tool_retry",
        "replayer",
        "worker",
    ],
    "agentloop.durable_web": ["DurableLog", "TemporalHub", "create_app", "serve"],
    "agentloop.tools": [
        "Activity",
        "Tool",
        "ToolContext",
        "ToolLimits",
        "Toolkit",
        "Toolset",
        "activity",
        "checked_args_model",
        "default_thread_limiter",
        "default_tool_limiter",
        "tool",
    ],
}


def _ruff_order(name: str) -> tuple[int, str]:
    """The order ruff keeps ``__all__`` in (RUF022): CONSTANTS, then Classes, then functions."""
    return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)


@pytest.mark.parametrize("name", sorted(PUBLIC_API))
def test_all_is_sorted_and_complete(name: str) -> None:
    """__all__ is sorted and names every public attribute, and only those."""
    module = importlib.import_module(name)
    names = module.__all__
    assert names == sorted(names, key=_ruff_order)
    public = {
        n
        for n, v in vars(module).items()
        if not n.startswith("_") and getattr(v, "__module__", "").startswith("agentloop")
    }
    assert set(names) >= public
    for name in names:
        assert hasattr(module, name)


@pytest.mark.parametrize("name", sorted(PUBLIC_API))
def test_all_is_pinned(name: str) -> None:
    """Each public package exports exactly the names above: adding, renaming or removing one
    is a deliberate change (made here and in the CHANGELOG), never a side effect."""
    assert importlib.import_module(name).__all__ == PUBLIC_API[name]


def test_errors_show_their_public_path() -> None:
    """Tracebacks name agentloop.ModelError, not a private module."""
    assert agentloop.ModelError.__module__ == "agentloop"


def test_the_generic_classes_can_be_subscripted_and_called() -> None:
    """``Agent[Deps, Output](...)`` and the like make instances (on Python 3.11 and 3.12 too,
    where a frozen slotted dataclass used to raise TypeError there)."""
    from agentloop.testing import ScriptedModel

    agent = agentloop.Agent[int, str](ScriptedModel(["hi"]), deps_type=int)
    assert agent.run_sync("q", deps=1).unwrap() == "hi"
    result = agentloop.RunResult[int](run_id="r", agent="a", branch="a", output=3)
    assert result.unwrap() == 3
    request = agentloop.ModelRequest[int](messages=())
    assert request.replace(stop=("x",)).stop == ("x",)
    assert agentloop.ToolContext[int] is not None and agentloop.Tool[[int], int] is not None


def test_import_does_not_load_provider_sdks() -> None:
    """`import agentloop` imports neither openai nor anthropic."""
    code = "import sys, agentloop, agentloop.models; print('openai' in sys.modules, 'anthropic' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"


@pytest.mark.slow
def test_import_leaves_heavy_dependencies_for_first_use() -> None:
    """`import agentloop` loads neither jinja2, tenacity nor pydantic: templates, retries and
    schemas import them when first used (import time stays well under 0.3 s)."""
    code = (
        "import sys, agentloop; "
        "print([m for m in ('jinja2', 'tenacity', 'pydantic') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.slow
def test_no_assert_decides_control_flow_in_the_package() -> None:
    """``python -O`` strips asserts: the package checks explicitly instead."""
    import ast
    from pathlib import Path

    import agentloop

    root = Path(agentloop.__file__).parent
    found = [
        f"{path.relative_to(root)}:{node.lineno}"
        for path in sorted(root.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text("utf-8")))
        if isinstance(node, ast.Assert)
    ]
    assert found == []
