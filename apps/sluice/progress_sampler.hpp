#pragma once
// progress_sampler: turns a running job's successive progress samples (dataflow::job_progress) into
// what its progress line shows (progress_fields).
//
// records/s is the rate over the last interval: the records taken between this sample and the one
// before it, over the time between them (the first sample is measured from the job's start). A
// rate of total / elapsed would hide a stall or a slowdown behind the job's history. The summary at
// the end is the exception: summary_fields gives the average over the whole run.
//
//   progress_sampler sampler;
//   settings.on_progress = [&](const job_progress& p) { line.set(sampler.next(p)); line.update(); };
//
// Not thread-safe: one owner feeds it, one sample after the other.

#include "progress.hpp"

#include <sluice/dataflow/job_runner.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <utility>

namespace sluice::apps {

class progress_sampler {
 public:
  // `unit`: what the sources read, as the line names it ("lines", "rows", "events").
  explicit progress_sampler(const char* unit = "records") : unit_(unit) {}

  // The fields for `sample`, its rate measured from the previous sample. A sample no later than
  // the previous one keeps the previous rate (there is no interval to measure over).
  progress_fields next(const dataflow::job_progress& sample);

 private:
  const char* unit_;
  std::chrono::nanoseconds previous_elapsed_{0};
  std::uint64_t previous_records_ = 0;
  std::optional<double> rate_;
  // The input read at the first sample with a position, to estimate the time left from this run's
  // own pace (a resumed run starts part-way).
  std::optional<std::pair<std::chrono::nanoseconds, std::uint64_t>> first_input_;
};

// The fields of the summary of a run that ended with `final`: its records/s is the average over the
// run (none for a run that took no time).
progress_fields summary_fields(const dataflow::job_progress& final, const char* unit = "records");

}  // namespace sluice::apps
