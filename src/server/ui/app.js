// Strata /ui: polls /ui/state (the records of recent requests, and for
// the operator the tiers' counters) and renders them. Everything shown
// is written into the DOM with stable ids and data-* attributes, so a
// script (tests/e2e/test_ui.py) can read what a person sees. No
// framework, nothing fetched from elsewhere; text goes in as text only.
"use strict";

const POLL_MS = 1000;
const TIERS = ["live", "ram", "disk", "redis"]; // in walk order; "computed" is the rest
const HISTORY = 300; // tier samples kept (5 minutes at one a second)

const state = {
  rev: 0, records: new Map(), cap: 256, view: "", selected: null,
  samples: [], // {t, hit, prefilled, evicted: {tier: n}} from the operator's counters
};

const $ = (sel) => document.querySelector(sel);
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}
const fmt = (n) => (n === undefined || n === null ? "–" : Number(n).toLocaleString("en-US", { maximumFractionDigits: 1 }));
function bytes(n) {
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${u[i]}`;
}
const clock = (t) => new Date(t * 1000).toLocaleTimeString();

// ---- one request ---------------------------------------------------------

// Tokens of each part of the prompt: each tier's, then the computed rest.
function segments(r) {
  const c = r.cached_tokens || {};
  const out = TIERS.filter((t) => c[t] > 0).map((t) => ({ tier: t, tokens: c[t] }));
  out.push({ tier: "computed", tokens: r.prefilled_tokens ?? r.prompt_tokens });
  return out;
}

function roleAt(r, pos) {
  const m = r.messages || [];
  for (let k = 0; k < m.length; k++) if (m[k].end >= 0 && pos < m[k].end) return { message: k, role: m[k].role };
  return { message: -1, role: "" };
}

function missText(fd) {
  const where = fd.message >= 0 ? `message ${fd.message} (${fd.role})` : "the new turn";
  return `missed at ${where}, token ${fmt(fd.token)}: ${fmt(fd.tokens_lost)} tokens lost`;
}

function barFor(r, scale) {
  const track = el("div", "track");
  const bar = el("div", "bar");
  bar.style.width = `${Math.max(0.5, (100 * r.prompt_tokens) / scale)}%`;
  if (r.finish === "running") {
    bar.classList.add("running");
  } else if (!r.cached_tokens) { // refused before it ran: nothing came from anywhere
    bar.classList.add("refused");
    bar.title = r.error || "refused";
  } else {
    for (const s of segments(r)) {
      const seg = el("div", `seg seg-${s.tier}`);
      seg.dataset.tier = s.tier;
      seg.dataset.tokens = s.tokens;
      seg.style.width = `${(100 * s.tokens) / Math.max(1, r.prompt_tokens)}%`;
      seg.title = `${s.tier}: ${fmt(s.tokens)} tokens`;
      bar.append(seg);
    }
  }
  track.append(bar);
  for (const m of r.retain || []) { // retention marks: the prefix kept at least ttl_s
    const t = el("div", "mark");
    Object.assign(t.dataset, { end: m.end, ttl: m.ttl_s });
    t.style.left = `${(100 * m.end) / scale}%`;
    t.title = `retention mark: the first ${fmt(m.end)} tokens kept at least ${fmt(m.ttl_s)} s`;
    track.append(t);
  }
  const fd = r.first_difference;
  if (fd) {
    const m = el("div", "miss");
    Object.assign(m.dataset, { message: fd.message, role: fd.role, token: fd.token, lost: fd.tokens_lost });
    m.style.left = `${(100 * fd.token) / scale}%`;
    m.title = missText(fd);
    track.append(m);
  }
  return track;
}

function requestRow(r, scale, prev) {
  const row = el("div", "req");
  row.id = `req-${r.id}`;
  Object.assign(row.dataset, {
    id: r.id, finish: r.finish, miss: r.first_difference ? 1 : 0, conversation: r.conversation?.key || "",
    prompt: r.prompt_tokens, boot: r.boot,
  });
  if (r.tenant) row.dataset.tenant = r.tenant;
  if (state.selected === r.id) row.classList.add("selected");
  const meta = el("div", "meta");
  meta.append(el("span", "", `#${r.id}`), el("span", "", clock(r.time)), el("span", "", r.api));
  if (r.conversation) meta.append(el("span", "conv", r.conversation.key));
  if (state.view === "operator" && r.tenant) meta.append(el("span", "tenant", `tenant ${r.tenant}`));
  if (prev && prev.boot !== r.boot) meta.append(el("span", "restart", "after a restart"));
  const nums = el("div", "nums");
  const cached = r.prompt_tokens - (r.prefilled_tokens ?? r.prompt_tokens);
  nums.append(el("span", "", `${fmt(r.prompt_tokens)} prompt`), el("span", "", `${fmt(cached)} cached`),
    el("span", "ttft", `TTFT ${r.ttft_ms !== undefined ? fmt(r.ttft_ms) + " ms" : "–"}`),
    el("span", "speed", `${r.decode_tok_s ? fmt(r.decode_tok_s) : "–"} tok/s`),
    el("span", `finish finish-${r.finish}`, r.finish));
  row.append(meta, barFor(r, scale), nums);
  if (r.first_difference) row.append(el("div", "why", missText(r.first_difference)));
  if (r.finish === "refused" && r.error) row.append(el("div", "why", r.error));
  row.addEventListener("click", () => select(r.id));
  return row;
}

function renderRequests(list) {
  const box = $("#requests");
  box.replaceChildren();
  $("#req-count").textContent = list.length ? `${list.length} shown, newest first` : "";
  if (!list.length) { box.append(el("p", "empty", "No requests yet.")); return; }
  const scale = Math.max(...list.map((r) => r.prompt_tokens), 1);
  for (let i = list.length - 1; i >= 0; i--) box.append(requestRow(list[i], scale, list[i - 1]));
}

// ---- the selected request -------------------------------------------------

function select(id) {
  state.selected = id;
  render(true);
}

function renderDetail() {
  const r = state.records.get(state.selected), box = $("#detail");
  box.hidden = !r;
  if (!r) return;
  box.dataset.id = r.id;
  $("#detail-id").textContent = `#${r.id}`;
  const facts = $("#detail-facts");
  facts.replaceChildren();
  const add = (k, v) => {
    const dd = el("dd", "", v);
    dd.dataset.fact = k;
    facts.append(el("dt", "", k), dd);
  };
  add("conversation", r.conversation ? `${r.conversation.key} (${r.conversation.from})` : "–");
  add("prompt", `${fmt(r.prompt_tokens)} tokens`);
  for (const s of segments(r)) add(s.tier, `${fmt(s.tokens)} tokens`);
  const end = r.prompt_tokens - (r.prefilled_tokens ?? r.prompt_tokens), at = roleAt(r, end);
  add("cached prefix ends", `token ${fmt(end)}${at.message >= 0 ? `, in message ${at.message} (${at.role})` : ""}`);
  if (r.first_difference) add("first difference", missText(r.first_difference));
  add("TTFT", r.ttft_ms !== undefined ? `${fmt(r.ttft_ms)} ms (queue ${fmt(r.queue_ms)}, load ${fmt(r.load_ms)}, prefill ${fmt(r.prefill_ms)})` : "–");
  add("decode", r.decode_ms !== undefined ? `${fmt(r.generated_tokens)} tokens in ${fmt(r.decode_ms)} ms` : "–");
  add("finish", r.finish + (r.error ? `: ${r.error}` : ""));
  if (r.blocks) add("blocks", `${r.blocks.attached} attached, ${r.blocks.published} published, tail ${r.blocks.tail_tokens} tokens`);
  if (r.retain && r.retain.length) add("retention marks", r.retain.map((m) => `to ${m.end} for ${m.ttl_s} s`).join(", "));
  if (r.snapshot) add("snapshots", `resumed at ${r.snapshot.restored} from ${r.snapshot.from}; stored ${r.snapshot.stored_total}`);
  if (r.window) add("window", `${r.window.reloaded_blocks} blocks reloaded, ${r.window.cut_tokens} tokens cut`);
  if (r.held_out) add("held out", r.held_out);
  if (r.ignored) add("ignored", r.ignored);
  const ex = r.excerpt, exBox = $("#excerpt");
  exBox.hidden = !ex;
  if (ex) {
    exBox.querySelector(".before").textContent = ex.before;
    exBox.querySelector(".was").textContent = ex.was;
    exBox.querySelector(".now").textContent = ex.now;
  }
  const ol = $("#detail-messages");
  ol.replaceChildren();
  (r.messages || []).forEach((m, k) => {
    const li = el("li", "", `${m.role}, ends at token ${fmt(m.end)}`);
    li.dataset.role = m.role;
    if (r.first_difference && r.first_difference.message === k) li.classList.add("diff");
    ol.append(li);
  });
}

// ---- conversations ------------------------------------------------------------

function renderConversations(list) {
  const groups = new Map();
  for (const r of list) {
    const key = r.conversation?.key || "(unnamed)";
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(r);
  }
  const box = $("#conversations");
  box.replaceChildren();
  if (!groups.size) { box.append(el("p", "empty", "None yet.")); return; }
  const scale = Math.max(...list.map((r) => r.prompt_tokens), 1);
  for (const [key, turns] of [...groups].reverse()) {
    const c = el("div", "conv");
    c.dataset.key = key;
    c.dataset.turns = turns.length;
    const hits = turns.filter((t) => t.cached_tokens).map((t) => 1 - (t.prefilled_tokens / Math.max(1, t.prompt_tokens)));
    const avg = hits.length ? hits.reduce((a, b) => a + b, 0) / hits.length : 0;
    c.append(el("div", "conv-key", `${key} · ${turns.length} turns · ${Math.round(100 * avg)}% from cache`));
    const row = el("div", "turns");
    turns.forEach((t, i) => {
      if (i > 0 && turns[i - 1].boot !== t.boot) {
        const b = el("div", "boot-mark");
        b.dataset.restart = t.boot;
        b.title = "server restarted";
        row.append(b);
      }
      const col = el("div", "turn");
      col.dataset.id = t.id;
      col.style.height = `${Math.max(4, (100 * t.prompt_tokens) / scale)}%`;
      if (t.first_difference) col.classList.add("missed");
      col.title = `#${t.id}: ${fmt(t.prompt_tokens)} tokens${t.first_difference ? "; " + missText(t.first_difference) : ""}`;
      for (const s of t.cached_tokens ? segments(t) : []) {
        const seg = el("div", `seg seg-${s.tier}`);
        seg.style.height = `${(100 * s.tokens) / Math.max(1, t.prompt_tokens)}%`;
        col.append(seg);
      }
      col.addEventListener("click", () => select(t.id));
      row.append(col);
    });
    c.append(row);
    box.append(c);
  }
}

// ---- tiers ----------------------------------------------------------------------

function spark(values) {
  const ns = "http://www.w3.org/2000/svg", svg = document.createElementNS(ns, "svg");
  svg.setAttribute("class", "spark");
  svg.setAttribute("viewBox", "0 0 100 40");
  svg.setAttribute("preserveAspectRatio", "none");
  const line = document.createElementNS(ns, "polyline");
  const n = Math.max(2, values.length);
  line.setAttribute("points", values.map((v, i) => `${(100 * i) / (n - 1)},${38 - 36 * v}`).join(" "));
  svg.append(line);
  return svg;
}

function sample(t) {
  const ev = {};
  for (const k of Object.keys(t)) if (t[k] && t[k].evicted_blocks !== undefined) ev[k] = t[k].evicted_blocks;
  state.samples.push({ t: Date.now() / 1000, hit: t.totals.hit_tokens, prefilled: t.totals.prefilled_tokens, evicted: ev });
  if (state.samples.length > HISTORY) state.samples.shift();
}

// Evictions per minute over the samples of the last minute.
function evictionsPerMin(tier) {
  const s = state.samples, now = s[s.length - 1];
  if (!now) return 0;
  const then = s.find((x) => x.t >= now.t - 60) || s[0];
  const dt = Math.max(1, now.t - then.t);
  return ((now.evicted[tier] || 0) - (then.evicted[tier] || 0)) * 60 / dt;
}

// The tiers' hit rate over time: between two polls, the share of prompt
// tokens that came from any tier (polls without traffic left out).
function tierHitRate() {
  const out = [], s = state.samples;
  for (let i = 1; i < s.length; i++) {
    const hit = s[i].hit - s[i - 1].hit, computed = s[i].prefilled - s[i - 1].prefilled;
    if (hit + computed > 0) out.push(hit / (hit + computed));
  }
  return out;
}

// Hit rate (share of prompt tokens from any tier) per finished request, in order.
function hitSeries(list) {
  return list.filter((r) => r.cached_tokens && r.prompt_tokens > 0).map((r) => 1 - r.prefilled_tokens / r.prompt_tokens);
}

function tierBox(name, t) {
  const box = el("div", `tier tier-${name}`);
  box.id = `tier-${name}`;
  box.dataset.tier = name;
  box.dataset.bytes = t.bytes ?? "";
  box.dataset.blocks = t.blocks ?? "";
  const title = { live: "live pool", disk: "disk", redis: "Redis (shared)" }[name] || name;
  box.append(el("h3", "", title));
  if (t.budget_bytes) {
    const g = el("div", "gauge"), i = el("i");
    i.style.width = `${Math.min(100, (100 * t.bytes) / t.budget_bytes)}%`;
    g.append(i);
    box.append(g);
  }
  const kv = el("div", "kv");
  const item = (k, v) => { const s = el("span"); s.append(el("b", "", v), ` ${k}`); kv.append(s); };
  if (t.budget_bytes) item(`of ${bytes(t.budget_bytes)}`, bytes(t.bytes));
  if (t.blocks !== undefined) item("blocks", fmt(t.blocks));
  item("tokens hit", fmt(t.hit_tokens));
  if (t.evicted_blocks !== undefined) item("evictions/min", fmt(evictionsPerMin(name)));
  if (t.evicted_retained) item("evicted under a retention mark", fmt(t.evicted_retained));
  if (t.up !== undefined) item("", t.up ? "up" : "down");
  box.append(kv);
  return box;
}

// A tenant's view: its own requests' tokens by tier (the counters of the
// tiers themselves count every tenant's, so they are the operator's).
function ownTiers(list) {
  const sum = {};
  for (const r of list) for (const s of r.cached_tokens ? segments(r) : []) sum[s.tier] = (sum[s.tier] || 0) + s.tokens;
  const kv = el("div", "kv");
  kv.id = "own-tiers";
  for (const [tier, n] of Object.entries(sum)) {
    const s = el("span");
    s.dataset.tier = tier;
    s.dataset.tokens = n;
    s.append(el("b", "", fmt(n)), ` tokens ${tier === "computed" ? "computed" : "from " + tier}`);
    kv.append(s);
  }
  return kv;
}

function renderTiers(tiers, list) {
  const box = $("#tiers");
  box.replaceChildren();
  const hs = hitSeries(list);
  const h = el("div", "hitrate");
  h.id = "hit-rate";
  h.dataset.last = hs.length ? hs[hs.length - 1].toFixed(3) : "";
  h.append(el("h3", "", `Hit rate per request (${hs.length ? Math.round(100 * hs[hs.length - 1]) + "% last" : "none yet"})`), spark(hs));
  box.append(h);
  if (!tiers) {
    box.append(ownTiers(list),
      el("p", "sub", "The tiers' counters are the operator's: open this page with the key of /metrics."));
    return;
  }
  const rate = tierHitRate(), r = el("div", "hitrate");
  r.id = "tier-hit-rate";
  r.dataset.samples = rate.length;
  r.dataset.max = rate.length ? Math.max(...rate).toFixed(3) : "";
  r.append(el("h3", "", "Hit rate of every tenant's prompt tokens, per poll with traffic"),
    rate.length ? spark(rate) : el("p", "sub", "(no traffic since this page opened)"));
  box.append(r);
  for (const name of ["live", "disk", "redis"]) if (tiers[name]) box.append(tierBox(name, tiers[name]));
  const marks = list.filter((r) => r.retain && r.retain.length);
  const m = el("div", "kv");
  m.id = "retention";
  m.append(el("span", "", `${marks.length} of the requests shown set retention marks`));
  box.append(m);
  if (tiers.snapshots) {
    const s = tiers.snapshots, b = el("div", "tier");
    b.id = "tier-snapshots";
    Object.assign(b.dataset, { entries: s.entries, stored: s.stored, restored: s.restored, evicted: s.evicted });
    b.append(el("h3", "", "recurrent-state snapshots"),
      el("div", "kv", `${fmt(s.entries)} held (${bytes(s.bytes)}), ${fmt(s.stored)} stored, ${fmt(s.restored)} restored, ${fmt(s.evicted)} evicted`));
    box.append(b);
  }
  if (tiers.window) {
    const w = tiers.window, b = el("div", "tier");
    b.id = "tier-window";
    Object.assign(b.dataset, { reloaded: w.reloaded_blocks, cut: w.cut_tokens, refilled: w.refilled_blocks });
    b.append(el("h3", "", "sliding window"),
      el("div", "kv", `${fmt(w.reloaded_blocks)} blocks reloaded, ${fmt(w.cut_tokens)} tokens cut, ${fmt(w.refilled_blocks)} refilled`));
    box.append(b);
  }
}

// ---- polling ----------------------------------------------------------------------

let lastTiers = null;

// Redraws the requests and conversations only when records changed (or
// a click changed the selection); the tiers every poll (rates move).
let drawn = -1;
function render(force) {
  const list = [...state.records.values()].sort((a, b) => a.id - b.id);
  if (force || drawn !== state.rev) {
    renderRequests(list);
    renderDetail();
    renderConversations(list);
    drawn = state.rev;
  }
  renderTiers(lastTiers, list);
}

function merge(s) {
  document.body.dataset.view = state.view = s.view;
  state.cap = s.records || state.cap;
  $("#model").textContent = `${s.model} (${s.arch})`;
  $("#who").textContent = s.view === "operator" ? "operator view: every tenant" : `tenant ${s.tenant || "(no key)"}`;
  for (const r of s.requests) state.records.set(r.id, r);
  const ids = [...state.records.keys()].sort((a, b) => a - b);
  for (const id of ids.slice(0, Math.max(0, ids.length - state.cap))) state.records.delete(id);
  state.rev = s.rev;
  lastTiers = s.tiers || null;
  if (lastTiers) sample(lastTiers);
}

function status(kind, text) {
  const s = $("#status");
  s.dataset.state = kind;
  s.textContent = text;
}

async function poll() {
  let wait = POLL_MS;
  try {
    // from the origin: a page opened as http://user:key@host/ui has a base
    // URL with credentials, which fetch refuses (the browser sends the key
    // it was given for /ui by itself)
    const res = await fetch(new URL(`/ui/state?since=${state.rev}`, location.origin), { cache: "no-store" });
    if (res.status === 401) throw new Error("this page needs an API key (reload and give it as the password)");
    if (!res.ok) throw new Error(`state: HTTP ${res.status}`);
    let s = await res.json();
    if (state.boot !== undefined && (s.boot !== state.boot || s.rev < state.rev)) {
      // a restarted server: its revisions count afresh, ask for everything
      state.records.clear();
      state.rev = 0;
      drawn = -1;
      const again = await fetch(new URL("/ui/state", location.origin), { cache: "no-store" });
      if (!again.ok) throw new Error(`state: HTTP ${again.status}`);
      s = await again.json();
    }
    state.boot = s.boot;
    merge(s);
    render();
    status("live", `live · ${new Date().toLocaleTimeString()}`);
    document.body.dataset.polls = Number(document.body.dataset.polls) + 1;
  } catch (e) {
    status("error", String(e.message || e));
    wait = 2 * POLL_MS;
  }
  setTimeout(poll, wait);
}

poll();
