// agentloop's page: a chat over one session. Each question starts a run whose events stream in
// the answer to that one request (POST /api/runs, Accept: text/event-stream) and render in
// stream order; after a drop the stream goes on from its events URL (Content-Location, GET with
// Last-Event-ID). A reload shows the session's history (GET /api/sessions/{id}).
// Everything a model, a tool or a user wrote reaches the page as text nodes: Markdown is parsed
// here into DOM nodes (no HTML is ever parsed), and links go to http(s) and mailto only.
"use strict";

const $ = (id) => document.getElementById(id);
const KEYS = { token: "agentloop-token", session: "agentloop-session", live: "agentloop-live" };
const state = {
  session: null, token: null, current: null, ended: false, busy: false,
  turns: new Map(), // top-level run id → its turn
  frozen: new Set(), // attempts already shown from the history: their replayed deltas are skipped
  waiting: null, // {turn, ids, decisions}: the pending calls of a waiting run
};

(function takeToken() {
  // A bearer token may be handed over in the fragment (#token=…): kept for this tab only.
  const match = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (match) {
    sessionStorage.setItem(KEYS.token, decodeURIComponent(match[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
  state.token = sessionStorage.getItem(KEYS.token);
  state.session = sessionStorage.getItem(KEYS.session);
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

function shown(value) { return typeof value === "string" ? value : JSON.stringify(value); }

// -- Markdown: a small parser that builds DOM nodes and never parses HTML --------------------

const SAFE_SCHEMES = ["http:", "https:", "mailto:"];
const WINDOW = 2000; // how far an inline span may reach: bounds the work per character

function safeUrl(raw) {
  const text = raw.trim().replace(/^<(.*)>$/, "$1");
  if (!/^(https?:|mailto:)/i.test(text) || /[\u0000-\u0020\u007f]/.test(text)) return null;
  try {
    const url = new URL(text);
    return SAFE_SCHEMES.includes(url.protocol) ? url.href : null;
  } catch (err) {
    return null;
  }
}

function link(href, children) {
  const a = el("a");
  a.href = href;
  a.rel = "noopener noreferrer nofollow";
  a.target = "_blank";
  a.append(...children);
  return a;
}

// The closing bracket of the "[" at `open`, minding nesting and escapes; -1 if none.
function closing(src, open) {
  let depth = 0;
  for (let i = open; i < Math.min(src.length, open + 500); i++) { // a label is short
    if (src[i] === "\\") { i++; continue; }
    if (src[i] === "[") depth++;
    else if (src[i] === "]" && --depth === 0) return i;
  }
  return -1;
}

function inline(src, depth) {
  const out = [];
  let text = "";
  const flush = () => { if (text) out.push(document.createTextNode(text)); text = ""; };
  const push = (node) => { flush(); out.push(node); };
  let i = 0;
  while (i < src.length) {
    const c = src[i];
    const rest = src.slice(i, i + WINDOW); // spans longer than this stay plain text
    let m;
    if (c === "\\" && /^\\[!-/:-@[-`{-~]/.test(rest)) { text += src[i + 1]; i += 2; continue; }
    if (c === "\\" && src[i + 1] === "\n") { push(el("br")); i += 2; continue; }
    if (c === "`" && (m = /^(`+)([\s\S]*?[^`])\1(?!`)/.exec(rest))) {
      push(el("code", null, m[2].replace(/^ (.*) $/, "$1")));
      i += m[0].length;
      continue;
    }
    if ((c === "[" || (c === "!" && src[i + 1] === "[")) && depth < 8) {
      const open = c === "!" ? i + 1 : i;
      const end = closing(src, open);
      const target = end < 0 ? null : /^\(\s*(<[^>\n]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)(?:\s+("[^"]*"|'[^']*'))?\s*\)/.exec(src.slice(end + 1));
      if (target) {
        const label = src.slice(open + 1, end);
        const href = safeUrl(target[1]);
        if (c === "!") push(document.createTextNode(label)); // images are never fetched
        else if (href) push(link(href, inline(label, depth + 1)));
        else { flush(); out.push(...inline(label, depth + 1)); }
        i = end + 1 + target[0].length;
        continue;
      }
    }
    if (c === "<" && (m = /^<((?:https?:\/\/|mailto:)[^\s<>]+)>/i.exec(rest))) {
      const href = safeUrl(m[1]);
      push(href ? link(href, [document.createTextNode(m[1])]) : document.createTextNode(m[0]));
      i += m[0].length;
      continue;
    }
    if ((m = /^https?:\/\/[^\s<>()]*[^\s<>().,;:!?'"*_~]/.exec(rest)) && !/[\w/]$/.test(text)) {
      const href = safeUrl(m[0]);
      if (href) { push(link(href, [document.createTextNode(m[0])])); i += m[0].length; continue; }
    }
    if (depth < 8 && (m = /^(\*\*|__)(?=\S)([\s\S]*?\S)\1/.exec(rest))
        && !(c === "_" && (/\w$/.test(text) || /^\w/.test(src.slice(i + m[0].length))))) {
      const strong = el("strong");
      strong.append(...inline(m[2], depth + 1));
      push(strong);
      i += m[0].length;
      continue;
    }
    if (depth < 8 && (m = /^~~(?=\S)([\s\S]*?\S)~~/.exec(rest))) {
      const del = el("del");
      del.append(...inline(m[1], depth + 1));
      push(del);
      i += m[0].length;
      continue;
    }
    if (depth < 8 && (m = /^([*_])(?=[^\s*_])([\s\S]*?[^\s\\])\1(?!\1)/.exec(rest))
        && !(c === "_" && (/\w$/.test(text) || /^\w/.test(src.slice(i + m[0].length))))) {
      const em = el("em");
      em.append(...inline(m[2], depth + 1));
      push(em);
      i += m[0].length;
      continue;
    }
    if (c === "\n" && / {2,}$/.test(text)) { text = text.replace(/ +$/, ""); push(el("br")); i++; continue; }
    text += c;
    i++;
  }
  flush();
  return out;
}

const BLOCK = {
  fence: /^ {0,3}(`{3,}|~{3,})(.*)$/,
  heading: /^ {0,3}(#{1,6})(?:\s+(.*?))?(?:\s+#+)?\s*$/,
  rule: /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/,
  quote: /^ {0,3}> ?/,
  item: /^( {0,3})([-*+]|\d{1,9}[.)])(\s+|$)/,
};

function startsBlock(line) {
  return BLOCK.fence.test(line) || BLOCK.heading.test(line) || BLOCK.rule.test(line)
    || BLOCK.quote.test(line) || BLOCK.item.test(line);
}

function blocks(lines, depth) {
  const out = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    let m;
    if (!line.trim()) { i++; continue; }
    if ((m = BLOCK.fence.exec(line))) {
      const fence = m[1];
      const body = [];
      for (i++; i < lines.length && !lines[i].trim().startsWith(fence); i++) body.push(lines[i]);
      i++;
      const pre = el("pre");
      pre.append(el("code", null, body.join("\n")));
      out.push(pre);
      continue;
    }
    if ((m = BLOCK.heading.exec(line))) {
      const h = el("h" + Math.min(6, m[1].length + 2));
      h.append(...inline(m[2] || "", 0));
      out.push(h);
      i++;
      continue;
    }
    if (BLOCK.rule.test(line)) { out.push(el("hr")); i++; continue; }
    if (BLOCK.quote.test(line) && depth < 8) {
      const inner = [];
      for (; i < lines.length && BLOCK.quote.test(lines[i]); i++) inner.push(lines[i].replace(BLOCK.quote, ""));
      const quote = el("blockquote");
      quote.append(...blocks(inner, depth + 1));
      out.push(quote);
      continue;
    }
    if ((m = BLOCK.item.exec(line)) && depth < 8) {
      const ordered = /\d/.test(m[2]);
      const list = el(ordered ? "ol" : "ul");
      if (ordered && parseInt(m[2], 10) !== 1) list.start = parseInt(m[2], 10);
      while (i < lines.length && (m = BLOCK.item.exec(lines[i])) && /\d/.test(m[2]) === ordered) {
        const indent = m[0].length;
        const body = [lines[i].slice(indent)];
        for (i++; i < lines.length; i++) {
          const next = lines[i];
          if (next.trim() && /^\s{2,}/.test(next)) body.push(next.replace(new RegExp("^ {0," + indent + "}"), ""));
          else if (!next.trim() && i + 1 < lines.length && /^\s{2,}\S/.test(lines[i + 1])) body.push("");
          else if (next.trim() && !startsBlock(next) && body[body.length - 1].trim()) body.push(next);
          else break;
        }
        const item = el("li");
        const parts = blocks(body, depth + 1);
        if (parts.length && parts[0].tagName === "P") item.append(...parts.shift().childNodes);
        item.append(...parts);
        list.append(item);
        if (i < lines.length && !lines[i].trim()) i++;
      }
      out.push(list);
      continue;
    }
    const para = [line];
    for (i++; i < lines.length && lines[i].trim() && !startsBlock(lines[i]); i++) para.push(lines[i]);
    const p = el("p");
    p.append(...inline(para.join("\n").trim(), 0));
    out.push(p);
  }
  return out;
}

function markdown(source) {
  const fragment = document.createDocumentFragment();
  fragment.append(...blocks(String(source).replace(/\r\n?/g, "\n").split("\n"), 0));
  return fragment;
}

// -- the conversation --------------------------------------------------------------------

function newTurn(question) {
  const root = el("article", "turn");
  const reply = el("div", "reply");
  const foot = el("div", "turn-status");
  root.append(el("div", "question", question), reply, foot);
  $("chat").append(root);
  return {
    root, reply, foot, attempts: new Map(), actions: new Map(), waitingRows: new Map(),
    subruns: new Map(), lastText: null, t0: 0,
  };
}

function turnFor(event) {
  return state.turns.get(event.run_id) || state.turns.get(event.parent_run_id) || state.current;
}

// A sub-agent's run (an agent called as a tool) streams into a block of its own, named after
// the agent; when its action finishes, the block moves into that action's row.
function subrunOf(turn, event) {
  let sub = turn.subruns.get(event.run_id);
  if (!sub) {
    const root = el("div", "subrun");
    root.dataset.testid = "subrun";
    root.append(el("div", "subrun-name", event.agent || event.branch));
    const host = turn.subruns.get(event.parent_run_id);
    (host ? host.root : turn.reply).append(root);
    sub = { root, lastText: null };
    turn.subruns.set(event.run_id, sub);
  }
  return sub;
}

function attemptOf(turn, runId, attempt) {
  const key = runId + ":" + attempt;
  let box = turn.attempts.get(key);
  if (!box) {
    const root = el("div", "attempt");
    root.dataset.attempt = String(attempt);
    const sub = turn.subruns.get(runId) || null;
    (sub ? sub.root : turn.reply).append(root);
    box = { key, root, last: null, streaming: false, withdrawn: false, sub };
    turn.attempts.set(key, box);
  }
  return box;
}

let painting = new Set();
function paint(segment) {
  if (painting.size === 0) requestAnimationFrame(flushPaint);
  painting.add(segment);
}
function flushPaint() {
  const due = painting;
  painting = new Set();
  for (const s of due) draw(s);
}
function draw(segment) {
  if (segment.kind === "thought") segment.node.textContent = segment.source;
  else segment.node.replaceChildren(markdown(segment.source));
}

function segment(turn, box, kind, text, now) {
  if (!box.last || box.last.kind !== kind) {
    const node = el("div", kind === "thought" ? "thought" : "text");
    box.root.append(node);
    box.last = { kind, node, source: "", box };
  }
  box.last.source += text;
  if (now) draw(box.last); else paint(box.last);
  if (kind === "text") {
    if (box.sub) box.sub.lastText = box.last; else turn.lastText = box.last;
  }
  return box.last;
}

function actionRow(turn, box, call) {
  const key = box.key.split(":")[0] + ":" + (call.attempt === undefined ? box.key.split(":")[1] : call.attempt) + ":" + call.tag;
  let row = turn.actions.get(key);
  const waited = turn.waitingRows.get(call.name + ":" + call.tag);
  if (!row && waited && !waited.started) { // a waiting call, shown from its parent's record
    row = waited;
    turn.actions.set(key, row);
  }
  if (!row) {
    const item = el("div", "action");
    item.dataset.testid = "action";
    item.append(el("span", "name", call.name), document.createTextNode(" "),
      el("code", "input", JSON.stringify(call.input)));
    box.root.append(item);
    box.last = null; // text after the call starts a new block below it
    row = { item, at: 0, started: false, done: false, progress: null };
    turn.actions.set(key, row);
  }
  return row;
}

function started(row, box, turn, now, live) {
  if (row.started) return;
  row.started = true;
  row.at = now;
  if (live) {
    const mid = box.streaming ? " (mid-reply)" : "";
    row.item.append(el("span", "timing", " started +" + seconds(now - turn.t0) + mid));
  }
}

function progressed(row, event) { // a running tool's last report, until it finishes
  if (row.done) return;
  if (!row.progress) row.item.append(row.progress = el("div", "progress"));
  const total = event.total === null || event.total === undefined ? "" : " / " + event.total;
  row.progress.textContent = event.progress + total + (event.message ? " · " + event.message : "");
}

function finished(row, result, took, sub) {
  if (row.done) return;
  if (result.subrun && (result.subrun.pending || []).length) return; // it goes on when resumed
  row.done = true;
  if (row.progress) row.progress.remove();
  if (took !== null) row.item.append(el("span", "timing", ", took " + seconds(took)));
  if (sub) row.item.append(sub.root);
  const last = sub && sub.lastText;
  if (!result.error && last && !last.box.withdrawn && typeof result.output === "string"
      && last.source.trim() === result.output.trim()) {
    last.node.classList.add("output"); // the sub-agent's streamed answer is the output: once
  } else {
    const text = result.error ? "error: " + result.error : shown(result.output);
    row.item.append(el("div", "output", "→ " + text));
  }
  if (result.error) row.item.classList.add("failed");
  const decide = row.item.querySelector(".decide");
  if (decide) decide.remove();
  showGoal(result.output);
}

function askDecision(turn, row, call) {
  if (row.item.querySelector(".decide") || row.done) return;
  const box = el("div", "decide");
  if (call.kind === "external") { // a tool the caller runs: its result is typed in
    box.append(el("span", "note", "waiting for this tool's result "));
    const field = el("input", "result");
    field.type = "text";
    field.setAttribute("aria-label", "the tool's result");
    const button = el("button", "send-result", "Send result");
    button.type = "button";
    button.addEventListener("click", () => decide(turn, call.id, { decision: "result", output: field.value }, box));
    box.append(field, button);
  } else {
    box.append(el("span", "note", "waiting for your decision "));
    for (const decision of ["approve", "deny"]) {
      const button = el("button", decision, decision === "approve" ? "Approve" : "Deny");
      button.type = "button";
      button.addEventListener("click", () => decide(turn, call.id, { decision }, box));
      box.append(button);
    }
  }
  row.item.append(box);
  turn.waitingRows.set(call.name + ":" + call.tag, row);
  if (!state.waiting || state.waiting.turn !== turn) state.waiting = { turn, ids: [], decisions: {} };
  if (!state.waiting.ids.includes(call.id)) state.waiting.ids.push(call.id);
}

function decidedLabel(row, decision, reason) {
  const decide = row.item.querySelector(".decide");
  if (decide) decide.remove();
  if (row.item.querySelector(".decided")) return;
  const denied = decision === "deny";
  const said = { approve: "approved", edit: "edited", result: "result given" };
  const text = denied ? "denied" + (reason ? ": " + reason : "") : said[decision] || String(decision);
  row.item.append(el("div", denied ? "decided denied" : "decided", text));
}

function answer(turn, output) {
  const last = turn.lastText;
  if (typeof output === "string" && last && !last.box.withdrawn && last.source.trim() === output.trim()) {
    last.node.classList.add("answer");
    last.node.dataset.testid = "answer";
    draw(last);
    return;
  }
  const node = el("div", "text answer");
  node.dataset.testid = "answer";
  if (typeof output === "string") node.append(markdown(output));
  else node.append(el("pre", null, JSON.stringify(output, null, 2)));
  turn.reply.append(node);
}

function turnError(turn, message) {
  turn.reply.append(el("div", "turn-error", "error: " + message));
  fail(message);
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
  const top = !event.parent_run_id;
  if (top && ["run_finished", "run_waiting", "run_failed"].includes(event.type)) state.ended = true;
  if (event.type === "run_started" && top) {
    if (!state.turns.has(event.run_id)) state.turns.set(event.run_id, state.current);
    sessionStorage.setItem(KEYS.live, JSON.stringify({ events: state.following, run: event.run_id }));
  }
  const turn = turnFor(event);
  if (!turn) return;
  const frozen = event.attempt !== undefined && state.frozen.has(event.run_id + ":" + event.attempt);
  switch (event.type) {
    case "run_started":
      if (!top) subrunOf(turn, event);
      if (top && !turn.t0) turn.t0 = now;
      status("running");
      break;
    case "model_call_started":
      if (!frozen) attemptOf(turn, event.run_id, event.attempt).streaming = true;
      break;
    case "thought_delta":
      if (!frozen) segment(turn, attemptOf(turn, event.run_id, event.attempt), "thought", event.text);
      break;
    case "text_delta":
    case "answer_delta":
      if (!frozen) segment(turn, attemptOf(turn, event.run_id, event.attempt), "text", event.text);
      break;
    case "model_call_finished":
      if (!frozen) attemptOf(turn, event.run_id, event.attempt).streaming = false;
      break;
    case "action_started": {
      const box = attemptOf(turn, event.run_id, event.attempt);
      started(actionRow(turn, box, event), box, turn, now, !frozen);
      break;
    }
    case "action_progress": {
      const row = turn.actions.get(event.run_id + ":" + event.attempt + ":" + event.tag);
      if (row) progressed(row, event);
      break;
    }
    case "action_finished": {
      const result = event.result;
      const box = attemptOf(turn, event.run_id, result.attempt);
      const row = actionRow(turn, box, result);
      const sub = result.subrun ? turn.subruns.get(result.subrun.run_id) : undefined;
      finished(row, result, row.at && !frozen ? now - row.at : null, sub);
      break;
    }
    case "attempt_discarded": {
      const box = attemptOf(turn, event.run_id, event.attempt);
      if (box.withdrawn) break;
      box.withdrawn = true;
      box.root.classList.add("withdrawn");
      box.root.dataset.testid = "withdrawn";
      box.root.append(el("div", "withdrawn-note", "withdrawn (" + event.reason + ")"));
      break;
    }
    case "action_awaiting": {
      if (!top) break; // a sub-run's calls are pending in its parent's run_waiting too
      const box = turn.streaming || [...turn.attempts.values()].pop() || attemptOf(turn, event.run_id, 1);
      askDecision(turn, actionRow(turn, box, event.call), event.call);
      break;
    }
    case "action_decided": {
      const row = [...turn.actions.entries()].find(([k]) => k.endsWith(":" + event.call.tag));
      if (row) decidedLabel(row[1], event.decision, event.reason);
      break;
    }
    case "run_finished":
      if (!top) break;
      state.waiting = null;
      if (event.result.error) turnError(turn, event.result.error.message);
      else {
        answer(turn, event.result.output);
        turn.foot.textContent = "finished in " + seconds(now - turn.t0);
        status("finished");
      }
      break;
    case "run_waiting":
      for (const call of (top && event.result.pending) || []) { // a sub-run's too ("parent/child")
        if (state.waiting && state.waiting.turn === turn && state.waiting.ids.includes(call.id)) continue;
        const box = turn.streaming || [...turn.attempts.values()].pop() || attemptOf(turn, event.run_id, 1);
        askDecision(turn, actionRow(turn, box, call), call);
      }
      if (top) { turn.foot.textContent = "waiting for your decision"; status("waiting for a decision"); }
      break;
    case "run_failed":
      if (top) turnError(turn, event.error.message);
      break;
  }
  if (event.attempt !== undefined && !frozen && event.type === "model_call_started") {
    turn.streaming = attemptOf(turn, event.run_id, event.attempt);
  }
}

async function decide(turn, callId, decision, box) {
  const waiting = state.waiting;
  if (!waiting || waiting.turn !== turn) return;
  waiting.decisions[callId] = decision;
  for (const b of box.querySelectorAll("button, input")) b.disabled = true;
  const doing = { approve: "approving… ", deny: "denying… ", result: "sending… " };
  box.querySelector(".note").textContent = doing[decision.decision];
  const open = waiting.ids.filter((id) => !(id in waiting.decisions));
  if (open.length) return; // every pending call is decided in one resume
  state.waiting = null;
  state.current = turn;
  turn.t0 = performance.now();
  const ok = await send("/api/sessions/" + encodeURIComponent(state.session) + "/resume",
    { decisions: waiting.decisions });
  if (!ok) { // refused before anything ran: the calls still wait, to be decided again
    state.waiting = { turn, ids: waiting.ids, decisions: {} };
    for (const node of turn.root.querySelectorAll(".decide")) {
      for (const b of node.querySelectorAll("button, input")) b.disabled = false;
      node.querySelector(".note").textContent = "waiting for your decision ";
    }
  }
}

// A new question leaves the calls that wait undecided: the page offers them no more.
function abandonWaiting() {
  if (!state.waiting) return;
  for (const node of state.waiting.turn.root.querySelectorAll(".decide")) {
    node.replaceChildren(el("span", "note", "not decided: a new question was asked"));
  }
  state.waiting.turn.foot.textContent = "left waiting";
  state.waiting = null;
}

// Server-sent events over fetch (so that a token can go in a header), resumed after a drop:
// `first` is the stream already open (the POST's answer), `url` the run's events to resume from.
async function follow(url, first) {
  let last = null;
  state.ended = false;
  state.following = url;
  for (let tries = 0; tries < 20; tries++) {
    let response = first;
    first = null;
    if (!response) {
      const extra = last === null ? {} : { "last-event-id": last };
      try {
        response = await fetch(url, { headers: headers(extra), credentials: "same-origin" });
      } catch (err) {
        await new Promise((r) => setTimeout(r, 500));
        continue;
      }
    }
    if (!response.ok) { sessionStorage.removeItem(KEYS.live); return fail("events: HTTP " + response.status); }
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
    if (ended) { sessionStorage.removeItem(KEYS.live); flushPaint(); return; }
  }
  fail("the event stream kept dropping");
}

async function send(url, body) {
  $("error").hidden = true;
  state.busy = true;
  $("send").disabled = true;
  try {
    let response;
    try { // the run's stream is the answer: its ids and events URL in the headers
      response = await fetch(url, {
        method: "POST", headers: headers({ accept: "text/event-stream" }),
        body: JSON.stringify(body), credentials: "same-origin",
      });
    } catch (err) {
      fail("the server could not be reached");
      return false;
    }
    if (!response.ok) { // refusals are JSON: nothing ran
      let data = {};
      try { data = await response.json(); } catch (err) { /* not JSON */ }
      fail((data && data.error) || "HTTP " + response.status);
      return false;
    }
    state.session = response.headers.get("x-agentloop-session");
    sessionStorage.setItem(KEYS.session, state.session);
    await follow(response.headers.get("content-location"), response);
    return true;
  } finally {
    state.busy = false;
    $("send").disabled = false;
  }
}

// -- the history, on reload --------------------------------------------------------------

function showStep(turn, runId, step, pendingNow) {
  const box = attemptOf(turn, runId, step.attempt);
  state.frozen.add(box.key);
  const byTag = new Map((step.actions || []).map((a) => [a.tag, a]));
  const pending = new Map((step.pending || []).map((p) => [p.tag, p]));
  for (const part of step.parts || []) {
    if (part.kind === "thought" && part.text) segment(turn, box, "thought", part.text, true);
    else if (part.kind === "text" && part.text) segment(turn, box, "text", part.text, true);
    else if (part.kind === "tool_call") {
      const done = byTag.get(part.id);
      const call = done || pending.get(part.id) || { tag: part.id, name: part.name, input: part.arguments };
      const row = actionRow(turn, box, { tag: call.tag, name: call.name, input: call.input });
      row.started = true;
      if (done) finished(row, done, null);
      else if (pendingNow && pending.has(part.id)) askDecision(turn, row, pending.get(part.id));
      else if (pending.has(part.id)) row.item.append(el("div", "decided denied", "not decided"));
      byTag.delete(part.id);
    }
  }
  for (const call of pending.values()) { // a sub-run's calls ("parent/child") have no part here
    if (!pendingNow || waitsFor(turn, call.id)) continue;
    askDecision(turn, actionRow(turn, box, call), call);
  }
  for (const done of byTag.values()) { // actions without a part of their own (carried, eager)
    const row = actionRow(turn, box, done);
    row.started = true;
    finished(row, done, null);
  }
}

function waitsFor(turn, id) {
  return Boolean(state.waiting && state.waiting.turn === turn && state.waiting.ids.includes(id));
}

async function showHistory() {
  let response;
  try {
    response = await fetch("/api/sessions/" + encodeURIComponent(state.session),
      { headers: headers(), credentials: "same-origin" });
  } catch (err) {
    return;
  }
  if (response.status === 404) { forget(); return; }
  if (!response.ok) return;
  const data = await response.json();
  const runs = new Map();
  for (const record of data.history || []) {
    if (record.type === "run" && !record.parent_run_id) {
      runs.set(record.run_id, { input: record.input, steps: new Map(), end: null });
    }
    const run = runs.get(record.run_id);
    if (!run) continue;
    if (record.type === "step" || record.type === "reply") run.steps.set(record.index, record);
    else if (record.type === "run_end") run.end = record;
  }
  const lastRun = [...runs.keys()].pop();
  for (const [runId, run] of runs) {
    const turn = newTurn(run.input);
    state.turns.set(runId, turn);
    const steps = [...run.steps.values()].sort((a, b) => a.index - b.index);
    steps.forEach((record, n) => {
      const waits = runId === lastRun && !run.end && n === steps.length - 1 && record.type === "reply";
      showStep(turn, runId, record.step, waits);
    });
    if (run.end && run.end.status === "finished" && !run.end.error) answer(turn, run.end.output);
    else if (run.end && run.end.error) turn.reply.append(el("div", "turn-error", "error: " + run.end.error));
    else if (run.end) turn.foot.textContent = run.end.status;
    else if (state.waiting && state.waiting.turn === turn) turn.foot.textContent = "waiting for your decision";
    state.current = turn;
  }
  status(state.waiting ? "waiting for a decision" : "idle");
}

function forget() {
  sessionStorage.removeItem(KEYS.session);
  sessionStorage.removeItem(KEYS.live);
  state.session = null;
}

document.addEventListener("DOMContentLoaded", async () => {
  $("ask").addEventListener("submit", async (e) => {
    e.preventDefault();
    const input = $("input").value;
    if (!input.trim() || state.busy) return;
    $("input").value = "";
    abandonWaiting();
    state.current = newTurn(input);
    state.current.t0 = performance.now();
    state.current.root.scrollIntoView({ block: "start" });
    await send("/api/runs", state.session ? { input, session: state.session } : { input });
  });
  $("input").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); $("ask").requestSubmit(); }
  });
  $("new-chat").addEventListener("click", () => {
    if (state.busy) return;
    forget();
    state.turns.clear();
    state.frozen.clear();
    state.waiting = null;
    state.current = null;
    $("chat").replaceChildren();
    $("goal").hidden = true;
    status("idle");
  });
  if (!state.session) return;
  await showHistory();
  const live = JSON.parse(sessionStorage.getItem(KEYS.live) || "null");
  if (live && live.events) { // a run was streaming when the page went away: read it again
    state.current = state.turns.get(live.run) || state.current;
    state.busy = true;
    $("send").disabled = true;
    try { await follow(live.events); } finally { state.busy = false; $("send").disabled = false; }
  }
});
