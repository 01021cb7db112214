// Reads the emulated provider's OpenAI replies with the real clients: the `openai` SDK
// (`responses.stream()` and chat streaming), `@ai-sdk/openai` (Responses) and
// `@ai-sdk/openai-compatible` (Chat), through `ai`'s streamText.
//
// Usage: node emulated_openai.mjs FULL_URL TEXT_URL LIMITED_URL
//   FULL_URL: an emulator whose first turn is a thought, a text and two tool calls;
//   TEXT_URL: one whose first turn is a plain text;
//   LIMITED_URL: one that answers every request with a 429 (the fault kit's rate limit).
// Prints one JSON object: what each client read from each reply, or the error it raised.
import OpenAI from "openai";
import { createOpenAI } from "@ai-sdk/openai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { jsonSchema, streamText, tool } from "ai";

const [fullUrl, textUrl, limitedUrl] = process.argv.slice(2);
const city = { type: "object", properties: { city: { type: "string" } }, required: ["city"] };
const openaiTools = ["get_weather", "get_time"].map((name) => ({
  type: "function",
  name,
  description: `The ${name.slice(4)} in a city.`,
  parameters: city,
  strict: false,
}));
const chatTools = openaiTools.map(({ name, description, parameters }) => ({
  type: "function",
  function: { name, description, parameters },
}));
const sdkTools = {
  get_weather: tool({ description: "The weather in a city.", inputSchema: jsonSchema(city) }),
  get_time: tool({ description: "The time in a city.", inputSchema: jsonSchema(city) }),
};
const prompt = "What is the weather and the time in Oslo?";
// A tool result whose call the conversation never made: the API refuses it with a 400.
const orphanResponses = [
  { role: "user", content: prompt },
  { type: "function_call_output", call_id: "call_missing", output: "sunny" },
];
const orphanChat = [
  { role: "user", content: prompt },
  { role: "tool", tool_call_id: "call_missing", content: "sunny" },
];

function sdk(url) {
  return new OpenAI({ baseURL: `${url}/v1`, apiKey: "unused", maxRetries: 0 });
}

function failure(err) {
  const status = err?.status ?? err?.statusCode;
  const message = String(err?.message).slice(0, 500);
  return { error: { name: err?.constructor?.name, status, message } };
}

async function nodeResponses(url, input = prompt) {
  try {
    const request = { model: "emulated", input, tools: openaiTools };
    const stream = sdk(url).responses.stream(request);
    const events = [];
    let text = "";
    for await (const event of stream) {
      events.push(event.type);
      if (event.type === "response.output_text.delta") text += event.delta;
    }
    const final = await stream.finalResponse();
    const calls = final.output
      .filter((item) => item.type === "function_call")
      .map((item) => ({ id: item.call_id, name: item.name, arguments: JSON.parse(item.arguments) }));
    const reasoning = final.output
      .filter((item) => item.type === "reasoning")
      .flatMap((item) => item.summary.map((part) => part.text))
      .join("");
    return {
      events: [...new Set(events)],
      text,
      outputText: final.output_text,
      calls,
      reasoning,
      status: final.status,
      model: final.model,
      usage: final.usage?.total_tokens ?? null,
    };
  } catch (err) {
    return failure(err);
  }
}

async function nodeChat(url, messages = [{ role: "user", content: prompt }]) {
  try {
    const stream = sdk(url).chat.completions.stream({
      model: "emulated",
      messages,
      tools: chatTools,
      stream_options: { include_usage: true },
    });
    let reasoning = "";
    for await (const chunk of stream) {
      reasoning += chunk.choices[0]?.delta?.reasoning_content ?? "";
    }
    const final = await stream.finalChatCompletion();
    const message = final.choices[0].message;
    return {
      text: message.content ?? "",
      calls: (message.tool_calls ?? []).map((c) => ({
        id: c.id,
        name: c.function.name,
        arguments: JSON.parse(c.function.arguments),
      })),
      reasoning,
      finish: final.choices[0].finish_reason,
      usage: final.usage?.total_tokens ?? null,
    };
  } catch (err) {
    return failure(err);
  }
}

async function aiSdk(model, messages) {
  const result = streamText({
    model,
    messages: messages ?? [{ role: "user", content: prompt }],
    tools: sdkTools,
    maxRetries: 0,
    onError: () => {}, // the error is read from the stream below
  });
  let text = "";
  let reasoning = "";
  const calls = [];
  const errors = [];
  let finish = null;
  for await (const part of result.fullStream) {
    if (part.type === "text-delta") text += part.text;
    else if (part.type === "reasoning-delta") reasoning += part.text;
    else if (part.type === "tool-call") {
      calls.push({ id: part.toolCallId, name: part.toolName, arguments: part.input });
    } else if (part.type === "error") errors.push(failure(part.error).error);
    else if (part.type === "finish") finish = part.finishReason;
  }
  if (errors.length) return { error: errors[0] };
  const usage = (await result.totalUsage).totalTokens ?? null;
  return { text, reasoning, calls, finish, usage };
}

// A conversation that holds a tool result whose call it never made.
const orphanSdk = [
  { role: "user", content: prompt },
  {
    role: "tool",
    content: [
      {
        type: "tool-result",
        toolCallId: "call_missing",
        toolName: "get_weather",
        output: { type: "text", value: "sunny" },
      },
    ],
  },
];

function aiOpenAI(url) {
  return createOpenAI({ baseURL: `${url}/v1`, apiKey: "unused" }).responses("emulated");
}

function aiCompatible(url) {
  return createOpenAICompatible({
    name: "emulated",
    baseURL: `${url}/v1`,
    apiKey: "unused",
    includeUsage: true,
  }).chatModel("emulated");
}

const out = {};
for (const [kind, url] of [["full", fullUrl], ["text", textUrl]]) {
  out[kind] = {
    nodeResponses: await nodeResponses(url),
    nodeChat: await nodeChat(url),
    aiOpenAI: await aiSdk(aiOpenAI(url)),
    aiCompatible: await aiSdk(aiCompatible(url)),
  };
}
out.error = {
  nodeResponses: await nodeResponses(fullUrl, orphanResponses),
  nodeChat: await nodeChat(fullUrl, orphanChat),
  aiOpenAI: await aiSdk(aiOpenAI(fullUrl), orphanSdk),
  aiCompatible: await aiSdk(aiCompatible(fullUrl), orphanSdk),
};
out.limited = {
  nodeResponses: await nodeResponses(limitedUrl),
  nodeChat: await nodeChat(limitedUrl),
  aiOpenAI: await aiSdk(aiOpenAI(limitedUrl)),
  aiCompatible: await aiSdk(aiCompatible(limitedUrl)),
};
console.log(JSON.stringify(out));
