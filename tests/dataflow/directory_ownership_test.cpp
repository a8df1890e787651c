// run_job owns its directories: one job at a time on a checkpoint or output directory (a second
// one, in this process or another, exits 2 naming the holder's pid), a directory that cannot be
// written is refused before anything runs, an output directory holding anything but this job's own
// output is refused on a fresh run, a resumed run never deletes a file the job did not write, and a
// `chk-*` name that is no valid id never becomes the base of the next checkpoint id.
#include <sluice/dataflow/generate.hpp>
#include <sluice/dataflow/job_runner.hpp>
#include <sluice/dataflow/samples.hpp>
#include <sluice/dataflow/sinks.hpp>
#include <sluice/runtime/log.hpp>

#include <support/checkpoint_files.hpp>
#include <support/dir_files.hpp>
#include <support/temp_dir.hpp>

#include "wordcount_support.hpp"

#include <catch2/catch.hpp>

#include <grp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <limits>
#include <map>
#include <sstream>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

using namespace sluice::dataflow;
using sluice::snapshot::checkpoint_mode;
using sluice::test::names_in;
using sluice::test::read_text;
using sluice::test::temp_dir;

namespace fs = std::filesystem;

namespace {

// Numbers 0..count-1 (at most `rate` per second; 0: no limit) through a keyed stage of two sink
// tasks (tasks 1 and 2) into `out`.
void build_numbers(job_builder& job, const std::string& out, std::uint64_t count, double rate = 0) {
  job.generate<std::uint64_t>("gen", 1, count, [](std::uint64_t n) { return n; }, rate)
      .key_by<std::uint64_t>([](const std::uint64_t& n) { return n; })
      .partition("sink", 2)
      .write_lines(out, [](const std::uint64_t& n) { return std::to_string(n); });
}

std::vector<std::string> numbers(std::uint64_t count, std::vector<std::string> extra = {}) {
  std::vector<std::string> out = std::move(extra);
  for (std::uint64_t n = 0; n < count; ++n) out.push_back(std::to_string(n));
  std::sort(out.begin(), out.end());
  return out;
}

job_settings settings_for(const std::string& checkpoint_dir) {
  return sluice::test::test_job_settings(checkpoint_dir, checkpoint_mode::unaligned, "local");
}

job_result run_numbers(const std::string& out, const std::string& checkpoint_dir, std::uint64_t count) {
  job_builder job("numbers");
  build_numbers(job, out, count);
  return run_job(job, settings_for(checkpoint_dir));
}

// Lines of the files named like published output ("part-<5 digits>-<12 digits>") in `dir`, sorted.
std::vector<std::string> part_lines(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    const bool part = name.size() == 23 && name.starts_with("part-") && name[10] == '-' &&
                      std::all_of(name.begin() + 5, name.end(), [](char c) { return c == '-' || (c >= '0' && c <= '9'); });
    if (!part) continue;
    std::ifstream in(entry.path());
    for (std::string line; std::getline(in, line);) out.push_back(line);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string in_use(const std::string& what, const std::string& dir, long pid) {
  return what + " '" + dir + "' is in use by another sluice job (pid " + std::to_string(pid) + ")";
}

// A job run on another thread that, at its first ended checkpoint, holds its first executor until
// finish(): it is inside run_job, holding its directories, for as long as the test needs.
class held_job {
 public:
  held_job(std::string out, std::string checkpoint_dir, std::uint64_t count)
      : release_future_(release_.get_future().share()), thread_([this, out, checkpoint_dir, count] {
          job_builder job("numbers");
          build_numbers(job, out, count);
          job_settings settings = settings_for(checkpoint_dir);
          settings.on_checkpoint = [this](const sluice::snapshot::checkpoint_stats&) {
            if (held_.exchange(true)) return;
            running_.set_value();
            release_future_.wait();
          };
          result_ = run_job(job, settings);
        }) {}
  held_job(const held_job&) = delete;
  held_job& operator=(const held_job&) = delete;
  ~held_job() { (void)finish(); }

  bool wait_running() { return running_.get_future().wait_for(std::chrono::seconds(60)) == std::future_status::ready; }
  job_result finish() {
    if (!released_) {
      released_ = true;
      release_.set_value();
    }
    if (thread_.joinable()) thread_.join();
    return result_;
  }

 private:
  std::atomic<bool> held_{false};
  std::promise<void> running_;
  std::promise<void> release_;
  std::shared_future<void> release_future_;
  bool released_ = false;
  job_result result_;
  std::thread thread_;  // last: it starts once everything above exists
};

}  // namespace

TEST_CASE("a second run on the checkpoint directory of a running job exits 2 naming the holder's pid",
          "[dataflow][ownership]") {
  temp_dir dir;
  held_job first(dir.file("out"), dir.file("chk"), 3000);
  const bool running = first.wait_running();
  job_result second;
  if (running) second = run_numbers(dir.file("other-out"), dir.file("chk"), 100);
  const job_result ended = first.finish();
  REQUIRE(running);
  CHECK(second.exit_code == 2);
  CHECK(second.message == in_use("checkpoint directory", dir.file("chk"), ::getpid()));
  CHECK_FALSE(fs::exists(dir.file("other-out")));  // refused before anything of it was made
  INFO(ended.message);
  REQUIRE(ended.exit_code == 0);
  CHECK(part_lines(dir.file("out")) == numbers(3000));

  // Released when run_job returned: the next run takes the lock, resumes and changes nothing.
  const job_result again = run_numbers(dir.file("out"), dir.file("chk"), 3000);
  INFO(again.message);
  CHECK(again.exit_code == 0);
  CHECK(again.resumed_from.has_value());
  CHECK(part_lines(dir.file("out")) == numbers(3000));
}

TEST_CASE("a second run on the output directory of a running job exits 2 naming the holder's pid",
          "[dataflow][ownership]") {
  temp_dir dir;
  held_job first(dir.file("out"), dir.file("chk"), 3000);
  const bool running = first.wait_running();
  job_result second;
  if (running) second = run_numbers(dir.file("out"), dir.file("other-chk"), 100);
  const job_result ended = first.finish();
  REQUIRE(running);
  CHECK(second.exit_code == 2);
  CHECK(second.message == in_use("output directory", dir.file("out"), ::getpid()));
  INFO(ended.message);
  REQUIRE(ended.exit_code == 0);
  CHECK(part_lines(dir.file("out")) == numbers(3000));
  // The refused run let go of its checkpoint directory too.
  const job_result other = run_numbers(dir.file("other-out"), dir.file("other-chk"), 100);
  INFO(other.message);
  CHECK(other.exit_code == 0);
  CHECK(part_lines(dir.file("other-out")) == numbers(100));
}

TEST_CASE("a job in another process holds its directories until it dies, and is named by its pid",
          "[dataflow][ownership]") {
  temp_dir dir;
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    job_builder job("numbers");
    build_numbers(job, dir.file("out"), 3000);
    job_settings settings = settings_for(dir.file("chk"));
    const std::string ready = dir.file("ready");
    settings.on_checkpoint = [ready](const sluice::snapshot::checkpoint_stats&) {
      std::ofstream(ready) << "ready\n";
      for (;;) ::pause();  // until killed, inside run_job
    };
    (void)run_job(job, settings);
    ::_exit(3);
  }
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!fs::exists(dir.file("ready")) && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  const bool ready = fs::exists(dir.file("ready"));
  job_result on_checkpoints;
  job_result on_output;
  if (ready) {
    on_checkpoints = run_numbers(dir.file("other-out"), dir.file("chk"), 3000);
    on_output = run_numbers(dir.file("out"), dir.file("other-chk"), 3000);
  }
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  REQUIRE(ready);
  CHECK(on_checkpoints.exit_code == 2);
  CHECK(on_checkpoints.message == in_use("checkpoint directory", dir.file("chk"), child));
  CHECK(on_output.exit_code == 2);
  CHECK(on_output.message == in_use("output directory", dir.file("out"), child));

  // The kernel released the dead process's locks: the same job takes over and ends exactly once.
  const job_result after = run_numbers(dir.file("out"), dir.file("chk"), 3000);
  INFO(after.message);
  CHECK(after.exit_code == 0);
  CHECK(part_lines(dir.file("out")) == numbers(3000));
}

TEST_CASE("a fresh run into a non-empty output directory that is not its own exits 2 and touches nothing in it",
          "[dataflow][ownership]") {
  temp_dir dir;
  const std::string out = dir.file("out");
  SECTION("a directory of the user's files, one named like a part file") {
    fs::create_directories(out);
    std::ofstream(out + "/part-00004-000000000099") << "mine\n";
    std::ofstream(out + "/notes.txt") << "notes\n";
    const job_result r = run_numbers(out, dir.file("chk"), 1000);
    CHECK(r.exit_code == 2);
    CHECK(r.message == "output directory '" + out +
                           "' is not empty and holds no output of this job (it holds 'notes.txt' and 1 more); choose "
                           "an empty or new directory");
    CHECK(read_text(out + "/part-00004-000000000099") == "mine\n");
    CHECK(read_text(out + "/notes.txt") == "notes\n");
    // Nothing but the lock was added, and no checkpoint was taken.
    CHECK(names_in(out) == std::vector<std::string>{".sluice-lock", "notes.txt", "part-00004-000000000099"});
    CHECK(names_in(dir.file("chk")) == std::vector<std::string>{".sluice-lock"});
  }
  SECTION("the output of an earlier run of this job with another checkpoint directory") {
    const job_result earlier = run_numbers(out, dir.file("chk-a"), 1000);
    REQUIRE(earlier.exit_code == 0);
    const job_result r = run_numbers(out, dir.file("chk-b"), 1000);
    CHECK(r.exit_code == 2);
    CHECK(r.message == "output directory '" + out + "' holds the output of job 'numbers' with checkpoint directory '" +
                           fs::canonical(dir.file("chk-a")).string() +
                           "', not of this job ('numbers' with checkpoint directory '" +
                           fs::canonical(dir.file("chk-b")).string() + "'); choose an empty or new directory");
    CHECK(part_lines(out) == numbers(1000));  // not doubled
  }
}

TEST_CASE("a fresh run takes its own output directory again, and one holding only what a crashed start left",
          "[dataflow][ownership]") {
  temp_dir dir;
  SECTION("a run that failed before its first checkpoint") {
    std::ofstream(dir.file("input.txt")) << "a b\n" << std::string(200, 'x') << "\n";
    job_builder job("wordcount");
    build_wordcount(job, {dir.file("input.txt"), dir.file("out"), 2, 0});
    job_settings settings = settings_for(dir.file("chk"));
    settings.max_record_bytes = 64;  // the second line fails the job, once its tasks run
    const job_result failed = run_job(job, settings);
    REQUIRE(failed.exit_code == 1);
    CHECK(fs::exists(dir.file("out") + "/.sluice-output"));
  }
  SECTION("a start killed while it locked or claimed the directory") {
    fs::create_directories(dir.file("out"));
    std::ofstream(dir.file("out") + "/.sluice-lock.probe");
    std::ofstream(dir.file("out") + "/.sluice-output.tmp") << "sluice output";
  }
  sluice::test::write_corpus_file(dir.file("input.txt"), 2000, 5);
  job_builder job("wordcount");
  build_wordcount(job, {dir.file("input.txt"), dir.file("out"), 2, 0});
  const job_result r = run_job(job, settings_for(dir.file("chk")));
  INFO(r.message);
  CHECK(r.exit_code == 0);
  CHECK(sluice::test::published_lines(dir.file("out")) == sluice::test::expected_counts(dir.file("input.txt")));
}

TEST_CASE("a fresh start over its own output of another parallelism removes that output: no line twice",
          "[dataflow][ownership]") {
  temp_dir dir;
  sluice::test::write_corpus_file(dir.file("input.txt"), 3000, 8);
  const auto run = [&dir](std::size_t parallelism, std::uint64_t window) {
    job_builder job("wordcount");
    build_wordcount(job, {dir.file("input.txt"), dir.file("out"), parallelism, window});
    return run_job(job, settings_for(dir.file("chk")));
  };
  REQUIRE(run(3, 0).exit_code == 0);
  SECTION("its checkpoints deleted") {
    for (const auto& e : fs::directory_iterator(dir.file("chk"))) {
      if (e.path().filename().string().starts_with("chk-")) fs::remove_all(e.path());
    }
  }
  SECTION("its checkpoints all invalid") {
    for (const auto& e : fs::directory_iterator(dir.file("chk"))) {
      if (e.path().filename().string().starts_with("chk-")) fs::resize_file(e.path() / "_manifest", 0);
    }
  }
  // Part files of count#2 (task 5 at parallelism 3) have no task in the new graph to remove them.
  const job_result r = run(2, 0);
  INFO(r.message);
  REQUIRE(r.exit_code == 0);
  CHECK_FALSE(r.resumed_from.has_value());
  CHECK(sluice::test::published_lines(dir.file("out")) == sluice::test::expected_counts(dir.file("input.txt"), 0));
  // And into another shape (windowed: other task ids) the same way.
  for (const auto& e : fs::directory_iterator(dir.file("chk"))) {
    if (e.path().filename().string().starts_with("chk-")) fs::remove_all(e.path());
  }
  REQUIRE(run(3, 500).exit_code == 0);
  CHECK(sluice::test::published_lines(dir.file("out")) == sluice::test::expected_counts(dir.file("input.txt"), 500));
}

TEST_CASE("a fresh start over its own output refuses a part-named file it did not write, and leaves it",
          "[dataflow][ownership]") {
  temp_dir dir;
  const std::string out = dir.file("out");
  REQUIRE(run_numbers(out, dir.file("chk"), 100).exit_code == 0);
  fs::remove_all(dir.file("chk"));
  fs::create_directories(dir.file("chk"));
  std::ofstream(out + "/part-00004-000000000099") << "mine\n";
  const job_result r = run_numbers(out, dir.file("chk"), 100);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.message, Catch::Contains("part-00004-000000000099") && Catch::Contains("did not provably write"));
  std::ifstream kept(out + "/part-00004-000000000099");
  std::string line;
  std::getline(kept, line);
  CHECK(line == "mine");
}

TEST_CASE("a resumed run needs its own output directory back", "[dataflow][ownership]") {
  temp_dir dir;
  const job_result first = run_numbers(dir.file("out"), dir.file("chk"), 1000);
  REQUIRE(first.exit_code == 0);
  fs::remove_all(dir.file("out"));
  const job_result r = run_numbers(dir.file("out"), dir.file("chk"), 1000);
  CHECK(r.exit_code == 2);
  CHECK(r.message == "output directory '" + dir.file("out") +
                         "' holds no output of this job (no .sluice-output marker), yet checkpoint directory '" +
                         dir.file("chk") +
                         "' holds a checkpoint to resume from; give the job its own output directory back, or start "
                         "afresh with a new checkpoint directory");
}

namespace {

// Runs the numbers job, rate-limited so that it is still running when its third checkpoint
// completes, and stops it there (exit 130): its output directory holds published files by then,
// and its checkpoint directory at least two committed checkpoints.
job_result run_and_stop(const temp_dir& dir, std::uint64_t count) {
  job_builder job("numbers");
  build_numbers(job, dir.file("out"), count, 20'000);
  job_settings settings = settings_for(dir.file("chk"));
  std::stop_source stop;
  settings.stop = stop.get_token();
  int completed = 0;  // on the job's first executor only
  settings.on_checkpoint = [&stop, &completed](const sluice::snapshot::checkpoint_stats& c) {
    if (c.outcome.completed() && ++completed >= 3) stop.request_stop();
  };
  return run_job(job, settings);
}

// chk-<id> directories with a non-empty manifest, ascending.
std::vector<std::uint64_t> committed(const std::string& root) {
  std::vector<std::uint64_t> ids;
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string name = e.path().filename().string();
    std::error_code ec;
    if (!name.starts_with("chk-") || fs::file_size(e.path() / "_manifest", ec) == 0 || ec) continue;
    ids.push_back(std::stoull(name.substr(4)));
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

}  // namespace

TEST_CASE("a resumed run never deletes a file it did not write", "[dataflow][ownership]") {
  temp_dir dir;
  constexpr std::uint64_t count = 40'000;
  const job_result stopped = run_and_stop(dir, count);
  INFO(stopped.message);
  REQUIRE(stopped.exit_code == 130);
  INFO(part_lines(dir.file("out")).size() << " lines published before the stop");
  SECTION("resuming from the newest checkpoint") {}
  SECTION("falling back to an older one: output published after it is the job's, and goes") {
    const auto ids = committed(dir.file("chk"));
    REQUIRE(ids.size() >= 2);
    fs::remove_all(dir.file("chk") + "/chk-" + std::to_string(ids.back()));
  }
  // The user's files, some named like output.
  const std::map<std::string, std::string> user = {{"notes.txt", "notes\n"},
                                                   {"part-00001-7", "hand-made\n"},
                                                   {"part-00099-000000000000", "user 99\n"},
                                                   {".hidden", "hidden\n"}};
  for (const auto& [name, text] : user) std::ofstream(dir.file("out") + "/" + name) << text;

  job_builder job("numbers");
  build_numbers(job, dir.file("out"), count, 20'000);
  const job_result resumed = run_job(job, settings_for(dir.file("chk")));
  INFO(resumed.message);
  REQUIRE(resumed.exit_code == 0);
  CHECK(resumed.resumed_from.has_value());
  CHECK(part_lines(dir.file("out")) == numbers(count, {"user 99"}));  // exactly once, plus the user's
  for (const auto& [name, text] : user) CHECK(read_text(dir.file("out") + "/" + name) == text);
}

TEST_CASE("a file in the way of the job's output fails the resumed run naming it, and stays", "[dataflow][ownership]") {
  temp_dir dir;
  constexpr std::uint64_t count = 40'000;
  const job_result stopped = run_and_stop(dir, count);
  REQUIRE(stopped.exit_code == 130);
  const std::string in_the_way = dir.file("out") + "/part-00001-000000099999";
  std::ofstream(in_the_way) << "mine\n";

  job_builder job("numbers");
  build_numbers(job, dir.file("out"), count, 20'000);
  const job_result failed = run_job(job, settings_for(dir.file("chk")));
  CHECK(failed.exit_code == 1);
  CHECK(failed.message.find("'part-00001-000000099999' is in the way of this sink's output and was not written by it") !=
        std::string::npos);
  CHECK(read_text(in_the_way) == "mine\n");

  // Moved away, the next run (the locks released after the failure) ends exactly once.
  fs::remove(in_the_way);
  job_builder again_job("numbers");
  build_numbers(again_job, dir.file("out"), count, 20'000);
  const job_result again = run_job(again_job, settings_for(dir.file("chk")));
  INFO(again.message);
  CHECK(again.exit_code == 0);
  CHECK(part_lines(dir.file("out")) == numbers(count));
}

TEST_CASE("a checkpoint directory that cannot be written is refused before the job runs", "[dataflow][ownership]") {
  temp_dir dir;
  SECTION("its parent is a regular file") {
    std::ofstream(dir.file("plain")) << "a file\n";
    const job_result r = run_numbers(dir.file("out"), dir.file("plain") + "/chk", 100);
    CHECK(r.exit_code == 2);
    CHECK(r.message == "create checkpoint directory '" + dir.file("plain") + "/chk': Not a directory");
    CHECK_FALSE(fs::exists(dir.file("out")));
  }
  SECTION("it exists without write permission (and so does an output directory)") {
    // As root permission bits do not bind, so the runs happen in a child that is not root.
    fs::permissions(dir.path(), fs::perms(0755));
    fs::create_directory(dir.file("read-only"));
    fs::permissions(dir.file("read-only"), fs::perms(0555));
    fs::create_directory(dir.file("chk"));
    fs::permissions(dir.file("chk"), fs::perms(0777));
    int pipe_fds[2];
    REQUIRE(::pipe(pipe_fds) == 0);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      ::close(pipe_fds[0]);
      if (::geteuid() == 0) {
        const gid_t nogroup = 65534;
        const uid_t nobody = 65534;
        if (::setgroups(0, nullptr) != 0 || ::setresgid(nogroup, nogroup, nogroup) != 0 ||
            ::setresuid(nobody, nobody, nobody) != 0) {
          ::_exit(4);
        }
      }
      std::string report;
      for (const auto& [out, chk] : {std::pair{dir.file("out"), dir.file("read-only")},
                                     std::pair{dir.file("read-only"), dir.file("chk")}}) {
        const job_result r = run_numbers(out, chk, 100);
        report += std::to_string(r.exit_code) + "\n" + r.message + "\n";
      }
      (void)::write(pipe_fds[1], report.data(), report.size());
      ::_exit(0);
    }
    ::close(pipe_fds[1]);
    std::string report;
    char buf[1024];
    for (ssize_t n; (n = ::read(pipe_fds[0], buf, sizeof buf)) > 0;) report.append(buf, static_cast<std::size_t>(n));
    ::close(pipe_fds[0]);
    int status = 0;
    ::waitpid(child, &status, 0);
    REQUIRE(WIFEXITED(status));
    REQUIRE(WEXITSTATUS(status) == 0);
    CHECK(report == "2\ncheckpoint directory '" + dir.file("read-only") + "' is not writable: Permission denied\n" +
                        "2\noutput directory '" + dir.file("read-only") + "' is not writable: Permission denied\n");
    CHECK_FALSE(fs::exists(dir.file("out")));  // the checkpoint directory was refused first
    CHECK(names_in(dir.file("read-only")).empty());
    CHECK(names_in(dir.file("chk")) == std::vector<std::string>{".sluice-lock"});  // no checkpoint: it never ran
  }
}

TEST_CASE("a checkpoint directory named with an impossible id is skipped with its reason, ids start sanely",
          "[dataflow][ownership][recovery]") {
  temp_dir dir;
  const std::string chk = dir.file("chk");
  const std::vector<std::string> bad = {"chk-18446744073709551615", "chk-9223372036854775807", "chk-007"};
  for (const auto& name : bad) {
    fs::create_directories(chk + "/" + name);
    std::ofstream(chk + "/" + name + "/_manifest") << "not a manifest\n";
  }
  std::vector<std::uint64_t> ids;  // on the job's first executor; read after run_job returned
  job_result r;
  std::string log_text;
  {
    namespace log = sluice::runtime::log;
    using sluice::runtime::log_level;
    const log_level saved = log::level();
    if (!log::enabled(log_level::warn)) log::set_level(log_level::warn);
    sluice::test::stderr_capture capture;
    job_builder job("numbers");
    build_numbers(job, dir.file("out"), 2000);
    job_settings settings = settings_for(chk);
    settings.on_checkpoint = [&ids](const sluice::snapshot::checkpoint_stats& c) { ids.push_back(c.id); };
    r = run_job(job, settings);
    log_text = capture.text();
    log::set_level(saved);
  }
  INFO(r.message);
  INFO("log:\n" << log_text);
  REQUIRE(r.exit_code == 0);
  CHECK_FALSE(r.resumed_from.has_value());
  REQUIRE_FALSE(ids.empty());
  CHECK(*std::min_element(ids.begin(), ids.end()) == 1);
  CHECK(*std::max_element(ids.begin(), ids.end()) < 1000);
  CHECK(part_lines(dir.file("out")) == numbers(2000));
  CHECK(log_text.find("ignoring '" + chk +
                      "/chk-18446744073709551615' (bad-name): chk-18446744073709551615: not a checkpoint: checkpoint "
                      "id 18446744073709551615 is above the largest valid id 4611686018427387904 (2^62)") !=
        std::string::npos);
  CHECK(log_text.find("chk-9223372036854775807: not a checkpoint: checkpoint id 9223372036854775807 is above") !=
        std::string::npos);
  CHECK(log_text.find("chk-007: not a checkpoint: the id has a leading zero") != std::string::npos);
  for (const auto& name : bad) CHECK(read_text(chk + "/" + name + "/_manifest") == "not a manifest\n");  // untouched
}
