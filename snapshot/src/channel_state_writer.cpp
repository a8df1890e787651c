// The channel-state writer's bookkeeping: watermarks, the ongoing checkpoint, kept outcomes and
// result waiters (the lifecycle is explained in channel_state_writer.hpp). The I/O is in
// channel_state_writer_io.cpp.

#include "channel_state_job.hpp"

#include <sluice/buffers/crc32c.hpp>
#include <sluice/runtime/assert.hpp>
#include <sluice/runtime/log.hpp>
#include <sluice/runtime/plant.hpp>

#include <fmt/format.h>

#include <cassert>
#include <exception>
#include <stdexcept>
#include <utility>

namespace sluice::snapshot {

namespace {

class writer_category_impl final : public std::error_category {
 public:
  const char* name() const noexcept override { return "channel_state_writer"; }
  std::string message(int value) const override {
    switch (static_cast<writer_errc>(value)) {
      case writer_errc::invalid_id: return "invalid checkpoint id";
      case writer_errc::not_started: return "checkpoint not started";
      case writer_errc::stale: return "checkpoint not newer than the latest started one";
      case writer_errc::aborted: return "checkpoint aborted";
      case writer_errc::finished: return "checkpoint finished";
      case writer_errc::closed: return "channel-state writer closed";
      case writer_errc::not_data: return "an event handed as channel-state data";
      case writer_errc::no_channel_state: return "checkpoint takes no channel state";
      case writer_errc::bad_base: return "invalid delta base for an operator's state";
    }
    return "unknown channel-state writer error";
  }
};

io::error make_refusal(writer_errc code, std::string message) { return io::error(code, std::move(message)); }

}  // namespace

const std::error_category& writer_category() noexcept {
  static const writer_category_impl category;
  return category;
}

// --- the awaiter behind result(id) ------------------------------------------------------------

class channel_state_writer::result_awaiter : public runtime::detail::list_wait {
 public:
  result_awaiter(channel_state_writer& writer, checkpoint_id id) noexcept : writer_(&writer), id_(id) {}
  bool await_ready() {
    outcome_ = writer_->try_result(id_);
    return outcome_.has_value();
  }
  template <class P>
  void await_suspend(std::coroutine_handle<P> h) {
    enqueue(writer_->waiters_, h, runtime::detail::stop_token_of(h));
  }
  // Reads only this awaiter: the writer decided the outcome before scheduling it.
  checkpoint_outcome await_resume() {
    if (error_) std::rethrow_exception(error_);
    if (outcome_) return std::move(*outcome_);
    return checkpoint_outcome::aborted(abort_reason::cancelled,
                                       fmt::format("the task waiting for checkpoint {} was stopped", id_));
  }

 private:
  friend class channel_state_writer;
  channel_state_writer* writer_;
  checkpoint_id id_;
  std::optional<checkpoint_outcome> outcome_{};
  std::exception_ptr error_;  // the lookup of the outcome threw: the waiter gets the exception
};

// --- construction -----------------------------------------------------------------------------

channel_state_writer::channel_state_writer(task_id task) : owner_(runtime::executor::current()), task_(task) {}

channel_state_writer::~channel_state_writer() {
  assert((closed_ || (!current_ && !retiring_)) && "channel_state_writer destroyed with a checkpoint open: close() it");
  assert(!pumping_ && "channel_state_writer destroyed while its pump runs: close() it");
  assert(waiters_.empty() && "channel_state_writer destroyed with result waiters: close() it");
}

void channel_state_writer::assert_owner() const noexcept {
  SLUICE_ASSERT(runtime::executor::current() == owner_, "channel_state_writer used off its owning executor");
}

checkpoint_id channel_state_writer::ongoing() const noexcept { return current_ ? current_->id : no_checkpoint; }

std::size_t channel_state_writer::tracked_checkpoints() const noexcept {
  return (current_ ? 1u : 0u) + (retiring_ ? 1u : 0u) + history_.size();
}

std::size_t channel_state_writer::queued_writes() const noexcept { return current_ ? current_->queue.size() : 0; }

// --- answering result(id) ---------------------------------------------------------------------

const checkpoint_outcome* channel_state_writer::kept(checkpoint_id id) const noexcept {
  for (const auto& k : history_) {
    if (k.id == id) return &k.outcome;
  }
  if (last_completed_ && last_completed_->id == id) return &last_completed_->outcome;
  return nullptr;
}

std::optional<checkpoint_outcome> channel_state_writer::try_result(checkpoint_id id) const {
  assert_owner();
  if (id == no_checkpoint) return checkpoint_outcome::aborted(abort_reason::declined, "checkpoint id 0 names no checkpoint");
  if (current_ && current_->id == id) return std::nullopt;
  if (SLUICE_PLANTED("abort-before-start") && kept(id) && !kept(id)->completed()) throw std::invalid_argument(fmt::format("channel state write result not found for checkpoint {}", id));  // FLINK-17869: the abort removed it
  if (const checkpoint_outcome* o = kept(id)) return *o;
  if (id <= known()) {
    return checkpoint_outcome::aborted(
        abort_reason::subsumed,
        fmt::format("checkpoint {} is not newer than checkpoint {} and no outcome of it is kept", id, known()));
  }
  if (closed_) return checkpoint_outcome::aborted(abort_reason::cancelled, "the channel-state writer is closed");
  return std::nullopt;
}

runtime::task<checkpoint_outcome> channel_state_writer::result(checkpoint_id id) {
  assert_owner();
  result_awaiter waiter(*this, id);
  checkpoint_outcome outcome = co_await waiter;
  co_return outcome;
}

void channel_state_writer::settle(checkpoint_id id, checkpoint_outcome outcome) {
  assert(kept(id) == nullptr || !outcome.completed());
  if (outcome.completed()) last_completed_ = kept_outcome{id, outcome};
  if (history_.size() == outcome_history) history_.pop_front();
  history_.push_back(kept_outcome{id, std::move(outcome)});
  assert(history_.size() <= outcome_history);
  wake_decided();
}

// Wakes (by scheduling) every waiter whose id is now decided, handing it the outcome.
void channel_state_writer::wake_decided() {
  if (waiters_.empty()) return;
  runtime::detail::wait_list scan;
  while (!waiters_.empty()) {
    auto* w = waiters_.front();
    waiters_.remove(w);
    scan.push_back(w);
  }
  while (!scan.empty()) {
    auto* w = static_cast<result_awaiter*>(scan.front());
    // A lookup that throws (the planted FLINK-17869 result "not found") fails that waiter, not the
    // caller settling another id: thrown from here, it left the waiters still in `scan` on no list,
    // never woken (a task closing for ever, waiting for its checkpoint's watcher).
    std::optional<checkpoint_outcome> outcome;
    try {
      outcome = try_result(w->id_);
    } catch (...) {
      w->error_ = std::current_exception();
      w->wake();
      continue;
    }
    if (outcome) {
      w->outcome_ = std::move(outcome);
      w->wake();
    } else {
      scan.remove(w);
      waiters_.push_back(w);
    }
  }
}

// --- errors -----------------------------------------------------------------------------------

io::error channel_state_writer::refusal(const char* what, checkpoint_id id) const {
  const auto prefix = fmt::format("{} for checkpoint {} of task {}", what, id, task_);
  if (closed_) return make_refusal(writer_errc::closed, prefix + ": the channel-state writer is closed");
  if (id == no_checkpoint) return make_refusal(writer_errc::invalid_id, prefix + ": 0 names no checkpoint");
  if (id > known()) return make_refusal(writer_errc::not_started, fmt::format("{}: checkpoint {} has not started", prefix, id));
  if (SLUICE_PLANTED("abort-before-start") && kept(id) && !kept(id)->completed()) throw std::invalid_argument(fmt::format("{}: channel state write result not found for checkpoint {}", prefix, id));  // FLINK-17869
  if (const checkpoint_outcome* o = kept(id)) {
    if (o->completed()) return make_refusal(writer_errc::finished, fmt::format("{}: checkpoint {} has completed", prefix, id));
    return make_refusal(writer_errc::aborted, fmt::format("{}: checkpoint {} was aborted ({}{}{})", prefix, id,
                                                         to_string(o->reason), o->detail.empty() ? "" : ": ", o->detail));
  }
  return make_refusal(writer_errc::aborted, fmt::format("{}: checkpoint {} is older than checkpoint {}", prefix, id, known()));
}

// --- start ------------------------------------------------------------------------------------

io::result<void> channel_state_writer::start(checkpoint_id id, std::string target_dir) {
  return open_job(id, std::move(target_dir), true, {});
}

io::result<void> channel_state_writer::start_aligned(checkpoint_id id, std::string target_dir,
                                                     std::vector<operator_snapshot> operator_states) {
  return open_job(id, std::move(target_dir), false, std::move(operator_states));
}

io::result<void> channel_state_writer::open_job(checkpoint_id id, std::string target_dir, bool channel_state,
                                                std::vector<operator_snapshot> operator_states) {
  assert_owner();
  if (!closed_ && id != no_checkpoint && id <= latest_started_) {
    return make_refusal(writer_errc::stale, fmt::format("start for checkpoint {} of task {}: checkpoint {} started already",
                                                        id, task_, latest_started_));
  }
  if (closed_ || id == no_checkpoint || id <= max_aborted_) return refusal("start", id);
  if (current_) abort_ongoing(abort_reason::subsumed, fmt::format("checkpoint {} started", id));
  latest_started_ = id;

  auto job = std::make_unique<checkpoint_job>();
  job->id = id;
  if (!target_dir.empty() && target_dir.back() != '/') target_dir.push_back('/');
  job->path = std::move(target_dir) + state_file_name(task_);
  job->channel_state = channel_state;
  job->input_finished = job->output_finished = !channel_state;
  for (auto& state : operator_states) {
    enqueue(*job, record_type::operator_state, 0, state.operator_index, {}, std::move(state.bytes));
  }
  assert(!current_);
  current_ = std::move(job);
  wake_decided();  // ids between the previous checkpoint and this one are decided now (subsumed)
  kick();
  return io::success();
}

// --- data -------------------------------------------------------------------------------------

void channel_state_writer::enqueue(checkpoint_job& job, record_type type, std::uint16_t group, std::uint32_t index,
                                   buffers::buffer_view view, std::vector<std::byte> bytes) {
  pending_write w;
  w.view = std::move(view);
  w.bytes = std::move(bytes);
  const auto payload = w.payload();
  assert(payload.size() <= max_record_payload_bytes);
  w.offset_bytes = job.next_offset_bytes;
  w.header = encode_record_header({type, group, index, static_cast<std::uint32_t>(payload.size()),
                                   buffers::crc32c(payload), job.next_sequence});
  ++job.next_sequence;
  job.next_offset_bytes += state_record_header_bytes + payload.size();
  if (type == record_type::operator_state) {
    job.operator_state_bytes += payload.size();
  } else if (type == record_type::operator_base) {
    job.base_payload_bytes += payload.size();
  } else {
    job.channel_state_bytes += payload.size();
  }
  job.queue.push_back(std::move(w));
}

io::result<void> channel_state_writer::add_input(checkpoint_id id, std::uint16_t gate, std::uint32_t channel,
                                                 std::vector<buffers::buffer_view> data) {
  return add_channel_state("add_input", record_type::input_channel, id, gate, channel, std::move(data));
}

io::result<void> channel_state_writer::add_output(checkpoint_id id, std::uint16_t partition,
                                                  std::uint32_t subpartition, std::vector<buffers::buffer_view> data) {
  return add_channel_state("add_output", record_type::output_channel, id, partition, subpartition, std::move(data));
}

// Every view in `data` is released on every path: written later (queued), or dropped here (the
// vector's destructor releases them, once each).
io::result<void> channel_state_writer::add_channel_state(const char* what, record_type type, checkpoint_id id,
                                                         std::uint16_t group, std::uint32_t index,
                                                         std::vector<buffers::buffer_view> data) {
  io::result<checkpoint_job*> job = channel_state_job(what, type, id, group, index);
  if (!job) return std::move(job).error();
  for (const auto& view : data) {
    if (view.valid() && view.kind() == buffers::buffer_kind::event) {
      // A part of this channel's state is missing now: the checkpoint cannot complete correctly.
      auto message = fmt::format("{} for checkpoint {} of task {}: {} channel ({}, {}) was handed an event, not data",
                                 what, id, task_, type == record_type::input_channel ? "input" : "output", group,
                                 index);
      data.clear();
      abort_ongoing(abort_reason::declined, message);
      return make_refusal(writer_errc::not_data, std::move(message));
    }
  }
  for (auto& view : data) {
    if (!view.valid() || view.size() == 0) continue;  // nothing to write; released with `data`
    for (std::size_t offset = 0; offset < view.size(); offset += max_record_payload_bytes) {
      const std::size_t length = std::min<std::size_t>(max_record_payload_bytes, view.size() - offset);
      if (offset == 0 && length == view.size()) {
        enqueue(*job.value(), type, group, index, std::move(view), {});
      } else {
        enqueue(*job.value(), type, group, index, view.slice(offset, length), {});
      }
    }
  }
  kick();
  return io::success();
}

io::result<void> channel_state_writer::add_input_bytes(checkpoint_id id, std::uint16_t gate, std::uint32_t channel,
                                                       std::vector<std::byte> bytes) {
  io::result<checkpoint_job*> job = channel_state_job("add_input_bytes", record_type::input_channel, id, gate, channel);
  if (!job) return std::move(job).error();
  enqueue_bytes(*job.value(), record_type::input_channel, gate, channel, std::move(bytes));
  kick();
  return io::success();
}

// The ongoing checkpoint, if it takes channel state for this direction now.
io::result<channel_state_writer::checkpoint_job*> channel_state_writer::channel_state_job(const char* what,
                                                                                          record_type type,
                                                                                          checkpoint_id id,
                                                                                          std::uint16_t,
                                                                                          std::uint32_t) {
  assert_owner();
  if (!current_ || current_->id != id) return refusal(what, id);
  checkpoint_job& job = *current_;
  const bool input = type == record_type::input_channel;
  const auto prefix = fmt::format("{} for checkpoint {} of task {}", what, id, task_);
  if (!job.channel_state) {
    return make_refusal(writer_errc::no_channel_state,
                        fmt::format("{}: checkpoint {} is aligned and takes no channel state", prefix, id));
  }
  if (input ? job.input_finished : job.output_finished) {
    return make_refusal(writer_errc::finished,
                        fmt::format("{}: the {} of checkpoint {} is finished", prefix, input ? "input" : "output", id));
  }
  return &job;
}

// Heap bytes as records of at most max_record_payload_bytes; one operator's (one channel's) records
// concatenate in file order (state_file.hpp).
void channel_state_writer::enqueue_bytes(checkpoint_job& job, record_type type, std::uint16_t group,
                                         std::uint32_t index, std::vector<std::byte> bytes) {
  if (bytes.size() <= max_record_payload_bytes) {
    if (!bytes.empty() || type == record_type::operator_state) enqueue(job, type, group, index, {}, std::move(bytes));
    return;
  }
  for (std::size_t offset = 0; offset < bytes.size(); offset += max_record_payload_bytes) {
    const std::size_t length = std::min<std::size_t>(max_record_payload_bytes, bytes.size() - offset);
    const auto first = bytes.begin() + static_cast<std::ptrdiff_t>(offset);
    enqueue(job, type, group, index, {}, std::vector<std::byte>(first, first + static_cast<std::ptrdiff_t>(length)));
  }
}

io::result<void> channel_state_writer::add_operator_state(checkpoint_id id, std::uint32_t operator_index,
                                                          std::vector<std::byte> bytes) {
  assert_owner();
  if (!current_ || current_->id != id) return refusal("add_operator_state", id);
  checkpoint_job& job = *current_;
  if (job.finished()) {
    return make_refusal(writer_errc::finished,
                        fmt::format("add_operator_state for checkpoint {} of task {}: checkpoint {} is finished", id,
                                    task_, id));
  }
  enqueue_bytes(job, record_type::operator_state, 0, operator_index, std::move(bytes));
  kick();
  return io::success();
}

io::result<void> channel_state_writer::add_operator_base(checkpoint_id id, std::uint32_t operator_index,
                                                         checkpoint_id base) {
  assert_owner();
  if (!current_ || current_->id != id) return refusal("add_operator_base", id);
  checkpoint_job& job = *current_;
  const auto prefix = fmt::format("add_operator_base for checkpoint {} of task {}", id, task_);
  if (job.finished()) {
    return make_refusal(writer_errc::finished, fmt::format("{}: checkpoint {} is finished", prefix, id));
  }
  // What the reader would reject (state_file_reader.hpp) is refused here, so no file fails to load.
  if (base == no_checkpoint || base >= id) {
    return make_refusal(writer_errc::bad_base, fmt::format("{}: operator {} cannot be based on checkpoint {} (a base "
                                                           "is above 0 and below the checkpoint)",
                                                           prefix, operator_index, base));
  }
  if (!job.based_operators.insert(operator_index).second) {
    return make_refusal(writer_errc::bad_base,
                        fmt::format("{}: operator {} already has a base in this checkpoint", prefix, operator_index));
  }
  const auto payload = encode_operator_base_payload(base);
  enqueue(job, record_type::operator_base, 0, operator_index, {},
          std::vector<std::byte>(payload.begin(), payload.end()));
  kick();
  return io::success();
}

io::result<void> channel_state_writer::finish_input(checkpoint_id id) {
  assert_owner();
  if (!current_ || current_->id != id) return refusal("finish_input", id);
  current_->input_finished = true;
  kick();
  return io::success();
}

io::result<void> channel_state_writer::finish_output(checkpoint_id id) {
  assert_owner();
  if (!current_ || current_->id != id) return refusal("finish_output", id);
  current_->output_finished = true;
  kick();
  return io::success();
}

// --- abort ------------------------------------------------------------------------------------

void channel_state_writer::abort(checkpoint_id id, abort_reason reason, std::string detail) {
  assert_owner();
  if (closed_ || id == no_checkpoint) return;
  if (current_ && current_->id == id) {
    abort_ongoing(reason, std::move(detail));
    return;
  }
  const bool future = id > known();
  if (id > max_aborted_) max_aborted_ = id;
  // An ended or older id keeps its answer; a future one is remembered, so its start is a no-op.
  if (future && kept(id) == nullptr) settle(id, checkpoint_outcome::aborted(reason, std::move(detail)));
}

void channel_state_writer::abort_ongoing(abort_reason reason, std::string detail) {
  assert(current_);
  checkpoint_job& job = *current_;
  const checkpoint_id id = job.id;
  job.aborted = true;
  job.queue.clear();  // queued, never-issued writes: their views are released here, once each
  if (id > max_aborted_) max_aborted_ = id;
  if (job.opened) {
    // The pump holds this job (an operation in flight) or must close its file: it retires it.
    assert(!retiring_ && "a second checkpoint with open I/O");
    retiring_ = std::move(current_);
    kick();
  } else {
    current_.reset();
  }
  settle(id, checkpoint_outcome::aborted(reason, std::move(detail)));
}

// --- close ------------------------------------------------------------------------------------

runtime::task<void> channel_state_writer::close() {
  assert_owner();
  if (closing_) {
    const bool done = co_await closed_event_.wait();
    (void)done;
    co_return;
  }
  closing_ = true;
  // Whatever throws on the way (out of memory), the pump is joined before the close ends: the
  // writer is destroyed after it, and a write or close still in flight would resume on freed memory.
  std::exception_ptr thrown;
  try {
    if (current_) abort_ongoing(abort_reason::cancelled, fmt::format("task {} is shutting down", task_));
  } catch (...) {
    thrown = std::current_exception();
  }
  closed_ = true;
  try {
    wake_decided();  // every undecided id is aborted(cancelled) now
  } catch (...) {
    if (!thrown) thrown = std::current_exception();
  }
  pump_scope_.request_stop();  // an in-flight write ends (ECANCELED) instead of finishing
  co_await pump_scope_.join();
  closed_event_.set();
  if (thrown) std::rethrow_exception(thrown);
  assert(!current_ && !retiring_ && !pumping_);
  assert(waiters_.empty());
}

}  // namespace sluice::snapshot
