// Randomised interleavings of data, barriers (in-band and priority, skipped ids), cancellation
// markers, end-of-partition, timer ticks, writer completions, coordinator aborts and replay phases
// over 4 channels, for every mode and many seeds. Checked against a model of the senders:
// - every data buffer reaches the task exactly once, in channel order, and no exception escapes;
// - aligned: no buffer sent after a channel's barrier is processed before that snapshot (scenario 12);
// - unaligned: a finished checkpoint's channel state is exactly, per channel, the buffers sent before
//   the channel's barrier and not taken before the snapshot (scenario 10);
// - aligned and at-least-once never capture (scenario 13); bookkeeping stays bounded (scenario 14);
// - every captured view is released exactly once: pool in_use 0 and no violation at the end.
#include <sluice/buffers/input_gate.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/timer.hpp>
#include <sluice/snapshot/barrier_handler.hpp>

#include <snapshot/barrier_harness.hpp>
#include <support/backends.hpp>

#include <catch2/catch.hpp>

#include <array>
#include <chrono>
#include <map>
#include <random>
#include <string>
#include <vector>

using namespace sluice::buffers;
using namespace sluice::runtime;
using namespace sluice::snapshot;
using namespace std::chrono_literals;
using sluice::test::harness;

namespace {

constexpr std::size_t segment_bytes = 4096;
constexpr std::uint32_t channels = 4;

std::string payload(std::uint32_t channel, std::size_t index) {
  return std::to_string(channel) + ":" + std::to_string(index);
}

struct model {
  std::array<std::size_t, channels> sent{};   // data buffers sent per channel
  std::array<std::size_t, channels> taken{};  // data buffers the task took per channel
  std::array<std::uint64_t, channels> last_id{};
  std::array<bool, channels> ended{};
  std::array<std::map<std::uint64_t, std::size_t>, channels> barrier_at{};  // id -> data sent before it
  std::uint64_t snapshot_id = 0;
  std::array<std::size_t, channels> snapshot_taken{};
  std::size_t finished_checked = 0;
  std::size_t stats_checked = 0;
};

class stress {
 public:
  stress(input_gate& gate, barrier_handler& handler, checkpoint_mode mode, model& m)
      : gate_(gate), handler_(handler), mode_(mode), m_(m), h_(gate, handler) {
    h_.on_trigger = [this](const trigger_snapshot& t) {
      if (t.mode != checkpoint_mode::unaligned) return;
      m_.snapshot_id = t.id;
      m_.snapshot_taken = m_.taken;
    };
  }

  bool step() {
    std::optional<gate_item> item = gate_.try_next();
    if (!item) return false;
    const std::uint32_t c = item->channel;
    if (!item->is_event()) {
      // The handler asserts scenario 12 itself; the model checks it independently below.
      REQUIRE(item->data.size() > 0);
    }
    h_.apply(handler_.on_item(*item));
    if (!item->is_event()) {
      const std::size_t index = m_.taken[c]++;
      REQUIRE(sluice::test::text_of(item->data.data()) == payload(c, index));  // once, in order
      const checkpoint_id p = handler_.pending();
      if (handler_.aligning() && m_.barrier_at[c].contains(p)) {
        // Aligning on p: data sent after c's barrier p must still be held back (scenario 12).
        REQUIRE(index < m_.barrier_at[c].at(p));
      }
    }
    check_finished();
    return true;
  }

  void drain() {
    for (int i = 0; i < 100'000 && step(); ++i) {
    }
  }

  void check_finished() {
    for (; m_.finished_checked < h_.finished.size(); ++m_.finished_checked) {
      const checkpoint_id id = h_.finished[m_.finished_checked];
      REQUIRE(id == m_.snapshot_id);
      std::uint64_t buffers = 0;
      for (std::uint32_t c = 0; c < channels; ++c) {
        const auto at = m_.barrier_at[c].find(id);
        const std::size_t end = at != m_.barrier_at[c].end() ? at->second : m_.sent[c];  // or ended
        std::vector<std::string> expected;
        for (std::size_t i = m_.snapshot_taken[c]; i < end; ++i) expected.push_back(payload(c, i));
        INFO("checkpoint " << id << " channel " << c);
        REQUIRE(h_.captured(id, c) == expected);
        buffers += expected.size();
      }
      REQUIRE(handler_.last_stats());
      REQUIRE(handler_.last_stats()->id == id);
      REQUIRE(handler_.last_stats()->captured_buffers == buffers);
    }
  }

  void send_data(std::uint32_t c) {
    gate_.take_credit_announcements();
    if (m_.ended[c] || gate_.announced_unused(c) == 0) return;
    sluice::test::put(gate_, c, payload(c, m_.sent[c]++));
  }

  // A priority barrier is taken next (next() yields it first), after `behind` more data buffers the
  // sender sent after it: they are behind it, not channel state (gate_item::overtaken).
  void send_barrier(std::uint32_t c, std::uint64_t id, bool priority, unsigned behind) {
    if (m_.ended[c]) return;
    m_.last_id[c] = id;
    m_.barrier_at[c][id] = m_.sent[c];
    sluice::test::barrier(gate_, c, id, priority);
    if (!priority) return;
    for (unsigned i = 0; i < behind; ++i) send_data(c);
    step();
  }

  void send_marker(std::uint32_t c, std::uint64_t id) {
    if (m_.ended[c]) return;
    m_.last_id[c] = id;
    sluice::test::marker(gate_, c, id);
    step();
  }

  void end(std::uint32_t c) {
    if (m_.ended[c]) return;
    m_.ended[c] = true;
    gate_.deliver_end_of_partition(c);
  }

  harness& h() { return h_; }

 private:
  input_gate& gate_;
  barrier_handler& handler_;
  checkpoint_mode mode_;
  model& m_;
  harness h_;
};

struct totals {
  std::size_t triggers = 0, finished = 0, aborts = 0, captured = 0, switched = 0;
};

task<void> stress_body(network_memory* memory, checkpoint_mode mode, std::uint32_t seed, totals* sum) {
  local_buffer_pool pool(memory->pool(0), channels * 4, channels * 4);
  {
    input_gate gate(pool, {.channels = channels, .exclusive_per_channel = 4, .floating = 0});
    barrier_handler handler(gate, {.mode = mode, .alignment_timeout = 3ms});
    model m;
    stress s(gate, handler, mode, m);
    const std::size_t bookkeeping = handler.bookkeeping_bytes();
    std::mt19937 rng(seed);
    const auto chance = [&](unsigned percent) { return rng() % 100 < percent; };
    const unsigned priority_percent = mode == checkpoint_mode::unaligned         ? 80
                                      : mode == checkpoint_mode::aligned_timeout ? 20
                                      : mode == checkpoint_mode::at_least_once   ? 50
                                                                                 : 3;
    // The coordinator's latest id; each upstream sends every id up to it in order, now and then
    // skipping to the latest (it declined the ones between), or cancelling one with a marker.
    std::uint64_t latest = 0;
    for (int op = 0; op < 600; ++op) {
      const std::uint32_t c = rng() % channels;
      const unsigned r = rng() % 100;
      const std::uint64_t next = chance(95) ? m.last_id[c] + 1 : latest;
      if (r < 35) {
        s.send_data(c);
      } else if (r < 38) {
        ++latest;
      } else if (r < 50) {
        if (m.last_id[c] < latest) {
          const bool priority = chance(priority_percent);
          s.send_barrier(c, next, priority, priority ? rng() % 3 : 0);
        }
      } else if (r < 51) {
        if (m.last_id[c] < latest) s.send_marker(c, next);
      } else if (r < 53 && chance(30)) {
        s.end(c);
      } else if (r < 80) {
        for (unsigned i = rng() % 3; i < 3 && s.step(); ++i) {
        }
      } else if (r < 88) {
        co_await sleep_for(1ms);
        s.h().apply(handler.on_timer());
        s.check_finished();
      } else if (r < 96) {
        s.h().complete_writes();
      } else if (r < 97) {
        const checkpoint_id id = handler.pending() != no_checkpoint && chance(70) ? handler.pending() : rng() % 40;
        s.h().apply(handler.abort(id, abort_reason::coordinator, "declined by another task"));
      } else if (!handler.replaying() && chance(30)) {
        s.h().apply(handler.set_replaying(true));  // a short replay phase
      }
      if (handler.replaying() && chance(10)) s.h().apply(handler.set_replaying(false));
      REQUIRE(handler.tracked_checkpoints() <= 1);
      REQUIRE(handler.bookkeeping_bytes() == bookkeeping);
      REQUIRE(gate.check_credit_accounting().empty());
      if (mode == checkpoint_mode::aligned || mode == checkpoint_mode::at_least_once) {
        REQUIRE(s.h().captured_channels() == 0);  // scenario 13
      }
    }
    // The upstreams finish; everything sent reaches the task, every pending checkpoint ends.
    s.h().apply(handler.set_replaying(false));
    for (std::uint32_t c = 0; c < channels; ++c) s.end(c);
    s.drain();
    for (std::uint32_t c = 0; c < channels; ++c) REQUIRE(m.taken[c] == m.sent[c]);
    REQUIRE(gate.finished());
    REQUIRE(handler.tracked_checkpoints() == 0);
    sum->triggers += s.h().triggers.size();
    sum->finished += s.h().finished.size();
    sum->aborts += s.h().aborts.size();
    sum->captured += s.h().captured_views;
    for (const trigger_snapshot& t : s.h().triggers) sum->switched += mode == checkpoint_mode::aligned_timeout && t.mode == checkpoint_mode::unaligned;
    s.h().complete_writes();
    gate.take_credit_announcements();
    REQUIRE(gate.check_credit_accounting().empty());
  }
  REQUIRE(pool.in_use() == 0);
  REQUIRE(pool.violations() == 0);
}

}  // namespace

TEST_CASE("barrier handler stress: random interleavings over many seeds keep every invariant", "[barrier][stress]") {
  network_memory memory(64 * segment_bytes, segment_bytes, 1);
  const auto mode = GENERATE(checkpoint_mode::aligned, checkpoint_mode::unaligned, checkpoint_mode::aligned_timeout,
                             checkpoint_mode::at_least_once);
  totals sum;
  for (std::uint32_t seed = 1; seed <= 150; ++seed) {
    INFO("mode " << to_string(mode) << " seed " << seed);
    sync_wait(stress_body(&memory, mode, seed, &sum), sluice::test::virtual_time());
  }
  // The interleavings must reach every outcome, or the checks above prove little.
  INFO("triggers " << sum.triggers << " finished " << sum.finished << " aborts " << sum.aborts << " captured views "
                   << sum.captured << " timeout switches " << sum.switched);
  CHECK(sum.triggers > 50);
  CHECK(sum.aborts > 100);
  if (mode == checkpoint_mode::unaligned || mode == checkpoint_mode::aligned_timeout) {
    CHECK(sum.finished > 20);
    CHECK(sum.captured > 100);
  }
  if (mode == checkpoint_mode::aligned_timeout) CHECK(sum.switched > 20);
}
