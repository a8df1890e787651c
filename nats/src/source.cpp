#include <sluice/nats/client.hpp>
#include <sluice/nats/connectors.hpp>
#include <sluice/nats/jetstream.hpp>

#include <sluice/runtime/event.hpp>
#include <sluice/runtime/scope.hpp>
#include <sluice/runtime/timer.hpp>

#include <nlohmann/json.hpp>

#include <cstring>
#include <deque>
#include <random>
#include <stdexcept>

namespace sluice::nats {
namespace {

constexpr std::size_t buffer_limit = 4096;  // messages fetched, not yet emitted
constexpr std::size_t batch_size = 512;
constexpr auto fetch_expires = std::chrono::seconds(1);
constexpr auto fetch_grace = std::chrono::seconds(5);  // beyond expires: no answer is an error

void put_u64(std::vector<std::byte>& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::byte>(v >> (8 * i)));
}
std::uint64_t get_u64(std::span<const std::byte> in, std::size_t at) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= std::uint64_t(std::to_integer<unsigned>(in[at + i])) << (8 * i);
  return v;
}

class jetstream_source final : public dataflow::source_connector<std::string> {
 public:
  jetstream_source(dataflow::connector_context ctx, nats_url url, bool bounded)
      : ctx_(std::move(ctx)), url_(std::move(url)), bounded_(bounded) {}

  void restore(std::span<const std::byte> position) override {
    if (position.size() != 17) {
      throw std::runtime_error("jetstream source " + url_.name + ": a position of " + std::to_string(position.size()) +
                               " bytes does not decode (17 expected)");
    }
    last_ = get_u64(position, 0);
    bound_ = get_u64(position, 8);
    bound_fixed_ = position[16] != std::byte{0};
  }

  std::vector<std::byte> position() const override {
    std::vector<std::byte> out;
    put_u64(out, last_);
    put_u64(out, bound_);
    out.push_back(bound_fixed_ ? std::byte{1} : std::byte{0});
    return out;
  }

  runtime::task<io::result<void>> open() override {
    auto c = co_await connection::connect(url_.server);
    if (!c) co_return c.error();
    conn_ = std::move(c).value();
    auto info = co_await get_stream_info(*conn_, url_.name);
    if (!info) co_return info.error();
    if (bounded_ && !bound_fixed_) {
      bound_ = info.value().last_seq;
      bound_fixed_ = true;
    }
    if (info.value().first_seq > last_ + 1 && info.value().messages > 0 && last_ > 0) {
      co_return what("messages " + std::to_string(last_ + 1) + ".." + std::to_string(info.value().first_seq - 1) +
                     " after the restored position were removed from the stream (its limits)");
    }
    fetched_ = last_;
    if (bounded_ && last_ >= bound_) co_return io::result<void>{};
    auto consumer = co_await create_pull_consumer(*conn_, url_.name, last_ + 1);
    if (!consumer) co_return consumer.error();
    consumer_ = consumer.value();
    std::random_device rd;
    inbox_ = "_INBOX.sluice_fetch." + std::to_string(rd()) + std::to_string(rd());
    auto sub = co_await conn_->subscribe(inbox_);
    if (!sub) co_return sub.error();
    sub_ = sub.value();
    tasks_.spawn(fetcher());
    co_return io::result<void>{};
  }

  runtime::task<io::result<dataflow::read_status>> read(dataflow::source_output<std::string>& out, std::size_t max) override {
    std::size_t n = 0;
    while (!buffer_.empty() && n < max) {
      stream_message& m = buffer_.front();
      last_ = m.seq;
      if (m.seq % ctx_.parallelism == ctx_.subtask) {
        out.emit(m.payload);
        ++n;
      }
      buffer_.pop_front();
    }
    space_.set();
    if (bounded_ && last_ >= bound_) co_return dataflow::read_status::end;
    if (!buffer_.empty()) co_return dataflow::read_status::more;
    if (failure_) co_return *failure_;
    co_return n > 0 ? dataflow::read_status::more : dataflow::read_status::idle;
  }

  runtime::task<void> wait_readable() override {
    while (buffer_.empty() && !failure_ && !(bounded_ && last_ >= bound_)) {
      ready_.reset();
      const bool woke = co_await ready_.wait();
      if (!woke) co_return;
    }
  }

  std::optional<dataflow::source_progress> progress() const noexcept override {
    if (!bounded_) return std::nullopt;
    return dataflow::source_progress{last_, bound_};
  }

  runtime::task<void> close() override {
    tasks_.request_stop();
    co_await tasks_.join();
    if (conn_) co_await conn_->close();
  }

 private:
  io::error what(std::string why) const {
    return io::error(std::make_error_code(std::errc::protocol_error),
                     "jetstream source " + url_.name + " on " + url_.server_text + ": " + std::move(why));
  }

  void fail(io::error e) {
    if (!failure_) failure_ = std::move(e);
    ready_.set();
  }

  // Fetches batches into buffer_ until the bound, an error, or a stop.
  runtime::task<void> fetcher() {
    const std::string next_subject = "$JS.API.CONSUMER.MSG.NEXT." + url_.name + "." + consumer_;
    while (!(bounded_ && fetched_ >= bound_)) {
      while (buffer_.size() + batch_size > buffer_limit) {
        space_.reset();
        const bool woke = co_await space_.wait();
        if (!woke) co_return;
      }
      nlohmann::json req = {{"batch", batch_size},
                            {"expires", std::chrono::duration_cast<std::chrono::nanoseconds>(fetch_expires).count()}};
      std::vector<std::string> no_headers;
      auto sent = co_await conn_->publish(next_subject, req.dump(), std::move(no_headers), inbox_);
      if (!sent) {
        fail(what("fetch: " + sent.error().message()));
        co_return;
      }
      std::size_t got = 0;
      while (got < batch_size) {
        auto m = co_await runtime::with_timeout(sub_->next(), fetch_expires + fetch_grace);
        if (!m) {
          fail(what("fetch: no answer from the server within " +
                    std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(fetch_expires + fetch_grace).count()) + " ms"));
          co_return;
        }
        if (!*m) {
          fail(what("fetch: " + (conn_->failure() ? conn_->failure()->message() : std::string("connection ended"))));
          co_return;
        }
        message msg = std::move(**m);
        const int status = msg.status();
        if (status == 404 || status == 408) break;  // no messages now / the request expired
        if (status == 409) {
          fail(what("fetch: the server ended the pull (" + msg.headers.substr(0, 200) + ")"));
          co_return;
        }
        if (status == 100) continue;  // heartbeat
        if (status != 0) {
          fail(what("fetch: status " + std::to_string(status)));
          co_return;
        }
        auto sm = stream_message_from(std::move(msg));
        if (!sm) {
          fail(what("fetch: a message without a $JS.ACK reply subject"));
          co_return;
        }
        ++got;
        if (sm->seq <= fetched_) continue;
        fetched_ = sm->seq;
        if (bounded_ && sm->seq > bound_) break;
        buffer_.push_back(std::move(*sm));
        ready_.set();
        if (bounded_ && fetched_ >= bound_) break;
      }
    }
    ready_.set();
  }

  dataflow::connector_context ctx_;
  nats_url url_;
  bool bounded_;
  std::uint64_t last_ = 0;     // the last sequence passed by read()
  std::uint64_t bound_ = 0;    // with bounded_: the last sequence to read
  bool bound_fixed_ = false;
  std::uint64_t fetched_ = 0;  // the last sequence the fetcher buffered
  std::unique_ptr<connection> conn_;
  std::shared_ptr<subscription> sub_;
  std::string consumer_, inbox_;
  std::deque<stream_message> buffer_;
  std::optional<io::error> failure_;
  runtime::event ready_, space_;
  runtime::scope tasks_;
};

}  // namespace

std::unique_ptr<dataflow::source_connector<std::string>> make_jetstream_source(const dataflow::connector_context& ctx,
                                                                               const nats_url& url, bool bounded) {
  return std::make_unique<jetstream_source>(ctx, url, bounded);
}

io::result<nats_url> parse_url(std::string_view url) {
  auto bad = [&](const std::string& why) {
    return io::error(std::make_error_code(std::errc::invalid_argument), "nats URL '" + std::string(url) + "': " + why);
  };
  constexpr std::string_view scheme = "nats://";
  if (url.substr(0, scheme.size()) != scheme) return bad("does not start with nats://");
  std::string_view rest = url.substr(scheme.size());
  const std::size_t slash = rest.find('/');
  if (slash == std::string_view::npos || slash + 1 >= rest.size()) return bad("no /STREAM or /SUBJECT after the server");
  nats_url out;
  out.server_text = std::string(rest.substr(0, slash));
  out.name = std::string(rest.substr(slash + 1));
  auto a = io::address::parse(out.server_text);
  if (!a) return bad("the server is not IP:PORT (" + a.error().message() + ")");
  out.server = a.value();
  return out;
}

dataflow::source_spec<std::string> jetstream_source_spec(const nats_url& url, bool bounded) {
  dataflow::source_spec<std::string> spec;
  spec.identity = {"source=nats", "nats.stream=" + url.name, std::string("nats.bounded=") + (bounded ? "yes" : "no")};
  spec.make = [url, bounded](const dataflow::connector_context& ctx) { return make_jetstream_source(ctx, url, bounded); };
  return spec;
}

}  // namespace sluice::nats
