#pragma once
// channel<T>: an executor-local bounded FIFO channel between coroutines. No locks.
//
// - `co_await send(v)` queues v, suspending while the channel is full. Returns false if the
//   channel was closed (or the sender was stopped) before v could be queued.
// - `co_await receive()` yields the next value, suspending while empty; nullopt once the channel is
//   closed and drained (or the receiver was stopped).
// - Waiting senders and receivers are served in FIFO order and woken by scheduling them.
// - Memory is bounded by `capacity` values plus one value per waiting sender (held in its frame).

#include <sluice/runtime/detail/wait_list.hpp>

#include <cassert>
#include <cstddef>
#include <optional>
#include <utility>
#include <vector>

namespace sluice::runtime {

template <class T>
class channel {
 public:
  explicit channel(std::size_t capacity) : slots_(capacity), capacity_(capacity) {
    assert(capacity > 0 && "a channel needs room for at least one value");
  }
  channel(const channel&) = delete;
  channel& operator=(const channel&) = delete;

  std::size_t size() const noexcept { return size_; }
  std::size_t capacity() const noexcept { return capacity_; }
  bool closed() const noexcept { return closed_; }

  // Wakes every waiter: senders fail, receivers drain what is queued and then get nullopt.
  void close() noexcept {
    closed_ = true;
    while (!senders_.empty()) senders_.front()->wake();
    while (!receivers_.empty()) receivers_.front()->wake();
  }

  class send_awaiter : public detail::list_wait {
   public:
    send_awaiter(channel& c, T value) : channel_(&c), value_(std::move(value)) {}
    bool await_ready() {
      if (channel_->closed_) return true;
      if (!channel_->receivers_.empty()) {
        auto* r = static_cast<receive_awaiter*>(channel_->receivers_.front());
        r->slot_.emplace(std::move(value_));
        r->wake();
        return delivered_ = true;
      }
      if (channel_->size_ < channel_->capacity_) {
        channel_->push(std::move(value_));
        return delivered_ = true;
      }
      return false;
    }
    template <class P>
    void await_suspend(std::coroutine_handle<P> h) {
      enqueue(channel_->senders_, h, detail::stop_token_of(h));
    }
    bool await_resume() const noexcept { return delivered_; }

   private:
    friend class channel;
    channel* channel_;
    T value_;
    bool delivered_ = false;
  };

  class receive_awaiter : public detail::list_wait {
   public:
    explicit receive_awaiter(channel& c) noexcept : channel_(&c) {}
    bool await_ready() {
      if (channel_->size_ > 0) {
        slot_.emplace(channel_->pop());
        channel_->refill_from_sender();
        return true;
      }
      return channel_->closed_;
    }
    template <class P>
    void await_suspend(std::coroutine_handle<P> h) {
      enqueue(channel_->receivers_, h, detail::stop_token_of(h));
    }
    std::optional<T> await_resume() { return std::move(slot_); }

   private:
    friend class channel;
    channel* channel_;
    std::optional<T> slot_;
  };

  send_awaiter send(T value) { return send_awaiter{*this, std::move(value)}; }
  receive_awaiter receive() noexcept { return receive_awaiter{*this}; }

  // Non-suspending variants.
  bool try_send(T& value) {
    send_awaiter a{*this, std::move(value)};
    if (a.await_ready() && a.delivered_) return true;
    value = std::move(a.value_);
    return false;
  }
  std::optional<T> try_receive() {
    if (size_ == 0) return std::nullopt;
    std::optional<T> v(pop());
    refill_from_sender();
    return v;
  }

 private:
  void push(T&& v) {
    slots_[(head_ + size_) % capacity_].emplace(std::move(v));
    ++size_;
  }
  T pop() {
    T v = std::move(*slots_[head_]);
    slots_[head_].reset();
    head_ = (head_ + 1) % capacity_;
    --size_;
    return v;
  }
  // A slot was freed: the longest-waiting sender's value moves in.
  void refill_from_sender() {
    if (senders_.empty()) return;
    auto* s = static_cast<send_awaiter*>(senders_.front());
    push(std::move(s->value_));
    s->delivered_ = true;
    s->wake();
  }

  std::vector<std::optional<T>> slots_;
  std::size_t capacity_;
  std::size_t head_ = 0;
  std::size_t size_ = 0;
  bool closed_ = false;
  detail::wait_list senders_;
  detail::wait_list receivers_;
};

}  // namespace sluice::runtime
