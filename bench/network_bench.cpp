// network: the shape of Flink's StreamNetworkThroughputBenchmark. One writer task emits 8-byte
// records round-robin into a result partition with N subpartitions (flush timeout F); one receiver
// task takes them from an input gate of N channels and deserializes every record. The writer runs on
// executor 0 and the receiver on executor 1 of a 2-executor engine; the channels are local channels
// or remote channels over loopback TCP (one transport per side, each homed on its side's executor).
// The timed window runs from the first emit to the receiver's end of the last channel.
//
// Baselines, measured in the same run and interleaved:
// - tcp: raw loopback TCP, one thread writing 64 KiB sends and one reading, the same payload bytes;
//   ratio = sluice's record bytes per second / the raw socket's bytes per second.
// - local: the ideal hand-off of the same records between two threads: 32 KiB blocks of records
//   through a bounded single-producer single-consumer ring (atomics, spinning); ratio = sluice's
//   records per second / the ring's.

#include "bench.hpp"

#include <sluice/buffers/local_channel.hpp>
#include <sluice/buffers/record_deserializer.hpp>
#include <sluice/buffers/tcp_transport.hpp>
#include <sluice/runtime/engine.hpp>
#include <sluice/runtime/run_on.hpp>
#include <sluice/runtime/when_all.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/core.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <system_error>
#include <thread>

namespace sluice::bench {
namespace {

namespace rt = sluice::runtime;
namespace bf = sluice::buffers;

constexpr std::size_t segment_bytes = 32 * 1024;
constexpr std::size_t floating_buffers = 8;
constexpr std::uint64_t partition_id = 1;

struct shape {
  std::uint64_t channels = 1000;
  std::uint64_t flush_ms = 100;
  std::string transport = "local";
  std::uint64_t records = 10'000'000;
};

// Sender pool: every channel's partly filled buffer plus a queue of 2 per channel.
std::size_t sender_segments(const shape& s) { return 3 * s.channels + 16; }
std::size_t receiver_segments(const shape& s) { return 2 * s.channels + floating_buffers; }

struct sender_side {
  bf::local_buffer_pool pool;
  bf::result_partition partition;
  std::vector<std::unique_ptr<bf::local_channel>> locals;
  sender_side(bf::segment_pool& segments, const shape& s)
      : pool(segments, 1, sender_segments(s)),
        partition(pool, {.subpartitions = s.channels, .flush_timeout = std::chrono::milliseconds(s.flush_ms)}) {}
};

struct receiver_side {
  bf::local_buffer_pool pool;
  bf::input_gate gate;
  bf::gate_credit_pump pump;
  std::vector<bf::remote_input*> remotes;
  std::uint64_t records = 0;
  std::uint64_t checksum = 0;
  receiver_side(bf::segment_pool& segments, const shape& s)
      : pool(segments, 2 * s.channels, receiver_segments(s)),
        gate(pool, {.channels = s.channels, .exclusive_per_channel = 2, .floating = floating_buffers}),
        pump(gate) {}
};

rt::task<std::unique_ptr<sender_side>> make_sender(bf::segment_pool* segments, shape s) {
  co_return std::make_unique<sender_side>(*segments, s);
}
rt::task<std::unique_ptr<receiver_side>> make_receiver(bf::segment_pool* segments, shape s) {
  co_return std::make_unique<receiver_side>(*segments, s);
}

// The per-record loops are plain functions: in the coroutines their counters would live in the
// coroutine frame (a load and a store per record), which would measure the frame, not the channels.
// Emits records [k, records) round-robin from channel `ch` while try_emit takes them; returns the
// first record it did not take (k == records: all).
std::uint64_t emit_fast(bf::result_partition& out, std::uint64_t k, std::uint64_t records, std::size_t& ch) {
  const std::size_t channels = out.subpartitions();
  std::size_t c = ch;
  for (; k < records; ++k) {
    if (!out.try_emit(k, c)) break;
    if (++c == channels) c = 0;
  }
  ch = c;
  return k;
}

rt::task<void> write_records(bf::result_partition* out, std::uint64_t records) {
  const std::size_t channels = out->subpartitions();
  std::size_t ch = 0;
  for (std::uint64_t k = emit_fast(*out, 0, records, ch); k < records; k = emit_fast(*out, k, records, ch)) {
    const bool ok = co_await out->emit(k, ch);  // the record try_emit declined
    if (!ok) throw std::runtime_error("network bench: the writer could not get a buffer");
    if (++ch == channels) ch = 0;
    ++k;
  }
  const bool finished = co_await out->finish();
  if (!finished) throw std::runtime_error("network bench: finish() failed");
}

void read_buffer(bf::record_deserializer& d, receiver_side& r) {
  std::uint64_t records = r.records;
  std::uint64_t checksum = r.checksum;
  while (auto bytes = d.next_record_bytes()) {
    std::uint64_t v;
    std::memcpy(&v, bytes->data(), sizeof v);
    checksum += v;
    ++records;
  }
  r.records = records;
  r.checksum = checksum;
}

rt::task<void> read_records(receiver_side* r) {
  std::vector<bf::record_deserializer> des(r->gate.channels());
  for (;;) {
    std::optional<bf::gate_item> item = co_await r->gate.next();
    if (!item) break;
    if (item->is_failure()) throw std::runtime_error(r->gate.failure(item->channel));
    if (item->is_event()) continue;
    bf::record_deserializer& d = des[item->channel];
    d.set_next_buffer(item->data.get().retain());
    item->data.release();
    read_buffer(d, *r);
  }
}

rt::task<void> run_sender(sender_side* s, std::uint64_t records) {
  std::vector<rt::task<void>> jobs;
  jobs.push_back(write_records(&s->partition, records));
  jobs.push_back(s->partition.run_flusher());
  for (auto& l : s->locals) jobs.push_back(l->sender().run());
  co_await rt::when_all(std::move(jobs));
}

rt::task<void> run_receiver(receiver_side* r) { co_await rt::when_all(read_records(r), r->pump.run()); }

rt::task<std::unique_ptr<bf::tcp_transport>> start_transport() {
  co_return (co_await bf::tcp_transport::start(io::address::loopback_v4(), {})).value();
}
rt::task<void> serve(bf::tcp_transport* t, sender_side* s) {
  t->serve_partition(partition_id, s->partition);
  co_return;
}
rt::task<void> connect_local(receiver_side* r, sender_side* s) {
  for (std::uint32_t c = 0; c < s->locals.size(); ++c) r->pump.connect(c, *s->locals[c]);
  co_return;
}
rt::task<void> connect_remote(receiver_side* r, bf::tcp_transport* t, io::address peer) {
  for (std::uint32_t c = 0; c < r->gate.channels(); ++c) {
    bf::remote_input& in = t->open_input(peer, partition_id, c, r->gate, c);
    r->pump.connect(c, in);
    r->remotes.push_back(&in);
  }
  co_return;
}
rt::task<void> wait_closed(receiver_side* r) {
  for (bf::remote_input* in : r->remotes) (void)co_await in->wait_closed();
}
rt::task<void> drop_receiver(std::unique_ptr<receiver_side> r) {
  r.reset();
  co_return;
}
rt::task<void> drop_sender(std::unique_ptr<sender_side> s) {
  for (int i = 0; i < 100000 && s->pool.in_use() > 0; ++i) co_await rt::yield();
  s.reset();
}
rt::task<void> close_transport(bf::tcp_transport* t) { co_await t->close(); }

struct outcome {
  double seconds = 0;
  std::uint64_t records = 0;
  std::uint64_t checksum = 0;
};

struct transports {
  std::unique_ptr<bf::tcp_transport> sending, receiving;
};

rt::task<outcome> transfer(rt::engine* eng, bf::network_memory* memory, shape s, transports* keep) {
  rt::executor* a = &eng->at(0);
  rt::executor* b = &eng->at(1);
  std::unique_ptr<sender_side> snd = co_await rt::run_on(a, make_sender(&memory->pool(0), s));
  std::unique_ptr<receiver_side> rcv = co_await rt::run_on(b, make_receiver(&memory->pool(1), s));
  if (s.transport == "local") {
    for (std::uint32_t c = 0; c < s.channels; ++c) {
      snd->locals.push_back(std::make_unique<bf::local_channel>(snd->partition, c, *a, rcv->gate, c, *b));
    }
    co_await rt::run_on(b, connect_local(rcv.get(), snd.get()));
  } else {
    keep->sending = co_await rt::run_on(a, start_transport());
    keep->receiving = co_await rt::run_on(b, start_transport());
    co_await rt::run_on(a, serve(keep->sending.get(), snd.get()));
    co_await rt::run_on(b, connect_remote(rcv.get(), keep->receiving.get(), keep->sending->local_address()));
  }
  const auto start = bench_clock::now();
  co_await rt::when_all(rt::run_on(a, run_sender(snd.get(), s.records)), rt::run_on(b, run_receiver(rcv.get())));
  outcome o{seconds_since(start), rcv->records, rcv->checksum};
  co_await rt::run_on(b, wait_closed(rcv.get()));
  co_await rt::run_on(b, drop_receiver(std::move(rcv)));
  co_await rt::run_on(a, drop_sender(std::move(snd)));
  if (keep->receiving) co_await rt::run_on(b, close_transport(keep->receiving.get()));
  if (keep->sending) co_await rt::run_on(a, close_transport(keep->sending.get()));
  co_return o;
}

outcome run_sluice(const shape& s) {
  transports keep;  // destroyed after the engine
  const std::size_t per_executor = std::max(sender_segments(s), receiver_segments(s)) + 64;
  bf::network_memory memory(per_executor * segment_bytes * 2, segment_bytes, 2);
  outcome o;
  {
    rt::engine eng({.executors = 2, .handle_signals = false});
    o = eng.block_on(transfer(&eng, &memory, s, &keep));
  }
  const std::uint64_t expected = s.records * (s.records - 1) / 2;
  if (o.records != s.records || o.checksum != expected) {
    throw std::runtime_error(fmt::format("network bench: received {} records (checksum {}), sent {} (checksum {})",
                                         o.records, o.checksum, s.records, expected));
  }
  return o;
}

// --- baselines ------------------------------------------------------------------------------------

[[noreturn]] void fail_errno(const char* what) { throw std::system_error(errno, std::generic_category(), what); }

// Seconds to move `bytes` over a loopback TCP connection, one thread sending, one receiving.
double raw_tcp_seconds(std::uint64_t bytes) {
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listener < 0) fail_errno("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(listener, 1) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(listener);
    fail_errno("bind/listen");
  }
  const int client = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (client < 0 || ::connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) fail_errno("connect");
  const int server = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  ::close(listener);
  if (server < 0) fail_errno("accept");
  const auto start = bench_clock::now();
  std::thread reader([server, bytes] {
    std::vector<char> buf(256 * 1024);
    std::uint64_t got = 0;
    while (got < bytes) {
      const ssize_t n = ::recv(server, buf.data(), buf.size(), 0);
      if (n <= 0) break;
      got += static_cast<std::uint64_t>(n);
    }
  });
  std::vector<char> chunk(64 * 1024, 'x');
  std::uint64_t sent = 0;
  while (sent < bytes) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(chunk.size(), bytes - sent));
    const ssize_t w = ::send(client, chunk.data(), n, MSG_NOSIGNAL);
    if (w <= 0) break;
    sent += static_cast<std::uint64_t>(w);
  }
  reader.join();
  const double seconds = seconds_since(start);
  ::close(client);
  ::close(server);
  return seconds;
}

// Seconds to hand `records` 8-byte records from one thread to another in 32 KiB blocks.
double spsc_seconds(std::uint64_t records) {
  constexpr std::size_t slots = 64;
  constexpr std::size_t per_block = segment_bytes / sizeof(std::uint64_t);
  std::vector<std::uint64_t> blocks(slots * per_block);
  std::vector<std::size_t> fill(slots);
  alignas(64) std::atomic<std::uint64_t> head{0};
  alignas(64) std::atomic<std::uint64_t> tail{0};
  std::uint64_t checksum = 0;
  const auto start = bench_clock::now();
  std::thread consumer([&] {
    std::uint64_t seen = 0;
    std::uint64_t t = 0;
    while (seen < records) {
      while (head.load(std::memory_order_acquire) == t) {
      }
      const std::size_t slot = t % slots;
      const std::uint64_t* block = blocks.data() + slot * per_block;
      for (std::size_t i = 0; i < fill[slot]; ++i) checksum += block[i];
      seen += fill[slot];
      tail.store(++t, std::memory_order_release);
    }
  });
  std::uint64_t h = 0;
  for (std::uint64_t k = 0; k < records;) {
    while (h - tail.load(std::memory_order_acquire) == slots) {
    }
    const std::size_t slot = h % slots;
    std::uint64_t* block = blocks.data() + slot * per_block;
    std::size_t n = 0;
    for (; n < per_block && k < records; ++n) block[n] = k++;
    fill[slot] = n;
    head.store(++h, std::memory_order_release);
  }
  consumer.join();
  do_not_optimize(checksum);
  return seconds_since(start);
}

class network_bench final : public benchmark {
 public:
  std::string_view name() const noexcept override { return "network"; }
  std::string_view description() const noexcept override {
    return "8-byte records from a writer task to a receiver task over N channels, local or loopback TCP "
           "(records/ms), against raw loopback TCP or a two-thread block ring";
  }
  std::vector<option> options() override {
    return {
        {"--channels", "channels (subpartitions of the partition, channels of the gate)", &shape_.channels},
        {"--flush-ms", "flush timeout in milliseconds (0 = flush every record)", &shape_.flush_ms},
        {"--transport", "local or tcp", &shape_.transport},
        {"--records", "records per measurement", &shape_.records},
        {"--all", "run the matrix of docs/benchmarks.md: {100, 1000} channels x {1, 100} ms x {local, tcp}", &all_},
    };
  }

  bool plots() const noexcept override { return true; }

  void run(const common_options& common, const reporter& out) override {
    if (chart* c = out.chart()) {
      c->describe(fmt::format("8-byte records, writer -> receiver on two executors ({} records per run)", shape_.records),
                  "MiB/s of record bytes", chart_style::bars);
    }
    if (!all_) {
      run_one(shape_, common, out);
      return;
    }
    for (const char* transport : {"local", "tcp"}) {
      for (std::uint64_t channels : {100u, 1000u}) {
        for (std::uint64_t flush_ms : {1u, 100u}) {
          shape s = shape_;
          s.transport = transport;
          s.channels = channels;
          s.flush_ms = flush_ms;
          run_one(s, common, out);
        }
      }
    }
  }

 private:
  void run_one(const shape& s, const common_options& common, const reporter& out) {
    if (s.channels == 0 || s.channels > 4096) throw std::invalid_argument("--channels must be 1..4096");
    if (s.records == 0) throw std::invalid_argument("--records must be at least 1");
    if (s.transport != "local" && s.transport != "tcp") throw std::invalid_argument("--transport must be local or tcp");
    const bool tcp = s.transport == "tcp";
    const double bytes = static_cast<double>(s.records) * sizeof(std::uint64_t);
    auto r = measure_paired(
        common.runs, [&] { return static_cast<double>(s.records) / run_sluice(s).seconds; },
        [&] {
          return tcp ? bytes / raw_tcp_seconds(s.records * sizeof(std::uint64_t))
                     : static_cast<double>(s.records) / spsc_seconds(s.records);
        });
    constexpr double mib = 1024.0 * 1024.0;
    constexpr double record_bytes = sizeof(std::uint64_t);
    chart_paired(out, fmt::format("{} {} ch {} ms", s.transport, s.channels, s.flush_ms), "sluice",
                 "baseline: block ring (local), raw socket (tcp)", r, record_bytes / mib,
                 tcp ? 1.0 / mib : record_bytes / mib);
    const double records_per_ms = r.figure / 1000.0;
    const double bytes_per_s = r.figure * sizeof(std::uint64_t);
    const double ratio = tcp ? bytes_per_s / r.baseline : r.figure / r.baseline;
    const bool target_shape = s.channels == 1000 && s.flush_ms == 100;
    const double target = tcp ? 15'000 : 30'000;
    out.result(name(),
               fmt::format("network {} {} channels, flush {} ms: {:.0f} records/ms ({}/s of records)  baseline ({}) "
                           "{}  ratio {:.2f}{}",
                           s.transport, s.channels, s.flush_ms, records_per_ms, human_bytes(bytes_per_s),
                           tcp ? "raw loopback TCP" : "two-thread block ring",
                           tcp ? human_bytes(r.baseline) + "/s" : fmt::format("{:.0f} records/ms", r.baseline / 1000.0),
                           ratio,
                           target_shape ? fmt::format("  target >= {:.0f} records/ms: {}", target,
                                                      records_per_ms >= target ? "met" : "MISSED")
                                        : ""),
               {{"records_per_ms", records_per_ms},
                {"bytes_per_s", bytes_per_s},
                {tcp ? "baseline_bytes_per_s" : "baseline_records_per_ms", tcp ? r.baseline : r.baseline / 1000.0},
                {"ratio", ratio},
                {"transport", s.transport},
                {"channels", s.channels},
                {"flush_ms", s.flush_ms},
                {"records", s.records},
                {"runs", std::uint64_t{common.runs}}});
  }

  shape shape_;
  bool all_ = false;
};

registration<network_bench> reg;

}  // namespace
}  // namespace sluice::bench
