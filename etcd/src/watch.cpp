// Watches: the streaming connection behind etcd::watch, and client::watch (see watch.hpp).

#include <sluice/etcd/client.hpp>
#include <sluice/etcd/watch.hpp>

#include "json.hpp"
#include "watch_stream.hpp"

#include <sluice/runtime/assert.hpp>
#include <sluice/runtime/timer.hpp>

#include <cerrno>
#include <utility>

namespace sluice::etcd {

using runtime::task;

namespace detail {

namespace {

io::error ended(std::string why) { return io::error(make_error_code(errc::watch_ended), std::move(why)); }

}  // namespace

task<io::result<std::unique_ptr<watch_stream>>> watch_stream::open(endpoint where, std::size_t max_message_bytes,
                                                                   std::string create_body,
                                                                   std::chrono::milliseconds dead_peer) {
  auto conn = co_await http_connection::open(where, dead_peer);
  if (!conn) co_return std::move(conn).error();
  auto sent = co_await (*conn)->send_post("/v3/watch", create_body);
  if (!sent) co_return std::move(sent).error();
  auto stream = std::make_unique<watch_stream>(std::move(where), std::move(*conn), max_message_bytes);
  while (!stream->created_ && !stream->failed_) {
    auto read = co_await stream->read_more();
    if (!read) co_return std::move(read).error();
  }
  if (stream->failed_ && !stream->created_) co_return std::move(*stream->failed_);
  co_return std::move(stream);
}

void watch_stream::fail(io::error e) {
  if (!failed_) failed_ = std::move(e);
}

task<io::result<void>> watch_stream::read_more() {
  auto more = co_await conn_->receive(&parser_);
  if (closed_) {
    fail(ended("the watch was closed"));
    co_return io::success();
  }
  if (!more) {
    if (more.error().code() == std::errc::operation_canceled) co_return std::move(more).error();  // a stop
    take_messages();  // what arrived before the failure still counts
    fail(std::move(more).error());
    co_return io::success();
  }
  take_messages();
  if (!*more || parser_.complete()) fail(ended("the server ended the watch stream"));
  co_return io::success();
}

void watch_stream::take_messages() {
  if (!parser_.headers_complete()) return;
  if (parser_.status() != 200) {
    if (parser_.complete()) fail(gateway_failure(parser_));
    return;
  }
  std::string& body = parser_.body();
  std::size_t start = 0;
  for (std::size_t newline; !failed_ && (newline = body.find('\n', start)) != std::string::npos; start = newline + 1) {
    take_message(std::string_view(body).substr(start, newline - start));
  }
  body.erase(0, start);
  // The gateway ends each message with a newline; a last one without it is still a message.
  if (!failed_ && parser_.complete() && body.find_first_not_of(" \r\t") != std::string::npos) {
    take_message(body);
    body.clear();
  }
}

void watch_stream::take_message(std::string_view line) {
  if (line.find_first_not_of(" \r\t") == std::string_view::npos) return;
  auto message = decode(line, [](const json& j) {
    return std::pair(to_gateway_error(j), to_watch_message(j.contains("result") ? j.at("result") : json::object()));
  });
  if (!message) return fail(std::move(message).error());
  auto& [error, m] = *message;
  if (error) {
    return fail(io::error(make_error_code(static_cast<grpc_code>(error->code)),
                          error->message + " (gRPC " + grpc_code_name(error->code) + ")"));
  }
  if (m.created && !created_) {
    created_ = true;
    id_ = m.watch_id;
    created_revision_ = m.revision;
  }
  if (!m.events.empty()) ready_.push_back(watch_batch{m.revision, std::move(m.events)});
  if (m.compact_revision > 0) {
    compact_revision_ = m.compact_revision;
    return fail(io::error(make_error_code(errc::compacted),
                          "the start revision is compacted; the oldest revision to watch from is " +
                              std::to_string(m.compact_revision)));
  }
  if (m.canceled) {
    return fail(ended("the server cancelled the watch" + (m.cancel_reason.empty() ? "" : ": " + m.cancel_reason)));
  }
}

task<io::result<watch_batch>> watch_stream::next() {
  SLUICE_ASSERT(runtime::executor::current() == home_, "an etcd watch is used only on the executor that made it");
  SLUICE_ASSERT(!reading_, "one next() at a time on an etcd watch");
  reading_ = true;
  while (ready_.empty() && !failed_) {
    if (closed_) {
      fail(ended("the watch was closed"));
      break;
    }
    auto read = co_await read_more();
    if (!read) {
      reading_ = false;
      co_return named_failure(where_, "watch", read.error());
    }
  }
  reading_ = false;
  if (!ready_.empty()) {
    watch_batch batch = std::move(ready_.front());
    ready_.pop_front();
    co_return batch;
  }
  co_return named_failure(where_, "watch", *failed_);
}

task<void> watch_stream::close() {
  SLUICE_ASSERT(runtime::executor::current() == home_, "an etcd watch is used only on the executor that made it");
  if (closed_) co_return;
  closed_ = true;
  co_await conn_->close();  // a next() waiting in another task sees the end and then `closed_`
}

}  // namespace detail

// --- watch -------------------------------------------------------------------------------------

watch::watch() noexcept = default;
watch::watch(std::unique_ptr<detail::watch_stream> stream) noexcept : stream_(std::move(stream)) {}
watch::watch(watch&&) noexcept = default;
watch& watch::operator=(watch&&) noexcept = default;
watch::~watch() = default;

task<io::result<watch_batch>> watch::next() {
  if (!stream_) co_return io::error(make_error_code(errc::watch_ended), "etcd watch: not watching");
  co_return co_await stream_->next();
}

task<void> watch::close() {
  if (stream_) co_await stream_->close();
}

bool watch::is_open() const noexcept { return stream_ && stream_->is_open(); }
std::int64_t watch::id() const noexcept { return stream_ ? stream_->id() : 0; }
std::int64_t watch::created_revision() const noexcept { return stream_ ? stream_->created_revision() : 0; }
std::int64_t watch::compact_revision() const noexcept { return stream_ ? stream_->compact_revision() : 0; }

// --- client::watch -----------------------------------------------------------------------------

task<io::result<etcd::watch>> client::watch(std::string key, std::int64_t start_revision) {
  return open_watch(std::move(key), {}, start_revision);
}

task<io::result<etcd::watch>> client::watch_prefix(std::string prefix, std::int64_t start_revision) {
  auto [key, end] = detail::prefix_range(prefix);
  return open_watch(std::move(key), std::move(end), start_revision);
}

task<io::result<etcd::watch>> client::open_watch(std::string key, std::string range_end, std::int64_t start_revision) {
  check_home();
  auto opened = co_await runtime::with_timeout(
      detail::watch_stream::open(where_, options_.max_response_bytes, detail::watch_create_body(key, range_end, start_revision),
                                 options_.dead_peer_timeout),
      options_.request_timeout);
  if (!opened) {
    co_return fail("watch", io::error(std::make_error_code(std::errc::timed_out),
                                      "not created after " + std::to_string(options_.request_timeout.count()) + " ms"));
  }
  if (!*opened) co_return fail("watch", opened->error());
  co_return etcd::watch(std::move(**opened));
}

}  // namespace sluice::etcd
