// agentloop's page: streams a run's events (GET /api/runs/{run}/events, resumed with
// Last-Event-ID after a dropped connection) and renders them. Everything a model or a tool
// wrote is put in the page as text (textContent), never as HTML.
"use strict";

const $ = (id) => document.getElementById(id);
const state = {
  session: null, token: null, t0: 0, ended: false, attempts: new Map(), actions: new Map(),
};

(function takeToken() {
  // A bearer token may be handed over in the fragment (#token=…): kept for this tab only.
  const match = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (match) {
    sessionStorage.setItem("agentloop-token", decodeURIComponent(match[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
  state.token = sessionStorage.getItem("agentloop-token");
})();

function headers(extra) {
  const h = Object.assign({ "content-type": "application/json" }, extra || {});
  if (state.token) h.authorization = "Bearer " + state.token;
  return h;
}

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined) node.textContent = String(text);
  return node;
}

function status(text) { $("status").textContent = text; }

function fail(text) {
  const box = $("error");
  box.textContent = text;
  box.hidden = false;
  status("error");
}

function seconds(ms) { return (ms / 1000).toFixed(2) + " s"; }

function attemptBox(event) {
  const key = event.run_id + ":" + event.attempt;
  let box = state.attempts.get(key);
  if (!box) {
    const root = el("div", "attempt");
    root.dataset.attempt = String(event.attempt);
    const thought = el("div", "thought");
    const text = el("div", "text");
    const actions = el("ul", "actions");
    root.append(thought, actions, text);
    $("run").append(root);
    box = { root, thought, text, actions, streaming: true };
    state.attempts.set(key, box);
  }
  return box;
}

function showGoal(output) {
  const goal = output && typeof output === "object" ? output.goal : null;
  if (!goal || typeof goal !== "object") return;
  $("goal-objective").textContent = String(goal.objective || "");
  $("goal-status").textContent = String(goal.status || "");
  $("goal").hidden = false;
}

function render(event) {
  const now = performance.now();
  const terminal = ["run_finished", "run_waiting", "run_failed"];
  if (!event.parent_run_id && terminal.includes(event.type)) state.ended = true;
  switch (event.type) {
    case "run_started":
      if (!event.parent_run_id) state.t0 = now;
      status("running");
      break;
    case "model_call_started":
      attemptBox(event);
      break;
    case "thought_delta":
      attemptBox(event).thought.textContent += event.text;
      break;
    case "text_delta":
    case "answer_delta":
      attemptBox(event).text.textContent += event.text;
      break;
    case "model_call_finished":
      attemptBox(event).streaming = false;
      break;
    case "action_started": {
      const box = attemptBox(event);
      const item = el("li", "action");
      item.dataset.testid = "action";
      const mid = box.streaming ? " (mid-reply)" : "";
      item.append(
        el("span", "name", event.name + " " + JSON.stringify(event.input)),
        el("span", "timing", " started +" + seconds(now - state.t0) + mid),
      );
      box.actions.append(item);
      state.actions.set(event.run_id + ":" + event.tag, { item, at: now });
      break;
    }
    case "action_finished": {
      const result = event.result;
      const found = state.actions.get(event.run_id + ":" + result.tag);
      if (found) {
        const took = el("span", "timing", ", took " + seconds(now - found.at));
        const shown = result.error ? "error: " + result.error : JSON.stringify(result.output);
        found.item.append(took, el("div", "output", "→ " + shown));
        if (result.error) found.item.classList.add("failed");
      }
      showGoal(result.output);
      break;
    }
    case "attempt_discarded": {
      const box = attemptBox(event);
      box.root.classList.add("withdrawn");
      box.root.dataset.testid = "withdrawn";
      box.root.append(el("div", "withdrawn-note", "withdrawn (" + event.reason + ")"));
      break;
    }
    case "action_awaiting":
      showPending(event.call);
      break;
    case "run_finished":
      if (event.parent_run_id) break;
      if (event.result.error) {
        fail(event.result.error.message);
      } else {
        const out = event.result.output;
        $("answer").textContent = typeof out === "string" ? out : JSON.stringify(out);
        $("final").hidden = false;
        status("finished in " + seconds(now - state.t0));
      }
      break;
    case "run_waiting":
      if (!event.parent_run_id) status("waiting for a decision");
      break;
    case "run_failed":
      if (!event.parent_run_id) fail(event.error.message);
      break;
  }
}

function showPending(call) {
  const item = el("li", "pending", call.name + " " + JSON.stringify(call.input) + " ");
  for (const decision of ["approve", "deny"]) {
    const button = el("button", decision, decision);
    button.type = "button";
    button.addEventListener("click", () => decide(call.id, decision, item));
    item.append(button);
  }
  $("pending-calls").append(item);
  $("pending").hidden = false;
}

async function decide(callId, decision, item) {
  item.remove();
  if ($("pending-calls").children.length === 0) $("pending").hidden = true;
  const decisions = {};
  decisions[callId] = { decision };
  await start("/api/sessions/" + encodeURIComponent(state.session) + "/resume", { decisions });
}

// Server-sent events over fetch (so that a token can go in a header), resumed after a drop.
async function follow(url) {
  let last = null;
  state.ended = false;
  for (let tries = 0; tries < 20; tries++) {
    const extra = last === null ? {} : { "last-event-id": last };
    let response;
    try {
      response = await fetch(url, { headers: headers(extra), credentials: "same-origin" });
    } catch (err) {
      await new Promise((r) => setTimeout(r, 500));
      continue;
    }
    if (!response.ok) return fail("events: HTTP " + response.status);
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    let ended = false;
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) { ended = state.ended; break; }
        buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const frame = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          let data = "";
          for (const line of frame.split("\n")) {
            if (line.startsWith("id:")) last = line.slice(3).trim();
            else if (line.startsWith("data:")) data += line.slice(5).replace(/^ /, "");
          }
          if (data) render(JSON.parse(data));
        }
      }
    } catch (err) {
      // the connection dropped: go on from the last event seen
    }
    if (ended) return;
  }
  fail("the event stream kept dropping");
}

async function start(url, body) {
  $("error").hidden = true;
  const response = await fetch(url, {
    method: "POST", headers: headers(), body: JSON.stringify(body), credentials: "same-origin",
  });
  let data = {};
  try { data = await response.json(); } catch (err) { /* not JSON */ }
  if (!response.ok) return fail((data && data.error) || "HTTP " + response.status);
  state.session = data.session;
  await follow(data.events);
}

document.addEventListener("DOMContentLoaded", () => {
  $("ask").addEventListener("submit", async (e) => {
    e.preventDefault();
    const input = $("input").value;
    if (!input.trim()) return;
    $("send").disabled = true;
    $("run").replaceChildren();
    $("final").hidden = true;
    state.attempts.clear();
    try {
      await start("/api/runs", { input, session: state.session });
    } finally {
      $("send").disabled = false;
    }
  });
});
