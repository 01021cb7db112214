// Drives an agentloop server with the Vercel AI SDK's own chat logic, as useChat runs it: the
// Chat class (@ai-sdk/react's for `ai`, AbstractChat with a plain state for `ai-v5`) over
// DefaultChatTransport. No React rendering: useChat is this class plus a re-render.
// argv: <base URL> <"ai" | "ai-v5"> <chat id> <plan JSON: a list of steps>
// Steps: {"say": text}; {"approve": bool, "reason"?} (addToolApprovalResponse on every call
// awaiting approval; sendAutomaticallyWhen posts the conversation again, as the guide's app
// does); {"post_and_drop": text} (another tab starts a run by POST and drops its connection
// after the first frames); {"resume": true} (a fresh Chat with the messages so far, as
// useChat({resume: true}) does on mount: resumeStream()).
// A step's "base" sends it, and the steps after it, to another server (a replica of the app).
// Prints, as JSON: the requests made, each response's frames, each onFinish, each onData part
// (transient data parts reach only onData), the messages.
const [base, pkg, chatId, planJson] = process.argv.slice(2);
const plan = JSON.parse(planJson);
const ai = await import(pkg);
const requests = [];
const finishes = [];
const errors = [];
const data = [];

let current = base;

async function recordingFetch(target, init = {}) {
  const path = String(target).replace(base, "");
  const url = current + path;
  const entry = { method: init.method ?? "GET", url: path, base: current };
  entry.body = init.body ? JSON.parse(init.body) : null;
  requests.push(entry);
  const response = await fetch(url, init);
  entry.status = response.status;
  if (!response.body) return response;
  const [mine, theirs] = response.body.tee();
  entry.frames = [];
  entry.done = (async () => {
    const text = await new Response(mine).text();
    const data = (block) => block.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart());
    entry.frames = text.split("\n\n").map((b) => data(b).join("\n")).filter((d) => d);
  })();
  return new Response(theirs, { status: response.status, headers: response.headers });
}

class PlainState {
  constructor(messages = []) {
    this.messages = messages;
    this.status = "ready";
    this.error = undefined;
  }
  pushMessage = (m) => void (this.messages = this.messages.concat(m));
  popMessage = () => void (this.messages = this.messages.slice(0, -1));
  replaceMessage = (i, m) => void (this.messages = [...this.messages.slice(0, i), m, ...this.messages.slice(i + 1)]);
  snapshot = (thing) => structuredClone(thing);
}

async function makeChat(messages) {
  const init = {
    id: chatId,
    transport: new ai.DefaultChatTransport({ api: `${base}/api/chat`, fetch: recordingFetch }),
    onFinish: ({ finishReason, isError, isAbort }) => finishes.push({ finishReason: finishReason ?? null, isError, isAbort }),
    onError: (error) => errors.push(String(error?.message ?? error)),
    onData: (part) => void data.push(part),
  };
  if (ai.lastAssistantMessageIsCompleteWithApprovalResponses) {
    init.sendAutomaticallyWhen = ai.lastAssistantMessageIsCompleteWithApprovalResponses;
  }
  if (pkg === "ai") {
    const { Chat } = await import("@ai-sdk/react");
    return new Chat({ ...init, messages });
  }
  class PlainChat extends ai.AbstractChat {
    constructor() {
      super({ ...init, state: new PlainState(messages) });
    }
  }
  return new PlainChat();
}

async function settle(chat) {
  const deadline = Date.now() + 20000;
  let quiet = 0;
  while (Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 25));
    quiet = chat.status === "ready" || chat.status === "error" ? quiet + 1 : 0;
    if (quiet >= 8) break;
  }
  await Promise.all(requests.map((r) => r.done));
}

let chat = await makeChat([]);
for (const step of plan) {
  if (step.base !== undefined) current = step.base;
  if (step.say !== undefined) {
    await chat.sendMessage({ text: step.say });
  } else if (step.approve !== undefined) {
    const last = chat.messages.at(-1);
    for (const part of last?.parts ?? []) {
      if (part.state === "approval-requested") {
        await chat.addToolApprovalResponse({ id: part.approval.id, approved: step.approve, reason: step.reason });
      }
    }
  } else if (step.post_and_drop !== undefined) {
    const message = { id: "dropped-user", role: "user", parts: [{ type: "text", text: step.post_and_drop }] };
    const controller = new AbortController();
    const response = await fetch(`${current}/api/chat`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ id: chatId, messages: [message], trigger: "submit-message" }),
      signal: controller.signal,
    });
    const reader = response.body.getReader();
    await reader.read();
    controller.abort();
    chat = await makeChat([message]);
  } else if (step.resume) {
    chat = await makeChat(structuredClone(chat.messages));
    await chat.resumeStream();
  }
  await settle(chat);
}
console.log(JSON.stringify({ requests, finishes, errors, data, status: chat.status, messages: chat.messages }));
