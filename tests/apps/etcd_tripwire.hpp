#pragma once
// etcd_tripwire: a thread that watches a job's keys in a real etcd and, the moment a key ending in
// `suffix` is put under `prefix`, runs `act` once (a test kills a worker there: at an exact step
// of the job's protocol, cluster/src/attempt_link.hpp, rather than after a guessed delay).
//
// The watch is open when the constructor returns, so nothing written after it is missed. `act` runs
// on the tripwire's thread. The destructor stops the watch (within 200 ms) and joins the thread.

#include <sluice/etcd/client.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/timer.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>

namespace sluice::test {

class etcd_tripwire {
 public:
  etcd_tripwire(std::string endpoint, std::string prefix, std::string suffix, std::function<void()> act)
      : endpoint_(std::move(endpoint)), prefix_(std::move(prefix)), suffix_(std::move(suffix)), act_(std::move(act)) {
    std::promise<bool> watching;
    std::future<bool> opened = watching.get_future();
    thread_ = std::thread([this, &watching] { runtime::sync_wait(watch_loop(this, &watching)); });
    if (!opened.get()) {
      thread_.join();
      throw std::runtime_error("etcd_tripwire: cannot watch " + prefix_ + " at " + endpoint_);
    }
  }
  etcd_tripwire(const etcd_tripwire&) = delete;
  etcd_tripwire& operator=(const etcd_tripwire&) = delete;
  ~etcd_tripwire() {
    stop_ = true;
    thread_.join();
  }
  bool fired() const { return fired_; }

 private:
  static runtime::task<void> watch_loop(etcd_tripwire* self, std::promise<bool>* watching) {
    etcd::client c(etcd::endpoint::parse(self->endpoint_).value());
    io::result<etcd::watch> w = co_await c.watch_prefix(self->prefix_);
    watching->set_value(static_cast<bool>(w));
    if (!w) co_return;
    while (!self->stop_ && !self->fired_) {
      auto batch = co_await runtime::with_timeout(w->next(), std::chrono::milliseconds(200));
      if (!batch) continue;  // (timed out: look at stop_ again)
      if (!*batch) break;    // the watch ended
      for (const etcd::watch_event& e : (*batch)->events) {
        const std::string& k = e.kv.key;
        if (e.type == etcd::watch_event::kind::put && k.size() >= self->suffix_.size() &&
            k.compare(k.size() - self->suffix_.size(), self->suffix_.size(), self->suffix_) == 0) {
          self->act_();
          self->fired_ = true;
          break;
        }
      }
    }
    co_await w->close();
  }

  std::string endpoint_, prefix_, suffix_;
  std::function<void()> act_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> fired_{false};
  std::thread thread_;
};

}  // namespace sluice::test
