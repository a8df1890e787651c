#include <sluice/io/tcp.hpp>
#include <sluice/nats/client.hpp>
#include <sluice/nats/connectors.hpp>
#include <sluice/nats/jetstream.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/when_all.hpp>

#include <support/nats_server.hpp>
#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <string>

using namespace sluice;
using namespace std::chrono_literals;
using runtime::task;

namespace {

task<std::string> publish_and_receive(std::uint16_t port) {
  auto c = (co_await nats::connection::connect(io::address::loopback_v4(port))).value();
  auto sub = (co_await c->subscribe("greetings.>")).value();
  (co_await c->flush()).value();
  (co_await c->publish("greetings.world", "hello")).value();
  std::vector<std::string> headers;
  headers.push_back("X-Test: yes");
  (co_await c->publish("greetings.moon", "bye", std::move(headers))).value();
  auto first = co_await sub->next();
  auto second = co_await sub->next();
  co_await c->close();
  co_return first->subject + "=" + first->payload + " " + second->subject + "=" + second->payload + " " +
      second->header("X-Test").value_or("-");
}

task<std::string> request_reply(std::uint16_t port) {
  auto server = (co_await nats::connection::connect(io::address::loopback_v4(port))).value();
  auto client = (co_await nats::connection::connect(io::address::loopback_v4(port))).value();
  auto service = (co_await server->subscribe("echo")).value();
  (co_await server->round_trip(5s)).value();  // the SUB is in place before the client publishes
  auto slot1 = (co_await client->send_request("echo", "one")).value();
  auto slot2 = (co_await client->send_request("echo", "two")).value();
  for (int i = 0; i < 2; ++i) {
    auto m = co_await service->next();
    (co_await server->publish(m->reply, "re:" + m->payload)).value();
  }
  auto r2 = (co_await client->await_reply(slot2, 5s)).value();
  auto r1 = (co_await client->await_reply(slot1, 5s)).value();
  auto nobody = co_await client->request("nobody.listens", "x", 5s);
  const int status = nobody ? nobody.value().status() : -1;
  co_await client->close();
  co_await server->close();
  co_return r1.payload + "," + r2.payload + "," + std::to_string(status);
}

// A fake server: INFO (max_payload 1024), PONG to the handshake's PING, then `evil`; then waits
// for the client to hang up.
task<int> fake_server(io::tcp_listener* listener, std::string evil) {
  auto s = (co_await listener->accept()).value();
  const std::string info = "INFO {\"server_id\":\"fake\",\"headers\":true,\"max_payload\":1024}\r\n";
  (co_await s.send_all(std::as_bytes(std::span(info.data(), info.size())))).value();
  std::string got;
  std::byte chunk[4096];
  while (got.find("PING\r\n") == std::string::npos) {
    const std::size_t n = (co_await s.recv(chunk)).value();
    if (n == 0) co_return 0;
    got.append(reinterpret_cast<const char*>(chunk), n);
  }
  const std::string reply = "PONG\r\n" + evil;
  (co_await s.send_all(std::as_bytes(std::span(reply.data(), reply.size())))).value();
  for (;;) {
    auto n = co_await s.recv(chunk);
    if (!n || n.value() == 0) break;
  }
  co_await s.close();
  co_return 1;
}

task<std::string> failure_of_client(io::address server) {
  auto c = (co_await nats::connection::connect(server)).value();
  auto sub = (co_await c->subscribe("x")).value();
  auto m = co_await sub->next();
  std::string why = m ? "got a message" : c->failure() ? c->failure()->message() : "no failure";
  co_await c->close();
  co_return why;
}

task<std::string> fake_server_sends(std::string evil) {
  auto listener = io::tcp_listener::listen(io::address::loopback_v4()).value();
  auto [served, why] = co_await runtime::when_all(fake_server(&listener, std::move(evil)), failure_of_client(listener.local_address()));
  (void)served;
  co_await listener.close();
  co_return why;
}

}  // namespace

TEST_CASE("a message published on a subject reaches its subscriber, headers too") {
  SLUICE_SKIP_WITHOUT_NATS();
  test::temp_dir dir;
  test::nats_server nats(dir.path());
  nats.start();
  CHECK(runtime::sync_wait(publish_and_receive(nats.port())) == "greetings.world=hello greetings.moon=bye yes");
}

TEST_CASE("requests sent together get their own replies, and a request nobody serves gets status 503") {
  SLUICE_SKIP_WITHOUT_NATS();
  test::temp_dir dir;
  test::nats_server nats(dir.path());
  nats.start();
  CHECK(runtime::sync_wait(request_reply(nats.port())) == "re:one,re:two,503");
}

TEST_CASE("a server line the client does not know, or a payload above max_payload, fails the connection with an error naming it") {
  const std::string unknown = runtime::sync_wait(fake_server_sends("BOGUS stuff\r\n"));
  CHECK(unknown.find("protocol error: unknown line 'BOGUS stuff'") != std::string::npos);
  CHECK(unknown.find("nats 127.0.0.1:") != std::string::npos);
  const std::string big = runtime::sync_wait(fake_server_sends("MSG x 2 999999999\r\n"));
  CHECK(big.find("exceeds max_payload 1024") != std::string::npos);
  const std::string bad = runtime::sync_wait(fake_server_sends("MSG x 2 notanumber\r\n"));
  CHECK(bad.find("bad sid or size in 'MSG x 2 notanumber'") != std::string::npos);
  const std::string long_line = runtime::sync_wait(fake_server_sends("MSG " + std::string(20000, 'a')));
  CHECK(long_line.find("control line longer than") != std::string::npos);
  const std::string err = runtime::sync_wait(fake_server_sends("-ERR 'Authorization Violation'\r\n"));
  CHECK(err.find("server error: -ERR 'Authorization Violation'") != std::string::npos);
}


TEST_CASE("a nats URL names the server and the stream or subject, and the specs put the stream, not the server, in the identity") {
  auto url = nats::parse_url("nats://127.0.0.1:4222/ORDERS").value();
  CHECK(url.server_text == "127.0.0.1:4222");
  CHECK(url.name == "ORDERS");
  CHECK(nats::jetstream_source_spec(url, true).identity ==
        std::vector<std::string>{"source=nats", "nats.stream=ORDERS", "nats.bounded=yes"});
  CHECK(nats::jetstream_sink_spec(url).identity == std::vector<std::string>{"sink=nats", "nats.subject=ORDERS"});
  auto no_scheme = nats::parse_url("http://127.0.0.1:4222/x");
  REQUIRE(!no_scheme);
  CHECK(no_scheme.error().message() == "nats URL 'http://127.0.0.1:4222/x': does not start with nats://");
  auto no_name = nats::parse_url("nats://127.0.0.1:4222/");
  REQUIRE(!no_name);
  CHECK(no_name.error().message().find("no /STREAM or /SUBJECT") != std::string::npos);
  auto host_name = nats::parse_url("nats://nats.example.com:4222/x");
  REQUIRE(!host_name);
  CHECK(host_name.error().message().find("the server is not IP:PORT") != std::string::npos);
}
