// The manifest commit protocol as the I/O seam sees it: the order of operations, and what a failed
// step leaves behind.

#include <sluice/runtime/executor.hpp>
#include <sluice/runtime/test_backend.hpp>
#include <sluice/snapshot/checkpoint_storage.hpp>

#include <support/backends.hpp>
#include <support/checkpoint_files.hpp>
#include <support/state_files.hpp>
#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

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
};

struct recorder {
  std::vector<recorded_op> ops;
  test_backend::fault_rule rule() {
    return [this](const io_op& op) -> std::optional<std::int32_t> {
      std::string text = sluice::runtime::to_string(op.code);
      if (op.path != nullptr) text += std::string(" ") + op.path;
      ops.push_back({std::move(text), op.fd});
      return std::nullopt;
    };
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

// Fails the first `code` operation performed after an open of a path ending in `suffix`.
test_backend::fault_rule fail_after_open(std::string suffix, op_code code, std::int32_t result) {
  auto armed = std::make_shared<bool>(false);
  return [suffix, code, result, armed](const io_op& op) -> std::optional<std::int32_t> {
    if (op.code == op_code::openat && std::string_view(op.path).ends_with(suffix)) *armed = true;
    if (*armed && op.code == code) {
      *armed = false;
      return result;
    }
    return std::nullopt;
  };
}

}  // namespace

TEST_CASE("the manifest is renamed after its temp file is fsynced, and the directories are fsynced after the rename") {
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
  const std::size_t open_temp = rec.index_of("open " + chk + "/_manifest.tmp");
  const std::size_t rename = rec.index_of("rename " + chk + "/_manifest.tmp");
  const std::size_t open_chk = rec.index_of("open " + chk, rename);
  const std::size_t open_root = rec.index_of("open " + dir.path(), rename);
  REQUIRE(open_temp < rec.ops.size());
  REQUIRE(rename < rec.ops.size());
  REQUIRE(open_chk < rec.ops.size());
  REQUIRE(open_root < rec.ops.size());
  // The temp file: write, fsync, close on its descriptor, all before the rename.
  const int temp_fd = rec.ops[open_temp + 1].fd;
  CHECK(rec.ops[open_temp + 1].text == "write");
  CHECK(rec.ops[open_temp + 2].text == "fsync");
  CHECK(rec.ops[open_temp + 2].fd == temp_fd);
  CHECK(rec.ops[open_temp + 3].text == "close");
  CHECK(open_temp + 4 == rename);
  // Then the checkpoint directory's fsync, then the root's.
  CHECK(open_chk == rename + 1);
  CHECK(rec.ops[open_chk + 1].text == "fsync");
  CHECK(rec.ops[open_chk + 2].text == "close");
  CHECK(open_root == open_chk + 3);
  CHECK(rec.ops[open_root + 1].text == "fsync");
  CHECK(rec.ops[open_root + 2].text == "close");
  CHECK(rec.ops.size() == open_root + 3);
  CHECK(std::filesystem::exists(chk + "/_manifest"));
}

TEST_CASE("an EIO from the temp manifest's fsync leaves no manifest and names the file") {
  temp_dir dir;
  checkpoint_storage storage(dir.path());
  write_state_files(storage);
  test_backend* backend = nullptr;
  sluice::runtime::executor ex(sluice::test::test_backend_options(backend));
  backend->add_fault(fail_after_open("/_manifest.tmp", op_code::fsync, -EIO));

  auto r = ex.block_on(storage.commit_verified(1, checkpoint_mode::unaligned, {0, 1}, {}));
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == std::errc::io_error);
  CHECK(r.error().message() ==
        "commit checkpoint 1: fsync '" + storage.checkpoint_dir(1) + "/_manifest.tmp': Input/output error");
  CHECK_FALSE(std::filesystem::exists(storage.checkpoint_dir(1) + "/_manifest"));
  CHECK_FALSE(std::filesystem::exists(storage.checkpoint_dir(1) + "/_manifest.tmp"));
  CHECK(backend->submitted(op_code::renameat) == 0);

  const auto info = ex.block_on(storage.validate(1));
  CHECK_FALSE(info.valid);
  CHECK(info.fault == storage_errc::missing_manifest);
}

TEST_CASE("a failed directory fsync after the rename takes the manifest back") {
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
  CHECK(backend->performed(op_code::renameat) == 1);
  CHECK_FALSE(std::filesystem::exists(storage.checkpoint_dir(1) + "/_manifest"));
}

TEST_CASE("a failed manifest write leaves no manifest and names the file") {
  temp_dir dir;
  checkpoint_storage storage(dir.path());
  write_state_files(storage);
  test_backend* backend = nullptr;
  sluice::runtime::executor ex(sluice::test::test_backend_options(backend));
  backend->add_fault(fail_after_open("/_manifest.tmp", op_code::write, -ENOSPC));

  auto r = ex.block_on(storage.commit_verified(1, checkpoint_mode::unaligned, {0, 1}, {}));
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message() ==
        "commit checkpoint 1: write '" + storage.checkpoint_dir(1) + "/_manifest.tmp': No space left on device");
  CHECK_FALSE(std::filesystem::exists(storage.checkpoint_dir(1) + "/_manifest"));
  CHECK_FALSE(std::filesystem::exists(storage.checkpoint_dir(1) + "/_manifest.tmp"));
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
