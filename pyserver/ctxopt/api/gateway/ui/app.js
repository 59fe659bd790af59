// The ctxopt dashboard: reads /ui/api/* and draws with plain SVG (no library, no CDN).
// Text from the server (session ids, snippets, previews) only ever goes in as text nodes.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const DAY_MS = 86400000;
const state = { session: null };

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
  for (const child of children) node.append(child);
  return node;
}

function svgEl(tag, attrs) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  return node;
}

const int = (n) => Number(n).toLocaleString("en-US");
const usd = (n) => (n < 0 ? "-$" : "$") + Math.abs(Number(n)).toFixed(4);
const share = (saved, sent) => (sent ? ((100 * saved) / sent).toFixed(1) + "%" : "-");

async function api(path, options) {
  const response = await fetch("api/" + path, options);
  const body = await response.json();
  if (!response.ok) throw new Error(body.error ? body.error.message : response.statusText);
  return body;
}

function sinceMs() {
  const days = Number(document.getElementById("since").value);
  return days ? Date.now() - days * DAY_MS : 0;
}

function usageQuery(by) {
  const tz = -new Date().getTimezoneOffset();
  return `usage?by=${by}&since=${sinceMs()}&tz=${tz}`;
}

function card(label, value, id) {
  return el("div", { class: "card", id }, el("div", { class: "label" }, label), el("div", { class: "value" }, value));
}

function renderTotals(total) {
  const box = document.getElementById("totals");
  box.replaceChildren(
    card("calls", int(total.calls), "total-calls"),
    card("optimized", int(total.calls_optimized), "total-optimized"),
    card("tokens sent", int(total.tokens_sent), "total-sent"),
    card("tokens forwarded", int(total.tokens_forwarded), "total-forwarded"),
    card("tokens saved", `${int(total.tokens_saved)} (${share(total.tokens_saved, total.tokens_sent)})`, "total-saved"),
    card("input billed", total.priced_calls ? usd(total.billed_input_usd) : "-", "total-billed"),
    card("saved", total.priced_calls ? usd(total.saved_usd) : "-", "total-saved-usd"),
  );
}

// Axes and a frame: returns x and y scales for the plot area.
function frame(svg, count, max) {
  svg.replaceChildren();
  const width = svg.clientWidth || 800;
  const height = svg.clientHeight || 220;
  const left = 64, right = 12, top = 10, bottom = 26;
  const y = (v) => top + (height - top - bottom) * (1 - v / (max || 1));
  const step = (width - left - right) / Math.max(count, 1);
  const x = (i) => left + step * i;
  for (const tick of [0, 0.5, 1]) {
    svg.append(svgEl("line", { x1: left, x2: width - right, y1: y(max * tick), y2: y(max * tick), stroke: "#e4e7ec" }));
    const label = svgEl("text", { x: left - 6, y: y(max * tick) + 4, "text-anchor": "end" });
    label.textContent = int(Math.round(max * tick));
    svg.append(label);
  }
  return { x, y, step, height, bottom };
}

function renderDaily(rows) {
  const svg = document.getElementById("daily");
  const max = Math.max(1, ...rows.map((r) => r.tokens_sent));
  const { x, y, step, height } = frame(svg, rows.length, max);
  rows.forEach((row, i) => {
    const width = Math.min(48, Math.max(2, step * 0.7));
    for (const [kind, value] of [["sent", row.tokens_sent], ["forwarded", row.tokens_forwarded]]) {
      const bar = svgEl("rect", { class: `bar-${kind}`, x: x(i) + (step - width) / 2, y: y(value), width, height: Math.max(0, y(0) - y(value)) });
      bar.append(svgEl("title", {}));
      bar.firstChild.textContent = `${row.key}: ${int(value)} ${kind}`;
      svg.append(bar);
    }
    const label = svgEl("text", { x: x(i) + step / 2, y: height - 8, "text-anchor": "middle" });
    label.textContent = row.key;
    svg.append(label);
  });
}

function renderSessions(rows) {
  const body = document.querySelector("#sessions tbody");
  body.replaceChildren(
    ...rows.map((row) => {
      const tr = el(
        "tr",
        { "data-session": row.key },
        el("td", {}, el("code", {}, row.key)),
        el("td", { class: "num" }, int(row.calls)),
        el("td", { class: "num" }, int(row.calls_optimized)),
        el("td", { class: "num" }, int(row.tokens_sent)),
        el("td", { class: "num" }, int(row.tokens_forwarded)),
        el("td", { class: "num" }, `${int(row.tokens_saved)} (${share(row.tokens_saved, row.tokens_sent)})`),
        el("td", { class: "num" }, row.priced_calls ? usd(row.saved_usd) : "-"),
      );
      tr.addEventListener("click", () => openSession(row.key));
      if (row.key === state.session) tr.classList.add("selected");
      return tr;
    }),
  );
}

function renderCalls(calls) {
  const svg = document.getElementById("prompt-chart");
  const max = Math.max(1, ...calls.map((c) => c.sent));
  const { x, y, step } = frame(svg, calls.length, max);
  for (const kind of ["sent", "forwarded"]) {
    const points = calls.map((c, i) => `${x(i) + step / 2},${y(c[kind])}`).join(" ");
    svg.append(svgEl("polyline", { class: `line-${kind}`, points }));
    calls.forEach((c, i) => {
      const dot = svgEl("circle", { class: `dot-${kind}`, cx: x(i) + step / 2, cy: y(c[kind]), r: 3, "data-call": i });
      dot.append(svgEl("title", {}));
      dot.firstChild.textContent = `call ${i + 1} (${c.outcome}): ${int(c[kind])} ${kind}`;
      svg.append(dot);
    });
  }
}

function renderPlan(plan) {
  const summary = document.getElementById("plan-summary");
  const body = document.querySelector("#decisions tbody");
  if (!plan.found) {
    summary.textContent = "No collection has run on this session since the server started.";
    body.replaceChildren();
    return;
  }
  const when = new Date(plan.planned_ms).toLocaleString();
  summary.textContent = `${when}: ${int(plan.tokens_before)} → ${int(plan.tokens_after)} tokens (target ${int(plan.target_tokens)})${plan.dry_run ? ", dry run" : ""}; ${int(plan.decisions)} chunks trimmed, masked or stashed, the largest first:`;
  body.replaceChildren(
    ...plan.chunks.map((c) =>
      el(
        "tr",
        { "data-action": c.action },
        el("td", {}, el("code", {}, c.chunk_id)),
        el("td", {}, c.kind),
        el("td", { class: "num" }, int(c.tokens)),
        el("td", { class: "num" }, int(c.tokens_after)),
        el("td", { class: "action" }, c.action),
        el("td", { class: "reasons" }, c.reasons.join(", ")),
        el("td", { class: "preview" }, c.preview),
      ),
    ),
  );
}

async function searchStash(event) {
  if (event) event.preventDefault();
  const query = document.getElementById("stash-query").value;
  const found = await api(`stash?session=${encodeURIComponent(state.session)}&q=${encodeURIComponent(query)}`);
  const list = document.getElementById("hits");
  if (!found.hits.length) {
    list.replaceChildren(el("li", { class: "muted" }, "nothing stashed matches"));
    return;
  }
  list.replaceChildren(
    ...found.hits.map((hit) => {
      const button = el("button", { type: "button", "data-chunk": hit.chunk_id }, "Restore");
      button.addEventListener("click", () => restore(hit.chunk_id, button));
      const about = el("div", { class: "muted" }, `${hit.chunk_id} · ${hit.kind} · ${int(hit.tokens)} tokens · ${hit.action}`);
      return el("li", { "data-hit": hit.chunk_id }, el("div", { class: "snippet" }, about, hit.snippet), button);
    }),
  );
}

async function restore(chunkId, button) {
  const status = document.getElementById("restore-status");
  button.disabled = true;
  try {
    const done = await api("restore", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ session: state.session, chunk_ids: [chunkId] }),
    });
    status.textContent = `restored ${done.restored.join(", ")}; the session holds ${int(done.session_tokens)} tokens`;
  } catch (error) {
    status.textContent = `not restored: ${error.message}`;
    button.disabled = false;
  }
}

async function openSession(session) {
  state.session = session;
  document.getElementById("session-view").hidden = false;
  document.getElementById("session-name").textContent = session;
  for (const row of document.querySelectorAll("#sessions tbody tr")) {
    row.classList.toggle("selected", row.dataset.session === session);
  }
  const encoded = encodeURIComponent(session);
  const [calls, plan] = await Promise.all([api(`calls?session=${encoded}`), api(`plan?session=${encoded}`)]);
  renderCalls(calls.calls);
  renderPlan(plan);
  document.getElementById("hits").replaceChildren();
  document.getElementById("restore-status").textContent = "";
}

async function refresh() {
  const status = document.getElementById("status");
  try {
    const [days, sessions] = await Promise.all([api(usageQuery("day")), api(usageQuery("session"))]);
    renderTotals(days.total);
    renderDaily(days.rows);
    renderSessions(sessions.rows);
    status.textContent = `prices checked ${days.prices_checked} · updated ${new Date().toLocaleTimeString()}`;
    document.body.dataset.loaded = "true";
  } catch (error) {
    status.textContent = `cannot read the ledger: ${error.message}`;
  }
}

const REFRESH_MS = 30000; // the totals and charts follow the agent's calls
document.getElementById("since").addEventListener("change", refresh);
setInterval(refresh, REFRESH_MS);
document.getElementById("stash-form").addEventListener("submit", searchStash);
refresh();
