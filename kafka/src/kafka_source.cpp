// kafka_source: see kafka.hpp (the hand-off at the top).
#include <sluice/kafka/kafka.hpp>

#include "conf.hpp"

#include <sluice/runtime/io_awaitable.hpp>
#include <sluice/runtime/offload.hpp>

#include <librdkafka/rdkafka.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>
#include <string>

namespace sluice::kafka {

namespace {

io::error kafka_error(const std::string& what, rd_kafka_resp_err_t err) {
  return io::error(std::make_error_code(std::errc::io_error), what + ": " + rd_kafka_err2str(err));
}

class kafka_source final : public dataflow::source_connector<std::string> {
 public:
  kafka_source(kafka_options options, const dataflow::connector_context& ctx)
      : options_(std::move(options)), ctx_(ctx) {}
  ~kafka_source() override { release(); }

  void restore(std::span<const std::byte> position) override {
    positions_ = decode_position(position);
    restored_ = true;
  }

  runtime::task<io::result<void>> open() override {
    std::string where = "kafka source '" + options_.topic + "' task " + std::to_string(ctx_.subtask);
    char errstr[512];
    rd_kafka_conf_t* conf = detail::new_conf();
    auto set = [&](const char* k, const std::string& v) {
      return rd_kafka_conf_set(conf, k, v.c_str(), errstr, sizeof errstr) == RD_KAFKA_CONF_OK;
    };
    bool ok = set("bootstrap.servers", options_.brokers) && set("enable.auto.commit", "false") &&
              set("enable.auto.offset.store", "false") && set("group.id", "sluice-unused") &&
              set("queued.min.messages", std::to_string(options_.buffer_records)) &&
              set("isolation.level", "read_committed") && set("enable.partition.eof", "false");
    if (!ok) {
      rd_kafka_conf_destroy(conf);
      co_return io::error(std::make_error_code(std::errc::invalid_argument), where + ": config: " + errstr);
    }
    rk_ = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof errstr);
    if (rk_ == nullptr) {
      rd_kafka_conf_destroy(conf);
      co_return io::error(std::make_error_code(std::errc::io_error), where + ": rd_kafka_new: " + errstr);
    }
    rd_kafka_poll_set_consumer(rk_);
    queue_ = rd_kafka_queue_get_consumer(rk_);

    // Partition count (blocking: on the pool).
    int partitions = -1;
    rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
    auto meta = [&] {
      rd_kafka_topic_t* t = rd_kafka_topic_new(rk_, options_.topic.c_str(), nullptr);
      const rd_kafka_metadata_t* md = nullptr;
      err = rd_kafka_metadata(rk_, 0, t, &md, 10000);
      if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        if (md->topic_cnt == 1 && md->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR)
          partitions = md->topics[0].partition_cnt;
        else if (md->topic_cnt == 1)
          err = md->topics[0].err;
        rd_kafka_metadata_destroy(md);
      }
      rd_kafka_topic_destroy(t);
    };
    co_await runtime::offload(meta);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR || partitions <= 0)
      co_return kafka_error(where + ": metadata of topic '" + options_.topic + "'", err);

    if (!restored_) {
      for (int p = 0; p < partitions; ++p)
        if (static_cast<std::size_t>(p) % ctx_.parallelism == ctx_.subtask) positions_[p] = {};
      if (options_.bounded) {
        auto bounds = [&] {
          for (auto& [p, pos] : positions_) {
            std::int64_t lo = 0, hi = 0;
            err = rd_kafka_query_watermark_offsets(rk_, options_.topic.c_str(), p, &lo, &hi, 10000);
            if (err != RD_KAFKA_RESP_ERR_NO_ERROR) return;
            pos.bound = hi;
          }
        };
        co_await runtime::offload(bounds);
        if (err != RD_KAFKA_RESP_ERR_NO_ERROR) co_return kafka_error(where + ": high watermarks", err);
      }
    }

    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) co_return io::error::from_errno(errno, where + ": pipe2");
    pipe_read_ = fds[0];
    pipe_write_ = fds[1];
    ::fcntl(pipe_write_, F_SETFL, O_NONBLOCK);  // librdkafka's thread must never block on it
    rd_kafka_queue_io_event_enable(queue_, pipe_write_, "1", 1);

    rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(static_cast<int>(positions_.size()));
    for (auto& [p, pos] : positions_) {
      if (pos.bound >= 0 && pos.next >= 0 && pos.next >= pos.bound) continue;
      if (pos.bound == 0) continue;
      rd_kafka_topic_partition_list_add(list, options_.topic.c_str(), p)->offset = pos.next;
      ++open_partitions_;
    }
    err = rd_kafka_assign(rk_, list);
    rd_kafka_topic_partition_list_destroy(list);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) co_return kafka_error(where + ": assign", err);
    co_return io::result<void>{};
  }

  runtime::task<io::result<dataflow::read_status>> read(dataflow::source_output<std::string>& out,
                                                std::size_t max_records) override {
    std::size_t n = 0;
    while (n < max_records) {
      if (options_.bounded && open_partitions_ == 0) co_return dataflow::read_status::end;
      rd_kafka_message_t* m = rd_kafka_consume_queue(queue_, 0);
      if (m == nullptr) co_return dataflow::read_status::idle;
      if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        auto err = m->err;
        std::string text = rd_kafka_message_errstr(m);
        rd_kafka_message_destroy(m);
        if (err == RD_KAFKA_RESP_ERR__PARTITION_EOF) continue;
        co_return io::error(std::make_error_code(std::errc::io_error),
                            "kafka source '" + options_.topic + "': consume: " + text);
      }
      auto it = positions_.find(m->partition);
      if (it != positions_.end()) {
        auto& pos = it->second;
        bool in_bound = pos.bound < 0 || m->offset < pos.bound;
        bool fresh = pos.next < 0 || m->offset >= pos.next;
        if (in_bound && fresh) {
          buffer_.assign(static_cast<const char*>(m->payload), m->len);
          out.emit(buffer_);
          ++n;
          pos.next = m->offset + 1;
          if (pos.bound >= 0 && pos.next >= pos.bound) --open_partitions_;
        }
      }
      rd_kafka_message_destroy(m);
    }
    co_return dataflow::read_status::more;
  }

  runtime::task<void> wait_readable() override {
    if (pipe_read_ < 0) co_return;
    runtime::io_op op{};
    op.code = runtime::op_code::read;
    op.fd = pipe_read_;
    op.buf = wake_;
    op.len = sizeof wake_;
    op.offset = static_cast<std::uint64_t>(-1);
    op.waits = true;
    co_await runtime::io_awaitable(op);
  }

  std::vector<std::byte> position() const override { return encode_position(positions_); }

  runtime::task<void> close() override {
    if (rk_ != nullptr) {
      auto shut = [this] { release(); };
      co_await runtime::offload(shut);
    }
  }

 private:

  void release() noexcept {
    if (queue_ != nullptr) {
      rd_kafka_queue_io_event_enable(queue_, -1, nullptr, 0);
      rd_kafka_queue_destroy(queue_);
      queue_ = nullptr;
    }
    if (rk_ != nullptr) {
      rd_kafka_consumer_close(rk_);
      rd_kafka_destroy(rk_);
      rk_ = nullptr;
    }
    if (pipe_read_ >= 0) ::close(pipe_read_);
    if (pipe_write_ >= 0) ::close(pipe_write_);
    pipe_read_ = pipe_write_ = -1;
  }

  kafka_options options_;
  dataflow::connector_context ctx_;
  std::map<std::int32_t, partition_position> positions_;
  bool restored_ = false;
  int open_partitions_ = 0;
  rd_kafka_t* rk_ = nullptr;
  rd_kafka_queue_t* queue_ = nullptr;
  int pipe_read_ = -1;
  int pipe_write_ = -1;
  char wake_[64];
  std::string buffer_;
};

}  // namespace

std::unique_ptr<dataflow::source_connector<std::string>> make_kafka_source(kafka_options options,
                                                                           const dataflow::connector_context& ctx) {
  return std::make_unique<kafka_source>(std::move(options), ctx);
}

}  // namespace sluice::kafka
