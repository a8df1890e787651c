#pragma once
// State TTL: keyed state that expires a while after its key's last write (docs/state.md, "State
// TTL"). Set on a keyed stream before the operator that keeps the state:
//
//   bids.key_by<std::int64_t>(...).state_ttl(state_ttl::processing_time(std::chrono::hours(1)))
//       .join<person, row>(persons, "join", 4, emit);
//
// Two clocks:
//   - event time: the operator's watermark. An entry written while the watermark was w expires when
//     the watermark reaches w + ttl (in the job's event-time units). Deterministic: a replay after a
//     recovery expires the same entries at the same records as long as the watermarks come in the
//     same places, which they do within one input channel.
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

#include <chrono>
#include <cstdint>
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

namespace detail {
// An operator's view of its TTL clock: the time its table measures against. Event time follows
// the watermarks the operator passes in; processing time reads the wall clock every 64th record.
class ttl_clock {
 public:
  explicit ttl_clock(state_ttl ttl) noexcept : ttl_(ttl) {}
  const state_ttl& config() const noexcept { return ttl_; }
  bool processing() const noexcept { return ttl_.on() && ttl_.domain == state_ttl::clock::processing_time; }
  bool event() const noexcept { return ttl_.on() && ttl_.domain == state_ttl::clock::event_time; }
  // The time to advance a table to before a record (processing time: cached for 63 records).
  std::uint64_t at_record() {
    if (processing() && calls_++ % 64 == 0) now_ = wall_ms();
    return now_;
  }
  // The time now, read afresh (processing time), or the last at_record() time.
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
