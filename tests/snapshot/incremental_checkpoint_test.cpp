// Incremental checkpoints in storage (checkpoint_storage.hpp): a checkpoint whose state files hold
// an operator's state as a delta on an earlier checkpoint's requires it in its manifest, is valid
// only while the whole chain is, loads with each operator's chain oldest first, and keeps its bases
// through retention.
//
// The chain used throughout: chk-1 whole, chk-2 a delta on chk-1, chk-3 whole (unrelated), chk-4 a
// delta on chk-2. Each has tasks 0 and 1; operator 0 is the delta one, operator 1 always whole.

#include <sluice/runtime/sync_wait.hpp>
#include <sluice/snapshot/checkpoint_report.hpp>
#include <sluice/snapshot/checkpoint_storage.hpp>

#include <support/checkpoint_files.hpp>
#include <support/state_files.hpp>
#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

using namespace sluice::snapshot;
using sluice::runtime::sync_wait;
using sluice::test::bytes_of;
using sluice::test::read_bytes;
using sluice::test::state_file_builder;
using sluice::test::temp_dir;
using sluice::test::write_bytes;

namespace {

// What operator `op` of task `task` holds in checkpoint `id`: "chk-4/task-1/op-0".
std::vector<std::byte> state_of(checkpoint_id id, task_id task, std::uint32_t op) {
  return bytes_of("chk-" + std::to_string(id) + "/task-" + std::to_string(task) + "/op-" + std::to_string(op));
}

// Task `task`'s file of checkpoint `id`, operator 0 a delta on `base` (none: no_checkpoint).
std::vector<std::byte> chain_file(checkpoint_id id, task_id task, checkpoint_id base) {
  state_file_builder b(id, task);
  if (base != no_checkpoint) {
    const auto payload = encode_operator_base_payload(base);
    b.add(record_type::operator_base, 0, 0, payload);
  }
  b.add(record_type::operator_state, 0, 0, state_of(id, task, 0));
  b.add(record_type::input_channel, 0, 0, sluice::test::pattern_bytes(100, static_cast<unsigned>(id)));
  b.add(record_type::operator_state, 0, 1, state_of(id, task, 1));
  return b.finish();
}

// chk-<id> with tasks 0 and 1, each file's operator 0 a delta on `base`, committed.
checkpoint_manifest make_link(checkpoint_storage& storage, checkpoint_id id, checkpoint_id base) {
  sync_wait(storage.create_checkpoint_dir(id)).value();
  for (task_id t : {0u, 1u}) write_bytes(storage.state_file_path(id, t), chain_file(id, t, base));
  return sync_wait(storage.commit_verified(id, checkpoint_mode::aligned, {0, 1}, {})).value();
}

void make_chain(checkpoint_storage& storage) {
  make_link(storage, 1, no_checkpoint);
  make_link(storage, 2, 1);
  make_link(storage, 3, no_checkpoint);
  make_link(storage, 4, 2);
}

std::string manifest_text(const checkpoint_storage& storage, checkpoint_id id) {
  const auto bytes = read_bytes(storage.checkpoint_dir(id) + "/_manifest");
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

bool exists(const checkpoint_storage& storage, checkpoint_id id) {
  return std::filesystem::exists(storage.checkpoint_dir(id));
}

}  // namespace

TEST_CASE("the commit of a checkpoint whose state files have a base writes what it requires into its manifest") {
  temp_dir dir;
  checkpoint_storage storage(dir.path());
  const auto full = make_link(storage, 1, no_checkpoint);
  CHECK(full.requires_checkpoints.empty());
  CHECK(manifest_text(storage, 1).find("requires") == std::string::npos);

  const auto delta = make_link(storage, 2, 1);
  CHECK(delta.requires_checkpoints == std::vector<checkpoint_id>{1});
  REQUIRE(delta.files.size() == 2);
  CHECK(delta.files[0].bases == std::vector<checkpoint_id>{1});
  CHECK(delta.files[0].operator_state_bytes == 2 * state_of(2, 0, 0).size());  // not the base record's 8 bytes
  CHECK(manifest_text(storage, 2).find("file task-1.state ") != std::string::npos);
  CHECK(manifest_text(storage, 2).find("\nrequires 1 1\nmetadata 0\n") != std::string::npos);

  const checkpoint_info info = sync_wait(storage.validate(2));
  CHECK(info.valid);
  CHECK(info.requires_checkpoints == std::vector<checkpoint_id>{1});
  CHECK(info.written_bytes == delta.files[0].size_bytes + delta.files[1].size_bytes);
  CHECK(info.size_bytes == info.written_bytes);  // its own files only: chk-1's are not counted
}

TEST_CASE("commit_manifest unites what the caller requires with the files' bases, and refuses a later checkpoint") {
  temp_dir dir;
  checkpoint_storage storage(dir.path());
  make_link(storage, 1, no_checkpoint);
  make_link(storage, 2, no_checkpoint);
  sync_wait(storage.create_checkpoint_dir(5)).value();
  write_bytes(storage.state_file_path(5, 0), chain_file(5, 0, 2));

  checkpoint_manifest m;
  m.checkpoint = 5;
  m.files.push_back(sync_wait(storage.describe_state_file(5, 0)).value());
  CHECK(m.files[0].bases == std::vector<checkpoint_id>{2});
  m.requires_checkpoints = {5};
  auto refused = sync_wait(storage.commit_manifest(m));
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code() == std::errc::invalid_argument);
  CHECK(refused.error().message() == "commit checkpoint 5: it cannot require checkpoint 5 (only an id from 1 to 4)");

  m.requires_checkpoints = {1};  // the caller's, besides the file's own base
  REQUIRE(sync_wait(storage.commit_manifest(m)).ok());
  CHECK(manifest_text(storage, 5).find("\nrequires 2 1 2\n") != std::string::npos);
  const checkpoint_info info = sync_wait(storage.validate(5));
  CHECK(info.valid);
  CHECK(info.requires_checkpoints == std::vector<checkpoint_id>{1, 2});
}

TEST_CASE("a checkpoint whose file has a base its manifest does not require is invalid") {
  temp_dir dir;
  checkpoint_storage storage(dir.path());
  make_link(storage, 1, no_checkpoint);
  sync_wait(storage.create_checkpoint_dir(2)).value();
  write_bytes(storage.state_file_path(2, 0), chain_file(2, 0, 1));
  checkpoint_manifest m;
  m.checkpoint = 2;
  m.files.push_back(sync_wait(storage.describe_state_file(2, 0)).value());
  m.files[0].bases.clear();  // as a caller that lost them would commit it
  REQUIRE(sync_wait(storage.commit_manifest(m)).ok());

  const checkpoint_info info = sync_wait(storage.validate(2));
  CHECK_FALSE(info.valid);
  CHECK(info.fault == storage_errc::bad_manifest);
  CHECK(info.reason == "chk-2/task-0.state: operator state based on chk-1, which the manifest does not require");
}

TEST_CASE("a delta on a checkpoint that holds no file of its task is invalid, and does not load") {
  temp_dir dir;
  checkpoint_storage storage(dir.path());
  sync_wait(storage.create_checkpoint_dir(1)).value();
  write_bytes(storage.state_file_path(1, 0), chain_file(1, 0, no_checkpoint));
  sync_wait(storage.commit_verified(1, checkpoint_mode::aligned, {0}, {})).value();  // task 0 only
  make_link(storage, 2, 1);

  const checkpoint_info info = sync_wait(storage.validate(2));
  CHECK_FALSE(info.valid);
  CHECK(info.fault == storage_errc::missing_file);
  CHECK(info.reason == "chk-2/task-1.state: operator state based on chk-1, whose manifest lists no task-1.state");
  auto loaded = sync_wait(storage.load(2));
  REQUIRE_FALSE(loaded.ok());
  CHECK(loaded.error().message() == info.reason);
}

TEST_CASE("a three-link chain loads with each delta operator's earlier states oldest first") {
  temp_dir dir;
  checkpoint_storage storage(dir.path());
  make_chain(storage);

  auto loaded = sync_wait(storage.load(4));
  REQUIRE(loaded.ok());
  CHECK(loaded->manifest.requires_checkpoints == std::vector<checkpoint_id>{2});
  REQUIRE(loaded->tasks.size() == 2);
  for (task_id t : {0u, 1u}) {
    INFO("task " << t);
    const task_state& state = loaded->tasks[t];
    CHECK(state.summary.task == t);
    CHECK(state.operator_bases == std::map<std::uint32_t, checkpoint_id>{{0, 2}});
    CHECK(state.operator_state.at(0) == state_of(4, t, 0));  // this checkpoint's own delta
    REQUIRE(state.operator_chain.size() == 1);               // operator 1 is whole: no chain
    const auto& chain = state.operator_chain.at(0);
    REQUIRE(chain.size() == 2);
    CHECK(chain[0] == state_of(1, t, 0));  // the whole state first (chk-3, unrelated, is not in it)
    CHECK(chain[1] == state_of(2, t, 0));
    CHECK(state.operator_state.at(1) == state_of(4, t, 1));
    CHECK(state.input_channels.size() == 1);
  }

  // A link in the middle loads its own, shorter chain; a whole one has none.
  auto middle = sync_wait(storage.load(2));
  REQUIRE(middle.ok());
  CHECK(middle->tasks[1].operator_chain.at(0) == std::vector<std::vector<std::byte>>{state_of(1, 1, 0)});
  auto whole = sync_wait(storage.load(3));
  REQUIRE(whole.ok());
  CHECK(whole->tasks[0].operator_bases.empty());
  CHECK(whole->tasks[0].operator_chain.empty());
}

TEST_CASE("a deleted base file makes every checkpoint above it in the chain invalid, with the reason down the chain") {
  temp_dir dir;
  checkpoint_storage storage(dir.path());
  make_chain(storage);
  const std::string gone = storage.state_file_path(1, 1);
  REQUIRE(::unlink(gone.c_str()) == 0);

  const std::string base_reason =
      "chk-1/task-1.state: missing state file: open '" + gone + "': No such file or directory";
  const checkpoint_info info = sync_wait(storage.validate(4));
  CHECK_FALSE(info.valid);
  CHECK(info.fault == storage_errc::missing_file);
  CHECK(info.reason == "chk-4: requires chk-2, which is not valid: chk-2: requires chk-1, which is not valid: " +
                           base_reason);
  auto loaded = sync_wait(storage.load(4));
  REQUIRE_FALSE(loaded.ok());
  CHECK(loaded.error().code() == storage_errc::missing_file);
  CHECK(loaded.error().message() == info.reason);

  // The listing (`sluice checkpoints`) says the same of each; recovery takes the whole chk-3.
  const auto listed = sync_wait(storage.list()).value();
  REQUIRE(listed.size() == 4);
  CHECK(listed[0].reason == base_reason);
  CHECK(listed[1].reason == "chk-2: requires chk-1, which is not valid: " + base_reason);
  CHECK(listed[2].valid);
  CHECK(listed[3].reason == info.reason);
  CHECK(resume_point(listed) == 3);
  sluice::test::stderr_capture log;
  const auto choice = sync_wait(storage.newest_valid()).value();
  REQUIRE(choice.chosen.has_value());
  CHECK(choice.chosen->id == 3);
  CHECK_THAT(log.text(), Catch::Contains("recovery: skipping checkpoint 4 (missing-file): chk-4: requires chk-2"));
}

TEST_CASE("a corrupted base file or a base without a manifest makes the checkpoint on it invalid") {
  temp_dir dir;
  checkpoint_storage storage(dir.path());
  make_chain(storage);

  SECTION("a flipped byte in the base's file") {
    const std::string path = storage.state_file_path(2, 0);
    auto bytes = read_bytes(path);
    // Inside operator 1's 17 bytes of state, record 3: the last before the 40-byte end record.
    bytes[bytes.size() - 40 - 5] ^= std::byte{0x40};
    write_bytes(path, bytes);
    const checkpoint_info info = sync_wait(storage.validate(4));
    CHECK_FALSE(info.valid);
    CHECK(info.fault == storage_errc::bad_checksum);
    CHECK_THAT(info.reason, Catch::StartsWith("chk-4: requires chk-2, which is not valid: chk-2/task-0.state: bad "
                                              "checksum in record 3"));
    auto loaded = sync_wait(storage.load(4));
    REQUIRE_FALSE(loaded.ok());
    CHECK(loaded.error().message() == info.reason);
  }
  SECTION("the base's manifest gone (the base was removed, or never committed)") {
    REQUIRE(::unlink((storage.checkpoint_dir(1) + "/_manifest").c_str()) == 0);
    const checkpoint_info info = sync_wait(storage.validate(4));
    CHECK_FALSE(info.valid);
    CHECK(info.fault == storage_errc::missing_manifest);
    CHECK_THAT(info.reason, Catch::StartsWith("chk-4: requires chk-2, which is not valid: chk-2: requires chk-1, "
                                              "which is not valid: open checkpoint manifest '" +
                                              storage.checkpoint_dir(1) + "/_manifest'"));
    CHECK(sync_wait(storage.validate(3)).valid);
  }
}

TEST_CASE("a base file without the delta operator's state fails the load, naming the file and the operator") {
  temp_dir dir;
  checkpoint_storage storage(dir.path());
  make_link(storage, 1, no_checkpoint);
  sync_wait(storage.create_checkpoint_dir(2)).value();
  state_file_builder b(2, 0);
  const auto payload = encode_operator_base_payload(1);
  b.add(record_type::operator_base, 0, 7, payload);  // operator 7: chk-1 holds none of it
  b.add(record_type::operator_state, 0, 7, bytes_of("delta"));
  write_bytes(storage.state_file_path(2, 0), b.finish());
  sync_wait(storage.commit_verified(2, checkpoint_mode::aligned, {0}, {})).value();

  auto loaded = sync_wait(storage.load(2));
  REQUIRE_FALSE(loaded.ok());
  CHECK(loaded.error().code() == storage_errc::bad_format);
  CHECK(loaded.error().message() ==
        "chk-1/task-0.state: holds no state of operator 7 (operator 7 of chk-2/task-0.state is based on it)");
}

// load() reads each base file once: validating a required checkpoint, it keeps the operator records
// of the files a chain goes through (the loaded checkpoint's delta tasks) and only validates the rest.
TEST_CASE("a load validates every base file and keeps the chain's, and a corrupt one of either kind fails it") {
  temp_dir dir;
  checkpoint_storage storage(dir.path());
  make_link(storage, 1, no_checkpoint);
  sync_wait(storage.create_checkpoint_dir(2)).value();
  write_bytes(storage.state_file_path(2, 0), chain_file(2, 0, 1));              // a delta on chk-1
  write_bytes(storage.state_file_path(2, 1), chain_file(2, 1, no_checkpoint));  // whole: no chain
  sync_wait(storage.commit_verified(2, checkpoint_mode::aligned, {0, 1}, {})).value();

  SECTION("both intact: task 0's chain is chk-1's state, task 1 has none") {
    auto loaded = sync_wait(storage.load(2));
    REQUIRE(loaded.ok());
    REQUIRE(loaded->tasks.size() == 2);
    CHECK(loaded->tasks[0].operator_chain.at(0) == std::vector<std::vector<std::byte>>{state_of(1, 0, 0)});
    CHECK(loaded->tasks[0].operator_state.at(0) == state_of(2, 0, 0));
    CHECK(loaded->tasks[1].operator_chain.empty());
    CHECK(loaded->tasks[1].operator_state.at(0) == state_of(2, 1, 0));
  }
  for (const task_id t : {0u, 1u}) {  // task 0's base file is kept for the chain, task 1's only validated
    DYNAMIC_SECTION("a flipped byte in chk-1/task-" << t << ".state") {
      const std::string path = storage.state_file_path(1, t);
      auto bytes = read_bytes(path);
      bytes[bytes.size() - 40 - 5] ^= std::byte{0x40};  // inside operator 1's state, record 2
      write_bytes(path, bytes);
      const checkpoint_info info = sync_wait(storage.validate(2));
      CHECK_FALSE(info.valid);
      CHECK_THAT(info.reason, Catch::StartsWith("chk-2: requires chk-1, which is not valid: chk-1/task-" +
                                                std::to_string(t) + ".state: bad checksum in record 2"));
      auto loaded = sync_wait(storage.load(2));
      REQUIRE_FALSE(loaded.ok());
      CHECK(loaded.error().code() == storage_errc::bad_checksum);
      CHECK(loaded.error().message() == info.reason);
    }
  }
}

TEST_CASE("retention keeps the checkpoints a kept one requires, transitively, until a newer whole one is kept") {
  temp_dir dir;
  checkpoint_storage storage(dir.path(), {.retained_checkpoints = 1});
  make_chain(storage);

  auto report = sync_wait(storage.retain(no_checkpoint)).value();
  CHECK(report.kept == std::vector<checkpoint_id>{4, 2, 1});  // chk-4, and chk-2 it requires, and chk-1 chk-2 does
  CHECK(report.removed == std::vector<checkpoint_id>{3});
  for (checkpoint_id id : {1, 2, 4}) CHECK(exists(storage, id));
  CHECK_FALSE(exists(storage, 3));
  CHECK(sync_wait(storage.load(4)).ok());  // what it needs is all still there

  make_link(storage, 5, 4);  // a delta on the delta: the chain grows
  report = sync_wait(storage.retain(no_checkpoint)).value();
  CHECK(report.kept == std::vector<checkpoint_id>{5, 4, 2, 1});
  CHECK(report.removed.empty());

  make_link(storage, 6, no_checkpoint);  // a whole one: nothing kept requires the old chain
  report = sync_wait(storage.retain(no_checkpoint)).value();
  CHECK(report.kept == std::vector<checkpoint_id>{6});
  CHECK(report.removed == std::vector<checkpoint_id>{1, 2, 4, 5});
  for (checkpoint_id id : {1, 2, 4, 5}) CHECK_FALSE(exists(storage, id));
  CHECK(sync_wait(storage.validate(6)).valid);
}

TEST_CASE("retention keeps what the in-progress checkpoint requires, and skips a required one with no manifest") {
  temp_dir dir;
  checkpoint_storage storage(dir.path(), {.retained_checkpoints = 1});
  make_link(storage, 1, no_checkpoint);
  make_link(storage, 2, 1);
  make_link(storage, 3, no_checkpoint);
  make_link(storage, 4, no_checkpoint);
  // chk-2 is in progress (committed, its acknowledgements outstanding): never removed, nor chk-1,
  // which it requires.
  auto report = sync_wait(storage.retain(2)).value();
  CHECK(report.kept == std::vector<checkpoint_id>{4, 1});
  CHECK(report.removed == std::vector<checkpoint_id>{3});
  CHECK(exists(storage, 1));
  CHECK(exists(storage, 2));

  // chk-2 kept (K = 2 now counts it) without chk-1's manifest: chk-1 is uncommitted, so it goes.
  checkpoint_storage wider(dir.path(), {.retained_checkpoints = 2});
  make_link(wider, 5, 2);
  REQUIRE(::unlink((wider.checkpoint_dir(1) + "/_manifest").c_str()) == 0);
  report = sync_wait(wider.retain(no_checkpoint)).value();
  CHECK(report.kept == std::vector<checkpoint_id>{5, 4, 2});
  CHECK(report.removed == std::vector<checkpoint_id>{1});
  CHECK_FALSE(sync_wait(wider.validate(5)).valid);
}

TEST_CASE("the listing shows what each checkpoint of a chain wrote itself and which checkpoints it requires",
          "[report]") {
  temp_dir dir;
  checkpoint_storage storage(dir.path());
  make_chain(storage);
  make_link(storage, 5, no_checkpoint);
  checkpoint_manifest m = sync_wait(storage.load(5)).value().manifest;  // chk-5 made to require two
  m.requires_checkpoints = {2, 4};
  REQUIRE(::unlink((storage.checkpoint_dir(5) + "/_manifest").c_str()) == 0);
  REQUIRE(sync_wait(storage.commit_manifest(m)).ok());

  const auto listed = sync_wait(storage.list()).value();
  REQUIRE(listed.size() == 5);
  const std::uint64_t own = listed[3].written_bytes;  // chk-4's two files
  CHECK(own == 2 * chain_file(4, 0, 2).size());
  const std::string full = std::to_string(own + listed[1].written_bytes + listed[0].written_bytes);  // + chk-2, chk-1
  CHECK(format_json_line(listed[3], 5).find(",\"size_bytes\":" + std::to_string(own) + ",\"written_bytes\":" +
                                            std::to_string(own) + ",\"state_bytes\":" + full +
                                            ",\"requires\":[2],") != std::string::npos);
  CHECK(format_json_line(listed[0], 5).find(",\"requires\":[],") != std::string::npos);
  CHECK(format_json_line(listed[4], 5).find(",\"requires\":[2,4],") != std::string::npos);
  // chk-5 requires two, but its files are whole: recovery reads nothing of theirs.
  CHECK(listed[4].state_bytes == std::optional<std::uint64_t>(listed[4].written_bytes));

  const std::string table = format_table(listed, 5);
  CHECK_THAT(table, Catch::StartsWith("   ID  MODE     TASKS  OPERATOR  CHANNEL  WRITTEN    STATE  REQUIRES     "
                                      "CREATED (UTC)"));
  const auto row = [&table](std::string_view id) {
    const auto start = table.find(std::string("\n") + std::string(id) + " ");
    return table.substr(start + 1, table.find('\n', start + 1) - start - 1);
  };
  CHECK_THAT(row("chk-5"), Catch::Contains("  chk-2,chk-4  "));
  CHECK_THAT(row("chk-4"), Catch::Contains("  chk-2        "));
  CHECK_THAT(row("chk-1"), Catch::Contains("  none         "));
}

namespace {

// Exact sizes: each file's size from its manifest entry.
std::uint64_t file_size(checkpoint_storage& storage, checkpoint_id id, const std::string& name) {
  const auto files = sync_wait(storage.load(id)).value().manifest.files;
  for (const auto& f : files) {
    if (f.name == name) return f.size_bytes;
  }
  FAIL("chk-" << id << " has no " << name);
  return 0;
}

}  // namespace

TEST_CASE("a checkpoint's full state is its own files and each base file its operators' chains read, once",
          "[report]") {
  temp_dir dir;
  checkpoint_storage storage(dir.path());
  make_chain(storage);  // chk-1 whole, chk-2 on chk-1, chk-3 whole, chk-4 on chk-2
  // chk-5: task 0's operator 0 a delta on chk-4, task 1 whole: only task 0's chain is read.
  sync_wait(storage.create_checkpoint_dir(5)).value();
  write_bytes(storage.state_file_path(5, 0), chain_file(5, 0, 4));
  write_bytes(storage.state_file_path(5, 1), chain_file(5, 1, no_checkpoint));
  sync_wait(storage.commit_verified(5, checkpoint_mode::aligned, {0, 1}, {})).value();

  std::map<checkpoint_id, std::uint64_t> task0, task1;
  for (checkpoint_id id = 1; id <= 5; ++id) {
    task0[id] = file_size(storage, id, "task-0.state");
    task1[id] = file_size(storage, id, "task-1.state");
  }
  const auto listed = sync_wait(storage.list()).value();
  REQUIRE(listed.size() == 5);
  for (const auto& info : listed) REQUIRE(info.state_bytes.has_value());
  const auto state_of_chk = [&](checkpoint_id id) { return *listed[id - 1].state_bytes; };
  CHECK(state_of_chk(1) == task0[1] + task1[1]);  // whole: what it wrote
  CHECK(state_of_chk(1) == listed[0].written_bytes);
  CHECK(state_of_chk(3) == listed[2].written_bytes);
  CHECK(state_of_chk(2) == task0[2] + task1[2] + task0[1] + task1[1]);  // a delta on a whole one
  CHECK(state_of_chk(4) == task0[4] + task1[4] + task0[2] + task1[2] + task0[1] + task1[1]);  // two deltas down
  CHECK(state_of_chk(5) == task0[5] + task1[5] + task0[4] + task0[2] + task0[1]);  // task 1's file only its own
  CHECK(sync_wait(storage.validate(4)).state_bytes == std::optional<std::uint64_t>(state_of_chk(4)));
  const std::string json = format_json_line(listed[3], 5);
  CHECK_THAT(json, Catch::Contains(",\"state_bytes\":" + std::to_string(state_of_chk(4)) + ","));

  // A base gone: chk-2, chk-4 and chk-5 invalid, their full state unknown; chk-1 and chk-3 unchanged.
  REQUIRE(::unlink((storage.checkpoint_dir(1) + "/_manifest").c_str()) == 0);
  const auto after = sync_wait(storage.list()).value();
  REQUIRE(after.size() == 5);
  CHECK_FALSE(after[0].state_bytes.has_value());  // chk-1 itself has no manifest now
  CHECK_FALSE(after[1].state_bytes.has_value());
  CHECK(after[2].state_bytes == std::optional<std::uint64_t>(task0[3] + task1[3]));
  CHECK_FALSE(after[3].state_bytes.has_value());
  CHECK_FALSE(after[4].state_bytes.has_value());
  CHECK_THAT(format_json_line(after[3], 3), Catch::Contains(",\"state_bytes\":null,"));
}
