// The reviewer's page: vanilla JavaScript over the /v1/reviews API. No build step.
"use strict";

const $ = (sel) => document.querySelector(sel);
const state = {
  items: [], selected: -1, item: null, offset: 0, limit: 50, total: 0, editing: false,
  rating: "relevance", // the dimension the next digit key rates; f and s pick another for one digit
};
const RATING_KEYS = { f: "fluency", s: "usefulness" };

function headers() {
  const h = { "content-type": "application/json" };
  const key = localStorage.getItem("ragguard.key");
  const name = localStorage.getItem("ragguard.reviewer");
  if (key) h.authorization = "Bearer " + key;
  if (name) h["x-reviewer"] = name;
  return h;
}

async function api(method, path, body) {
  const response = await fetch(path, {
    method, headers: headers(), body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = response.headers.get("content-type")?.includes("json") ? await response.json() : null;
  if (!response.ok) {
    let detail = data && data.detail !== undefined ? data.detail : response.statusText;
    if (Array.isArray(detail)) detail = detail.map((d) => `${d.loc.slice(1).join(".")}: ${d.msg}`).join("; ");
    throw new Error(`${response.status}: ${detail}`);
  }
  return data;
}

function toast(message, isError = false) {
  const el = $("#toast");
  el.textContent = safeText(message);
  el.className = "show" + (isError ? " error" : "");
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => (el.className = ""), isError ? 6000 : 2500);
}

async function run(action) {
  try { await action(); } catch (err) { toast(err.message, true); }
}

function ago(seconds) {
  if (seconds < 90) return `${Math.round(seconds)} s`;
  if (seconds < 5400) return `${Math.round(seconds / 60)} min`;
  if (seconds < 129600) return `${Math.round(seconds / 3600)} h`;
  return `${Math.round(seconds / 86400)} d`;
}

// Stored text is shown, never obeyed: control characters and bidirectional overrides, embeddings,
// isolates and marks are made visible, as rag/display.py does on the terminal. C0 controls (but
// newline and tab) and DEL become their control pictures (ESC: ␛); C1 controls and the bidi
// characters become markers such as "<U+202E>", so a title cannot be shown reordered.
const UNSAFE = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;
function safeText(text) {
  return String(text ?? "").replace(UNSAFE, (c) => {
    const code = c.charCodeAt(0);
    if (code < 0x20) return String.fromCharCode(0x2400 + code);
    if (code === 0x7f) return "\u2421";
    return "<U+" + code.toString(16).toUpperCase().padStart(4, "0") + ">";
  });
}

// Every text an element gets goes through safeText.
function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  const { textContent, ...rest } = props;
  Object.assign(node, rest);
  if (textContent !== undefined) node.textContent = safeText(textContent);
  for (const child of children) node.append(typeof child === "string" ? safeText(child) : child);
  return node;
}

// Who escalated the item and to whom ("escalated by ann to admins"); empty if never escalated.
function escalation(item) {
  return item.escalated_by ? `escalated by ${item.escalated_by} to ${item.escalated_to || "admins"}` : "";
}

// An escalated item is for the reviewer it names or for an admin, never for who escalated it.
function escalatedAway(item) {
  if (!item.escalated_by) return false;
  if (item.escalated_by === state.me) return true;
  return state.role !== "admin" && item.escalated_to !== state.me;
}

function badge(text, cls = "") { return el("span", { className: "badge " + cls, textContent: text }); }

// Loads overlap (the page's first start, a sign-in, a filter changed at once): only the latest
// one's answer is shown, whichever arrives last.
let queueLoads = 0;

async function loadQueue() {
  const load = ++queueLoads;
  const params = new URLSearchParams({ offset: state.offset, limit: state.limit });
  const status = $("#f-status").value, reason = $("#f-reason").value.trim();
  const assignee = $("#f-assignee").value.trim();
  if (status) params.set("status", status);
  if (reason) params.set("reason", reason);
  if (assignee) params.set("assignee", assignee);
  if ($("#f-overdue").checked) params.set("overdue", "true");
  const age = $("#f-age").value; // "min_age_s:3600" or "max_age_s:86400"
  if (age) params.set(...age.split(":"));
  const page = await api("GET", "/v1/reviews?" + params);
  if (load !== queueLoads) return; // a newer load was asked for meanwhile
  state.items = page.items;
  state.total = page.total;
  state.selected = Math.min(Math.max(state.selected, 0), state.items.length - 1);
  renderQueue();
}

// Each collection's labels, calibration in force and certified threshold (GET .../risk/collections).
async function loadRisk() {
  let rows;
  try {
    rows = await api("GET", "/v1/reviews/risk/collections");
  } catch (err) {
    $("#risk-note").textContent = safeText(err.message);
    return;
  }
  const pct = (x) => (x == null ? "–" : `${(100 * x).toFixed(1)} %`);
  const body = $("#risk tbody");
  body.replaceChildren();
  for (const r of rows) {
    const target = r.target_risk == null;
    const threshold = target ? "fixed" : r.threshold == null ? "not calibrated" : r.threshold.toFixed(3);
    const risk = r.risk_estimate == null ? "–" : `${pct(r.risk_estimate)} (≤ ${pct(r.risk_bound)})`;
    const row = el("tr", {},
      el("td", { textContent: r.index }),
      el("td", { textContent: `${r.labels} (${r.uniform_labels} uniform)` }),
      el("td", { textContent: `v${r.calibration_version} ${r.calibration_stage}` }),
      el("td", { textContent: threshold, className: r.threshold == null && !target ? "bad" : "" }),
      el("td", { textContent: risk }),
      el("td", { textContent: pct(r.coverage) }));
    row.title = safeText(r.reason || "no target risk: the fixed thresholds decide");
    body.append(row);
  }
  $("#risk-note").textContent = rows.length
    ? safeText(rows.find((r) => r.reason)?.reason ?? "")
    : "no labels yet";
}

function renderQueue() {
  const list = $("#items");
  list.replaceChildren();
  state.items.forEach((item, i) => {
    const li = el("li", { className: i === state.selected ? "selected" : "" });
    li.dataset.id = item.id;
    li.append(el("span", { className: "q", textContent: item.question }));
    li.append(badge(item.status));
    if (item.confidence !== null) li.append(badge("conf " + item.confidence.toFixed(2)));
    li.append(badge(ago(item.age_s)));
    if (item.is_overdue) li.append(badge("overdue", "overdue"));
    if (item.status === "claimed" && item.assignee) li.append(badge("@" + item.assignee));
    const open = ["pending", "claimed", "escalated"].includes(item.status);
    if (open && item.escalated_by) li.append(badge("→ " + (item.escalated_to || "admins"), "escalated"));
    li.addEventListener("click", () => { state.selected = i; renderQueue(); run(() => openItem(item.id)); });
    list.append(li);
  });
  const end = state.offset + state.items.length;
  $("#queue-count").textContent = state.total
    ? `${state.offset + 1}–${end} of ${state.total}` : "nothing here";
  $("#prev").disabled = state.offset === 0;
  $("#next").disabled = end >= state.total;
  list.querySelector(".selected")?.scrollIntoView({ block: "nearest" });
}

// The passage text with the sentences the answer rests on wrapped in <mark>.
function highlighted(raw, rawSentences) {
  const text = safeText(raw), sentences = rawSentences.map(safeText); // the same marks either way
  const spans = [];
  for (const s of sentences) {
    const at = text.indexOf(s);
    if (at >= 0) spans.push([at, at + s.length]);
  }
  spans.sort((a, b) => a[0] - b[0]);
  const nodes = [];
  let pos = 0;
  for (const [start, end] of spans) {
    if (start < pos) continue;
    nodes.push(text.slice(pos, start), el("mark", { textContent: text.slice(start, end) }));
    pos = end;
  }
  nodes.push(text.slice(pos));
  return nodes;
}

async function openItem(id) {
  state.item = await api("GET", "/v1/reviews/" + encodeURIComponent(id));
  setEditing(false);
  renderItem();
}

function renderItem() {
  const item = state.item;
  $("#empty").hidden = !!item;
  $("#item").hidden = !item;
  if (!item) return;
  const meta = $("#item-meta");
  meta.replaceChildren(badge(item.status), badge("index " + item.index));
  if (item.confidence !== null) meta.append(badge("confidence " + item.confidence.toFixed(2)));
  meta.append(badge("queued " + ago(item.age_s) + " ago"));
  meta.append(badge("due " + new Date(item.deadline * 1000).toLocaleString(), item.is_overdue ? "overdue" : ""));
  // Claimed by someone only while claimed; a resolved item shows who resolved it, and how.
  if (item.status === "claimed" && item.assignee) meta.append(badge("claimed by " + item.assignee));
  if (item.resolved_at !== null && item.resolved_by) meta.append(badge(`${item.resolution} by ${item.resolved_by}`));
  if (item.escalated_by) meta.append(badge(escalation(item), "escalated"));
  $("#item-question").textContent = safeText(item.question);
  $("#item-answer").textContent = safeText(item.edited_answer ?? item.answer);
  const others = item.candidates.filter((c) => c !== item.answer);
  $("#candidates-block").hidden = others.length === 0;
  $("#item-candidates").replaceChildren(...others.map((c) => el("li", { textContent: c })));
  $("#item-reasons").replaceChildren(...item.reasons.map((r) => el("li", { textContent: r })));
  $("#item-guards tbody").replaceChildren(...item.guard_results.map((g) => el("tr", {},
    el("td", { textContent: g.name }), el("td", {}, badge(g.outcome, g.outcome)),
    el("td", { textContent: g.score === null || g.score === undefined ? "–" : Number(g.score).toFixed(2) }),
    el("td", { textContent: g.reason }))));
  $("#item-passages").replaceChildren(...item.passages.map((p) => el("li", {},
    el("div", { className: "src", textContent: `${p.doc_id} · score ${p.score.toFixed(2)}` }),
    el("div", {}, ...highlighted(p.text, p.cited_sentences)))));
  $("#audit").replaceChildren(...(item.audit || []).map((a) => el("li", {
    textContent: `${new Date(a.at * 1000).toLocaleString()} · ${a.actor} · ${a.action}` +
      (a.after && a.after.status ? ` → ${a.after.status}` : ""),
  })));
  const open = ["pending", "claimed", "escalated"].includes(item.status);
  const mine = item.status === "claimed" && item.assignee === state.me;
  const away = open && escalatedAway(item);
  $("#claim").disabled = !open || away;
  $("#claim").title = away ? `${escalation(item)}: not yours to claim` : "";
  for (const id of ["#release", "#approve", "#edit", "#reject", "#escalate", "#escalate-to"]) $(id).disabled = !mine;
  // A resolved item someone else resolved can take this reviewer's ratings (a second opinion).
  const rated = item.ratings.some((r) => r.reviewer === state.me);
  $("#save-ratings").hidden = open || item.resolved_by === state.me || rated;
  // Admins make a resolved item a gold item once (is_gold and made_gold reach admins only).
  const known = ["approved", "edited", "rejected"].includes(item.status);
  const made = (item.audit || []).some((a) => a.action === "made_gold");
  $("#make-gold").hidden = !(state.role === "admin" && known && item.is_gold === false && !made);
}

function setEditing(on) {
  state.editing = on;
  $("#edit-box").hidden = !on;
  $("#save-edit").hidden = !on;
  if (on) {
    $("#edit-box").value = state.item.edited_answer ?? state.item.answer;
    $("#edit-box").focus();
  }
}

function ratings() {
  const value = (id) => ($(id).value === "" ? null : Number($(id).value));
  return {
    ratings: { relevance: value("#r-relevance"), fluency: value("#r-fluency"), usefulness: value("#r-usefulness") },
    comment: $("#r-comment").value,
  };
}

function clearRatings() {
  for (const id of ["#r-relevance", "#r-fluency", "#r-usefulness"]) $(id).value = "";
  $("#r-comment").value = "";
}

async function act(path, body) {
  const id = state.item.id;
  state.item = await api("POST", `/v1/reviews/${encodeURIComponent(id)}/${path}`, body);
  renderItem();
  await loadQueue();
  await loadRisk();
}

const actions = {
  claim: () => act("claim", {}).then(() => toast("claimed")),
  release: () => act("release").then(() => toast("released")),
  approve: () => act("resolve", { action: "approve", ...ratings() }).then(() => { clearRatings(); toast("approved"); }),
  reject: () => act("resolve", { action: "reject", ...ratings() }).then(() => { clearRatings(); toast("rejected"); }),
  escalate: () => {
    const to = $("#escalate-to").value.trim();
    return act("resolve", { action: "escalate", ...ratings(), ...(to ? { escalate_to: to } : {}) })
      .then(() => { clearRatings(); $("#escalate-to").value = ""; toast("escalated to " + (to || "admins")); });
  },
  edit: async () => setEditing(true),
  saveEdit: () => act("resolve", { action: "edit", edited_answer: $("#edit-box").value, ...ratings() })
    .then(() => { setEditing(false); clearRatings(); toast("edited answer saved"); }),
  rateNext: async () => {
    const item = await api("POST", "/v1/reviews/next-to-rate");
    if (!item) { toast("nothing needs your ratings"); return; }
    state.item = item;
    clearRatings();
    renderItem();
  },
  saveRatings: () => act("rate", ratings()).then(() => { clearRatings(); toast("ratings saved"); }),
  makeGold: async () => {
    const path = `/v1/reviews/${encodeURIComponent(state.item.id)}`;
    const made = await api("POST", `${path}/gold`);
    state.item = await api("GET", path);
    renderItem();
    toast(`gold item ${made.id.slice(0, 8)} made`);
  },
  next: async () => {
    const item = await api("POST", "/v1/reviews/next", {});
    if (!item) { toast("the queue is empty"); return; }
    state.item = item;
    renderItem();
    await loadQueue();
  },
};

function bind() {
  $("#api-key").value = localStorage.getItem("ragguard.key") || "";
  $("#reviewer").value = localStorage.getItem("ragguard.reviewer") || "";
  $("#who").addEventListener("submit", (e) => {
    e.preventDefault();
    localStorage.setItem("ragguard.key", $("#api-key").value.trim());
    localStorage.setItem("ragguard.reviewer", $("#reviewer").value.trim());
    run(start);
  });
  $("#filters").addEventListener("submit", (e) => { e.preventDefault(); state.offset = 0; run(loadQueue); });
  for (const id of ["#f-status", "#f-age"]) {
    $(id).addEventListener("change", () => { state.offset = 0; run(loadQueue); });
  }
  $("#prev").addEventListener("click", () => { state.offset = Math.max(0, state.offset - state.limit); run(loadQueue); });
  $("#next").addEventListener("click", () => { state.offset += state.limit; run(loadQueue); });
  $("#help-button").addEventListener("click", () => $("#help").showModal());
  for (const [id, name] of [["#claim", "claim"], ["#release", "release"], ["#approve", "approve"],
    ["#edit", "edit"], ["#save-edit", "saveEdit"], ["#reject", "reject"], ["#escalate", "escalate"],
    ["#make-gold", "makeGold"], ["#rate-next", "rateNext"], ["#save-ratings", "saveRatings"]]) {
    $(id).addEventListener("click", () => run(actions[name]));
  }
  document.addEventListener("keydown", onKey);
}

// Sets one rating from a digit key; a digit outside the dimension's scale is ignored.
function rate(dimension, digit) {
  const select = $("#r-" + dimension);
  if ([...select.options].some((o) => o.value === digit)) select.value = digit;
}

// The dimension the next digit rates (relevance unless f or s was just pressed).
function armRating(dimension) {
  state.rating = dimension;
  for (const name of ["relevance", "fluency", "usefulness"]) {
    $("#l-" + name).classList.toggle("armed", name === dimension && name !== "relevance");
  }
}

function onKey(e) {
  if (e.key === "Escape") { armRating("relevance"); if (state.editing) setEditing(false); return; }
  const typing = ["INPUT", "TEXTAREA", "SELECT"].includes(document.activeElement?.tagName);
  if (state.editing && e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); run(actions.saveEdit); return; }
  if (typing || e.ctrlKey || e.metaKey || e.altKey) return;
  const itemOpen = !!state.item;
  if (/^[0-9]$/.test(e.key)) { e.preventDefault(); rate(state.rating, e.key); armRating("relevance"); return; }
  armRating("relevance");
  if (itemOpen && RATING_KEYS[e.key]) { e.preventDefault(); armRating(RATING_KEYS[e.key]); return; }
  const keys = {
    j: () => move(1), k: () => move(-1),
    Enter: () => state.items[state.selected] && run(() => openItem(state.items[state.selected].id)),
    n: () => run(actions.next), "?": () => $("#help").showModal(),
    c: () => itemOpen && !$("#claim").disabled && run(actions.claim),
    u: () => itemOpen && !$("#release").disabled && run(actions.release),
    a: () => itemOpen && !$("#approve").disabled && run(actions.approve),
    e: () => itemOpen && !$("#edit").disabled && run(actions.edit),
    r: () => itemOpen && !$("#reject").disabled && run(actions.reject),
    x: () => itemOpen && !$("#escalate").disabled && run(actions.escalate),
    t: () => run(actions.rateNext),
    w: () => itemOpen && !$("#save-ratings").hidden && run(actions.saveRatings),
  };
  const handler = keys[e.key];
  if (handler) { e.preventDefault(); handler(); }
}

function move(step) {
  if (!state.items.length) return;
  state.selected = Math.min(Math.max(state.selected + step, 0), state.items.length - 1);
  renderQueue();
}

async function start() {
  const me = await api("GET", "/v1/reviews/me");
  state.me = me.name;
  state.role = me.role;
  $("#reviewer").placeholder = `${me.name} (${me.role})`;
  await loadQueue();
  if (state.item) renderItem();
  await loadRisk();
}

bind();
run(start);
