// Ring admission (see admission.hpp).

#include <sluice/runtime/admission.hpp>

#include <cassert>

namespace sluice::runtime {

const char* to_string(op_class c) noexcept {
  switch (c) {
    case op_class::internal: return "internal";
    case op_class::prompt: return "prompt";
    case op_class::wait: return "wait";
    case op_class::timer: return "timer";
  }
  return "unknown";
}

namespace detail {

bool op_queue::remove(const io_op* target) noexcept {
  io_op* prev = nullptr;
  for (io_op* op = head_; op != nullptr; prev = op, op = op->next_) {
    if (op != target) continue;
    if (prev) prev->next_ = op->next_; else head_ = op->next_;
    if (tail_ == op) tail_ = prev;
    op->next_ = nullptr;
    --size_;
    return true;
  }
  return false;
}

}  // namespace detail

ring_admission::ring_admission(std::size_t capacity, std::size_t total_limit) noexcept { set_limits(capacity, total_limit); }

void ring_admission::set_limits(std::size_t capacity, std::size_t total_limit) noexcept {
  assert(capacity >= 1 && total_limit >= capacity);
  capacity_ = capacity;
  wait_capacity_ = wait_capacity_for(capacity);
  total_limit_ = total_limit;
}

std::size_t ring_admission::in_flight() const noexcept {
  std::size_t n = 0;
  for (const std::size_t c : in_flight_) n += c;
  return n;
}

io_op* ring_admission::next() const noexcept {
  for (int c = 0; c < op_class_count; ++c) {
    if (!backlog_[c].empty() && has_room(static_cast<op_class>(c))) return backlog_[c].front();
  }
  return nullptr;
}

void ring_admission::take(io_op& op) noexcept {
  detail::op_queue& queue = backlog_[index(class_of(op))];
  assert(queue.front() == &op && "taking an operation that is not next in its backlog");
  queue.pop();
}

bool ring_admission::backlogged() const noexcept {
  for (const auto& queue : backlog_) {
    if (!queue.empty()) return true;
  }
  return false;
}

std::size_t ring_admission::backlog_size() const noexcept {
  std::size_t n = 0;
  for (const auto& queue : backlog_) n += queue.size();
  return n;
}

}  // namespace sluice::runtime
