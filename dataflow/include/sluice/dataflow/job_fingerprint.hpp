#pragma once
// job_fingerprint: what a job is, stored with every checkpoint, so that a run resumes only a
// checkpoint of the same job with the same arguments (docs/design.md "Scale-out"; rescaling comes later).
//
// It holds the job's name; per stage its name, parallelism, upstream stages and the identity
// entries of its chain, head to tail, as the typed API records them (job.hpp: a keyed stage's key
// groups, operator kinds, window kinds and sizes, the exchange, the sink and its directory,
// generate's count); and per input file the path as given, its size and the CRC32C of its whole
// content. It leaves out what does not change which records a job emits, so a resume may change
// it: checkpoint mode and interval, transport, executors, generate's rate, a slow sink's delay. The
// functions inside map, filter and the like cannot be described: only their kind and position are
// (stream::identify() records a parameter of your own).
//
// Protocol (run_job):
//   1. fingerprint_job(job), before the engine starts: it stats and reads every input, blocking.
//      An input that is not a regular file is refused (exit code 2): exactly-once reads an input
//      again from a checkpointed offset. An input that cannot be read fails the start (exit 1).
//   2. fingerprint_metadata(fp) goes into coordinator_options::job_metadata, so every manifest
//      carries it (snapshot::job_fingerprint_key).
//   3. After plan_recovery and before any task exists, resume_refusal(fp, plan, dir) names every
//      difference between the checkpoint's fingerprint and this run's (exit code 2), or is nullopt.
//      A checkpoint without a fingerprint (written before there were any), or with one of an older
//      version (an earlier build whose operator or sink state this one cannot read), is refused too.
//
// Text form, one item per line, every string field escaped (%XX for '%', space, control and
// non-ASCII bytes), so it reads with `cat` once unhexed:
//   sluice-fingerprint 3
//   job wordcount
//   stage read 2 - 3                    name parallelism upstreams(comma list, '-': none) entries
//   entry source=read_lines
//   entry op=flat_map
//   entry output=key_by
//   stage count 2 0 4
//   entry key_groups=128
//   entry op=aggregate
//   entry sink=write_lines
//   entry write_lines.dir=/data/out
//   input 0 1048576 1234abcd /data/in.txt   stage size_bytes crc32c path

#include <sluice/dataflow/job.hpp>
#include <sluice/io/result.hpp>
#include <sluice/snapshot/checkpoint.hpp>
#include <sluice/snapshot/recovery_plan.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::dataflow {

// 2: the sinks' checkpointed state carries the run that keys what they leave outside (sink_run.hpp);
// a checkpoint of version 1 holds sink state this build cannot read and is refused by name.
// 3: key_by routes a key by its key group (key_group.hpp), no longer by stable_hash(key) mod n, so a
// version 2 checkpoint holds each key's state in a task that no longer receives the key: it is
// refused by name, as an earlier build's.
inline constexpr std::uint32_t job_fingerprint_version = 3;

struct stage_identity {
  std::string name;
  std::size_t parallelism = 1;
  std::vector<std::size_t> upstreams;
  std::vector<std::string> entries;  // "key=value", head to tail
  friend bool operator==(const stage_identity&, const stage_identity&) = default;
};

struct input_identity {
  std::size_t stage = 0;  // the stage whose source reads it
  std::string path;       // as given
  std::uint64_t size_bytes = 0;
  std::uint32_t crc32c = 0;  // of the whole file
  friend bool operator==(const input_identity&, const input_identity&) = default;
};

struct job_fingerprint {
  std::string job;
  std::vector<stage_identity> stages;
  std::vector<input_identity> inputs;  // in stage order
  friend bool operator==(const job_fingerprint&, const job_fingerprint&) = default;
};

// Why a job must not start (fingerprint_job): exit_code 2 for an input that is not replayable, 1 for
// one that cannot be read. what() is the message for job_result.
class job_refused : public std::runtime_error {
 public:
  job_refused(int exit_code, const std::string& message) : std::runtime_error(message), exit_code_(exit_code) {}
  int exit_code() const noexcept { return exit_code_; }

 private:
  int exit_code_;
};

// The graph's part of the fingerprint: no I/O (inputs have their paths, size and CRC zero).
job_fingerprint describe_job(const job_builder& job);
// describe_job plus every input's size and CRC32C. BLOCKING (stat and a full read of every input):
// call it before the engine starts, never on an executor. Throws job_refused.
job_fingerprint fingerprint_job(const job_builder& job);

// The sizes of stage `stage`'s inputs, by path: what its file sources must read (connector_context).
std::map<std::string, std::uint64_t> input_sizes(const job_fingerprint& fp, std::size_t stage);

std::string encode_fingerprint(const job_fingerprint& fp);
// Strict; errors (std::errc::invalid_argument) name the line and what is wrong with it.
io::result<job_fingerprint> decode_fingerprint(std::string_view text);

// The manifest metadata that carries `fp`.
std::map<std::string, std::vector<std::byte>> fingerprint_metadata(const job_fingerprint& fp);

// Each way `now` differs from `taken` (the fingerprint of checkpoint `id`), in user terms, one
// sentence each: "checkpoint 7 was taken with stage 'count' at parallelism 2; this run has 3",
// "checkpoint 7 was taken with stage 'count' at max parallelism 128 (key groups); this run has 256".
// Empty when they match. An input counts as the same when its size and CRC32C are (another path to
// the same bytes resumes correctly).
std::vector<std::string> fingerprint_differences(const job_fingerprint& taken, const job_fingerprint& now,
                                                 snapshot::checkpoint_id id);

// Why this run (fingerprint `now`) must not resume from what `plan` recovered under
// `checkpoint_dir`: every difference, then what to do; nullopt for a fresh start or a match.
std::optional<std::string> resume_refusal(const job_fingerprint& now, const snapshot::recovery_plan& plan,
                                          std::string_view checkpoint_dir);

}  // namespace sluice::dataflow
