// One seed of `sluice simulate` (see sim_seed.hpp): every simulated process is a child process, so a
// crash drops every coroutine frame and flushes nothing; what survives is the disk's crash image,
// which the child sends to the parent through a pipe before it ends.

#include "sim_seed.hpp"

#include "sim_epoch.hpp"
#include "sim_watchdog.hpp"

#include <fmt/format.h>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>

namespace sluice::apps::simulate {

namespace {

using namespace std::chrono_literals;

// --- in the parent -------------------------------------------------------------------------------

std::string tail_of(int fd, std::size_t max) {
  const off_t size = ::lseek(fd, 0, SEEK_END);
  if (size <= 0) return {};
  const std::size_t n = std::min<std::size_t>(static_cast<std::size_t>(size), max);
  std::string out(n, '\0');
  if (::pread(fd, out.data(), n, size - static_cast<off_t>(n)) != static_cast<ssize_t>(n)) return {};
  return out;
}

epoch_report fork_epoch(const scenario& s, const sim::disk_image& image, const epoch_plan& plan);

// A process that spun inside step `step` (the watchdog killed it): the same process again, from the
// same image with the same plan, stopped just before that step, says what everything waited for.
std::string describe_before(const scenario& s, const sim::disk_image& image, const epoch_plan& plan,
                            std::uint64_t step) {
  if (step == 0 || plan.describe_at_step != 0) return {};
  epoch_plan again = plan;
  again.describe_at_step = step;
  again.trace = false;
  const epoch_report r = fork_epoch(s, image, again);
  if (r.st != epoch_report::failed || r.message.find("just before step") == std::string::npos) {
    return "\n  (run again to describe it, the process did not reach that step: " + r.message.substr(0, 200) + ")";
  }
  return "\n  run again and stopped there: " + r.message.substr(0, r.message.find("\n  its last log lines:"));
}

// Why the watchdog killed the process, and what everything waited for as that step began.
std::string stuck_message(const scenario& s, const sim::disk_image& image, const epoch_plan& plan,
                          const watched_read& read) {
  const watch_limits limits = watch_limits::for_spin(plan.spin_limit);
  const std::string before = describe_before(s, image, plan, read.stuck_at_step);
  if (read.stuck == watched_read::spinning) {
    return fmt::format("hang: the simulated process spun inside step {}: it used {:g} s of CPU and began no step "
                       "(a loop that never returns to the scheduler){}",
                       read.stuck_at_step, std::chrono::duration<double>(limits.cpu).count(), before);
  }
  return fmt::format("hang: the simulated process stayed in step {} for {:g} s of real time (a blocking call, or a "
                     "machine too loaded to run it){}",
                     read.stuck_at_step, std::chrono::duration<double>(limits.wall).count(), before);
}

epoch_report fork_epoch(const scenario& s, const sim::disk_image& image, const epoch_plan& plan) {
  epoch_report failed;
  int fds[2];
  if (::pipe(fds) != 0) {
    failed.message = fmt::format("pipe: {}", std::strerror(errno));
    return failed;
  }
  // The child's log lines, shown when it fails.
  const int log_fd = plan.trace ? -1 : ::memfd_create("sluice-sim-log", MFD_CLOEXEC);
  shared_steps steps;
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    failed.message = fmt::format("fork: {}", std::strerror(errno));
    ::close(fds[0]);
    ::close(fds[1]);
    if (log_fd >= 0) ::close(log_fd);
    return failed;
  }
  if (pid == 0) {
    ::close(fds[0]);
    if (log_fd >= 0) ::dup2(log_fd, STDERR_FILENO);
    run_epoch(s, image, plan, fds[1], &steps.count());
  }
  ::close(fds[1]);
  const watched_read read =
      read_watching(fds[0], pid, steps.count(), watch_limits::for_spin(plan.spin_limit));
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  std::string log = log_fd >= 0 ? tail_of(log_fd, 3000) : std::string();
  if (log_fd >= 0) ::close(log_fd);
  if (read.stuck != watched_read::no) {
    failed.message = stuck_message(s, image, plan, read);
    if (!log.empty()) failed.message += "\n  its last log lines:\n" + log;
    return failed;
  }
  auto report = epoch_report::decode(read.bytes);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !report) {
    failed.message = WIFSIGNALED(status)
                         ? fmt::format("the simulated process died of signal {} ({})", WTERMSIG(status),
                                       strsignal(WTERMSIG(status)))
                         : fmt::format("the simulated process ended with status {} and no report",
                                       WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    if (!log.empty()) failed.message += "\n  its last log lines:\n" + log;
    return failed;
  }
  if (report->st == epoch_report::failed && !log.empty()) report->message += "\n  its last log lines:\n" + log;
  return std::move(*report);
}

std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
  std::uint64_t z = a * 0x9e3779b97f4a7c15ull + b + 0x632be59bd9b4e019ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Why `got` is not the reference output, if it is not.
std::optional<std::string> output_difference(const std::vector<std::string>& reference,
                                             const std::vector<std::string>& got) {
  if (got == reference) return std::nullopt;
  std::vector<std::string> diff;
  std::set_difference(reference.begin(), reference.end(), got.begin(), got.end(), std::back_inserter(diff));
  const std::size_t missing = diff.size();
  const std::string first_missing = diff.empty() ? "" : diff.front().substr(0, 80);
  diff.clear();
  std::set_difference(got.begin(), got.end(), reference.begin(), reference.end(), std::back_inserter(diff));
  return fmt::format(
      "the published output differs from the fault-free run: {} line(s) missing{}, {} extra{} ({} vs {} lines)",
      missing, first_missing.empty() ? "" : " (first: '" + first_missing + "')", diff.size(),
      diff.empty() ? "" : " (first: '" + diff.front().substr(0, 80) + "')", got.size(), reference.size());
}

// One run of a seed: the reference process, then the seed's processes (crash after crash) and
// every restore point they took.
class seed_run {
 public:
  seed_run(const scenario& s, const seed_options& options) : s_(s), options_(options) { out_.s = s; }

  seed_result run() {
    const sim::disk_image start = initial_image(s_);
    epoch_plan ref_plan = budgeted();
    ref_plan.world_seed = mix(s_.seed, 0xfeed);
    ref_plan.reference = true;
    ref_plan.trace = false;
    reference_ = fork_epoch(s_, start, ref_plan);
    note_process(reference_);
    if (reference_.st != epoch_report::finished) {
      return failed("the fault-free reference run failed: " + reference_.message);
    }
    const std::uint64_t ref_steps = std::max<std::uint64_t>(reference_.steps, 10);
    const auto faults_for =
        std::chrono::nanoseconds(reference_.nanoseconds * plan_random_.between(50, 200) / 100 + 1'000'000);
    // The stop goes to the first process that reaches its step (one that crashes before does not).
    const std::uint64_t stop_step = std::max<std::uint64_t>(1, ref_steps * s_.stop_at_permille / 1000);
    sim::disk_image image = start;
    std::uint64_t newest_completed = 0;
    for (unsigned epoch = 0;; ++epoch) {
      epoch_plan plan = process_plan(epoch, ref_steps, faults_for);
      plan.must_resume_from = newest_completed;
      if (out_.stops == 0) {
        plan.stop = s_.stop;
        plan.stop_at_step = stop_step;
        plan.second_stop_steps = s_.second_stop_steps;
      }
      if (options_.trace) trace_header(epoch, plan);
      epoch_report r = fork_epoch(s_, image, plan);
      add(r);
      if (r.st == epoch_report::failed) return failed(fmt::format("process {} of the seed: {}", epoch + 1, r.message));
      if (r.st == epoch_report::crashed) {
        ++out_.crashes;
        if (!run_restore_points(r)) return out_;
        image = std::move(r.image);
        newest_completed = std::max(newest_completed, r.newest_completed);
        continue;
      }
      out_.output_lines = r.output.size();
      if (auto differs = output_difference(reference_.output, r.output)) return failed(std::move(*differs));
      run_restore_points(r);
      return out_;
    }
  }

 private:
  seed_result failed(std::string why) {
    out_.failed = true;
    out_.failure = std::move(why);
    return out_;
  }

  epoch_plan budgeted() const {
    epoch_plan plan;
    plan.step_limit = options_.step_limit;
    plan.idle_step_limit = options_.idle_step_limit;
    plan.spin_limit = options_.spin_limit;
    return plan;
  }

  void note_process(const epoch_report& r) {
    out_.max_process_steps = std::max(out_.max_process_steps, r.steps);
    out_.longest_idle_run = std::max(out_.longest_idle_run, r.longest_idle);
  }

  void add(const epoch_report& r) {
    note_process(r);
    out_.steps += r.steps;
    out_.simulated_seconds += static_cast<double>(r.nanoseconds) / 1e9;
    out_.trace_hash = mix(out_.trace_hash, r.hash);
    out_.attempts += static_cast<unsigned>(r.attempts);
    out_.faults += r.faults;
    out_.stops += static_cast<unsigned>(r.stops_sent);
    out_.stopped += static_cast<unsigned>(r.stopped);
    out_.drains += static_cast<unsigned>(r.drains);
  }

  epoch_plan process_plan(unsigned epoch, std::uint64_t ref_steps, std::chrono::nanoseconds faults_for) {
    epoch_plan plan = budgeted();
    plan.world_seed = mix(s_.seed, epoch);
    plan.faults_for = faults_for;
    plan.crash_at_step = epoch < s_.crashes ? plan_random_.between(1, ref_steps * 3 / 2) : 0;
    const std::uint64_t newest = std::max<std::uint64_t>(reference_.newest_completed, 1);
    if (plan.crash_at_step != 0 && crash_random_.coin()) {
      // Half the crashes come just after a checkpoint completed (one the reference run also reached).
      plan.crash_after_checkpoint = crash_random_.between(1, newest);
      plan.crash_delay_steps = crash_random_.below(4) == 0 ? crash_random_.between(4, 200) : crash_random_.below(4);
      plan.crash_at_step = 0;
    }
    plan.restore_after_checkpoint = restore_plan_.between(1, newest);
    plan.trace = options_.trace;
    return plan;
  }

  void trace_header(unsigned epoch, const epoch_plan& plan) const {
    const std::string stop = plan.stop == stop_kind::none
                                 ? std::string()
                                 : fmt::format(", {} at step {}", to_string(plan.stop), plan.stop_at_step);
    if (plan.crash_after_checkpoint != 0) {
      fmt::print(stderr, "--- process {} (crash {} step(s) after its checkpoint #{} completes{}) ---\n", epoch + 1,
                 plan.crash_delay_steps + 1, plan.crash_after_checkpoint, stop);
    } else {
      fmt::print(stderr, "--- process {} (crash at step {}{}) ---\n", epoch + 1, plan.crash_at_step, stop);
    }
  }

  // Each restore point of a process starts a process of its own, without faults or crash, which must
  // resume from that checkpoint (or a newer one) and publish the reference output.
  bool run_restore_points(const epoch_report& from) {
    for (const epoch_report::restore_point& point : from.restore_points) {
      epoch_plan plan = budgeted();
      plan.world_seed = mix(s_.seed, 0x5e570000 + out_.restores);
      plan.must_resume_from = point.checkpoint;
      plan.trace = options_.trace;
      if (options_.trace) {
        fmt::print(stderr, "--- restore point: a process from the crash image as checkpoint {} completed ---\n",
                   point.checkpoint);
      }
      ++out_.restores;
      const epoch_report r = fork_epoch(s_, point.image, plan);
      add(r);
      std::optional<std::string> why =
          r.st != epoch_report::finished ? std::optional(r.message) : output_difference(reference_.output, r.output);
      if (why) {
        failed(fmt::format("restore point (a crash just after checkpoint {} completed): {}", point.checkpoint, *why));
        return false;
      }
    }
    return true;
  }

  const scenario& s_;
  const seed_options& options_;
  seed_result out_;
  epoch_report reference_;
  sim::rng plan_random_{mix(s_.seed, 0xc4a54)};
  sim::rng crash_random_{mix(s_.seed, 0xc4a55)};  // where crashes go; its own stream, so plan_random is as before
  sim::rng restore_plan_{mix(s_.seed, 0xc4a56)};  // which checkpoint of each process is a restore point
};

}  // namespace

seed_result run_seed(const scenario& s, const seed_options& options) {
  seed_result first = seed_run(s, options).run();
  if (options.twice && !first.failed) {
    seed_options again = options;
    again.trace = false;
    const seed_result second = seed_run(s, again).run();
    if (second.trace_hash != first.trace_hash || second.steps != first.steps) {
      first.failed = true;
      first.failure = fmt::format("not deterministic: the same seed ran twice gave traces {:016x} ({} steps) and "
                                  "{:016x} ({} steps)", first.trace_hash, first.steps, second.trace_hash, second.steps);
    }
  }
  return first;
}

}  // namespace sluice::apps::simulate
