// Scenario 15 of docs/scenarios.md (FLINK-22946): two channels of one gate recycle buffers at the
// same time while the channel-state writer holds some of theirs. No deadlock, and every buffer goes
// back to its pool.
//
// The pieces are the real ones: an input gate with exclusive and floating buffers, its credit pump,
// the barrier handler (unaligned) and the channel-state writer, on the hand-driven test backend so
// that no state write completes until the test says so. The two upstream senders are the test: they
// send only against the credit the pump grants them, always with a backlog, so both channels keep
// asking for floating buffers. The order is forced:
//   1. both channels fill their exclusive and floating buffers; a priority barrier on channel 0
//      overtakes its three, channel 1's three are captured as the task takes them; the task releases
//      each at once, so the writer's views are all that hold the six buffers: no credit, no floating
//      buffer to hand out, both senders stopped (a slow disk slows the producers, invariant 6);
//   2. the writes complete one by one, channel 1's first, while both channels send and recycle again;
//      each buffer whose write is done becomes credit; channel 1's barrier ends the capture;
//   3. with the checkpoint done, both channels hold floating buffers and wait for more; the task
//      releases one of each channel back to back: each recycle only schedules the credit pump
//      (nothing runs inside it) and the two buffers go to the two waiting channels, one each;
//   4. everything is sent, taken and released; the state file holds exactly the captured bytes.

#include <sluice/buffers/channel.hpp>
#include <sluice/buffers/input_gate.hpp>
#include <sluice/runtime/scope.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/test_backend.hpp>
#include <sluice/snapshot/barrier_handler.hpp>
#include <sluice/snapshot/channel_state_writer.hpp>

#include <snapshot/writer_support.hpp>
#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

using namespace sluice;
using namespace sluice::buffers;
using namespace sluice::snapshot;
using runtime::op_code;
using runtime::sync_wait;
using runtime::task;
using runtime::test_backend;
using test::temp_dir;

namespace {

constexpr std::size_t segment_bytes = 4096;
constexpr std::size_t payload_bytes = 64;
constexpr std::uint32_t channels = 2;
constexpr gate_options options{.channels = channels, .exclusive_per_channel = 2, .floating = 2};
constexpr std::size_t gate_bound = channels * 2 + 2;  // segments the gate may hold (invariant 6)
constexpr std::size_t per_channel = 40;               // data buffers each upstream sends
constexpr checkpoint_id checkpoint = 1;
constexpr task_id test_task = 15;

std::string text_of(std::span<const std::byte> bytes) {
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

std::string payload(std::uint32_t channel, std::size_t index) {
  std::string s = "ch" + std::to_string(channel) + "#" + std::to_string(index) + ":";
  s.resize(payload_bytes, '.');
  return s;
}

// One upstream subpartition: it sends against the credit the gate's pump grants it.
struct upstream final : credit_route {
  std::size_t credit = 0;
  std::size_t sent = 0;
  std::uint64_t grants = 0;  // calls from the credit pump
  void grant(std::uint32_t credits) override {
    credit += credits;
    ++grants;
  }
};

struct seen {
  std::string error;                                      // the first thing that went wrong
  std::array<std::vector<std::string>, channels> captured;  // handed to the writer, in order
  std::array<std::size_t, channels> received{};
  std::size_t most_in_use = 0;
  std::size_t view_held_max = 0;
  bool stalled_under_writer = false;  // both senders out of credit while the writer held everything
  bool exchanged = false;             // phase 3 happened as described
  bool completed = false;
  std::uint64_t channel_state_bytes = 0;
};

class rig {
 public:
  rig(local_buffer_pool& pool, input_gate& gate, barrier_handler& handler, channel_state_writer& writer,
      std::string chk, bool strict_bound, seen& out)
      : pool_(pool), gate_(gate), handler_(handler), writer_(writer), chk_(std::move(chk)),
        strict_bound_(strict_bound), out_(out) {}

  std::array<upstream, channels> up;
  std::vector<gate_item> held;  // what the task has taken and not released yet

  void fault(const std::string& what) {
    if (out_.error.empty()) out_.error = what;
  }

  // The identity of input_gate.hpp for every channel, and the gate's memory bound.
  void check(const char* where) {
    const std::string err = gate_.check_credit_accounting();
    if (!err.empty()) fault(std::string(where) + ": " + err);
    out_.most_in_use = std::max(out_.most_in_use, pool_.in_use());
    out_.view_held_max = std::max(out_.view_held_max, gate_.view_held(0) + gate_.view_held(1));
    if (strict_bound_) {
      if (pool_.in_use() > gate_bound) {
        fault(std::string(where) + ": the pool lends " + std::to_string(pool_.in_use()) +
              " segments, above the gate's bound of " + std::to_string(gate_bound));
      }
      if (pool_.in_use() != gate_.segments_held()) {
        fault(std::string(where) + ": the pool lends " + std::to_string(pool_.in_use()) +
              " segments, the gate accounts for " + std::to_string(gate_.segments_held()));
      }
    }
  }

  // Upstream `c` sends one buffer if it has credit (and has sent fewer than `limit`); the backlog is
  // what it still has to send.
  bool send(std::uint32_t c, std::size_t limit = per_channel) {
    upstream& u = up[c];
    if (u.credit == 0 || u.sent >= limit) return false;
    const std::string text = payload(c, u.sent);
    ++u.sent;
    --u.credit;
    gate_.deliver(c, std::as_bytes(std::span(text.data(), text.size())), per_channel - u.sent);
    check("delivery");
    return true;
  }
  bool send_any(std::size_t limit = per_channel) {
    bool any = false;
    for (std::uint32_t c = 0; c < channels; ++c) any = send(c, limit) || any;
    return any;
  }

  // The task takes one item, hands it to the handler and carries out the actions; it keeps a data
  // buffer when `hold`, else releases it at once.
  bool take(bool hold) {
    std::optional<gate_item> item = gate_.try_next();
    if (!item) return false;
    carry_out(handler_.on_item(*item));
    if (!item->is_event()) {
      const std::uint32_t c = item->channel;
      const std::string text = text_of(item->data.data());
      if (text != payload(c, out_.received[c])) {
        fault("channel " + std::to_string(c) + ": got '" + text + "', expected '" + payload(c, out_.received[c]) + "'");
      }
      ++out_.received[c];
      if (hold) held.push_back(std::move(*item));
    }
    item.reset();
    check("take");
    return true;
  }
  void take_all(bool hold) {
    while (take(hold)) {
    }
  }

  // Releases the first held buffer of channel `c` that is (or is not) floating.
  bool release_held(std::uint32_t c, bool floating) {
    for (auto it = held.begin(); it != held.end(); ++it) {
      if (it->channel == c && it->data.is_floating() == floating) {
        held.erase(it);
        check("release");
        return true;
      }
    }
    return false;
  }

 private:
  void carry_out(barrier_actions actions) {
    for (barrier_action& a : actions) {
      if (const auto* t = std::get_if<trigger_snapshot>(&a)) {
        if (t->mode != checkpoint_mode::unaligned) fault("a snapshot that is not unaligned");
        io::result<void> started = writer_.start(t->id, chk_);
        if (!started) fault("start: " + started.error().message());
        io::result<void> output = writer_.finish_output(t->id);  // this task has no output channels
        if (!output) fault("finish_output: " + output.error().message());
      } else if (auto* c = std::get_if<capture_input>(&a)) {
        for (const buffer_view& v : c->views) out_.captured[c->channel].push_back(text_of(v.data()));
        io::result<void> added = writer_.add_input(c->id, static_cast<std::uint16_t>(c->gate), c->channel,
                                                   std::move(c->views));
        if (!added) fault("add_input: " + added.error().message());
      } else if (const auto* f = std::get_if<finish_input>(&a)) {
        io::result<void> finished = writer_.finish_input(f->id);
        if (!finished) fault("finish_input: " + finished.error().message());
      } else if (const auto* x = std::get_if<abort_checkpoint>(&a)) {
        fault("checkpoint " + std::to_string(x->id) + " aborted: " + x->detail);
      }
    }
  }

  local_buffer_pool& pool_;
  input_gate& gate_;
  barrier_handler& handler_;
  channel_state_writer& writer_;
  std::string chk_;
  bool strict_bound_;
  seen& out_;
};

// The oldest pending operation of the writer, preferring a payload write of channel `first`.
runtime::io_op* next_write(test_backend& backend, std::uint32_t first) {
  const std::string prefix = "ch" + std::to_string(first) + "#";
  for (runtime::io_op* op : backend.pending()) {
    if (op->internal || op->code != op_code::write || op->len != payload_bytes) continue;
    if (std::string(static_cast<const char*>(op->buf), prefix.size()) == prefix) return op;
  }
  return test::oldest_op(backend);
}

task<void> recycle_under_writer(std::string chk, test_backend* backend, std::size_t pool_max, bool strict_bound,
                                seen* out) {
  network_memory memory(16 * segment_bytes, segment_bytes, 1);
  local_buffer_pool pool(memory.pool(0), gate_bound - options.floating, pool_max);
  {
    input_gate gate(pool, options);
    barrier_handler handler(gate, {.mode = checkpoint_mode::unaligned});
    channel_state_writer writer(test_task);
    backend->set_auto(false);  // no I/O completes unless the test performs it
    rig r(pool, gate, handler, writer, chk, strict_bound, *out);
    gate_credit_pump pump(gate);
    for (std::uint32_t c = 0; c < channels; ++c) pump.connect(c, r.up[c]);
    runtime::scope background;
    background.spawn(pump.run());
    co_await test::turns(3);
    if (r.up[0].credit != 2 || r.up[1].credit != 2) r.fault("the exclusive credits were not announced");

    // --- 1: fill, snapshot, and the writer holds every buffer ---------------------------------
    r.send(0);  // each with a backlog: both queue for a floating buffer
    r.send(1);
    co_await test::turns(3);  // the pump hands them out, one each
    if (gate.floating_assigned(0) != 1 || gate.floating_assigned(1) != 1) r.fault("floating buffers not shared 1/1");
    while (r.send_any()) {
    }
    gate.deliver_event(0, gate_event{gate_event::type::barrier, checkpoint}, /*priority=*/true);
    r.take_all(/*hold=*/false);
    co_await test::turns(5);
    r.take_all(false);
    r.check("the writer holds everything");
    out->stalled_under_writer = pool.in_use() == gate_bound && r.up[0].credit == 0 && r.up[1].credit == 0 &&
                                !r.send_any() && out->captured[0].size() == 3 && out->captured[1].size() == 3;

    // --- 2: the writes complete one at a time, channel 1's first -------------------------------
    constexpr std::size_t phase_2_sends = 12;  // per channel, so that phase 3 has data left
    bool barrier_sent = false;
    for (int idle = 0; idle < 8;) {
      runtime::io_op* op = next_write(*backend, 1);
      if (op != nullptr) backend->perform(*op);
      co_await test::turns(3);
      const bool moved = r.send_any(phase_2_sends);
      r.take_all(false);
      if (!barrier_sent && r.up[1].sent >= 6) {  // channel 1's barrier, after three more buffers
        gate.deliver_event(1, gate_event{gate_event::type::barrier, checkpoint}, false);
        barrier_sent = true;
      }
      idle = op == nullptr && !moved ? idle + 1 : 0;
    }
    const std::optional<checkpoint_outcome> outcome = writer.try_result(checkpoint);
    out->completed = outcome && outcome->completed();
    if (outcome) out->channel_state_bytes = outcome->channel_state_bytes;

    // --- 3: both channels wait for floating buffers; each gives one back, in one turn ----------
    for (int round = 0; round < 3; ++round) {  // the task holds what it takes; the senders run dry
      co_await test::turns(3);
      while (r.send_any()) {
      }
      r.take_all(/*hold=*/true);
    }
    const bool both_hold_floating = gate.floating_assigned(0) == 1 && gate.floating_assigned(1) == 1;
    const bool both_dry = r.up[0].credit == 0 && r.up[1].credit == 0 && gate.waiting_for_floating() == 2;
    const std::uint64_t grants = r.up[0].grants + r.up[1].grants;
    const bool released = r.release_held(0, true) && r.release_held(1, true);
    const bool nothing_ran = r.up[0].grants + r.up[1].grants == grants;  // the recycles only scheduled
    co_await test::turns(3);
    out->exchanged = both_hold_floating && both_dry && released && nothing_ran &&
                     gate.floating_assigned(0) == 1 && gate.floating_assigned(1) == 1 && r.up[0].credit == 1 &&
                     r.up[1].credit == 1;

    // --- 4: the rest --------------------------------------------------------------------------
    r.held.clear();
    for (int idle = 0; idle < 8;) {
      co_await test::turns(3);
      const bool moved = r.send_any();
      r.take_all(false);
      idle = moved ? 0 : idle + 1;
    }
    for (std::uint32_t c = 0; c < channels; ++c) gate.deliver_end_of_partition(c);
    r.take_all(false);
    if (!gate.finished()) r.fault("the gate did not finish");
    co_await background.join();
    co_await writer.close();
    co_await test::run_io(backend);
    r.check("the end");
  }
  if (pool.in_use() != 0) out->error += " pool still lends " + std::to_string(pool.in_use()) + " segments;";
  if (pool.violations() != 0) out->error += " pool violations;";
}

void check_state_file(const std::string& chk, const seen& s) {
  const test::read_state_file file = test::parse_state_file(chk + "/" + state_file_name(test_task));
  std::array<std::vector<std::string>, channels> written;
  for (const test::read_record& rec : file.records) {
    REQUIRE(rec.header.type == record_type::input_channel);
    REQUIRE(rec.header.index < channels);
    written[rec.header.index].push_back(text_of(rec.payload));
  }
  CHECK(written[0] == s.captured[0]);
  CHECK(written[1] == s.captured[1]);
}

}  // namespace

TEST_CASE("scenario 15: two channels recycling while the channel-state writer holds their buffers never deadlock "
          "and every buffer returns",
          "[gate][channel_state_writer][scenario]") {
  temp_dir dir;
  const std::string chk = dir.file("chk-1");
  std::filesystem::create_directories(chk);
  test_backend* backend = nullptr;
  auto run_options = test::hand_driven(backend);
  seen s;
  sync_wait(recycle_under_writer(chk, backend, gate_bound, /*strict_bound=*/false, &s), std::move(run_options));
  INFO(s.error);
  CHECK(s.error.empty());
  CHECK(s.stalled_under_writer);
  CHECK(s.view_held_max == 6);  // the four exclusive and the two floating buffers, at once (the writer views all)
  CHECK(s.exchanged);
  CHECK(s.received == std::array<std::size_t, channels>{per_channel, per_channel});
  CHECK(s.most_in_use <= gate_bound);
  REQUIRE(s.completed);
  CHECK(s.captured[0] == std::vector<std::string>{payload(0, 0), payload(0, 1), payload(0, 2)});
  CHECK(s.captured[1].size() == 6);
  CHECK(s.channel_state_bytes == 9 * payload_bytes);
  check_state_file(chk, s);
}

// Was a bug (now fixed; this test failed before the fix): a floating buffer released while the writer still views it
// leaves the gate's floating count at once (input_gate::give_back), so the gate can take another
// floating segment while the view holds the first: the pool lends more than the gate accounts for,
// beyond the gate's bound when the pool has room.
TEST_CASE("scenario 15: a floating buffer the writer still views counts against the gate's bound",
          "[gate][channel_state_writer][scenario]") {
  temp_dir dir;
  const std::string chk = dir.file("chk-1");
  std::filesystem::create_directories(chk);
  test_backend* backend = nullptr;
  auto run_options = test::hand_driven(backend);
  seen s;
  sync_wait(recycle_under_writer(chk, backend, gate_bound + 2, /*strict_bound=*/true, &s), std::move(run_options));
  INFO(s.error);
  CHECK(s.error.empty());
  CHECK(s.most_in_use <= gate_bound);
}
