#pragma once
// status_page: the page a job's endpoint serves at / (job_metrics.hpp): one self-contained HTML
// document (no external script, style or font: it works offline and behind any proxy) whose script
// polls the JSON views of status_api.hpp every two seconds and draws
//   - the job: name, state, uptime, what it resumed from and how long restoring took, backends;
//   - the job graph: each stage with its tasks, each task's rate in and out and share of time
//     backpressured (coloured from green to red), and the executors' busy ratios;
//   - the checkpoint history kept across restarts: counts (completed, aborted by reason, switched
//     to unaligned, restores), charts over time of duration and alignment and of state size, with
//     each checkpoint's outcome, and a table of the newest ones;
//   - the newest completed checkpoint per task: start delay, alignment, write and fsync as bars;
//   - the restores: when, from which checkpoint, how long.
// When the endpoint stops answering (the job ended), a banner says so and the last data stays.
// Element ids the tests (and anyone scripting the page) rely on: job-name, job-state, graph (a
// .task element per task, data-task="<name>"), executors, checkpoint-counts, chart-duration,
// chart-size, history-rows, latest-id, latest-tasks, restores, ended; body[data-loaded="1"] once
// every view has been drawn.

#include <string_view>

namespace sluice::dataflow::detail {

std::string_view status_page_html() noexcept;

}  // namespace sluice::dataflow::detail
