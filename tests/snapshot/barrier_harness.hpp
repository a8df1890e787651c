#pragma once
// A stand-in for a task's mailbox loop around a barrier_handler, for tests: it takes items from a
// real input_gate one at a time, hands them to the handler, carries out the actions into a log
// (and a fake channel-state writer that holds the captured views), then "processes" data.
//
//   harness h(gate, handler);
//   put(gate, 0, "a"); barrier(gate, 1, 5, /*priority=*/true);
//   h.drain();
//   CHECK(h.captured(5, 0) == std::vector<std::string>{"a"});

#include <sluice/buffers/input_gate.hpp>
#include <sluice/snapshot/barrier_handler.hpp>

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::test {

// Announces whatever credit the gate has (the sender's side of the credit loop), then delivers.
inline void put(buffers::input_gate& gate, std::uint32_t channel, std::string_view payload) {
  gate.take_credit_announcements();
  gate.deliver(channel, std::as_bytes(std::span(payload.data(), payload.size())), 0);
}
inline void barrier(buffers::input_gate& gate, std::uint32_t channel, std::uint64_t id, bool priority) {
  gate.deliver_event(channel, buffers::gate_event{buffers::gate_event::type::barrier, id}, priority);
}
inline void marker(buffers::input_gate& gate, std::uint32_t channel, std::uint64_t id) {
  gate.deliver_event(channel, buffers::gate_event{buffers::gate_event::type::cancellation_marker, id}, true);
}
inline std::string text_of(std::span<const std::byte> bytes) {
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

class harness {
 public:
  harness(buffers::input_gate& gate, snapshot::barrier_handler& handler) : gates_{&gate}, handler_(&handler) {}
  harness(std::vector<buffers::input_gate*> gates, snapshot::barrier_handler& handler)
      : gates_(std::move(gates)), handler_(&handler) {}

  // Takes and handles one item of gate `g`; false when it has nothing takeable.
  bool step(std::uint32_t g = 0) {
    std::optional<buffers::gate_item> item = gates_.at(g)->try_next();
    if (!item) return false;
    handle(*item, g);
    return true;
  }
  void drain(std::uint32_t g = 0, std::size_t max_steps = 10'000) {
    for (std::size_t i = 0; i < max_steps && step(g); ++i) {
    }
  }
  void handle(buffers::gate_item& item, std::uint32_t g = 0) {
    apply(handler_->on_item(item, g));
    if (item.is_event()) {
      log.push_back(describe_event(item));
    } else {
      processed.emplace_back(item.channel, text_of(item.data.data()));
      log.push_back("data " + std::to_string(item.channel) + " " + text_of(item.data.data()));
    }
  }

  void apply(snapshot::barrier_actions actions) {
    for (snapshot::barrier_action& a : actions) {
      if (auto* t = std::get_if<snapshot::trigger_snapshot>(&a)) {
        log.push_back("trigger " + std::to_string(t->id) + " " + std::string(snapshot::to_string(t->mode)));
        triggers.push_back(*t);
        if (on_trigger) on_trigger(*t);
        if (t->mode == snapshot::checkpoint_mode::unaligned) open_ = t->id;
      } else if (auto* c = std::get_if<snapshot::capture_input>(&a)) {
        REQUIRE(c->id == open_);  // only between an unaligned trigger and its finish or abort
        std::string line = "capture " + std::to_string(c->id) + " " + std::to_string(c->channel) + ":";
        for (buffers::buffer_view& v : c->views) {
          line += ' ';
          line += text_of(v.data());
          captured_[{c->id, key(c->gate, c->channel)}].push_back(text_of(v.data()));
          writer_views.push_back(std::move(v));
          ++captured_views;
        }
        log.push_back(line);
      } else if (auto* f = std::get_if<snapshot::finish_input>(&a)) {
        REQUIRE(f->id == open_);
        open_ = 0;
        log.push_back("finish " + std::to_string(f->id));
        finished.push_back(f->id);
      } else if (auto* x = std::get_if<snapshot::abort_checkpoint>(&a)) {
        log.push_back("abort " + std::to_string(x->id) + " " + std::string(snapshot::to_string(x->reason)));
        aborts.push_back(*x);
        if (x->id == open_) open_ = 0;
      }
    }
  }

  std::vector<std::string> captured(std::uint64_t id, std::uint32_t channel, std::uint32_t gate = 0) const {
    auto it = captured_.find({id, key(gate, channel)});
    return it == captured_.end() ? std::vector<std::string>{} : it->second;
  }
  std::size_t captured_channels() const { return captured_.size(); }
  // The fake writer's writes all complete: the views go.
  void complete_writes() { writer_views.clear(); }

  std::vector<std::string> log;
  std::vector<std::pair<std::uint32_t, std::string>> processed;
  std::vector<snapshot::trigger_snapshot> triggers;
  std::vector<std::uint64_t> finished;
  std::vector<snapshot::abort_checkpoint> aborts;
  std::vector<buffers::buffer_view> writer_views;  // the fake writer's: each view dropped once
  std::size_t captured_views = 0;
  std::function<void(const snapshot::trigger_snapshot&)> on_trigger;

 private:
  static std::uint64_t key(std::uint32_t gate, std::uint32_t channel) {
    return (std::uint64_t{gate} << 32) | channel;
  }
  static std::string describe_event(const buffers::gate_item& item) {
    using type = buffers::gate_event::type;
    const std::string ch = std::to_string(item.channel);
    switch (item.event->kind) {
      case type::barrier: return "barrier " + ch + " " + std::to_string(item.event->id);
      case type::cancellation_marker: return "marker " + ch + " " + std::to_string(item.event->id);
      case type::end_of_partition: return "end " + ch;
      case type::channel_failed: return "failed " + ch;
      case type::custom: return "custom " + ch;
      case type::end_of_data: return "end-of-data " + ch;
      case type::watermark: return "watermark " + ch + " " + std::to_string(item.event->id);
      case type::barrier_announcement: return "announcement " + ch + " " + std::to_string(item.event->id);
    }
    return "?";
  }

  std::vector<buffers::input_gate*> gates_;
  snapshot::barrier_handler* handler_;
  std::uint64_t open_ = 0;  // the unaligned checkpoint the writer has open
  std::map<std::pair<std::uint64_t, std::uint64_t>, std::vector<std::string>> captured_;
};

}  // namespace sluice::test
