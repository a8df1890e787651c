// The keyed process operator (keyed_process.hpp): per-key state and event-time timers on one input
// and on two, and the regular join built on the two-input form. The operators on their own (timer
// boundaries, order, timers set inside timers, cancel, the end of the input, clear(), restore from
// snapshot bytes with pending timers, bad bytes), then jobs end to end against references computed
// here: a timer-driven count per key and bucket, and the regular join of two generated streams, at
// parallelism 2, over both transports and under SIGKILLs.
// GCC 12 at -O3 reports a std::string copy inlined into these tests as a memcpy past PTRDIFF_MAX
// (-Wstringop-overflow, -Wrestrict: known false positives of its range analysis).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#pragma GCC diagnostic ignored "-Wrestrict"
#endif

#include <sluice/dataflow/generate.hpp>
#include <sluice/dataflow/job_runner.hpp>
#include <sluice/dataflow/keyed_process.hpp>
#include <sluice/dataflow/sinks.hpp>

#include <support/temp_dir.hpp>

#include "crash_support.hpp"
#include "wordcount_support.hpp"

#include "state_support.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

using namespace sluice::dataflow;
using sluice::test::full_snapshot;
using sluice::snapshot::checkpoint_mode;
using sluice::test::published_lines;
using sluice::test::temp_dir;

namespace {

// Records, watermarks and the end in one sequence, to check their order.
struct capture final : collector<std::string> {
  std::vector<std::string> seen;
  void collect(const std::string& r) override { seen.push_back(r); }
  void watermark(std::uint64_t t) override { seen.push_back("wm " + std::to_string(t)); }
  void end_of_data() override { seen.push_back("end"); }
};

using strings = std::vector<std::string>;

// A record asks for timers: (key, times to set, times to cancel). The state counts the key's
// records; a timer emits "key@time count=N wm=W".
struct ask {
  std::string key;
  std::vector<std::uint64_t> set;
  std::vector<std::uint64_t> cancel;
  static constexpr auto fields() { return std::make_tuple(&ask::key, &ask::set, &ask::cancel); }
};
using ctx_t = process_context<std::string, std::uint64_t, std::string>;
using proc_t = keyed_process<std::string, ask, std::uint64_t, std::string>;

std::string fired(std::uint64_t time, ctx_t& ctx) {
  return ctx.key() + "@" + std::to_string(time) + " count=" + std::to_string(ctx.state()) +
         " wm=" + (ctx.watermark() == ctx_t::end_of_input ? std::string("end") : std::to_string(ctx.watermark()));
}

// on_timer: emits; a timer at a time ending in 5 sets one 3 later, one ending in 7 clears the key.
proc_t::functions timers_functions() {
  return {[](const ask& a) { return a.key; },
          [](const ask& a, ctx_t& ctx) {
            ++ctx.state();
            for (std::uint64_t t : a.set) ctx.timer_at(t);
            for (std::uint64_t t : a.cancel) ctx.cancel_timer(t);
          },
          [](std::uint64_t time, ctx_t& ctx) {
            ctx.emit(fired(time, ctx));
            if (time % 10 == 5) ctx.timer_at(time + 3);
            if (time % 10 == 7) ctx.clear();
          }};
}

}  // namespace

TEST_CASE("a timer fires when the watermark reaches its time, not before, and before the watermark goes on",
          "[dataflow][process]") {
  capture out;
  proc_t p(timers_functions(), out);
  p.collect({"a", {10}, {}});
  p.watermark(9);
  CHECK(out.seen == strings{"wm 9"});
  p.watermark(10);
  CHECK(out.seen == strings{"wm 9", "a@10 count=1 wm=10", "wm 10"});
  CHECK(p.pending_timers() == 0);
  p.watermark(11);  // fired once
  CHECK(out.seen.back() == "wm 11");
  CHECK(out.seen.size() == 4);
}

TEST_CASE("timers fire in time order, ties in key order, duplicates once, each with its key's state",
          "[dataflow][process]") {
  capture out;
  proc_t p(timers_functions(), out);
  p.collect({"c", {4, 2}, {}});
  p.collect({"b", {4}, {}});
  p.collect({"a", {4, 4}, {}});  // the same timer twice: one
  p.collect({"b", {3, 4}, {}});
  CHECK(p.pending_timers() == 5);
  p.watermark(100);
  CHECK(out.seen == strings{"c@2 count=1 wm=100", "b@3 count=2 wm=100", "a@4 count=1 wm=100", "b@4 count=2 wm=100",
                            "c@4 count=1 wm=100", "wm 100"});
}

TEST_CASE("a timer set inside a timer fires in the same pass when it is due, later ones wait", "[dataflow][process]") {
  capture out;
  proc_t p(timers_functions(), out);
  p.collect({"a", {5, 25}, {}});  // 5 sets 8; 25 sets 28
  p.collect({"b", {6}, {}});
  p.watermark(26);
  // 5 fires, sets 8 (<= 26): it fires in this pass, after 6, before 25.
  CHECK(out.seen == strings{"a@5 count=1 wm=26", "b@6 count=1 wm=26", "a@8 count=1 wm=26", "a@25 count=1 wm=26",
                            "wm 26"});
  CHECK(p.pending_timers() == 1);  // a@28
  p.watermark(27);
  CHECK(out.seen.back() == "wm 27");
  p.watermark(28);
  CHECK(out.seen[out.seen.size() - 2] == "a@28 count=1 wm=28");
}

TEST_CASE("a cancelled timer does not fire, cancelling one never set does nothing", "[dataflow][process]") {
  capture out;
  proc_t p(timers_functions(), out);
  p.collect({"a", {10, 20}, {}});
  p.collect({"a", {}, {10, 99}});
  p.collect({"b", {}, {20}});  // another key's timer at 20: not a's
  p.watermark(30);
  CHECK(out.seen == strings{"a@20 count=2 wm=30", "wm 30"});
}

TEST_CASE("a timer set for a time the watermark has passed fires at the next watermark, whatever its time",
          "[dataflow][process]") {
  capture out;
  proc_t p(timers_functions(), out);
  p.watermark(50);
  p.collect({"a", {40}, {}});
  p.collect({"b", {50}, {}});
  CHECK(p.pending_timers() == 2);  // not from inside the record's call
  p.watermark(50);                 // the same watermark again
  CHECK(out.seen == strings{"wm 50", "a@40 count=1 wm=50", "b@50 count=1 wm=50", "wm 50"});
}

TEST_CASE("at the end of the input every timer fires in time order, then end_of_data goes on", "[dataflow][process]") {
  capture out;
  proc_t p(timers_functions(), out);
  CHECK(p.current_watermark() == 0);
  p.collect({"b", {1000, 15}, {}});
  p.collect({"a", {1000}, {}});
  p.watermark(3);
  p.end_of_data();
  // 15 sets 18, which fires in the same final pass.
  CHECK(out.seen == strings{"wm 3", "b@15 count=1 wm=end", "b@18 count=1 wm=end", "a@1000 count=1 wm=end",
                            "b@1000 count=1 wm=end", "end"});
  CHECK(p.pending_timers() == 0);
  // A rerun of a finished job restores the final state and ends again: nothing more fires.
  capture again;
  proc_t q(timers_functions(), again);
  q.restore_state(full_snapshot(p));
  q.end_of_data();
  CHECK(again.seen == strings{"end"});
}

TEST_CASE("clear() forgets a key's state: a key with no state and no timers takes no memory", "[dataflow][process]") {
  capture out;
  proc_t p(timers_functions(), out);
  for (int i = 0; i < 100; ++i) p.collect({"k" + std::to_string(i), {7}, {}});
  CHECK(p.keys() == 100);
  CHECK(p.pending_timers() == 100);
  p.watermark(7);  // each timer at 7 clears its key
  CHECK(p.keys() == 0);
  CHECK(p.pending_timers() == 0);
  CHECK(out.seen.size() == 101);
  p.collect({"k1", {}, {}});  // a new state from nothing
  p.collect({"k1", {9}, {}});
  p.watermark(9);
  CHECK(out.seen.back() == "wm 9");
  CHECK(out.seen[out.seen.size() - 2] == "k1@9 count=2 wm=9");

  // A key that only ever had a timer: no state until the timer's callback asks for one.
  using counter_ctx = process_context<std::string, std::uint64_t, std::string>;
  keyed_process<std::string, std::string, std::uint64_t, std::string> q(
      {[](const std::string& k) { return k; },
       [](const std::string&, counter_ctx& ctx) {
         ctx.timer_at(5);
         CHECK_FALSE(ctx.has_state());
       },
       [](std::uint64_t, counter_ctx& ctx) {
         ctx.emit(ctx.has_state() ? "state" : "none");
         ctx.state() = 3;
         CHECK(ctx.has_state());
         ctx.clear();
         CHECK_FALSE(ctx.has_state());
       }},
      out);
  q.collect("x");
  CHECK(q.keys() == 0);
  q.watermark(5);
  CHECK(q.keys() == 0);
  CHECK(out.seen[out.seen.size() - 2] == "none");
}

TEST_CASE("a process restored from its snapshot holds the same state and fires exactly the timers it had",
          "[dataflow][process]") {
  const std::vector<ask> input = {{"b", {12, 35}, {}}, {"a", {10}, {}},  {"c", {15}, {}},   {"a", {27}, {}},
                                  {"b", {}, {35}},     {"c", {40}, {}},  {"a", {45, 17}, {}}, {"d", {60}, {}}};
  const std::vector<std::uint64_t> watermarks = {0, 5, 11, 11, 20, 30, 33, 50};  // after each record
  const auto feed = [&](proc_t& p, std::size_t i) {
    p.collect(input[i]);
    p.watermark(watermarks[i]);
  };
  capture whole;
  proc_t a(timers_functions(), whole);
  for (std::size_t i = 0; i < input.size(); ++i) feed(a, i);
  a.end_of_data();

  for (std::size_t cut = 0; cut <= input.size(); ++cut) {
    INFO("snapshot after " << cut << " records");
    capture before;
    proc_t b(timers_functions(), before);
    for (std::size_t i = 0; i < cut; ++i) feed(b, i);
    const std::vector<std::byte> bytes = full_snapshot(b);
    capture after;
    proc_t c(timers_functions(), after);
    c.restore_state(bytes);
    CHECK(c.keys() == b.keys());
    CHECK(c.pending_timers() == b.pending_timers());
    CHECK(c.current_watermark() == b.current_watermark());
    for (std::size_t i = cut; i < input.size(); ++i) feed(c, i);
    c.end_of_data();
    strings resumed = before.seen;
    for (const std::string& line : after.seen) resumed.push_back(line);
    CHECK(resumed == whole.seen);
  }
}

TEST_CASE("a process's snapshot does not depend on the order its keys came in and bad bytes are refused",
          "[dataflow][process]") {
  capture out;
  proc_t a(timers_functions(), out);
  proc_t b(timers_functions(), out);
  a.collect({"x", {3, 9}, {}});
  a.collect({"y", {9}, {}});
  b.collect({"y", {9}, {}});
  b.collect({"x", {9, 3}, {}});
  capture a_out, b_out;
  proc_t ar(timers_functions(), a_out);
  proc_t br(timers_functions(), b_out);
  ar.restore_state(full_snapshot(a));
  br.restore_state(full_snapshot(b));
  CHECK(ar.keys() == 2);
  CHECK(ar.pending_timers() == b.pending_timers());
  ar.end_of_data();
  br.end_of_data();
  CHECK(a_out.seen == b_out.seen);

  proc_t c(timers_functions(), out);
  CHECK_THROWS_AS(c.restore_state(std::vector<std::byte>{}), std::runtime_error);
  CHECK_THROWS_WITH(c.restore_state(std::vector<std::byte>{std::byte{9}}),
                    Catch::Contains("keyed process") && Catch::Contains("unknown state version"));
  std::vector<std::byte> cut = full_snapshot(a);
  cut.resize(cut.size() - 3);
  CHECK_THROWS_AS(c.restore_state(cut), std::runtime_error);
  CHECK_THROWS_WITH(c.restore_state(cut), Catch::Contains("restore keyed process"));
}

namespace {

using num = std::pair<std::uint64_t, std::uint64_t>;  // (key, value)
using join_op = regular_join_op<std::uint64_t, num, num, std::string>;

join_op::functions join_functions() {
  const auto key = [](const num& n) { return n.first; };
  return regular_join_functions<std::uint64_t, num, num, std::string>(
      key, key, [](const std::uint64_t& k, const num& l, const num& r) {
        return std::to_string(k) + " " + std::to_string(l.second) + " " + std::to_string(r.second);
      });
}

strings sorted(strings v) {
  std::sort(v.begin(), v.end());
  return v;
}

}  // namespace

TEST_CASE("the regular join emits each matching pair once, whichever side arrives first", "[dataflow][process][join]") {
  capture out;
  join_op join(join_functions(), out);
  join.left({1, 10});
  join.right({1, 20});  // pairs with l10
  join.right({2, 21});  // no left of key 2 yet
  join.left({1, 11});   // pairs with r20
  join.left({2, 12});   // pairs with r21
  join.right({1, 22});  // pairs with l10, l11 in their order
  join.right({3, 23});
  join.watermark(5);
  join.end_of_data();
  CHECK(out.seen == strings{"1 10 20", "1 11 20", "2 12 21", "1 10 22", "1 11 22", "wm 5", "end"});
  CHECK(join.keys() == 3);
  CHECK(join.pending_timers() == 0);

  // The same records in other orders give the same pairs.
  const std::vector<std::pair<bool, num>> input = {{true, {1, 10}}, {false, {1, 20}}, {false, {2, 21}}, {true, {1, 11}},
                                                   {true, {2, 12}}, {false, {1, 22}}, {false, {3, 23}}};
  std::vector<std::size_t> order(input.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  int orders = 0;
  do {
    capture o;
    join_op j(join_functions(), o);
    for (std::size_t i : order) {
      if (input[i].first) {
        j.left(input[i].second);
      } else {
        j.right(input[i].second);
      }
    }
    if (sorted(o.seen) != strings{"1 10 20", "1 10 22", "1 11 20", "1 11 22", "2 12 21"}) FAIL("order " << orders);
    ++orders;
  } while (std::next_permutation(order.begin(), order.end()));
  CHECK(orders == 5040);
}

TEST_CASE("a regular join restored from its snapshot pairs new records with the ones it held",
          "[dataflow][process][join]") {
  capture before;
  join_op a(join_functions(), before);
  a.left({1, 10});
  a.right({2, 20});
  const std::vector<std::byte> bytes = full_snapshot(a);
  capture after;
  join_op b(join_functions(), after);
  b.restore_state(bytes);
  b.right({1, 21});
  b.left({2, 11});
  CHECK(after.seen == strings{"1 10 21", "2 11 20"});
  CHECK_THROWS_WITH(b.restore_state(std::vector<std::byte>{std::byte{1}, std::byte{7}}),
                    Catch::Contains("restore keyed co-process"));
}

TEST_CASE("a two-input process shares the key's state and timers between its sides, and decodes by channel",
          "[dataflow][process]") {
  using co_ctx = process_context<std::string, std::pair<std::uint64_t, std::uint64_t>, std::string>;
  using co_t = keyed_co_process<std::string, std::string, std::uint64_t, std::pair<std::uint64_t, std::uint64_t>,
                                std::string>;
  capture out;
  co_t op({[](const std::string& s) { return s; }, [](const std::uint64_t& n) { return "k" + std::to_string(n % 2); },
           [](const std::string&, co_ctx& ctx) {
             ++ctx.state().first;
             ctx.timer_at(10);
           },
           [](const std::uint64_t&, co_ctx& ctx) {
             ++ctx.state().second;
             ctx.timer_at(10);
           },
           [](std::uint64_t t, co_ctx& ctx) {
             ctx.emit(ctx.key() + "@" + std::to_string(t) + " " + std::to_string(ctx.state().first) + "/" +
                      std::to_string(ctx.state().second));
           }},
          out);
  // Two left channels (0, 1), then the right's (2, 3).
  process_with_input<std::string, std::string, std::uint64_t, std::pair<std::uint64_t, std::uint64_t>, std::string> in(
      2, op);
  const auto encoded = [](const auto& v) {
    std::vector<std::byte> b;
    sluice::buffers::encode_to(b, v);
    return b;
  };
  in.record(0, encoded(std::string("k0")));
  in.record(1, encoded(std::string("k1")));
  in.record(2, encoded(std::uint64_t{4}));  // k0
  in.record(3, encoded(std::uint64_t{6}));  // k0
  in.record(2, encoded(std::uint64_t{7}));  // k1
  in.record(1, encoded(std::string("k0")));
  CHECK(op.pending_timers() == 2);
  in.watermark(10);
  in.end_of_data();
  CHECK(out.seen == strings{"k0@10 2/2", "k1@10 1/1", "wm 10", "end"});
}

TEST_CASE("process, process_with and join record their operator in the job's identity", "[dataflow][process]") {
  job_builder job("ids");
  auto nums = [&](const char* name) {
    return job.generate<num>(name, 1, 10, [](std::uint64_t n) { return num(n % 3, n); })
        .key_by<std::uint64_t>([](const num& n) { return n.first; });
  };
  using ctx = process_context<std::uint64_t, std::uint64_t, num>;
  nums("a").process<std::uint64_t, num>("p", 2, [](const num& n, ctx& c) { c.emit(n); })
      .discard();
  nums("b").process_with<num, std::uint64_t, num>(nums("c"), "pw", 2, [](const num& n, ctx& c) { c.emit(n); },
                                                  [](const num& n, ctx& c) { c.emit(n); })
      .discard();
  nums("d").join<num, num>(nums("e"), "j", 2, [](const std::uint64_t&, const num& l, const num&) { return l; })
      .discard();
  std::map<std::string, const stage_def*> by_name;
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < job.stages().size(); ++i) {
    by_name[job.stages()[i].name] = &job.stages()[i];
    index[job.stages()[i].name] = i;
  }
  CHECK(by_name.at("p")->identity == std::vector<std::string>{"key_groups=128", "op=process", "sink=discard"});
  CHECK(by_name.at("pw")->identity == std::vector<std::string>{"key_groups=128", "op=process_with", "sink=discard"});
  CHECK(by_name.at("pw")->upstreams.size() == 2);
  CHECK(by_name.at("j")->identity == std::vector<std::string>{"key_groups=128", "op=join", "join.kind=inner", "sink=discard"});
  CHECK(by_name.at("j")->upstreams == std::vector<std::size_t>{index.at("d"), index.at("e")});
  CHECK(by_name.at("d")->identity.back() == "output=key_by");
}

// --- jobs end to end ---------------------------------------------------------------------------

namespace {

constexpr std::uint64_t join_keys = 40;

// Left record n: (n * 7 % keys, n); right record n: ((n * 3 + 1) % keys, 100000 + n). Both
// multipliers are prime to the key count, so a multiple of it gives every key as many records.
num left_record(std::uint64_t n) { return num(n * 7 % join_keys, n); }
num right_record(std::uint64_t n) { return num((n * 3 + 1) % join_keys, 100'000 + n); }

void build_regular_join(job_builder& job, const temp_dir& dir, std::uint64_t left_count, std::uint64_t right_count) {
  const auto key = [](const num& n) { return n.first; };
  auto left = job.generate<num>("left", 2, left_count, left_record).key_by<std::uint64_t>(key);
  auto right = job.generate<num>("right", 2, right_count, right_record).key_by<std::uint64_t>(key);
  left.join<num, std::string>(right, "join", 2, [](const std::uint64_t& k, const num& l, const num& r) {
        return std::to_string(k) + " " + std::to_string(l.second) + " " + std::to_string(r.second);
      })
      .write_lines(dir.file("out"), [](const std::string& s) { return s; });
}

strings nested_loop_join(std::uint64_t left_count, std::uint64_t right_count) {
  strings out;
  for (std::uint64_t a = 0; a < left_count; ++a) {
    for (std::uint64_t b = 0; b < right_count; ++b) {
      const num l = left_record(a);
      const num r = right_record(b);
      if (l.first == r.first) {
        out.push_back(std::to_string(l.first) + " " + std::to_string(l.second) + " " + std::to_string(r.second));
      }
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// A count per key and bucket of 10 time units, done with timers: record n is (key n % 7) at time
// n / 3; a record adds to its bucket's count and sets a timer at the bucket's last time, which emits
// "key bucket_start count" and drops the bucket (the key's state cleared when none is left).
using bucket_counts = std::vector<std::pair<std::uint64_t, std::uint64_t>>;  // (bucket start, count)
using bucket_ctx = process_context<std::uint64_t, bucket_counts, std::string>;
std::uint64_t timed_key(std::uint64_t n) { return n % 7; }
std::uint64_t timed_time(std::uint64_t n) { return n / 3; }

void build_timer_count(job_builder& job, const temp_dir& dir, std::uint64_t count) {
  job.generate_timed<std::uint64_t>("gen", 2, count, [](std::uint64_t n) { return n; }, timed_time)
      .key_by<std::uint64_t>(timed_key)
      .process<bucket_counts, std::string>(
          "buckets", 2,
          [](const std::uint64_t& n, bucket_ctx& ctx) {
            const std::uint64_t start = timed_time(n) - timed_time(n) % 10;
            bucket_counts& buckets = ctx.state();
            auto it = std::find_if(buckets.begin(), buckets.end(), [&](const auto& b) { return b.first == start; });
            if (it == buckets.end()) {
              buckets.emplace_back(start, 1);
              ctx.timer_at(start + 9);
            } else {
              ++it->second;
            }
          },
          [](std::uint64_t time, bucket_ctx& ctx) {
            bucket_counts& buckets = ctx.state();
            auto it = std::find_if(buckets.begin(), buckets.end(), [&](const auto& b) { return b.first + 9 == time; });
            if (it == buckets.end()) throw std::logic_error("a timer without its bucket");
            ctx.emit(std::to_string(ctx.key()) + " " + std::to_string(it->first) + " " + std::to_string(it->second));
            buckets.erase(it);
            if (buckets.empty()) ctx.clear();
          })
      .write_lines(dir.file("out"), [](const std::string& s) { return s; });
}

strings expected_bucket_counts(std::uint64_t count) {
  std::map<std::pair<std::uint64_t, std::uint64_t>, std::uint64_t> counts;
  for (std::uint64_t n = 0; n < count; ++n) ++counts[{timed_key(n), timed_time(n) - timed_time(n) % 10}];
  strings out;
  for (const auto& [kb, c] : counts) {
    out.push_back(std::to_string(kb.first) + " " + std::to_string(kb.second) + " " + std::to_string(c));
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("the regular join of two generated streams at parallelism 2 equals a nested-loop join",
          "[dataflow][process][join]") {
  const auto mode = GENERATE(checkpoint_mode::aligned, checkpoint_mode::unaligned);
  const std::string transport = GENERATE("local", "tcp");
  INFO("mode " << sluice::snapshot::to_string(mode) << ", transport " << transport);
  temp_dir dir;
  job_builder job("regular-join");
  build_regular_join(job, dir, 1200, 800);
  const job_result r = run_job(job, sluice::test::test_job_settings(dir.file("checkpoints"), mode, transport));
  INFO(r.message);
  REQUIRE(r.exit_code == 0);
  const strings expected = nested_loop_join(1200, 800);
  CHECK(expected.size() == 1200 * 800 / join_keys);
  CHECK(published_lines(dir.file("out")) == expected);
}

TEST_CASE("a timer-driven count per key and bucket from a generated timed stream equals the direct count",
          "[dataflow][process]") {
  temp_dir dir;
  job_builder job("buckets");
  build_timer_count(job, dir, 20'000);
  const job_result r =
      run_job(job, sluice::test::test_job_settings(dir.file("checkpoints"), checkpoint_mode::unaligned, "local"));
  INFO(r.message);
  REQUIRE(r.exit_code == 0);
  CHECK(published_lines(dir.file("out")) == expected_bucket_counts(20'000));
}

TEST_CASE("the regular join and the timer count killed with SIGKILL at random moments publish exactly the reference",
          "[dataflow][process][crash]") {
  const bool join = GENERATE(true, false);
  const auto mode = GENERATE(checkpoint_mode::aligned, checkpoint_mode::unaligned);
  INFO((join ? "regular join" : "timer count") << ", mode " << sluice::snapshot::to_string(mode));
  temp_dir dir;
  const auto job_fn = [&dir, mode, join] {
    job_builder job(join ? "regular-join" : "buckets");
    if (join) {
      build_regular_join(job, dir, 3000, 2000);
    } else {
      build_timer_count(job, dir, 400'000);
    }
    job_settings settings = sluice::test::test_job_settings(dir.file("checkpoints"), mode, "local");
    settings.checkpoint_interval = std::chrono::milliseconds(10);
    return run_job(job, settings).exit_code;
  };
  const auto reset = [&dir] {
    std::filesystem::remove_all(dir.file("out"));
    std::filesystem::remove_all(dir.file("checkpoints"));
  };
  const sluice::test::crash_report report =
      sluice::test::run_until_done(job_fn, reset, 71 + static_cast<std::uint64_t>(mode) * 3 + (join ? 1 : 0));
  INFO("killed " << report.kills << " times");
  REQUIRE(report.exit_code == 0);
  CHECK(report.kills > 0);
  CHECK(published_lines(dir.file("out")) == (join ? nested_loop_join(3000, 2000) : expected_bucket_counts(400'000)));
}
