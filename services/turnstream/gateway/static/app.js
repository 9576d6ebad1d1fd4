// The gateway's chat page: no build step, no dependencies.
// The transcript and the stream cursor are kept together in sessionStorage and
// updated per event, so a reload resumes the stream right after the last event
// shown (Last-Event-ID), with no token lost or shown twice.
"use strict";

const KEY = "turnstream.chat";
const $ = (id) => document.getElementById(id);
let state = load();
let controller = null;

function load() {
  try {
    const saved = JSON.parse(sessionStorage.getItem(KEY));
    if (saved && Array.isArray(saved.entries)) return saved;
  } catch (_) { /* a fresh chat */ }
  return { token: "", loop: null, cursor: null, entries: [], status: "idle" };
}

function save() { sessionStorage.setItem(KEY, JSON.stringify(state)); }

function textOf(blocks) {
  return (blocks || []).filter((b) => b.type === "text").map((b) => b.text).join("");
}

function entryFor(turn) {
  let entry = state.entries.find((e) => e.kind === "assistant" && e.turn === turn);
  if (!entry) {
    entry = { kind: "assistant", turn, text: "" };
    state.entries.push(entry);
  }
  return entry;
}

function apply(type, data) {
  const turn = data.header ? data.header.turn_id : null;
  switch (type) {
    case "TurnStarted":
      state.entries.push({ kind: "user", turn, text: textOf(data.message.blocks) });
      state.status = "running";
      break;
    case "TokenDelta":
      if (data.chunk.type === "text") entryFor(turn).text += data.chunk.text;
      break;
    case "ToolCallStarted":
      state.entries.push({ kind: "tool", turn, text: "tool: " + data.tool_name });
      break;
    case "GateOpened":
      state.entries.push({ kind: "gate", turn, gate: data.gate_id, open: true,
                           text: "approval needed (" + data.kind + ")" });
      state.status = "waiting for approval";
      break;
    case "GateResolved": {
      const gate = state.entries.find((e) => e.kind === "gate" && e.gate === data.gate_id);
      if (gate) { gate.open = false; gate.text += ": " + (data.action || data.reason); }
      state.status = "running";
      break;
    }
    case "TurnDone":
    case "TurnFailed":
    case "TurnInterrupted":
      state.entries.push({ kind: "outcome", turn, text: type });
      state.status = "idle";
      break;
    case "DeltasExpired":
      state.entries.push({ kind: "notice", text: "some tokens expired: the answer is complete" });
      break;
    default:
      break;
  }
}

function render() {
  const transcript = $("transcript");
  transcript.replaceChildren();
  for (const entry of state.entries) {
    const div = document.createElement("div");
    div.className = "entry " + entry.kind;
    if (entry.turn) div.dataset.turn = entry.turn;
    div.textContent = entry.text;
    if (entry.kind === "gate" && entry.open) {
      for (const action of ["approve", "deny"]) {
        const button = document.createElement("button");
        button.type = "button";
        button.className = action;
        button.textContent = action;
        button.addEventListener("click", () => answer(entry.gate, action));
        div.append(" ", button);
      }
    }
    transcript.append(div);
  }
  transcript.scrollTop = transcript.scrollHeight;
  $("loop").textContent = state.loop ? "loop " + state.loop.slice(0, 8) : "";
  $("status").textContent = state.status;
}

async function call(method, path, body) {
  const response = await fetch(path, {
    method,
    headers: { Authorization: "Bearer " + state.token, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const answer = await response.json();
  if (!response.ok) throw new Error(answer.error || response.status);
  return answer;
}

async function send(text) {
  if (!state.loop) {
    const created = await call("POST", "/v1/loops", {});
    state.loop = created.loop_id;
    state.cursor = created.cursor;
    save();
    connect();
  }
  await call("POST", "/v1/loops/" + state.loop + "/input", { text });
}

async function answer(gate, action) {
  await call("POST", "/v1/loops/" + state.loop + "/gates/" + gate, { action });
}

function handle(block) {
  let id = null, type = null, data = "";
  for (const line of block.split("\n")) {
    if (line.startsWith("id: ")) id = line.slice(4);
    else if (line.startsWith("event: ")) type = line.slice(7);
    else if (line.startsWith("data: ")) data += line.slice(6);
  }
  if (type === "close") return false;  // dropped as too slow: reconnect
  if (type && id) {
    apply(type, JSON.parse(data));
    state.cursor = id;  // with the transcript, in one save
    save();
    render();
  }
  return true;
}

async function connect() {
  if (controller) controller.abort();
  if (!state.loop) return;
  controller = new AbortController();
  const own = controller;
  const headers = { Authorization: "Bearer " + state.token };
  if (state.cursor) headers["Last-Event-ID"] = state.cursor;
  try {
    const response = await fetch("/v1/loops/" + state.loop + "/events",
                                 { headers, signal: own.signal });
    if (!response.ok) throw new Error(String(response.status));
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        if (!handle(block)) { own.abort(); break; }
      }
    }
  } catch (_) { /* reconnect below */ }
  if (controller === own) setTimeout(connect, 1000);
}

$("token").value = state.token;
$("token").addEventListener("change", () => { state.token = $("token").value; save(); connect(); });
$("new-loop").addEventListener("click", () => {
  state = { token: state.token, loop: null, cursor: null, entries: [], status: "idle" };
  save(); render(); connect();
});
$("composer").addEventListener("submit", (event) => {
  event.preventDefault();
  const text = $("input").value.trim();
  if (!text) return;
  $("input").value = "";
  send(text).catch((error) => {
    state.entries.push({ kind: "notice", text: "not sent: " + error.message });
    render();
  });
});
render();
connect();
