// Drives an agentloop server with @ag-ui/client's own HttpAgent (its verifier included).
// argv: <url of POST /api/ag-ui> <thread id> <plan JSON: a list of steps>
// A step is {"say": "text"} (a user message, then runAgent), {"resume": {"status",
// "payload"?}} (runAgent answering every pending interrupt with it), or {"read": path} (runAgent
// reading an existing run's stream, GET path?protocol=ag-ui, through the agent's fetch hook). Prints, as JSON: per step
// the events the client let through and its outcome or error, then the messages and state the
// client rebuilt. A step's "url" sends it, and the steps after it, to another server (a
// replica of the same app). The fourth argument names the client package (an npm alias pins
// the lowest supported version).
const [url, threadId, planJson, pkg = "@ag-ui/client"] = process.argv.slice(2);
const { HttpAgent } = await import(pkg);
const plan = JSON.parse(planJson);
let reading = null;
const read = (target, init) =>
  reading === null ? fetch(target, init) : fetch(new URL(reading, target), { headers: { accept: "text/event-stream" } });
const agent = new HttpAgent({ url, threadId, fetch: read });
const steps = [];
let n = 0;
for (const step of plan) {
  const events = [];
  const subscriber = { onEvent: ({ event }) => void events.push(event) };
  const record = { events, interrupts: [], error: null, result: null };
  try {
    if (step.url !== undefined) agent.url = step.url;
    reading = step.read ?? null;
    if (step.read !== undefined) {
      record.result = (await agent.runAgent({}, subscriber)).result ?? null;
    } else if (step.say !== undefined) {
      agent.addMessage({ id: `user-${++n}`, role: "user", content: step.say });
      record.result = (await agent.runAgent({}, subscriber)).result ?? null;
    } else {
      const resume = agent.pendingInterrupts.map((i) => ({ interruptId: i.id, ...step.resume }));
      record.result = (await agent.runAgent({ resume }, subscriber)).result ?? null;
    }
  } catch (error) {
    record.error = String(error?.message ?? error);
  }
  record.interrupts = agent.pendingInterrupts;
  steps.push(record);
}
console.log(JSON.stringify({ steps, messages: agent.messages, state: agent.state }));
