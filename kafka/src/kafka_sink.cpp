// kafka_sink: exactly once through one Kafka transaction per commit with a marker offset; see
// kafka.hpp (the design and the hand-off at the top).
#include <sluice/kafka/kafka.hpp>

#include "conf.hpp"

#include <sluice/runtime/offload.hpp>

#include <librdkafka/rdkafka.h>

#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace sluice::kafka {

namespace {

struct batch {
  snapshot::checkpoint_id id = 0;
  std::vector<std::string> records;
};

void put_u64(std::vector<std::byte>& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::byte>(v >> (8 * i)));
}
std::uint64_t get_u64(std::span<const std::byte> in, std::size_t& at) {
  if (at + 8 > in.size()) throw std::runtime_error("kafka sink: precommitted bytes are truncated");
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= std::uint64_t(std::to_integer<unsigned>(in[at + i])) << (8 * i);
  at += 8;
  return v;
}

std::vector<std::byte> encode_batches(const std::vector<batch>& batches) {
  std::vector<std::byte> out;
  put_u64(out, batches.size());
  for (const auto& b : batches) {
    put_u64(out, b.id);
    put_u64(out, b.records.size());
    for (const auto& r : b.records) {
      put_u64(out, r.size());
      const auto* p = reinterpret_cast<const std::byte*>(r.data());
      out.insert(out.end(), p, p + r.size());
    }
  }
  return out;
}

std::vector<batch> decode_batches(std::span<const std::byte> in) {
  std::vector<batch> out;
  if (in.empty()) return out;
  std::size_t at = 0;
  std::uint64_t n = get_u64(in, at);
  for (std::uint64_t i = 0; i < n; ++i) {
    batch b;
    b.id = get_u64(in, at);
    std::uint64_t count = get_u64(in, at);
    for (std::uint64_t j = 0; j < count; ++j) {
      std::uint64_t len = get_u64(in, at);
      if (at + len > in.size()) throw std::runtime_error("kafka sink: precommitted bytes are truncated");
      b.records.emplace_back(reinterpret_cast<const char*>(in.data() + at), len);
      at += len;
    }
    out.push_back(std::move(b));
  }
  return out;
}

std::string error_text(rd_kafka_error_t* e) {
  std::string s = rd_kafka_error_string(e);
  rd_kafka_error_destroy(e);
  return s;
}

class kafka_sink final : public dataflow::sink_connector<std::string> {
 public:
  kafka_sink(kafka_options options, const dataflow::connector_context& ctx)
      : options_(std::move(options)), ctx_(ctx) {}
  ~kafka_sink() override {
    if (rk_ != nullptr) rd_kafka_destroy(rk_);
  }

  runtime::task<io::result<void>> recover(dataflow::sink_recovery from) override {
    if (auto named = dataflow::require_run(from, "kafka sink '" + options_.topic + "'"); !named) co_return named.error();
    run_ = std::move(from.run);
    where_ = "kafka sink '" + options_.topic + "' (transactional.id " + transactional_id(ctx_, run_) + ")";
    std::vector<batch> batches = decode_batches(from.precommitted);
    char errstr[512];
    rd_kafka_conf_t* conf = detail::new_conf();
    auto set = [&](const char* k, const std::string& v) {
      return rd_kafka_conf_set(conf, k, v.c_str(), errstr, sizeof errstr) == RD_KAFKA_CONF_OK;
    };
    if (!(set("bootstrap.servers", options_.brokers) && set("transactional.id", transactional_id(ctx_, run_)) &&
          set("enable.idempotence", "true"))) {
      rd_kafka_conf_destroy(conf);
      co_return io::error(std::make_error_code(std::errc::invalid_argument), where_ + ": config: " + errstr);
    }
    rk_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    if (rk_ == nullptr) {
      rd_kafka_conf_destroy(conf);
      co_return io::error(std::make_error_code(std::errc::io_error), where_ + ": rd_kafka_new: " + errstr);
    }
    char max_bytes[32];
    std::size_t max_bytes_size = sizeof max_bytes;
    if (rd_kafka_conf_get(rd_kafka_conf(rk_), "message.max.bytes", max_bytes, &max_bytes_size) == RD_KAFKA_CONF_OK) {
      max_message_bytes_ = std::strtoull(max_bytes, nullptr, 10);
    }
    // Fences a previous incarnation and aborts what it left open; then read the marker.
    std::string failure;
    std::int64_t marker = -1;
    auto init = [&] {
      if (rd_kafka_error_t* e = rd_kafka_init_transactions(rk_, 30000)) {
        failure = "init_transactions: " + error_text(e);
        return;
      }
      failure = read_marker(marker);
    };
    co_await runtime::offload(init);
    if (!failure.empty()) co_return io::error(std::make_error_code(std::errc::io_error), where_ + ": " + failure);
    committed_through_ = marker < 0 ? 0 : static_cast<snapshot::checkpoint_id>(marker);
    for (auto& b : batches)
      if (b.id > committed_through_) pending_.push_back(std::move(b));
    if (!pending_.empty()) co_return co_await commit(pending_.back().id);
    co_return io::result<void>{};
  }

  runtime::task<io::result<void>> write(const std::string& record) override {
    // A record the producer would refuse (MSG_SIZE_TOO_LARGE) fails here, naming it: at the commit
    // it would be in the checkpoint already, and every rerun's recovery would fail on it again.
    if (max_message_bytes_ > 0 && record.size() + message_overhead_bytes > max_message_bytes_) {
      const std::string shown = record.substr(0, 40) + (record.size() > 40 ? "..." : "");
      co_return io::error(std::make_error_code(std::errc::message_size),
                          where_ + ": a record of " + std::to_string(record.size()) + " bytes (" + shown +
                              ") is larger than one message: message.max.bytes is " +
                              std::to_string(max_message_bytes_) + ", framing included");
    }
    staged_.push_back(record);
    co_return io::result<void>{};
  }

  runtime::task<io::result<std::vector<std::byte>>> precommit(snapshot::checkpoint_id id) override {
    pending_.push_back(batch{id, std::move(staged_)});
    staged_.clear();
    co_return encode_batches(pending_);
  }

  runtime::task<io::result<void>> commit(snapshot::checkpoint_id id) override {
    if (id <= committed_through_) co_return io::result<void>{};
    std::size_t count = 0;
    while (count < pending_.size() && pending_[count].id <= id) ++count;
    std::string failure;
    auto txn = [&] { failure = run_transaction(count, id); };
    co_await runtime::offload(txn);
    if (!failure.empty())
      co_return io::error(std::make_error_code(std::errc::io_error),
                          where_ + ": commit of checkpoint " + std::to_string(id) + ": " + failure);
    pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(count));
    committed_through_ = id;
    co_return io::result<void>{};
  }

  runtime::task<void> close() override {
    if (rk_ == nullptr) co_return;
    auto shut = [this] {
      rd_kafka_destroy(rk_);
      rk_ = nullptr;
    };
    co_await runtime::offload(shut);
  }

 private:
  // On the blocking pool. "" on success.
  std::string read_marker(std::int64_t& marker) {
    char errstr[512];
    rd_kafka_conf_t* conf = detail::new_conf();
    rd_kafka_conf_set(conf, "bootstrap.servers", options_.brokers.c_str(), errstr, sizeof errstr);
    rd_kafka_conf_set(conf, "group.id", marker_group(ctx_, run_).c_str(), errstr, sizeof errstr);
    rd_kafka_conf_set(conf, "enable.auto.commit", "false", errstr, sizeof errstr);
    rd_kafka_t* c = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof errstr);
    if (c == nullptr) {
      rd_kafka_conf_destroy(conf);
      return std::string("marker consumer: ") + errstr;
    }
    rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(list, options_.topic.c_str(), 0);
    rd_kafka_resp_err_t err = rd_kafka_committed(c, list, 30000);
    std::string failure;
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
      failure = std::string("reading marker group '") + marker_group(ctx_, run_) + "': " + rd_kafka_err2str(err);
    else if (list->elems[0].err != RD_KAFKA_RESP_ERR_NO_ERROR)
      failure = std::string("reading marker group '") + marker_group(ctx_, run_) + "': " + rd_kafka_err2str(list->elems[0].err);
    else
      marker = list->elems[0].offset;  // RD_KAFKA_OFFSET_INVALID (-1001) when never committed
    rd_kafka_topic_partition_list_destroy(list);
    rd_kafka_consumer_close(c);
    rd_kafka_destroy(c);
    return failure;
  }

  // On the blocking pool: pending_[0..count) and the marker `id` in one transaction. "" on success.
  std::string run_transaction(std::size_t count, snapshot::checkpoint_id id) {
    if (rd_kafka_error_t* e = rd_kafka_begin_transaction(rk_)) return "begin_transaction: " + error_text(e);
    auto abort = [&](std::string why) {
      if (rd_kafka_error_t* e = rd_kafka_abort_transaction(rk_, 30000)) why += "; abort: " + error_text(e);
      return why;
    };
    for (std::size_t i = 0; i < count; ++i) {
      for (auto& r : pending_[i].records) {
        for (;;) {
          rd_kafka_resp_err_t err =
              rd_kafka_producev(rk_, RD_KAFKA_V_TOPIC(options_.topic.c_str()),
                                RD_KAFKA_V_VALUE(const_cast<char*>(r.data()), r.size()),
                                RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
          if (err == RD_KAFKA_RESP_ERR_NO_ERROR) break;
          if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL) return abort(std::string("produce: ") + rd_kafka_err2str(err));
          rd_kafka_poll(rk_, 10);  // the local queue is full: let deliveries drain it
        }
      }
    }
    rd_kafka_topic_partition_list_t* offsets = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(offsets, options_.topic.c_str(), 0)->offset = static_cast<std::int64_t>(id);
    rd_kafka_consumer_group_metadata_t* group = rd_kafka_consumer_group_metadata_new(marker_group(ctx_, run_).c_str());
    rd_kafka_error_t* e = rd_kafka_send_offsets_to_transaction(rk_, offsets, group, 30000);
    rd_kafka_consumer_group_metadata_destroy(group);
    rd_kafka_topic_partition_list_destroy(offsets);
    if (e != nullptr) return abort("send_offsets_to_transaction (marker): " + error_text(e));
    if (rd_kafka_error_t* c = rd_kafka_commit_transaction(rk_, 60000)) {
      bool abortable = rd_kafka_error_txn_requires_abort(c);
      std::string why = "commit_transaction: " + error_text(c);
      return abortable ? abort(why) : why;
    }
    return {};
  }

  kafka_options options_;
  dataflow::connector_context ctx_;
  std::string run_;  // sink_recovery::run: in the marker group and the transactional id
  std::string where_;
  rd_kafka_t* rk_ = nullptr;
  // The producer's message.max.bytes (0: unknown), and what librdkafka adds to a record's value
  // when it checks it (RD_KAFKAP_MESSAGE_V2_MAX_OVERHEAD: the varints and attributes of one record).
  std::size_t max_message_bytes_ = 0;
  static constexpr std::size_t message_overhead_bytes = 36;
  std::vector<std::string> staged_;
  std::vector<batch> pending_;
  snapshot::checkpoint_id committed_through_ = 0;
};

}  // namespace

namespace {
std::string with_run(const dataflow::connector_context& ctx, const std::string& run, const char* sep) {
  return ctx.job + sep + run + sep + std::to_string(ctx.task);
}
}  // namespace

std::string marker_group(const dataflow::connector_context& ctx, const std::string& run) {
  return "sluice." + with_run(ctx, run, ".");
}
std::string transactional_id(const dataflow::connector_context& ctx, const std::string& run) {
  return with_run(ctx, run, "-");
}

std::unique_ptr<dataflow::sink_connector<std::string>> make_kafka_sink(kafka_options options,
                                                                       const dataflow::connector_context& ctx) {
  return std::make_unique<kafka_sink>(std::move(options), ctx);
}

std::vector<std::byte> encode_position(const std::map<std::int32_t, partition_position>& p) {
  std::string text;
  for (const auto& [part, pos] : p)
    text += std::to_string(part) + " " + std::to_string(pos.next) + " " + std::to_string(pos.bound) + "\n";
  const auto* b = reinterpret_cast<const std::byte*>(text.data());
  return {b, b + text.size()};
}

std::map<std::int32_t, partition_position> decode_position(std::span<const std::byte> bytes) {
  std::map<std::int32_t, partition_position> out;
  std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t nl = text.find('\n', at);
    if (nl == std::string::npos) throw std::runtime_error("kafka source: position bytes do not decode (no newline)");
    long long part = 0, next = 0, bound = 0;
    if (std::sscanf(text.c_str() + at, "%lld %lld %lld", &part, &next, &bound) != 3)
      throw std::runtime_error("kafka source: position bytes do not decode: '" + text.substr(at, nl - at) + "'");
    out[static_cast<std::int32_t>(part)] = {next, bound};
    at = nl + 1;
  }
  return out;
}

kafka_options parse_kafka_url(std::string_view url) {
  constexpr std::string_view scheme = "kafka://";
  if (url.substr(0, scheme.size()) != scheme)
    throw std::invalid_argument("kafka URL '" + std::string(url) + "' does not start with kafka://");
  std::string_view rest = url.substr(scheme.size());
  kafka_options o;
  if (auto q = rest.find('?'); q != std::string_view::npos) {
    std::string_view query = rest.substr(q + 1);
    if (query != "bounded") throw std::invalid_argument("kafka URL '" + std::string(url) + "': unknown option '" + std::string(query) + "' (known: bounded)");
    o.bounded = true;
    rest = rest.substr(0, q);
  }
  auto slash = rest.find('/');
  if (slash == std::string_view::npos || slash == 0 || slash + 1 == rest.size() ||
      rest.find('/', slash + 1) != std::string_view::npos)
    throw std::invalid_argument("kafka URL '" + std::string(url) + "' is not kafka://BROKER[,BROKER...]/TOPIC");
  o.brokers = std::string(rest.substr(0, slash));
  o.topic = std::string(rest.substr(slash + 1));
  return o;
}

dataflow::source_spec<std::string> kafka_source_spec(std::string_view url) {
  kafka_options o = parse_kafka_url(url);
  dataflow::source_spec<std::string> spec;
  spec.identity = {"source=kafka", "kafka.topic=" + o.topic};
  if (o.bounded) spec.identity.push_back("kafka.bounded");
  spec.make = [o](const dataflow::connector_context& ctx) { return make_kafka_source(o, ctx); };
  return spec;
}

dataflow::sink_spec<std::string> kafka_sink_spec(std::string_view url) {
  kafka_options o = parse_kafka_url(url);
  if (o.bounded) throw std::invalid_argument("kafka URL '" + std::string(url) + "': 'bounded' is for a source");
  dataflow::sink_spec<std::string> spec;
  spec.identity = {"sink=kafka", "kafka.topic=" + o.topic};
  spec.make = [o](const dataflow::connector_context& ctx) { return make_kafka_sink(o, ctx); };
  return spec;
}

}  // namespace sluice::kafka
