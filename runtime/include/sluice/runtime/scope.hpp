#pragma once
// scope: structured concurrency for a dynamic number of children.
//
// Children started with `spawn` run concurrently on the current executor and see the scope's stop
// token (linked to the token of the task that created the scope's join). `co_await join()` waits for
// all of them and rethrows the first failure (later ones are logged); the first failure also asks
// the other children to stop. A scope must be joined before it is destroyed.
//
//   scope s;
//   for (auto& c : clients) s.spawn(serve(std::move(c)));
//   co_await s.join();

#include <sluice/runtime/detail/group.hpp>

namespace sluice::runtime {

namespace detail {
group_child scope_child(task<outcome<void>> settled, group* g);
}

class scope {
 public:
  scope() = default;
  // Children also stop when `parent` is stopped (join() links the joining task's token as well).
  explicit scope(std::stop_token parent) { group_.link(std::move(parent)); }
  scope(const scope&) = delete;
  scope& operator=(const scope&) = delete;

  // Out of memory (the child's frames, the run queue) throws here, and nothing was started.
  void spawn(task<void> t) {
    detail::scope_child(detail::settle_at_home(std::move(t), executor::current()), &group_).start_in(group_);
  }
  void request_stop() noexcept { group_.request_stop(); }
  std::stop_token const* token() const noexcept { return group_.token(); }
  std::size_t live() const noexcept { return group_.live(); }

  task<void> join();

 private:
  detail::group group_;
};

}  // namespace sluice::runtime
