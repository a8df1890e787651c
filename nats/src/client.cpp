#include <sluice/nats/client.hpp>

#include <sluice/runtime/timer.hpp>

#include <nlohmann/json.hpp>

#include <charconv>
#include <random>

namespace sluice::nats {
namespace {

constexpr std::size_t max_line = 16 * 1024;

std::vector<std::string_view> split_ws(std::string_view s) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
    std::size_t j = i;
    while (j < s.size() && s[j] != ' ' && s[j] != '\t') ++j;
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

std::optional<std::size_t> number(std::string_view s) {
  std::size_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || p != s.data() + s.size()) return std::nullopt;
  return v;
}

bool starts_with_ci(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (std::size_t i = 0; i < prefix.size(); ++i) {
    if (std::toupper(static_cast<unsigned char>(s[i])) != prefix[i]) return false;
  }
  return true;
}

std::string header_block(const std::vector<std::string>& headers) {
  std::string h = "NATS/1.0\r\n";
  for (const auto& line : headers) h.append(line).append("\r\n");
  h.append("\r\n");
  return h;
}

runtime::task<bool> wait_on(runtime::event* e) { co_return co_await e->wait(); }

}  // namespace

int message::status() const {
  if (headers.size() < 12 || headers.compare(0, 9, "NATS/1.0 ") != 0) return 0;
  return number(std::string_view(headers).substr(9, 3)).value_or(0);
}

std::optional<std::string> message::header(std::string_view name) const {
  std::string_view h(headers);
  std::size_t pos = h.find("\r\n");
  while (pos != std::string_view::npos && pos + 2 < h.size()) {
    const std::size_t start = pos + 2;
    const std::size_t end = h.find("\r\n", start);
    if (end == std::string_view::npos) break;
    std::string_view line = h.substr(start, end - start);
    if (line.size() > name.size() && line.substr(0, name.size()) == name && line[name.size()] == ':') {
      std::string_view v = line.substr(name.size() + 1);
      while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
      return std::string(v);
    }
    pos = end;
  }
  return std::nullopt;
}

runtime::task<std::optional<message>> subscription::next() { co_return co_await queue_.receive(); }

connection::connection(io::tcp_stream stream, options opts) : stream_(std::move(stream)), opts_(std::move(opts)) {
  server_ = stream_.peer().to_string();
  std::random_device rd;
  std::uint64_t r = (std::uint64_t{rd()} << 32) ^ rd();
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(r));
  inbox_ = std::string("_INBOX.") + hex;
}

connection::~connection() = default;

io::error connection::error(std::string what) const {
  return io::error(std::make_error_code(std::errc::protocol_error), "nats " + server_ + ": " + std::move(what));
}

io::result<void> connection::check_open() const {
  if (failure_) return *failure_;
  if (closing_) return error("connection closed");
  return {};
}

void connection::fail(std::string why) {
  if (!failure_) failure_ = error(std::move(why));
  for (auto& [sid, sub] : subs_) sub->queue_.close();
  for (auto& [token, slot] : requests_) slot->done.set();
  requests_.clear();
  for (auto& slot : pongs_) slot->done.set();
  pongs_.clear();
  out_ready_.set();
  out_drained_.set();
  ended_.set();
}

runtime::task<io::result<std::string>> connection::read_line() {
  for (;;) {
    const std::size_t eol = buf_.find("\r\n");
    if (eol != std::string::npos) {
      std::string line = buf_.substr(0, eol);
      buf_.erase(0, eol + 2);
      co_return line;
    }
    if (buf_.size() > max_line) co_return error("a line longer than " + std::to_string(max_line) + " bytes during the handshake");
    std::byte chunk[4096];
    auto n = co_await stream_.recv(chunk);
    if (!n) co_return n.error();
    if (n.value() == 0) co_return error("the server closed the connection during the handshake");
    buf_.append(reinterpret_cast<const char*>(chunk), n.value());
  }
}

runtime::task<io::result<void>> connection::handshake() {
  auto info = co_await read_line();
  if (!info) co_return info.error();
  if (info.value().rfind("INFO ", 0) != 0) co_return error("expected INFO, got '" + info.value().substr(0, 80) + "'");
  auto parsed = nlohmann::json::parse(info.value().substr(5), nullptr, false);
  if (parsed.is_discarded()) co_return error("INFO is not JSON");
  max_payload_ = parsed.value("max_payload", std::size_t{1} << 20);
  if (!parsed.value("headers", false)) co_return error("the server does not support headers (NATS 2.2 or later needed)");
  nlohmann::json c = {{"verbose", false}, {"pedantic", false}, {"headers", true}, {"no_responders", true},
                      {"lang", "c++/sluice"}, {"version", "0.1"}, {"protocol", 1}, {"name", opts_.name}};
  std::string hello = "CONNECT " + c.dump() + "\r\nPING\r\n";
  auto sent = co_await stream_.send_all(std::as_bytes(std::span(hello.data(), hello.size())));
  if (!sent) co_return sent.error();
  for (;;) {
    auto line = co_await read_line();
    if (!line) co_return line.error();
    if (line.value() == "PONG") co_return io::result<void>{};
    if (line.value().rfind("-ERR", 0) == 0) co_return error("CONNECT refused: " + line.value());
    if (line.value() == "PING") {
      static constexpr char pong[] = "PONG\r\n";
      auto s = co_await stream_.send_all(std::as_bytes(std::span(pong, 6)));
      if (!s) co_return s.error();
    }
    // +OK, INFO: nothing to do
  }
}

runtime::task<io::result<std::unique_ptr<connection>>> connection::connect(io::address server, options opts) {
  auto stream = co_await io::tcp_stream::connect(server);
  if (!stream) co_return stream.error();
  (void)stream.value().set_nodelay(true);
  const auto timeout = opts.connect_timeout;
  std::unique_ptr<connection> c(new connection(std::move(stream).value(), std::move(opts)));
  auto done = co_await runtime::with_timeout(c->handshake(), timeout);
  if (!done) {
    co_await c->stream_.close();
    co_return c->error("no answer to CONNECT within " + std::to_string(timeout.count()) + " ms");
  }
  if (!*done) {
    co_await c->stream_.close();
    co_return done->error();
  }
  c->tasks_.spawn(c->reader());
  c->tasks_.spawn(c->writer());
  auto inbox = co_await c->subscribe(c->inbox_ + ".*");
  if (!inbox) {
    co_await c->close();
    co_return inbox.error();
  }
  c->inbox_sid_ = inbox.value()->sid();
  co_return std::move(c);
}

void connection::append(std::string_view bytes) {
  out_.append(bytes);
  queued_ += bytes.size();
  out_ready_.set();
}

runtime::task<io::result<void>> connection::publish(std::string subject, std::string payload, std::vector<std::string> headers,
                                                    std::string reply) {
  for (;;) {
    if (auto ok = check_open(); !ok) co_return ok;
    if (out_.size() < opts_.max_outgoing_bytes) break;
    out_drained_.reset();
    const bool woke = co_await out_drained_.wait();
    if (!woke) co_return error("publish on " + subject + " stopped");
  }
  if (payload.size() > max_payload_) {
    co_return error("publish on " + subject + ": payload of " + std::to_string(payload.size()) +
                    " bytes exceeds the server's max_payload " + std::to_string(max_payload_));
  }
  std::string line;
  if (headers.empty()) {
    line = "PUB " + subject + (reply.empty() ? "" : " " + reply) + " " + std::to_string(payload.size()) + "\r\n";
    append(line);
  } else {
    const std::string h = header_block(headers);
    line = "HPUB " + subject + (reply.empty() ? "" : " " + reply) + " " + std::to_string(h.size()) + " " +
           std::to_string(h.size() + payload.size()) + "\r\n";
    append(line);
    append(h);
  }
  append(payload);
  append("\r\n");
  co_return io::result<void>{};
}

runtime::task<io::result<void>> connection::flush() {
  const std::uint64_t target = queued_;
  while (sent_ < target) {
    if (auto ok = check_open(); !ok) co_return ok;
    out_drained_.reset();
    const bool woke = co_await out_drained_.wait();
    if (!woke) co_return error("flush stopped");
  }
  co_return check_open();
}

runtime::task<io::result<void>> connection::round_trip(std::chrono::milliseconds timeout) {
  if (auto ok = check_open(); !ok) co_return ok;
  auto slot = std::make_shared<pending_reply>();
  pongs_.push_back(slot);
  append("PING\r\n");
  auto woke = co_await runtime::with_timeout(wait_on(&slot->done), timeout);
  if (!woke) co_return error("no PONG within " + std::to_string(timeout.count()) + " ms");
  co_return check_open();
}

runtime::task<io::result<std::shared_ptr<subscription>>> connection::subscribe(std::string subject) {
  if (auto ok = check_open(); !ok) co_return ok.error();
  const std::uint64_t sid = next_sid_++;
  std::shared_ptr<subscription> sub(new subscription(sid, opts_.subscription_queue));
  subs_.emplace(sid, sub);
  append("SUB " + subject + " " + std::to_string(sid) + "\r\n");
  co_return sub;
}

runtime::task<io::result<void>> connection::unsubscribe(std::shared_ptr<subscription> sub) {
  if (subs_.erase(sub->sid()) == 0) co_return io::result<void>{};
  sub->queue_.close();
  if (auto ok = check_open(); !ok) co_return ok;
  append("UNSUB " + std::to_string(sub->sid()) + "\r\n");
  co_return io::result<void>{};
}

runtime::task<io::result<std::shared_ptr<pending_reply>>> connection::send_request(std::string subject, std::string payload,
                                                                                  std::vector<std::string> headers) {
  const std::string token = std::to_string(next_token_++);
  auto slot = std::make_shared<pending_reply>();
  requests_.emplace(token, slot);
  auto sent = co_await publish(std::move(subject), std::move(payload), std::move(headers), inbox_ + "." + token);
  if (!sent) {
    requests_.erase(token);
    co_return sent.error();
  }
  co_return slot;
}

runtime::task<io::result<message>> connection::await_reply(std::shared_ptr<pending_reply> slot, std::chrono::milliseconds timeout) {
  if (!slot->reply && !failure_) {
    auto woke = co_await runtime::with_timeout(wait_on(&slot->done), timeout);
    if (!woke) {
      for (auto it = requests_.begin(); it != requests_.end(); ++it) {
        if (it->second == slot) {
          requests_.erase(it);
          break;
        }
      }
      co_return error("no reply within " + std::to_string(timeout.count()) + " ms");
    }
  }
  if (slot->reply) co_return std::move(*slot->reply);
  if (failure_) co_return *failure_;
  co_return error("request abandoned");
}

runtime::task<io::result<message>> connection::request(std::string subject, std::string payload, std::chrono::milliseconds timeout,
                                                       std::vector<std::string> headers) {
  auto slot = co_await send_request(std::move(subject), std::move(payload), std::move(headers));
  if (!slot) co_return slot.error();
  co_return co_await await_reply(std::move(slot).value(), timeout);
}

runtime::task<void> connection::writer() {
  for (;;) {
    while (out_.empty() && !failure_ && !closing_) {
      out_ready_.reset();
      const bool woke = co_await out_ready_.wait();
      if (!woke) co_return;
    }
    if (failure_ || (closing_ && out_.empty())) co_return;
    std::string batch;
    batch.swap(out_);
    auto sent = co_await stream_.send_all(std::as_bytes(std::span(batch.data(), batch.size())));
    if (!sent) {
      fail("send failed: " + sent.error().message());
      co_return;
    }
    sent_ += batch.size();
    out_drained_.set();
  }
}

int connection::parse_one(message& out, std::uint64_t& sid) {
  const std::size_t eol = buf_.find("\r\n");
  if (eol == std::string::npos) {
    if (buf_.size() > max_line) {
      fail("protocol error: a control line longer than " + std::to_string(max_line) + " bytes");
      return -1;
    }
    return 0;
  }
  std::string_view line(buf_.data(), eol);
  if (starts_with_ci(line, "MSG ") || starts_with_ci(line, "HMSG ")) {
    const bool with_headers = starts_with_ci(line, "HMSG ");
    auto words = split_ws(line);
    const std::size_t want = with_headers ? 5 : 4;
    if (words.size() != want && words.size() != want + 1) {
      fail("protocol error: malformed line '" + std::string(line.substr(0, 200)) + "'");
      return -1;
    }
    const bool has_reply = words.size() == want + 1;
    auto s = number(words[2]);
    auto total = number(words.back());
    std::optional<std::size_t> hdr = with_headers ? number(words[words.size() - 2]) : std::optional<std::size_t>(0);
    if (!s || !total || !hdr || *hdr > *total) {
      fail("protocol error: bad sid or size in '" + std::string(line.substr(0, 200)) + "'");
      return -1;
    }
    if (*total > max_payload_ + 64 * 1024) {  // headers may add to max_payload
      fail("protocol error: a message of " + std::to_string(*total) + " bytes exceeds max_payload " + std::to_string(max_payload_));
      return -1;
    }
    const std::size_t need = eol + 2 + *total + 2;
    if (buf_.size() < need) return 0;
    if (buf_.compare(eol + 2 + *total, 2, "\r\n") != 0) {
      fail("protocol error: a message's payload is not followed by CRLF ('" + std::string(line.substr(0, 200)) + "')");
      return -1;
    }
    out.subject = std::string(words[1]);
    out.reply = has_reply ? std::string(words[3]) : std::string();
    out.headers = buf_.substr(eol + 2, *hdr);
    out.payload = buf_.substr(eol + 2 + *hdr, *total - *hdr);
    sid = *s;
    buf_.erase(0, need);
    return 1;
  }
  std::string copy(line);
  buf_.erase(0, eol + 2);
  if (copy == "PING") {
    append("PONG\r\n");
    return 2;
  }
  if (copy == "PONG") {
    if (!pongs_.empty()) {
      pongs_.front()->done.set();
      pongs_.pop_front();
    }
    return 2;
  }
  if (copy == "+OK" || copy.rfind("INFO ", 0) == 0) return 2;
  if (copy.rfind("-ERR", 0) == 0) {
    fail("server error: " + copy);
    return -1;
  }
  fail("protocol error: unknown line '" + copy.substr(0, 200) + "'");
  return -1;
}

runtime::task<void> connection::reader() {
  std::vector<std::byte> chunk(64 * 1024);
  for (;;) {
    for (;;) {
      message m;
      std::uint64_t sid = 0;
      const int r = parse_one(m, sid);
      if (r < 0) co_return;
      if (r == 0) break;
      if (r == 2) continue;
      if (sid == inbox_sid_ && inbox_sid_ != 0) {
        const std::string token = m.subject.substr(m.subject.rfind('.') + 1);
        auto it = requests_.find(token);
        if (it != requests_.end()) {
          it->second->reply = std::move(m);
          it->second->done.set();
          requests_.erase(it);
        }
        continue;
      }
      auto it = subs_.find(sid);
      if (it == subs_.end()) continue;  // unsubscribed meanwhile
      auto sub = it->second;
      const bool queued = co_await sub->queue_.send(std::move(m));
      if (!queued && closing_) co_return;
    }
    auto n = co_await stream_.recv(chunk);
    if (closing_) co_return;
    if (!n) {
      fail("receive failed: " + n.error().message());
      co_return;
    }
    if (n.value() == 0) {
      fail("the server closed the connection");
      co_return;
    }
    buf_.append(reinterpret_cast<const char*>(chunk.data()), n.value());
  }
}

runtime::task<void> connection::close() {
  if (!closing_) {
    if (!failure_) (void)co_await runtime::with_timeout(flush(), std::chrono::seconds(2));
    closing_ = true;
    for (auto& [sid, sub] : subs_) sub->queue_.close();
    out_ready_.set();
    tasks_.request_stop();
    co_await stream_.close();
    co_await tasks_.join();
    if (!failure_) failure_ = error("connection closed");
    for (auto& [token, slot] : requests_) slot->done.set();
    requests_.clear();
    for (auto& slot : pongs_) slot->done.set();
    pongs_.clear();
  }
}

}  // namespace sluice::nats
