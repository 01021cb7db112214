"""Tools from MCP servers: ``MCPStdioServer`` (a subprocess) and ``MCPHttpServer`` (a URL).

Either is a ``Toolset``: give it to an agent as one of its tools. Its resources and prompts
are read with ``list_resources`` / ``read_resource`` and ``list_prompts`` / ``get_prompt``;
its sampling requests and elicitations are answered by ``sampling=`` and ``elicitation=``. Enter it yourself
(``async with server:``) to share one connection between runs, or let each run connect it for
its own duration. Needs the ``mcp`` extra (``pip install 'agentloop-runtime[mcp]'``): importing this
module does not import the SDK, making a server does.
"""

from __future__ import annotations

from ._callbacks import Elicitor as Elicitor
from ._callbacks import MCPElicitation as MCPElicitation
from ._callbacks import MCPElicitationReply as MCPElicitationReply
from ._callbacks import MCPSamplingReply as MCPSamplingReply
from ._callbacks import MCPSamplingRequest as MCPSamplingRequest
from ._callbacks import Sampler as Sampler
from ._resources import MCPPrompt as MCPPrompt
from ._resources import MCPPromptArgument as MCPPromptArgument
from ._resources import MCPPromptMessages as MCPPromptMessages
from ._resources import MCPResource as MCPResource
from ._resources import MCPResourceContents as MCPResourceContents
from ._resources import MCPResourceTemplate as MCPResourceTemplate
from ._server import DEFAULT_TIMEOUT as DEFAULT_TIMEOUT
from ._server import DEFAULT_TOOL_TIMEOUT as DEFAULT_TOOL_TIMEOUT
from ._server import MCPHttpServer as MCPHttpServer
from ._server import MCPServer as MCPServer
from ._server import MCPServerError as MCPServerError
from ._server import MCPStdioServer as MCPStdioServer

__all__ = [
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
]

MCPServerError.__module__ = __name__  # tracebacks show the public path
for _value in (
    MCPElicitation,
    MCPElicitationReply,
    MCPSamplingReply,
    MCPSamplingRequest,
    MCPPrompt,
    MCPPromptArgument,
    MCPPromptMessages,
    MCPResource,
    MCPResourceContents,
    MCPResourceTemplate,
):
    _value.__module__ = __name__
del _value
