#pragma once
// Helpers for the task_checkpoint tests: a fake checkpoint_subject with fixed answers, an
// acknowledger that records what it is told, and a harness holding a task's checkpoint machinery
// (pools for data and priority events, a partition of two subpartitions, the task_checkpoint).

#include <sluice/buffers/buffer_pool.hpp>
#include <sluice/buffers/event_codec.hpp>
#include <sluice/buffers/record_serializer.hpp>
#include <sluice/buffers/result_partition.hpp>
#include <sluice/runtime/task.hpp>
#include <sluice/snapshot/checkpoint_participant.hpp>
#include <sluice/snapshot/deferred_state.hpp>
#include <sluice/snapshot/state_file.hpp>
#include <sluice/snapshot/task_checkpoint.hpp>

#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

// In a namespace of their own: other test headers define sluice::test::harness (one definition rule).
namespace sluice::test::checkpoint_fakes {

inline constexpr snapshot::task_id test_task = 6;
inline constexpr std::size_t segment_bytes = 4096;

inline std::vector<std::byte> bytes_of(const std::string& s) {
  std::vector<std::byte> out(s.size());
  if (!s.empty()) std::memcpy(out.data(), s.data(), s.size());
  return out;
}
inline std::vector<std::byte> concat(std::vector<std::byte> a, const std::vector<std::byte>& b) {
  const std::size_t at = a.size();
  a.resize(at + b.size());
  if (!b.empty()) std::memcpy(a.data() + at, b.data(), b.size());
  return a;
}
// The wire format of `records` (record_serializer.hpp): what a subpartition's stream holds.
inline std::vector<std::byte> framed(const std::vector<std::vector<std::byte>>& records) {
  std::vector<std::byte> out;
  for (const auto& r : records) {
    const std::uint32_t length = static_cast<std::uint32_t>(r.size());
    std::vector<std::byte> prefix(buffers::record_length_bytes);
    std::memcpy(prefix.data(), &length, buffers::record_length_bytes);
    out = concat(concat(std::move(out), prefix), r);
  }
  return out;
}

// A deferred part that hands out fixed slices, one per call, counting them in *given; asked for
// slice `throw_at`, it throws (a state that does not encode).
class sliced_state final : public snapshot::deferred_state {
 public:
  sliced_state(std::vector<std::vector<std::byte>> slices, int* given, int throw_at, const int* abandon_at = nullptr)
      : slices_(std::move(slices)), given_(given), throw_at_(throw_at), abandon_at_(abandon_at) {}
  // Abandoned once *abandon_at is the next slice (the test moves it, as a later freeze would).
  bool abandoned() const noexcept override { return abandon_at_ != nullptr && static_cast<int>(next_) == *abandon_at_; }
  bool next_slice(std::vector<std::byte>& out, std::size_t) override {
    if (static_cast<int>(next_) == throw_at_) throw std::runtime_error("slice failed");
    if (abandon_at_ != nullptr && static_cast<int>(next_) == *abandon_at_) return true;  // ends early
    if (next_ < slices_.size()) {
      out.insert(out.end(), slices_[next_].begin(), slices_[next_].end());
      ++next_;
      ++*given_;
    }
    return next_ == slices_.size();
  }

 private:
  std::vector<std::vector<std::byte>> slices_;
  std::size_t next_ = 0;
  int* given_;
  int throw_at_;
  const int* abandon_at_;
};

// A task as a checkpoint sees it: fixed answers, and a count of what was asked.
class fake_subject final : public snapshot::checkpoint_subject {
 public:
  std::vector<snapshot::operator_snapshot> operators;
  // Per operator index, the slices of its deferred part (sliced_state), each snapshot anew.
  std::vector<std::pair<std::uint32_t, std::vector<std::vector<std::byte>>>> deferred;
  int slices_given = 0;
  int deferred_throw_at = -1;
  int deferred_abandon_at = -1;  // a later freeze took the state over before this slice
  bool sink = false;
  std::vector<std::byte> sink_bytes;
  std::optional<std::vector<std::byte>> backlog;
  bool backlogged = false;
  // drain_output() emits these into `partition` (subpartition 0) and clears `backlogged`.
  std::vector<std::vector<std::byte>> drained_records;
  buffers::result_partition* partition = nullptr;
  std::vector<unconsumed_input> input;  // handed over once

  int drain_calls = 0;
  int unconsumed_calls = 0;
  std::vector<snapshot::checkpoint_id> sink_state_ids;

  snapshot::taken_state operator_states(snapshot::checkpoint_id) override {
    snapshot::taken_state taken{operators, {}};
    for (const auto& [index, slices] : deferred) {
      taken.later.push_back({index, std::make_unique<sliced_state>(slices, &slices_given, deferred_throw_at, &deferred_abandon_at)});
    }
    return taken;
  }
  bool is_sink() const noexcept override { return sink; }
  std::optional<io::error> sink_error;  // sink_state fails with it
  runtime::task<io::result<std::vector<std::byte>>> sink_state(snapshot::checkpoint_id id) override {
    sink_state_ids.push_back(id);
    if (sink_error) co_return *sink_error;
    co_return sink_bytes;
  }
  int holds = 0;
  std::vector<io::error> failures;
  void hold_sink() override { ++holds; }
  void fail_task(io::error error) override { failures.push_back(std::move(error)); }
  std::optional<std::vector<std::byte>> output_backlog() const override { return backlog; }
  bool output_backlogged() const noexcept override { return backlogged; }
  runtime::task<io::result<void>> drain_output() override {
    ++drain_calls;
    for (const auto& r : drained_records) {
      const bool ok = co_await partition->emit_bytes(r, 0);
      REQUIRE(ok);
    }
    backlogged = false;
    co_return io::success();
  }
  std::vector<unconsumed_input> unconsumed() override {
    ++unconsumed_calls;
    return std::exchange(input, {});
  }
};

class recording_acknowledger final : public snapshot::checkpoint_acknowledger {
 public:
  struct ack {
    snapshot::task_id task;
    snapshot::checkpoint_id id;
    snapshot::task_checkpoint_stats stats;
  };
  struct declined {
    snapshot::task_id task;
    snapshot::checkpoint_id id;
    snapshot::abort_reason reason;
    std::string detail;
  };
  std::vector<ack> acks;
  std::vector<declined> declines;
  std::optional<snapshot::checkpoint_id> throw_on_ack;  // acknowledging this id throws

  void acknowledge(snapshot::task_id task, snapshot::checkpoint_id id,
                   snapshot::task_checkpoint_stats stats) override {
    if (throw_on_ack == id) throw std::runtime_error("the acknowledger failed");
    acks.push_back({task, id, std::move(stats)});
  }
  void decline(snapshot::task_id task, snapshot::checkpoint_id id, snapshot::abort_reason reason,
               std::string detail) override {
    declines.push_back({task, id, reason, std::move(detail)});
  }
};

inline std::string chk_dir(const temp_dir& dir, snapshot::checkpoint_id id) {
  std::string path = dir.file("chk-" + std::to_string(id));
  std::filesystem::create_directories(path);
  return path;
}
inline std::string state_path(const std::string& chk) { return chk + "/" + snapshot::state_file_name(test_task); }

// One polled item of a subpartition: 'd' data, 'b'/'B' an in-band/priority barrier, 'c'/'C' an
// in-band/priority cancellation marker, 'A' a priority barrier announcement, 'E' end-of-partition,
// '?' anything else; data bytes are appended to *data.
inline std::string poll_all(buffers::result_partition& out, std::size_t sub, snapshot::checkpoint_id id,
                            std::vector<std::byte>* data) {
  std::string items;
  while (auto next = out.poll_next(sub)) {
    if (next->view.kind() == buffers::buffer_kind::data) {
      items += 'd';
      const auto span = next->view.data();
      if (data != nullptr) *data = concat(std::move(*data), std::vector<std::byte>(span.begin(), span.end()));
      continue;
    }
    const std::optional<buffers::gate_event> e = buffers::decode_event(next->view.data());
    if (buffers::is_end_of_partition(next->view)) {
      items += 'E';
    } else if (e && e->kind == buffers::gate_event::type::barrier && e->id == id) {
      items += next->priority ? 'B' : 'b';
    } else if (e && e->kind == buffers::gate_event::type::cancellation_marker && e->id == id) {
      items += next->priority ? 'C' : 'c';
    } else if (e && e->kind == buffers::gate_event::type::barrier_announcement && e->id == id && next->priority) {
      items += 'A';
    } else {
      items += '?';
    }
  }
  return items;
}

// A task's checkpoint machinery on the current executor: pools for data and priority events, a
// partition of two subpartitions, the fake subject and the recorder.
struct task_harness {
  buffers::local_buffer_pool data_pool;
  buffers::local_buffer_pool event_pool;
  buffers::result_partition out;
  fake_subject subject;
  recording_acknowledger acknowledger;
  snapshot::task_checkpoint checkpoint;

  task_harness(buffers::network_memory& memory, bool has_input,
               std::chrono::milliseconds alignment_timeout = std::chrono::milliseconds(0))
      : data_pool(memory.pool(0), 2, 32),
        event_pool(memory.pool(0), 1, 4),
        out(data_pool, {.subpartitions = 2, .flush_timeout = std::chrono::milliseconds(100)}),
        checkpoint(options(has_input, alignment_timeout), subject) {
    out.set_priority_event_pool(event_pool);
    subject.partition = &out;
  }
  snapshot::task_checkpoint_options options(bool has_input, std::chrono::milliseconds alignment_timeout) {
    snapshot::task_checkpoint_options o;
    o.task = test_task;
    o.name = "count#6";
    o.acknowledger = &acknowledger;
    o.partition = &out;
    o.has_input = has_input;
    o.alignment_timeout = alignment_timeout;
    // Reported as the alignment of checkpoint N: N ms.
    o.alignment_of = [](snapshot::checkpoint_id id) { return std::chrono::nanoseconds(std::chrono::milliseconds(id)); };
    return o;
  }
};

// Emits `records` into subpartition `sub` (none polled: a flush timeout of 100 ms keeps the last
// buffer partly filled, and bigger records fill whole buffers that stay queued).
inline runtime::task<void> emit_all(buffers::result_partition* out, std::vector<std::vector<std::byte>> records,
                                    std::size_t sub) {
  for (const auto& r : records) {
    const bool ok = co_await out->emit_bytes(r, sub);
    REQUIRE(ok);
  }
}

}  // namespace sluice::test::checkpoint_fakes
