#pragma once
// State TTL: keyed state that expires a while after its key's last write (docs/state.md, "State
// TTL"). Set on a keyed stream before the operator that keeps the state:
//
//   bids.key_by<std::int64_t>(...).state_ttl(state_ttl::processing_time(std::chrono::hours(1)))
//       .join<person, row>(persons, "join", 4, emit);
//   counts.key_by<std::string>(...).state_ttl(state_ttl::event_time(60'000), [](const hit& h) { return h.time; })
//
// Two clocks:
//   - event time: an entry's time is the latest event time of the records that wrote it (a function
//     of the record, as windows take; the watermark if later), and it expires once the watermark
//     reaches that time plus the ttl: then no record yet to come (none is earlier than the
//     watermark) is within a ttl of any that wrote it. (Counted from the watermark at the write, a
//     source running ahead of another made entries expire early: q3 at parallelism 2 lost rows to a
//     60 s ttl.) The regular join goes further, per record: two records join when their times are
//     less than a ttl apart (join_event_ttl, keyed_process.hpp), so its output depends on the
//     records' times only, and a replay after a recovery emits exactly what the first run would. An
//     aggregate's or a process's expiry depends on where the watermarks fall between a key's
//     records, which is the same in every run only when the key's records come over one channel.
//   - processing time: milliseconds of the wall clock, through the system seam (runtime/system.hpp,
//     which the simulation models), read once every 64 records. Survives a restart (a checkpoint
//     stores each entry's write time), but what expires depends on how fast the job runs.
//
// What expires, per operator: an aggregate's accumulator (a later record of the key starts from
// Acc{}; the end of the input emits only live keys); a keyed process's state (ctx.state() starts
// again from S{}; its timers stay and fire); a regular join's records of the key on both sides. The
// table drops expired entries as it goes (state_table::sweep, two cells per record), so memory stays
// bounded by what is written within a ttl. The ttl is not part of the job's identity: a resume may
// change it, turn it on (entries without a time count from the restore) or off (times are ignored).

#include <sluice/runtime/system.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

namespace sluice::dataflow {

struct state_ttl {
  enum class clock : std::uint8_t { event_time, processing_time };

  std::uint64_t ttl = 0;  // event-time units, or milliseconds of processing time; 0: no TTL
  clock domain = clock::event_time;

  static state_ttl event_time(std::uint64_t units) { return checked({units, clock::event_time}); }
  static state_ttl processing_time(std::chrono::milliseconds ms) {
    if (ms.count() < 0) throw std::invalid_argument("state_ttl: a negative processing time");
    return checked({static_cast<std::uint64_t>(ms.count()), clock::processing_time});
  }
  bool on() const noexcept { return ttl != 0; }
  // "event:5000", "processing:3600000ms", "off": what a log line or an error says.
  std::string describe() const {
    if (!on()) return "off";
    return domain == clock::event_time ? "event:" + std::to_string(ttl) : "processing:" + std::to_string(ttl) + "ms";
  }

 private:
  static state_ttl checked(state_ttl t) {
    if (t.ttl == 0) throw std::invalid_argument("state_ttl: a ttl of 0 (leave it unset for state that never expires)");
    return t;
  }
};

// A keyed stream's TTL: the config and, for event time, its records' time.
template <class T>
struct ttl_spec {
  state_ttl ttl;
  std::function<std::uint64_t(const T&)> time;  // event time only
};

namespace detail {
// The TTL of a two-input stage: set on either input (processing time) or, for event time, on both
// (each with its records' time), alike. Throws std::invalid_argument naming the stage otherwise.
template <class L, class R>
state_ttl two_input_ttl(const ttl_spec<L>& left, const ttl_spec<R>& right, const std::string& stage) {
  const state_ttl& l = left.ttl;
  const state_ttl& r = right.ttl;
  if (l.on() && r.on() && (l.ttl != r.ttl || l.domain != r.domain)) {
    throw std::invalid_argument("stage '" + stage + "': its inputs set state_ttl " + l.describe() + " and " +
                                r.describe() + "; a two-input stage has one");
  }
  const state_ttl ttl = l.on() ? l : r;
  if (ttl.on() && ttl.domain == state_ttl::clock::event_time && !(l.on() && r.on())) {
    throw std::invalid_argument("stage '" + stage + "': an event-time state_ttl needs the records' time of both "
                                "inputs: set it on both, each with its time function");
  }
  return ttl;
}

// An operator's view of its TTL clock: the time its table measures against. Event time follows
// the watermarks the operator passes in; processing time reads the wall clock every 64th record.
class ttl_clock {
 public:
  explicit ttl_clock(state_ttl ttl) noexcept : ttl_(ttl) {}
  const state_ttl& config() const noexcept { return ttl_; }
  bool processing() const noexcept { return ttl_.on() && ttl_.domain == state_ttl::clock::processing_time; }
  bool event() const noexcept { return ttl_.on() && ttl_.domain == state_ttl::clock::event_time; }
  // A record of event time `record_time` (event time only) is about to write: the table's time for
  // it (processing time: the wall clock, read every 64th record).
  template <class Table>
  void enter(Table& table, std::uint64_t record_time, std::uint64_t watermark) {
    if (processing()) {
      if (calls_++ % 64 == 0) now_ = wall_ms();
      table.advance_time(now_);
    } else if (event()) {
      table.set_time(watermark);
      table.write_time(record_time);
    }
  }
  // The record is done: writes record the table's time again.
  template <class Table>
  void leave(Table& table) {
    if (event()) table.write_time(0);
  }
  // The time now, read afresh (processing time), or the last one read.
  std::uint64_t fresh() {
    if (processing()) now_ = wall_ms();
    return now_;
  }
  static std::uint64_t wall_ms() {
    const auto since = runtime::sys().wall_now().time_since_epoch();
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(since).count());
  }

 private:
  state_ttl ttl_;
  std::uint64_t now_ = 0;
  std::uint64_t calls_ = 0;
};
// Cells a TTL table's sweep visits per record (state_table::sweep): at least one more than the
// entries a record can add, so the table never holds more than about twice its live entries.
inline constexpr std::size_t ttl_sweep_per_record = 2;
}  // namespace detail

}  // namespace sluice::dataflow
