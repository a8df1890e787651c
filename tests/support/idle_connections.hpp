#pragma once
// idle_connections_then_write: an executor holding many idle TCP connections (a recv waiting on both
// ends of each, and an accept on the listener) writes, fsyncs and closes a file, then the
// connections close. For the ring-admission guarantee (runtime/admission.hpp) on any backend: with
// more waits than the ring's wait share, the file's operations must still find room.

#include <sluice/io/address.hpp>
#include <sluice/io/file.hpp>
#include <sluice/io/tcp.hpp>
#include <sluice/runtime/executor.hpp>
#include <sluice/runtime/scope.hpp>
#include <sluice/runtime/timer.hpp>
#include <sluice/runtime/when_all.hpp>

#include <array>
#include <chrono>
#include <span>
#include <string>
#include <vector>

namespace sluice::test {

struct idle_connections_report {
  std::size_t outstanding_while_idle = 0;  // operations in the backend when the file work started
  bool file_done = false;                  // within the bound (false: it waited for ever)
  std::string file_error;
  int recvs_ended_before_file_done = 0;
  int recvs_ended = 0;
  std::string contents;  // the file read back
};

namespace detail {

inline runtime::task<void> recv_until_end(io::tcp_stream* s, int* ended) {
  std::array<std::byte, 64> buf{};
  for (;;) {
    auto got = co_await s->recv(buf);
    if (!got || *got == 0) break;
  }
  ++*ended;
}

inline runtime::task<void> accept_until_closed(io::tcp_listener* l) {
  for (;;) {
    auto s = co_await l->accept();
    if (!s) break;
    (void)co_await s->close();
  }
}

inline runtime::task<std::string> write_fsync_close(std::string path) {
  auto opened = co_await io::file::open(path, io::open_options::create_or_truncate());
  if (!opened) co_return opened.error().message();
  io::file f = std::move(opened).value();
  const std::string text = "checkpoint state";
  auto written = co_await f.write_all(std::as_bytes(std::span(text)), 0);
  if (!written) co_return written.error().message();
  auto synced = co_await f.fsync();
  if (!synced) co_return synced.error().message();
  auto closed = co_await f.close();
  if (!closed) co_return closed.error().message();
  co_return std::string();
}

inline runtime::task<std::string> read_back(std::string path) {
  auto opened = co_await io::file::open(path, io::open_options::read_only());
  if (!opened) co_return std::string();
  io::file f = std::move(opened).value();
  std::string text(64, '\0');
  auto got = co_await f.read_full(std::as_writable_bytes(std::span(text)), 0);
  text.resize(got ? *got : 0);
  (void)co_await f.close();
  co_return text;
}

}  // namespace detail

inline runtime::task<idle_connections_report> idle_connections_then_write(int connections, std::string path) {
  idle_connections_report report;
  auto listening = io::tcp_listener::listen(io::address::loopback_v4(0));
  if (!listening) {
    report.file_error = listening.error().message();
    co_return report;
  }
  io::tcp_listener listener = std::move(listening).value();
  std::vector<io::tcp_stream> ours;
  std::vector<io::tcp_stream> theirs;
  ours.reserve(static_cast<std::size_t>(connections));
  theirs.reserve(static_cast<std::size_t>(connections));
  for (int i = 0; i < connections; ++i) {
    auto [connected, accepted] =
        co_await runtime::when_all(io::tcp_stream::connect(listener.local_address()), listener.accept());
    if (!connected || !accepted) {
      report.file_error = "connect/accept failed";
      co_return report;
    }
    ours.push_back(std::move(connected).value());
    theirs.push_back(std::move(accepted).value());
  }
  runtime::scope waits;
  for (auto& s : ours) waits.spawn(detail::recv_until_end(&s, &report.recvs_ended));
  for (auto& s : theirs) waits.spawn(detail::recv_until_end(&s, &report.recvs_ended));
  waits.spawn(detail::accept_until_closed(&listener));
  // Every wait submitted: 2 recvs per connection, the accept, and the executor's wake-up read.
  const std::size_t expected = 2 * static_cast<std::size_t>(connections) + 2;
  for (int turns = 0; runtime::executor::current()->backend().outstanding() < expected && turns < 10'000; ++turns) {
    co_await runtime::yield();
  }
  report.outstanding_while_idle = runtime::executor::current()->backend().outstanding();
  // The bound only ends the failure case: a file operation with no room would wait for ever.
  auto done = co_await runtime::with_timeout(detail::write_fsync_close(path), std::chrono::seconds(20));
  report.recvs_ended_before_file_done = report.recvs_ended;
  if (done) {
    report.file_done = true;
    report.file_error = *done;
  }
  for (auto& s : theirs) (void)co_await s.close();
  for (auto& s : ours) (void)co_await s.close();
  (void)co_await listener.close();
  co_await waits.join();
  report.contents = co_await detail::read_back(path);
  co_return report;
}

}  // namespace sluice::test
