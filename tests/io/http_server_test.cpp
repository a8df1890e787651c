// io::http_server over real loopback sockets: the server runs on an engine's executor, the client
// is a plain blocking socket on the test's thread (support/http_client.hpp).

#include <sluice/io/http_server.hpp>
#include <sluice/runtime/engine.hpp>
#include <sluice/runtime/event.hpp>
#include <sluice/runtime/scope.hpp>
#include <sluice/runtime/timer.hpp>

#include <support/fd_count.hpp>
#include <support/http_client.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

using namespace sluice::io;
using namespace std::chrono_literals;
namespace rt = sluice::runtime;
using sluice::test::http_client;
using sluice::test::http_get;
using sluice::test::http_reply;

namespace {

// GET/HEAD /hello: "hello <query>"; /slow: the same after 100 ms; other paths 404, other methods 405.
rt::task<http_response> handle(http_request r) {
  if (r.path != "/hello" && r.path != "/slow") co_return http_response::text(404, "no such page\n");
  if (r.method != "GET" && r.method != "HEAD") {
    http_response no = http_response::text(405, "GET only\n");
    no.headers.emplace_back("Allow", "GET, HEAD");
    co_return no;
  }
  if (r.path == "/slow") (void)co_await rt::sleep_for(100ms);
  co_return http_response::text(200, "hello " + r.query);
}

rt::task<void> serve_until(http_server* server, rt::event* stop) {
  rt::scope s;
  s.spawn(server->run());
  (void)co_await stop->wait();
  co_await server->stop();
  co_await s.join();
}

// A server on executor 0 of an engine of its own, from construction to destruction.
struct running_server {
  rt::engine eng{{.executors = 1, .handle_signals = false}};
  std::unique_ptr<http_server> server;
  rt::event stop;
  std::thread thread;
  explicit running_server(http_server_options options = {}) {
    server = http_server::listen(address::loopback_v4(0), &handle, options).value();
    thread = std::thread([this] { eng.block_on(serve_until(server.get(), &stop)); });
  }
  ~running_server() { shut(); }
  void shut() {
    if (!thread.joinable()) return;
    eng.at(0).post([this] { stop.set(); });
    thread.join();
  }
  std::uint16_t port() const { return server->local_address().port(); }
};

std::string get(const std::string& path, const std::string& extra = "") {
  return "GET " + path + " HTTP/1.1\r\nHost: test\r\n" + extra + "\r\n";
}

}  // namespace

TEST_CASE("port 0 binds an ephemeral port, and the server says which") {
  running_server s;
  CHECK(s.port() != 0);
  std::optional<http_reply> r = http_get(s.port(), "/hello?x");
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(r->body == "hello x");
  CHECK(r->header("content-length") == "7");
}

TEST_CASE("a GET is answered 200, an unknown path 404 and another method 405 with Allow") {
  running_server s;
  http_client c(s.port());
  REQUIRE(c.connected());
  REQUIRE(c.send(get("/hello?a")));
  std::optional<http_reply> ok = c.read_reply();
  REQUIRE(ok);
  CHECK(ok->status == 200);
  CHECK(ok->header("connection") == "keep-alive");
  REQUIRE(c.send(get("/nope")));
  std::optional<http_reply> missing = c.read_reply();
  REQUIRE(missing);
  CHECK(missing->status == 404);
  REQUIRE(c.send("POST /hello HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nabcde"));
  std::optional<http_reply> post = c.read_reply();
  REQUIRE(post);
  CHECK(post->status == 405);
  CHECK(post->header("allow") == "GET, HEAD");
  // HEAD: the GET's headers (its length too), no body; the connection goes on.
  REQUIRE(c.send("HEAD /hello?abc HTTP/1.1\r\nHost: t\r\n\r\n"));
  c.expect_no_body();
  std::optional<http_reply> head = c.read_reply();
  REQUIRE(head);
  CHECK(head->status == 200);
  CHECK(head->header("content-length") == "9");
  REQUIRE(c.send(get("/hello?after-head")));
  std::optional<http_reply> after = c.read_reply();
  REQUIRE(after);
  CHECK(after->body == "hello after-head");
}

TEST_CASE("keep-alive serves two requests on one connection, and Connection: close ends it") {
  running_server s;
  http_client c(s.port());
  REQUIRE(c.send(get("/hello?1")));
  std::optional<http_reply> first = c.read_reply();
  REQUIRE(first);
  CHECK(first->body == "hello 1");
  REQUIRE(c.send(get("/hello?2", "Connection: close\r\n")));
  std::optional<http_reply> second = c.read_reply();
  REQUIRE(second);
  CHECK(second->body == "hello 2");
  CHECK(second->header("connection") == "close");
  CHECK(c.closed_by_peer());
}

TEST_CASE("pipelined requests in one send are answered in order, a slow one included") {
  running_server s;
  http_client c(s.port());
  REQUIRE(c.send(get("/slow?a") + get("/hello?b") + get("/nope") + get("/hello?d")));
  std::vector<std::string> bodies;
  std::vector<int> statuses;
  for (int i = 0; i < 4; ++i) {
    std::optional<http_reply> r = c.read_reply();
    REQUIRE(r);
    statuses.push_back(r->status);
    bodies.push_back(r->body);
  }
  CHECK(statuses == std::vector<int>{200, 200, 404, 200});
  CHECK(bodies[0] == "hello a");
  CHECK(bodies[1] == "hello b");
  CHECK(bodies[3] == "hello d");
}

TEST_CASE("a request head larger than max_head_bytes is answered 431 and the connection closed") {
  running_server s({.max_head_bytes = 1024});
  http_client c(s.port());
  // Within the limit: served.
  REQUIRE(c.send(get("/hello?ok", "X-Fill: " + std::string(900, 'a') + "\r\n")));
  std::optional<http_reply> fits = c.read_reply();
  REQUIRE(fits);
  CHECK(fits->status == 200);
  // Beyond it (the head never ends within 1024 bytes): refused without waiting for the rest.
  REQUIRE(c.send(get("/hello", "X-Fill: " + std::string(5000, 'a') + "\r\n")));
  std::optional<http_reply> big = c.read_reply();
  REQUIRE(big);
  CHECK(big->status == 431);
  CHECK(big->header("connection") == "close");
  CHECK(c.closed_by_peer());
}

TEST_CASE("bytes that are not HTTP are answered 400 and the connection closed") {
  running_server s;
  SECTION("garbage") {
    http_client c(s.port());
    REQUIRE(c.send(std::string("\x01\x02\xff not http at all\r\n\r\n", 23)));
    std::optional<http_reply> r = c.read_reply();
    REQUIRE(r);
    CHECK(r->status == 400);
    CHECK_THAT(r->body, Catch::StartsWith("bad request: "));
    CHECK(c.closed_by_peer());
  }
  SECTION("a bad header line after a good request line") {
    http_client c(s.port());
    REQUIRE(c.send("GET /hello HTTP/1.1\r\nno colon here\r\n\r\n"));
    std::optional<http_reply> r = c.read_reply();
    REQUIRE(r);
    CHECK(r->status == 400);
    CHECK(c.closed_by_peer());
  }
  // The server goes on serving others.
  std::optional<http_reply> r = http_get(s.port(), "/hello?still");
  REQUIRE(r);
  CHECK(r->status == 200);
}

TEST_CASE("a silent client is closed after request_timeout, and one half-way through a request gets 408") {
  running_server s({.request_timeout = 300ms});
  http_client idle(s.port());
  http_client partial(s.port());
  REQUIRE(partial.send("GET /hello HTTP/1.1\r\nHost: "));
  const auto start = std::chrono::steady_clock::now();
  CHECK(idle.closed_by_peer());
  std::optional<http_reply> timeout = partial.read_reply();
  REQUIRE(timeout);
  CHECK(timeout->status == 408);
  const auto waited = std::chrono::steady_clock::now() - start;
  CHECK(waited >= 250ms);
  CHECK(waited < 5s);
}

TEST_CASE("100 idle connections do not stop a GET being served") {
  running_server s;
  std::vector<std::unique_ptr<http_client>> idle;
  for (int i = 0; i < 100; ++i) {
    idle.push_back(std::make_unique<http_client>(s.port()));
    REQUIRE(idle.back()->connected());
  }
  // One of them half-way through a request, too.
  REQUIRE(idle.front()->send("GET /hel"));
  std::optional<http_reply> r = http_get(s.port(), "/hello?busy");
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(r->body == "hello busy");
}

TEST_CASE("at max_connections a new connection takes the place of the one idle the longest") {
  running_server s({.max_connections = 2});
  http_client a(s.port());
  http_client b(s.port());
  REQUIRE(a.send(get("/hello?a")));  // both served once, now idle: a first, then b
  REQUIRE(a.read_reply());
  REQUIRE(b.send(get("/hello?b")));
  REQUIRE(b.read_reply());
  std::optional<http_reply> third = http_get(s.port(), "/hello?c");
  REQUIRE(third);
  CHECK(third->status == 200);
  CHECK(a.closed_by_peer());  // idle the longest: closed to make room
  REQUIRE(b.send(get("/hello?b2")));  // b was kept
  std::optional<http_reply> kept = b.read_reply();
  REQUIRE(kept);
  CHECK(kept->body == "hello b2");
}

TEST_CASE("at max_connections with none idle a new connection is answered 503 and closed") {
  running_server s({.max_connections = 2});
  http_client a(s.port());
  http_client b(s.port());
  REQUIRE(a.send(get("/hello?a")));
  REQUIRE(a.read_reply());
  REQUIRE(b.send(get("/hello?b")));
  REQUIRE(b.read_reply());
  REQUIRE(a.send("GET /hel"));  // both half-way through a request: busy
  REQUIRE(b.send("GET /hel"));
  std::this_thread::sleep_for(50ms);  // (the server has read them)
  http_client c(s.port());
  REQUIRE(c.send(get("/hello?c")));
  std::optional<http_reply> third = c.read_reply();
  REQUIRE(third);
  CHECK(third->status == 503);
  CHECK(third->header("retry-after") == "1");
  CHECK(c.closed_by_peer());
  // a finishes its request and closes: a slot is free again.
  REQUIRE(a.send("lo?a2 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"));
  std::optional<http_reply> done = a.read_reply();
  REQUIRE(done);
  CHECK(done->body == "hello a2");
  CHECK(a.closed_by_peer());
  std::optional<http_reply> later;
  for (int i = 0; i < 50 && !(later && later->status == 200); ++i) {
    later = http_get(s.port(), "/hello?d");
    if (!later || later->status != 200) std::this_thread::sleep_for(20ms);
  }
  REQUIRE(later);
  CHECK(later->status == 200);
}

TEST_CASE("stop closes every connection and leaks no descriptor") {
  const int before = sluice::test::open_fd_count();
  {
    running_server s;
    http_client idle(s.port());
    http_client served(s.port());
    REQUIRE(served.send(get("/hello?x")));
    REQUIRE(served.read_reply());
    s.shut();
    CHECK(idle.closed_by_peer());
    CHECK(served.closed_by_peer());
    CHECK(s.server->connections() == 0);
  }
  CHECK(sluice::test::open_fd_count() == before);
}
