#pragma once
// Generated sources and the stdout sink of the job API.
//
//   job.generate<std::string>("gen", 2, 1'000'000, [](std::uint64_t n) { return "record " + std::to_string(n); })
//      .map<...>(...)...;
//   stream.print([](const T& r) { return format(r); });   // demo output, no delivery guarantee
//
// generate(): record n = make(n) for n in [0, count) (count 0: without end); task i of p makes
// n = i, i + p, i + 2p, ... so the job's records are the same whatever the parallelism. `make` must
// be deterministic (seed it yourself: word_corpus_generator(seed).seek(n) and the like) — a restart
// resumes each task at the n stored in the checkpoint, and exactly-once output depends on make(n)
// being the record it was. With records_per_second > 0, each task makes at most its share of that
// rate (it waits, a millisecond at most at a time, so checkpoints and messages are not held up).

#include <sluice/dataflow/connector_parts.hpp>
#include <sluice/dataflow/job.hpp>
#include <sluice/dataflow/stdout_sink.hpp>
#include <sluice/runtime/executor.hpp>
#include <sluice/runtime/timer.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

namespace sluice::dataflow {

// The generator as a source connector (connector.hpp): its position is the next n it makes.
template <class T>
class generator_source final : public source_connector<T> {
 public:
  generator_source(std::size_t subtask, std::size_t parallelism, std::uint64_t count, double records_per_second,
                   std::function<T(std::uint64_t)> make, std::function<std::uint64_t(std::uint64_t)> time_of = {})
      : step_(parallelism), count_(count), rate_(records_per_second / static_cast<double>(parallelism)),
        make_(std::move(make)), time_of_(std::move(time_of)), next_(subtask) {}

  runtime::task<io::result<void>> open() override {
    started_ = runtime::executor::current()->now();  // the executor's clock (a simulation's too)
    made_since_start_ = 0;
    co_return io::result<void>();
  }

  runtime::task<io::result<read_status>> read(source_output<T>& out, std::size_t max_records) override {
    if (ended()) co_return read_status::end;
    std::size_t allowed = max_records;
    if (rate_ > 0) {
      const double due = records_due();
      // Not due yet: idle, and the task awaits wait_readable() with its barriers and messages (a
      // sleep here held a barrier up to a millisecond).
      if (due < 1) co_return read_status::idle;
      allowed = std::min<std::size_t>(allowed, static_cast<std::size_t>(due));
    }
    for (std::size_t i = 0; i < allowed && !ended(); ++i) {
      out.emit(make_(next_));
      next_ += step_;
      ++made_since_start_;
    }
    if (ended()) co_return read_status::end;
    // Every record this task makes from now on happens at time_of(next_) or later.
    if (time_of_) {
      const std::uint64_t t = time_of_(next_);
      if (t > 0) out.watermark(t - 1);
    }
    co_return read_status::more;
  }

  // Until the next record is due (rate-limited); cancelled when the task has a barrier or message.
  runtime::task<void> wait_readable() override {
    if (rate_ <= 0 || ended()) co_return;
    const double due = records_due();
    if (due >= 1) co_return;
    (void)co_await runtime::sleep_for(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>((1 - due) / rate_)));
  }

  std::vector<std::byte> position() const override { return detail::encode_state(next_); }
  void restore(std::span<const std::byte> bytes) override {
    next_ = detail::decode_state<std::uint64_t>(bytes, "generator source");
  }

 private:
  bool ended() const noexcept { return count_ != 0 && next_ >= count_; }
  // Records the rate allows by now, minus those made (the executor's clock: a simulation's too).
  double records_due() const {
    const double elapsed = std::chrono::duration<double>(runtime::executor::current()->now() - started_).count();
    return elapsed * rate_ - static_cast<double>(made_since_start_);
  }

  std::uint64_t step_;
  std::uint64_t count_;
  double rate_;  // per task
  std::function<T(std::uint64_t)> make_;
  std::function<std::uint64_t(std::uint64_t)> time_of_;  // empty: no event time, no watermarks
  std::uint64_t next_;
  std::uint64_t made_since_start_ = 0;
  std::chrono::steady_clock::time_point started_{};
};

// generate() and generate_timed() as specs for read_from (identity "source=generate[_timed]" and
// the count; the rate is not identity: it changes when records come, not which).
template <class T>
source_spec<T> generator_spec(std::uint64_t count, std::function<T(std::uint64_t)> make, double records_per_second = 0,
                              std::function<std::uint64_t(std::uint64_t)> time_of = {}) {
  source_spec<T> spec;
  spec.identity = {time_of ? "source=generate_timed" : "source=generate", "generate.count=" + std::to_string(count)};
  spec.make = [count, make, records_per_second, time_of](const connector_context& c) {
    return std::make_unique<generator_source<T>>(c.subtask, c.parallelism, count, records_per_second, make, time_of);
  };
  return spec;
}

template <class T>
stream<T> job_builder::generate(std::string name, std::size_t parallelism, std::uint64_t count,
                                std::function<T(std::uint64_t)> make, double records_per_second) {
  if (!make) throw std::invalid_argument("generate: a make function is required");
  return read_from(std::move(name), parallelism, generator_spec<T>(count, std::move(make), records_per_second));
}

template <class T>
stream<T> job_builder::generate_timed(std::string name, std::size_t parallelism, std::uint64_t count,
                                      std::function<T(std::uint64_t)> make,
                                      std::function<std::uint64_t(std::uint64_t)> time_of,
                                      double records_per_second) {
  if (!make) throw std::invalid_argument("generate_timed: a make function is required");
  if (!time_of) throw std::invalid_argument("generate_timed: a time_of function is required");
  return read_from(std::move(name), parallelism,
                   generator_spec<T>(count, std::move(make), records_per_second, std::move(time_of)));
}

// The tail of stream::discard(): counts, keeps nothing.
template <class T>
class discard_tail final : public output_tail, public collector<T> {
 public:
  void collect(const T&) override { ++records_; }
  void watermark(std::uint64_t) override {}
  void end_of_data() override {}
  bool backlogged() const noexcept override { return false; }
  runtime::task<io::result<void>> drain() override { co_return io::result<void>(); }
  bool is_sink() const noexcept override { return true; }
  runtime::task<void> close() override { co_return; }
  std::uint64_t records_out() const noexcept override { return records_; }

 private:
  std::uint64_t records_ = 0;
};

template <class T>
void stream<T>::discard() const {
  stage_def& stage = close_with_sink({"sink=discard"});
  attach_fn attach = take();
  stage.build = [attach](task_builder& b) {
    auto& tail = b.make<discard_tail<T>>();
    b.set_output(tail);
    attach(b, tail);
  };
}

// The tail of stream::print(): lines to standard output, outside checkpoints.
template <class T>
class stdout_tail final : public output_tail, public collector<T> {
 public:
  stdout_tail(std::function<std::string(const T&)> format, int fd) : format_(std::move(format)), out_(fd) {}
  void collect(const T& record) override { lines_.push_back(format_(record)); }
  void watermark(std::uint64_t) override {}
  void end_of_data() override {}
  bool backlogged() const noexcept override { return !lines_.empty(); }
  runtime::task<io::result<void>> drain() override {
    while (!lines_.empty()) {
      io::result<void> written = co_await out_.write(lines_.front());
      if (!written) co_return written;
      lines_.pop_front();
      ++records_;
    }
    co_return co_await out_.flush();
  }
  bool is_sink() const noexcept override { return true; }
  runtime::task<void> close() override { (void)co_await out_.close(); }
  std::uint64_t records_out() const noexcept override { return records_; }

 private:
  std::function<std::string(const T&)> format_;
  stdout_sink out_;
  std::deque<std::string> lines_;
  std::uint64_t records_ = 0;
};

template <class T>
void stream<T>::print(std::function<std::string(const T&)> format, int fd) const {
  stage_def& stage = close_with_sink({"sink=print"});
  attach_fn attach = take();
  stage.build = [attach, format, fd](task_builder& b) {
    auto& tail = b.make<stdout_tail<T>>(format, fd);
    b.set_output(tail);
    attach(b, tail);
  };
}

}  // namespace sluice::dataflow
