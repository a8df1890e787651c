#pragma once
// status_page: the page a job's endpoint serves at / (job_metrics.hpp): one self-contained HTML
// document (no external script, style or font: it works offline and behind any proxy) whose script
// polls the JSON views of status_api.hpp every two seconds and draws
//   - the job: name, state, uptime, what it resumed from and how long restoring took, backends;
//   - the job graph: each stage with its tasks, each task's rate in and out and its shares of time
//     busy, backpressured and idle, coloured by the larger of busy and backpressured (green to red
//     when busy, to indigo when backpressured), the bottleneck outlined and named; a table of the
//     same per task; the executors' busy ratios;
//   - the checkpoint history kept across restarts: counts (completed, aborted by reason, switched
//     to unaligned, restores), charts over time of duration and alignment and of state size, with
//     each checkpoint's outcome and a marker at each restart, and a table of the newest ones;
//   - any checkpoint of the history (chosen in the table or a chart, or by a URL ending in
//     #checkpoint=<id>) per task, and the newest completed one: start delay, alignment, write and
//     fsync as bars, state sizes;
//   - the checkpoint settings, and the restores: when, from which checkpoint, how long.
// When the endpoint stops answering (the job ended), a banner says so and the last data stays.
// Element ids the tests (and anyone scripting the page) rely on: job-name, job-state, graph (a
// .task element per task, data-task="<name>", with the class bottleneck on the bottleneck), tasks
// (a row per task, the same), executors, checkpoint-counts, chart-duration, chart-size (each
// restart a .restart-marker), history-rows, checkpoint-detail (hidden unless a checkpoint is
// chosen; data-state "shown" or "missing"), detail-id, detail-tasks, latest-id, latest-tasks,
// settings, restores, ended; body[data-loaded="1"] once every view (and the chosen checkpoint) has
// been drawn.

#include <string>
#include <string_view>

namespace sluice::dataflow::detail {

// The whole page (status_page.cpp).
std::string status_page_html();
// Its script (status_page_script.cpp).
std::string_view status_page_script() noexcept;

}  // namespace sluice::dataflow::detail
