#pragma once
// Both ends of a channel test: a producer that emits numbered records round-robin, a consumer
// that checks each channel's records arrive in order, once, and the objects of each side (made on
// their executors). Shared by the local channel and TCP transport tests.
// The sides run on executor threads, where Catch2 must not be used: they record what they saw in
// the receive_report, and the test asserts on it (check_ends) once the transfer is over.

#include <sluice/buffers/channel.hpp>
#include <sluice/buffers/local_channel.hpp>
#include <sluice/buffers/record_deserializer.hpp>
#include <sluice/runtime/event.hpp>
#include <sluice/runtime/when_all.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace sluice::test::channels {

using namespace sluice::buffers;
using namespace sluice::runtime;


// Record = channel << 40 | sequence number within the channel.
inline constexpr std::uint64_t record_of(std::uint64_t channel, std::uint64_t seq) { return channel << 40 | seq; }

struct receive_report {
  std::uint64_t records = 0;
  std::vector<std::uint64_t> per_channel;
  std::string error;  // empty when every channel's records came in order, once
  // Each written once by the side it describes, on that side's executor.
  bool produced_all = false;                        // the producer's finish() succeeded
  std::string credit_accounting = "never checked";  // the gate's identity at the end: empty if it held
  std::size_t sender_in_use = 99;                   // segments the sender's pool still lent at its end
  std::size_t sender_violations = 99;
  std::size_t receiver_violations = 99;
};

// On the test's thread, after a transfer that ran both sides to their end.
inline void check_ends(const receive_report& r) {
  CHECK(r.produced_all);
  CHECK(r.credit_accounting.empty());
  CHECK(r.sender_in_use == 0);
  CHECK(r.sender_violations == 0);
  CHECK(r.receiver_violations == 0);
}

// Emits `records` records round-robin over the partition's subpartitions, then finishes; sets
// `*finished` if the finish succeeded.
inline task<void> produce(result_partition* out, std::uint64_t records, bool* finished) {
  const std::size_t channels = out->subpartitions();
  std::vector<std::uint64_t> next(channels, 0);
  for (std::uint64_t k = 0; k < records; ++k) {
    const std::size_t ch = k % channels;
    const bool ok = co_await out->emit(record_of(ch, next[ch]++), ch);
    if (!ok) co_return;  // stopped while waiting for a buffer; the receiver's count tells
  }
  *finished = co_await out->finish();
}

// A consumer the test paces (on the consumer's executor): it takes the next item only while it has
// received fewer than `allowed` records, and says when it stopped. So a test can act while a channel
// is provably mid-transfer: its sender blocked on credit, the connection open.
struct pacing {
  std::uint64_t allowed = UINT64_MAX;
  event more;     // `allowed` grew
  event reached;  // the consumer has `allowed` records (or more) and waits
};
inline task<void> allow(pacing* p, std::uint64_t records) {
  p->allowed = records;
  p->reached.reset();
  p->more.set();
  co_return;
}
inline task<void> wait_reached(pacing* p) {
  while (!p->reached.is_set()) {
    const bool set = co_await p->reached.wait();
    if (!set) co_return;
  }
}

inline task<void> consume(input_gate* gate, receive_report* report, pacing* pace = nullptr) {
  std::vector<record_deserializer> des(gate->channels());
  report->per_channel.assign(gate->channels(), 0);
  for (;;) {
    while (pace != nullptr && report->records >= pace->allowed) {
      pace->reached.set();
      pace->more.reset();
      const bool woke = co_await pace->more.wait();
      if (!woke) co_return;
    }
    std::optional<gate_item> item = co_await gate->next();
    if (!item) break;
    if (item->is_event()) continue;
    const std::uint32_t ch = item->channel;
    des[ch].set_next_buffer(item->data.get().retain());
    item->data.release();  // view-held until the deserializer moves on
    while (auto r = des[ch].next_record<std::uint64_t>()) {
      const std::uint64_t expected = record_of(ch, report->per_channel[ch]);
      if (*r != expected && report->error.empty()) {
        report->error = "channel " + std::to_string(ch) + ": got " + std::to_string(*r & 0xFFFFFFFFFFull) +
                        ", expected " + std::to_string(report->per_channel[ch]);
      }
      ++report->per_channel[ch];
      ++report->records;
    }
  }
  if (pace != nullptr) pace->reached.set();  // and it waits no more
}

// Everything of one side, made on its executor.
struct sender_side {
  local_buffer_pool pool;
  result_partition partition;
  std::vector<std::unique_ptr<local_channel>> channels;
  sender_side(segment_pool& segments, std::size_t channels_n, std::size_t pool_max, std::chrono::milliseconds flush)
      : pool(segments, 1, pool_max), partition(pool, {.subpartitions = channels_n, .flush_timeout = flush}) {}
};
struct receiver_side {
  local_buffer_pool pool;
  input_gate gate;
  gate_credit_pump pump;
  receiver_side(segment_pool& segments, std::size_t channels_n, std::size_t floating)
      : pool(segments, channels_n * 2, channels_n * 2 + floating),
        gate(pool, {.channels = channels_n, .exclusive_per_channel = 2, .floating = floating}),
        pump(gate) {}
};

inline task<std::unique_ptr<sender_side>> make_sender(segment_pool* segments, std::size_t channels, std::size_t pool_max,
                                               std::chrono::milliseconds flush) {
  co_return std::make_unique<sender_side>(*segments, channels, pool_max, flush);
}
inline task<std::unique_ptr<receiver_side>> make_receiver(segment_pool* segments, std::size_t channels, std::size_t floating) {
  co_return std::make_unique<receiver_side>(*segments, channels, floating);
}
inline task<void> connect_all(receiver_side* r, sender_side* s) {
  for (std::uint32_t c = 0; c < s->channels.size(); ++c) r->pump.connect(c, *s->channels[c]);
  co_return;
}
inline task<void> join_all(std::vector<task<void>> jobs) { co_await when_all(std::move(jobs)); }

inline task<void> run_senders(sender_side* s, std::uint64_t records, receive_report* report) {
  std::vector<task<void>> jobs;
  jobs.push_back(produce(&s->partition, records, &report->produced_all));
  jobs.push_back(s->partition.run_flusher());
  for (auto& ch : s->channels) jobs.push_back(ch->sender().run());
  co_await when_all(std::move(jobs));
}
inline task<void> run_receiver(receiver_side* r, receive_report* report, pacing* pace = nullptr) {
  co_await when_all(consume(&r->gate, report, pace), r->pump.run());
  report->credit_accounting = r->gate.check_credit_accounting();
}
inline task<void> destroy_sender(std::unique_ptr<sender_side> s, receive_report* report) {
  // The receiver dropped the partition's buffers on its executor; their releases come home by post.
  for (int i = 0; i < 10000 && s->pool.in_use() > 0; ++i) co_await yield();
  report->sender_in_use = s->pool.in_use();
  report->sender_violations = s->pool.violations();
  s.reset();
}
inline task<void> destroy_receiver(std::unique_ptr<receiver_side> r, receive_report* report) {
  report->receiver_violations = r->pool.violations();
  r.reset();
  co_return;
}


}  // namespace sluice::test::channels
