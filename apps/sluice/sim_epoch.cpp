// One simulated process of a seed (see sim_epoch.hpp). It runs the job, attempt after attempt, on
// one world: an attempt that fails (exit 1) while the faults last is restarted, as a supervisor
// would; one that a stop ended (a drain's exit 0 with stopped_at, a stop now's 130) is restarted
// too, and must resume from the newest checkpoint that completed; the process ends when an attempt
// finishes the job (or at its crash, or at a failed oracle).

#include "sim_epoch.hpp"

#include <sluice/dataflow/job_runner.hpp>
#include <sluice/snapshot/coordinator.hpp>

#include <fmt/format.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <stop_token>

namespace sluice::apps::simulate {

using namespace std::chrono_literals;

// --- the report's bytes ----------------------------------------------------------------------------

std::string epoch_report::encode() const {
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
  for (std::uint64_t v :
       {steps, nanoseconds, hash, attempts, faults, newest_completed, longest_idle, stops_sent, stopped, drains}) {
    u64(v);
  }
  u64(restore_points.size());
  for (const restore_point& p : restore_points) {
    u64(p.checkpoint);
    str(p.image.encode());
  }
  return out;
}

std::optional<epoch_report> epoch_report::decode(std::string_view in) {
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
  for (std::uint64_t* v : {&r.steps, &r.nanoseconds, &r.hash, &r.attempts, &r.faults, &r.newest_completed,
                           &r.longest_idle, &r.stops_sent, &r.stopped, &r.drains}) {
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

namespace {

void write_all(int fd, const std::string& bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

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
  r.longest_idle = w.longest_idle_run();
}

[[noreturn]] void end_epoch(epoch_report& r, const sim::world& w, int report_fd) {
  close_epoch(r, w);
  write_all(report_fd, r.encode());
  ::_exit(0);  // as after kill -9: no destructor, no flush, no frame resumed
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

// The alignment bound (aligned_timeout): no task of a fault-free run aligns a completed checkpoint
// for longer than the alignment timeout plus alignment_slack. Past its timeout a checkpoint
// switches to unaligned, and a barrier queued behind data in a gate overtakes it (barrier
// announcements), so what remains is the unaligned path: the record in hand, and barriers
// travelling as priority events. Over 4,800 fault-free seeds (1,200 per job, half of them with a
// slow sink) it took at most 1.6 ms; with the overtaking planted away (queued-barrier-waits) a
// barrier waits until the task has processed the data ahead of it, and alignment grows with the
// data in flight: up to 1.75 s in join (300 times the timeout in issue 33's real run).
constexpr std::chrono::nanoseconds alignment_slack = std::chrono::milliseconds(5);

std::optional<std::string> alignment_overrun(const scenario& s, const snapshot::checkpoint_stats& st) {
  if (s.mode != snapshot::checkpoint_mode::aligned_timeout || !st.outcome.completed()) return std::nullopt;
  const std::chrono::nanoseconds bound = s.alignment_timeout + alignment_slack;
  for (const snapshot::task_checkpoint_breakdown& b : st.task_breakdown) {
    if (b.alignment_duration <= bound) continue;
    return fmt::format("checkpoint {}: task {} aligned for {:.3f} ms, above the alignment timeout of {} ms plus {:.3f} "
                       "ms for the unaligned path (a fault-free run, aligned-timeout)",
                       st.id, b.task, b.alignment_duration.count() / 1e6, s.alignment_timeout.count(),
                       alignment_slack.count() / 1e6);
  }
  return std::nullopt;
}

// The stop of one process: sent at a step (the world's alarm) to the attempt running then, through
// the same job_settings::drain and ::stop tokens a host's SIGTERM handler would use.
struct stopper {
  const epoch_plan& plan;
  epoch_report& report;
  std::stop_source drain;  // this attempt's
  std::stop_source now;
  unsigned sent = 0;               // requests sent so far (drain_now: 2)
  std::uint64_t sent_attempt = 0;  // the attempt the last one went to
  std::uint64_t sent_at_step = 0;
  double sent_at_ms = 0;
  bool drain_sent = false;
  bool now_sent = false;
  std::uint64_t aborts_since = 0;  // checkpoints aborted since the first request

  // The request due now, to the attempt that runs now.
  void send(sim::world& w, std::uint64_t attempt) {
    const bool first = sent == 0;
    const bool as_drain = plan.stop == stop_kind::drain || (plan.stop == stop_kind::drain_now && first);
    report.stops_sent = ++sent;
    sent_attempt = attempt;
    if (first) {
      sent_at_step = w.steps();
      sent_at_ms = std::chrono::duration<double, std::milli>(w.elapsed()).count();
    }
    w.note(as_drain ? "stop drain" : "stop now", static_cast<std::int64_t>(attempt), 0);
    if (as_drain) {
      drain_sent = true;
      drain.request_stop();
    } else {
      now_sent = true;
      now.request_stop();
    }
    if (plan.stop == stop_kind::drain_now && first) w.alarm_at_step(w.steps() + plan.second_stop_steps);
  }
  // A new attempt gets tokens of its own (a stop went to the attempt it was sent to).
  void next_attempt() {
    drain = std::stop_source();
    now = std::stop_source();
  }
  std::string what() const {
    return fmt::format("{} sent at step {} ({:.3f} ms)", now_sent && drain_sent ? "a drain and then a stop now"
                                                         : drain_sent           ? "a drain"
                                                                                : "a stop now",
                       sent_at_step, sent_at_ms);
  }
};

// What the driver checks after each attempt of one process, and what it carries to the next.
struct process_state {
  const epoch_plan& plan;
  epoch_report& report;
  stopper& stop;
  sim::world& w;
  bool foreign_entry;  // the seed planted a chk-1 the job did not make (plants_foreign_entry)
  // The checkpoint the next attempt that resumes must resume from (or newer), and why.
  std::uint64_t resume_floor = 0;
  std::string resume_why;

  enum class next { again, done };

  // The resume oracle: after a crash, or after a stop, the first attempt that resumes (or finishes)
  // must resume from at least the newest checkpoint that had completed.
  bool check_resume(const dataflow::job_result& r) {
    if (resume_floor == 0 || (!r.resumed_from && r.exit_code != 0)) return true;
    if (r.resumed_from && *r.resumed_from >= resume_floor) {
      resume_floor = 0;
      return true;
    }
    fail(report, fmt::format("checkpoint {} had completed {}, but the restart resumed from {}", resume_floor,
                             resume_why, r.resumed_from ? std::to_string(*r.resumed_from) : std::string("nothing")));
    return false;
  }

  bool check_resources(const dataflow::job_result& r) {
    if (r.buffer_violations != 0) {
      fail(report, fmt::format("the buffer pools counted {} violation(s) (a buffer released twice, or recycled into a "
                               "pool that did not lend it) (attempt {}, exit {}: {})", r.buffer_violations,
                               report.attempts, r.exit_code, r.message));
      return false;
    }
    if (!r.credit_violation.empty()) {
      fail(report, fmt::format("the credit identity did not hold at the end (attempt {}, exit {}): {}",
                               report.attempts, r.exit_code, r.credit_violation));
      return false;
    }
    if (r.leaked_segments != 0) {
      fail(report, fmt::format("{} network-memory segment(s) not back in their pools after the job (attempt {}, "
                               "exit {}: {})", r.leaked_segments, report.attempts, r.exit_code, r.message));
      return false;
    }
    if (w.open_descriptors() != 0 || w.pending_operations() != 0) {
      fail(report, fmt::format("after the job (attempt {}, exit {}): {} descriptor(s) open and {} operation(s) "
                               "pending", report.attempts, r.exit_code, w.open_descriptors(), w.pending_operations()));
      return false;
    }
    if (std::optional<std::string> touched = foreign_entry ? foreign_entry_touched(w) : std::nullopt) {
      fail(report, fmt::format("after the job (attempt {}, exit {}): {}", report.attempts, r.exit_code, *touched));
      return false;
    }
    return true;
  }

  // The stop oracle, for the attempt a stop was sent to. A drain ends with exit 0 (with
  // stopped_at, or without once the job had finished its input first), or with 130 when its
  // checkpoint aborted 5 times; a stop now ends with 130 (or 0 with stopped_at: the drain before it
  // ended first). Exit 1 is a failure the faults may cause (checked as any other).
  std::optional<next> check_stopped(const dataflow::job_result& r) {
    if (stop.sent == 0 || stop.sent_attempt != report.attempts || r.exit_code == 1) return std::nullopt;
    if (r.exit_code == 0 && r.stopped_at) {
      ++report.drains;
      if (!stop.drain_sent) fail(report, "a stop now ended with a drain's checkpoint (" + stop.what() + ")");
      return after_stop(*r.stopped_at, "when the drain stopped the job");
    }
    if (r.exit_code == 0) return std::nullopt;  // the job had finished its input: it is done
    if (r.exit_code == 130 && (stop.now_sent || stop.aborts_since > 0)) {
      return after_stop(report.newest_completed, "when the stop ended the job");
    }
    fail(report, fmt::format("{}: attempt {} ended with exit {}{}: {}", stop.what(), report.attempts, r.exit_code,
                             r.exit_code == 130 ? " (a drain that stopped at once, though no checkpoint aborted)" : "",
                             r.message));
    return next::done;
  }

  next after_stop(std::uint64_t checkpoint, const char* when) {
    if (report.st == epoch_report::failed) return next::done;
    ++report.stopped;
    resume_floor = std::max(resume_floor, checkpoint);
    resume_why = when;
    return next::again;  // restarted, as a supervisor restarts a stopped service
  }

  // Whether another attempt follows this one's result.
  next judge(const dataflow::job_result& r, bool after_faults) {
    if (!check_resume(r) || !check_resources(r)) return next::done;
    if (const std::optional<next> n = check_stopped(r)) return *n;
    if (r.exit_code == 0) return next::done;
    if (r.exit_code == 1 && plan.reference) {
      fail(report, r.message);  // run_once says it was the reference run
      return next::done;
    }
    if (r.exit_code == 1 && after_faults) {
      fail(report, fmt::format("attempt {} started after the faults had stopped and failed: {}", report.attempts,
                               r.message));
      return next::done;
    }
    if (r.exit_code != 1) {
      fail(report, fmt::format("attempt {} ended with exit {}: {}", report.attempts, r.exit_code, r.message));
      return next::done;
    }
    if (report.attempts >= 200) {
      fail(report, "200 attempts failed: " + r.message);
      return next::done;
    }
    return next::again;
  }
};

sim::world_options world_options_for(const scenario& s, const epoch_plan& plan, std::atomic<std::uint64_t>* steps) {
  sim::world_options wo;
  wo.seed = plan.world_seed;
  if (!plan.reference) wo.faults = s.rates;
  wo.faults_for = plan.faults_for;
  wo.liveness_limit = 120s;
  wo.crash_at_step = plan.crash_at_step;
  wo.step_limit = plan.step_limit;
  wo.idle_step_limit = plan.idle_step_limit;
  wo.describe_at_step = plan.describe_at_step;
  wo.published_steps = steps;
  wo.alarm_at_step = plan.stop != stop_kind::none ? plan.stop_at_step : 0;
  wo.batch_limit = s.batch_limit;
  wo.ring_entries = s.ring_entries;
  wo.working_directory = std::string(sim_root);
  wo.trace = plan.trace ? stderr : nullptr;
  return wo;
}

}  // namespace

[[noreturn]] void run_epoch(const scenario& s, const sim::disk_image& image, const epoch_plan& plan, int report_fd,
                            std::atomic<std::uint64_t>* steps) {
  epoch_report report;
  report.st = epoch_report::finished;
  stopper stop{plan, report};
  sim::world_options wo = world_options_for(s, plan, steps);
  wo.on_crash = [&report, report_fd](sim::world& w) {
    report.st = epoch_report::crashed;
    report.image = w.storage().crash(w.random());
    end_epoch(report, w, report_fd);
  };
  wo.on_hang = [&report, &stop, report_fd](sim::world& w, const std::string& why) {
    const bool stopping = stop.sent != 0 && stop.sent_attempt == report.attempts;
    fail(report, fmt::format("hang (attempt {}{}): {}", report.attempts,
                             stopping ? ", after " + stop.what() + ": the stop never ended" : std::string(), why));
    end_epoch(report, w, report_fd);
  };
  wo.on_alarm = [&stop, &report](sim::world& w) { stop.send(w, report.attempts); };
  sim::world w(std::move(wo), image);
  process_state state{plan, report, stop, w, plants_foreign_entry(s), plan.must_resume_from, "before the last crash"};
  std::uint64_t completed_here = 0;  // checkpoints this process saw complete, over its attempts
  sim::rng restore_random(plan.world_seed ^ 0x7e5703e5ull);  // the restore point's crash image
  std::uint64_t aborted_since = 0;  // checkpoints aborted since the last one completed
  bool took_after_abort = false;
  for (report.attempts = 1;; ++report.attempts) {
    const bool after_faults = !w.faults_active();
    dataflow::job_builder job(std::string("sim-") + to_string(s.job));
    build_job(job, s);
    dataflow::job_settings settings = settings_for(s, &w);
    stop.next_attempt();
    settings.drain = stop.drain.get_token();
    settings.stop = stop.now.get_token();
    settings.on_checkpoint = [&report, &completed_here, &w, &plan, &restore_random, &aborted_since,
                              &took_after_abort, &stop, &s](const snapshot::checkpoint_stats& st) {
      if (plan.reference) {
        if (std::optional<std::string> overrun = alignment_overrun(s, st)) fail(report, std::move(*overrun));
      }
      if (!st.outcome.completed()) {
        ++aborted_since;
        if (stop.sent != 0) ++stop.aborts_since;
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
    if (state.judge(r, after_faults) == process_state::next::done) break;
  }
  if (report.st == epoch_report::finished) report.output = published_lines(w.storage().visible());
  end_epoch(report, w, report_fd);
}

}  // namespace sluice::apps::simulate
