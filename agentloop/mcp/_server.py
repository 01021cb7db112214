"""MCP servers as toolsets: connect, list and call, for the caller's block or for one run.

A connection lives in a task of its own (the SDK's client keeps task groups open for as long as
it is connected): connecting is bounded by ``timeout``, the caller's block or the run never
runs inside the SDK's task groups, and a connection that fails after it started only makes its
calls fail — it never raises into the caller's task group.
"""

from __future__ import annotations

import importlib
import logging
import sys
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, Awaitable, Callable, Collection, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from os import PathLike
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self, TextIO, TypeVar
from urllib.parse import urlsplit, urlunsplit

import anyio
from anyio.abc import TaskStatus

from .. import AgentLoopError, ToolError, UserError
from ..tools import Tool, ToolContext
from . import _convert
from ._callbacks import (
    Elicitor,
    Sampler,
    approver_elicitor,
    elicitation_callback,
    sampling_callback,
)
from ._resources import (
    MCPPrompt,
    MCPPromptMessages,
    MCPResource,
    MCPResourceContents,
    MCPResourceTemplate,
    contents,
    prompt_messages,
    prompts,
    resources,
    templates,
)

if TYPE_CHECKING:
    from mcp import Client

    from .. import RunContext

logger = logging.getLogger("agentloop.mcp")

DEFAULT_TIMEOUT = 30.0
DEFAULT_TOOL_TIMEOUT = 300.0
_MAX_PAGES = 100
_INSTALL = "pip install 'agentloop-runtime[mcp]'"
_SCRATCH_KEY = "connection"
_T = TypeVar("_T")


class MCPServerError(AgentLoopError):
    """An MCP server could not be started or reached, did not answer in time, refused to list
    its tools, or its connection closed."""


def _import_sdk() -> None:
    """Import the SDK now (about a second, once) rather than on the event loop when the first
    connection opens, and say what to install when it is missing."""
    try:
        for module in ("mcp", "mcp.client.stdio", "mcp.client.streamable_http"):
            importlib.import_module(module)  # the package first: it may be missing
    except ImportError as exc:
        raise UserError(f"MCP servers need the mcp package: {_INSTALL} ({exc})") from exc


class MCPServer(ABC):
    """The tools of one MCP server, as a ``Toolset``: use ``MCPStdioServer`` or
    ``MCPHttpServer``.

    Two lifetimes. ``async with server:`` connects once, for the block: every run of every
    agent given the server shares that session, concurrent runs included. A server given to an
    agent without being entered connects at the start of each run and closes when the run
    ends; concurrent runs each get their own connection (a process each, for stdio).

    The tools are listed once per connection, and again after the server says they changed
    (``notifications/tools/list_changed``): a run's next model call sees the new list.
    ``allow`` and ``deny`` filter them by the
    server's names; ``prefix`` is joined to each name with ``_`` (``prefix="fs"``:
    ``fs_read_file``) so that two servers' tools do not collide. A server name that providers
    would refuse is made safe: characters outside ``[A-Za-z0-9_-]`` become ``_`` and a name
    that is too long (over 64) or that then collides is cut and given a short hash.

    ``timeout`` bounds connecting, listing and closing; ``tool_timeout`` each tool call (a slow
    call is a ``timeout`` error result). ``name`` labels the server in errors (by default its
    command and script, or its URL without credentials). A server that dies makes its calls in flight error
    results and every later call fails with an error saying so; a run that starts with a
    shared connection that has closed fails with ``MCPServerError``.

    Args:
        name: Labels the server in errors.
        prefix: Joined to each tool's name with ``_``.
        allow: Only these of the server's tools (by the server's names).
        deny: None of these.
        timeout: Seconds for connecting, listing and closing.
        tool_timeout: Seconds for one tool call.
        sampling: Answers the server's sampling requests (``sampling/createMessage``);
            without it the client does not offer sampling.
        elicitation: Answers the server's elicitations (``elicitation/create``), or
            ``"approver"``: they are asked of the approver of the run whose call the server
            is in (``Agent(approver=...)``), or, with none, become a decision the run waits
            on (``PendingCall.kind == "elicitation"``; see ``approver_elicitor``). Without it the client
            does not offer elicitation.
    """

    def __init__(
        self,
        *,
        name: str,
        prefix: str | None,
        allow: Collection[str] | None,
        deny: Collection[str] | None,
        timeout: float,
        tool_timeout: float,
        sampling: Sampler | None = None,
        elicitation: Elicitor | Literal["approver"] | None = None,
    ) -> None:
        _import_sdk()
        for label, value in (("timeout", timeout), ("tool_timeout", tool_timeout)):
            if not value > 0:
                raise UserError(f"MCP server {name!r}: {label} must be positive, not {value!r}")
        self.name = name
        self.prefix = _convert.check_prefix(prefix)
        self.allow = _convert.check_names("allow", allow)
        self.deny = _convert.check_names("deny", deny)
        self.timeout = float(timeout)
        self.tool_timeout = float(tool_timeout)
        self.sampling = sampling
        if elicitation is not None and not callable(elicitation) and elicitation != "approver":
            raise UserError(
                f"MCP server {name!r}: elicitation must be a callback or 'approver', not "
                f"{elicitation!r}"
            )
        self.elicitation = elicitation
        self._shared: _Connection | None = None
        self._exit: AbstractAsyncContextManager[_Connection] | None = None
        self._entered = False

    @abstractmethod
    def _transport(self) -> AbstractAsyncContextManager[Any]:
        """The SDK transport: an async context manager of its read and write streams."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    async def __aenter__(self) -> Self:
        if self._entered:
            raise UserError(f"MCP server {self.name!r} is already connected; enter it once")
        self._entered = True
        scope = self._connect()
        try:
            self._shared = await scope.__aenter__()
        except BaseException:
            self._entered = False
            raise
        self._exit = scope
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        scope, self._exit, self._shared = self._exit, None, None
        self._entered = False
        if scope is not None:
            await scope.__aexit__(exc_type, exc, tb)

    def run_scope(self, ctx: RunContext) -> AbstractAsyncContextManager[None]:
        """Connect for this run, unless the caller holds a connection (``async with``).

        Args:
            ctx: The run that starts.
        """
        if self._shared is not None:
            return nullcontext()
        return self._run_connection(ctx)

    @asynccontextmanager
    async def _run_connection(self, ctx: RunContext) -> AsyncGenerator[None, None]:
        scratch = ctx.scratch(self)
        async with self._connect() as connection:
            scratch[_SCRATCH_KEY] = connection
            try:
                yield
            finally:
                scratch.pop(_SCRATCH_KEY, None)

    async def list_tools(self, ctx: RunContext | None = None) -> Sequence[Tool]:
        """The server's tools as agentloop tools (listed once per connection, and again once
        the server said they changed).

        Without ``ctx`` (outside a run) the server must be entered with ``async with``.

        Args:
            ctx: The run that lists them, or ``None`` outside a run.
        """
        return await self._connection(ctx).tools()

    async def list_resources(self, ctx: RunContext | None = None) -> list[MCPResource]:
        """The server's resources (``resources/list``, every page).

        Args:
            ctx: The run that asks (a tool's ``ToolContext.run``), or ``None`` outside a
                run (the server entered with ``async with``).
        """
        listed = await self._connection(ctx).pages("resources", "resources/list")
        return resources(listed)

    async def list_resource_templates(
        self, ctx: RunContext | None = None
    ) -> list[MCPResourceTemplate]:
        """The server's resource templates (``resources/templates/list``, every page).

        Args:
            ctx: As for ``list_resources``.
        """
        listed = await self._connection(ctx).pages("resource_templates", "resources/templates/list")
        return templates(listed)

    async def read_resource(
        self, uri: str, ctx: RunContext | None = None
    ) -> list[MCPResourceContents]:
        """Read the resource at ``uri`` (``resources/read``): its parts, text or bytes.

        Args:
            uri: The resource's URI (listed, or a template's filled in).
            ctx: As for ``list_resources``.
        """
        connection = self._connection(ctx)
        result = await connection.request(
            f"read the resource {uri!r}", lambda c: c.read_resource(uri)
        )
        return contents(result)

    async def list_prompts(self, ctx: RunContext | None = None) -> list[MCPPrompt]:
        """The server's prompts (``prompts/list``, every page).

        Args:
            ctx: As for ``list_resources``.
        """
        listed = await self._connection(ctx).pages("prompts", "prompts/list")
        return prompts(listed)

    async def get_prompt(
        self,
        name: str,
        arguments: Mapping[str, str] | None = None,
        ctx: RunContext | None = None,
    ) -> MCPPromptMessages:
        """The prompt ``name`` rendered by the server with ``arguments`` (``prompts/get``), as
        agentloop messages.

        Args:
            name: The prompt's name.
            arguments: Its arguments (strings, as MCP has them).
            ctx: As for ``list_resources``.
        """
        args = dict(arguments) if arguments is not None else None
        connection = self._connection(ctx)
        result = await connection.request(
            f"render the prompt {name!r}", lambda c: c.get_prompt(name, args)
        )
        return prompt_messages(result)

    def tools_revision(self, ctx: RunContext | None = None) -> int:
        """How many times the server has said its tools changed on this connection: a run
        lists them again before its next model call when this moves (``Toolset``).

        Args:
            ctx: The run that asks, or ``None`` outside a run.
        """
        connection = self._current(ctx)
        return connection.revision if connection is not None else 0

    def _current(self, ctx: RunContext | None) -> _Connection | None:
        connection = ctx.scratch(self).get(_SCRATCH_KEY) if ctx is not None else None
        return connection if connection is not None else self._shared

    def _connection(self, ctx: RunContext | None) -> _Connection:
        connection = self._current(ctx)
        if connection is None:
            raise UserError(
                f"MCP server {self.name!r} is not connected: enter it (`async with server:`) or "
                "give it to an Agent, whose runs connect it"
            )
        return connection

    @asynccontextmanager
    async def _connect(self) -> AsyncGenerator[_Connection, None]:
        connection = _Connection(self)
        failure: Exception | None = None
        async with anyio.create_task_group() as tg:
            try:
                with anyio.fail_after(self.timeout):
                    await tg.start(connection.serve)
            except TimeoutError:
                failure = MCPServerError(
                    f"MCP server {self.name!r} did not finish connecting within {self.timeout:g}s"
                )
            except Exception as exc:
                failure = exc
            if failure is None:
                # An error of the block leaves bare after the task group, not in a group.
                try:
                    yield connection
                except Exception as exc:
                    failure = exc
                finally:
                    connection.stop()
        if failure is not None:
            raise failure


class MCPStdioServer(MCPServer):
    """An MCP server run as a subprocess, spoken to over its stdin and stdout.

    ``env`` is added to the few variables the SDK passes on (``HOME``, ``PATH``, ``USER``…),
    not to the whole environment. The server's stderr goes to ``stderr`` (ours by default).
    Leaving the connection closes the server's stdin, then terminates it if it does not exit.
    The other options are ``MCPServer``'s.

    Args:
        command: The program to run.
        args: Its arguments.
        env: Variables added to its environment.
        cwd: Its working directory.
        stderr: Where its stderr goes (default: ours).
        name: As for ``MCPServer`` (default: the command and script).
        prefix: As for ``MCPServer``.
        allow: As for ``MCPServer``.
        deny: As for ``MCPServer``.
        timeout: As for ``MCPServer``.
        tool_timeout: As for ``MCPServer``.
        sampling: As for ``MCPServer``.
        elicitation: As for ``MCPServer``.
    """

    def __init__(
        self,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | PathLike[str] | None = None,
        stderr: TextIO | None = None,
        name: str | None = None,
        prefix: str | None = None,
        allow: Collection[str] | None = None,
        deny: Collection[str] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        tool_timeout: float = DEFAULT_TOOL_TIMEOUT,
        sampling: Sampler | None = None,
        elicitation: Elicitor | Literal["approver"] | None = None,
    ) -> None:
        if isinstance(args, str):
            raise UserError(f"MCP server args must be a list of strings, not {args!r}")
        self.command = command
        self.args = list(args)
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.stderr = stderr
        super().__init__(
            name=name or _display_command(command, self.args),
            prefix=prefix,
            allow=allow,
            deny=deny,
            timeout=timeout,
            tool_timeout=tool_timeout,
            sampling=sampling,
            elicitation=elicitation,
        )

    def _transport(self) -> AbstractAsyncContextManager[Any]:
        from mcp.client.stdio import StdioServerParameters, stdio_client

        cwd = Path(self.cwd) if self.cwd is not None else None
        params = StdioServerParameters(command=self.command, args=self.args, env=self.env, cwd=cwd)
        return stdio_client(params, errlog=self.stderr or sys.stderr)


class MCPHttpServer(MCPServer):
    """An MCP server at a streamable-HTTP URL (``https://…/mcp``), with ``headers`` on every
    request (an ``Authorization`` header, say). The other options are ``MCPServer``'s.

    Args:
        url: The server's URL (``http://`` or ``https://``).
        headers: Headers sent with every request.
        name: As for ``MCPServer`` (default: the URL without credentials).
        prefix: As for ``MCPServer``.
        allow: As for ``MCPServer``.
        deny: As for ``MCPServer``.
        timeout: As for ``MCPServer``.
        tool_timeout: As for ``MCPServer``.
        sampling: As for ``MCPServer``.
        elicitation: As for ``MCPServer``.
    """

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        name: str | None = None,
        prefix: str | None = None,
        allow: Collection[str] | None = None,
        deny: Collection[str] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        tool_timeout: float = DEFAULT_TOOL_TIMEOUT,
        sampling: Sampler | None = None,
        elicitation: Elicitor | Literal["approver"] | None = None,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise UserError(f"MCP server URL must start with http:// or https://, not {url!r}")
        self.url = url
        self.headers = dict(headers or {})
        super().__init__(
            name=name or _display_url(url),
            prefix=prefix,
            allow=allow,
            deny=deny,
            timeout=timeout,
            tool_timeout=tool_timeout,
            sampling=sampling,
            elicitation=elicitation,
        )

    @asynccontextmanager
    async def _transport(self) -> AsyncGenerator[Any, None]:
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        # Reads are not timed here: a call's response streams for as long as the tool runs,
        # and every request is bounded above (``timeout``, ``tool_timeout``).
        timeout = httpx2.Timeout(self.timeout, read=None)
        async with (
            httpx2.AsyncClient(headers=self.headers, timeout=timeout) as http,
            streamable_http_client(self.url, http_client=http) as streams,
        ):
            yield streams


class _Connection:
    """One session with a server: its task, its tool list, and why it closed (if it did)."""

    def __init__(self, server: MCPServer) -> None:
        self.server = server
        self._stopped = anyio.Event()
        self._client: Client | None = None
        self._tools: tuple[Tool, ...] | None = None
        self._listing = anyio.Lock()
        self.revision = 0  # counts the server's notifications/tools/list_changed
        self._calls: list[ToolContext] = []  # the calls in flight (an elicitation's run)
        self.closed: str | None = None  # why calls fail, once the connection has closed

    def stop(self) -> None:
        self._stopped.set()

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Connect, report started, and hold the session until ``stop()``."""
        from mcp import Client
        from mcp.types import Implementation

        from .. import __version__

        server = self.server
        started = False
        try:
            with anyio.CancelScope() as scope:
                client = Client(
                    _watched(server._transport(), self._ended),  # pyright: ignore[reportPrivateUsage]  # the subclasses' hook
                    cache=None,  # we keep the tool list ourselves, per connection
                    message_handler=self._notified,
                    sampling_callback=(
                        sampling_callback(server.name, server.sampling)
                        if server.sampling is not None
                        else None
                    ),
                    elicitation_callback=self._elicitation_callback(),
                    client_info=Implementation(name="agentloop", version=__version__),
                )
                async with client:
                    self._client = client
                    started = True
                    task_status.started()
                    try:
                        await self._stopped.wait()
                    finally:
                        # Also when a failing transport cancels us: later calls learn that the
                        # server is gone now, not once the SDK has torn the connection down.
                        self._ended()
                    scope.deadline = anyio.current_time() + server.timeout  # bounds the close
        except Exception as exc:
            if not started:
                raise MCPServerError(
                    f"could not connect to MCP server {server.name!r}: {_describe(exc)}"
                ) from exc
            logger.warning("MCP server %r: the connection failed: %s", server.name, _describe(exc))
        finally:
            self._ended()

    def _elicitation_callback(self) -> Any:
        wanted = self.server.elicitation
        if wanted is None:
            return None
        if isinstance(wanted, str):  # "approver"
            return elicitation_callback(
                self.server.name, approver_elicitor(self.server.name, lambda: tuple(self._calls))
            )
        return elicitation_callback(self.server.name, wanted)

    async def _notified(self, message: Any) -> None:
        """A server notification: a changed tool list is listed again when next asked for."""
        from mcp.types import ToolListChangedNotification

        if isinstance(message, ToolListChangedNotification):
            self.revision += 1
            self._tools = None
            logger.debug("MCP server %r: its tools changed", self.server.name)

    def _ended(self) -> str:
        """Record that the session is over (the transport reached its end, or we left it)."""
        if self.closed is None:
            self.closed = (
                f"MCP server {self.server.name!r} is disconnected (the server exited or closed "
                "the connection); its tools are unavailable until it is connected again"
            )
        return self.closed

    def _lost(self, why: str) -> str:
        """The error for a request that failed with the connection closed: the session is
        over, or (over HTTP) only that request's response stream broke."""
        if self.closed is not None:
            return self.closed
        return f"MCP server {self.server.name!r} lost the connection before answering ({why})"

    def _live(self) -> Client:
        if self.closed is not None or self._client is None:
            raise MCPServerError(self._ended())
        return self._client

    async def tools(self) -> tuple[Tool, ...]:
        tools = self._tools
        if tools is None:
            async with self._listing:
                tools = self._tools
                if tools is None:
                    revision = self.revision
                    tools = self._build(await self._list())
                    if self.revision == revision:  # else it changed meanwhile: list it again
                        self._tools = tools
        elif self.closed is not None:
            raise MCPServerError(self.closed)
        return tools

    async def request(self, what: str, send: Callable[[Client], Awaitable[_T]]) -> _T:
        """One request of the caller's (a resource, a prompt), bounded by ``timeout``; its
        failures as ``MCPServerError`` saying ``what`` failed."""
        from mcp import MCPError
        from mcp.types import CONNECTION_CLOSED

        server = self.server
        client = self._live()
        try:
            with anyio.fail_after(server.timeout):
                return await send(client)
        except TimeoutError:
            raise MCPServerError(
                f"MCP server {server.name!r} did not {what} within {server.timeout:g}s"
            ) from None
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:
                raise MCPServerError(self._lost(exc.message)) from None
            raise MCPServerError(
                f"MCP server {server.name!r} could not {what}: {exc.message}"
            ) from None

    async def pages(self, field: str, method: str, *, what: str | None = None) -> list[Any]:
        """Every page of a listing (``tools/list``, ``resources/list``…): ``field`` names
        both the client's method (``list_<field>``) and the result's list; ``what`` says what
        failed (default: ``answer <method>``)."""

        async def every_page(client: Client) -> list[Any]:
            listed: list[Any] = []
            cursor: str | None = None
            for _ in range(_MAX_PAGES):
                page = await getattr(client, f"list_{field}")(cursor=cursor)
                listed.extend(getattr(page, field))
                cursor = page.next_cursor
                if cursor is None:
                    return listed
            raise MCPServerError(
                f"MCP server {self.server.name!r} lists more than {_MAX_PAGES} pages ({method})"
            )

        return await self.request(what or f"answer {method}", every_page)

    async def _list(self) -> list[Any]:
        return await self.pages("tools", "tools/list", what="list its tools")

    def _build(self, listed: Sequence[Any]) -> tuple[Tool, ...]:
        server = self.server
        return _convert.build_tools(
            server=server.name,
            listed=listed,
            prefix=server.prefix,
            allow=server.allow,
            deny=server.deny,
            tool_timeout=server.tool_timeout,
            call=self.call,
        )

    async def call(self, tool: str, arguments: dict[str, Any], context: ToolContext) -> Any:
        """Call ``tool`` on the server; its result as ours, its errors as ``ToolError``. The
        call carries a progress token: the server's ``notifications/progress`` for it become
        ``ActionProgress`` events."""
        from mcp import MCPError
        from mcp.types import CONNECTION_CLOSED

        server = self.server
        if self.closed is not None or self._client is None:
            raise ToolError(self._ended())
        self._calls.append(context)
        try:
            result = await self._client.call_tool(
                tool, arguments, progress_callback=context.report_progress
            )
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:
                raise ToolError(self._lost(exc.message)) from None
            raise ToolError(f"MCP server {server.name!r}: {exc.message}") from None
        finally:
            self._calls.remove(context)
        return _convert.output(server.name, tool, result)


@asynccontextmanager
async def _watched(
    transport: AbstractAsyncContextManager[Any], on_end: Callable[[], object]
) -> AsyncGenerator[tuple[Any, Any], None]:
    """The transport, with ``on_end`` called when its read stream ends."""
    async with transport as (read, write):
        yield _EndWatch(read, on_end), write


class _EndWatch:
    """A transport's read stream that reports its end: the server exited (stdio) or the
    transport gave up. Calls that fail afterwards can then say the server is gone."""

    _ENDS = (StopAsyncIteration, anyio.EndOfStream, anyio.ClosedResourceError)

    def __init__(self, stream: Any, on_end: Callable[[], object]) -> None:
        self._stream = stream
        self._on_end = on_end

    @property
    def last_context(self) -> Any:  # the SDK reads it when the transport provides it
        return getattr(self._stream, "last_context", None)

    async def receive(self) -> Any:
        try:
            return await self._stream.receive()
        except self._ENDS:
            self._on_end()
            raise

    def __aiter__(self) -> _EndWatch:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self._stream.__anext__()
        except self._ENDS:
            self._on_end()
            raise

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def __aenter__(self) -> _EndWatch:
        await self._stream.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        result: bool | None = await self._stream.__aexit__(*exc_info)
        return result


def _display_command(command: str, args: Sequence[str]) -> str:
    """The command and its first argument that is not an option (``node server.js``): it names
    the server in errors, without the rest of the arguments (tokens are passed that way too)."""
    first = next((a for a in args if not a.startswith("-")), None)
    words = [Path(command).name] + ([Path(first).name if "/" in first else first] if first else [])
    return " ".join(words)


def _display_url(url: str) -> str:
    """The URL without credentials, query or fragment: it names the server in errors."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", ""))


def _describe(exc: BaseException) -> str:
    """An error in one line, the leaves of an exception group joined."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    if isinstance(exc, MCPServerError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
