#include <sluice/nats/jetstream.hpp>

#include <nlohmann/json.hpp>

#include <charconv>

namespace sluice::nats {
namespace {

io::error api_error(const connection& c, const std::string& what, const std::string& why) {
  return io::error(std::make_error_code(std::errc::protocol_error), "nats " + c.server_name() + ": " + what + ": " + why);
}

// Parses a JetStream API answer; an {"error":..} or a status (503 no responders: JetStream off).
io::result<nlohmann::json> api_answer(const connection& c, const std::string& what, const message& m) {
  if (m.status() == 503) return api_error(c, what, "no responders (is JetStream enabled on the server?)");
  if (m.status() != 0) return api_error(c, what, "status " + std::to_string(m.status()));
  auto j = nlohmann::json::parse(m.payload, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return api_error(c, what, "answer is not JSON: '" + m.payload.substr(0, 200) + "'");
  if (j.contains("error")) {
    const auto& e = j["error"];
    return api_error(c, what, e.value("description", std::string("?")) + " (code " + std::to_string(e.value("code", 0)) +
                                  ", err_code " + std::to_string(e.value("err_code", 0)) + ")");
  }
  return j;
}

stream_info info_from(const nlohmann::json& j) {
  stream_info s;
  const auto& cfg = j.at("config");
  s.name = cfg.value("name", std::string());
  s.duplicate_window = std::chrono::nanoseconds(cfg.value("duplicate_window", std::int64_t{0}));
  if (cfg.contains("subjects")) s.subjects = cfg["subjects"].get<std::vector<std::string>>();
  const auto& st = j.at("state");
  s.first_seq = st.value("first_seq", std::uint64_t{0});
  s.last_seq = st.value("last_seq", std::uint64_t{0});
  s.messages = st.value("messages", std::uint64_t{0});
  return s;
}

runtime::task<io::result<nlohmann::json>> api(connection& c, std::string subject, std::string body, std::string what) {
  auto reply = co_await c.request(std::move(subject), std::move(body), api_timeout);
  if (!reply) co_return reply.error();
  co_return api_answer(c, what, reply.value());
}

}  // namespace

runtime::task<io::result<stream_info>> create_stream(connection& c, std::string name, std::vector<std::string> subjects,
                                                     std::chrono::nanoseconds duplicate_window) {
  nlohmann::json cfg = {{"name", name},          {"subjects", subjects},   {"storage", "file"},
                        {"retention", "limits"}, {"discard", "old"},       {"num_replicas", 1},
                        {"duplicate_window", duplicate_window.count()}};
  auto j = co_await api(c, "$JS.API.STREAM.CREATE." + name, cfg.dump(), "create stream " + name);
  if (!j) co_return j.error();
  co_return info_from(j.value());
}

runtime::task<io::result<stream_info>> get_stream_info(connection& c, std::string name) {
  auto j = co_await api(c, "$JS.API.STREAM.INFO." + name, "", "stream info " + name);
  if (!j) co_return j.error();
  co_return info_from(j.value());
}

runtime::task<io::result<std::string>> stream_for_subject(connection& c, std::string subject) {
  nlohmann::json q = {{"subject", subject}};
  auto j = co_await api(c, "$JS.API.STREAM.NAMES", q.dump(), "find the stream of subject " + subject);
  if (!j) co_return j.error();
  const auto& names = j.value()["streams"];
  if (!names.is_array() || names.empty()) co_return api_error(c, "find the stream of subject " + subject, "no stream stores it");
  co_return names[0].get<std::string>();
}

runtime::task<io::result<std::shared_ptr<pending_reply>>> publish_async(connection& c, std::string subject, std::string payload,
                                                                       std::string msg_id) {
  std::vector<std::string> headers;
  headers.push_back("Nats-Msg-Id: " + msg_id);
  auto slot = co_await c.send_request(std::move(subject), std::move(payload), std::move(headers));
  co_return slot;
}

runtime::task<io::result<pub_ack>> await_ack(connection& c, std::shared_ptr<pending_reply> slot, std::chrono::milliseconds timeout) {
  auto reply = co_await c.await_reply(std::move(slot), timeout);
  if (!reply) co_return reply.error();
  auto j = api_answer(c, "publish", reply.value());
  if (!j) co_return j.error();
  pub_ack a;
  a.stream = j.value().value("stream", std::string());
  a.seq = j.value().value("seq", std::uint64_t{0});
  a.duplicate = j.value().value("duplicate", false);
  co_return a;
}

}  // namespace sluice::nats

namespace sluice::nats {

runtime::task<io::result<std::string>> create_pull_consumer(connection& c, std::string stream, std::uint64_t start_seq,
                                                            std::chrono::nanoseconds inactive_threshold) {
  nlohmann::json cfg = {{"deliver_policy", "by_start_sequence"}, {"opt_start_seq", start_seq}, {"ack_policy", "none"},
                        {"replay_policy", "instant"},            {"inactive_threshold", inactive_threshold.count()},
                        {"mem_storage", true}};
  nlohmann::json body = {{"stream_name", stream}, {"config", cfg}};
  auto j = co_await api(c, "$JS.API.CONSUMER.CREATE." + stream, body.dump(), "create a pull consumer on stream " + stream);
  if (!j) co_return j.error();
  co_return j.value().value("name", std::string());
}

std::optional<stream_message> stream_message_from(message m) {
  std::vector<std::string_view> tokens;
  std::string_view s(m.reply);
  for (std::size_t start = 0;;) {
    const std::size_t dot = s.find('.', start);
    tokens.push_back(s.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  // v1: $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending> (9 tokens);
  // v2 adds <domain>.<account hash> after ACK and a random token at the end (12 or more).
  if (tokens.size() < 9 || tokens[0] != "$JS" || tokens[1] != "ACK") return std::nullopt;
  const std::size_t base = tokens.size() == 9 ? 2 : 4;
  auto num = [](std::string_view t) -> std::optional<std::uint64_t> {
    std::uint64_t v = 0;
    auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec != std::errc{} || p != t.data() + t.size()) return std::nullopt;
    return v;
  };
  auto seq = num(tokens[base + 3]);
  auto ts = num(tokens[base + 5]);
  if (!seq || !ts) return std::nullopt;
  return stream_message{*seq, *ts, std::move(m.payload)};
}

}  // namespace sluice::nats
