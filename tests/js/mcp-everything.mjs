// @modelcontextprotocol/server-everything, unchanged, on the transport a test asks for:
//   node mcp-everything.mjs stdio [--late-tool]
//   node mcp-everything.mjs http [--late-tool]   (prints "port N" once listening on 127.0.0.1)
// The package's own HTTP entry point listens on every interface at a fixed port; this one
// serves the same server factory (one server per session, as the package does) on a free
// loopback port. The real server emits notifications/tools/list_changed only while a session
// initialises (its capability-dependent tools); `--late-tool` adds one tool,
// `register-late-tool`, that registers `late-tool` through the server's own McpServer, whose
// SDK then sends notifications/tools/list_changed as any server that changes its tools does.
import { createServer as createEverything } from "@modelcontextprotocol/server-everything/dist/server/index.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { createServer as createHttpServer } from "node:http";
import { randomUUID } from "node:crypto";
import { z } from "zod";

const [mode = "stdio", ...flags] = process.argv.slice(2);
const lateTool = flags.includes("--late-tool");

function make() {
  const made = createEverything();
  if (lateTool) {
    made.server.registerTool(
      "register-late-tool",
      { description: "Register the tool late-tool (the server then says its tools changed).", inputSchema: {} },
      async () => {
        made.server.registerTool(
          "late-tool",
          { description: "A tool registered after the session began.", inputSchema: { text: z.string() } },
          async ({ text }) => ({ content: [{ type: "text", text: `late: ${text}` }] }),
        );
        return { content: [{ type: "text", text: "registered late-tool" }] };
      },
    );
  }
  return made;
}

async function readBody(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  const text = Buffer.concat(chunks).toString("utf8");
  return text ? JSON.parse(text) : undefined;
}

if (mode === "stdio") {
  const { server } = make();
  await server.connect(new StdioServerTransport());
} else if (mode === "http") {
  const sessions = new Map();
  const http = createHttpServer(async (req, res) => {
    try {
      const id = req.headers["mcp-session-id"];
      const body = req.method === "POST" ? await readBody(req) : undefined;
      let transport = id ? sessions.get(id) : undefined;
      if (!transport && !id && req.method === "POST") {
        const { server, cleanup } = make();
        transport = new StreamableHTTPServerTransport({
          sessionIdGenerator: () => randomUUID(),
          onsessioninitialized: (sid) => sessions.set(sid, transport),
        });
        transport.onclose = () => {
          if (transport.sessionId) sessions.delete(transport.sessionId);
          cleanup(transport.sessionId);
        };
        await server.connect(transport);
      }
      if (!transport) {
        res.writeHead(400, { "content-type": "application/json" }).end(
          JSON.stringify({ jsonrpc: "2.0", error: { code: -32000, message: "Bad Request: no valid session" }, id: null }),
        );
        return;
      }
      await transport.handleRequest(req, res, body);
    } catch (error) {
      console.error(error);
      if (!res.headersSent) res.writeHead(500).end();
    }
  });
  http.listen(0, "127.0.0.1", () => console.log(`port ${http.address().port}`));
} else {
  console.error(`unknown transport ${mode}`);
  process.exit(2);
}
