#include <sluice/nats/client.hpp>
#include <sluice/nats/connectors.hpp>
#include <sluice/nats/jetstream.hpp>

#include <sluice/runtime/log.hpp>

#include <deque>
#include <map>

namespace sluice::nats {
namespace {

constexpr std::size_t max_in_flight = 1024;  // publishes awaiting their PubAck

void put_u64(std::vector<std::byte>& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::byte>(v >> (8 * i)));
}

class jetstream_sink final : public dataflow::sink_connector<std::string> {
 public:
  jetstream_sink(dataflow::connector_context ctx, nats_url url) : ctx_(std::move(ctx)), url_(std::move(url)) {}

  runtime::task<io::result<void>> recover(dataflow::sink_recovery from) override {
    // Message ids "<job>.<run>/<task>/<checkpoint>/<n>": a replay of this run repeats them (and
    // JetStream drops it), another job's or a fresh start's never does.
    if (auto named = dataflow::require_run(from, "jetstream sink '" + url_.name + "'"); !named) co_return named.error();
    id_prefix_ = ctx_.job + "." + from.run;
    auto c = co_await connection::connect(url_.server);
    if (!c) co_return c.error();
    conn_ = std::move(c).value();
    auto stream = co_await stream_for_subject(*conn_, url_.name);
    std::string name;
    if (stream) {
      name = stream.value();
    } else {
      name = url_.name;
      for (char& ch : name) {
        if (ch == '.' || ch == '*' || ch == '>') ch = '_';
      }
      std::vector<std::string> subjects;
      subjects.push_back(url_.name);
      auto made = co_await create_stream(*conn_, name, std::move(subjects));
      if (!made) {
        // Another sink made it between the lookup and the create (another task of this job, or
        // another job into the same subject): the server refuses the second ("subjects overlap
        // with an existing stream"), and the stream that now stores the subject is the one.
        auto raced = co_await stream_for_subject(*conn_, url_.name);
        if (!raced) co_return made.error();
        name = raced.value();
      }
    }
    auto info = co_await get_stream_info(*conn_, name);
    if (!info) co_return info.error();
    if (info.value().duplicate_window.count() == 0) {
      co_return what("stream " + name + " has duplicate_window 0: a replayed batch would be stored twice, refused");
    }
    pending_.clear();
    staged_.clear();
    auto decoded = decode(from.precommitted);
    if (!decoded) co_return decoded.error();
    if (pending_.empty()) co_return io::result<void>{};
    co_return co_await commit(pending_.rbegin()->first);
  }

  runtime::task<io::result<void>> write(const std::string& record) override {
    // A record the server cannot take fails here, naming it: at the commit it would be in the
    // checkpoint already, and every rerun's recovery would fail on it again.
    if (conn_ && record.size() > max_record_bytes()) {
      co_return what("a record of " + std::to_string(record.size()) + " bytes (" + record.substr(0, 40) +
                     (record.size() > 40 ? "...)" : ")") + " does not fit in one message: the server's max_payload is " +
                     std::to_string(conn_->max_payload()) + " bytes, headers (Nats-Msg-Id) included");
    }
    staged_.push_back(record);
    co_return io::result<void>{};
  }

  runtime::task<io::result<std::vector<std::byte>>> precommit(snapshot::checkpoint_id id) override {
    auto& batch = pending_[id];
    for (auto& r : staged_) batch.push_back(std::move(r));
    staged_.clear();
    std::vector<std::byte> out;
    put_u64(out, pending_.size());
    for (const auto& [cid, records] : pending_) {
      put_u64(out, cid);
      put_u64(out, records.size());
      for (const auto& r : records) {
        put_u64(out, r.size());
        const auto* p = reinterpret_cast<const std::byte*>(r.data());
        out.insert(out.end(), p, p + r.size());
      }
    }
    co_return out;
  }

  runtime::task<io::result<void>> commit(snapshot::checkpoint_id id) override {
    std::deque<std::shared_ptr<pending_reply>> in_flight;
    for (auto it = pending_.begin(); it != pending_.end() && it->first <= id; ++it) {
      std::uint64_t n = 0;
      for (const auto& record : it->second) {
        const std::string msg_id =
            id_prefix_ + "/" + std::to_string(ctx_.task) + "/" + std::to_string(it->first) + "/" + std::to_string(n++);
        auto slot = co_await publish_async(*conn_, url_.name, record, msg_id);
        if (!slot) co_return slot.error();
        in_flight.push_back(std::move(slot).value());
        if (in_flight.size() >= max_in_flight) {
          auto ack = co_await await_ack(*conn_, std::move(in_flight.front()));
          in_flight.pop_front();
          if (!ack) co_return what("commit of checkpoint " + std::to_string(it->first) + ": " + ack.error().message());
        }
      }
    }
    (void)co_await conn_->flush();
    while (!in_flight.empty()) {
      auto ack = co_await await_ack(*conn_, std::move(in_flight.front()));
      in_flight.pop_front();
      if (!ack) co_return what("commit of checkpoint " + std::to_string(id) + ": " + ack.error().message());
      if (ack.value().duplicate) ++duplicates_;
    }
    pending_.erase(pending_.begin(), pending_.upper_bound(id));
    co_return io::result<void>{};
  }

  runtime::task<void> close() override {
    if (conn_) co_await conn_->close();
  }

 private:
  // The largest record that goes out as one message: max_payload counts the header block too
  // ("NATS/1.0\r\nNats-Msg-Id: <id>\r\n\r\n", the id's numbers at their widest).
  std::size_t max_record_bytes() const {
    const std::size_t headers = std::string("NATS/1.0\r\nNats-Msg-Id: \r\n\r\n").size() + id_prefix_.size() + 3 * 21;
    return conn_->max_payload() > headers ? conn_->max_payload() - headers : 0;
  }

  io::error what(std::string why) const {
    return io::error(std::make_error_code(std::errc::protocol_error),
                     "jetstream sink " + url_.name + " on " + url_.server_text + ": " + std::move(why));
  }

  io::result<void> decode(std::span<const std::byte> in) {
    std::size_t at = 0;
    bool short_input = false;
    auto get = [&]() -> std::uint64_t {
      if (in.size() - at < 8) {
        short_input = true;
        return 0;
      }
      std::uint64_t v = 0;
      for (int i = 0; i < 8; ++i) v |= std::uint64_t(std::to_integer<unsigned>(in[at + i])) << (8 * i);
      at += 8;
      return v;
    };
    if (in.empty()) return {};
    const std::uint64_t batches = get();
    for (std::uint64_t b = 0; b < batches && !short_input; ++b) {
      const std::uint64_t cid = get();
      const std::uint64_t count = get();
      auto& records = pending_[cid];
      for (std::uint64_t r = 0; r < count && !short_input; ++r) {
        const std::uint64_t size = get();
        if (short_input || size > in.size() - at) {
          short_input = true;
          break;
        }
        records.emplace_back(reinterpret_cast<const char*>(in.data() + at), size);
        at += size;
      }
    }
    if (short_input || at != in.size()) {
      pending_.clear();
      return what("the precommitted state (" + std::to_string(in.size()) + " bytes) does not decode");
    }
    return {};
  }

  dataflow::connector_context ctx_;
  std::string id_prefix_;
  nats_url url_;
  std::unique_ptr<connection> conn_;
  std::vector<std::string> staged_;
  std::map<snapshot::checkpoint_id, std::vector<std::string>> pending_;
  std::uint64_t duplicates_ = 0;
};

}  // namespace

std::unique_ptr<dataflow::sink_connector<std::string>> make_jetstream_sink(const dataflow::connector_context& ctx,
                                                                           const nats_url& url) {
  return std::make_unique<jetstream_sink>(ctx, url);
}

dataflow::sink_spec<std::string> jetstream_sink_spec(const nats_url& url) {
  dataflow::sink_spec<std::string> spec;
  spec.identity = {"sink=nats", "nats.subject=" + url.name};
  spec.make = [url](const dataflow::connector_context& ctx) { return make_jetstream_sink(ctx, url); };
  return spec;
}

}  // namespace sluice::nats
