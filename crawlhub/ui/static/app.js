// crawlhub ui: the page's script. Live data comes from the server's event stream (one "status" event per
// interval); charts are SVG drawn by the server (the HTML report's), fetched every few seconds. Text from
// the crawl (URLs, errors, seeds) is always set as text, never as HTML.
"use strict";

const $ = (id) => document.getElementById(id);
let spider = null;
let source = null;
let chartTimer = null;
let listKind = null;

async function api(path, body) {
  const options = body === undefined ? {} : {
    method: "POST", body: JSON.stringify(body),
    headers: {"Content-Type": "application/json", "X-Crawlhub": "1"},
  };
  const response = await fetch(path, {credentials: "same-origin", ...options});
  if (!response.ok) throw new Error(`${response.status}: ${(await response.text()).slice(0, 300)}`);
  return response.json();
}

function problem(text) {
  $("problem").hidden = !text;
  $("problem").textContent = text || "";
}

const num = (n) => (n === null || n === undefined ? "-" : Number(n).toLocaleString("en"));
const ms = (v) => (v === null || v === undefined ? "-" : v === "inf" ? ">30s" : `${Math.round(v)}ms`);

function duration(seconds) {
  if (seconds === null || seconds === undefined) return "unknown";
  const s = Math.round(seconds);
  if (s >= 3600) return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
  return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
}

function fill(table, rows, classes) {
  const body = $(table).tBodies[0];
  body.replaceChildren(...rows.map((cells, i) => {
    const tr = document.createElement("tr");
    if (classes && classes[i]) tr.className = classes[i];
    for (const cell of cells) {
      const td = document.createElement("td");
      if (cell instanceof Node) td.append(cell); else td.textContent = cell === null || cell === undefined ? "" : String(cell);
      tr.append(td);
    }
    return tr;
  }));
}

function render(d) {
  const items = d.items || {};
  const state = $("state");
  state.textContent = d.paused ? "paused" : d.workers_alive ? "running" : d.state === "done" ? "done" : "no worker alive";
  state.className = "badge" + (d.paused ? " paused" : d.workers_alive ? "" : " idle");
  for (const [id, value] of [["seeds", d.seeds], ["queued", d.queued], ["inflight", d.inflight], ["delayed", d.delayed],
                             ["seen", d.seen], ["dlq", d.dlq], ["bad-seeds", d.bad_seeds], ["stored", d.stored],
                             ["quarantined", items.quarantined], ["workers-alive", d.workers_alive],
                             ["workers-dead", d.workers_dead], ["due", items.revisit ? items.revisit.due_now : null]]) {
    $(id).textContent = num(value);
  }
  $("rate").textContent = Number(d.pages_per_min_1m).toFixed(1);
  $("eta").textContent = duration(d.eta_seconds);
  const t = d.totals;
  $("totals").textContent = `${num(t.requests)} attempts: 2xx ${num(t["2xx"])}, 3xx ${num(t["3xx"])}, 4xx ${num(t["4xx"])}, ` +
    `5xx ${num(t["5xx"])}, errors ${num(t.error)}; ${num(t.retries)} retries; latency p50 ${ms(d.latency_ms.p50)}, ` +
    `p95 ${ms(d.latency_ms.p95)}` + (d.budget ? `; budget ${num(d.budget_used)} of ${num(d.budget)}` : "") +
    (items.error ? `; ${items.error}` : items.database ? `; database ${items.database}` : "");
  const domains = [...d.domains].sort((a, b) => b.requests - a.requests).slice(0, 50);
  fill("domains", domains.map((r) => [r.domain, num(r.queued), num(r.requests), num(r["2xx"]), num(r["3xx"]), num(r["4xx"]),
    num(r["5xx"]), num(r.error), r.success_rate === null ? "-" : `${(r.success_rate * 100).toFixed(1)}%`, ms(r.p50_ms),
    ms(r.p95_ms)]));
  fill("workers", d.workers.map((w) => [w.worker, w.host || "", w.state, num(w.pages), num(w.items),
    `${Math.max(0, Math.round(d.time - w.last_beat))}s ago`, (w.capabilities || []).join(", ")]),
    // red only for a worker that died (silent while running); one that finished, or stopped, is grey
    d.workers.map((w) => (w.alive ? "" : w.state === "dead" ? "dead" : "finished")));
  fill("items", Object.entries(items.stored || {}).concat([["quarantine", items.quarantined || 0]])
    .map(([name, n]) => [name, num(n)]));
  fill("proxies", (d.proxies || []).map((p) => [p.id, p.pool || "", p.state, num(p.ok), num(p.failures), p.last_error || ""]));
  fill("ladder", d.ladder_rows || []);
  // red: a lane with work that no live worker takes (crawlhub.roles)
  fill("lanes", (d.lanes || []).map((l) => [l.lane, num(l.queued), num(l.domains), l.workers.length ? l.workers.join(", ") : "none"]),
    (d.lanes || []).map((l) => (l.workers.length ? "" : "dead")));
  fill("log", (d.log || []).map((e) => [new Date(e.time * 1000).toLocaleTimeString(), e.status === null ? `ERR ${e.error}` : e.status,
    Math.round(e.ms), num(e.bytes), e.worker, e.url + (e.proxy ? ` via ${e.proxy}` : "") + (e.browser ? " [browser]" : "")]));
  renderQuality(d.quality);
  $("updated").textContent = `updated ${new Date(d.time * 1000).toLocaleTimeString()}`;
}

function pct(v) { return v === null || v === undefined ? "-" : `${(v * 100).toFixed(1)}%`; }

function renderQuality(q) {
  if (!q) return;
  const badge = $("quality-score");
  badge.textContent = q.cycle.id ? `${q.score} / 100` : "no figures yet";
  badge.className = "badge" + (q.healthy ? "" : " paused");
  $("quality-summary").textContent = `cycle ${q.cycle.id || "-"}; baseline ${q.baseline_cycle ? q.baseline_cycle.id : "none"}; ` +
    `${q.events.length} open event(s), ${num(q.broken_pages)} broken page(s); valid ${pct(q.valid_share)}`;
  fill("quality-events", q.events.map((e) => [new Date(e.since * 1000).toLocaleString(), e.what, e.why, e.example || ""]));
  fill("quality-coverage", Object.entries(q.coverage).map(([name, c]) => [name, pct(c.share), pct(c.baseline), pct(c.floor)]),
    Object.values(q.coverage).map((c) => (c.reference && c.share < c.reference ? "dead" : "")));
  fill("quality-patterns", Object.entries(q.patterns).map(([p, v]) => [p, num(v.pages), v.per_page,
    v.baseline_per_page === null ? "-" : v.baseline_per_page]));
}

async function charts() {
  if (!spider) return;
  try {
    const c = await api(`/api/spiders/${encodeURIComponent(spider)}/charts`);
    // SVG drawn by crawlhub's own server (its labels escaped there)
    $("chart-pages").innerHTML = c.pages;
    $("chart-codes").innerHTML = c.codes;
    $("chart-latency").innerHTML = c.latency;
  } catch (err) {
    problem(`charts: ${err.message}`);
  }
}

function watch(name) {
  spider = name;
  if (location.hash !== `#${name}`) history.replaceState(null, "", `${location.pathname}#${encodeURIComponent(name)}`);
  if (source) source.close();
  source = new EventSource(`/api/spiders/${encodeURIComponent(name)}/events`);
  source.addEventListener("status", (event) => { problem(""); render(JSON.parse(event.data)); });
  source.addEventListener("problem", (event) => problem(JSON.parse(event.data).error));
  source.onerror = () => problem("connection to crawlhub ui lost; reconnecting...");
  clearInterval(chartTimer);
  charts();
  chartTimer = setInterval(charts, 5000);
}

async function steer(action) {
  try {
    const answer = await api(`/api/spiders/${encodeURIComponent(spider)}/${action}`, {});
    $("state").textContent = answer.paused ? "paused" : "running";
    $("state").className = "badge" + (answer.paused ? " paused" : "");
  } catch (err) {
    problem(`${action}: ${err.message}`);
  }
}

const LISTS = {
  dlq: {title: "Dead letters", path: "dlq", head: ["URL", "attempts", "last status or error", "last attempt", ""],
        cells: (e) => [e.url, e.attempts, e.status ? `HTTP ${e.status}` : e.error,
                       new Date(e.last_attempt * 1000).toLocaleString()]},
  "bad-seeds": {title: "Bad seeds", path: "bad-seeds", head: ["seed", "reason", "when", ""],
                cells: (e) => [e.seed, e.reason, e.at ? new Date(e.at * 1000).toLocaleString() : ""]},
  quarantine: {title: "Quarantined items", path: "quarantine", head: ["page", "item", "reasons", "when", ""],
               cells: (e) => [e.page || "", e.item_type || "", e.reasons.join("; "),
                              e.at ? new Date(e.at).toLocaleString() : ""]},
};

async function openList(kind) {
  listKind = kind;
  const list = LISTS[kind];
  $("list-title").textContent = `${list.title} of ${spider}`;
  const head = document.createElement("tr");
  head.replaceChildren(...list.head.map((h) => Object.assign(document.createElement("th"), {textContent: h})));
  $("list").tHead.replaceChildren(head);
  try {
    const data = await api(`/api/spiders/${encodeURIComponent(spider)}/${list.path}`);
    $("list-note").textContent = `${data.total} in all` + (data.total > data.entries.length ? `, the newest ${data.entries.length} shown` : "");
    fill("list", data.entries.map((e) => {
      const button = Object.assign(document.createElement("button"), {type: "button", textContent: "Requeue"});
      button.addEventListener("click", () => requeue({ids: [e.id]}));
      return [...list.cells(e), button];
    }));
  } catch (err) {
    $("list-note").textContent = err.message;
  }
  if (!$("list-dialog").open) $("list-dialog").showModal();
}

async function requeue(body) {
  try {
    const answer = await api(`/api/spiders/${encodeURIComponent(spider)}/${LISTS[listKind].path}/requeue`, body);
    $("list-note").textContent = `${answer.requeued} requeued`;
  } catch (err) {
    $("list-note").textContent = err.message;
  }
  await openList(listKind);
}

async function start() {
  // opened as /?token=...: the server has set its cookie; the token leaves the address bar and the history entry
  const query = new URLSearchParams(location.search);
  if (query.has("token")) {
    query.delete("token");
    history.replaceState(null, "", location.pathname + (query.toString() ? `?${query}` : "") + location.hash);
  }
  $("pause").addEventListener("click", () => steer("pause"));
  $("resume").addEventListener("click", () => steer("resume"));
  $("open-dlq").addEventListener("click", (event) => { event.preventDefault(); openList("dlq"); });
  $("open-bad-seeds").addEventListener("click", (event) => { event.preventDefault(); openList("bad-seeds"); });
  $("open-quarantine").addEventListener("click", (event) => { event.preventDefault(); openList("quarantine"); });
  $("requeue-all").addEventListener("click", () => requeue({all: true}));
  $("close-list").addEventListener("click", () => $("list-dialog").close());
  $("spider").addEventListener("change", (event) => watch(event.target.value));
  try {
    // the first state came with the page (rendered now, before the event stream's first update)
    const block = $("initial");
    const initial = block ? JSON.parse(block.textContent) : {};
    if (initial.error) problem(initial.error);
    const {spiders, default: first} = initial.spiders ? initial : await api("/api/spiders");
    const wanted = decodeURIComponent(location.hash.slice(1));
    const names = spiders.map((s) => s.spider);
    $("spider").replaceChildren(...spiders.map((s) => Object.assign(document.createElement("option"), {
      value: s.spider, textContent: s.spider + (s.has_frontier ? "" : " (no crawl)")})));
    // the spider in the address, else the one with live workers (or the last heard from: the server's choice)
    const chosen = names.includes(wanted) ? wanted : first || (spiders[0] || {}).spider;
    if (!chosen) return problem("this project has no spider");
    $("spider").value = chosen;
    if (initial.status && chosen === first) render(initial.status);
    watch(chosen);
  } catch (err) {
    problem(err.message);
  }
}

start();
