// A TCP echo server on sluice: the README's embedding example, built against the installed
// package by scripts/run-tests.sh (tests/install) and run there end to end.
//
//   echo_server [ADDRESS]     (default 127.0.0.1:7000; Ctrl-C or SIGTERM stops it cleanly)

#include <sluice/io/address.hpp>
#include <sluice/io/tcp.hpp>
#include <sluice/runtime/engine.hpp>
#include <sluice/runtime/scope.hpp>

#include <array>
#include <cstddef>
#include <cstdio>
#include <string>

using namespace sluice;

runtime::task<void> serve(io::tcp_stream s) {  // coroutine arguments by value
  std::array<std::byte, 4096> buf;
  for (;;) {
    auto n = co_await s.recv(buf);  // an io_uring recv, cancelled when the engine stops
    if (!n || n.value() == 0) co_return;  // error or end of stream
    auto sent = co_await s.send_all({buf.data(), n.value()});
    if (!sent) co_return;
  }
}

runtime::task<int> run_server(std::string where) {
  auto addr = io::address::parse(where);
  if (!addr) {
    std::fprintf(stderr, "%s\n", addr.error().message().c_str());
    co_return 2;
  }
  auto listener = io::tcp_listener::listen(addr.value());
  if (!listener) {
    std::fprintf(stderr, "%s\n", listener.error().message().c_str());
    co_return 1;
  }
  std::printf("listening on %s\n", listener.value().local_address().to_string().c_str());
  std::fflush(stdout);
  runtime::scope clients;  // joins every connection before we return
  for (;;) {
    auto s = co_await listener.value().accept();  // ends with ECANCELED on SIGINT/SIGTERM
    if (!s) break;
    clients.spawn(serve(std::move(s).value()));
  }
  co_await clients.join();
  std::printf("stopped\n");
  co_return 0;
}

int main(int argc, char** argv) {
  runtime::engine eng;  // one executor per CPU; SIGINT/SIGTERM stop it gracefully
  return eng.block_on(run_server(argc > 1 ? argv[1] : "127.0.0.1:7000"));
}
