#pragma once
// The connector API: how a job reads from and writes to the world outside it (files, a message
// system, a database) with exactly-once results. A connector is a class of your own; each task of a
// source or sink stage owns one instance, and everything it does runs on that task's executor.
//
// A SOURCE owns a replayable position: what position() returns at a barrier goes into that
// checkpoint, and a restart calls restore() with it before open(), so the source produces again
// exactly the records after it. The task calls, one at a time:
//   restore(position)   only when resuming from a checkpoint (the bytes position() gave there)
//   open()              connect, open files, seek to the restored position
//   read(out, max)      emit up to `max` records (and watermarks) into `out`; `more` if there may be
//                       more at once, `idle` if nothing is at hand now, `end` once exhausted (a
//                       bounded source). read() may await I/O that completes promptly (a file
//                       read) but must not wait for data to ARRIVE: it returns `idle` and the task
//                       then awaits wait_readable() together with its barriers and messages, so a
//                       quiet source never holds up a checkpoint.
//   position()          at a barrier (synchronously, between reads): where the records emitted so
//                       far end. Not what was fetched: records fetched but not yet emitted are
//                       fetched again after a restart.
//   close()             at the end of the task, whether it ended well or not.
//
// A SINK is two-phase. The task calls, one at a time:
//   recover(from)          once, before any write: connect, then finish what the checkpoint the job
//                          resumes from pre-committed (from.precommitted, the bytes precommit()
//                          returned there; empty on a fresh start): commit it if it is not committed
//                          yet, and discard anything this task staged after it (the replay writes it
//                          again). Key what the sink leaves outside (markers, message ids,
//                          transactional ids) on from.run, never on the job's name alone: see
//                          sink_recovery below.
//   write(record)          stage one record; may await (its I/O, backpressure). `record` stays valid
//                          until the returned task completes.
//   precommit(id)          at barrier `id`, after every write before it: make what was staged since
//                          the last precommit ready to commit, and return the bytes to keep in
//                          checkpoint `id` (what recovery needs to commit it).
//   commit(id)             checkpoint `id` completed: commit what every precommit(j <= id) staged.
//                          Idempotent (it may come again after a restart, through recover()). An
//                          error fails the task; the restart's recover() commits it then.
//   close()                at the end of the task; what was staged after the last completed
//                          checkpoint is not committed (a bounded job takes a last checkpoint first).
// A checkpoint that is aborted is never committed: its staged output is committed by the next one
// that completes (data before barrier N is also before barrier N+1).
//
// Exactly once, then, is: a record reaches the outside world once per checkpoint it belongs to being
// committed, and every committed checkpoint is committed once. What "committed once" costs each
// system (a rename, a marker row in the same transaction, a deduplicating message id) is the
// connector's to say: see each connector's header.
//
// Use (job.hpp): job.read_from<T>("read", parallelism, source_spec<T>{...}) and
// stream.write_to(sink_spec<T>{...}). A spec names the connector in the job's identity (so a resume
// with another input or output is refused) and makes one instance per task.

#include <sluice/dataflow/collector.hpp>
#include <sluice/io/result.hpp>
#include <sluice/runtime/task.hpp>
#include <sluice/snapshot/checkpoint.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::dataflow {

// Who runs a connector instance.
struct connector_context {
  std::string job;             // the job's name (job_builder)
  std::string stage;           // the stage's name
  snapshot::task_id task = 0;  // unique within the job, the same after a restart
  std::size_t subtask = 0;     // 0 .. parallelism - 1
  std::size_t parallelism = 1;
  std::size_t max_record_bytes = std::size_t{16} << 20;  // job_settings::max_record_bytes
  // The size the job's fingerprint recorded for each input file of the stage (job_fingerprint.hpp),
  // by path as given: a file source reads exactly that many bytes, and fails naming the file when it
  // finds fewer or more. Empty for a connector made outside a job: it reads the file as at open.
  std::map<std::string, std::uint64_t> input_sizes;
  std::optional<std::uint64_t> input_size(const std::string& path) const {
    auto it = input_sizes.find(path);
    return it == input_sizes.end() ? std::nullopt : std::optional<std::uint64_t>(it->second);
  }
};

enum class read_status { more, idle, end };

// Where a source's read() puts its records and watermarks.
template <class T>
class source_output {
 public:
  explicit source_output(collector<T>& down) : down_(&down) {}
  void emit(const T& record) {
    ++records_;
    down_->collect(record);
  }
  // Every record this source emits from now on has event time > t.
  void watermark(std::uint64_t t) { down_->watermark(t); }
  std::uint64_t records() const noexcept { return records_; }

 private:
  collector<T>* down_;
  std::uint64_t records_ = 0;
};

// How far a source is through its input, for the progress line; none if it cannot tell.
struct source_progress {
  std::uint64_t done = 0;
  std::uint64_t total = 0;
};

template <class T>
class source_connector {
 public:
  virtual ~source_connector() = default;
  // Throws std::runtime_error (naming the connector) when the bytes do not decode.
  virtual void restore(std::span<const std::byte> position) = 0;
  virtual runtime::task<io::result<void>> open() = 0;
  virtual runtime::task<io::result<read_status>> read(source_output<T>& out, std::size_t max_records) = 0;
  // Returns once read() may have something (or the waiting task is stopped): cancellable, so wait on
  // an executor-local event or an I/O operation, never by spinning.
  virtual runtime::task<void> wait_readable() { co_return; }
  virtual std::vector<std::byte> position() const = 0;
  virtual runtime::task<void> close() { co_return; }
  virtual std::optional<source_progress> progress() const noexcept { return std::nullopt; }
};

// What a sink starts from (sink_connector::recover).
struct sink_recovery {
  // This sink task's run of output: made at random when the job starts without a checkpoint, then
  // kept in every checkpoint, so a restore from any of them gives it back. Two jobs (even of the same
  // name, into the same table, stream or cluster) never share one, nor does a job started afresh
  // with its earlier run. Key whatever the sink leaves outside the job on it (commit markers, message
  // ids, transactional ids): keyed on the job's name, a second job's output would be taken for the
  // first one's and dropped.
  std::string run;
  // What precommit returned for the checkpoint resumed from; empty on a fresh start.
  std::vector<std::byte> precommitted;
  bool fresh = true;  // no checkpoint: nothing of this run was committed
};

// A start for a sink driven outside a job (a bench, a test, an embedder's own loop): from the
// bytes precommit returned (none: a fresh start), as run `run` (empty: a new random run). Inside a
// job the stage makes this itself; a sink refuses an empty run rather than key on the name alone.
sink_recovery recovery_of(std::vector<std::byte> precommitted = {}, std::string run = {});
// A sink's recover() starts with this: an error naming `sink` when from.run is empty.
io::result<void> require_run(const sink_recovery& from, std::string_view sink);

template <class T>
class sink_connector {
 public:
  virtual ~sink_connector() = default;
  virtual runtime::task<io::result<void>> recover(sink_recovery from) = 0;
  virtual runtime::task<io::result<void>> write(const T& record) = 0;
  virtual runtime::task<io::result<std::vector<std::byte>>> precommit(snapshot::checkpoint_id id) = 0;
  virtual runtime::task<io::result<void>> commit(snapshot::checkpoint_id id) = 0;
  virtual runtime::task<void> close() { co_return; }
};

// What job_builder::read_from takes: the source's entries in the job's identity ("source=nats",
// "nats.stream=orders"; the first names the kind), the files it reads (their sizes and checksums go
// into the job's fingerprint; none for a network source) and the factory of its instances.
template <class T>
struct source_spec {
  std::vector<std::string> identity;
  std::vector<std::string> input_files;
  std::function<std::unique_ptr<source_connector<T>>(const connector_context&)> make;
};

// What stream::write_to takes: identity entries ("sink=postgresql", "postgresql.table=counts"; the
// first names the kind), the directories it writes into (the job locks them and refuses another
// job's: job_runner.hpp) and the factory.
template <class T>
struct sink_spec {
  std::vector<std::string> identity;
  std::vector<std::string> output_dirs;
  std::function<std::unique_ptr<sink_connector<T>>(const connector_context&)> make;
};

}  // namespace sluice::dataflow
