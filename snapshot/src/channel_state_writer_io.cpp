// The channel-state writer's pump: the one coroutine that does the writer's I/O, one step at a
// time (the record writes of a step are in flight together), in this order:
//   1. close the file of a retiring (aborted) checkpoint, if any;
//   2. open the ongoing checkpoint's file and write its header;
//   3. write its queued records, up to 16 at once (each at its own offset): record header, then
//      payload straight from the view;
//   4. once both directions are finished and the queue is empty: `end` record (then on_written:
//      the file holds its bytes), fsync, close, and the checkpoint completes.
// Before every write it submits -- the first of a record's header or payload, and each
// continuation after a short write -- it checks whether the checkpoint was aborted meanwhile; if so
// it issues nothing more for it (scenario 3: a batch's writes already in flight complete, none
// follows them) and only closes the file. submit_write() asserts it (SLUICE_ASSERT). It runs while there is work and ends;
// kick() starts it again. Because steps are sequential, at most one checkpoint has I/O at any time.

#include "channel_state_job.hpp"

#include <sluice/buffers/crc32c.hpp>
#include <sluice/runtime/assert.hpp>
#include <sluice/runtime/executor.hpp>
#include <sluice/runtime/log.hpp>
#include <sluice/runtime/plant.hpp>
#include <sluice/runtime/when_all.hpp>

#include <cassert>
#include <cstring>
#include <exception>
#include <optional>
#include <vector>

namespace sluice::snapshot {

// The one place a write of a checkpoint's file is submitted. write_at is lazy: the write is
// submitted when the caller awaits the task, with nothing in between.
runtime::task<io::result<std::size_t>> channel_state_writer::submit_write(checkpoint_job* job,
                                                                          std::span<const std::byte> data,
                                                                          std::uint64_t offset) {
  SLUICE_ASSERT(!job->aborted, "a write submitted for an aborted checkpoint (scenario 3)");
  return job->file.write_at(data, offset);
}

// Writes all of `data` at `offset`, one write at a time, and stops before the next one once the
// checkpoint is aborted (io::file::write_all would carry on after a short write). Success when it
// stopped for the abort: the caller checks job->aborted. A write with no progress is an error.
runtime::task<io::result<void>> channel_state_writer::write_unless_aborted(checkpoint_job* job,
                                                                           std::span<const std::byte> data,
                                                                           std::uint64_t offset) {
  while (!data.empty() && !job->aborted) {
    io::result<std::size_t> written = co_await submit_write(job, data, offset);
    if (!written) co_return std::move(written).error();
    if (*written == 0) {
      co_return io::error::from_code(io::errc::no_progress,
                                     "write '" + job->file.path() + "' at offset " + std::to_string(offset));
    }
    data = data.subspan(*written);
    offset += *written;
  }
  co_return io::success();
}

void channel_state_writer::kick() {
  if (pumping_) return;
  pumping_ = true;
  pump_scope_.spawn(pump());
}

runtime::task<void> channel_state_writer::pump() {
  try {
    for (;;) {
      if (retiring_) {
        co_await retire();
        continue;
      }
      checkpoint_job* job = current_.get();
      if (job == nullptr) break;
      const bool has_work = !job->opened || !job->queue.empty() || job->finished();
      if (!has_work) break;
      co_await advance(job);
    }
  } catch (const std::exception& e) {
    runtime::log::error("channel-state writer of task {}: {}", task_, e.what());
  }
  pumping_ = false;
}

runtime::task<void> channel_state_writer::advance(checkpoint_job* job) {
  if (job->opened && !job->queue.empty()) {
    co_await write_next(job);
    co_return;
  }
  if (job->opened) {
    co_await finalize(job);
    co_return;
  }
  job->opened = true;
  auto opened = co_await io::file::open(job->path, io::open_options::create_or_truncate());
  if (opened) job->file = std::move(*opened);
  if (job->aborted) co_return;  // the retire step closes the file
  if (!opened) {
    fail(*job, opened.error());
    co_return;
  }
  const auto header = encode_file_header({job->id, task_});
  auto written = co_await write_unless_aborted(job, header, 0);
  if (job->aborted) co_return;
  if (!written) fail(*job, written.error());
}

// Up to write_batch queued records at once, all in flight together: one write after another cost a
// device round trip each, and a checkpoint with megabytes of channel state took milliseconds more.
// Each record is its header, then its payload straight from the view; a record whose checkpoint was
// aborted meanwhile gets no payload write.
runtime::task<void> channel_state_writer::write_next(checkpoint_job* job) {
  constexpr std::size_t write_batch = 16;
  // Taken off the queue: from here on `batch` owns the views, released when this frame ends, i.e.
  // after their writes have completed (or failed, or been cancelled).
  std::vector<pending_write> batch;
  while (!job->queue.empty() && batch.size() < write_batch) {
    batch.push_back(std::move(job->queue.front()));
    job->queue.pop_front();
  }
  std::optional<io::error> failed;
  std::vector<runtime::task<void>> writes;
  writes.reserve(batch.size());
  for (pending_write& record : batch) writes.push_back(write_record(job, &record, &failed));
  co_await runtime::when_all(std::move(writes));
  if (job->aborted) co_return;
  if (failed) fail(*job, *failed);
}

// Each record's buffer goes back as soon as its own writes are done (not when the whole batch is).
runtime::task<void> channel_state_writer::write_record(checkpoint_job* job, pending_write* record,
                                                       std::optional<io::error>* failed) {
  auto head = co_await write_unless_aborted(job, record->header, record->offset_bytes);
  if (job->aborted || !head) {
    if (!head && !job->aborted && !*failed) *failed = head.error();
    record->view.reset();
    co_return;
  }
  auto body = co_await write_unless_aborted(job, record->payload(), record->offset_bytes + state_record_header_bytes);
  if (!body && !*failed) *failed = body.error();
  record->view.reset();
}

runtime::task<void> channel_state_writer::finalize(checkpoint_job* job) {
  assert(job->finished() && job->queue.empty() && job->file.is_open());
  const std::uint64_t payload_bytes = job->channel_state_bytes + job->operator_state_bytes;
  const auto end_payload = encode_end_payload({job->next_sequence, payload_bytes});
  const auto end_header = encode_record_header(
      {record_type::end, 0, 0, state_end_payload_bytes, buffers::crc32c(end_payload), job->next_sequence});
  std::array<std::byte, state_record_header_bytes + state_end_payload_bytes> end_record{};
  std::memcpy(end_record.data(), end_header.data(), end_header.size());
  std::memcpy(end_record.data() + end_header.size(), end_payload.data(), end_payload.size());

  auto written = co_await write_unless_aborted(job, end_record, job->next_offset_bytes);
  if (job->aborted) co_return;
  if (!written) {
    fail(*job, written.error());
    co_return;
  }
  if (on_written_) on_written_(job->id);
  if (job->aborted) co_return;  // the callback aborted it
  if (SLUICE_PLANTED("manifest-before-state")) {
    // The checkpoint completes (the task acknowledges, the coordinator commits the manifest) before
    // its state file is durable: the fsync comes after.
    io::file unsynced = std::move(job->file);
    complete_ongoing();
    auto late_sync = co_await unsynced.fsync();
    auto late_close = co_await unsynced.close();
    (void)late_sync;
    (void)late_close;
    co_return;
  }
  const auto sync_started = runtime::executor::current()->now();
  auto synced = co_await job->file.fsync();
  if (job->aborted) co_return;
  job->fsync_duration = runtime::executor::current()->now() - sync_started;
  if (!synced) {
    fail(*job, synced.error());
    co_return;
  }
  auto closed = co_await job->file.close();
  if (job->aborted) co_return;
  if (!closed) {
    fail(*job, closed.error());
    co_return;
  }
  assert(current_.get() == job);
  complete_ongoing();
}

// The ongoing checkpoint's file is durable and closed: it completed.
void channel_state_writer::complete_ongoing() {
  const std::unique_ptr<checkpoint_job> done = std::move(current_);
  checkpoint_outcome outcome;
  outcome.state = checkpoint_outcome::status::completed;
  outcome.channel_state_bytes = done->channel_state_bytes;
  outcome.operator_state_bytes = done->operator_state_bytes;
  outcome.fsync_duration = done->fsync_duration;
  settle(done->id, std::move(outcome));
}

runtime::task<void> channel_state_writer::retire() {
  checkpoint_job* job = retiring_.get();
  assert(job != nullptr && job->aborted && job->queue.empty());
  if (job->file.is_open()) {
    auto closed = co_await job->file.close();
    if (!closed) runtime::log::warn("checkpoint {} of task {} (aborted): {}", job->id, task_, closed.error().message());
  }
  retiring_.reset();
}

void channel_state_writer::fail(checkpoint_job& job, const io::error& error) {
  assert(current_.get() == &job && !job.aborted);
  runtime::log::warn("checkpoint {} of task {} declined: {}", job.id, task_, error.message());
  abort_ongoing(abort_reason::io_error, error.message());
}

}  // namespace sluice::snapshot
