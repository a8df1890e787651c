#pragma once
// watch: one etcd watch (a key or a prefix, from a start revision), on its own streaming
// connection. Made by client::watch / client::watch_prefix, which return once the server has
// created it: every change after `created_revision()` is then seen.
//
// Protocol: POST /v3/watch with {"create_request": ...}; the gateway answers with a chunked
// HTTP/1.1 body of newline-delimited JSON objects, {"result": {...}} each (or {"error": {...}}).
// Messages without events (progress notifications) are skipped.
//
// Guarantees:
// - next() yields the next batch of events, in revision order, never an empty batch. Once it has
//   failed it fails the same way every time. Failures:
//     errc::compacted     the start revision was compacted; compact_revision() is the oldest
//                         revision one can watch from now (the server ends the watch);
//     errc::watch_ended   the server cancelled the watch, the stream ended, or close() was called;
//     grpc_code           the gateway reported a stream error (a server shutting down gracefully:
//                         "transport is closing", UNAVAILABLE);
//     io::errc::unexpected_eof, ECONNRESET
//                         the connection broke (a server killed: "the connection closed in the
//                         middle of the response");
//     errc::bad_response, errc::response_too_large
//                         the stream carried junk, or one message larger than max_response_bytes
//                         (the bound holds for what is buffered: a message plus one receive).
// - next() honours its stop token: under with_timeout it ends with ECANCELED and loses nothing (the
//   watch stays usable). Only one next() at a time.
// - close() ends the stream promptly: a next() waiting in another task fails with watch_ended.
//   Destroying a watch closes its connection synchronously. A watch is moved or destroyed only
//   while no next() is pending, and is used only on the executor that made it (asserted).
//
//   auto w = (co_await c.watch_prefix("/job/members/", rev + 1)).value();
//   for (;;) { auto batch = co_await w.next(); if (!batch) break; ... }

#include <sluice/etcd/types.hpp>
#include <sluice/io/result.hpp>
#include <sluice/runtime/task.hpp>

#include <cstdint>
#include <memory>

namespace sluice::etcd {

namespace detail {
class watch_stream;
}

class watch {
 public:
  watch() noexcept;  // not watching: next() fails with watch_ended
  explicit watch(std::unique_ptr<detail::watch_stream> stream) noexcept;
  watch(watch&&) noexcept;
  watch& operator=(watch&&) noexcept;
  ~watch();

  runtime::task<io::result<watch_batch>> next();
  runtime::task<void> close();

  bool is_open() const noexcept;
  std::int64_t id() const noexcept;                // the server's watch id
  std::int64_t created_revision() const noexcept;  // the store's revision when it was created
  std::int64_t compact_revision() const noexcept;  // after errc::compacted, else 0

 private:
  std::unique_ptr<detail::watch_stream> stream_;
};

}  // namespace sluice::etcd
