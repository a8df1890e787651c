// nop: the executor's per-operation overhead. N coroutines on one executor each await io_uring NOPs
// in a loop, against a raw liburing loop (its own ring, same sizes and set-up flags as sluice's
// backend) that submits batches of NOPs and reaps them. A NOP does no work in the kernel, so the
// ratio is the share of the raw ring's throughput that survives the runtime's bookkeeping.

#include "bench.hpp"

#include <sluice/runtime/io_awaitable.hpp>
#include <sluice/runtime/scope.hpp>
#include <sluice/runtime/sync_wait.hpp>

#include <fmt/core.h>
#include <liburing.h>

#include <cerrno>
#include <coroutine>
#include <exception>
#include <stdexcept>
#include <system_error>

namespace sluice::bench {
namespace {

namespace rt = sluice::runtime;

rt::task<void> nop_worker(std::uint64_t ops) {
  for (std::uint64_t i = 0; i < ops; ++i) {
    const std::int32_t rc = co_await rt::submit_op([]() noexcept { return rt::io_op{.code = rt::op_code::nop}; });
    if (rc < 0) throw std::system_error(-rc, std::generic_category(), "nop operation");
  }
}

// Diagnostic (--variant raw-op): the smallest awaitable the executor can drive: one io_op and the
// waiting handle, no cancellation support. It shows the floor of the executor loop itself.
struct raw_op_awaitable {
  rt::io_op op{.code = rt::op_code::nop};
  std::coroutine_handle<> waiter{};
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h) {
    waiter = h;
    op.user = this;
    op.complete = [](rt::io_op& o) noexcept {
      rt::executor::current()->schedule(static_cast<raw_op_awaitable*>(o.user)->waiter);
    };
    rt::executor::current()->submit(op);
  }
  std::int32_t await_resume() const noexcept { return op.result; }
};

rt::task<void> raw_op_worker(std::uint64_t ops) {
  for (std::uint64_t i = 0; i < ops; ++i) {
    const std::int32_t rc = co_await raw_op_awaitable{};
    if (rc < 0) throw std::system_error(-rc, std::generic_category(), "nop operation");
  }
}

rt::task<double> nop_driver(unsigned coroutines, std::uint64_t ops_each) {
  const auto start = bench_clock::now();
  rt::scope workers;
  for (unsigned i = 0; i < coroutines; ++i) workers.spawn(nop_worker(ops_each));
  co_await workers.join();
  co_return seconds_since(start);
}

// Diagnostic mode (--variant no-stop-token): the workers run under a bare root coroutine that is not a
// sluice task, so they have no stop token and their operations register no std::stop_callback.
// The difference to the default mode is the cost of cancellation support per operation.
struct bare_join {
  std::size_t live = 0;
  std::coroutine_handle<> waiter{};
  std::exception_ptr error{};
  bool await_ready() const noexcept { return live == 0; }
  void await_suspend(std::coroutine_handle<> h) noexcept { waiter = h; }
  void await_resume() const {
    if (error) std::rethrow_exception(error);
  }
};

struct bare_root {
  struct promise_type {
    bare_root get_return_object() noexcept { return {std::coroutine_handle<promise_type>::from_promise(*this)}; }
    std::suspend_always initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }  // the body catches everything
  };
  std::coroutine_handle<promise_type> handle;
};

bare_root bare_nop_root(std::uint64_t ops, bare_join* join, bool raw_op) {
  try {
    if (raw_op) {
      co_await raw_op_worker(ops);
    } else {
      co_await nop_worker(ops);
    }
  } catch (...) {
    if (!join->error) join->error = std::current_exception();
  }
  if (--join->live == 0) rt::executor::current()->schedule(join->waiter);
}

rt::task<double> bare_nop_driver(unsigned coroutines, std::uint64_t ops_each, bool raw_op) {
  const auto start = bench_clock::now();
  bare_join join;
  for (unsigned i = 0; i < coroutines; ++i) {
    ++join.live;
    rt::executor::current()->schedule(bare_nop_root(ops_each, &join, raw_op).handle);
  }
  co_await join;
  co_return seconds_since(start);
}

// Sets `ring` up exactly as the sluice backend does: SINGLE_ISSUER|DEFER_TASKRUN first, then
// COOP_TASKRUN, then no flags, dropping a set on EINVAL. Returns the flags that took.
unsigned setup_like_backend(io_uring& ring, const rt::uring_options& o) {
  const unsigned flag_sets[] = {
      IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_SUBMIT_ALL,
      IORING_SETUP_COOP_TASKRUN | IORING_SETUP_SUBMIT_ALL,
      0,
  };
  int rc = -EINVAL;
  for (unsigned flags : flag_sets) {
    io_uring_params params{};
    params.flags = flags | IORING_SETUP_CQSIZE;
    params.cq_entries = o.cq_entries;
    rc = io_uring_queue_init_params(o.sq_entries, &ring, &params);
    if (rc == 0) return flags;
    if (rc != -EINVAL) break;
  }
  throw std::system_error(-rc, std::generic_category(), "baseline io_uring_queue_init_params");
}

// Seconds for `total_ops` NOPs submitted in batches of `batch` and reaped before the next batch.
double raw_nop_seconds(std::uint64_t total_ops, unsigned batch, const rt::uring_options& o) {
  io_uring ring{};
  setup_like_backend(ring, o);
  std::uint64_t checksum = 0;
  const auto start = bench_clock::now();
  std::uint64_t done = 0;
  while (done < total_ops) {
    const unsigned n = static_cast<unsigned>(std::min<std::uint64_t>(batch, total_ops - done));
    for (unsigned i = 0; i < n; ++i) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      io_uring_prep_nop(sqe);
      io_uring_sqe_set_data64(sqe, i);
    }
    int rc = io_uring_submit_and_wait(&ring, n);
    if (rc < 0 && rc != -EINTR) {
      io_uring_queue_exit(&ring);
      throw std::system_error(-rc, std::generic_category(), "baseline io_uring_submit_and_wait");
    }
    unsigned reaped = 0;
    while (reaped < n) {
      unsigned head;
      unsigned seen = 0;
      io_uring_cqe* cqe;
      io_uring_for_each_cqe(&ring, head, cqe) {
        if (cqe->res < 0) {
          io_uring_queue_exit(&ring);
          throw std::system_error(-cqe->res, std::generic_category(), "baseline nop");
        }
        checksum += cqe->user_data;
        ++seen;
      }
      io_uring_cq_advance(&ring, seen);
      reaped += seen;
      if (reaped < n) io_uring_submit_and_wait(&ring, n - reaped);
    }
    done += n;
  }
  const double seconds = seconds_since(start);
  do_not_optimize(checksum);
  io_uring_queue_exit(&ring);
  return seconds;
}

class nop_bench final : public benchmark {
 public:
  std::string_view name() const noexcept override { return "nop"; }
  std::string_view description() const noexcept override {
    return "io_uring NOPs awaited by coroutines vs a raw liburing batch loop (ops/s)";
  }
  std::vector<option> options() override {
    return {
        {"--ops", "NOPs per measurement (each side)", &ops_},
        {"--coroutines", "concurrent coroutines awaiting NOPs", &coroutines_},
        {"--batch", "baseline: NOPs per submitted batch (at most the SQ size, 256)", &batch_},
        {"--variant",
         "task: submit_op from sluice tasks (the figure). Diagnostics: no-stop-token (same, without a stop "
         "token, so no stop_callback per op); raw-op (a minimal awaitable without cancellation support)",
         &variant_},
    };
  }

  void run(const common_options& common, const reporter& out) override {
    if (coroutines_ == 0 || ops_ < coroutines_) throw std::invalid_argument("need --ops >= --coroutines >= 1");
    const rt::uring_options ring_options{};
    if (batch_ == 0 || batch_ > ring_options.sq_entries) {
      throw std::invalid_argument(fmt::format("--batch must be in 1..{}", ring_options.sq_entries));
    }
    if (variant_ != "task" && variant_ != "no-stop-token" && variant_ != "raw-op") {
      throw std::invalid_argument("--variant must be task, no-stop-token or raw-op");
    }
    const std::uint64_t ops_each = ops_ / coroutines_;
    const std::uint64_t total = ops_each * coroutines_;

    auto r = measure_paired(
        common.runs,
        [&] {
          const double s = rt::sync_wait(variant_ == "task" ? nop_driver(coroutines_, ops_each)
                                                             : bare_nop_driver(coroutines_, ops_each, variant_ == "raw-op"));
          return static_cast<double>(total) / s;
        },
        [&] { return static_cast<double>(total) / raw_nop_seconds(total, batch_, ring_options); });

    const double ratio = r.figure / r.baseline;
    out.result(name(),
               fmt::format("nop{}: {}ops/s  baseline (raw liburing, batches of {}) {}ops/s  ratio {:.2f}  "
                           "target >= 0.7: {}",
                           variant_ == "task" ? "" : " (" + variant_ + ")", human_rate(r.figure), batch_, human_rate(r.baseline), ratio,
                           ratio >= 0.7 ? "met" : "MISSED"),
               {{"ops_per_s", r.figure},
                {"baseline_ops_per_s", r.baseline},
                {"ratio", ratio},
                {"ops", total},
                {"coroutines", std::uint64_t{coroutines_}},
                {"batch", std::uint64_t{batch_}},
                {"variant", variant_},
                {"runs", std::uint64_t{common.runs}}});
  }

 private:
  std::uint64_t ops_ = 2'000'000;
  unsigned coroutines_ = 256;
  unsigned batch_ = 256;
  std::string variant_ = "task";
};

registration<nop_bench> reg;

}  // namespace
}  // namespace sluice::bench
