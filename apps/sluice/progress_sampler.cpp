// progress_sampler: see progress_sampler.hpp.

#include "progress_sampler.hpp"

#include <algorithm>

namespace sluice::apps {
namespace {

std::uint64_t to_ms(std::chrono::nanoseconds d) {
  const auto ms = std::chrono::round<std::chrono::milliseconds>(d).count();
  return ms > 0 ? static_cast<std::uint64_t>(ms) : 0;
}

// The fields but for the rate: what the sources read (not what the other tasks took: behind a
// combiner, that is its pairs).
progress_fields common_fields(const dataflow::job_progress& p, const char* unit) {
  progress_fields f;
  f.elapsed_ms = to_ms(p.elapsed);
  f.unit = unit;
  f.records_total = p.source_records;
  if (p.input_total > 0) f.bytes_read = p.input_done;
  f.records_written = p.records_written;
  f.backpressure = p.backpressure;
  if (p.input_total > 0) f.done = static_cast<double>(p.input_done) / static_cast<double>(p.input_total);
  if (p.running_checkpoint != snapshot::no_checkpoint) {
    f.running_checkpoint = running_checkpoint_progress{p.running_checkpoint, to_ms(p.running_checkpoint_age)};
  }
  f.checkpoints_aborted = p.checkpoints_aborted;
  if (p.last_checkpoint != snapshot::no_checkpoint) {
    f.last_checkpoint = checkpoint_progress{p.last_checkpoint, to_ms(p.last_checkpoint_duration), p.last_checkpoint_bytes};
  }
  return f;
}

}  // namespace

progress_fields progress_sampler::next(const dataflow::job_progress& sample) {
  progress_fields f = common_fields(sample, unit_);
  if (sample.elapsed > previous_elapsed_) {
    // The total only grows; a smaller one (not expected) counts as no records, not as a wrap-around.
    const std::uint64_t records =
        sample.source_records > previous_records_ ? sample.source_records - previous_records_ : 0;
    const double seconds = std::chrono::duration<double>(sample.elapsed - previous_elapsed_).count();
    rate_ = static_cast<double>(records) / seconds;
    previous_elapsed_ = sample.elapsed;
    previous_records_ = sample.source_records;
  }
  f.records_per_second = rate_;
  if (sample.input_total > 0) {
    if (!first_input_) first_input_.emplace(sample.elapsed, sample.input_done);
    const auto [then, read_then] = *first_input_;
    if (sample.elapsed > then && sample.input_done > read_then) {
      const double per_ns = static_cast<double>(sample.input_done - read_then) /
                            static_cast<double>((sample.elapsed - then).count());
      const double left_ns = static_cast<double>(sample.input_total - std::min(sample.input_done, sample.input_total)) / per_ns;
      f.time_left_ms = static_cast<std::uint64_t>(left_ns / 1e6);
    }
  }
  return f;
}

progress_fields summary_fields(const dataflow::job_progress& final, const char* unit) {
  progress_fields f = common_fields(final, unit);
  const double seconds = std::chrono::duration<double>(final.elapsed).count();
  if (seconds > 0) f.records_per_second = static_cast<double>(final.source_records) / seconds;
  return f;
}

}  // namespace sluice::apps
