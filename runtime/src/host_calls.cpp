// See host_calls.hpp.

#include <sluice/runtime/host_calls.hpp>
#include <sluice/runtime/log.hpp>
#include <sluice/runtime/offload.hpp>

#include "helper_thread.hpp"

#include <array>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

namespace sluice::runtime {

namespace {
constexpr unsigned slots = 8;
using clock = std::chrono::steady_clock;
}  // namespace

struct host_calls::state {
  struct entry {
    std::function<void()> call;
    int slot = -1;
  };
  bool inline_calls = false;
  std::size_t capacity = 0;
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<entry> queue;              // pointers into it stay valid across push_back/pop_front
  std::array<entry*, slots> waiting{};  // the queued entry of each coalescing slot
  std::uint64_t queued = 0;             // entries ever queued (a replacement is not a new one)
  std::uint64_t done = 0;               // entries run (or dropped by an exception)
  std::uint64_t dropped = 0;
  clock::time_point running_since{};    // of the call running now; epoch when idle
  bool running = false;
  bool closing = false;
  std::thread thread;

  void start_locked() {
    if (thread.joinable()) return;
    try {
      thread = std::thread([this] { loop(); });
    } catch (const std::system_error& e) {
      throw detail::described_error(e.code(), detail::thread_start_failure("the host-callback thread", e.code().value()));
    }
  }

  void loop() {
    detail::block_all_signals();
    std::unique_lock lock(mutex);
    for (;;) {
      changed.wait(lock, [this] { return closing || !queue.empty(); });
      if (queue.empty()) return;  // closing, and everything ran
      entry e = std::move(queue.front());
      if (e.slot >= 0) waiting[static_cast<unsigned>(e.slot)] = nullptr;
      queue.pop_front();
      running = true;
      running_since = clock::now();
      lock.unlock();
      run(e.call);
      lock.lock();
      running = false;
      ++done;
      changed.notify_all();
    }
  }

  static void run(const std::function<void()>& call) noexcept {
    try {
      call();
    } catch (const std::exception& e) {
      log::error("a host callback failed: {}", e.what());
    } catch (...) {
      log::error("a host callback failed with a non-standard exception");
    }
  }
};

host_calls::host_calls(bool inline_calls, std::size_t capacity) : state_(std::make_unique<state>()) {
  state_->inline_calls = inline_calls;
  state_->capacity = capacity == 0 ? 1 : capacity;
}

host_calls::~host_calls() {
  {
    std::lock_guard lock(state_->mutex);
    state_->closing = true;
  }
  state_->changed.notify_all();
  if (state_->thread.joinable()) state_->thread.join();
}

bool host_calls::post(std::function<void()> call) {
  if (state_->inline_calls) {
    state::run(call);
    return true;
  }
  {
    std::lock_guard lock(state_->mutex);
    if (state_->queue.size() >= state_->capacity) {
      ++state_->dropped;
      return false;
    }
    state_->queue.push_back({std::move(call), -1});
    ++state_->queued;
    state_->start_locked();
  }
  state_->changed.notify_all();
  return true;
}

void host_calls::post_latest(unsigned slot, std::function<void()> call) {
  if (state_->inline_calls) {
    state::run(call);
    return;
  }
  slot %= slots;
  {
    std::lock_guard lock(state_->mutex);
    if (state::entry* waiting = state_->waiting[slot]) {
      waiting->call = std::move(call);  // the newer one takes the older one's place
      return;
    }
    state_->queue.push_back({std::move(call), static_cast<int>(slot)});
    state_->waiting[slot] = &state_->queue.back();
    ++state_->queued;
    state_->start_locked();
  }
  state_->changed.notify_all();
}

void host_calls::wait_drained() {
  std::unique_lock lock(state_->mutex);
  const std::uint64_t target = state_->queued;
  state_->changed.wait(lock, [this, target] { return state_->done >= target; });
}

task<void> host_calls::drained() {
  if (state_->inline_calls) co_return;
  auto wait = [this] { wait_drained(); };
  co_await offload(wait);
}

std::uint64_t host_calls::dropped() const noexcept {
  std::lock_guard lock(state_->mutex);
  return state_->dropped;
}

std::int64_t host_calls::running_for_ms() const noexcept {
  std::lock_guard lock(state_->mutex);
  if (!state_->running) return 0;
  return std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - state_->running_since).count();
}

}  // namespace sluice::runtime
