// See status_page.hpp. The page is one raw string: HTML, its style and its script.

#include "status_page.hpp"

namespace sluice::dataflow::detail {

namespace {

constexpr std::string_view page = R"page(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>sluice job</title>
<style>
:root { --fg:#1d2330; --muted:#667085; --line:#d9dee7; --bg:#f6f7f9; --card:#fff; --ok:#2e7d32; --bad:#c62828;
        --warn:#ef6c00; --accent:#1e5aa8; --align:#8e5bd6; --write:#1e88e5; --fsync:#00897b; --delay:#9e9e9e; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.4 "DejaVu Sans", system-ui, sans-serif; color:var(--fg); background:var(--bg); }
header { display:flex; flex-wrap:wrap; gap:18px; align-items:baseline; padding:14px 22px; background:#14213d; color:#fff; }
header h1 { margin:0; font-size:20px; }
header .kv { color:#c8d1e0; } header .kv b { color:#fff; font-weight:600; }
.pill { padding:2px 10px; border-radius:10px; font-weight:600; background:var(--ok); color:#fff; }
.pill.draining, .pill.starting { background:var(--warn); } .pill.stopping, .pill.ended { background:var(--bad); }
#ended { display:none; margin:12px 22px 0; padding:10px 14px; border-radius:6px; background:#fdecea; color:var(--bad);
         border:1px solid #f5c2c0; font-weight:600; }
main { padding:8px 22px 30px; display:grid; grid-template-columns: 1fr; gap:16px; }
section { background:var(--card); border:1px solid var(--line); border-radius:8px; padding:12px 16px; }
section h2 { margin:0 0 8px; font-size:15px; }
.row { display:flex; flex-wrap:wrap; gap:16px; }
.row > * { flex:1 1 420px; min-width:0; }
table { border-collapse:collapse; width:100%; font-variant-numeric:tabular-nums; }
th, td { text-align:right; padding:3px 8px; border-bottom:1px solid var(--line); white-space:nowrap; }
th:first-child, td:first-child { text-align:left; }
th { color:var(--muted); font-weight:600; font-size:12px; }
td.bad { color:var(--bad); font-weight:600; } td.ok { color:var(--ok); }
.cards { display:flex; flex-wrap:wrap; gap:10px; margin-bottom:10px; }
.card { border:1px solid var(--line); border-radius:6px; padding:6px 12px; min-width:110px; }
.card .n { font-size:20px; font-weight:700; } .card .l { color:var(--muted); font-size:12px; }
.card.bad .n { color:var(--bad); }
svg text { font:11px "DejaVu Sans", sans-serif; fill:var(--fg); }
svg .axis { stroke:var(--line); } svg .muted { fill:var(--muted); }
.legend { color:var(--muted); font-size:12px; } .legend i { display:inline-block; width:10px; height:10px; margin:0 4px 0 10px; border-radius:2px; }
.bar { height:10px; border-radius:2px; background:#e8ecf2; position:relative; min-width:120px; }
.bar span { position:absolute; top:0; bottom:0; left:0; border-radius:2px; background:var(--accent); }
.stack { display:flex; height:12px; min-width:220px; background:#eef1f5; border-radius:2px; overflow:hidden; }
.stack span { display:block; height:100%; }
.empty { color:var(--muted); font-style:italic; }
</style>
</head>
<body>
<header>
  <h1 id="job-name">sluice</h1>
  <span class="pill" id="job-state">loading</span>
  <span class="kv">up <b id="job-uptime">-</b></span>
  <span class="kv">resumed from <b id="job-resumed">-</b></span>
  <span class="kv">restore <b id="job-restore">-</b></span>
  <span class="kv">backend <b id="job-backend">-</b></span>
  <span class="kv">records written <b id="job-written">-</b></span>
  <span class="kv">in flight <b id="job-inflight">none</b></span>
  <span class="kv" id="job-version"></span>
</header>
<div id="ended">The job's endpoint does not answer: the job has ended or stopped. What is shown is its last state.</div>
<main>
<section>
  <h2>Job graph</h2>
  <div class="legend">tasks coloured by the share of time they waited for a writable output (backpressure):
    <i style="background:#2e7d32"></i>0% <i style="background:#f9a825"></i>50% <i style="background:#c62828"></i>100%</div>
  <div id="graph"><p class="empty">loading</p></div>
  <h2 style="margin-top:12px">Executors</h2>
  <table><thead><tr><th>executor</th><th>backend</th><th>busy</th><th></th><th>in flight</th><th>inbox</th><th>buffers in use</th></tr></thead>
  <tbody id="executors"></tbody></table>
</section>
<section>
  <h2>Checkpoints <span class="legend" id="history-file"></span></h2>
  <div class="cards" id="checkpoint-counts"></div>
  <div class="row">
    <div><h2>Duration and alignment</h2><div id="chart-duration"></div>
      <div class="legend"><i style="background:var(--accent)"></i>duration <i style="background:var(--align)"></i>longest alignment
        <i style="background:var(--bad)"></i>aborted <i style="background:var(--warn)"></i>switched to unaligned</div></div>
    <div><h2>State size</h2><div id="chart-size"></div>
      <div class="legend"><i style="background:var(--fsync)"></i>operator state <i style="background:var(--warn)"></i>in-flight channel state</div></div>
  </div>
</section>
<section class="row">
  <div>
    <h2>Newest completed checkpoint: <span id="latest-id">none yet</span></h2>
    <div class="legend"><i style="background:var(--delay)"></i>start delay <i style="background:var(--align)"></i>alignment
      <i style="background:var(--write)"></i>write <i style="background:var(--fsync)"></i>fsync</div>
    <table><thead><tr><th>task</th><th>start delay</th><th>alignment</th><th>write</th><th>fsync</th><th>state</th><th>unaligned</th><th></th></tr></thead>
    <tbody id="latest-tasks"></tbody></table>
  </div>
  <div>
    <h2>Restores</h2>
    <table><thead><tr><th>started</th><th>resumed from</th><th>restore took</th></tr></thead><tbody id="restores"></tbody></table>
  </div>
</section>
<section>
  <h2>History (newest first)</h2>
  <table><thead><tr><th>checkpoint</th><th>triggered</th><th>mode</th><th>duration</th><th>alignment</th><th>operator state</th>
    <th>channel state</th><th>acks</th><th>outcome</th></tr></thead><tbody id="history-rows"></tbody></table>
</section>
</main>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({"&":"&amp;","<":"&lt;",">":"&gt;","\"":"&quot;","'":"&#39;"}[c]));
function fmtMs(v) {
  if (v == null) return "-";
  if (v < 1) return (v * 1000).toFixed(0) + " µs";
  if (v < 1000) return v.toFixed(v < 10 ? 2 : 1) + " ms";
  if (v < 60000) return (v / 1000).toFixed(2) + " s";
  const s = Math.round(v / 1000);
  return Math.floor(s / 3600) > 0 ? Math.floor(s / 3600) + " h " + Math.floor(s % 3600 / 60) + " min"
                                  : Math.floor(s / 60) + " min " + (s % 60) + " s";
}
function fmtBytes(b) {
  const u = ["B", "KiB", "MiB", "GiB", "TiB"]; let i = 0;
  while (b >= 1024 && i < u.length - 1) { b /= 1024; ++i; }
  return (i ? b.toFixed(1) : b) + " " + u[i];
}
function fmtRate(r) {
  if (r >= 1e6) return (r / 1e6).toFixed(2) + " M/s";
  if (r >= 1e3) return (r / 1e3).toFixed(1) + " k/s";
  return r.toFixed(0) + " /s";
}
const fmtTime = (unixMs) => new Date(unixMs).toLocaleString();
function bpColour(x) {  // 0 green .. 0.5 amber .. 1 red
  const lerp = (a, b, t) => Math.round(a + (b - a) * t);
  const [c0, c1, t] = x < 0.5 ? [[46,125,50],[249,168,37], x * 2] : [[249,168,37],[198,40,40], (x - 0.5) * 2];
  return "rgb(" + lerp(c0[0], c1[0], t) + "," + lerp(c0[1], c1[1], t) + "," + lerp(c0[2], c1[2], t) + ")";
}

const drawn = { job: false, graph: false, checkpoints: false, latest: false };
function markDrawn(view) {
  drawn[view] = true;
  if (Object.values(drawn).every(Boolean)) document.body.dataset.loaded = "1";
}

function drawJob(j) {
  $("job-name").textContent = j.job;
  document.title = j.job + " - sluice";
  const state = $("job-state"); state.textContent = j.state; state.className = "pill " + j.state;
  $("job-uptime").textContent = fmtMs(j.uptime_ms);
  $("job-resumed").textContent = j.resumed_from == null ? "a fresh start" : "checkpoint " + j.resumed_from;
  $("job-restore").textContent = fmtMs(j.restore_ms);
  $("job-backend").textContent = [...new Set(j.backends)].join(", ") + " × " + j.executors;
  $("job-written").textContent = j.progress ? j.progress.records_written.toLocaleString() : "-";
  const f = j.checkpoints.in_flight;
  $("job-inflight").textContent = f ? "checkpoint " + f.id + " for " + fmtMs(f.age_ms) : "none";
  $("job-version").textContent = "sluice " + j.version;
  markDrawn("job");
}

function drawGraph(g) {
  const colW = 250, gap = 70, rowH = 46, top = 28, pad = 10;
  const stages = g.stages, byStage = stages.map(() => []);
  for (const t of g.tasks) byStage[t.stage].push(t);
  const maxTasks = Math.max(1, ...byStage.map((ts) => ts.length));
  const width = stages.length * colW + (stages.length - 1) * gap + 2 * pad;
  const height = top + maxTasks * rowH + 2 * pad;
  const x = (s) => pad + s * (colW + gap);
  let svg = `<svg width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" role="img">`;
  svg += `<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto">` +
         `<path d="M0,0 L10,5 L0,10 z" fill="#8a94a6"/></marker></defs>`;
  for (const s of stages) {
    const h = top + byStage[s.id].length * rowH;
    for (const d of s.downstreams || []) {
      const y1 = pad + h / 2, y2 = pad + (top + byStage[d].length * rowH) / 2;
      svg += `<path d="M${x(s.id) + colW},${y1} C${x(s.id) + colW + gap / 2},${y1} ${x(d) - gap / 2},${y2} ${x(d) - 2},${y2}" ` +
             `stroke="#8a94a6" stroke-width="2" fill="none" marker-end="url(#arrow)"/>`;
    }
    svg += `<rect x="${x(s.id)}" y="${pad}" width="${colW}" height="${h}" rx="8" fill="#f0f3f8" stroke="#c5cddb"/>`;
    const kind = s.source ? "source" : s.sink ? "sink" : "";
    svg += `<text x="${x(s.id) + 10}" y="${pad + 18}" font-weight="bold">${esc(s.name)}</text>` +
           `<text x="${x(s.id) + colW - 10}" y="${pad + 18}" text-anchor="end" class="muted">${kind} ×${s.parallelism}</text>`;
    byStage[s.id].forEach((t, i) => {
      const ty = pad + top + i * rowH, bp = t.here ? t.backpressured_ratio : 0;
      const fill = t.here ? bpColour(bp) : "#b0b7c3";
      const rate = !t.here ? "worker " + t.worker : s.source ? "out " + fmtRate(t.records_out_per_s)
                 : "in " + fmtRate(t.records_in_per_s) + (s.sink ? " · written " : " · out ") + fmtRate(t.records_out_per_s);
      const tip = t.here ? `${t.name}: ${t.records_in} in, ${t.records_out} out, backpressured ${(bp * 100).toFixed(0)}%` +
                           (t.watermark != null ? `, watermark ${t.watermark}` : "") + `, executor ${t.executor}` : t.name;
      svg += `<g class="task" data-task="${esc(t.name)}"><title>${esc(tip)}</title>` +
             `<rect x="${x(s.id) + 8}" y="${ty}" width="${colW - 16}" height="${rowH - 8}" rx="5" fill="#fff" stroke="${fill}" stroke-width="2"/>` +
             `<rect x="${x(s.id) + 8}" y="${ty}" width="6" height="${rowH - 8}" rx="2" fill="${fill}"/>` +
             `<text x="${x(s.id) + 20}" y="${ty + 15}">${esc(t.name)} <tspan class="muted">e${t.executor}</tspan></text>` +
             `<text x="${x(s.id) + 20}" y="${ty + 31}" class="muted">${esc(rate)}</text>` +
             (t.here && !s.sink ? `<text x="${x(s.id) + colW - 14}" y="${ty + 31}" text-anchor="end" fill="${fill}" font-weight="bold">bp ${(bp * 100).toFixed(0)}%</text>` : "") +
             `</g>`;
    });
  }
  $("graph").innerHTML = svg + "</svg>";
  $("executors").innerHTML = g.executors.map((e) =>
    `<tr><td>${e.index}</td><td>${esc(e.backend)}</td><td>${(e.busy_ratio * 100).toFixed(0)}%</td>` +
    `<td><div class="bar"><span style="width:${(e.busy_ratio * 100).toFixed(1)}%"></span></div></td>` +
    `<td>${e.in_flight}</td><td>${e.inbox}</td><td>${e.buffers_in_use} / ${e.buffers}</td></tr>`).join("");
  markDrawn("graph");
}

// A chart over time of checkpoints: series of [value accessor, colour]; aborted ones as red crosses.
function chart(points, series, format, stacked) {
  const W = 560, H = 200, L = 62, R = 10, T = 10, B = 26;
  if (points.length === 0) return `<p class="empty">no checkpoint yet</p>`;
  const t0 = points[0].triggered_unix_ms, t1 = Math.max(t0 + 1, points[points.length - 1].triggered_unix_ms);
  const total = (p) => stacked ? series.reduce((a, [f]) => a + f(p), 0) : Math.max(...series.map(([f]) => f(p)));
  const vmax = Math.max(1e-9, ...points.map(total)) * 1.1;
  const px = (t) => L + (W - L - R) * (t - t0) / (t1 - t0), py = (v) => T + (H - T - B) * (1 - v / vmax);
  let s = `<svg width="100%" viewBox="0 0 ${W} ${H}" preserveAspectRatio="xMinYMin meet">`;
  for (let i = 0; i <= 4; ++i) {
    const v = vmax * i / 4;
    s += `<line class="axis" x1="${L}" x2="${W - R}" y1="${py(v)}" y2="${py(v)}"/>` +
         `<text x="${L - 6}" y="${py(v) + 4}" text-anchor="end" class="muted">${esc(format(v))}</text>`;
  }
  s += `<text x="${L}" y="${H - 8}" class="muted">${esc(new Date(t0).toLocaleTimeString())}</text>` +
       `<text x="${W - R}" y="${H - 8}" text-anchor="end" class="muted">${esc(new Date(t1).toLocaleTimeString())}</text>`;
  const bw = Math.max(2, Math.min(12, (W - L - R) / points.length * 0.7));
  if (stacked) {
    for (const p of points) {
      let base = 0;
      for (const [f, colour] of series) {
        const v = f(p);
        if (v > 0) s += `<rect x="${px(p.triggered_unix_ms) - bw / 2}" y="${py(base + v)}" width="${bw}" height="${py(base) - py(base + v)}" fill="${colour}"><title>checkpoint ${p.id}: ${esc(format(v))}</title></rect>`;
        base += v;
      }
    }
  } else {
    for (const [f, colour] of series) {
      const done = points.filter((p) => p.outcome === "completed");
      if (done.length > 1) s += `<polyline fill="none" stroke="${colour}" stroke-width="1.5" points="${done.map((p) => px(p.triggered_unix_ms) + "," + py(f(p))).join(" ")}"/>`;
      for (const p of done) {
        s += `<circle cx="${px(p.triggered_unix_ms)}" cy="${py(f(p))}" r="2.5" fill="${p.switched_to_unaligned ? "var(--warn)" : colour}">` +
             `<title>checkpoint ${p.id} (${p.mode}${p.switched_to_unaligned ? ", switched to unaligned" : ""}): ${esc(format(f(p)))}</title></circle>`;
      }
    }
    for (const p of points.filter((p) => p.outcome !== "completed")) {
      const cx = px(p.triggered_unix_ms), cy = py(vmax * 0.05);
      s += `<path d="M${cx - 4},${cy - 4} L${cx + 4},${cy + 4} M${cx - 4},${cy + 4} L${cx + 4},${cy - 4}" stroke="var(--bad)" stroke-width="2">` +
           `<title>checkpoint ${p.id} aborted: ${esc(p.reason)} ${esc(p.detail || "")}</title></path>`;
    }
  }
  return s + "</svg>";
}

function drawCheckpoints(c) {
  $("history-file").textContent = c.file + (c.skipped_lines ? ` (${c.skipped_lines} unreadable lines skipped)` : "");
  const sum = c.summary, cards = [["completed", sum.completed, false], ["aborted", sum.aborted, sum.aborted > 0]];
  for (const [reason, n] of Object.entries(sum.aborted_by_reason)) cards.push(["aborted: " + reason, n, true]);
  cards.push(["switched to unaligned", sum.switched_to_unaligned, false], ["starts", sum.starts, false], ["restores", sum.restores, false]);
  if (c.in_flight) cards.push(["in flight: " + c.in_flight.id, fmtMs(c.in_flight.age_ms), c.in_flight.age_ms > 10000]);
  $("checkpoint-counts").innerHTML = cards.map(([l, n, bad]) =>
    `<div class="card${bad ? " bad" : ""}"><div class="n">${esc(n)}</div><div class="l">${esc(l)}</div></div>`).join("");
  const pts = c.checkpoints;
  $("chart-duration").innerHTML = chart(pts, [[(p) => p.duration_ms, "var(--accent)"], [(p) => p.alignment_ms, "var(--align)"]], fmtMs, false);
  $("chart-size").innerHTML = chart(pts.filter((p) => p.outcome === "completed"),
    [[(p) => p.operator_state_bytes, "var(--fsync)"], [(p) => p.channel_state_bytes, "var(--warn)"]], fmtBytes, true);
  $("history-rows").innerHTML = pts.slice(-50).reverse().map((p) =>
    `<tr><td>${p.id}</td><td>${esc(fmtTime(p.triggered_unix_ms))}</td><td>${esc(p.mode)}${p.switched_to_unaligned ? " → unaligned" : ""}</td>` +
    `<td>${fmtMs(p.duration_ms)}</td><td>${fmtMs(p.alignment_ms)}</td><td>${fmtBytes(p.operator_state_bytes)}</td>` +
    `<td>${fmtBytes(p.channel_state_bytes)}</td><td>${p.acknowledged}/${p.tasks}</td>` +
    (p.outcome === "completed" ? `<td class="ok">completed</td>` : `<td class="bad" title="${esc(p.detail || "")}">aborted: ${esc(p.reason)}</td>`) +
    `</tr>`).join("") || `<tr><td colspan="9" class="empty">no checkpoint in the history yet</td></tr>`;
  $("restores").innerHTML = c.starts.slice().reverse().map((s) =>
    `<tr><td>${esc(fmtTime(s.unix_ms))}</td><td>${s.resumed_from == null ? "fresh start" : "checkpoint " + s.resumed_from}</td>` +
    `<td>${fmtMs(s.restore_ms)}</td></tr>`).join("") || `<tr><td colspan="3" class="empty">no start recorded</td></tr>`;
  markDrawn("checkpoints");
}

function drawLatest(l) {
  if (l == null) {
    $("latest-id").textContent = "none yet";
    $("latest-tasks").innerHTML = `<tr><td colspan="8" class="empty">no completed checkpoint yet</td></tr>`;
    markDrawn("latest");
    return;
  }
  $("latest-id").textContent = `${l.id} (${l.mode}, ${fmtMs(l.duration_ms)}, ${fmtBytes(l.operator_state_bytes + l.channel_state_bytes)})`;
  const span = (t) => (t.start_delay_ms || 0) + t.alignment_ms + t.write_ms + t.fsync_ms;
  const longest = Math.max(1e-9, ...l.task_breakdown.map(span));
  const seg = (v, colour, what) => v > 0 ? `<span style="width:${(100 * v / longest).toFixed(2)}%;background:${colour}" title="${what} ${fmtMs(v)}"></span>` : "";
  $("latest-tasks").innerHTML = l.task_breakdown.map((t) =>
    `<tr><td>${esc(t.name || "task " + t.task)}</td><td>${t.start_delay_ms == null ? "-" : fmtMs(t.start_delay_ms)}</td>` +
    `<td>${fmtMs(t.alignment_ms)}</td><td>${fmtMs(t.write_ms)}</td><td>${fmtMs(t.fsync_ms)}</td>` +
    `<td>${fmtBytes(t.operator_state_bytes + t.channel_state_bytes)}</td><td>${t.switched_to_unaligned ? "switched" : ""}</td>` +
    `<td><div class="stack">${seg(t.start_delay_ms || 0, "var(--delay)", "start delay")}${seg(t.alignment_ms, "var(--align)", "alignment")}` +
    `${seg(t.write_ms, "var(--write)", "write")}${seg(t.fsync_ms, "var(--fsync)", "fsync")}</div></td></tr>`).join("");
  markDrawn("latest");
}

async function view(path) {
  const r = await fetch(path, { cache: "no-store" });
  if (!r.ok) throw new Error(path + ": " + r.status);
  return r.json();
}
let failures = 0;
async function refresh() {
  try {
    const [job, graph, checkpoints, latest] =
      await Promise.all([view("api/job"), view("api/graph"), view("api/checkpoints"), view("api/checkpoints/latest")]);
    drawJob(job); drawGraph(graph); drawCheckpoints(checkpoints); drawLatest(latest);
    failures = 0;
    $("ended").style.display = "none";
  } catch (e) {
    if (++failures >= 2) {
      $("ended").style.display = "block";
      const state = $("job-state"); state.textContent = "ended"; state.className = "pill ended";
      document.body.dataset.ended = "1";
    }
  }
  setTimeout(refresh, 2000);
}
refresh();
</script>
</body>
</html>
)page";

}  // namespace

std::string_view status_page_html() noexcept { return page; }

}  // namespace sluice::dataflow::detail
