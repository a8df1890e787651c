// The blocking-work pool behind offload() (see offload.hpp).
//
// Protocol: submit() queues a job (FIFO) under the pool's mutex and wakes an idle thread, or starts
// one while fewer than max_threads run. A thread runs the job's work outside the lock, then posts
// the job to its home executor: after post_node it never touches the job again (the awaiting frame
// may already be gone). shutdown() lets the threads finish the queue, then joins them.
// A forked child has none of the parent's threads: the default pool forgets them in the child
// (pthread_atfork), and the child starts its own on first use.

#include <sluice/runtime/offload.hpp>

#include "helper_thread.hpp"

#include <pthread.h>
#include <signal.h>

#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace sluice::runtime {

struct blocking_pool::state {
  explicit state(unsigned max) : max_threads(max < 1 ? 1 : max) {}
  unsigned max_threads;
  std::mutex mutex;
  std::condition_variable wake;
  detail::blocking_job* head = nullptr;
  detail::blocking_job* tail = nullptr;
  std::vector<std::thread> threads;
  unsigned idle = 0;
  bool stopping = false;

  detail::blocking_job* pop() noexcept {
    detail::blocking_job* job = head;
    head = job->next_job;
    if (head == nullptr) tail = nullptr;
    job->next_job = nullptr;
    return job;
  }

  void thread_main() {
    detail::block_all_signals();
    std::unique_lock lock(mutex);
    for (;;) {
      if (head == nullptr) {
        if (stopping) return;
        ++idle;
        wake.wait(lock, [this] { return head != nullptr || stopping; });
        --idle;
        continue;
      }
      detail::blocking_job* job = pop();
      lock.unlock();
      job->work(job);
      executor* home = job->home;
      home->post_node(job);  // the last touch of the job
      lock.lock();
    }
  }
};

blocking_pool::blocking_pool(unsigned max_threads) : state_(new state(max_threads)) {}

blocking_pool::~blocking_pool() {
  shutdown();
  delete state_;
}

void blocking_pool::submit(detail::blocking_job* job) {
  job->next_job = nullptr;
  std::lock_guard lock(state_->mutex);
  state_->stopping = false;
  if (state_->idle == 0 && state_->threads.size() < state_->max_threads) {
    // Before the job is queued: a thread that cannot start (no address space for its stack, the
    // thread limit) fails this submit with the reason, unless another thread will run the job.
    try {
      state_->threads.emplace_back([s = state_] { s->thread_main(); });
    } catch (const std::system_error& e) {
      if (state_->threads.empty()) {
        throw detail::described_error(e.code(), detail::thread_start_failure("a blocking-work thread", e.code().value()));
      }
    }
  }
  if (state_->tail != nullptr) state_->tail->next_job = job; else state_->head = job;
  state_->tail = job;
  if (state_->idle > 0) state_->wake.notify_one();
}

void blocking_pool::shutdown() noexcept {
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(state_->mutex);
    state_->stopping = true;
    threads.swap(state_->threads);
  }
  state_->wake.notify_all();
  for (auto& t : threads) t.join();
}

std::size_t blocking_pool::threads() const noexcept {
  std::lock_guard lock(state_->mutex);
  return state_->threads.size();
}

namespace {

constexpr unsigned default_pool_threads = 4;
blocking_pool* default_pool = nullptr;

void forget_threads_in_child() {
  // The parent's threads do not exist here, and its lock may be held: start over, leaking the old
  // state (its std::thread objects must never be destroyed while "joinable").
  if (default_pool != nullptr) default_pool = new blocking_pool(default_pool_threads);
}

}  // namespace

blocking_pool& default_blocking_pool() {
  static blocking_pool* pool = [] {
    default_pool = new blocking_pool(default_pool_threads);
    pthread_atfork(nullptr, nullptr, &forget_threads_in_child);
    // Joined at exit; the pool object itself is left for anything still running at exit.
    std::atexit([] { default_pool->shutdown(); });
    return default_pool;
  }();
  (void)pool;
  return *default_pool;
}

namespace detail {

bool offload_inline() noexcept {
  executor* ex = executor::current();
  return ex == nullptr || ex->simulated() || ex->backend().virtual_clock() || &current_system() != &host_system();
}

}  // namespace detail
}  // namespace sluice::runtime
