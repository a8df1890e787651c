// See status_page.hpp. The page is raw strings: its markup and style here, its script in
// status_page_script.cpp, put together once per request (a few tens of KiB).

#include "status_page.hpp"

namespace sluice::dataflow::detail {

namespace {

constexpr std::string_view head = R"page(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>sluice job</title>
<style>
:root { --fg:#1d2330; --muted:#667085; --line:#d9dee7; --bg:#f6f7f9; --card:#fff; --ok:#2e7d32; --bad:#c62828;
        --warn:#ef6c00; --accent:#1e5aa8; --align:#8e5bd6; --write:#1e88e5; --fsync:#00897b; --delay:#9e9e9e;
        --busy:#c62828; --bp:#4527a0; --idle:#2e7d32; --restart:#6d4c41; }
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
section[hidden] { display:none; }
section h2 { margin:0 0 8px; font-size:15px; }
.row { display:flex; flex-wrap:wrap; gap:16px; }
.row > * { flex:1 1 420px; min-width:0; }
table { border-collapse:collapse; width:100%; font-variant-numeric:tabular-nums; }
th, td { text-align:right; padding:3px 8px; border-bottom:1px solid var(--line); white-space:nowrap; }
th:first-child, td:first-child { text-align:left; }
th { color:var(--muted); font-weight:600; font-size:12px; }
td.bad { color:var(--bad); font-weight:600; } td.ok { color:var(--ok); }
#settings th { text-align:left; width:1%; } #settings td { text-align:left; white-space:normal; }
tr.checkpoint { cursor:pointer; } tr.checkpoint:hover td { background:#f0f4fa; } tr.selected td { background:#e3ecf9; }
a { color:var(--accent); }
tr.bottleneck td { background:#fdecea; }
.badge { display:inline-block; margin-left:6px; padding:0 6px; border-radius:8px; background:var(--busy); color:#fff;
         font-size:11px; font-weight:600; }
.cards { display:flex; flex-wrap:wrap; gap:10px; margin-bottom:10px; }
.card { border:1px solid var(--line); border-radius:6px; padding:6px 12px; min-width:110px; }
.card .n { font-size:20px; font-weight:700; } .card .l { color:var(--muted); font-size:12px; }
.card.bad .n { color:var(--bad); }
svg text { font:11px "DejaVu Sans", sans-serif; fill:var(--fg); }
svg .axis { stroke:var(--line); } svg .muted { fill:var(--muted); }
svg .restart-marker text { fill:var(--restart); font-weight:600; }
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
  <div class="legend">each task coloured by the larger of its busy and backpressured shares of time:
    <i style="background:var(--idle)"></i>idle (waiting for input)
    <i style="background:#f9a825"></i><i style="background:var(--busy)"></i>busy (working)
    <i style="background:#78909c"></i><i style="background:var(--bp)"></i>backpressured (waiting for a writable output);
    <span class="badge">bottleneck</span> busy at least half the time while a task feeding it is backpressured at least half the time</div>
  <div id="graph"><p class="empty">loading</p></div>
  <h2 style="margin-top:12px">Tasks</h2>
  <table><thead><tr><th>task</th><th>executor</th><th>in</th><th>out</th><th>busy</th><th>backpressured</th><th>idle</th>
    <th></th></tr></thead><tbody id="tasks"></tbody></table>
  <h2 style="margin-top:12px">Executors</h2>
  <div class="legend">busy: the share of time the executor's thread was not waiting in its I/O backend (a task waiting on a
    timer or a file counts as busy above, not here)</div>
  <table><thead><tr><th>executor</th><th>backend</th><th>busy</th><th></th><th>in flight</th><th>inbox</th><th>buffers in use</th></tr></thead>
  <tbody id="executors"></tbody></table>
</section>
<section>
  <h2>Checkpoints <span class="legend" id="history-file"></span></h2>
  <div class="cards" id="checkpoint-counts"></div>
  <div class="row">
    <div><h2>Duration and alignment</h2><div id="chart-duration"></div>
      <div class="legend"><i style="background:var(--accent)"></i>duration <i style="background:var(--align)"></i>longest alignment
        <i style="background:var(--bad)"></i>aborted <i style="background:var(--warn)"></i>switched to unaligned
        <i style="background:var(--restart)"></i>restart</div></div>
    <div><h2>State size</h2><div id="chart-size"></div>
      <div class="legend"><i style="background:var(--fsync)"></i>operator state <i style="background:var(--warn)"></i>in-flight channel state
        <i style="background:var(--restart)"></i>restart</div></div>
  </div>
</section>
<section id="checkpoint-detail" hidden>
  <h2>Checkpoint <span id="detail-id"></span> <a href="#" class="legend">close</a></h2>
  <div id="detail-summary"></div>
  <table><thead><tr><th>task</th><th>start delay</th><th>alignment</th><th>sync</th><th>write</th><th>fsync</th><th>operator state</th>
    <th>channel state</th><th>unaligned</th><th></th></tr></thead><tbody id="detail-tasks"></tbody></table>
</section>
<section>
  <h2>Newest completed checkpoint: <span id="latest-id">none yet</span></h2>
  <div class="legend"><i style="background:var(--delay)"></i>start delay <i style="background:var(--align)"></i>alignment
    <i style="background:var(--write)"></i>write <i style="background:var(--fsync)"></i>fsync</div>
  <table><thead><tr><th>task</th><th>start delay</th><th>alignment</th><th>sync</th><th>write</th><th>fsync</th><th>operator state</th>
    <th>channel state</th><th>unaligned</th><th></th></tr></thead><tbody id="latest-tasks"></tbody></table>
</section>
<section class="row">
  <div>
    <h2>Checkpoint settings</h2>
    <table><tbody id="settings"></tbody></table>
  </div>
  <div>
    <h2>Restores</h2>
    <table><thead><tr><th>started</th><th>resumed from</th><th>restore took</th></tr></thead><tbody id="restores"></tbody></table>
  </div>
</section>
<section>
  <h2>History (newest first; choose a checkpoint for its tasks)</h2>
  <table><thead><tr><th>checkpoint</th><th>triggered</th><th>mode</th><th>duration</th><th>alignment</th><th>operator state</th>
    <th>channel state</th><th>acks</th><th>outcome</th></tr></thead><tbody id="history-rows"></tbody></table>
</section>
</main>
<script>
)page";

constexpr std::string_view tail = R"page(</script>
</body>
</html>
)page";

}  // namespace

std::string status_page_html() {
  const std::string_view script = status_page_script();
  std::string page;
  page.reserve(head.size() + script.size() + tail.size());
  page.append(head).append(script).append(tail);
  return page;
}

}  // namespace sluice::dataflow::detail
