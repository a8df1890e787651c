// One seed of `sluice simulate` (see sim_seed.hpp): every simulated process is a child process, so a
// crash drops every coroutine frame and flushes nothing; what survives is the disk's crash image,
// which the child sends to the parent through a pipe before it ends.

#include "sim_seed.hpp"

#include <sluice/dataflow/job_runner.hpp>
#include <sluice/runtime/log.hpp>
#include <sluice/snapshot/coordinator.hpp>

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <optional>

namespace sluice::apps::simulate {

namespace {

using namespace std::chrono_literals;

// --- what a simulated process reports ----------------------------------------------------------

struct epoch_report {
  enum status : std::uint64_t { finished = 0, crashed = 1, failed = 2 } st = failed;
  std::string message;
  sim::disk_image image;  // crashed: the durable image
  std::vector<std::string> output;
  std::uint64_t steps = 0;
  std::uint64_t nanoseconds = 0;
  std::uint64_t hash = 0;
  std::uint64_t attempts = 0;
  std::uint64_t faults = 0;
  std::uint64_t newest_completed = 0;
  // Crash images taken just after a checkpoint completed, while the process went on: each must
  // restore to the reference output (epoch_plan::restore_after_checkpoint).
  struct restore_point {
    std::uint64_t checkpoint = 0;
    sim::disk_image image;
  };
  std::vector<restore_point> restore_points;

  std::string encode() const {
    std::string out;
    auto u64 = [&](std::uint64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); };
    auto str = [&](const std::string& s) {
      u64(s.size());
      out += s;
    };
    u64(st);
    str(message);
    str(image.encode());
    u64(output.size());
    for (const auto& l : output) str(l);
    for (std::uint64_t v : {steps, nanoseconds, hash, attempts, faults, newest_completed}) u64(v);
    u64(restore_points.size());
    for (const restore_point& p : restore_points) {
      u64(p.checkpoint);
      str(p.image.encode());
    }
    return out;
  }

  static std::optional<epoch_report> decode(std::string_view in) {
    epoch_report r;
    auto u64 = [&](std::uint64_t& v) {
      if (in.size() < 8) return false;
      std::memcpy(&v, in.data(), 8);
      in.remove_prefix(8);
      return true;
    };
    auto str = [&](std::string& s) {
      std::uint64_t n = 0;
      if (!u64(n) || n > in.size()) return false;
      s.assign(in.substr(0, n));
      in.remove_prefix(n);
      return true;
    };
    std::uint64_t st = 0, lines = 0;
    std::string image;
    if (!u64(st) || st > 2 || !str(r.message) || !str(image) || !u64(lines)) return std::nullopt;
    r.st = static_cast<status>(st);
    auto decoded = sim::disk_image::decode(image);
    if (!decoded) return std::nullopt;
    r.image = std::move(*decoded);
    for (std::uint64_t i = 0; i < lines; ++i) {
      std::string l;
      if (!str(l)) return std::nullopt;
      r.output.push_back(std::move(l));
    }
    for (std::uint64_t* v : {&r.steps, &r.nanoseconds, &r.hash, &r.attempts, &r.faults, &r.newest_completed}) {
      if (!u64(*v)) return std::nullopt;
    }
    std::uint64_t points = 0;
    if (!u64(points)) return std::nullopt;
    for (std::uint64_t i = 0; i < points; ++i) {
      restore_point p;
      if (!u64(p.checkpoint) || !str(image)) return std::nullopt;
      auto img = sim::disk_image::decode(image);
      if (!img) return std::nullopt;
      p.image = std::move(*img);
      r.restore_points.push_back(std::move(p));
    }
    return r;
  }
};

struct epoch_plan {
  std::uint64_t world_seed = 0;
  bool reference = false;
  std::uint64_t crash_at_step = 0;
  // Or (when not 0) crash this many steps after the process saw its crash_after_checkpoint-th
  // checkpoint complete: where a completed checkpoint that is not yet durable, or does not
  // restore, shows.
  std::uint64_t crash_after_checkpoint = 0;
  std::uint64_t crash_delay_steps = 0;
  // When not 0: just after the process saw its restore_after_checkpoint-th checkpoint complete, take
  // a crash image (with a random source of its own) and go on; the parent then starts a process
  // from it. What a crash there would have left, without ending this process.
  std::uint64_t restore_after_checkpoint = 0;
  std::chrono::nanoseconds faults_for{0};
  std::uint64_t must_resume_from = 0;  // the newest checkpoint that completed before the last crash
  bool trace = false;
};

void write_all(int fd, const std::string& bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

// --- inside the simulated process --------------------------------------------------------------

void fail(epoch_report& r, std::string why) {
  if (r.st != epoch_report::failed) {
    r.st = epoch_report::failed;
    r.message = std::move(why);
  }
}

void close_epoch(epoch_report& r, const sim::world& w) {
  r.steps = w.steps();
  r.nanoseconds = static_cast<std::uint64_t>(w.elapsed().count());
  r.hash = w.trace_hash();
  r.faults = w.faults_injected();
}

// Whether the planted entry the job did not make (foreign_file) is gone or changed.
std::optional<std::string> foreign_entry_touched(sim::world& w) {
  const std::string path(foreign_file);
  std::string text(foreign_text.size() + 1, '\0');
  const int fd = w.open(path.c_str(), O_RDONLY, 0);
  if (fd < 0) {
    return fmt::format("'{}', in a chk-1 the job did not make, is gone: {} (retention removed what sluice did not "
                       "write)",
                       path, std::strerror(-fd));
  }
  const ssize_t n = w.pread(fd, text.data(), text.size(), 0);
  (void)w.close(fd);
  if (n != static_cast<ssize_t>(foreign_text.size()) || text.compare(0, foreign_text.size(), foreign_text) != 0) {
    return fmt::format("'{}', in a chk-1 the job did not make, was changed", path);
  }
  return std::nullopt;
}

[[noreturn]] void run_epoch(const scenario& s, const sim::disk_image& image, const epoch_plan& plan, int report_fd) {
  epoch_report report;
  report.st = epoch_report::finished;
  sim::world_options wo;
  wo.seed = plan.world_seed;
  if (!plan.reference) wo.faults = s.rates;
  wo.faults_for = plan.faults_for;
  wo.liveness_limit = 120s;
  wo.crash_at_step = plan.crash_at_step;
  wo.batch_limit = s.batch_limit;
  wo.ring_entries = s.ring_entries;
  wo.working_directory = std::string(sim_root);
  wo.trace = plan.trace ? stderr : nullptr;
  wo.on_crash = [&report, report_fd](sim::world& w) {
    report.st = epoch_report::crashed;
    report.image = w.storage().crash(w.random());
    close_epoch(report, w);
    write_all(report_fd, report.encode());
    ::_exit(0);  // as after kill -9: no destructor, no flush, no frame resumed
  };
  wo.on_hang = [&report, report_fd](sim::world& w, const std::string& why) {
    fail(report, fmt::format("hang (attempt {}): {}", report.attempts, why));
    close_epoch(report, w);
    write_all(report_fd, report.encode());
    ::_exit(0);
  };
  sim::world w(std::move(wo), image);
  bool resume_checked = plan.must_resume_from == 0;
  std::uint64_t completed_here = 0;  // checkpoints this process saw complete, over its attempts
  sim::rng restore_random(plan.world_seed ^ 0x7e5703e5ull);  // the restore point's crash image
  std::uint64_t aborted_since = 0;  // checkpoints aborted since the last one completed
  bool took_after_abort = false;
  for (report.attempts = 1;; ++report.attempts) {
    const bool after_faults = !w.faults_active();
    dataflow::job_builder job(std::string("sim-") + to_string(s.job));
    build_job(job, s);
    dataflow::job_settings settings = settings_for(s, &w);
    settings.on_checkpoint = [&report, &completed_here, &w, &plan, &restore_random,
                              &aborted_since, &took_after_abort](const snapshot::checkpoint_stats& st) {
      if (!st.outcome.completed()) {
        ++aborted_since;
        return;
      }
      report.newest_completed = std::max<std::uint64_t>(report.newest_completed, st.id);
      ++completed_here;
      if (completed_here == plan.crash_after_checkpoint) w.crash_at_step(w.steps() + 1 + plan.crash_delay_steps);
      // A restore point at the drawn checkpoint, and at the first one to complete after an abort
      // (some barriers of the aborted one may still have been on the way: where lifecycle bugs show).
      const bool after_abort = aborted_since != 0 && !took_after_abort;
      if (completed_here == plan.restore_after_checkpoint || (after_abort && plan.restore_after_checkpoint != 0)) {
        if (after_abort) took_after_abort = true;
        report.restore_points.push_back({st.id, w.storage().crash(restore_random)});
      }
      aborted_since = 0;
    };
    dataflow::job_result r;
    try {
      r = dataflow::run_job(job, std::move(settings));
    } catch (const sim::hang& h) {
      fail(report, fmt::format("hang (attempt {}): {}", report.attempts, h.what()));
      break;
    } catch (const std::exception& e) {
      fail(report, fmt::format("run_job threw (attempt {}): {}", report.attempts, e.what()));
      break;
    }
    if (!resume_checked && (r.resumed_from || r.exit_code == 0)) {
      resume_checked = true;
      if (!r.resumed_from || *r.resumed_from < plan.must_resume_from) {
        fail(report, fmt::format("checkpoint {} had completed before the crash, but the restart resumed from {}",
                                 plan.must_resume_from,
                                 r.resumed_from ? std::to_string(*r.resumed_from) : std::string("nothing")));
        break;
      }
    }
    if (r.buffer_violations != 0) {
      fail(report, fmt::format("the buffer pools counted {} violation(s) (a buffer released twice, or recycled into a "
                               "pool that did not lend it) (attempt {}, exit {}: {})", r.buffer_violations,
                               report.attempts, r.exit_code, r.message));
      break;
    }
    if (!r.credit_violation.empty()) {
      fail(report, fmt::format("the credit identity did not hold at the end (attempt {}, exit {}): {}",
                               report.attempts, r.exit_code, r.credit_violation));
      break;
    }
    if (r.leaked_segments != 0) {
      fail(report, fmt::format("{} network-memory segment(s) not back in their pools after the job (attempt {}, "
                               "exit {}: {})", r.leaked_segments, report.attempts, r.exit_code, r.message));
      break;
    }
    if (w.open_descriptors() != 0 || w.pending_operations() != 0) {
      fail(report, fmt::format("after the job (attempt {}, exit {}): {} descriptor(s) open and {} operation(s) "
                               "pending", report.attempts, r.exit_code, w.open_descriptors(), w.pending_operations()));
      break;
    }
    if (std::optional<std::string> touched = plants_foreign_entry(s) ? foreign_entry_touched(w) : std::nullopt) {
      fail(report, fmt::format("after the job (attempt {}, exit {}): {}", report.attempts, r.exit_code, *touched));
      break;
    }
    if (r.exit_code == 0) break;
    if (r.exit_code == 1 && plan.reference) {
      fail(report, r.message);  // run_once says it was the reference run
      break;
    }
    if (r.exit_code == 1 && after_faults) {
      fail(report, fmt::format("attempt {} started after the faults had stopped and failed: {}", report.attempts,
                               r.message));
      break;
    }
    if (r.exit_code != 1) {
      fail(report, fmt::format("attempt {} ended with exit {}: {}", report.attempts, r.exit_code, r.message));
      break;
    }
    if (report.attempts >= 200) {
      fail(report, "200 attempts failed: " + r.message);
      break;
    }
  }
  if (report.st == epoch_report::finished) report.output = published_lines(w.storage().visible());
  close_epoch(report, w);
  write_all(report_fd, report.encode());
  ::_exit(0);
}

// --- in the parent -------------------------------------------------------------------------------

std::string tail_of(int fd, std::size_t max) {
  const off_t size = ::lseek(fd, 0, SEEK_END);
  if (size <= 0) return {};
  const std::size_t n = std::min<std::size_t>(static_cast<std::size_t>(size), max);
  std::string out(n, '\0');
  if (::pread(fd, out.data(), n, size - static_cast<off_t>(n)) != static_cast<ssize_t>(n)) return {};
  return out;
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
    run_epoch(s, image, plan, fds[1]);
  }
  ::close(fds[1]);
  std::string bytes;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    bytes.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  std::string log = log_fd >= 0 ? tail_of(log_fd, 3000) : std::string();
  if (log_fd >= 0) ::close(log_fd);
  auto report = epoch_report::decode(bytes);
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

seed_result run_once(const scenario& s, const seed_options& options) {
  seed_result out;
  out.s = s;
  auto add = [&out](const epoch_report& r) {
    out.steps += r.steps;
    out.simulated_seconds += static_cast<double>(r.nanoseconds) / 1e9;
    out.trace_hash = mix(out.trace_hash, r.hash);
    out.attempts += static_cast<unsigned>(r.attempts);
    out.faults += r.faults;
  };
  const sim::disk_image start = initial_image(s);
  epoch_plan ref_plan;
  ref_plan.world_seed = mix(s.seed, 0xfeed);
  ref_plan.reference = true;
  ref_plan.trace = false;
  const epoch_report reference = fork_epoch(s, start, ref_plan);
  if (reference.st != epoch_report::finished) {
    out.failed = true;
    out.failure = "the fault-free reference run failed: " + reference.message;
    return out;
  }
  sim::rng plan_random(mix(s.seed, 0xc4a54));
  sim::rng crash_random(mix(s.seed, 0xc4a55));  // where crashes go; its own stream, so plan_random is as before
  const std::uint64_t ref_steps = std::max<std::uint64_t>(reference.steps, 10);
  const auto faults_for =
      std::chrono::nanoseconds(reference.nanoseconds * plan_random.between(50, 200) / 100 + 1'000'000);
  sim::disk_image image = start;
  std::uint64_t newest_completed = 0;
  sim::rng restore_plan(mix(s.seed, 0xc4a56));  // which checkpoint of each process is a restore point
  // Each restore point of a process starts a process of its own, without faults or crash, which must
  // resume from that checkpoint (or a newer one) and publish the reference output.
  auto run_restore_points = [&](const epoch_report& from) {
    for (std::size_t i = 0; i < from.restore_points.size(); ++i) {
      const auto& point = from.restore_points[i];
      epoch_plan plan;
      plan.world_seed = mix(s.seed, 0x5e570000 + out.restores);
      plan.must_resume_from = point.checkpoint;
      plan.trace = options.trace;
      if (options.trace) {
        fmt::print(stderr, "--- restore point: a process from the crash image as checkpoint {} completed ---\n",
                   point.checkpoint);
      }
      ++out.restores;
      const epoch_report r = fork_epoch(s, point.image, plan);
      add(r);
      std::optional<std::string> why;
      if (r.st != epoch_report::finished) {
        why = r.message;
      } else {
        why = output_difference(reference.output, r.output);
      }
      if (why) {
        out.failed = true;
        out.failure = fmt::format("restore point (a crash just after checkpoint {} completed): {}", point.checkpoint,
                                  *why);
        return false;
      }
    }
    return true;
  };
  for (unsigned epoch = 0;; ++epoch) {
    epoch_plan plan;
    plan.world_seed = mix(s.seed, epoch);
    plan.faults_for = faults_for;
    plan.crash_at_step = epoch < s.crashes ? plan_random.between(1, ref_steps * 3 / 2) : 0;
    if (plan.crash_at_step != 0 && crash_random.coin()) {
      // Half the crashes come just after a checkpoint completed (one the reference run also reached).
      plan.crash_after_checkpoint = crash_random.between(1, std::max<std::uint64_t>(reference.newest_completed, 1));
      plan.crash_delay_steps = crash_random.below(4) == 0 ? crash_random.between(4, 200) : crash_random.below(4);
      plan.crash_at_step = 0;
    }
    plan.must_resume_from = newest_completed;
    plan.restore_after_checkpoint = restore_plan.between(1, std::max<std::uint64_t>(reference.newest_completed, 1));
    plan.trace = options.trace;
    if (options.trace) {
      if (plan.crash_after_checkpoint != 0) {
        fmt::print(stderr, "--- process {} (crash {} step(s) after its checkpoint #{} completes) ---\n", epoch + 1,
                   plan.crash_delay_steps + 1, plan.crash_after_checkpoint);
      } else {
        fmt::print(stderr, "--- process {} (crash at step {}) ---\n", epoch + 1, plan.crash_at_step);
      }
    }
    epoch_report r = fork_epoch(s, image, plan);
    add(r);
    if (r.st == epoch_report::failed) {
      out.failed = true;
      out.failure = fmt::format("process {} of the seed: {}", epoch + 1, r.message);
      return out;
    }
    if (r.st == epoch_report::crashed) {
      ++out.crashes;
      if (!run_restore_points(r)) return out;
      image = std::move(r.image);
      newest_completed = std::max(newest_completed, r.newest_completed);
      continue;
    }
    out.output_lines = r.output.size();
    if (auto differs = output_difference(reference.output, r.output)) {
      out.failed = true;
      out.failure = std::move(*differs);
      return out;
    }
    if (!run_restore_points(r)) return out;
    return out;
  }
}

}  // namespace

seed_result run_seed(const scenario& s, const seed_options& options) {
  seed_result first = run_once(s, options);
  if (options.twice && !first.failed) {
    seed_options again = options;
    again.trace = false;
    const seed_result second = run_once(s, again);
    if (second.trace_hash != first.trace_hash || second.steps != first.steps) {
      first.failed = true;
      first.failure = fmt::format("not deterministic: the same seed ran twice gave traces {:016x} ({} steps) and "
                                  "{:016x} ({} steps)", first.trace_hash, first.steps, second.trace_hash, second.steps);
    }
  }
  return first;
}

}  // namespace sluice::apps::simulate
