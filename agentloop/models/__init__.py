"""Model drivers and the values they exchange with the runtime.

Provider drivers live in ``agentloop.models.openai`` and ``agentloop.models.anthropic`` and are
imported only when used (``import agentloop`` imports no provider SDK).
"""

from __future__ import annotations

from ._assemble import ResponseBuilder as ResponseBuilder
from ._assemble import collect as collect
from ._base import Model as Model
from ._fallback import FallbackModel as FallbackModel
from ._registry import register_provider as register_provider
from ._registry import resolve_model as resolve_model
from ._types import IMAGE_TYPES as IMAGE_TYPES
from ._types import CitationDelta as CitationDelta
from ._types import FilePart as FilePart
from ._types import FinishDelta as FinishDelta
from ._types import FinishReason as FinishReason
from ._types import ImagePart as ImagePart
from ._types import InputPart as InputPart
from ._types import Message as Message
from ._types import ModelDelta as ModelDelta
from ._types import ModelProfile as ModelProfile
from ._types import ModelRequest as ModelRequest
from ._types import ModelResponse as ModelResponse
from ._types import ModelSettings as ModelSettings
from ._types import ModelStream as ModelStream
from ._types import OutputSchema as OutputSchema
from ._types import Part as Part
from ._types import ProviderBlock as ProviderBlock
from ._types import ProviderPart as ProviderPart
from ._types import TextPart as TextPart
from ._types import TextPiece as TextPiece
from ._types import ThoughtDone as ThoughtDone
from ._types import ThoughtPart as ThoughtPart
from ._types import ThoughtPiece as ThoughtPiece
from ._types import ToolCallArgsDelta as ToolCallArgsDelta
from ._types import ToolCallEnd as ToolCallEnd
from ._types import ToolCallPart as ToolCallPart
from ._types import ToolCallStart as ToolCallStart
from ._types import ToolMode as ToolMode
from ._types import ToolResultPart as ToolResultPart
from ._types import ToolSpec as ToolSpec
from ._types import Usage as Usage
from ._types import UsageDelta as UsageDelta
from ._types import wire_tool_name as wire_tool_name

__all__ = [
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
]
