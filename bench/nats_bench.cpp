// nats: records/s into and out of a real nats-server (JetStream) through the connectors
// (nats/connectors.hpp), each beside a plain client loop doing the server the same work, in the same run.
//
// - IN. Figure: jetstream_sink's write() + precommit() + commit() of --records 16-byte records, a
//   checkpoint every --per-checkpoint records (commit publishes with Nats-Msg-Id, up to 1024
//   PubAcks outstanding, and waits for every one). Baseline: a plain blocking-socket client (below)
//   publishing the same records with the same kind of Nats-Msg-Id header to the same stream, the
//   same 1024 PubAcks outstanding, waiting for every one at the same checkpoint boundaries.
// - OUT. Figure: a bounded jetstream_source (parallelism 1) opened and read to its end over a stream
//   of --records records. Baseline: the plain client creates the same ephemeral pull consumer (ack
//   none, in memory) and fetches batches of 512 (one fetch outstanding, as the source does).
// - nats-server (`nats-server` on PATH as Debian installs it, or $SLUICE_NATS_SERVER) runs for the
//   benchmark with JetStream in a temporary directory (tests/support/nats_server.hpp), file storage.
//   The plain client speaks the protocol with blocking send/recv on the benchmark's thread, so the
//   ratio is what the runtime's client and the connectors cost over the server's own work.

#include "bench.hpp"
#include "connector_bench.hpp"

#include <support/nats_server.hpp>
#include <support/temp_dir.hpp>

#include <sluice/nats/connectors.hpp>
#include <sluice/runtime/engine.hpp>

#include <fmt/core.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace sluice::bench {
namespace {

constexpr std::size_t ack_window = 1024;  // as the sink's max_in_flight
constexpr std::size_t fetch_batch = 512;  // as the source's batch_size
const std::string payload = "0123456789abcdef";

// A plain NATS client: one blocking TCP socket, the protocol written and parsed by hand.
class blocking_nats {
 public:
  struct frame {
    std::string subject, reply, headers, payload;
  };

  explicit blocking_nats(std::uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const int one = 1;
    timeval tv{10, 0};  // a server that stops answering is an error, not a hang
    if (fd_ < 0 || ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0 ||
        ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0) {
      throw std::runtime_error(fmt::format("nats bench: plain client: connect to 127.0.0.1:{}: {}", port, std::strerror(errno)));
    }
    send(R"(CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true,"name":"plain"})"
         "\r\nSUB _INBOX.plain.* 1\r\nPING\r\n");
  }
  blocking_nats(const blocking_nats&) = delete;
  blocking_nats& operator=(const blocking_nats&) = delete;
  ~blocking_nats() { ::close(fd_); }

  void send(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw std::runtime_error(fmt::format("nats bench: plain client: send: {}", std::strerror(errno)));
      bytes.remove_prefix(static_cast<std::size_t>(n));
    }
  }

  // The next MSG or HMSG; answers PING, skips INFO, PONG and +OK; -ERR is an error.
  frame next() {
    if (at_ > (1u << 16)) {
      in_.erase(0, at_);
      at_ = 0;
    }
    for (;;) {
      std::size_t eol;
      while ((eol = in_.find("\r\n", at_)) == std::string::npos) receive();
      const std::string line = in_.substr(at_, eol - at_);
      const bool msg = line.rfind("MSG ", 0) == 0, hmsg = line.rfind("HMSG ", 0) == 0;
      if (!msg && !hmsg) {
        if (line.rfind("-ERR", 0) == 0) throw std::runtime_error("nats bench: plain client: server says " + line);
        if (line == "PING") send("PONG\r\n");
        at_ = eol + 2;
        continue;
      }
      std::vector<std::string> t;
      for (std::size_t from = 0; from <= line.size();) {
        std::size_t sp = line.find(' ', from);
        if (sp == std::string::npos) sp = line.size();
        if (sp > from) t.push_back(line.substr(from, sp - from));
        from = sp + 1;
      }
      // MSG subject sid [reply] size; HMSG subject sid [reply] header_size total_size
      const std::size_t fixed = msg ? 4 : 5;
      if (t.size() != fixed && t.size() != fixed + 1) throw std::runtime_error("nats bench: plain client: bad line " + line);
      frame f;
      f.subject = t[1];
      if (t.size() == fixed + 1) f.reply = t[3];
      const std::size_t total = std::stoul(t.back());
      const std::size_t header_size = hmsg ? std::stoul(t[t.size() - 2]) : 0;
      while (in_.size() < eol + 2 + total + 2) receive();
      f.headers = in_.substr(eol + 2, header_size);
      f.payload = in_.substr(eol + 2 + header_size, total - header_size);
      at_ = eol + 2 + total + 2;
      return f;
    }
  }

  // A JetStream API request; its answer, or an error quoting the server's.
  std::string request(const std::string& subject, const std::string& body) {
    const std::string inbox = fmt::format("_INBOX.plain.api{}", ++requests_);
    send(fmt::format("PUB {} {} {}\r\n{}\r\n", subject, inbox, body.size(), body));
    for (;;) {
      frame f = next();
      if (f.subject != inbox) continue;
      if (f.payload.find("\"error\"") != std::string::npos) {
        throw std::runtime_error("nats bench: " + subject + ": " + f.payload);
      }
      return f.payload;
    }
  }

  // Publishes `n` records to `subject` with Nats-Msg-Id "<id_prefix>/<i>", up to ack_window PubAcks
  // outstanding, waiting for all of them after every `per_checkpoint` records.
  void publish_acked(const std::string& subject, std::uint64_t n, std::uint64_t per_checkpoint, const std::string& id_prefix) {
    std::string out;
    std::uint64_t sent = 0, acked = 0;
    const auto ack_one = [&] {
      const frame f = next();
      if (f.subject.rfind("_INBOX.plain.p", 0) != 0) return;
      if (f.payload.find("\"error\"") != std::string::npos || f.payload.find("\"duplicate\"") != std::string::npos) {
        throw std::runtime_error("nats bench: plain client: publish to " + subject + ": " + f.payload);
      }
      ++acked;
    };
    for (std::uint64_t i = 0; i < n; ++i) {
      const std::string headers = fmt::format("NATS/1.0\r\nNats-Msg-Id: {}/{}\r\n\r\n", id_prefix, i);
      out += fmt::format("HPUB {} _INBOX.plain.p{} {} {}\r\n", subject, i, headers.size(), headers.size() + payload.size());
      out += headers;
      out += payload;
      out += "\r\n";
      ++sent;
      const bool boundary = sent % per_checkpoint == 0 || sent == n;
      if (out.size() >= (1u << 15) || sent - acked >= ack_window || boundary) {
        send(out);
        out.clear();
      }
      while (sent - acked >= ack_window) ack_one();
      if (boundary) {
        while (acked < sent) ack_one();
      }
    }
  }

  // Creates an ephemeral pull consumer of `stream` from its start and fetches until `n` records came.
  std::uint64_t fetch_all(const std::string& stream, std::uint64_t n) {
    const std::string created = request(
        "$JS.API.CONSUMER.CREATE." + stream,
        R"({"stream_name":")" + stream +
            R"(","config":{"deliver_policy":"all","ack_policy":"none","replay_policy":"instant","inactive_threshold":30000000000,"mem_storage":true}})");
    const std::size_t at = created.find(R"("name":")");
    if (at == std::string::npos) throw std::runtime_error("nats bench: no consumer name in " + created);
    const std::string name = created.substr(at + 8, created.find('"', at + 8) - (at + 8));
    const std::string next_subject = "$JS.API.CONSUMER.MSG.NEXT." + stream + "." + name;
    std::uint64_t got = 0;
    while (got < n) {
      const std::string body = fmt::format(R"({{"batch":{},"expires":1000000000}})", std::min<std::uint64_t>(fetch_batch, n - got));
      send(fmt::format("PUB {} _INBOX.plain.fetch {}\r\n{}\r\n", next_subject, body.size(), body));
      for (std::size_t in_batch = 0; in_batch < fetch_batch && got < n;) {
        const frame f = next();
        // A stored message comes with its own subject and an ack subject; a status (408: the fetch
        // expired) on the fetch's inbox without one: then fetch again.
        if (f.reply.rfind("$JS.ACK.", 0) != 0) {
          if (f.subject == "_INBOX.plain.fetch") break;
          continue;
        }
        ++got;
        ++in_batch;
      }
    }
    return got;
  }

 private:
  void receive() {
    char buf[1 << 16];
    for (;;) {
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n > 0) {
        in_.append(buf, static_cast<std::size_t>(n));
        return;
      }
      if (n < 0 && errno == EINTR) continue;
      throw std::runtime_error(n == 0 ? std::string("nats bench: plain client: the server closed the connection")
                                      : fmt::format("nats bench: plain client: recv: {}", std::strerror(errno)));
    }
  }

  int fd_ = -1;
  std::string in_;
  std::size_t at_ = 0;
  std::uint64_t requests_ = 0;
};

class nats_bench final : public benchmark {
 public:
  std::string_view name() const noexcept override { return "nats"; }
  std::string_view description() const noexcept override {
    return "records/s into a real nats-server through the JetStream sink's commit path and out through the source, "
           "vs a plain blocking client (same acks, same fetches)";
  }
  std::vector<option> options() override {
    return {{"--records", "16-byte records per measurement", &records_},
            {"--per-checkpoint", "records per checkpoint (sink commit; the baseline waits for its acks there)",
             &per_checkpoint_}};
  }

  void run(const common_options& common, const reporter& out) override {
    if (!test::nats_server::installed()) {
      throw std::runtime_error("nats bench: nats-server is not installed (apt-get install nats-server, or set SLUICE_NATS_SERVER)");
    }
    test::temp_dir dir;
    test::nats_server server(dir.path());
    server.start();
    port_ = server.port();
    blocking_nats plain(port_);
    plain.request("$JS.API.STREAM.CREATE.IN",
                  R"({"name":"IN","subjects":["in.>"],"duplicate_window":120000000000,"storage":"file"})");
    plain.request("$JS.API.STREAM.CREATE.OUT",
                  R"({"name":"OUT","subjects":["out"],"duplicate_window":120000000000,"storage":"file"})");
    plain.publish_acked("out", records_, per_checkpoint_, "fill");
    runtime::engine engine({.executors = 1, .handle_signals = false});
    const double n = static_cast<double>(records_);

    auto in = measure_paired(
        common.runs, [&] { return n / sink_seconds(engine); },
        [&] {
          const auto start = bench_clock::now();
          plain.publish_acked("in.plain", records_, per_checkpoint_, fmt::format("plain/{}", runs_++));
          return n / seconds_since(start);
        });
    report(out, common, "in", "jetstream_sink write+precommit+commit", "plain client, same acks", in);

    auto outr = measure_paired(
        common.runs, [&] { return n / source_seconds(engine); },
        [&] {
          const auto start = bench_clock::now();
          if (plain.fetch_all("OUT", records_) != records_) throw std::runtime_error("nats bench: the plain fetch fell short");
          return n / seconds_since(start);
        });
    report(out, common, "out", "bounded jetstream_source", "plain client, batches of 512", outr);
    server.kill();
  }

 private:
  double sink_seconds(runtime::engine& engine) {
    dataflow::connector_context ctx;
    ctx.job = fmt::format("bench{}", runs_++);  // message ids of its own: nothing is a duplicate
    const auto url = connectors::must(nats::parse_url(fmt::format("nats://127.0.0.1:{}/in.sink", port_)), "nats url");
    auto sink = nats::make_jetstream_sink(ctx, url);
    connectors::must(engine.block_on(sink->recover(dataflow::recovery_of())), "jetstream sink recover");
    const auto start = bench_clock::now();
    engine.block_on(connectors::drive_sink<std::string>(sink.get(), records_, per_checkpoint_,
                                                        [](std::uint64_t) { return payload; }, 0));
    const double seconds = seconds_since(start);
    engine.block_on(sink->close());
    return seconds;
  }

  double source_seconds(runtime::engine& engine) {
    dataflow::connector_context ctx;
    ctx.job = "bench";
    const auto url = connectors::must(nats::parse_url(fmt::format("nats://127.0.0.1:{}/OUT", port_)), "nats url");
    auto source = nats::make_jetstream_source(ctx, url, true);
    const auto start = bench_clock::now();
    const std::uint64_t got = engine.block_on(connectors::drain_source<std::string>(source.get()));
    const double seconds = seconds_since(start);
    engine.block_on(source->close());
    if (got != records_) throw std::runtime_error(fmt::format("nats bench: the source read {} of {} records", got, records_));
    return seconds;
  }

  void report(const reporter& out, const common_options& common, std::string_view direction, std::string_view figure,
              std::string_view baseline, const paired_result& r) const {
    connectors::report(out, name(), fmt::format("{} ({})", direction, figure), baseline, r,
                       fmt::format("{} records of 16 bytes", records_), records_, per_checkpoint_, common.runs,
                       {{"direction", std::string(direction)}});
  }

  std::uint64_t records_ = 100'000;
  std::uint64_t per_checkpoint_ = 10'000;
  std::uint16_t port_ = 0;
  unsigned runs_ = 0;
};

registration<nats_bench> reg;

}  // namespace
}  // namespace sluice::bench
