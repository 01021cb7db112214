"""agentloop: an async-native agent runtime.

A caller gives an ``Agent`` an input and tools; the runtime asks a model, parses the reply into
thought, actions and answer while it streams, runs the actions concurrently as soon as each is
sealed, feeds the results back, and loops until the model answers.

Layers, bottom to top (``tests/test_layering.py`` checks them on the import graph, counting
imports under ``TYPE_CHECKING`` and inside functions). A module imports only from its own layer
and those below, and no modules import each other in a cycle.

0. ``_anyio_internals``: anyio's asyncio task states, probed once, for the hot path.
1. Leaves: ``_errors``, ``_checks`` (settings' fields checked when made), ``_time``,
   ``_version``, ``_context`` (``StateView``, a run's state), and ``_generic`` (subscripted
   generic dataclasses made callable).
2. ``models``: the values that cross the model seam (``models._types``, with the ``RunContext``
   protocol that a ``ModelRequest`` carries) and the drivers.
3. ``sessions``: the stores.
4. The values of a run: ``_steps``, ``_decisions`` (approvals and external results),
   ``_events``, ``_final``, ``_cost``, ``_retry``,
   ``_middleware``, ``_instrument`` (whether a run is traced; the spans are in ``_tracing``),
   ``_usage_limits``, ``_guardrails`` and ``_handoff`` (the controls an agent is configured
   with), ``_inputs`` (a run's input of text, images and files), ``_sealed`` (a resume state
   signed and single-use, for a client to hold).
5. ``tools``: definitions only (``Tool``, schemas, ``Toolset``, ``ToolContext``, ``ToolLimits``).
6. The engine, each module on those before it: ``_react_parser``, ``_prompt``, ``_window`` (the
   context window), ``_threads``, ``_channel`` (a stream's bounded event channel),
   ``_actions`` (the action executor), ``_session_run`` (the session lifecycle, ``SessionScope``),
   ``_waiting`` (calls that wait for a decision, and a waiting run's resume state),
   ``_plan`` (what a run reads of its agent, ``RunnableAgent``, and its frozen ``Plan``),
   ``_run``, ``_controls`` (usage limits, guardrails, validators and handoffs on the
   engine's seams),
   ``_tracing``, ``_turn``, ``_loop``, ``_agent``.
7. This module, the public facade.
8. Seam users: ``goals``, ``mcp``, ``testing``, ``web``, ``evals``. They import public seams
   only: the packages ``agentloop``, ``agentloop.models`` (with ``models.openai`` and
   ``models.anthropic``), ``agentloop.tools``, ``agentloop.sessions``, and each other's.
9. ``temporal``: durable runs, a second driver of the engine. It runs the engine's loop inside a
   Temporal workflow, so it builds on the engine's private modules too.
10. ``durable_web``: the web front on Temporal (``web``'s app with its runs as workflows).
11. ``cli``: the command line, a seam user of every public package (``temporal`` and
    ``durable_web`` too, for ``agentloop serve --temporal`` and ``agentloop worker``).

The engine's seams: the engine reads an agent through ``RunnableAgent`` (``Agent`` implements
it); middleware and tools see a run through ``RunContext`` (the engine's ``RunView`` implements
it); ``ModelResponse.discard`` reports to an ``AttemptLog`` (the engine's
run); a sub-agent tool finds its parent run with ``_run.run_of`` and returns a ``SubrunOutput``;
the executor marks an abandoned sync tool with ``tools._context.abandon``; a ``Launch`` with
``effects`` (``_run.Effects``) performs its tool calls through them (a durable run's
activities), and ``_time.use_entropy`` replaces the engine's randomness and ids (a workflow's).
"""

from __future__ import annotations

import logging

from ._agent import Agent as Agent
from ._agent import RunStream as RunStream
from ._context import StateView as StateView
from ._cost import Cost as Cost
from ._cost import ModelPrice as ModelPrice
from ._cost import PriceTable as PriceTable
from ._decisions import Approve as Approve
from ._decisions import Approver as Approver
from ._decisions import Decision as Decision
from ._decisions import Deny as Deny
from ._decisions import Edit as Edit
from ._decisions import ExternalResult as ExternalResult
from ._errors import AgentLoopError as AgentLoopError
from ._errors import AgentLoopWarning as AgentLoopWarning
from ._errors import ContentFiltered as ContentFiltered
from ._errors import ContextWindowExceeded as ContextWindowExceeded
from ._errors import DecisionsPending as DecisionsPending
from ._errors import GuardrailTripped as GuardrailTripped
from ._errors import MaxStepsExceeded as MaxStepsExceeded
from ._errors import ModelAuthError as ModelAuthError
from ._errors import ModelBadRequest as ModelBadRequest
from ._errors import ModelConnectionError as ModelConnectionError
from ._errors import ModelError as ModelError
from ._errors import ModelHTTPError as ModelHTTPError
from ._errors import ModelNotFound as ModelNotFound
from ._errors import ModelOverloaded as ModelOverloaded
from ._errors import ModelRateLimited as ModelRateLimited
from ._errors import ModelRefused as ModelRefused
from ._errors import ModelRetry as ModelRetry
from ._errors import ModelServerError as ModelServerError
from ._errors import ModelStreamError as ModelStreamError
from ._errors import ModelTimeout as ModelTimeout
from ._errors import NothingToResume as NothingToResume
from ._errors import OutputInvalid as OutputInvalid
from ._errors import PayloadTooLarge as PayloadTooLarge
from ._errors import ReplyTooLarge as ReplyTooLarge
from ._errors import ReplyTruncated as ReplyTruncated
from ._errors import RunCancelled as RunCancelled
from ._errors import RunDeadlineExceeded as RunDeadlineExceeded
from ._errors import RunError as RunError
from ._errors import SessionBusy as SessionBusy
from ._errors import SessionConflict as SessionConflict
from ._errors import SessionError as SessionError
from ._errors import SessionNotFound as SessionNotFound
from ._errors import SessionStoreError as SessionStoreError
from ._errors import ToolError as ToolError
from ._errors import ToolRetriesExceeded as ToolRetriesExceeded
from ._errors import UsageLimitExceeded as UsageLimitExceeded
from ._errors import UserError as UserError
from ._events import ActionArgsDelta as ActionArgsDelta
from ._events import ActionAwaiting as ActionAwaiting
from ._events import ActionDecided as ActionDecided
from ._events import ActionFinished as ActionFinished
from ._events import ActionProgress as ActionProgress
from ._events import ActionStarted as ActionStarted
from ._events import AnswerDelta as AnswerDelta
from ._events import AttemptDiscarded as AttemptDiscarded
from ._events import ContextTrimmed as ContextTrimmed
from ._events import Event as Event
from ._events import ModelCallFinished as ModelCallFinished
from ._events import ModelCallStarted as ModelCallStarted
from ._events import PartialOutput as PartialOutput
from ._events import ProviderEvent as ProviderEvent
from ._events import RunFailed as RunFailed
from ._events import RunFinished as RunFinished
from ._events import RunStarted as RunStarted
from ._events import RunWaiting as RunWaiting
from ._events import StepFinished as StepFinished
from ._events import TextDelta as TextDelta
from ._events import ThoughtDelta as ThoughtDelta
from ._events import event_from_json as event_from_json
from ._guardrails import InputGuardrail as InputGuardrail
from ._guardrails import OutputGuardrail as OutputGuardrail
from ._guardrails import OutputValidator as OutputValidator
from ._guardrails import ToolGuardrail as ToolGuardrail
from ._guardrails import Tripwire as Tripwire
from ._handoff import Handoff as Handoff
from ._instrument import Instrumentation as Instrumentation
from ._middleware import ModelCall as ModelCall
from ._middleware import ModelMiddleware as ModelMiddleware
from ._middleware import ToolCall as ToolCall
from ._middleware import ToolCallNext as ToolCallNext
from ._middleware import ToolMiddleware as ToolMiddleware
from ._prompt import Plain as Plain
from ._prompt import Ruleset as Ruleset
from ._retry import RetryPolicy as RetryPolicy
from ._sealed import NonceStore as NonceStore
from ._sealed import ResumeSealer as ResumeSealer
from ._sealed import UsedNonces as UsedNonces
from ._session_run import Memory as Memory
from ._steps import Action as Action
from ._steps import ActionResult as ActionResult
from ._steps import PendingCall as PendingCall
from ._steps import RunErrorInfo as RunErrorInfo
from ._steps import RunResult as RunResult
from ._steps import Step as Step
from ._usage_limits import UsageLimits as UsageLimits
from ._version import __version__ as __version__
from ._window import ContextWindow as ContextWindow
from ._window import Summarizer as Summarizer
from ._window import summarize_with as summarize_with
from .models import FallbackModel as FallbackModel
from .models import FilePart as FilePart
from .models import ImagePart as ImagePart
from .models import Message as Message
from .models import Model as Model
from .models import ModelRequest as ModelRequest
from .models import ModelResponse as ModelResponse
from .models import ModelSettings as ModelSettings
from .models import Usage as Usage
from .models._types import RunContext as RunContext
from .tools import Tool as Tool
from .tools import ToolContext as ToolContext
from .tools import Toolkit as Toolkit
from .tools import ToolLimits as ToolLimits
from .tools import Toolset as Toolset
from .tools import activity as activity
from .tools import tool as tool

# Quiet unless the application configures logging (the library convention).
logging.getLogger("agentloop").addHandler(logging.NullHandler())


__all__ = [
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
]


# Tracebacks show the public path of our errors. (Only exceptions: pydantic resolves the
# annotations of the dataclasses through their real modules.)
def _show_errors_here() -> None:
    for name in __all__:
        obj = globals()[name]
        if isinstance(obj, type) and issubclass(obj, BaseException | AgentLoopWarning):
            obj.__module__ = "agentloop"


_show_errors_here()
del _show_errors_here
