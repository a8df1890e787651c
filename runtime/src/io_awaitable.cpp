// Cancellable backend operations (see io_awaitable.hpp).

#include <sluice/runtime/io_awaitable.hpp>

#include <sluice/runtime/system.hpp>

namespace sluice::runtime {

bool io_awaitable::start(std::coroutine_handle<> h, detail::stop_relay* relay) {
  if (relay != nullptr && relay->stop_requested()) {
    op_.result = -ECANCELED;  // cancelled before submission: no I/O at all
    return false;
  }
  op_.user = this;
  op_.complete = &io_awaitable::on_complete;
  executor::current()->submit(op_);
  arm(h, relay);
  return true;
}

void io_awaitable::cancel_on_owner() noexcept {
  io_op* cancel = ::new (static_cast<void*>(cancel_storage_)) io_op{};
  cancel->code = op_code::cancel;
  cancel->target = &op_;
  cancel->user = this;
  cancel->complete = &io_awaitable::on_cancel_complete;
  cancel->internal = true;
  hold();
  owner()->submit(*cancel);
}

void io_awaitable::on_complete(io_op& op) noexcept {
  auto* self = static_cast<io_awaitable*>(op.user);
  self->finish_target();
  if (self->yields_fd_ && self->stop_was_requested() && op.result >= 0) {
    (void)sys().close(op.result);  // the descriptor arrived after a cancel: nobody will own it
    op.result = -ECANCELED;
  }
  self->release();
}

void io_awaitable::on_cancel_complete(io_op& op) noexcept { static_cast<io_awaitable*>(op.user)->release(); }

}  // namespace sluice::runtime
