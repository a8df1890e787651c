// State TTL (state_ttl.hpp): entries expire a ttl after their last write, in event time or in
// processing time. The table (what is visible, what a sweep drops, bounded memory, the write times
// through whole snapshots, deltas and restores, a TTL turned on or off across a restore), then each
// operator that takes one: the aggregate, the keyed process (its state expires, its timers stay) and
// the regular join (q3's), a restore in the middle giving the output of a run without one; and the
// stages that refuse one.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#pragma GCC diagnostic ignored "-Wrestrict"
#endif

#include <sluice/dataflow/generate.hpp>
#include <sluice/dataflow/job.hpp>
#include <sluice/dataflow/keyed_process.hpp>
#include <sluice/dataflow/state_table.hpp>
#include <sluice/dataflow/state_ttl.hpp>

#include <support/recording_system.hpp>

#include "state_support.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

using namespace sluice::dataflow;
namespace bf = sluice::buffers;
namespace ss = sluice::snapshot;
using sluice::test::full_snapshot;

namespace {

using table = state_table<std::uint64_t, std::string>;
using model = std::map<std::uint64_t, std::string>;

// What the table shows: its live entries.
model visible(const table& t) {
  model out;
  t.for_each_ref([&](table::ref r) {
    if (!t.expired(r)) out.emplace(t.key(r), t.value(r));
  });
  return out;
}

std::vector<std::byte> drain(ss::deferred_state& s) {
  std::vector<std::byte> out;
  while (!s.next_slice(out, 64)) {
  }
  return out;
}

void restore(table& t, const std::vector<std::byte>& bytes) {
  bf::byte_reader r(bytes);
  t.restore(r);
  CHECK(r.remaining() == 0);
}

// A wall clock a test sets (processing time).
class clock_system final : public sluice::test::recording_system {
 public:
  std::chrono::milliseconds now{1'700'000'000'000};
  std::chrono::system_clock::time_point wall_now() noexcept override {
    return std::chrono::system_clock::time_point(std::chrono::duration_cast<std::chrono::system_clock::duration>(now));
  }
};

}  // namespace

TEST_CASE("a TTL table hides an entry from ttl after its last write and makes it anew on the next write") {
  table t("test", 8);
  t.set_ttl(10);
  t.set_time(100);
  t.upsert(1) = "one";
  t.advance_time(105);
  t.upsert(2) = "two";
  t.advance_time(109);
  REQUIRE(t.find(1) != nullptr);
  t.modify(*t.locate(1)) += "!";  // a write: alive until 119
  t.advance_time(114);
  CHECK(*t.find(1) == "one!");
  CHECK(t.find(2) != nullptr);  // written at 105: alive until 115
  t.advance_time(115);
  CHECK(t.find(2) == nullptr);
  CHECK_FALSE(t.contains(2));
  CHECK(t.locate_any(2).has_value());  // still held until a sweep or a write
  auto [at, fresh] = t.emplace(2);
  CHECK(fresh);
  CHECK(t.value(at).empty());  // made anew, not the expired "two"
  t.advance_time(119);
  CHECK(t.find(1) == nullptr);
  CHECK(t.erase(1));  // an expired entry erases like any other
  CHECK(t.size() == 1);
}

TEST_CASE("an entry written before the table had a time (no watermark yet) counts from its first time") {
  table t("test", 4);
  t.set_ttl(1'000);
  t.upsert(7) = "x";                    // at time 0: none yet
  t.advance_time(1'436'918'400'000);    // the first watermark: an epoch time
  CHECK(t.find(7) != nullptr);
  t.advance_time(1'436'918'400'999);
  CHECK(t.find(7) != nullptr);
  auto f = t.freeze(1);
  const auto bytes = drain(*f);
  t.advance_time(1'436'918'401'000);
  CHECK(t.find(7) == nullptr);
  // Its snapshot carries the time it counts from: the same after a restore.
  table back("test", 4);
  back.set_ttl(1'000);
  back.set_time(1'436'918'400'999);
  restore(back, bytes);
  CHECK(back.find(7) != nullptr);
  back.advance_time(1'436'918'401'000);
  CHECK(back.find(7) == nullptr);
}

TEST_CASE("sweeping two cells per write keeps a TTL table near twice what a ttl writes") {
  table t("test", 32);
  t.set_ttl(1'000);
  std::size_t most = 0;
  for (std::uint64_t i = 0; i < 200'000; ++i) {
    t.advance_time(i);
    t.upsert(i) = "v";  // a new key every time unit: 1,000 live at any time
    t.sweep(detail::ttl_sweep_per_record, [&](table::ref r) { t.erase(r); });
    most = std::max(most, t.size());
  }
  INFO("most entries held: " << most);
  CHECK(most <= 2'200);
  CHECK(visible(t).size() == 1'000);
}

TEST_CASE("a TTL table's snapshots carry write times: what expired before a checkpoint stays expired after it") {
  table t("test", 8);
  t.set_ttl(50);
  for (std::uint64_t k = 0; k < 100; ++k) {
    t.set_time(k);
    t.upsert(k) = "v" + std::to_string(k);
  }
  t.set_time(120);  // keys 0..70 are expired, not swept
  auto frozen = t.freeze(1);
  const auto whole = drain(*frozen);

  table back("test", 8);
  back.set_ttl(50);
  back.set_time(120);
  restore(back, whole);
  CHECK(visible(back) == visible(t));
  CHECK(visible(back).size() == 29);
  back.advance_time(149);  // key 99 lives until 149
  CHECK(visible(back).size() == 0);

  SECTION("a table without a TTL keeps them all") {
    table plain("test", 8);
    restore(plain, whole);
    CHECK(plain.size() == 100);
    CHECK(plain.find(0) != nullptr);
  }
  SECTION("a stream without times restored into a TTL table counts from the restore") {
    table plain("test", 8);
    for (std::uint64_t k = 0; k < 10; ++k) plain.upsert(k) = "p";
    auto f = plain.freeze(1);
    const auto untimed = drain(*f);
    table ttl("test", 8);
    ttl.set_ttl(50);
    ttl.set_time(1'000);
    restore(ttl, untimed);
    ttl.advance_time(1'049);
    CHECK(visible(ttl).size() == 10);
    ttl.advance_time(1'050);
    CHECK(visible(ttl).empty());
  }
}

TEST_CASE("deltas of a TTL table carry sweeps as erases and refreshed writes with their times") {
  std::mt19937_64 rng(7);
  table t("test", 8);
  t.set_ttl(40);
  std::map<ss::checkpoint_id, std::vector<std::byte>> files;
  std::map<ss::checkpoint_id, std::pair<model, std::uint64_t>> at_freeze;
  std::uint64_t now = 0;
  for (ss::checkpoint_id c = 1; c <= 12; ++c) {
    for (int i = 0; i < 200; ++i) {
      now += rng() % 2;
      t.advance_time(now);
      t.upsert(rng() % 300) = std::to_string(now);
      t.sweep(detail::ttl_sweep_per_record, [&](table::ref r) { t.erase(r); });
    }
    at_freeze[c] = {visible(t), now};
    auto f = t.freeze(c);
    files[c] = drain(*f);
    t.confirm(c);
  }
  // Recovery of the last: the chain oldest first (whole at 1 and at 10: at most 8 deltas).
  table back("test", 8);
  back.set_ttl(40);
  for (ss::checkpoint_id c = 10; c <= 12; ++c) {
    back.set_time(at_freeze[c].second);
    restore(back, files[c]);
  }
  CHECK(visible(back) == at_freeze[12].first);
  CHECK(back.delta_base() == 12);
}

namespace {

// An aggregate counting per key, its output "key=count" lines.
struct lines final : collector<std::string> {
  std::vector<std::string> seen;
  void collect(const std::string& r) override { seen.push_back(r); }
  void watermark(std::uint64_t) override {}
  void end_of_data() override {}
};
using counted = std::pair<std::string, std::uint64_t>;  // key, event time
using count_op = keyed_aggregate<std::string, counted, std::uint64_t, std::string>;
std::uint64_t time_of(const counted& r) { return r.second; }
count_op::functions count_functions() {
  return {[](const counted& r) { return r.first; }, [](std::uint64_t& n, const counted&) { ++n; },
          [](const std::string& k, const std::uint64_t& n) { return k + "=" + std::to_string(n); }};
}

// Feeds records of `keys` keys, a watermark every 10 records at the time of the records, into op.
template <class Op>
void feed(Op& op, std::uint64_t from, std::uint64_t to, std::uint64_t keys) {
  for (std::uint64_t i = from; i < to; ++i) {
    op.collect(counted{"k" + std::to_string((i * 7) % keys), i / 4});
    if (i % 10 == 9) op.watermark(i / 4);
  }
}

}  // namespace

TEST_CASE("an aggregate with an event-time TTL restarts expired keys and emits only live ones") {
  lines out;
  count_op op(count_functions(), out, 16, {state_ttl::event_time(5), time_of});
  op.watermark(1);
  op.collect({"a", 1});
  op.collect({"a", 2});
  op.watermark(4);
  op.collect({"b", 4});
  op.watermark(7);       // a's latest record is of time 2: gone at 7
  op.collect({"a", 8});  // so a starts again
  op.watermark(9);       // b's is of time 4: gone at 9
  op.end_of_data();
  CHECK(out.seen == std::vector<std::string>{"a=1"});
}

TEST_CASE("an event-time entry lives a ttl past the latest record time that wrote it, not the watermark at the write") {
  for (const std::uint64_t last_watermark : {104, 105}) {
    lines out;
    count_op op(count_functions(), out, 16, {state_ttl::event_time(5), time_of});
    op.watermark(1);
    op.collect({"a", 100});  // far ahead of the watermark
    op.collect({"a", 3});    // an older record does not shorten its life
    op.watermark(last_watermark);
    op.end_of_data();
    CHECK(out.seen == (last_watermark == 104 ? std::vector<std::string>{"a=2"} : std::vector<std::string>{}));
  }
}

TEST_CASE("an aggregate with a TTL restored in the middle gives the output of a run without a restore") {
  lines straight;
  {
    count_op op(count_functions(), straight, 16, {state_ttl::event_time(30), time_of});
    feed(op, 0, 4'000, 500);
    op.end_of_data();
  }
  lines resumed;
  std::vector<std::byte> bytes;
  {
    lines ignored;
    count_op op(count_functions(), ignored, 16, {state_ttl::event_time(30), time_of});
    feed(op, 0, 1'700, 500);
    bytes = full_snapshot(op);
  }
  count_op op(count_functions(), resumed, 16, {state_ttl::event_time(30), time_of});
  op.restore_state(bytes);
  feed(op, 1'700, 4'000, 500);
  op.end_of_data();
  CHECK(resumed.seen == straight.seen);
  CHECK_FALSE(straight.seen.empty());
  CHECK(straight.seen.size() < 500);  // some keys had expired at the end
}

TEST_CASE("an aggregate with a processing-time TTL reads the wall clock through the system seam") {
  clock_system os;
  sluice::runtime::system_scope scope(os);
  lines out;
  count_op op(count_functions(), out, 16, {state_ttl::processing_time(std::chrono::seconds(60)), {}});
  op.collect({"old", 0});
  os.now += std::chrono::seconds(30);
  for (int i = 0; i < 64; ++i) op.collect({"new", 0});  // the clock is read every 64 records
  os.now += std::chrono::seconds(31);
  std::vector<std::byte> bytes = full_snapshot(op);
  // A restore in another process a minute later: "old" (written 61 s ago) stays gone.
  lines resumed;
  count_op back(count_functions(), resumed, 16, {state_ttl::processing_time(std::chrono::seconds(60)), {}});
  back.restore_state(bytes);
  back.end_of_data();
  CHECK(resumed.seen == std::vector<std::string>{"new=64"});
}

namespace {
using ctx_t = process_context<std::string, std::uint64_t, std::string>;
using proc_t = keyed_process<std::string, counted, std::uint64_t, std::string>;
// Counts per key; the first record of a key sets a timer 100 later, which emits the count it sees.
proc_t::functions timer_counting() {
  return {[](const counted& r) { return r.first; },
          [](const counted& r, ctx_t& ctx) {
            if (ctx.state()++ == 0) ctx.timer_at(r.second + 100);
          },
          [](std::uint64_t t, ctx_t& ctx) {
            ctx.emit(ctx.key() + "@" + std::to_string(t) + " count=" + std::to_string(ctx.state()));
          }};
}
}  // namespace

TEST_CASE("a keyed process's state expires with a TTL while its timers stay and fire") {
  lines out;
  proc_t op(timer_counting(), out, 8, {state_ttl::event_time(20), time_of});
  op.watermark(1);
  op.collect({"a", 0});  // timer at 100
  op.collect({"a", 1});
  op.watermark(30);       // a's state (written at 0) is gone; its timer is not
  CHECK(op.keys() == 0);
  CHECK(op.pending_timers() == 1);
  op.collect({"a", 31});  // starts again from 0: sets a timer at 131
  op.watermark(40);
  op.collect({"a", 41});  // count 2, written at 40: alive until 60
  op.watermark(50);
  op.end_of_data();       // the end fires both timers; the table's time stays at the last watermark
  CHECK(out.seen == std::vector<std::string>{"a@100 count=2", "a@131 count=2"});
}

TEST_CASE("a keyed process with a TTL keeps its timers through a sweep, a snapshot and a restore") {
  lines out;
  proc_t op(timer_counting(), out, 8, {state_ttl::event_time(10), time_of});
  op.watermark(1);
  for (std::uint64_t i = 0; i < 300; ++i) op.collect({"k" + std::to_string(i), i});
  op.watermark(250);  // the timers of k0..k150 fired; the states of keys written before 240 expired
  for (std::uint64_t i = 0; i < 300; ++i) op.collect({"z", 251});  // sweeps the whole table
  const std::size_t timers = op.pending_timers();
  CHECK(timers == 150);  // k151..k299 and z
  const auto bytes = full_snapshot(op);
  lines resumed;
  proc_t back(timer_counting(), resumed, 8, {state_ttl::event_time(10), time_of});
  back.restore_state(bytes);
  CHECK(back.pending_timers() == timers);
  back.end_of_data();
  op.end_of_data();
  CHECK(resumed.seen.size() == 150);
  out.seen.erase(out.seen.begin(), out.seen.end() - 150);
  CHECK(resumed.seen == out.seen);
}

namespace {
using join_t = regular_join_op<std::uint64_t, counted, counted, std::string>;
join_t::functions join_functions() {
  return regular_join_functions<std::uint64_t, counted, counted, std::string>(
      [](const counted& l) { return std::stoull(l.first); }, [](const counted& r) { return std::stoull(r.first); },
      [](const std::uint64_t& k, const counted& l, const counted& r) {
        return std::to_string(k) + ":" + std::to_string(l.second) + "-" + std::to_string(r.second);
      },
      {100, time_of, time_of});  // as keyed_stream::join makes them for an event-time TTL of 100
}
}  // namespace

TEST_CASE("a regular join with an event-time TTL forgets a key's records and stays bounded") {
  lines out;
  join_t join(join_functions(), out, 16, state_ttl::event_time(100), time_of, time_of);
  join.left({"1", 0});
  join.watermark(50);
  join.right({"1", 50});  // within the ttl: a match
  join.watermark(151);    // key 1 last written at 50: gone at 150
  join.right({"1", 151}); // nothing left to match
  CHECK(out.seen == std::vector<std::string>{"1:0-50"});
  // Two records join when their times are less than a ttl apart, whichever came first.
  join.left({"5", 1'000});
  join.right({"5", 1'090});
  join.right({"5", 1'100});  // 100 apart: not joined
  join.left({"5", 1'150});   // joins both rights
  CHECK(out.seen == std::vector<std::string>{"1:0-50", "5:1000-1090", "5:1150-1090", "5:1150-1100"});
  out.seen.resize(1);
  // A long run of short-lived keys: the state stays near what a ttl writes.
  std::size_t most = 0;
  for (std::uint64_t i = 0; i < 100'000; ++i) {
    join.left({std::to_string(1'000 + i), 200 + i});
    join.right({std::to_string(1'000 + i), 200 + i});
    if (i % 10 == 0) join.watermark(200 + i);
    most = std::max(most, join.entries());
  }
  CHECK(out.seen.size() == 100'001);
  INFO("most keys held: " << most);
  CHECK(most <= 250);
}

TEST_CASE("windows, top-n, window joins and partitions refuse a state TTL") {
  job_builder job("ttl");
  auto s = job.generate<std::string>("gen", 1, 10, [](std::uint64_t i) { return std::to_string(i); });
  auto by = s.key_by<std::string>([](const std::string& x) { return x; });
  CHECK_THROWS_WITH(by.state_ttl(state_ttl::event_time(10)), Catch::Contains("needs the records' event time"));
  auto keyed = by.state_ttl(state_ttl::processing_time(std::chrono::seconds(10)));
  auto at = [](const std::string&) -> std::uint64_t { return 0; };
  CHECK_THROWS_WITH(keyed.partition("p", 1), Catch::Contains("applies to aggregate, process, process_with and join"));
  CHECK_THROWS_AS((keyed.window<std::uint64_t, std::string>(
                      "w", 1, 10, at, [](std::uint64_t& n, const std::string&) { ++n; },
                      [](std::uint64_t, const std::string& k, const std::uint64_t&) { return k; })),
                  std::invalid_argument);
  CHECK_THROWS_AS(state_ttl::event_time(0), std::invalid_argument);
}
