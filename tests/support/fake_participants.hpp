#pragma once
// Fake stream tasks for coordinator tests. A fake_job holds fake_tasks on chosen executors; a
// source's trigger_checkpoint(N) "sends barrier N" to every task of the job (a post to its
// executor), and each task then answers as its policy says: write a real state file for N (the
// sample file of checkpoint_files.hpp, as the channel-state writer would) and acknowledge, decline,
// or stay silent, at once or after a (virtual) delay, optionally reporting it written first. Every call a task receives is recorded, on
// its own executor; read the records after remove_all() (same executor) or after the engine stopped.
//
//   fake_job job(c, storage);
//   auto& src = job.add(ex, true);  auto& sink = job.add(ex, false);
//   co_await job.register_all();
//   auto outcome = co_await c.trigger_now();
//   co_await c.stop();  co_await job.remove_all();

#include <sluice/runtime/executor.hpp>
#include <sluice/runtime/scope.hpp>
#include <sluice/runtime/timer.hpp>
#include <sluice/snapshot/checkpoint_participant.hpp>
#include <sluice/snapshot/coordinator.hpp>

#include <support/checkpoint_files.hpp>
#include <support/state_files.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <coroutine>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace sluice::test {

// co_await through_inbox(ex): continue on `ex` after everything already posted to it from here.
struct through_inbox {
  runtime::executor* target;
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h) const {
    runtime::executor* ex = target;
    ex->post([ex, h] { ex->schedule(h); });
  }
  void await_resume() const noexcept {}
};

enum class reply_kind { ack, decline, silent, corrupt_ack };

struct reply {
  reply_kind kind = reply_kind::ack;
  snapshot::abort_reason reason = snapshot::abort_reason::declined;  // decline
  std::string detail;                                                // decline
  std::chrono::nanoseconds delay{0};                                 // before answering
  // ack: also describe the file in the acknowledgement (size, CRC32C), off by `crc_error`.
  bool describe_file = false;
  std::uint32_t crc_error = 0;
  // Write the state file and report it written at once (as the channel-state writer does before
  // its fsync), then answer as above after `delay`: the fsync's end (ack) or failure (decline).
  bool written_first = false;
};

struct abort_note {
  snapshot::checkpoint_id id;
  snapshot::abort_reason reason;
  std::string detail;
};

class fake_job;

class fake_task final : public snapshot::checkpoint_participant {
 public:
  fake_task(fake_job* job, runtime::executor* ex, snapshot::task_id id, bool source)
      : job_(job), ex_(ex), id_(id), source_(source) {}

  snapshot::task_id id() const noexcept override { return id_; }
  bool is_source() const noexcept override { return source_; }
  runtime::executor& home() const noexcept override { return *ex_; }

  inline void trigger_checkpoint(snapshot::checkpoint_id id, snapshot::checkpoint_mode mode,
                                 const snapshot::trigger_options& options) override;
  inline void notify_checkpoint_complete(snapshot::checkpoint_id id) override;
  void notify_checkpoint_aborted(snapshot::checkpoint_id id, snapshot::abort_reason reason,
                                 std::string_view detail) override {
    check_home();
    aborted.push_back({id, reason, std::string(detail)});
  }

  // Barrier N reached this task (on its executor).
  inline void on_barrier(snapshot::checkpoint_id id);
  // Joins replies still waiting on a delay (on the task's executor).
  runtime::task<void> close() {
    replies_.request_stop();
    co_await replies_.join();
  }

  std::function<reply(snapshot::checkpoint_id)> policy = [](snapshot::checkpoint_id) { return reply{}; };

  // Records, touched on the task's executor only.
  std::vector<snapshot::checkpoint_id> triggers;
  std::vector<snapshot::checkpoint_mode> trigger_modes;
  std::vector<snapshot::checkpoint_id> barriers;
  std::vector<snapshot::checkpoint_id> completed;
  std::vector<bool> manifest_at_complete;  // chk-N/_manifest was written when complete(N) arrived
  std::vector<abort_note> aborted;
  bool wrong_thread = false;  // a call arrived off the task's executor

 private:
  void check_home() {
    if (!ex_->is_current()) wrong_thread = true;
  }
  inline void answer(snapshot::checkpoint_id id, const reply& r);
  static runtime::task<void> answer_later(fake_task* self, snapshot::checkpoint_id id, reply r) {
    const bool slept = co_await runtime::sleep_for(r.delay);
    if (slept) self->answer(id, r);
  }

  fake_job* job_;
  runtime::executor* ex_;
  snapshot::task_id id_;
  bool source_;
  runtime::scope replies_;
};

class fake_job {
 public:
  fake_job(snapshot::coordinator& c, snapshot::checkpoint_storage& storage) : coordinator_(&c), storage_(&storage) {}

  fake_task& add(runtime::executor& ex, bool source) {
    const auto id = static_cast<snapshot::task_id>(tasks_.size());
    tasks_.push_back(std::make_unique<fake_task>(this, &ex, id, source));
    return *tasks_.back();
  }
  fake_task& operator[](std::size_t i) { return *tasks_[i]; }
  std::size_t size() const noexcept { return tasks_.size(); }
  snapshot::coordinator& coordinator() { return *coordinator_; }
  snapshot::checkpoint_storage& storage() { return *storage_; }

  // Registers every task; resumes once the coordinator (whose home is `home`) has seen them all.
  runtime::task<void> register_all(runtime::executor* home) {
    for (auto& t : tasks_) coordinator_->add_participant(*t);
    co_await through_inbox{home};
  }
  // Joins each task's delayed replies and unregisters it; afterwards no call reaches any task.
  runtime::task<void> remove_all() {
    runtime::executor* caller = runtime::executor::current();
    for (auto& t : tasks_) {
      co_await through_inbox{&t->home()};
      co_await t->close();
      co_await coordinator_->remove_participant(t->id(), "the test is over");
    }
    co_await through_inbox{caller};
  }

  void send_barrier(snapshot::checkpoint_id id) {
    for (auto& t : tasks_) {
      fake_task* target = t.get();
      target->home().post([target, id] { target->on_barrier(id); });
    }
  }

 private:
  snapshot::coordinator* coordinator_;
  snapshot::checkpoint_storage* storage_;
  std::vector<std::unique_ptr<fake_task>> tasks_;
};

void fake_task::trigger_checkpoint(snapshot::checkpoint_id id, snapshot::checkpoint_mode mode,
                                   const snapshot::trigger_options&) {
  check_home();
  triggers.push_back(id);
  trigger_modes.push_back(mode);
  job_->send_barrier(id);
}

void fake_task::notify_checkpoint_complete(snapshot::checkpoint_id id) {
  check_home();
  completed.push_back(id);
  // Committed means written: a prepared checkpoint's _manifest exists from the start, empty.
  const std::string manifest = job_->storage().checkpoint_dir(id) + "/_manifest";
  std::error_code ec;
  manifest_at_complete.push_back(std::filesystem::exists(manifest, ec) && std::filesystem::file_size(manifest, ec) > 0 && !ec);
}

void fake_task::on_barrier(snapshot::checkpoint_id id) {
  check_home();
  barriers.push_back(id);
  reply r = policy(id);
  if (r.written_first) {
    write_bytes(job_->storage().state_file_path(id, id_), sample_task_file(id, id_));
    job_->coordinator().written(id_, id);
  }
  if (r.delay.count() > 0) {
    replies_.spawn(answer_later(this, id, std::move(r)));
  } else {
    answer(id, r);
  }
}

// Task t acknowledges with 4 operator-state bytes ("op-t"), 5300 channel-state bytes and an
// alignment of t+1 ms: what sample_task_file(N, t) holds.
void fake_task::answer(snapshot::checkpoint_id id, const reply& r) {
  auto& storage = job_->storage();
  switch (r.kind) {
    case reply_kind::silent:
      return;
    case reply_kind::decline:
      job_->coordinator().decline(id_, id, r.reason, r.detail);
      return;
    case reply_kind::ack:
    case reply_kind::corrupt_ack: {
      auto bytes = sample_task_file(id, id_);
      if (r.kind == reply_kind::corrupt_ack) {  // cut short, in the middle of a record
        bytes = std::vector<std::byte>(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(bytes.size() / 2));
      }
      write_bytes(storage.state_file_path(id, id_), bytes);
      snapshot::task_checkpoint_stats stats;
      stats.operator_state_bytes = 4;
      stats.channel_state_bytes = 5300;
      stats.alignment_duration = std::chrono::milliseconds(id_ + 1);
      if (r.describe_file) {
        snapshot::manifest_file file;
        file.size_bytes = bytes.size();
        file.crc32c = buffers::crc32c(bytes) ^ r.crc_error;
        file.operator_state_bytes = 4;
        file.channel_state_bytes = 5300;
        stats.state_file = file;
      }
      job_->coordinator().acknowledge(id_, id, stats);
      return;
    }
  }
}

}  // namespace sluice::test
