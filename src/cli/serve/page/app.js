// offshoot's web view: the tree of agents, one agent's conversation, the questions that
// wait on you. Everything it shows is text (never markup): what a model wrote stays words.
"use strict";

const token = new URLSearchParams(location.search).get("token") || "";
const $ = (id) => document.getElementById(id);
let agents = [];
let questions = [];
// The workspaces served, and the one shown (every call names it).
let workspaces = [];
let wsKey = null;
let selected = null;
let streaming = null;
const timers = {};

function later(name, ms, fn) {
  clearTimeout(timers[name]);
  timers[name] = setTimeout(fn, ms);
}

async function api(path, body) {
  if (wsKey !== null) path += (path.includes("?") ? "&" : "?") + "ws=" + encodeURIComponent(wsKey);
  const options = { headers: { Authorization: "Bearer " + token } };
  if (body !== undefined) {
    options.method = "POST";
    options.headers["Content-Type"] = "application/json";
    options.body = JSON.stringify(body);
  }
  const response = await fetch(path, options);
  const value = await response.json().catch(() => ({ error: response.statusText }));
  if (!response.ok) throw new Error(value.error || response.statusText);
  return value;
}

function say(error) {
  $("error").hidden = !error;
  $("error").textContent = error ? String(error.message || error) : "";
}

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined) node.textContent = text;
  return node;
}

const waiters = (q) => (q.waiters || []).map((w) => w.agent);
const waiting = (id) => questions.some((q) => waiters(q).includes(id));
const label = (a) => (a.name ? a.name + " " : "") + a.id;
const money = (c) => (c == null ? "?" : "$" + c.toFixed(4));

function facts(a) {
  const parts = [a.role, a.state, "step " + a.steps, a.model || "?", a.input_tokens + " in / " + a.output_tokens + " out", money(a.cost_usd)];
  if (a.context_tokens != null && a.context_window) parts.push(Math.round((100 * a.context_tokens) / a.context_window) + "% ctx");
  if (a.compactions && a.compactions.length) parts.push(a.compactions.length + " compacted");
  if (a.origin) parts.push("fork of " + a.origin);
  return parts.join(" · ");
}

// The workspaces served, in the picker when there are several; the badge counts the
// questions of all of them.
async function loadWorkspaces() {
  workspaces = (await api("/api/workspaces")).workspaces;
  if (wsKey === null || !workspaces.some((w) => w.key === wsKey)) wsKey = workspaces.length ? workspaces[0].key : null;
  const pick = $("workspace");
  pick.hidden = workspaces.length < 2;
  pick.replaceChildren(
    ...workspaces.map((w) => new Option(w.key + " (" + w.agents + (w.questions ? ", " + w.questions + " waiting" : "") + ")", w.key)),
  );
  pick.value = wsKey;
}

async function loadAgents() {
  try {
    if (workspaces.length > 1) await loadWorkspaces();
    const all = await api("/api/agents");
    agents = all.agents;
    questions = all.questions;
    drawTree();
    drawQuestions();
    if (selected) drawFacts();
  } catch (e) {
    say(e);
  }
}

function drawTree() {
  const byParent = new Map();
  for (const a of agents) {
    const key = a.parent || "";
    if (!byParent.has(key)) byParent.set(key, []);
    byParent.get(key).push(a);
  }
  const build = (parent) => {
    const list = el("ul", "tree");
    for (const a of byParent.get(parent) || []) {
      const item = el("li");
      const row = el("button", "agent state-" + a.state + (a.id === selected ? " selected" : ""));
      row.type = "button";
      row.dataset.agent = a.id;
      row.append(el("span", "dot"), el("span", "who", label(a)), el("span", "facts", facts(a)));
      if (waiting(a.id)) row.append(el("span", "badge", "needs you"));
      row.onclick = () => select(a.id);
      item.append(row);
      if (byParent.has(a.id)) item.append(build(a.id));
      list.append(item);
    }
    return list;
  };
  const tree = build("");
  tree.id = "tree";
  $("tree").replaceWith(tree);
  const others = workspaces.filter((w) => w.key !== wsKey).reduce((n, w) => n + w.questions, 0);
  const count = questions.length + others;
  $("attention").hidden = count === 0;
  $("attention").textContent = count + (count === 1 ? " question waits" : " questions wait");
  document.title = (count ? "(" + count + ") " : "") + "offshoot";
}

function drawQuestions() {
  const list = $("questions");
  list.replaceChildren();
  $("no-questions").hidden = questions.length > 0;
  for (const q of questions) {
    const item = el("li", "question");
    item.dataset.question = q.id;
    item.append(el("div", "who", q.id + ": " + waiters(q).join(", ") + " asks to run " + q.tool));
    item.append(el("pre", "input", JSON.stringify(q.input, null, 2)));
    item.append(el("div", "why muted", q.why));
    const yes = el("button", "approve", "Approve");
    const no = el("button", "deny", "Deny");
    yes.type = no.type = "button";
    yes.onclick = () => answer(q.id, "approve");
    no.onclick = () => answer(q.id, "deny");
    item.append(yes, no);
    list.append(item);
  }
}

async function answer(id, verdict) {
  try {
    await api("/api/questions/" + encodeURIComponent(id) + "/" + verdict, {});
    say(null);
  } catch (e) {
    say(e);
  }
  loadAgents();
}

function drawFacts() {
  const a = agents.find((x) => x.id === selected);
  $("title").textContent = a ? label(a) : selected;
  $("facts").textContent = a ? facts(a) + " — " + a.goal : "";
}

async function select(id) {
  selected = id;
  $("actions").hidden = false;
  $("request").hidden = true;
  $("diff").hidden = true;
  $("text").placeholder = "A message to " + id;
  $("send").textContent = "Send";
  drawFacts();
  drawTree();
  await loadConversation();
}

function blockNodes(block) {
  switch (block.type) {
    case "text":
      return [el("div", "text", block.text)];
    case "thinking":
      return [el("div", "thinking", block.thinking)];
    case "tool_use":
      return [el("div", "call", "→ " + block.name), el("pre", "input", JSON.stringify(block.input, null, 2))];
    default:
      return [];
  }
}

async function loadConversation() {
  if (!selected) return;
  const id = selected;
  try {
    const t = await api("/api/agents/" + encodeURIComponent(id) + "/transcript");
    if (id !== selected) return;
    const list = $("conversation");
    list.replaceChildren();
    streaming = null;
    for (const e of t.entries) {
      const item = el("li", "entry " + e.side);
      item.dataset.n = e.n;
      if (e.side === "user") {
        item.append(el("div", "from", e.from), el("div", "text", e.text));
      } else if (e.side === "assistant") {
        item.append(el("div", "from", e.model));
        for (const b of (e.output && e.output.content) || []) item.append(...blockNodes(b));
      } else {
        const r = e.result || {};
        item.classList.toggle("failed", !!r.is_error);
        item.append(el("div", "from", "← result"), el("pre", "output", r.content || ""));
      }
      list.append(item);
    }
    const steps = $("steps");
    const chosen = steps.value;
    steps.replaceChildren();
    for (let n = 1; n <= t.steps; n++) steps.append(new Option(String(n), String(n)));
    steps.value = chosen && Number(chosen) <= t.steps ? chosen : String(t.steps || "");
    list.lastElementChild && list.lastElementChild.scrollIntoView({ block: "end" });
  } catch (e) {
    say(e);
  }
}

function onRecord(record) {
  const here = record.workspace === wsKey;
  if (here && ["agent", "step", "end", "usage", "delivered"].includes(record.type)) later("tree", 200, loadAgents);
  if (["asked", "answered"].includes(record.type)) later("tree", 200, loadAgents);
  if (record.type === "asked" && "Notification" in window && Notification.permission === "granted") {
    const where = workspaces.length > 1 ? " (" + record.workspace + ")" : "";
    new Notification("offshoot: " + record.agent + where + " needs you", { body: record.tool + ": " + record.why });
  }
  if (!here || record.agent !== selected) return;
  if (record.type === "text_delta") {
    if (!streaming) {
      streaming = el("li", "entry assistant live");
      streaming.append(el("div", "text", ""));
      $("conversation").append(streaming);
    }
    streaming.lastChild.textContent += record.text;
    streaming.scrollIntoView({ block: "end" });
  } else if (["text", "tool_call", "tool_result", "delivered", "end", "compaction"].includes(record.type)) {
    later("conversation", 150, loadConversation);
  }
}

function listen() {
  const source = new EventSource("/events?token=" + encodeURIComponent(token));
  source.onopen = () => ($("status").textContent = "live");
  source.onerror = () => ($("status").textContent = "reconnecting…");
  source.onmessage = (m) => {
    try {
      onRecord(JSON.parse(m.data));
    } catch (e) {
      say(e);
    }
  };
  source.addEventListener("reset", () => {
    loadAgents();
    loadConversation();
  });
}

$("compose").onsubmit = async (event) => {
  event.preventDefault();
  const text = $("text").value;
  if (!text.trim()) return;
  if ("Notification" in window && Notification.permission === "default") Notification.requestPermission();
  try {
    if (selected) {
      await api("/api/agents/" + encodeURIComponent(selected) + "/messages", { text });
    } else {
      const made = await api("/api/agents", { goal: text });
      await loadAgents();
      await select(made.agent);
    }
    $("text").value = "";
    say(null);
  } catch (e) {
    say(e);
  }
};

$("stop").onclick = async () => {
  try {
    await api("/api/agents/" + encodeURIComponent(selected) + "/stop", {});
    loadAgents();
  } catch (e) {
    say(e);
  }
};

const agentPath = (rest) => "/api/agents/" + encodeURIComponent(selected) + rest;
const stepPath = (rest) => agentPath("/steps/" + $("steps").value + rest);

// Runs `fn` for a button; what fails is said under the form.
const act = (fn) => async () => {
  try {
    await fn();
    say(null);
  } catch (e) {
    say(e);
  }
};

function showDiff(text) {
  const pre = $("diff");
  pre.replaceChildren();
  for (const line of (text || "(no change)").split("\n")) {
    let cls = "";
    if (line.startsWith("+++") || line.startsWith("---") || line.startsWith("diff ")) cls = "file";
    else if (line.startsWith("+")) cls = "add";
    else if (line.startsWith("-")) cls = "del";
    else if (line.startsWith("@@")) cls = "hunk";
    pre.append(el("span", cls, line + "\n"));
  }
  pre.hidden = false;
}

function showText(text) {
  $("request").textContent = text;
  $("request").hidden = false;
}

$("show-diff").onclick = act(async () => showDiff((await api(agentPath("/diff"))).diff));
$("show-step-diff").onclick = act(async () => showDiff((await api(stepPath("/diff"))).diff));
$("show-request").onclick = act(async () => showText(JSON.stringify(await api(stepPath("/request")), null, 2)));
$("show-step").onclick = act(async () => {
  const step = await api(stepPath(""));
  showText(JSON.stringify({ meta: step.meta, tools: step.tools }, null, 2));
});
$("show-compactions").onclick = act(async () => {
  const all = (await api(agentPath("/compactions"))).compactions;
  const text = all.map((c) => "compaction " + c.compaction + " by " + c.compactor + ": " + c.removed.length + " paths removed\n" + c.summary);
  showText(text.join("\n\n") || "No compaction has landed.");
});
// Forks the selected agent from before the chosen step (from its tip before its first),
// with the box's text as its message.
$("fork").onclick = act(async () => {
  const message = $("text").value;
  if (!message.trim()) throw new Error("Write the fork's message in the box first.");
  const step = $("steps").value;
  const made = await api(agentPath("/forks"), step ? { message, step: Number(step) } : { message });
  $("text").value = "";
  await loadAgents();
  await select(made.agent);
});

$("workspace").onchange = () => {
  wsKey = $("workspace").value;
  selected = null;
  $("actions").hidden = true;
  $("conversation").replaceChildren();
  $("request").hidden = $("diff").hidden = true;
  $("title").textContent = "A new agent";
  $("facts").textContent = "";
  $("text").placeholder = "A goal for a new agent";
  $("send").textContent = "Start";
  loadAgents();
};

loadWorkspaces()
  .catch(say)
  .then(loadAgents)
  .then(listen);
