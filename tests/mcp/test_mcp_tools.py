"""MCP tools without a server: names, filters, schemas, argument checks, results, and errors
of configuration (a fake ``call`` stands in for the connection)."""

from __future__ import annotations

import base64
import logging
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import pytest

from agentloop import Agent, ToolError, UserError
from agentloop.mcp import MCPHttpServer, MCPStdioServer
from agentloop.mcp._convert import agent_names, build_tools, output
from agentloop.models import ImagePart
from agentloop.testing import Reply, ScriptedModel, call

if TYPE_CHECKING:
    from mcp.types import Tool as MCPTool

# The SDK's types are imported where they are used, not here: importing ``mcp`` costs a second
# or more of CPU, paid by every xdist worker that collects this module, most of which never
# run a test of it.


def _listed(name: str, schema: dict[str, Any] | None = None, **kw: Any) -> MCPTool:
    from mcp.types import Tool

    return Tool(name=name, input_schema=schema or {"type": "object"}, **kw)


def _build(listed: list[MCPTool], calls: list[Any] | None = None, **kw: Any) -> dict[str, Any]:
    async def fake_call(name: str, arguments: dict[str, Any], context: Any) -> Any:
        if calls is not None:
            calls.append((name, arguments))
        return f"called {name}"

    options: dict[str, Any] = {"prefix": None, "allow": None, "deny": None, "tool_timeout": 5.0}
    options.update(kw)
    tools = build_tools(server="s", listed=listed, call=fake_call, **options)
    return {t.name: t for t in tools}


def test_server_names_become_provider_safe_names() -> None:
    """Dots, slashes and '__' are replaced; too long or colliding names get a short hash."""
    long = "x" * 100
    names = agent_names(None, ["files.read", "a__b", "a/b", "a.b", long, "ok-name", "..."])
    assert names["files.read"] == "files_read"
    assert names["ok-name"] == "ok-name"
    assert names["..."] == "tool"
    assert names["a__b"].startswith("a_b_") and names["a/b"].startswith("a_b_")
    assert len({names["a__b"], names["a/b"], names["a.b"]}) == 3  # disambiguated
    assert len(names[long]) == 64 and names[long].startswith("x" * 50)
    assert agent_names(None, [long]) == {long: names[long]}  # stable
    assert agent_names("fs", ["read.file"]) == {"read.file": "fs_read_file"}
    for name in names.values():
        assert "__" not in name and len(name) <= 64


def test_filters_and_prefix(caplog: pytest.LogCaptureFixture) -> None:
    """allow and deny use the server's names; the prefix goes on what is left. A name in a
    filter that the server does not have is logged."""
    listed = [_listed("read"), _listed("write"), _listed("delete")]
    assert set(_build(listed, prefix="fs")) == {"fs_read", "fs_write", "fs_delete"}
    assert set(_build(listed, allow={"read", "write"}, deny={"write"})) == {"read"}
    with caplog.at_level(logging.WARNING, logger="agentloop.mcp"):
        assert set(_build(listed, deny={"wirte"})) == {"read", "write", "delete"}
    assert "no tool named 'wirte'" in caplog.text


def test_the_schema_sent_to_providers_is_cleaned_not_changed() -> None:
    """$schema and titles go; a schema without properties gets empty ones; the rest stays."""
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Args",
        "type": "object",
        "properties": {"title": {"type": "string", "title": "Title"}, "n": {"type": "integer"}},
        "required": ["title"],
        "additionalProperties": False,
    }
    tools = _build([_listed("a", schema, description=" Does A. "), _listed("b", title="B")])
    spec = next(tools["a"].specs())
    assert spec.parameters == {
        "type": "object",
        "properties": {"title": {"type": "string"}, "n": {"type": "integer"}},
        "required": ["title"],
        "additionalProperties": False,
    }
    assert spec.description == "Does A."
    b = next(tools["b"].specs())
    assert b.parameters == {"type": "object", "properties": {}}
    assert b.description == "B"  # the title, when there is no description


def test_a_tool_with_an_invalid_schema_is_left_out(caplog: pytest.LogCaptureFixture) -> None:
    """Providers would refuse the whole request for one bad schema; the others stay."""
    with caplog.at_level(logging.WARNING, logger="agentloop.mcp"):
        tools = _build([_listed("bad", {"type": "object", "properties": 3}), _listed("good")])
    assert set(tools) == {"good"}
    assert "'bad' is left out" in caplog.text


async def test_arguments_are_checked_against_the_servers_schema_and_passed_whole() -> None:
    """What the schema allows reaches the server unchanged (extra keys included); what it
    refuses is an invalid_arguments result naming each problem; null for a field that may not
    be null is dropped, as for our own tools."""
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer"}, "tags": {"type": "array"}},
        "required": ["n"],
    }
    closed = {**schema, "additionalProperties": False}
    calls: list[Any] = []
    tools = _build([_listed("open", schema), _listed("closed", closed)], calls=calls)
    model = ScriptedModel(
        [
            Reply(
                calls=[
                    call("open", {"n": 1, "tags": None, "extra": {"deep": [1, None]}}),
                    call("open", {"n": "one"}),
                    call("closed", {"n": 1, "extra": 2}),
                    call("open", [1, 2]),
                ]
            ),
            "done",
        ]
    )
    result = await Agent(model, tools=list(tools.values())).run("go")
    ok, wrong_type, extra, not_object = result.steps[0].actions
    assert ok.output == "called open"
    assert calls == [("open", {"n": 1, "extra": {"deep": [1, None]}})]
    assert wrong_type.error_kind == "invalid_arguments"
    assert wrong_type.error == "invalid arguments: n: 'one' is not of type 'integer'"
    assert extra.error_kind == "invalid_arguments" and "'extra' was unexpected" in str(extra.error)
    assert not_object.error_kind == "invalid_arguments"


def test_results_map_to_text_structured_values_and_errors() -> None:
    """Text joins with blank lines; structured content wins when the blocks are only its text;
    images, audio and resources are described, never dropped, and images also come back as
    ``ImagePart`` values after the text; isError raises ToolError."""
    from mcp.types import (
        AudioContent,
        BlobResourceContents,
        CallToolResult,
        EmbeddedResource,
        ImageContent,
        ResourceLink,
        TextContent,
        TextResourceContents,
    )

    text = CallToolResult(content=[TextContent(text="one"), TextContent(text="two")])
    assert output("s", "t", text) == "one\n\ntwo"
    structured = CallToolResult(content=[TextContent(text='{"n": 1}')], structured_content={"n": 1})
    assert output("s", "t", structured) == {"n": 1}
    png = "A" * 2400  # 1,800 bytes
    mixed = CallToolResult(
        content=[
            TextContent(text="see:"),
            ImageContent(data=png, mime_type="image/png"),
            AudioContent(data="AAAA", mime_type="audio/wav"),
            ResourceLink(name="report", uri="file:///r.pdf", mime_type="application/pdf"),
            EmbeddedResource(resource=TextResourceContents(uri="file:///a.txt", text="hello")),
            EmbeddedResource(resource=BlobResourceContents(uri="file:///b", blob="AAAA")),
        ],
        structured_content={"ignored": "because an image would be lost"},
    )
    text, image = output("s", "t", mixed)
    assert image == ImagePart(data=base64.b64decode(png), media_type="image/png")
    assert text.split("\n\n") == [
        "see:",
        "[image: image/png, 1.8 kB]",
        "[audio: audio/wav, 3 bytes]",
        "[resource link: report <file:///r.pdf> (application/pdf)]",
        "[resource <file:///a.txt>]\nhello",
        "[resource <file:///b>: binary, 3 bytes]",
    ]
    assert output("s", "t", CallToolResult(content=[])) == ""
    with pytest.raises(ToolError, match=r"^disk full$"):
        output("s", "t", CallToolResult(content=[TextContent(text="disk full")], is_error=True))
    with pytest.raises(ToolError, match="'t' of 's' reported an error"):
        output("s", "t", CallToolResult(content=[], is_error=True))


def test_configuration_mistakes_are_user_errors() -> None:
    """Bad prefixes, a bare string as a filter or as args, timeouts and URLs."""
    with pytest.raises(UserError, match="prefix"):
        MCPStdioServer("server", prefix="has space")
    with pytest.raises(UserError, match="prefix"):
        MCPStdioServer("server", prefix="fs_")
    with pytest.raises(UserError, match="collection of tool names"):
        MCPStdioServer("server", allow="read")
    with pytest.raises(UserError, match="list of strings"):
        MCPStdioServer("server", "--flag")
    with pytest.raises(UserError, match="timeout must be positive"):
        MCPStdioServer("server", tool_timeout=0)
    with pytest.raises(UserError, match="http:// or https://"):
        MCPHttpServer("localhost:8000/mcp")


def test_a_servers_default_name_carries_no_credentials() -> None:
    """Errors name the server; a URL's user info and query (tokens) stay out of them."""
    server = MCPHttpServer("https://user:secret@mcp.example.com:8443/mcp?token=abc#x")
    assert server.name == "https://mcp.example.com:8443/mcp"
    node = MCPStdioServer("/usr/bin/node", ["--inspect", "/srv/server.js", "--token", "secret"])
    assert node.name == "node server.js"
    npx = MCPStdioServer("npx", ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"])
    assert npx.name == "npx server-filesystem"


def test_without_the_sdk_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    """A missing mcp package is a UserError naming the extra, when a server is made."""
    monkeypatch.setitem(sys.modules, "mcp", None)  # `import mcp` now fails as if absent
    with pytest.raises(UserError, match=r"pip install 'agentloop-runtime\[mcp\]'"):
        MCPStdioServer("server")


def test_importing_agentloop_and_agentloop_mcp_does_not_import_the_sdk() -> None:
    code = "import sys, agentloop, agentloop.mcp; print('mcp' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


async def test_listing_without_a_connection_says_how_to_connect() -> None:
    with pytest.raises(UserError, match="not connected: enter it"):
        await MCPStdioServer("server").list_tools()


async def test_an_is_error_text_is_truncated_like_an_output() -> None:
    """A server's 5,000-character isError text reaches the model cut to max_output_chars."""
    from mcp.types import CallToolResult, TextContent

    from agentloop import ToolLimits

    async def failing_call(name: str, arguments: dict[str, Any], context: Any) -> Any:
        return output(
            "s", name, CallToolResult(content=[TextContent(text="x" * 5000)], is_error=True)
        )

    options: dict[str, Any] = {"prefix": None, "allow": None, "deny": None, "tool_timeout": 5.0}
    tools = build_tools(server="s", listed=[_listed("t")], call=failing_call, **options)
    model = ScriptedModel([Reply(calls=[call("t", {})]), "done"])
    agent = Agent(model, tools=list(tools), tool_limits=ToolLimits(max_output_chars=100))
    result = await agent.run("go")
    action = result.steps[0].actions[0]
    assert action.error_kind == "tool_error"
    assert action.error == "x" * 100 + "\n…[truncated 4900 characters]"
