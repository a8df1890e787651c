#pragma once
// The keyed process operator: user functions with per-key state and event-time timers, on one input
// (keyed_stream::process) or two (keyed_stream::process_with), and the regular join built on the
// two-input form (keyed_stream::join). The declarations and their comments are in job.hpp.
//
// Each call of a user function gets a process_context for the key of the record (or timer) at hand:
// its state (an S, default-constructed on first use, forgotten by clear()), emit() downstream, and
// the key's event-time timers. Semantics, precisely:
//   - A timer is (time, key); setting one that is already set does nothing (duplicates coalesce), a
//     key may have any number of them, cancel_timer() removes one (nothing if it is not set).
//   - watermark(t): every timer with time <= t fires, in time order, ties in key order, then the
//     watermark goes downstream. A timer set from a timer callback for a time <= t fires in the same
//     pass (so a callback that sets its own (time, key) again every time never ends). A timer set
//     while a record is processed fires at the first watermark >= its time; one for a time the
//     watermark has already reached fires at the next watermark, whatever its time, or at the end.
//   - end_of_data(): the watermark becomes process_context::end_of_input (the largest time): every
//     remaining timer fires, in time order, timers set meanwhile too (a periodic timer must stop
//     re-arming when ctx.watermark() == end_of_input, or the end never comes); then end_of_data goes
//     downstream.
//   - ctx.watermark(): the largest watermark received (0 before any), end_of_input in the final pass.
//   - A key with no state and no timers takes no memory (an operator never iterates over keys).
// State and pending timers are operator state: the snapshot holds the watermark and the state table
// of every key's state and timers (frozen at the barrier, written in slices after: state_table.hpp),
// so a restored operator holds the same states and fires exactly the timers it had.
//
// A two-input stage has one gate for both inputs, the left input's channels first
// (task_builder::input_channels()); process_with_input decodes each record by the side its channel
// belongs to. The gate's watermark is the smallest over the channels of both inputs (join.hpp).
//
// The regular join keeps, per key, every left and every right record (state without end: size it for
// the keys and records it will see), and for each arriving record emits emit(key, l, r) with every
// record the other side holds, in their arrival order: each pair once, whichever side came first.

#include <sluice/buffers/codec.hpp>
#include <sluice/dataflow/job.hpp>
#include <sluice/dataflow/operators.hpp>
#include <sluice/dataflow/state_table.hpp>
#include <sluice/dataflow/state_ttl.hpp>

#include <cstdint>
#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>
#include <tuple>
#include <utility>
#include <vector>

namespace sluice::dataflow {

namespace detail {
template <class K, class S, class Out>
class keyed_process_core;
}  // namespace detail

template <class K, class S, class Out>
class process_context {
 public:
  // The watermark of the final pass, at the end of the input.
  static constexpr std::uint64_t end_of_input = std::numeric_limits<std::uint64_t>::max();

  const K& key() const noexcept { return *key_; }
  // The key's state, default-constructed on first use.
  S& state() {
    if (state_ == nullptr) state_ = &core_->state_of(*key_);
    return *state_;
  }
  bool has_state() const { return state_ != nullptr || core_->has_state(*key_); }
  // Forgets the key's state (state() makes a new one).
  void clear() {
    core_->clear(*key_);
    state_ = nullptr;
  }
  void emit(const Out& record) { core_->emit(record); }
  // A timer for this key at event time t (see the top of this file for when it fires).
  void timer_at(std::uint64_t t) { core_->timer_at(t, *key_); }
  void cancel_timer(std::uint64_t t) { core_->cancel_timer(t, *key_); }
  std::uint64_t watermark() const noexcept { return core_->watermark(); }

 private:
  friend class detail::keyed_process_core<K, S, Out>;
  process_context(detail::keyed_process_core<K, S, Out>& core, const K& key) : core_(&core), key_(&key) {}

  detail::keyed_process_core<K, S, Out>* core_;
  const K* key_;
  S* state_ = nullptr;
};

namespace detail {

// A key's entry in a keyed process operator's table: its state, if it has one, and its timers
// (ascending). An entry lives while it has either.
template <class S>
struct process_entry {
  bool has_state = false;
  S state{};
  std::vector<std::uint64_t> timers;
  bool empty() const noexcept { return !has_state && timers.empty(); }
  static constexpr auto fields() {
    return std::make_tuple(&process_entry::has_state, &process_entry::state, &process_entry::timers);
  }
};

// What both operator forms share: the states, the timers, the watermark and the firing. States and
// timers are in one state table by key (state_table.hpp); the timers' firing order, (time, key), is
// an index beside it, rebuilt from the table on a restore.
template <class K, class S, class Out>
class keyed_process_core {
 public:
  using context = process_context<K, S, Out>;
  using on_timer_fn = std::function<void(std::uint64_t, context&)>;

  keyed_process_core(on_timer_fn on_timer, collector<Out>& out, std::size_t key_groups, const char* what,
                     state_ttl ttl)
      : on_timer_(std::move(on_timer)), out_(&out), table_(what, key_groups), clock_(ttl) {
    table_.set_ttl(ttl.ttl);
  }

  // Runs fn with the key's context, its state expired first if due (state TTL; record_time is the
  // record's event time, for an event-time one).
  template <class Fn>
  void with_key(const K& key, Fn&& fn, std::uint64_t record_time = 0) {
    if (table_.ttl() == 0) {
      context ctx(*this, key);
      fn(ctx);
      return;
    }
    clock_.enter(table_, record_time, watermark_);
    expire_if_due(key);
    context ctx(*this, key);
    fn(ctx);
    clock_.leave(table_);
    table_.sweep(ttl_sweep_per_record, [this](auto r) { expire(r); });
  }
  bool event_ttl() const noexcept { return clock_.event(); }
  void watermark(std::uint64_t t) {
    if (clock_.event()) table_.advance_time(t);
    advance(t);
    out_->watermark(t);
  }
  void end_of_data() {
    advance(context::end_of_input);
    out_->end_of_data();
  }

  S& state_of(const K& key) {
    process_entry<S>& e = table_.upsert(key);
    if (!e.has_state) {
      e.has_state = true;
      e.state = S{};
    }
    return e.state;
  }
  bool has_state(const K& key) const {
    const process_entry<S>* e = table_.find(key);
    return e != nullptr && e->has_state;
  }
  void clear(const K& key) {
    const auto r = table_.locate(key);
    if (!r || !table_.value(*r).has_state) return;
    if (table_.value(*r).timers.empty()) {
      table_.erase(*r);
      return;
    }
    process_entry<S>& e = table_.modify(*r);
    e.has_state = false;
    e.state = S{};
  }
  void emit(const Out& record) { out_->collect(record); }
  void timer_at(std::uint64_t t, const K& key) {
    if (!timers_.emplace(t, key).second) return;
    std::vector<std::uint64_t>& times = table_.upsert(key).timers;
    times.insert(std::upper_bound(times.begin(), times.end(), t), t);
  }
  void cancel_timer(std::uint64_t t, const K& key) {
    if (timers_.erase(timer(t, key)) == 1) drop_timer(t, key);
  }
  std::uint64_t watermark() const noexcept { return watermark_; }

  // Version 2: the watermark, then the table (from freeze()). Version 1, (watermark, states in key
  // order, timers in (time, key) order), still restores.
  std::vector<std::byte> snapshot_state() const { return encode_head(2, watermark_); }
  std::unique_ptr<snapshot::deferred_state> freeze(snapshot::checkpoint_id id) { return table_.freeze(id); }
  void confirm(snapshot::checkpoint_id id) { table_.confirm(id); }
  void restore_state(std::span<const std::byte> bytes, const char* what) {
    timers_.clear();
    if (clock_.processing()) table_.set_time(clock_.fresh());
    if (!bytes.empty() && bytes[0] == std::byte{1}) {
      table_.clear();
      auto [watermark, states, timers] =
          decode_state<std::tuple<std::uint64_t, std::vector<std::pair<K, S>>, std::vector<timer>>>(bytes, what);
      watermark_ = watermark;
      for (auto& [key, s] : states) state_of(key) = std::move(s);
      for (auto& [t, key] : timers) timer_at(t, key);
      return;
    }
    if (!is_version(bytes, 2)) throw std::runtime_error(std::string("restore ") + what + ": unknown state version");
    watermark_ = restore_with_table<std::uint64_t>(bytes, what, table_, [this](std::uint64_t watermark) {
      table_.set_time(clock_.processing() ? clock_.fresh() : watermark);
    });
    table_.for_each([&](const K& key, const process_entry<S>& e) {
      for (std::uint64_t t : e.timers) timers_.emplace(t, key);
      runtime::pace_point();
    });
  }
  // Keys with a live state.
  std::size_t keys() const {
    std::size_t n = 0;
    table_.for_each_ref([&](auto r) { n += table_.value(r).has_state && !table_.expired(r) ? 1 : 0; });
    return n;
  }
  std::size_t pending_timers() const noexcept { return timers_.size(); }
  // Entries held: keys with a state or timers, expired ones not dropped yet too (memory).
  std::size_t entries() const noexcept { return table_.size(); }

 private:
  using timer = std::pair<std::uint64_t, K>;
  using ref = typename state_table<K, process_entry<S>>::ref;

  // State TTL: the key's entry is expired (its last write a ttl ago): its state goes, its timers stay
  // (the entry, written, is live again), an entry of neither goes. So no expired entry is ever seen
  // by the calls below, which find entries through the table's live-only lookups.
  void expire(ref r) {
    if (table_.value(r).has_state) {
      process_entry<S>& e = table_.modify(r);
      e.has_state = false;
      e.state = S{};
      if (!e.empty()) return;
    } else if (!table_.value(r).timers.empty()) {
      table_.modify(r);
      return;
    }
    table_.erase(r);
  }
  void expire_if_due(const K& key) {
    if (table_.ttl() == 0) return;
    const auto r = table_.locate_any(key);
    if (r && table_.expired(*r)) expire(*r);
  }

  // Takes time t off the key's entry (the index no longer has it); an entry left empty goes.
  void drop_timer(std::uint64_t t, const K& key) {
    const auto r = table_.locate(key);
    if (!r) return;
    process_entry<S>& e = table_.modify(*r);
    auto at = std::lower_bound(e.timers.begin(), e.timers.end(), t);
    if (at != e.timers.end() && *at == t) e.timers.erase(at);
    if (e.empty()) table_.erase(*r);
  }
  // Fires every timer <= the watermark (now at least t), the earliest first, until none is left:
  // one a callback sets for a time <= the watermark fires in this pass too.
  void advance(std::uint64_t t) {
    if (t > watermark_) watermark_ = t;
    while (!timers_.empty() && timers_.begin()->first <= watermark_) {
      auto node = timers_.extract(timers_.begin());  // owns the key while the callback runs
      expire_if_due(node.value().second);
      drop_timer(node.value().first, node.value().second);
      if (on_timer_) {
        context ctx(*this, node.value().second);
        on_timer_(node.value().first, ctx);
      }
      runtime::pace_point();
    }
  }

  on_timer_fn on_timer_;
  collector<Out>* out_;
  state_table<K, process_entry<S>> table_;
  ttl_clock clock_;
  std::set<timer> timers_;  // (time, key): fired in time order, ties in key order
  std::uint64_t watermark_ = 0;
};

}  // namespace detail

// The one-input form: on_record(record, ctx) for every record, ctx being its key's.
template <class K, class T, class S, class Out>
class keyed_process final : public collector<T>, public stateful, public chain_part {
 public:
  using context = process_context<K, S, Out>;
  struct functions {
    std::function<K(const T&)> key;
    std::function<void(const T&, context&)> on_record;
    std::function<void(std::uint64_t, context&)> on_timer;  // may be empty: a timer then does nothing
  };
  keyed_process(functions fns, collector<Out>& out, std::size_t key_groups = default_key_groups, ttl_spec<T> ttl = {})
      : key_(std::move(fns.key)), on_record_(std::move(fns.on_record)), time_(std::move(ttl.time)),
        core_(std::move(fns.on_timer), out, key_groups, "keyed process", ttl.ttl) {
    if (core_.event_ttl() && !time_) throw std::invalid_argument("keyed process: an event-time TTL without a time");
  }

  void collect(const T& record) override {
    core_.with_key(key_(record), [&](context& ctx) { on_record_(record, ctx); }, time_ ? time_(record) : 0);
  }
  void watermark(std::uint64_t t) override { core_.watermark(t); }
  void end_of_data() override { core_.end_of_data(); }
  std::vector<std::byte> snapshot_state() const override { return core_.snapshot_state(); }
  std::unique_ptr<snapshot::deferred_state> snapshot_rest(snapshot::checkpoint_id id) override {
    return core_.freeze(id);
  }
  void checkpoint_completed(snapshot::checkpoint_id id) override { core_.confirm(id); }
  void restore_state(std::span<const std::byte> bytes) override { core_.restore_state(bytes, "keyed process"); }

  // Keys that have a state; timers set and not fired or cancelled.
  std::size_t keys() const { return core_.keys(); }
  std::size_t entries() const noexcept { return core_.entries(); }
  std::size_t pending_timers() const noexcept { return core_.pending_timers(); }
  std::uint64_t current_watermark() const noexcept { return core_.watermark(); }

 private:
  std::function<K(const T&)> key_;
  std::function<void(const T&, context&)> on_record_;
  std::function<std::uint64_t(const T&)> time_;  // an event-time TTL's record time
  detail::keyed_process_core<K, S, Out> core_;
};

// The two-input form: on_left(l, ctx) and on_right(r, ctx), ctx being the record's key's; one state
// and one set of timers per key for both sides.
template <class K, class L, class R, class S, class Out>
class keyed_co_process final : public stateful, public chain_part {
 public:
  using context = process_context<K, S, Out>;
  struct functions {
    std::function<K(const L&)> left_key;
    std::function<K(const R&)> right_key;
    std::function<void(const L&, context&)> on_left;
    std::function<void(const R&, context&)> on_right;
    std::function<void(std::uint64_t, context&)> on_timer;  // may be empty: a timer then does nothing
  };
  // ttl: the stage's state TTL; an event-time one needs both inputs' record times.
  keyed_co_process(functions fns, collector<Out>& out, std::size_t key_groups = default_key_groups,
                   state_ttl ttl = {}, std::function<std::uint64_t(const L&)> left_time = {},
                   std::function<std::uint64_t(const R&)> right_time = {})
      : left_key_(std::move(fns.left_key)), right_key_(std::move(fns.right_key)), on_left_(std::move(fns.on_left)),
        on_right_(std::move(fns.on_right)), left_time_(std::move(left_time)), right_time_(std::move(right_time)),
        core_(std::move(fns.on_timer), out, key_groups, "keyed co-process", ttl) {
    if (core_.event_ttl() && !(left_time_ && right_time_)) {
      throw std::invalid_argument("keyed co-process: an event-time TTL without both inputs' times");
    }
  }

  void left(const L& record) {
    core_.with_key(left_key_(record), [&](context& ctx) { on_left_(record, ctx); }, left_time_ ? left_time_(record) : 0);
  }
  void right(const R& record) {
    core_.with_key(right_key_(record), [&](context& ctx) { on_right_(record, ctx); },
                   right_time_ ? right_time_(record) : 0);
  }
  void watermark(std::uint64_t t) { core_.watermark(t); }
  void end_of_data() { core_.end_of_data(); }
  std::vector<std::byte> snapshot_state() const override { return core_.snapshot_state(); }
  std::unique_ptr<snapshot::deferred_state> snapshot_rest(snapshot::checkpoint_id id) override {
    return core_.freeze(id);
  }
  void checkpoint_completed(snapshot::checkpoint_id id) override { core_.confirm(id); }
  void restore_state(std::span<const std::byte> bytes) override { core_.restore_state(bytes, "keyed co-process"); }

  std::size_t keys() const { return core_.keys(); }
  std::size_t entries() const noexcept { return core_.entries(); }
  std::size_t pending_timers() const noexcept { return core_.pending_timers(); }
  std::uint64_t current_watermark() const noexcept { return core_.watermark(); }

 private:
  std::function<K(const L&)> left_key_;
  std::function<K(const R&)> right_key_;
  std::function<void(const L&, context&)> on_left_;
  std::function<void(const R&, context&)> on_right_;
  std::function<std::uint64_t(const L&)> left_time_;  // an event-time TTL's record times
  std::function<std::uint64_t(const R&)> right_time_;
  detail::keyed_process_core<K, S, Out> core_;
};

// The head of a two-input process task (task_parts.hpp): channels below the left input's count carry L, the rest R.
template <class K, class L, class R, class S, class Out>
using process_with_input = two_input_head<L, R, keyed_co_process<K, L, R, S, Out>>;

// The regular join's state for a key: the left and the right records so far, in arrival order.
template <class L, class R>
using regular_join_state = std::pair<std::vector<L>, std::vector<R>>;
template <class K, class L, class R, class Out>
using regular_join_op = keyed_co_process<K, L, R, regular_join_state<L, R>, Out>;

// An event-time TTL of a regular join: two records join when their times are less than the ttl
// apart, and a held record goes once the watermark is a ttl past its time (no later record could
// join it). So which pairs come out depends on the records' times only, not on the order the two
// inputs' channels interleave in: a replay after a recovery emits exactly what the first run would.
template <class L, class R>
struct join_event_ttl {
  std::uint64_t ttl = 0;  // 0: none
  std::function<std::uint64_t(const L&)> left_time;
  std::function<std::uint64_t(const R&)> right_time;

  bool within(std::uint64_t a, std::uint64_t b) const noexcept { return ttl == 0 || (a > b ? a - b : b - a) < ttl; }
  // Forgets the held records the watermark is a ttl past.
  void prune(regular_join_state<L, R>& s, std::uint64_t watermark) const {
    if (ttl == 0 || watermark < ttl) return;
    const std::uint64_t horizon = watermark - ttl;
    std::erase_if(s.first, [&](const L& l) { return left_time(l) <= horizon; });
    std::erase_if(s.second, [&](const R& r) { return right_time(r) <= horizon; });
  }
};

// The regular join as the functions of a keyed_co_process (what keyed_stream::join runs): a record
// emits emit(key, l, r) with each record the other side holds (within an event-time TTL of it, if
// one is given), then is held itself. No timers.
template <class K, class L, class R, class Out>
typename regular_join_op<K, L, R, Out>::functions regular_join_functions(
    std::function<K(const L&)> left_key, std::function<K(const R&)> right_key,
    std::function<Out(const K&, const L&, const R&)> emit, join_event_ttl<L, R> ttl = {}) {
  using context = process_context<K, regular_join_state<L, R>, Out>;
  auto on_left = [emit, ttl](const L& l, context& ctx) {
    auto& state = ctx.state();
    ttl.prune(state, ctx.watermark());
    const std::uint64_t t = ttl.ttl == 0 ? 0 : ttl.left_time(l);
    for (const R& r : state.second) {
      if (ttl.ttl == 0 || ttl.within(t, ttl.right_time(r))) ctx.emit(emit(ctx.key(), l, r));
    }
    state.first.push_back(l);
  };
  auto on_right = [emit, ttl](const R& r, context& ctx) {
    auto& state = ctx.state();
    ttl.prune(state, ctx.watermark());
    const std::uint64_t t = ttl.ttl == 0 ? 0 : ttl.right_time(r);
    for (const L& l : state.first) {
      if (ttl.ttl == 0 || ttl.within(ttl.left_time(l), t)) ctx.emit(emit(ctx.key(), l, r));
    }
    state.second.push_back(r);
  };
  return {std::move(left_key), std::move(right_key), on_left, on_right, {}};
}

template <class K, class T>
template <class S, class Out>
stream<Out> keyed_stream<K, T>::process(
    std::string name, std::size_t parallelism, std::function<void(const T&, process_context<K, S, Out>&)> on_record,
    std::function<void(std::uint64_t, process_context<K, S, Out>&)> on_timer) const {
  if (!on_record) throw std::invalid_argument("process '" + name + "': on_record is empty");
  const std::size_t stage = exchange(std::move(name), parallelism);
  using op = keyed_process<K, T, S, Out>;
  typename op::functions fns{key_, std::move(on_record), std::move(on_timer)};
  return stream<Out>(up_.job(), stage, [fns, ttl = ttl_](task_builder& b, collector<Out>& down) {
    auto& p = b.make<op>(fns, down, b.key_groups(), ttl);
    b.add_state(p);
    b.set_input(b.make<gate_input<T>>(p));
  }, keyed_identity(stage, {"op=process"}));
}

template <class K, class T>
template <class R, class S, class Out>
stream<Out> keyed_stream<K, T>::process_with(
    const keyed_stream<K, R>& right, std::string name, std::size_t parallelism,
    std::function<void(const T&, process_context<K, S, Out>&)> on_left,
    std::function<void(const R&, process_context<K, S, Out>&)> on_right,
    std::function<void(std::uint64_t, process_context<K, S, Out>&)> on_timer) const {
  if (up_.job() != right.upstream().job()) throw std::invalid_argument("process_with: both inputs must be of one job");
  if (!on_left || !on_right) {
    throw std::invalid_argument("process_with '" + name + "': on_left and on_right must be set");
  }
  const std::size_t stage = exchange_with(right, std::move(name), parallelism);
  using op = keyed_co_process<K, T, R, S, Out>;
  typename op::functions fns{key_, right.key(), std::move(on_left), std::move(on_right), std::move(on_timer)};
  const dataflow::state_ttl stage_ttl = detail::two_input_ttl(ttl_, right.ttl(), up_.job()->stages()[stage].name);
  return stream<Out>(up_.job(), stage, [fns, stage_ttl, lt = ttl_.time, rt = right.ttl().time](task_builder& b,
                                                                                             collector<Out>& down) {
    auto& p = b.make<op>(fns, down, b.key_groups(), stage_ttl, lt, rt);
    b.add_state(p);
    b.set_input(b.make<process_with_input<K, T, R, S, Out>>(b.input_channels().at(0), p));
  }, keyed_identity(stage, {"op=process_with"}));
}

template <class K, class T>
template <class R, class Out>
stream<Out> keyed_stream<K, T>::join(const keyed_stream<K, R>& right, std::string name, std::size_t parallelism,
                                     std::function<Out(const K&, const T&, const R&)> emit) const {
  if (!emit) throw std::invalid_argument("join '" + name + "': emit is empty");
  const dataflow::state_ttl stage_ttl = detail::two_input_ttl(ttl_, right.ttl(), name);
  join_event_ttl<T, R> per_record;
  if (stage_ttl.on() && stage_ttl.domain == dataflow::state_ttl::clock::event_time) {
    per_record = {stage_ttl.ttl, ttl_.time, right.ttl().time};
  }
  auto fns = regular_join_functions<K, T, R, Out>(key_, right.key(), std::move(emit), std::move(per_record));
  const stream<Out> joined = process_with<R, regular_join_state<T, R>, Out>(right, std::move(name), parallelism,
                                                                          std::move(fns.on_left),
                                                                          std::move(fns.on_right), {});
  // Identity: a join, not a process_with of functions that cannot be described.
  return stream<Out>(joined.job(), joined.stage(), joined.take(),
                     keyed_identity(joined.stage(), {"op=join", "join.kind=inner"}));
}

}  // namespace sluice::dataflow
