// The status page's script (status_page.hpp): polls the JSON views (status_api.hpp) and draws them
// into the markup of status_page.cpp. A checkpoint chosen in the history (or a URL ending in
// #checkpoint=<id>) opens its per-task breakdown from /api/checkpoints/<id>.

#include "status_page.hpp"

namespace sluice::dataflow::detail {

namespace {

constexpr std::string_view script = R"script("use strict";
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
const pct = (x) => (x * 100).toFixed(0) + "%";
const fmtTime = (unixMs) => new Date(unixMs).toLocaleString();
function ramp(stops, x) {  // x in [0, 1] across three colours
  const lerp = (a, b, t) => Math.round(a + (b - a) * t);
  const [c0, c1, t] = x < 0.5 ? [stops[0], stops[1], x * 2] : [stops[1], stops[2], (x - 0.5) * 2];
  return "rgb(" + lerp(c0[0], c1[0], t) + "," + lerp(c0[1], c1[1], t) + "," + lerp(c0[2], c1[2], t) + ")";
}
// By the larger of busy and backpressured: from green (idle) to red (busy) or to indigo (backpressured).
function loadColour(t) {
  const busy = t.busy_ratio || 0, bp = t.backpressured_ratio || 0;
  return busy >= bp ? ramp([[46,125,50],[249,168,37],[198,40,40]], busy) : ramp([[46,125,50],[120,144,156],[69,39,160]], bp);
}
function loadClass(t) {
  if (!t.here) return "task";
  return "task" + (t.bottleneck ? " bottleneck" : "") + (t.busy_ratio >= 0.5 && t.busy_ratio >= t.backpressured_ratio ? " busy"
       : t.backpressured_ratio >= 0.5 ? " backpressured" : "");
}

const drawn = { job: false, graph: false, checkpoints: false, latest: false, detail: false };
function markDrawn(view) {
  drawn[view] = true;
  if (Object.values(drawn).every(Boolean)) document.body.dataset.loaded = "1";
}

function drawSettings(j) {
  const c = j.checkpoint_settings;
  if (!c) return;
  const rows = [["directory", c.dir],
    ["mode", c.mode + (c.alignment_timeout_ms != null ? ", unaligned after " + fmtMs(c.alignment_timeout_ms) + " of alignment" : "")],
    ["interval", fmtMs(c.interval_ms)], ["least pause between", fmtMs(c.min_pause_ms)], ["timeout", fmtMs(c.timeout_ms)],
    ["failures tolerated in a row", c.tolerable_failures == null ? "no limit" : c.tolerable_failures],
    ["retained", c.retained + " completed"],
    ["history", c.history_entries === 0 ? "not kept" : "the newest " + c.history_entries + " events" + (j.history ? "" : " (kept by the leader)")]];
  $("settings").innerHTML = rows.map(([k, v]) => `<tr><th>${esc(k)}</th><td>${esc(v)}</td></tr>`).join("");
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
  drawSettings(j);
  markDrawn("job");
}

function taskBox(t, s, x, y, colW, rowH) {
  const fill = t.here ? loadColour(t) : "#b0b7c3";
  const rate = !t.here ? "worker " + t.worker : s.source ? "out " + fmtRate(t.records_out_per_s)
             : "in " + fmtRate(t.records_in_per_s) + (s.sink ? " · written " : " · out ") + fmtRate(t.records_out_per_s);
  const load = t.here ? `busy ${pct(t.busy_ratio)} · backpressured ${pct(t.backpressured_ratio)} · idle ${pct(t.idle_ratio)}` : "";
  const tip = t.here ? `${t.name}: ${t.records_in} in, ${t.records_out} out, ${load}` +
                       (t.watermark != null ? `, watermark ${t.watermark}` : "") + `, executor ${t.executor}` : t.name;
  return `<g class="${loadClass(t)}" data-task="${esc(t.name)}"><title>${esc(tip)}</title>` +
    `<rect x="${x + 8}" y="${y}" width="${colW - 16}" height="${rowH - 8}" rx="5" fill="#fff" stroke="${fill}" stroke-width="${t.bottleneck ? 4 : 2}"/>` +
    `<rect x="${x + 8}" y="${y}" width="6" height="${rowH - 8}" rx="2" fill="${fill}"/>` +
    `<text x="${x + 20}" y="${y + 15}">${esc(t.name)} <tspan class="muted">e${t.executor}</tspan></text>` +
    (t.bottleneck ? `<text x="${x + colW - 14}" y="${y + 15}" text-anchor="end" fill="var(--busy)" font-weight="bold">bottleneck</text>` : "") +
    `<text x="${x + 20}" y="${y + 31}" class="muted">${esc(rate)}</text>` +
    `<text x="${x + 20}" y="${y + 46}" fill="${fill}" font-weight="bold">${esc(load)}</text></g>`;
}

function drawGraph(g) {
  const colW = 280, gap = 70, rowH = 60, top = 28, pad = 10;
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
    byStage[s.id].forEach((t, i) => { svg += taskBox(t, s, x(s.id), pad + top + i * rowH, colW, rowH); });
  }
  $("graph").innerHTML = svg + "</svg>";
  const seg = (v, colour, what) => v > 0 ? `<span style="width:${(100 * v).toFixed(2)}%;background:${colour}" title="${what} ${pct(v)}"></span>` : "";
  $("tasks").innerHTML = g.tasks.map((t) => !t.here
    ? `<tr class="task-row" data-task="${esc(t.name)}"><td>${esc(t.name)}</td><td colspan="7" class="empty">on worker ${t.worker}</td></tr>`
    : `<tr class="task-row${t.bottleneck ? " bottleneck" : ""}" data-task="${esc(t.name)}"><td>${esc(t.name)}` +
      `${t.bottleneck ? `<span class="badge">bottleneck</span>` : ""}</td><td>${t.executor}</td>` +
      `<td>${fmtRate(t.records_in_per_s)}</td><td>${fmtRate(t.records_out_per_s)}</td>` +
      `<td class="busy">${pct(t.busy_ratio)}</td><td class="backpressured">${pct(t.backpressured_ratio)}</td><td class="idle">${pct(t.idle_ratio)}</td>` +
      `<td><div class="stack">${seg(t.busy_ratio, "var(--busy)", "busy")}${seg(t.backpressured_ratio, "var(--bp)", "backpressured")}` +
      `${seg(t.idle_ratio, "var(--idle)", "idle")}</div></td></tr>`).join("");
  $("executors").innerHTML = g.executors.map((e) =>
    `<tr><td>${e.index}</td><td>${esc(e.backend)}</td><td>${pct(e.busy_ratio)}</td>` +
    `<td><div class="bar"><span style="width:${(e.busy_ratio * 100).toFixed(1)}%"></span></div></td>` +
    `<td>${e.in_flight}</td><td>${e.inbox}</td><td>${e.buffers_in_use} / ${e.buffers}</td></tr>`).join("");
  markDrawn("graph");
}

// A vertical line at each restart (a start after the first checkpoint shown), labelled.
function restartMarkers(restarts, px, T, bottom, W) {
  return restarts.map((r, i) => {
    const x = px(r.unix_ms), label = "restart, " + (r.resumed_from == null ? "a fresh start" : "resumed from checkpoint " + r.resumed_from);
    const right = x > W * 0.6, ty = T + 10 + (i % 3) * 13;
    return `<g class="restart-marker"><title>${esc(label + " at " + fmtTime(r.unix_ms) + ", restore took " + fmtMs(r.restore_ms))}</title>` +
           `<line x1="${x}" x2="${x}" y1="${T}" y2="${bottom}" stroke="var(--restart)" stroke-width="1.5" stroke-dasharray="4 3"/>` +
           `<text x="${right ? x - 4 : x + 4}" y="${ty}" text-anchor="${right ? "end" : "start"}">${esc(label)}</text></g>`;
  }).join("");
}

// A chart over time of checkpoints: series of [value accessor, colour]; aborted ones as red crosses;
// the restarts among `starts` as markers.
function chart(points, series, format, stacked, starts) {
  const W = 560, H = 200, L = 62, R = 10, T = 10, B = 26;
  if (points.length === 0) return `<p class="empty">no checkpoint yet</p>`;
  const t0 = points[0].triggered_unix_ms;
  const restarts = (starts || []).filter((s) => s.unix_ms >= t0);
  const t1 = Math.max(t0 + 1, points[points.length - 1].triggered_unix_ms, ...restarts.map((s) => s.unix_ms));
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
  const link = (p, inner) => `<a href="#checkpoint=${p.id}">${inner}</a>`;
  if (stacked) {
    for (const p of points) {
      let base = 0, bars = "";
      for (const [f, colour] of series) {
        const v = f(p);
        if (v > 0) bars += `<rect x="${px(p.triggered_unix_ms) - bw / 2}" y="${py(base + v)}" width="${bw}" height="${py(base) - py(base + v)}" fill="${colour}"><title>checkpoint ${p.id}: ${esc(format(v))}</title></rect>`;
        base += v;
      }
      s += link(p, bars);
    }
  } else {
    for (const [f, colour] of series) {
      const done = points.filter((p) => p.outcome === "completed");
      if (done.length > 1) s += `<polyline fill="none" stroke="${colour}" stroke-width="1.5" points="${done.map((p) => px(p.triggered_unix_ms) + "," + py(f(p))).join(" ")}"/>`;
      for (const p of done) {
        s += link(p, `<circle cx="${px(p.triggered_unix_ms)}" cy="${py(f(p))}" r="2.5" fill="${p.switched_to_unaligned ? "var(--warn)" : colour}">` +
             `<title>checkpoint ${p.id} (${p.mode}${p.switched_to_unaligned ? ", switched to unaligned" : ""}): ${esc(format(f(p)))}</title></circle>`);
      }
    }
    for (const p of points.filter((p) => p.outcome !== "completed")) {
      const cx = px(p.triggered_unix_ms), cy = py(vmax * 0.05);
      s += link(p, `<path d="M${cx - 4},${cy - 4} L${cx + 4},${cy + 4} M${cx - 4},${cy + 4} L${cx + 4},${cy - 4}" stroke="var(--bad)" stroke-width="2">` +
           `<title>checkpoint ${p.id} aborted: ${esc(p.reason)} ${esc(p.detail || "")}</title></path>`);
    }
  }
  return s + restartMarkers(restarts, px, T, H - B, W) + "</svg>";
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
  $("chart-duration").innerHTML = chart(pts, [[(p) => p.duration_ms, "var(--accent)"], [(p) => p.alignment_ms, "var(--align)"]], fmtMs, false, c.starts);
  $("chart-size").innerHTML = chart(pts.filter((p) => p.outcome === "completed"),
    [[(p) => p.operator_state_bytes, "var(--fsync)"], [(p) => p.channel_state_bytes, "var(--warn)"]], fmtBytes, true, c.starts);
  $("history-rows").innerHTML = pts.slice(-50).reverse().map((p) =>
    `<tr class="checkpoint${String(p.id) === selected ? " selected" : ""}" data-checkpoint="${p.id}"><td><a href="#checkpoint=${p.id}">${p.id}</a></td>` +
    `<td>${esc(fmtTime(p.triggered_unix_ms))}</td><td>${esc(p.mode)}${p.switched_to_unaligned ? " → unaligned" : ""}</td>` +
    `<td>${fmtMs(p.duration_ms)}</td><td>${fmtMs(p.alignment_ms)}</td><td>${fmtBytes(p.operator_state_bytes)}</td>` +
    `<td>${fmtBytes(p.channel_state_bytes)}</td><td>${p.acknowledged}/${p.tasks}</td>` +
    (p.outcome === "completed" ? `<td class="ok">completed</td>` : `<td class="bad" title="${esc(p.detail || "")}">aborted: ${esc(p.reason)}</td>`) +
    `</tr>`).join("") || `<tr><td colspan="9" class="empty">no checkpoint in the history yet</td></tr>`;
  $("restores").innerHTML = c.starts.slice().reverse().map((s) =>
    `<tr><td>${esc(fmtTime(s.unix_ms))}</td><td>${s.resumed_from == null ? "fresh start" : "checkpoint " + s.resumed_from}</td>` +
    `<td>${fmtMs(s.restore_ms)}</td></tr>`).join("") || `<tr><td colspan="3" class="empty">no start recorded</td></tr>`;
  markDrawn("checkpoints");
}

// A checkpoint's tasks into the table body `id`: the figures, and the phases as bars.
function drawBreakdown(id, c) {
  const span = (t) => (t.start_delay_ms || 0) + t.alignment_ms + t.write_ms + t.fsync_ms;
  const longest = Math.max(1e-9, ...c.task_breakdown.map(span));
  const seg = (v, colour, what) => v > 0 ? `<span style="width:${(100 * v / longest).toFixed(2)}%;background:${colour}" title="${what} ${fmtMs(v)}"></span>` : "";
  $(id).innerHTML = c.task_breakdown.map((t) =>
    `<tr><td>${esc(t.name || "task " + t.task)}</td><td>${t.start_delay_ms == null ? "-" : fmtMs(t.start_delay_ms)}</td>` +
    `<td>${fmtMs(t.alignment_ms)}</td><td>${fmtMs(t.sync_ms || 0)}</td><td>${fmtMs(t.write_ms)}</td><td>${fmtMs(t.fsync_ms)}</td>` +
    `<td>${fmtBytes(t.operator_state_bytes)}</td><td>${fmtBytes(t.channel_state_bytes)}</td><td>${t.switched_to_unaligned ? "switched" : ""}</td>` +
    `<td><div class="stack">${seg(t.start_delay_ms || 0, "var(--delay)", "start delay")}${seg(t.alignment_ms, "var(--align)", "alignment")}` +
    `${seg(t.write_ms, "var(--write)", "write")}${seg(t.fsync_ms, "var(--fsync)", "fsync")}</div></td></tr>`).join("") ||
    `<tr><td colspan="10" class="empty">no task reported</td></tr>`;
}

function drawLatest(l) {
  if (l == null) {
    $("latest-id").textContent = "none yet";
    $("latest-tasks").innerHTML = `<tr><td colspan="9" class="empty">no completed checkpoint yet</td></tr>`;
  } else {
    $("latest-id").textContent = `${l.id} (${l.mode}, ${fmtMs(l.duration_ms)}, ${fmtBytes(l.operator_state_bytes + l.channel_state_bytes)})`;
    drawBreakdown("latest-tasks", l);
  }
  markDrawn("latest");
}

// The checkpoint named by the URL's #checkpoint=<id>: its breakdown, or why there is none.
let selected = null;
async function showCheckpoint() {
  const m = /^#checkpoint=(\d{1,20})$/.exec(location.hash);
  selected = m ? m[1] : null;
  for (const row of document.querySelectorAll("#history-rows tr.checkpoint")) {
    row.classList.toggle("selected", row.dataset.checkpoint === selected);
  }
  const box = $("checkpoint-detail"), id = selected;
  box.hidden = id == null;
  if (id == null) { markDrawn("detail"); return; }
  $("detail-id").textContent = id;
  $("detail-summary").textContent = "loading";
  $("detail-tasks").innerHTML = "";
  try {
    const r = await fetch("api/checkpoints/" + id, { cache: "no-store" });
    const c = await r.json();
    if (selected !== id) return;  // another one was chosen meanwhile
    if (!r.ok) {
      box.dataset.state = "missing";
      $("detail-summary").innerHTML = `<p class="empty">${esc(c.error || "HTTP " + r.status)}</p>`;
    } else {
      box.dataset.state = "shown";
      $("detail-summary").innerHTML = `<p>${esc(c.mode)}${c.switched_to_unaligned ? " → unaligned" : ""}, triggered ${esc(fmtTime(c.triggered_unix_ms))}, ` +
        `took ${fmtMs(c.duration_ms)}, longest alignment ${fmtMs(c.alignment_ms)}, ${fmtBytes(c.operator_state_bytes)} operator state, ` +
        `${fmtBytes(c.channel_state_bytes)} channel state, ${c.acknowledged}/${c.tasks} tasks acknowledged: ` +
        (c.outcome === "completed" ? `<b class="ok">completed</b>` : `<b class="bad">aborted: ${esc(c.reason)}</b> ${esc(c.detail || "")}`) + `</p>`;
      drawBreakdown("detail-tasks", c);
    }
  } catch (e) {
    if (selected !== id) return;
    box.dataset.state = "failed";
    $("detail-summary").innerHTML = `<p class="empty">checkpoint ${esc(id)} could not be read: ${esc(e.message)}</p>`;
  }
  markDrawn("detail");
}
window.addEventListener("hashchange", showCheckpoint);
$("history-rows").addEventListener("click", (e) => {
  const row = e.target.closest("tr.checkpoint");
  if (row && !e.target.closest("a")) location.hash = "checkpoint=" + row.dataset.checkpoint;
});

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
showCheckpoint();
refresh();
)script";

}  // namespace

std::string_view status_page_script() noexcept { return script; }

}  // namespace sluice::dataflow::detail
