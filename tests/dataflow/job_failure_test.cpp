// Jobs that fail, and the runs after them: a corrupt newest checkpoint is skipped with its reason and
// the job resumes from the previous one (docs/design.md invariants 7 and 9); a TCP connection lost under
// a running job fails it with a message naming the task and the cause, and the next run resumes and
// ends with the exact output (invariant 8).
#include <sluice/dataflow/job_runner.hpp>
#include <sluice/dataflow/samples.hpp>
#include <sluice/runtime/log.hpp>

#include <sluice/runtime/sync_wait.hpp>
#include <sluice/snapshot/checkpoint_storage.hpp>

#include <support/checkpoint_files.hpp>
#include <support/state_files.hpp>
#include <support/temp_dir.hpp>

#include "wordcount_support.hpp"

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

using namespace sluice::dataflow;
using sluice::snapshot::checkpoint_mode;
using sluice::test::expected_counts;
using sluice::test::published_lines;
using sluice::test::stderr_capture;
using sluice::test::temp_dir;
using sluice::test::write_corpus_file;

namespace fs = std::filesystem;

namespace {

// Ids of the chk-<id> directories under `root` that hold a manifest (committed), ascending. Safe to
// call while a job writes and removes checkpoints (another thread does).
std::vector<std::uint64_t> committed_checkpoints(const std::string& root) {
  std::vector<std::uint64_t> ids;
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("chk-", 0) != 0) continue;
    std::uint64_t id = 0;
    const char* last = name.data() + name.size();
    const auto [stop, fault] = std::from_chars(name.data() + 4, last, id);
    if (fault != std::errc() || stop != last) continue;  // chk-7.tmp and the like
    // (an empty _manifest is prepared but never committed)
    std::error_code size_ec;
    const fs::path manifest = it->path() / "_manifest";
    if (fs::exists(manifest, size_ec) && fs::file_size(manifest, size_ec) > 0 && !size_ec) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::string chk_dir(const temp_dir& dir, std::uint64_t id) {
  return dir.file("checkpoints") + "/chk-" + std::to_string(id);
}

// The largest task-*.state file of a checkpoint directory (it surely holds operator state).
fs::path largest_state_file(const std::string& chk) {
  fs::path best;
  std::uintmax_t best_size = 0;
  for (const auto& e : fs::directory_iterator(chk)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("task-", 0) != 0 || e.path().extension() != ".state") continue;
    if (best.empty() || e.file_size() > best_size) {
      best = e.path();
      best_size = e.file_size();
    }
  }
  return best;
}

void flip_byte(const fs::path& file, std::uintmax_t offset) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  REQUIRE(f);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.get(c);
  f.seekp(static_cast<std::streamoff>(offset));
  f.put(static_cast<char>(c ^ 0x5a));
  REQUIRE(f);
}

// Windowed word count, with short checkpoint intervals. Its sink publishes along the way, so a
// resume from an older checkpoint must drop what was staged or published after it, and produce
// it again.
job_settings windowed_settings(const temp_dir& dir) {
  job_settings settings;
  settings.checkpoint_dir = dir.file("checkpoints");
  settings.checkpoint_interval = std::chrono::milliseconds(10);
  settings.retained_checkpoints = 3;
  settings.mode = checkpoint_mode::unaligned;
  settings.handle_signals = false;
  return settings;
}

constexpr std::uint64_t window_lines = 500;

// Runs the job in a child process that SIGKILLs itself, from the job's first executor, as soon as
// it sees that `checkpoints` checkpoints completed; returns the raw wait status (exit 0: the job
// ended before that).
int run_child_killed_after(const temp_dir& dir, std::uint64_t checkpoints) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int code = 1;
    try {
      job_builder job("wordcount");
      build_wordcount(job, {dir.file("input.txt"), dir.file("out"), 2, window_lines});
      job_settings settings = windowed_settings(dir);
      settings.progress_interval = std::chrono::milliseconds(2);
      settings.on_progress = [checkpoints](const job_progress& p) {
        if (p.checkpoints_completed >= checkpoints) ::raise(SIGKILL);
      };
      code = run_job(job, settings).exit_code == 0 ? 0 : 1;
    } catch (...) {
      code = 3;
    }
    ::_exit(code);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

// Rewrites task `task`'s state file of committed checkpoint `id` with `bytes` as the state of its
// first operator, and commits the checkpoint again: every file validates (checksums, sizes, the
// manifest), but the state does not restore.
void replace_operator_state(const std::string& root, std::uint64_t id, sluice::snapshot::task_id task,
                            std::vector<std::byte> bytes) {
  namespace ss = sluice::snapshot;
  ss::checkpoint_storage storage(root);
  ss::loaded_checkpoint loaded = sluice::runtime::sync_wait(storage.load(id)).value();
  std::vector<ss::task_id> tasks;
  for (const ss::task_state& t : loaded.tasks) {
    tasks.push_back(t.summary.task);
    if (t.summary.task != task) continue;
    sluice::test::state_file_builder b(id, task);
    for (const auto& [index, payload] : t.operator_state) {
      b.add(ss::record_type::operator_state, 0, index, index == 0 ? std::span<const std::byte>(bytes) : payload);
    }
    for (const auto& [key, payload] : t.input_channels) b.add(ss::record_type::input_channel, key.group, key.index, payload);
    for (const auto& [key, payload] : t.output_channels) b.add(ss::record_type::output_channel, key.group, key.index, payload);
    sluice::test::write_bytes(storage.state_file_path(id, task), b.finish());
  }
  fs::remove(fs::path(storage.checkpoint_dir(id)) / "_manifest");
  auto committed = sluice::runtime::sync_wait(
      storage.commit_verified(id, loaded.manifest.mode, tasks, loaded.manifest.metadata));
  REQUIRE(committed.ok());
}

}  // namespace

TEST_CASE("a corrupt newest checkpoint makes the job resume from the previous one", "[dataflow][recovery]") {
  temp_dir dir;
  // Killed mid-input; a build fast enough to end the input first gets a corpus twice as long.
  std::uint64_t lines = 30'000;
  for (;; lines *= 2) {
    write_corpus_file(dir.file("input.txt"), lines, 23);
    const int status = run_child_killed_after(dir, 3);
    REQUIRE((WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) == 0)));
    if (WIFSIGNALED(status)) {
      REQUIRE(WTERMSIG(status) == SIGKILL);
      break;
    }
    REQUIRE(lines < 1'000'000);
    fs::remove_all(dir.file("checkpoints"));
    fs::remove_all(dir.file("out"));
  }

  const std::vector<std::uint64_t> committed = committed_checkpoints(dir.file("checkpoints"));
  REQUIRE(committed.size() >= 2);
  const std::uint64_t newest = committed.back();
  const std::uint64_t previous = committed[committed.size() - 2];
  const std::string newest_dir = chk_dir(dir, newest);
  INFO(lines << " lines; committed checkpoints " << committed.front() << ".." << newest << " (" << committed.size()
              << "); published before the restart: " << published_lines(dir.file("out")).size() << " lines");

  std::string corrupted;  // the file the skip reason must name
  std::string reason;     // or what it must say instead
  SECTION("a flipped byte in a task state file") {
    const fs::path file = largest_state_file(newest_dir);
    REQUIRE_FALSE(file.empty());
    REQUIRE(fs::file_size(file) > 64);
    flip_byte(file, fs::file_size(file) / 2);
    corrupted = file.filename().string();
  }
  SECTION("a truncated task state file") {
    const fs::path file = largest_state_file(newest_dir);
    REQUIRE_FALSE(file.empty());
    fs::resize_file(file, fs::file_size(file) / 2);
    corrupted = file.filename().string();
  }
  SECTION("a flipped byte in the manifest") {
    const fs::path manifest = fs::path(newest_dir) / "_manifest";
    REQUIRE(fs::file_size(manifest) > 16);
    flip_byte(manifest, fs::file_size(manifest) / 2);
    corrupted = "_manifest";
  }
  SECTION("a newest checkpoint that validates but whose operator state does not restore") {
    // Task 2 is count#1 (the windowed read stage is one task): its first operator is the window.
    replace_operator_state(dir.file("checkpoints"), newest, 2, sluice::test::bytes_of("not a window's state"));
    corrupted = "task-2.state";
    reason = "(unrestorable): task count#1: restore state";
  }
  INFO("corrupted chk-" << newest << "/" << corrupted << "; expecting a resume from chk-" << previous);

  job_result r;
  std::string log_text;
  {
    namespace log = sluice::runtime::log;
    using sluice::runtime::log_level;
    const log_level saved = log::level();
    if (!log::enabled(log_level::warn)) log::set_level(log_level::warn);  // the skip is a warning
    stderr_capture capture;
    job_builder job("wordcount");
    build_wordcount(job, {dir.file("input.txt"), dir.file("out"), 2, window_lines});
    r = run_job(job, windowed_settings(dir));
    log_text = capture.text();
    log::set_level(saved);
  }
  INFO(r.message);
  INFO("log:\n" << log_text);
  REQUIRE(r.exit_code == 0);
  REQUIRE(r.resumed_from.has_value());
  CHECK(*r.resumed_from == previous);
  // Skipped with a reason that names the checkpoint and the file.
  const std::string skipped = "skipping checkpoint " + std::to_string(newest) + " ";
  const auto at = log_text.find(skipped);
  REQUIRE(at != std::string::npos);
  const std::string line = log_text.substr(at, log_text.find('\n', at) - at);
  if (reason.empty()) {
    CHECK(line.find("chk-" + std::to_string(newest) + "/" + corrupted) != std::string::npos);
  } else {
    CHECK(line.find(reason) != std::string::npos);
  }
  // Exactly once: output staged or published after the previous checkpoint was dropped and produced
  // again.
  CHECK(published_lines(dir.file("out")) == expected_counts(dir.file("input.txt"), window_lines));
}

namespace {

// A connected loopback TCP socket of this process, as its descriptor, ports and side.
struct tcp_socket {
  int fd = -1;
  int local_port = 0;
  int peer_port = 0;
  bool dialed = false;  // its peer is a listener of this process (else it was accepted by one)
};

// This process's connected loopback TCP sockets, found through /proc/self/fd. Listeners are left
// out, but tell which side of its connection each socket is.
std::vector<tcp_socket> connected_tcp_sockets() {
  std::vector<tcp_socket> connected;
  std::vector<int> listening_ports;
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return connected;
  const int own = ::dirfd(d);
  while (const dirent* e = ::readdir(d)) {
    const int fd = std::atoi(e->d_name);
    if (e->d_name[0] == '.' || fd == own) continue;
    char target[64] = {};
    const std::string link = std::string("/proc/self/fd/") + e->d_name;
    if (::readlink(link.c_str(), target, sizeof target - 1) <= 0 || std::string(target).rfind("socket:", 0) != 0) continue;
    int type = 0;
    int listening = 0;
    socklen_t len = sizeof type;
    if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) continue;
    len = sizeof listening;
    if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0) continue;
    sockaddr_in local{};
    socklen_t local_len = sizeof local;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0 || local.sin_family != AF_INET) continue;
    if (listening != 0) {
      listening_ports.push_back(ntohs(local.sin_port));
      continue;
    }
    sockaddr_in peer{};
    socklen_t peer_len = sizeof peer;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) continue;  // not connected
    if (peer.sin_addr.s_addr != htonl(INADDR_LOOPBACK)) continue;
    connected.push_back({fd, ntohs(local.sin_port), ntohs(peer.sin_port), false});
  }
  ::closedir(d);
  for (tcp_socket& s : connected) {
    s.dialed = std::find(listening_ports.begin(), listening_ports.end(), s.peer_port) != listening_ports.end();
  }
  return connected;
}

// Whether `text` is `pattern`, where each 'D' in the pattern stands for one or more decimal digits.
bool matches_pattern(std::string_view text, std::string_view pattern) {
  std::size_t t = 0;
  for (const char p : pattern) {
    if (p != 'D') {
      if (t >= text.size() || text[t] != p) return false;
      ++t;
      continue;
    }
    const std::size_t digits_from = t;
    while (t < text.size() && text[t] >= '0' && text[t] <= '9') ++t;
    if (t == digits_from) return false;
  }
  return t == text.size();
}

job_result run_tcp_wordcount(const temp_dir& dir, std::atomic<bool>* completed = nullptr) {
  job_builder job("wordcount");
  build_wordcount(job, {dir.file("input.txt"), dir.file("out"), 2, 0});
  job_settings settings;
  settings.checkpoint_dir = dir.file("checkpoints");
  settings.checkpoint_interval = std::chrono::milliseconds(20);
  settings.mode = checkpoint_mode::unaligned;
  settings.transport = sluice::dataflow::transport_kind::tcp;
  settings.handle_signals = false;
  if (completed != nullptr) {
    settings.on_checkpoint = [completed](const sluice::snapshot::checkpoint_stats& stats) {
      if (stats.outcome.completed()) *completed = true;
    };
  }
  return run_job(job, settings);
}

struct cut_run {
  job_result result;
  std::optional<tcp_socket> cut;  // none: the job ended before a socket was cut
  std::size_t sockets_seen = 0;
  std::chrono::milliseconds took{0};
};

// Runs the job; from another thread, once a checkpoint has completed (the next run has something to
// resume from: a manifest on disk is not enough, it is withdrawn if a task's fsync then fails), shuts one of its connected sockets of the wanted side down, as a lost peer would.
// A job that has not ended 60 s after its start is a hang: the test process aborts with a message.
cut_run run_and_cut(const temp_dir& dir, bool dialed_side) {
  std::atomic<bool> job_done{false};
  std::atomic<bool> completed{false};
  cut_run run;
  // Sockets open before the job (none, unless an earlier test in this process leaked one) are not its.
  const std::vector<tcp_socket> before = connected_tcp_sockets();
  const auto is_old = [&before](const tcp_socket& s) {
    return std::any_of(before.begin(), before.end(), [&s](const tcp_socket& b) {
      return b.fd == s.fd && b.local_port == s.local_port && b.peer_port == s.peer_port;
    });
  };
  std::thread saboteur([&run, &job_done, &completed, &is_old, dialed_side] {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!job_done.load()) {
      if (std::chrono::steady_clock::now() > give_up) {
        std::fprintf(stderr, "job_failure_test: the job did not end within 60 s of its start: a hang\n");
        std::abort();
      }
      if (!run.cut && completed.load()) {
        std::vector<tcp_socket> sockets = connected_tcp_sockets();
        std::erase_if(sockets, is_old);
        for (const tcp_socket& s : sockets) {
          if (s.dialed != dialed_side || ::shutdown(s.fd, SHUT_RDWR) != 0) continue;
          run.cut = s;
          run.sockets_seen = sockets.size();
          break;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  const auto started = std::chrono::steady_clock::now();
  run.result = run_tcp_wordcount(dir, &completed);
  run.took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started);
  job_done = true;
  saboteur.join();
  return run;
}

}  // namespace

TEST_CASE("a lost TCP peer fails the job naming the task and the cause", "[dataflow][tcp]") {
  const bool dialed_side = GENERATE(true, false);
  INFO("the socket cut is on the " << (dialed_side ? "dialing (receiving)" : "accepting (sending)")
                                   << " side of its connection");
  temp_dir dir;
  // A build fast enough to end the input before the cut gets a corpus twice as long.
  std::uint64_t lines = 100'000;
  cut_run failed;
  for (;; lines *= 2) {
    write_corpus_file(dir.file("input.txt"), lines, 31);
    failed = run_and_cut(dir, dialed_side);
    // A cut that came after the last records had crossed (the combiner makes the job quick) ends
    // nothing: the job succeeds, and the next round takes twice the input.
    if (failed.cut && failed.result.exit_code != 0) break;
    INFO(failed.result.message);
    REQUIRE(failed.result.exit_code == 0);
    REQUIRE(lines < 2'000'000);
    fs::remove_all(dir.file("checkpoints"));
    fs::remove_all(dir.file("out"));
  }

  INFO(lines << " lines; shut down fd " << failed.cut->fd << " (127.0.0.1:" << failed.cut->local_port
             << " -> 127.0.0.1:" << failed.cut->peer_port << ") of " << failed.sockets_seen
             << " connected sockets; run_job returned after " << failed.took.count() << " ms");
  INFO("message: " << failed.result.message);
  CHECK(failed.result.exit_code == 1);
  // The task ("stage#subtask"), its channel, the connection and why it ended.
  // "task count#<k>: input channel <c> failed: connection to 127.0.0.1:<port> failed: <cause>"
  const std::string& message = failed.result.message;
  CHECK(matches_pattern(message.substr(0, message.find(" failed: ") + 9), "task count#D: input channel D failed: "));
  const auto connection = message.find("connection ");
  REQUIRE(connection != std::string::npos);
  const std::string rest = message.substr(connection);
  CHECK((matches_pattern(rest.substr(0, rest.find(" failed: ") + 9), "connection to 127.0.0.1:D failed: ") ||
         matches_pattern(rest.substr(0, rest.find(" failed: ") + 9), "connection from 127.0.0.1:D failed: ")));
  // Which end notices first, and how, is a race: a reader sees the end of the stream (at a frame
  // boundary or inside a frame) or the reset that a close with unread data sends; a writer sees
  // the broken pipe.
  const std::string cause = rest.substr(rest.find(" failed: ") + 9);
  INFO("cause: " << cause);
  CHECK((cause == "the peer closed the connection" || cause.find("peer disconnected mid-frame") == 0 ||
         cause.ends_with(": Connection reset by peer") || cause.ends_with(": Broken pipe")));

  const job_result again = run_tcp_wordcount(dir);
  INFO("second run: " << again.message);
  REQUIRE(again.exit_code == 0);
  CHECK(again.resumed_from.has_value());
  CHECK(published_lines(dir.file("out")) == expected_counts(dir.file("input.txt"), 0));
}
