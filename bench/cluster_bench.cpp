// cluster: word count across worker processes coordinated through etcd (cluster/worker.hpp), beside
// the same job in one process, in the same run; then what the loss of a worker costs.
//
// - Figure: words/s of `sluice wordcount --cluster ... --workers W` (W processes of this very
//   executable, /proc/self/exe, each with --parallelism P tasks per stage spread over the workers),
//   from the first spawn to the last exit. Baseline: `sluice wordcount --parallelism P` in one
//   process, spawned the same way, over the same corpus. Both include process start-up and the
//   final checkpoint; both checkpoint every 100 ms. The medians of --runs interleaved runs.
// - Recovery (--runs times): the workers run with SLUICE_LOG=info; once the leader has completed
//   its first checkpoint, worker 1 is killed with SIGKILL and started again at once. From the
//   workers' timestamped log lines: detection (the kill to the first "attempt ... ended" of a
//   survivor), restart (the kill to the last "runs attempt 2"), and back to work (the kill to the
//   first checkpoint completed after it); and the run's whole time against an uninterrupted one.
// - etcd (`etcd` on PATH, or $SLUICE_ETCD) runs for the benchmark on Unix sockets in a temporary
//   directory, as the tests run it (tests/support/etcd_server.hpp). All processes share this host:
//   on a 2-core machine W workers compete for the same cores, so the ratio says what the processes,
//   the transport and etcd cost, not how the job scales across hosts.

#include "bench.hpp"

#include <support/etcd_server.hpp>

#include <sluice/dataflow/generator.hpp>
#include <sluice/dataflow/samples.hpp>
#include <sluice/runtime/sync_wait.hpp>

#include <fmt/core.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace sluice::bench {
namespace {

namespace df = sluice::dataflow;
using namespace std::chrono_literals;
using wall_clock = std::chrono::system_clock;

unsigned free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  const bool ok = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  if (fd >= 0) ::close(fd);
  if (!ok) throw std::runtime_error("cluster bench: no free loopback port");
  return ntohs(a.sin_port);
}

// One child process of this executable, its stdout and stderr in `log`.
class child {
 public:
  child(const std::vector<std::string>& args, const std::string& log, bool info_log) {
    std::vector<std::string> all = {"/proc/self/exe"};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> env_text;
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::string_view(*e).rfind("SLUICE_LOG=", 0) != 0) env_text.emplace_back(*e);
    }
    env_text.emplace_back(info_log ? "SLUICE_LOG=info" : "SLUICE_LOG=warn");
    std::vector<char*> envp;
    for (auto& e : env_text) envp.push_back(e.data());
    envp.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    const int rc = ::posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) throw std::runtime_error(fmt::format("cluster bench: spawn failed: {}", std::strerror(rc)));
  }
  child(const child&) = delete;
  child& operator=(const child&) = delete;
  ~child() {
    if (!code_) {
      ::kill(pid_, SIGKILL);
      (void)wait();
    }
  }
  void kill() const { ::kill(pid_, SIGKILL); }
  int wait() {
    if (code_) return *code_;
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
    return *code_;
  }

 private:
  pid_t pid_ = -1;
  std::optional<int> code_;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The timestamp of a log line ("2026-12-01T22:48:41.123Z ..."), UTC.
std::optional<wall_clock::time_point> line_time(const std::string& line) {
  std::tm tm{};
  int ms = 0;
  if (std::sscanf(line.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d.%3dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                  &tm.tm_min, &tm.tm_sec, &ms) != 7) {
    return std::nullopt;
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return wall_clock::from_time_t(::timegm(&tm)) + std::chrono::milliseconds(ms);
}

// The first (or, with `last`, the last) line of `log` holding `needle` at or after `after`.
std::optional<wall_clock::time_point> find_line(const std::string& log, std::string_view needle,
                                                wall_clock::time_point after, bool last = false) {
  std::optional<wall_clock::time_point> found;
  std::size_t at = 0;
  while (at < log.size()) {
    std::size_t end = log.find('\n', at);
    if (end == std::string::npos) end = log.size();
    const std::string line = log.substr(at, end - at);
    at = end + 1;
    if (line.find(needle) == std::string::npos) continue;
    const auto t = line_time(line);
    if (!t || *t < after) continue;
    if (!last) return t;
    found = t;
  }
  return found;
}

double ms_between(wall_clock::time_point from, std::optional<wall_clock::time_point> to) {
  return to ? std::chrono::duration<double, std::milli>(*to - from).count() : -1;
}

struct recovery_sample {
  double detection_ms = -1;
  double restart_ms = -1;
  double working_ms = -1;
  double seconds = 0;
};

class cluster_bench final : public benchmark {
 public:
  std::string_view name() const noexcept override { return "cluster"; }
  std::string_view description() const noexcept override {
    return "words/s of word count across worker processes (etcd) vs one process; the cost of a worker's loss";
  }
  std::vector<option> options() override {
    return {{"--lines", "corpus lines", &lines_},
            {"--workers", "worker processes", &workers_},
            {"--parallelism", "tasks per stage (both runs)", &parallelism_}};
  }

  void run(const common_options& common, const reporter& out) override {
    if (!test::etcd_server::installed()) {
      throw std::runtime_error("cluster bench: etcd is not installed (apt-get install etcd-server, or set SLUICE_ETCD)");
    }
    if (workers_ < 2) throw std::runtime_error("cluster bench: --workers must be at least 2");
    dir_ = fmt::format("/tmp/sluice-bench-cluster-{}", ::getpid());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    input_ = dir_ + "/corpus.txt";
    auto written = runtime::sync_wait(df::write_corpus(input_, lines_, 42));
    if (!written) throw std::runtime_error(written.error().message());
    const double words = static_cast<double>(words_in(input_));
    test::etcd_server etcd(dir_);
    etcd.start();
    endpoint_ = etcd.endpoint();

    auto r = measure_paired(
        common.runs, [&] { return words / cluster_seconds(nullptr); }, [&] { return words / one_process_seconds(); });
    out.result(name(),
               fmt::format("word count across {} workers: {}/s words  baseline (one process) {}/s  ratio {:.2f}  "
                           "({} lines, parallelism {}, checkpoints every 100 ms, all on this host)",
                           workers_, human_rate(r.figure), human_rate(r.baseline), r.figure / r.baseline, lines_,
                           parallelism_),
               {{"words_per_s", r.figure},
                {"baseline_words_per_s", r.baseline},
                {"ratio", r.figure / r.baseline},
                {"workers", std::uint64_t{workers_}},
                {"lines", lines_},
                {"parallelism", std::uint64_t{parallelism_}},
                {"runs", std::uint64_t{common.runs}}});

    std::vector<double> detection, restart, working, slowdown;
    for (unsigned i = 0; i < common.runs; ++i) {
      recovery_sample s;
      (void)cluster_seconds(&s);
      detection.push_back(s.detection_ms);
      restart.push_back(s.restart_ms);
      working.push_back(s.working_ms);
      slowdown.push_back(s.seconds / (words / r.figure));
    }
    out.result(name(),
               fmt::format("worker 1 of {} killed (SIGKILL) after the first checkpoint and restarted at once: detected "
                           "in {:.0f} ms, next attempt running on every worker after {:.0f} ms, first checkpoint of "
                           "it after {:.0f} ms; the run took {:.2f}x an uninterrupted one (medians of {})",
                           workers_, median(detection), median(restart), median(working), median(slowdown),
                           common.runs),
               {{"detection_ms", median(detection)},
                {"restart_ms", median(restart)},
                {"first_checkpoint_ms", median(working)},
                {"time_ratio", median(slowdown)},
                {"workers", std::uint64_t{workers_}},
                {"runs", std::uint64_t{common.runs}}});
    etcd.stop();
    std::filesystem::remove_all(dir_);
  }

 private:
  static std::uint64_t words_in(const std::string& path) {
    std::uint64_t words = 0;
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) df::for_each_word(line, [&](std::string_view) { ++words; });
    return words;
  }

  std::vector<std::string> job_args(const std::string& run) const {
    std::filesystem::remove_all(dir_ + "/out-" + run);
    std::filesystem::remove_all(dir_ + "/chk-" + run);
    return {"wordcount", "--input", input_, "--output", dir_ + "/out-" + run, "--checkpoint-dir", dir_ + "/chk-" + run,
            "--parallelism", std::to_string(parallelism_), "--checkpoint-interval-ms", "100", "--quiet"};
  }

  double one_process_seconds() {
    const std::string run = fmt::format("one-{}", runs_++);
    const auto start = bench_clock::now();
    child c(job_args(run), dir_ + "/" + run + ".log", false);
    if (c.wait() != 0) throw std::runtime_error("cluster bench: the one-process run failed: " + read_file(dir_ + "/" + run + ".log"));
    return seconds_since(start);
  }

  // One run across the workers; with `recovery`, worker 1 is killed once and restarted.
  double cluster_seconds(recovery_sample* recovery) {
    const std::string run = fmt::format("w-{}", runs_++);
    const std::vector<std::string> base = job_args(run);
    std::vector<unsigned> ports;
    for (unsigned i = 0; i < workers_; ++i) ports.push_back(free_loopback_port());
    const auto args = [&](unsigned i) {
      std::vector<std::string> a = base;
      for (const std::string& more : {std::string("--cluster"), endpoint_, std::string("--job-name"), run,
                                      std::string("--workers"), std::to_string(workers_), std::string("--worker-index"),
                                      std::to_string(i), std::string("--listen"),
                                      "127.0.0.1:" + std::to_string(ports[i])}) {
        a.push_back(more);
      }
      return a;
    };
    const auto log = [&](unsigned i) { return fmt::format("{}/{}-w{}.log", dir_, run, i); };
    const bool info = recovery != nullptr;
    const auto start = bench_clock::now();
    std::vector<std::unique_ptr<child>> kids;
    for (unsigned i = 0; i < workers_; ++i) kids.push_back(std::make_unique<child>(args(i), log(i), info));
    wall_clock::time_point killed{};
    if (recovery != nullptr) {
      // Once some worker's log says a checkpoint completed (the leader's), kill worker 1.
      const auto give_up = bench_clock::now() + 60s;
      for (bool seen = false; !seen;) {
        if (bench_clock::now() > give_up) throw std::runtime_error("cluster bench: no checkpoint completed in 60 s");
        for (unsigned i = 0; i < workers_ && !seen; ++i) seen = read_file(log(i)).find(" completed: ") != std::string::npos;
        if (!seen) std::this_thread::sleep_for(5ms);
      }
      killed = wall_clock::now();
      kids[1]->kill();
      (void)kids[1]->wait();
      kids[1] = std::make_unique<child>(args(1), log(1), info);
    }
    for (unsigned i = 0; i < workers_; ++i) {
      const int code = kids[i]->wait();
      if (code != 0) {
        throw std::runtime_error(fmt::format("cluster bench: worker {} exited {}: {}", i, code, read_file(log(i))));
      }
    }
    const double seconds = seconds_since(start);
    if (recovery != nullptr) {
      recovery->seconds = seconds;
      std::optional<wall_clock::time_point> detected, restarted, working;
      std::vector<std::string> texts;
      for (unsigned i = 0; i < workers_; ++i) texts.push_back(read_file(log(i)));
      for (unsigned i = 0; i < workers_; ++i) {
        if (i != 1) {
          const auto d = find_line(texts[i], "ended: ", killed);
          if (d && (!detected || *d < *detected)) detected = d;
        }
        const auto r = find_line(texts[i], " runs attempt 2 ", killed);
        if (r && (!restarted || *r > *restarted)) restarted = r;
      }
      for (unsigned i = 0; i < workers_ && restarted; ++i) {
        const auto w = find_line(texts[i], " completed: ", *restarted);
        if (w && (!working || *w < *working)) working = w;
      }
      recovery->detection_ms = ms_between(killed, detected);
      recovery->restart_ms = ms_between(killed, restarted);
      recovery->working_ms = ms_between(killed, working);
    }
    return seconds;
  }

  std::uint64_t lines_ = 2'000'000;
  unsigned workers_ = 3;
  unsigned parallelism_ = 3;
  std::string dir_;
  std::string input_;
  std::string endpoint_;
  unsigned runs_ = 0;
};

registration<cluster_bench> reg;

}  // namespace
}  // namespace sluice::bench
