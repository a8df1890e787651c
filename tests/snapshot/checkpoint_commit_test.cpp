// The manifest commit protocol as the I/O seam sees it: the order of operations (prepare, then the
// manifest written in place; or the full path without prepare), what a failed step leaves behind,
// and, through the coordinator, that a checkpoint whose commit failed at any step is never reported
// complete and is skipped by recovery.

#include <sluice/runtime/executor.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/test_backend.hpp>
#include <sluice/snapshot/checkpoint_storage.hpp>
#include <sluice/snapshot/coordinator.hpp>
#include <sluice/snapshot/recovery_plan.hpp>

#include <support/backends.hpp>
#include <support/checkpoint_files.hpp>
#include <support/fake_participants.hpp>
#include <support/state_files.hpp>
#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <fcntl.h>

#include <cerrno>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

using namespace sluice::snapshot;
using sluice::runtime::io_op;
using sluice::runtime::op_code;
using sluice::runtime::test_backend;
using sluice::test::temp_dir;

namespace {

// Every operation the backend performs, as "<op> [path]" and its descriptor.
struct recorded_op {
  std::string text;
  int fd;
  std::uint32_t flags;
};

struct recorder {
  std::vector<recorded_op> ops;
  test_backend::fault_rule rule() {
    return [this](const io_op& op) -> std::optional<std::int32_t> {
      std::string text = sluice::runtime::to_string(op.code);
      if (op.path != nullptr && op.path[0] != '\0') text += std::string(" ") + op.path;
      ops.push_back({std::move(text), op.fd, op.flags});
      return std::nullopt;
    };
  }
  std::size_t count(const std::string& text) const {
    std::size_t n = 0;
    for (const auto& op : ops) n += op.text == text;
    return n;
  }
  std::size_t index_of(const std::string& text, std::size_t from = 0) const {
    for (std::size_t i = from; i < ops.size(); ++i) {
      if (ops[i].text == text) return i;
    }
    return ops.size();
  }
};

// The state files of checkpoint 1 (tasks 0 and 1), written without the ring.
void write_state_files(const checkpoint_storage& storage) {
  std::filesystem::create_directories(storage.checkpoint_dir(1));
  sluice::test::write_bytes(storage.state_file_path(1, 0), sluice::test::sample_task_file(1, 0));
  sluice::test::write_bytes(storage.state_file_path(1, 1), sluice::test::sample_task_file(1, 1));
}

// Fails the first `code` operation performed after an open of a path ending in `suffix` (when
// `without_create`, only an open without O_CREAT arms it: the commit's, not prepare's).
test_backend::fault_rule fail_after_open(std::string suffix, op_code code, std::int32_t result,
                                         bool without_create = false) {
  auto armed = std::make_shared<bool>(false);
  return [suffix, code, result, armed, without_create](const io_op& op) -> std::optional<std::int32_t> {
    if (op.code == op_code::openat && std::string_view(op.path).ends_with(suffix) &&
        (!without_create || (op.flags & O_CREAT) == 0)) {
      *armed = true;
    }
    if (*armed && op.code == code) {
      *armed = false;
      return result;
    }
    return std::nullopt;
  };
}

}  // namespace

TEST_CASE("prepare creates every name without truncating and fsyncs chk-<id>/ and the root, the commit then only writes and fdatasyncs the manifest in place") {
  temp_dir dir;
  checkpoint_storage storage(dir.path());
  test_backend* backend = nullptr;
  sluice::runtime::executor ex(sluice::test::test_backend_options(backend));
  recorder rec;
  backend->add_fault(rec.rule());

  REQUIRE(ex.block_on(storage.create_checkpoint_dir(1)).ok());
  // Task 0's writer got there first: prepare must not truncate what it wrote.
  const auto task0 = sluice::test::sample_task_file(1, 0);
  sluice::test::write_bytes(storage.state_file_path(1, 0), task0);
  rec.ops.clear();
  REQUIRE(ex.block_on(storage.prepare_checkpoint(1, {0, 1})).ok());

  const std::string chk = storage.checkpoint_dir(1);
  CHECK(sluice::test::read_bytes(storage.state_file_path(1, 0)) == task0);
  CHECK(std::filesystem::file_size(chk + "/_manifest") == 0);
  CHECK(std::filesystem::file_size(storage.state_file_path(1, 1)) == 0);
  // Each name: open with O_CREAT and without O_TRUNC, then close.
  std::size_t last_close = 0;
  for (const std::string name : {"_manifest", "task-0.state", "task-1.state"}) {
    INFO(name);
    const std::size_t open = rec.index_of("open " + chk + "/" + name);
    REQUIRE(open + 1 < rec.ops.size());
    CHECK((rec.ops[open].flags & O_CREAT) != 0);
    CHECK((rec.ops[open].flags & O_TRUNC) == 0);
    CHECK(rec.ops[open + 1].text == "close");
    last_close = std::max(last_close, open + 1);
  }
  // Then both directories fsynced (concurrently), after every name exists.
  const std::size_t open_chk = rec.index_of("open " + chk);
  const std::size_t open_root = rec.index_of("open " + dir.path());
  REQUIRE(open_chk < rec.ops.size());
  REQUIRE(open_root < rec.ops.size());
  CHECK(open_chk > last_close);
  CHECK(open_root > last_close);
  CHECK(rec.count("fsync") == 2);
  CHECK(rec.count("write") == 0);

  // A writer opening with create_or_truncate after prepare simply fills the empty file.
  sluice::test::write_bytes(storage.state_file_path(1, 1), sluice::test::sample_task_file(1, 1));
  rec.ops.clear();
  REQUIRE(ex.block_on(storage.commit_verified(1, checkpoint_mode::unaligned, {0, 1}, {})).ok());
  const std::size_t open_manifest = rec.index_of("open " + chk + "/_manifest");
  REQUIRE(open_manifest + 4 < rec.ops.size());
  CHECK((rec.ops[open_manifest].flags & (O_CREAT | O_TRUNC)) == 0);
  const int fd = rec.ops[open_manifest + 1].fd;
  CHECK(rec.ops[open_manifest + 1].text == "stat");  // still empty? (statx of the descriptor)
  CHECK(rec.ops[open_manifest + 2].text == "write");
  CHECK(rec.ops[open_manifest + 2].fd == fd);
  CHECK(rec.ops[open_manifest + 3].text == "fdatasync");
  CHECK(rec.ops[open_manifest + 3].fd == fd);
  CHECK(rec.ops[open_manifest + 4].text == "close");
  CHECK(rec.ops.size() == open_manifest + 5);  // nothing after: no rename, no directory fsync
  CHECK(rec.count("fsync") == 0);
  CHECK(backend->submitted(op_code::renameat) == 0);

  const auto info = ex.block_on(storage.validate(1));
  CHECK(info.valid);
  CHECK(info.tasks == 2);
}

TEST_CASE("without prepare, the commit writes and fsyncs the manifest, then fsyncs chk-<id>/, then the root") {
  temp_dir dir;
  checkpoint_storage storage(dir.path());
  test_backend* backend = nullptr;
  sluice::runtime::executor ex(sluice::test::test_backend_options(backend));
  recorder rec;
  backend->add_fault(rec.rule());

  REQUIRE(ex.block_on(storage.create_checkpoint_dir(1)).ok());
  CHECK(backend->performed(op_code::mkdirat) == 1);
  sluice::test::write_bytes(storage.state_file_path(1, 0), sluice::test::sample_task_file(1, 0));
  rec.ops.clear();
  REQUIRE(ex.block_on(storage.commit_verified(1, checkpoint_mode::aligned, {0}, {})).ok());

  const std::string chk = storage.checkpoint_dir(1);
  const std::size_t open_manifest = rec.index_of("open " + chk + "/_manifest");
  const std::size_t open_chk = rec.index_of("open " + chk, open_manifest);
  const std::size_t open_root = rec.index_of("open " + dir.path(), open_manifest);
  REQUIRE(open_manifest < rec.ops.size());
  REQUIRE(open_chk < rec.ops.size());
  REQUIRE(open_root < rec.ops.size());
  CHECK((rec.ops[open_manifest].flags & O_CREAT) != 0);
  const int fd = rec.ops[open_manifest + 1].fd;
  CHECK(rec.ops[open_manifest + 1].text == "write");
  CHECK(rec.ops[open_manifest + 2].text == "fsync");
  CHECK(rec.ops[open_manifest + 2].fd == fd);
  CHECK(rec.ops[open_manifest + 3].text == "close");
  CHECK(open_chk == open_manifest + 4);
  CHECK(rec.ops[open_chk + 1].text == "fsync");
  CHECK(rec.ops[open_chk + 2].text == "close");
  CHECK(open_root == open_chk + 3);
  CHECK(rec.ops[open_root + 1].text == "fsync");
  CHECK(rec.ops[open_root + 2].text == "close");
  CHECK(rec.ops.size() == open_root + 3);
  CHECK(backend->submitted(op_code::renameat) == 0);
  CHECK(ex.block_on(storage.validate(1)).valid);
}

TEST_CASE("an EIO from a directory fsync fails prepare, naming the directory, and the commit then takes the full path") {
  temp_dir dir;
  checkpoint_storage storage(dir.path());
  test_backend* backend = nullptr;
  sluice::runtime::executor ex(sluice::test::test_backend_options(backend));
  auto failing = std::make_shared<bool>(true);
  backend->add_fault([failing](const io_op& op) -> std::optional<std::int32_t> {
    if (*failing && op.code == op_code::fsync) return -EIO;
    return std::nullopt;
  });
  REQUIRE(ex.block_on(storage.create_checkpoint_dir(1)).ok());
  auto r = ex.block_on(storage.prepare_checkpoint(1, {0, 1}));
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == std::errc::io_error);
  CHECK(r.error().message().rfind("prepare checkpoint 1: fsync directory '", 0) == 0);
  // Not known durable: a commit may not rely on it.
  write_state_files(storage);
  recorder rec;
  backend->add_fault(rec.rule());
  *failing = false;
  REQUIRE(ex.block_on(storage.commit_verified(1, checkpoint_mode::unaligned, {0, 1}, {})).ok());
  CHECK(rec.index_of("open " + storage.checkpoint_dir(1)) < rec.ops.size());
  CHECK(rec.index_of("open " + dir.path()) < rec.ops.size());
}

TEST_CASE("a failed manifest fdatasync in place takes the manifest back and names the file") {
  temp_dir dir;
  checkpoint_storage storage(dir.path());
  test_backend* backend = nullptr;
  sluice::runtime::executor ex(sluice::test::test_backend_options(backend));
  backend->add_fault(fail_after_open("/_manifest", op_code::fdatasync, -EIO, true));
  REQUIRE(ex.block_on(storage.create_checkpoint_dir(1)).ok());
  REQUIRE(ex.block_on(storage.prepare_checkpoint(1, {0, 1})).ok());
  write_state_files(storage);

  auto r = ex.block_on(storage.commit_verified(1, checkpoint_mode::unaligned, {0, 1}, {}));
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == std::errc::io_error);
  CHECK(r.error().message() ==
        "commit checkpoint 1: fdatasync '" + storage.checkpoint_dir(1) + "/_manifest': Input/output error");
  CHECK_FALSE(std::filesystem::exists(storage.checkpoint_dir(1) + "/_manifest"));
  const auto info = ex.block_on(storage.validate(1));
  CHECK_FALSE(info.valid);
  CHECK(info.fault == storage_errc::missing_manifest);
}

TEST_CASE("a failed manifest write in place takes the manifest back and names the file") {
  temp_dir dir;
  checkpoint_storage storage(dir.path());
  test_backend* backend = nullptr;
  sluice::runtime::executor ex(sluice::test::test_backend_options(backend));
  backend->add_fault(fail_after_open("/_manifest", op_code::write, -ENOSPC, true));
  REQUIRE(ex.block_on(storage.create_checkpoint_dir(1)).ok());
  REQUIRE(ex.block_on(storage.prepare_checkpoint(1, {0, 1})).ok());
  write_state_files(storage);

  auto r = ex.block_on(storage.commit_verified(1, checkpoint_mode::unaligned, {0, 1}, {}));
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message() ==
        "commit checkpoint 1: write '" + storage.checkpoint_dir(1) + "/_manifest': No space left on device");
  CHECK_FALSE(std::filesystem::exists(storage.checkpoint_dir(1) + "/_manifest"));
  CHECK(backend->performed(op_code::fdatasync) == 0);
}

TEST_CASE("a failed fsync on the full path leaves no manifest and names the file") {
  temp_dir dir;
  checkpoint_storage storage(dir.path());
  write_state_files(storage);
  test_backend* backend = nullptr;
  sluice::runtime::executor ex(sluice::test::test_backend_options(backend));
  backend->add_fault(fail_after_open(storage.checkpoint_dir(1), op_code::fsync, -EIO));

  auto r = ex.block_on(storage.commit_verified(1, checkpoint_mode::unaligned, {0, 1}, {}));
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message() ==
        "commit checkpoint 1: fsync directory '" + storage.checkpoint_dir(1) + "': Input/output error");
  CHECK_FALSE(std::filesystem::exists(storage.checkpoint_dir(1) + "/_manifest"));
}

TEST_CASE("a commit refuses a pre-created manifest that is no longer empty, and leaves it alone") {
  temp_dir dir;
  checkpoint_storage storage(dir.path());
  sluice::runtime::executor ex(sluice::test::virtual_time());
  REQUIRE(ex.block_on(storage.create_checkpoint_dir(1)).ok());
  REQUIRE(ex.block_on(storage.prepare_checkpoint(1, {0, 1})).ok());
  write_state_files(storage);
  sluice::test::write_bytes(storage.checkpoint_dir(1) + "/_manifest", sluice::test::bytes_of("someone\n"));
  auto r = ex.block_on(storage.commit_verified(1, checkpoint_mode::unaligned, {0, 1}, {}));
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message() == "commit checkpoint 1: '" + storage.checkpoint_dir(1) + "/_manifest' already holds 8 bytes");
  CHECK(std::filesystem::file_size(storage.checkpoint_dir(1) + "/_manifest") == 8);
}

TEST_CASE("an empty pre-created manifest is never committed: recovery, retention and validation treat it as missing") {
  temp_dir dir;
  checkpoint_storage storage(dir.path(), storage_options{.retained_checkpoints = 1});
  sluice::runtime::executor ex(sluice::test::virtual_time());
  // 1: committed. 2: prepared, its state files written, never committed. 3: a torn manifest.
  for (const checkpoint_id id : {checkpoint_id{1}, checkpoint_id{2}, checkpoint_id{3}}) {
    REQUIRE(ex.block_on(storage.create_checkpoint_dir(id)).ok());
    REQUIRE(ex.block_on(storage.prepare_checkpoint(id, {0})).ok());
    sluice::test::write_bytes(storage.state_file_path(id, 0), sluice::test::sample_task_file(id, 0));
  }
  REQUIRE(ex.block_on(storage.commit_verified(1, checkpoint_mode::aligned, {0}, {})).ok());
  sluice::test::write_bytes(storage.checkpoint_dir(3) + "/_manifest", sluice::test::bytes_of("sluice-manifest 1\n"));

  const auto empty = ex.block_on(storage.validate(2));
  CHECK_FALSE(empty.valid);
  CHECK_FALSE(empty.has_manifest);
  CHECK(empty.fault == storage_errc::missing_manifest);
  CHECK(empty.reason == "checkpoint manifest '" + storage.checkpoint_dir(2) + "/_manifest' is empty (never committed: aborted, or still being written)");
  const auto torn = ex.block_on(storage.validate(3));
  CHECK_FALSE(torn.valid);
  CHECK(torn.fault == storage_errc::bad_manifest);

  auto plan = ex.block_on(plan_recovery(storage));
  REQUIRE(plan.ok());
  CHECK(plan->recovered_id() == 1);
  REQUIRE(plan->skipped.size() == 2);
  CHECK(plan->skipped[0].id == 3);
  CHECK(plan->skipped[1].id == 2);
  CHECK(plan->skipped[1].fault == storage_errc::missing_manifest);
  CHECK(plan->next_checkpoint_id == 4);

  // Retention: the empty manifest does not count as committed, so with K = 1 it neither keeps 2
  // in place of 1 nor removes 1; the newer uncommitted 2 and 3 stay (their writers may run).
  auto kept = ex.block_on(storage.retain(no_checkpoint));
  REQUIRE(kept.ok());
  CHECK(kept->kept == std::vector<checkpoint_id>{1});
  CHECK(kept->removed.empty());
  // Once 4 commits, 1 (older committed) and 2, 3 (uncommitted, older) go.
  REQUIRE(ex.block_on(storage.create_checkpoint_dir(4)).ok());
  REQUIRE(ex.block_on(storage.prepare_checkpoint(4, {0})).ok());
  sluice::test::write_bytes(storage.state_file_path(4, 0), sluice::test::sample_task_file(4, 0));
  REQUIRE(ex.block_on(storage.commit_verified(4, checkpoint_mode::aligned, {0}, {})).ok());
  auto after = ex.block_on(storage.retain(no_checkpoint));
  REQUIRE(after.ok());
  CHECK(after->kept == std::vector<checkpoint_id>{4});
  CHECK(after->removed == std::vector<checkpoint_id>{1, 2, 3});
  CHECK_FALSE(std::filesystem::exists(storage.checkpoint_dir(2)));
}

namespace {

// Through the coordinator: checkpoint 1 completes, checkpoint 2 meets the fault. Records what the
// tasks heard and what recovery then chooses.
struct fault_run {
  sluice::snapshot::checkpoint_outcome first;
  sluice::snapshot::checkpoint_outcome second;
  std::vector<std::vector<checkpoint_id>> completed;  // per task
  std::vector<std::vector<checkpoint_id>> aborted;    // per task
  bool manifest_2_exists = true;
  std::optional<recovery_plan> plan;
};

sluice::runtime::task<void> run_with_fault(temp_dir* dir, fault_run* out) {
  sluice::runtime::executor* ex = sluice::runtime::executor::current();
  checkpoint_storage storage(dir->file("checkpoints"));
  coordinator c(*ex, storage);
  sluice::test::fake_job job(c, storage);
  job.add(*ex, true);
  job.add(*ex, false);
  co_await job.register_all(ex);
  out->first = co_await c.trigger_now();
  out->second = co_await c.trigger_now();
  co_await c.stop();
  co_await job.remove_all();
  for (std::size_t i = 0; i < job.size(); ++i) {
    out->completed.push_back(job[i].completed);
    std::vector<checkpoint_id> ids;
    for (const auto& a : job[i].aborted) ids.push_back(a.id);
    out->aborted.push_back(std::move(ids));
  }
  out->manifest_2_exists = std::filesystem::exists(storage.checkpoint_dir(2) + "/_manifest") &&
                           std::filesystem::file_size(storage.checkpoint_dir(2) + "/_manifest") > 0;
  auto plan = co_await plan_recovery(storage);
  if (plan) out->plan = std::move(plan).value();
}

void check_not_completed(const fault_run& run, const std::string& detail_start) {
  CHECK(run.first.completed());
  CHECK_FALSE(run.second.completed());
  CHECK(run.second.reason == abort_reason::io_error);
  CHECK(run.second.detail.rfind(detail_start, 0) == 0);
  INFO(run.second.detail);
  for (std::size_t i = 0; i < run.completed.size(); ++i) {
    INFO("task " << i);
    CHECK(run.completed[i] == std::vector<checkpoint_id>{1});
    CHECK(run.aborted[i] == std::vector<checkpoint_id>{2});
  }
  CHECK_FALSE(run.manifest_2_exists);
  REQUIRE(run.plan.has_value());
  CHECK(run.plan->recovered_id() == 1);
  REQUIRE(run.plan->skipped.size() == 1);
  CHECK(run.plan->skipped[0].id == 2);
  CHECK(run.plan->skipped[0].fault == storage_errc::missing_manifest);
  CHECK(run.plan->next_checkpoint_id == 3);
}

}  // namespace

namespace {
// Runs the coordinator with one fault injected on checkpoint 2's I/O and checks that checkpoint 2
// is not completed (its abort names `expected`) and recovery skips it.
template <class Fault>
void run_with_injected_fault(Fault make_fault, const std::string& expected) {
  temp_dir dir;
  test_backend* backend = nullptr;
  auto options = sluice::test::test_backend_options(backend);
  backend->add_fault(make_fault(dir));
  fault_run run;
  sluice::runtime::sync_wait(run_with_fault(&dir, &run), std::move(options));
  check_not_completed(run, expected);
}
}  // namespace

TEST_CASE("coordinator: a directory fsync failing in prepare aborts the checkpoint (io_error), recovery skips it") {
  // The fake tasks write without the ring: the ring's only fsyncs are prepare's directory fsyncs.
  run_with_injected_fault(
      [](const temp_dir& dir) {
        return fail_after_open((std::filesystem::path(dir.file("checkpoints")) / "chk-2").string(), op_code::fsync, -EIO);
      },
      "checkpoint 2: prepare checkpoint 2: fsync directory '");
}

TEST_CASE("coordinator: the manifest write failing aborts the checkpoint (io_error), recovery skips it") {
  run_with_injected_fault([](const temp_dir&) { return fail_after_open("chk-2/_manifest", op_code::write, -ENOSPC, true); },
                          "checkpoint 2: commit failed: commit checkpoint 2: write '");
}

TEST_CASE("coordinator: the manifest fdatasync failing aborts the checkpoint (io_error), recovery skips it") {
  run_with_injected_fault([](const temp_dir&) { return fail_after_open("chk-2/_manifest", op_code::fdatasync, -EIO, true); },
                          "checkpoint 2: commit failed: commit checkpoint 2: fdatasync '");
}

TEST_CASE("a verified commit refuses a state file that does not validate, before writing a manifest") {
  temp_dir dir;
  checkpoint_storage storage(dir.path());
  write_state_files(storage);
  auto bytes = sluice::test::read_bytes(storage.state_file_path(1, 1));
  bytes.pop_back();
  sluice::test::write_bytes(storage.state_file_path(1, 1), bytes);

  auto r = sluice::runtime::sync_wait(storage.commit_verified(1, checkpoint_mode::unaligned, {0, 1}, {}));
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == storage_errc::truncated);
  CHECK(r.error().message() == "commit checkpoint 1: chk-1/task-1.state: truncated: record 3 payload needs 16 bytes, 15 remain");
  CHECK_FALSE(std::filesystem::exists(storage.checkpoint_dir(1) + "/_manifest.tmp"));
  CHECK_FALSE(std::filesystem::exists(storage.checkpoint_dir(1) + "/_manifest"));
}

TEST_CASE("creating a checkpoint directory that exists fails with its path") {
  temp_dir dir;
  checkpoint_storage storage(dir.path());
  REQUIRE(sluice::runtime::sync_wait(storage.create_checkpoint_dir(3)).ok());
  auto again = sluice::runtime::sync_wait(storage.create_checkpoint_dir(3));
  REQUIRE_FALSE(again.ok());
  CHECK(again.error().message() == "mkdir '" + storage.checkpoint_dir(3) + "': File exists");
}
