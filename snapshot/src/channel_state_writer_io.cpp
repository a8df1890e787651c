// The channel-state writer's pump: the one coroutine that does the writer's I/O, one step at a
// time, in this order:
//   1. close the file of a retiring (aborted) checkpoint, if any;
//   2. open the ongoing checkpoint's file;
//   3. write: the file header (with the first write), the queued records -- consecutive small ones
//      copied into one buffer of up to 512 KiB, a large one (operator state) header then payload
//      from its own memory -- and, once both directions are finished and the queue is empty, the
//      `end` record (with the last records, or alone);
//   4. after the `end` record: on_written (the file holds its bytes), fsync, close, and the
//      checkpoint completes.
// Before every write it submits -- a batch, a large record's header or payload, and each
// continuation after a short write -- it checks whether the checkpoint was aborted meanwhile; if so
// it issues nothing more for it (scenario 3: a write already in flight completes, none follows it)
// and only closes the file. submit_write() asserts it (SLUICE_ASSERT). It runs while there is work
// and ends; kick() starts it again. Because steps are sequential, at most one checkpoint has I/O at
// any time, and at most one write.

#include "channel_state_job.hpp"

#include <sluice/buffers/crc32c.hpp>
#include <sluice/runtime/assert.hpp>
#include <sluice/runtime/executor.hpp>
#include <sluice/runtime/log.hpp>
#include <sluice/runtime/plant.hpp>

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
  if (job->opened) {
    co_await write_next(job);
    co_return;
  }
  job->opened = true;
  auto opened = co_await io::file::open(job->path, io::open_options::create_or_truncate());
  if (opened) job->file = std::move(*opened);
  if (job->aborted) co_return;  // the retire step closes the file
  if (!opened) fail(*job, opened.error());
  // (The file header goes out with the first write.)
}

// Everything up to the next large record, in ONE write: the file header if it is not out yet, the
// queued records (contiguous in the file: offsets fixed at enqueue), copied with their headers, up
// to 512 KiB, and the `end` record once the queue is empty and both directions are finished. A
// buffered write to ext4 is handed by io_uring to a kernel worker, and a round trip per header
// and per payload (16 records in flight at a time), and for the file header and the `end`, made a
// checkpoint's few hundred KiB of channel state take a millisecond or more. Copied, each record's
// buffer goes back to its pool at once. A record whose payload is above copy_limit (a large
// operator state) is written from its own memory instead, header then payload.
runtime::task<void> channel_state_writer::write_next(checkpoint_job* job) {
  constexpr std::size_t batch_limit = 512 * 1024;
  constexpr std::size_t copy_limit = 128 * 1024;
  const bool large_next = !job->queue.empty() && job->queue.front().payload().size() > copy_limit;
  if (large_next && job->header_written) {
    // Taken off the queue: from here on `record` owns the view, released when its writes are done.
    pending_write record = std::move(job->queue.front());
    job->queue.pop_front();
    std::optional<io::error> failed;
    co_await write_record(job, &record, &failed);
    if (job->aborted) co_return;
    if (failed) fail(*job, *failed);
    co_return;
  }
  const std::uint64_t offset = job->header_written ? job->queue.empty() ? job->next_offset_bytes : job->queue.front().offset_bytes : 0;
  std::size_t bytes = job->header_written ? 0 : state_file_header_bytes;
  std::size_t records = 0;
  for (const pending_write& r : job->queue) {
    const std::size_t size = r.header.size() + r.payload().size();
    if (r.payload().size() > copy_limit || (records > 0 && bytes + size > batch_limit)) break;
    bytes += size;
    ++records;
  }
  const bool with_end = records == job->queue.size() && job->finished();
  if (with_end) bytes += state_record_header_bytes + state_end_payload_bytes;
  std::vector<std::byte> batch(bytes);
  std::size_t at = 0;
  if (!job->header_written) {
    const auto header = encode_file_header({job->id, task_});
    std::memcpy(batch.data(), header.data(), header.size());
    at = header.size();
  }
  for (std::size_t i = 0; i < records; ++i) {
    const pending_write& r = job->queue.front();
    SLUICE_ASSERT(r.offset_bytes == offset + at, "queued records are contiguous in the state file");
    const std::span<const std::byte> payload = r.payload();
    std::memcpy(batch.data() + at, r.header.data(), r.header.size());
    if (!payload.empty()) std::memcpy(batch.data() + at + r.header.size(), payload.data(), payload.size());
    at += r.header.size() + payload.size();
    job->queue.pop_front();  // its buffer goes back now
  }
  if (with_end) {
    SLUICE_ASSERT(job->next_offset_bytes == offset + at, "the end record follows the last record");
    const auto end = end_record(*job);
    std::memcpy(batch.data() + at, end.data(), end.size());
  }
  if (batch.empty()) co_return;  // (opened, nothing queued, not finished: the pump stops)
  auto written = co_await write_unless_aborted(job, batch, offset);
  if (job->aborted) co_return;
  if (!written) {
    fail(*job, written.error());
    co_return;
  }
  job->header_written = true;
  if (with_end) co_await sync_and_close(job);
}

// A large record: its header, then its payload from its own memory; the view (if any) goes back
// once both are written.
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

std::array<std::byte, state_record_header_bytes + state_end_payload_bytes> channel_state_writer::end_record(
    const checkpoint_job& job) {
  const std::uint64_t payload_bytes = job.channel_state_bytes + job.operator_state_bytes + job.base_payload_bytes;
  const auto end_payload = encode_end_payload({job.next_sequence, payload_bytes});
  const auto end_header = encode_record_header(
      {record_type::end, 0, 0, state_end_payload_bytes, buffers::crc32c(end_payload), job.next_sequence});
  std::array<std::byte, state_record_header_bytes + state_end_payload_bytes> end{};
  std::memcpy(end.data(), end_header.data(), end_header.size());
  std::memcpy(end.data() + end_header.size(), end_payload.data(), end_payload.size());
  return end;
}

// The `end` record is written: the file holds its bytes (on_written), then fsync, close, complete.
runtime::task<void> channel_state_writer::sync_and_close(checkpoint_job* job) {
  assert(job->finished() && job->queue.empty() && job->file.is_open());
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
