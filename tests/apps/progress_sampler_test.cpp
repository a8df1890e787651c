// progress_sampler (apps/sluice/progress_sampler.hpp): a job's progress samples turned into the
// fields of its progress line, with records/s over the last interval, and into its summary.

#include "progress_sampler.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>

using sluice::apps::format_progress;
using sluice::apps::progress_fields;
using sluice::apps::progress_sampler;
using sluice::apps::summary_fields;
using sluice::dataflow::job_progress;
using namespace std::chrono_literals;

namespace {

job_progress sample(std::chrono::nanoseconds elapsed, std::uint64_t records) {
  job_progress p;
  p.elapsed = elapsed;
  p.source_records = records;
  return p;
}

}  // namespace

TEST_CASE("records/s is the rate since the previous sample, not the total over the elapsed time",
          "[progress]") {
  progress_sampler sampler;
  // The first sample is measured from the job's start.
  CHECK(sampler.next(sample(1s, 1'000)).records_per_second == Approx(1'000.0));
  // A stall: no records for a second. Total over elapsed would still say 500/s.
  progress_fields stalled = sampler.next(sample(2s, 1'000));
  CHECK(stalled.records_per_second == Approx(0.0));
  CHECK(stalled.records_total == 1'000u);
  // A speed-up: 2,000 records in 250 ms.
  progress_fields fast = sampler.next(sample(2250ms, 3'000));
  CHECK(fast.records_per_second == Approx(8'000.0));
  CHECK(fast.records_total == 3'000u);
  CHECK(fast.elapsed_ms == 2'250u);
}

TEST_CASE("a sample with no time since the previous one keeps the previous rate", "[progress]") {
  progress_sampler sampler;
  // At the job's start there is no interval yet: no rate.
  CHECK_FALSE(sampler.next(sample(0ns, 0)).records_per_second.has_value());
  CHECK(sampler.next(sample(500ms, 100)).records_per_second == Approx(200.0));
  CHECK(sampler.next(sample(500ms, 150)).records_per_second == Approx(200.0));
  // The next interval is measured from the last sample that had one: 500 ms, 100 -> 1 s, 300.
  CHECK(sampler.next(sample(1s, 300)).records_per_second == Approx(400.0));
}

TEST_CASE("a total smaller than the previous one counts as no records, not as a wrap-around", "[progress]") {
  progress_sampler sampler;
  sampler.next(sample(1s, 1'000));
  CHECK(sampler.next(sample(2s, 900)).records_per_second == Approx(0.0));
  CHECK(sampler.next(sample(3s, 1'900)).records_per_second == Approx(1'000.0));
}

TEST_CASE("the line shows the backpressure, and the last checkpoint once there is one", "[progress]") {
  progress_sampler sampler;
  job_progress p = sample(1500ms, 1'234'567);
  p.backpressure = 0.25;
  CHECK(format_progress(sampler.next(p)) == "1.5 s | 1,234,567 records read | 823.0k records/s | backpressure 25%");

  p.elapsed = 2500ms;
  p.source_records = 1'334'567;
  p.last_checkpoint = 7;
  p.last_checkpoint_duration = 142'600us;  // rounded to the nearest millisecond
  p.last_checkpoint_bytes = 10'896;
  p.checkpoints_completed = 7;
  const progress_fields f = sampler.next(p);
  REQUIRE(f.last_checkpoint.has_value());
  CHECK(f.last_checkpoint->id == 7u);
  CHECK(f.last_checkpoint->duration_ms == 143u);
  CHECK(f.last_checkpoint->size_bytes == 10'896u);
  CHECK(format_progress(f) ==
        "2.5 s | 1,334,567 records read | 100.0k records/s | backpressure 25% | last chk-7: 143 ms, 10.6 KiB");
}

TEST_CASE("the summary's records/s is the average over the whole run", "[progress]") {
  job_progress final = sample(4s, 10'000);
  final.last_checkpoint = 3;
  final.last_checkpoint_duration = 2ms;
  final.last_checkpoint_bytes = 512;
  CHECK(format_progress(summary_fields(final)) ==
        "4.0 s | 10,000 records read | 2.5k records/s | backpressure 0% | last chk-3: 2 ms, 512 B");
  // A run that took no time has no rate.
  CHECK_FALSE(summary_fields(sample(0ns, 0)).records_per_second.has_value());
}

TEST_CASE("for file inputs the line shows how much is read and the time left at this run's pace", "[progress]") {
  progress_sampler sampler;
  job_progress p = sample(1s, 1'000);
  p.input_total = 1'000'000;
  p.input_done = 300'000;  // a resumed run: 30% was read before it started
  const progress_fields first = sampler.next(p);
  REQUIRE(first.done.has_value());
  CHECK(*first.done == Approx(0.3));
  CHECK_FALSE(first.time_left_ms.has_value());  // no pace yet
  p.elapsed = 3s;
  p.source_records = 3'000;
  p.input_done = 500'000;  // 200,000 bytes in 2 s: 500,000 left take 5 s
  const progress_fields f = sampler.next(p);
  REQUIRE(f.time_left_ms.has_value());
  CHECK(*f.time_left_ms == 5000u);
  CHECK(format_progress(f) == "3.0 s | 50%, 5.0 s left | 3,000 records read (488.3 KiB) | 1.0k records/s | backpressure 0%");
  p.input_done = 1'000'000;
  p.elapsed = 4s;
  CHECK_THAT(format_progress(sampler.next(p)), Catch::StartsWith("4.0 s | 100% | "));  // no "left" once read
}

TEST_CASE("the line shows records written, a checkpoint running for a second or more, and aborted ones", "[progress]") {
  progress_sampler sampler;
  job_progress p = sample(2s, 2'000);
  p.records_written = 1'500;
  p.running_checkpoint = 9;
  p.running_checkpoint_age = 900ms;  // under a second: not shown
  p.checkpoints_aborted = 0;
  CHECK(format_progress(sampler.next(p)) == "2.0 s | 2,000 records read | 1.0k records/s | 1,500 written | backpressure 0%");
  p.elapsed = 3s;
  p.running_checkpoint_age = 2'100ms;
  p.checkpoints_aborted = 2;
  CHECK(format_progress(sampler.next(p)) ==
        "3.0 s | 2,000 records read | 0 records/s | 1,500 written | backpressure 0% | chk-9 running 2.1 s | 2 aborted");
}

TEST_CASE("the line counts what the sources read, in the job's unit, not what a combiner passed on") {
  // A word count behind its combiner: 2,000,000 lines read, 200 (word, count) pairs exchanged.
  progress_sampler sampler("lines");
  job_progress p = sample(2s, 0);
  p.source_records = 2'000'000;
  p.records_in = 200;
  p.input_total = 50'000'000;
  p.input_done = 50'000'000;
  CHECK_THAT(format_progress(sampler.next(p)), Catch::Contains("| 2,000,000 lines read (47.7 MiB) | 1.0M lines/s |"));
  CHECK_THAT(format_progress(summary_fields(p, "lines")), Catch::Contains("| 2,000,000 lines read (47.7 MiB) | 1.0M lines/s"));
}
