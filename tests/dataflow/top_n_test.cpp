// The per-window top-N (windows.hpp, keyed_stream::top_n) driven directly: it fires when the
// watermark reaches its records' time, keeps ties at the n-th place, takes n larger than the
// records, emits the same whatever order the records came in, holds only what can still be in the
// top n, restores from snapshot bytes mid-stream; and a job end to end (a tumbling count per item,
// then the top 2 items per window) from a timed generated source at parallelism 2, against a
// ranking computed here.
// GCC 12 at -O3 reports a std::string copy inlined into these tests as a memcpy past PTRDIFF_MAX
// (-Wstringop-overflow, -Wrestrict: known false positives of its range analysis).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#pragma GCC diagnostic ignored "-Wrestrict"
#endif

#include <sluice/dataflow/generate.hpp>
#include <sluice/dataflow/job_runner.hpp>
#include <sluice/dataflow/sinks.hpp>
#include <sluice/dataflow/windows.hpp>

#include <support/temp_dir.hpp>

#include "capture_support.hpp"
#include "wordcount_support.hpp"

#include "state_support.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

using namespace sluice::dataflow;
using sluice::test::full_snapshot;
using sluice::snapshot::checkpoint_mode;
using sluice::test::capture;
using sluice::test::published_lines;
using sluice::test::temp_dir;

namespace {

using lines_t = std::vector<std::string>;
// A window's result: (window start, item, score); its time is the window's last instant, start + 9.
using scored = std::tuple<std::uint64_t, std::string, std::int64_t>;
using top = top_n_op<std::uint64_t, scored, std::int64_t, std::string>;

top::functions by_score() {
  return {[](const scored& s) { return std::get<0>(s); }, [](const scored& s) { return std::get<0>(s) + 9; },
          [](const scored& s) { return std::get<2>(s); },
          [](const std::uint64_t& start, std::size_t place, const scored& s) {
            return std::to_string(start) + " " + std::to_string(place) + " " + std::get<1>(s) + " " +
                   std::to_string(std::get<2>(s));
          }};
}

// A record type without operator<: ties are ordered by its codec bytes.
struct bid {
  std::uint64_t id = 0;
  std::int64_t price = 0;
  static constexpr auto fields() { return std::make_tuple(&bid::id, &bid::price); }
};

}  // namespace

TEST_CASE("top_n fires when the watermark reaches its records' time, ties at the n-th place included",
          "[dataflow][top_n]") {
  capture out;
  top op(2, by_score(), out);
  for (const scored& s : {scored{0, "a", 5}, scored{0, "b", 9}, scored{10, "x", 1}, scored{0, "c", 7},
                          scored{0, "d", 7}, scored{0, "e", 3}}) {
    op.collect(s);
  }
  CHECK(op.held_records() == 4);  // b, c, d (a and e can no longer be in the top 2), x
  op.watermark(8);
  CHECK(out.take().empty());
  op.watermark(9);  // window 0's time
  CHECK(out.take() == lines_t{"0 1 b 9", "0 2 c 7", "0 2 d 7"});
  op.collect({0, "z", 100});  // behind the watermark: late
  CHECK(op.late_records() == 1);
  op.watermark(19);
  CHECK(out.take() == lines_t{"10 1 x 1"});
  CHECK(op.held_records() == 0);
  CHECK(out.watermarks == std::vector<std::uint64_t>{8, 9, 19});
  op.end_of_data();
  CHECK(out.take().empty());
  CHECK(out.ended == 1);
}

TEST_CASE("top_n with n = 1 is the maximum with ties, and n beyond the records emits them all ranked",
          "[dataflow][top_n]") {
  capture out;
  top max(1, by_score(), out);
  for (const scored& s : {scored{0, "a", 4}, scored{0, "c", 8}, scored{0, "b", 8}, scored{0, "d", 2}}) max.collect(s);
  max.end_of_data();
  CHECK(out.take() == lines_t{"0 1 b 8", "0 1 c 8"});
  top all(10, by_score(), out);
  for (const scored& s : {scored{0, "a", 1}, scored{0, "b", 5}, scored{0, "c", 2}, scored{0, "d", 5}}) all.collect(s);
  all.end_of_data();
  CHECK(out.take() == lines_t{"0 1 b 5", "0 1 d 5", "0 3 c 2", "0 4 a 1"});  // places as SQL's RANK()
}

TEST_CASE("top_n emits the same and restores to the same whatever order its records came in", "[dataflow][top_n]") {
  std::vector<scored> input = {{0, "a", 3}, {0, "b", 7}, {0, "c", 3}, {0, "d", 7}, {0, "e", 1}, {0, "f", 3}};
  std::sort(input.begin(), input.end());
  capture first_out;
  top first(3, by_score(), first_out);
  for (const scored& s : input) first.collect(s);
  const std::vector<std::byte> bytes = full_snapshot(first);
  first.end_of_data();
  CHECK(first_out.lines == lines_t{"0 1 b 7", "0 1 d 7", "0 3 a 3", "0 3 c 3", "0 3 f 3"});
  int orders = 0;
  while (std::next_permutation(input.begin(), input.end())) {
    capture out;
    top op(3, by_score(), out);
    for (const scored& s : input) op.collect(s);
    capture restored_out;
    top restored(3, by_score(), restored_out);
    restored.restore_state(full_snapshot(op));
    restored.end_of_data();
    op.end_of_data();
    CHECK(restored_out.lines == first_out.lines);
    CHECK(out.lines == first_out.lines);
    ++orders;
  }
  CHECK(orders == 719);
  // Without operator<, by the records' codec bytes: also independent of the order.
  using bid_top = top_n_op<std::uint64_t, bid, std::int64_t, std::string>;
  const bid_top::functions fns{[](const bid&) { return std::uint64_t{0}; }, [](const bid&) { return std::uint64_t{9}; },
                               [](const bid& b) { return b.price; },
                               [](const std::uint64_t&, std::size_t place, const bid& b) {
                                 return std::to_string(place) + " " + std::to_string(b.id);
                               }};
  std::vector<bid> bids = {{1, 5}, {256, 5}, {2, 5}, {3, 4}};
  capture forward, backward;
  bid_top f(1, fns, forward);
  bid_top b(1, fns, backward);
  for (const bid& x : bids) f.collect(x);
  for (auto it = bids.rbegin(); it != bids.rend(); ++it) b.collect(*it);
  f.end_of_data();
  b.end_of_data();
  CHECK(forward.lines.size() == 3);
  CHECK(forward.lines == backward.lines);
  CHECK(forward.lines.front() == "1 256");  // little-endian bytes: 256 = 00 01 .. sorts first
}

TEST_CASE("top_n holds only the records that can still be in the top n", "[dataflow][top_n]") {
  capture out;
  top distinct(3, by_score(), out);
  for (std::int64_t i = 0; i < 1000; ++i) {
    distinct.collect({0, "i" + std::to_string(i), (i * 37) % 1000});
    CHECK(distinct.held_records() <= 3);
  }
  distinct.end_of_data();
  CHECK(out.take() == lines_t{"0 1 i27 999", "0 2 i54 998", "0 3 i81 997"});
  // Ten records tie at the top: the top 3 with ties is all ten, and nothing else is held.
  top ties(3, by_score(), out);
  for (std::int64_t i = 0; i < 1000; ++i) ties.collect({0, "i" + std::to_string(1000 + i), i % 100});
  CHECK(ties.held_records() == 10);
  ties.end_of_data();
  const lines_t tied = out.take();
  CHECK(tied.size() == 10);
  CHECK(std::all_of(tied.begin(), tied.end(), [](const std::string& l) { return l.rfind("0 1 ", 0) == 0; }));
}

TEST_CASE("top_n ranks a key's records of different times apart, oldest time first, keys in key order",
          "[dataflow][top_n]") {
  using rec = std::tuple<std::uint64_t, std::string, std::int64_t>;  // (time, key, score)
  using by_key = top_n_op<std::string, rec, std::int64_t, std::string>;
  capture out;
  by_key op(1,
            {[](const rec& r) { return std::get<1>(r); }, [](const rec& r) { return std::get<0>(r); },
             [](const rec& r) { return std::get<2>(r); },
             [](const std::string& k, std::size_t place, const rec& r) {
               return std::to_string(std::get<0>(r)) + " " + k + " " + std::to_string(place) + " " +
                      std::to_string(std::get<2>(r));
             }},
            out);
  for (const rec& r : {rec{5, "b", 1}, rec{5, "a", 2}, rec{3, "b", 7}, rec{5, "a", 3}}) op.collect(r);
  op.end_of_data();
  CHECK(out.lines == lines_t{"3 b 1 7", "5 a 1 3", "5 b 1 1"});
}

TEST_CASE("top_n restored from snapshot bytes mid-stream emits what an uninterrupted one does", "[dataflow][top_n]") {
  // A record, or a watermark when the item is empty.
  const std::vector<scored> steps = {{0, "a", 4}, {10, "p", 2}, {0, "b", 6}, {0, "c", 4},  {0, "", 5},
                                     {10, "q", 2}, {0, "d", 1}, {0, "", 9},  {0, "e", 9},  {20, "r", 1},
                                     {10, "s", 3}, {10, "", 19}, {20, "t", 1}, {30, "u", 5}, {20, "v", 0}};
  const auto feed = [](top& op, const std::vector<scored>& in, std::size_t from, std::size_t to) {
    for (std::size_t i = from; i < to; ++i) {
      if (std::get<1>(in[i]).empty()) {
        op.watermark(static_cast<std::uint64_t>(std::get<2>(in[i])));
      } else {
        op.collect(in[i]);
      }
    }
  };
  capture whole;
  top a(2, by_score(), whole);
  feed(a, steps, 0, steps.size());
  a.end_of_data();
  CHECK(whole.lines == lines_t{"0 1 b 6", "0 2 a 4", "0 2 c 4", "10 1 s 3", "10 2 p 2", "10 2 q 2", "20 1 r 1",
                               "20 1 t 1", "30 1 u 5"});
  CHECK(a.late_records() == 1);  // e, after the watermark reached 9
  for (std::size_t cut = 1; cut < steps.size(); ++cut) {
    INFO("snapshot after " << cut << " steps");
    capture before, after;
    top b(2, by_score(), before);
    feed(b, steps, 0, cut);
    const std::vector<std::byte> bytes = full_snapshot(b);
    top c(2, by_score(), after);
    c.restore_state(bytes);
    feed(c, steps, cut, steps.size());
    c.end_of_data();
    lines_t resumed = before.lines;
    resumed.insert(resumed.end(), after.lines.begin(), after.lines.end());
    CHECK(resumed == whole.lines);
    CHECK(c.late_records() == 1);
  }
  CHECK_THROWS_WITH(a.restore_state(std::vector<std::byte>{std::byte{7}}), Catch::Contains("top_n"));
  CHECK_THROWS_AS(a.restore_state(std::vector<std::byte>{std::byte{1}, std::byte{1}}), std::runtime_error);
}

TEST_CASE("top_n refuses n = 0 and names n in the job identity", "[dataflow][top_n]") {
  capture out;
  CHECK_THROWS_WITH(top(0, by_score(), out), Catch::Contains("n must be at least 1"));
  job_builder job("ids");
  auto keyed = job.generate<scored>("gen", 1, 10, [](std::uint64_t n) { return scored(0, "x", n); })
                   .key_by<std::uint64_t>([](const scored& s) { return std::get<0>(s); });
  const auto time = [](const scored& s) { return std::get<0>(s) + 9; };
  const auto rank = [](const scored& s) { return std::get<2>(s); };
  const auto emit = [](const std::uint64_t&, std::size_t, const scored& s) { return std::get<1>(s); };
  CHECK_THROWS_AS((keyed.top_n<std::string>("top", 1, 0, time, rank, emit)), std::invalid_argument);
  keyed.top_n<std::string>("top", 1, 3, time, rank, emit).discard();
  REQUIRE(job.stages().size() == 2);
  CHECK(job.stages()[1].identity == std::vector<std::string>{"key_groups=128", "op=top_n", "top_n.n=3", "sink=discard"});
}

TEST_CASE("a top-2-items-per-window job from a timed generated source at parallelism 2 ranks every window",
          "[dataflow][top_n]") {
  // Record n: item (n % 7) * (n % 3) % 5 at time n / 4; counts per item in tumbling windows of 50,
  // then per window the items of the two highest counts, ties included.
  const std::uint64_t count = 6000;
  const auto item_of = [](std::uint64_t n) { return (n % 7) * (n % 3) % 5; };
  const temp_dir dir;
  job_builder job("top2");
  using rec = std::pair<std::uint64_t, std::uint64_t>;                   // (item, time)
  using counted = std::tuple<std::uint64_t, std::uint64_t, std::uint64_t>;  // (window start, item, count)
  job.generate_timed<rec>(
         "gen", 2, count, [item_of](std::uint64_t n) { return rec(item_of(n), n / 4); },
         [](std::uint64_t n) { return n / 4; })
      .key_by<std::uint64_t>([](const rec& r) { return r.first; })
      .window<std::uint64_t, counted>(
          "count", 2, 50, [](const rec& r) { return r.second; }, [](std::uint64_t& n, const rec&) { ++n; },
          [](std::uint64_t start, const std::uint64_t& item, const std::uint64_t& n) {
            return counted(start, item, n);
          })
      .key_by<std::uint64_t>([](const counted& c) { return std::get<0>(c); })
      .top_n<std::string>(
          "top", 2, 2, [](const counted& c) { return std::get<0>(c) + 49; },
          [](const counted& c) { return static_cast<std::int64_t>(std::get<2>(c)); },
          [](const std::uint64_t& start, std::size_t place, const counted& c) {
            return std::to_string(start) + " " + std::to_string(place) + " " + std::to_string(std::get<1>(c)) + " " +
                   std::to_string(std::get<2>(c));
          })
      .write_lines(dir.file("out"), [](const std::string& s) { return s; });
  const job_result r =
      run_job(job, sluice::test::test_job_settings(dir.file("checkpoints"), checkpoint_mode::unaligned, "local"));
  INFO(r.message);
  REQUIRE(r.exit_code == 0);
  std::map<std::uint64_t, std::map<std::uint64_t, std::uint64_t>> counts;  // window -> item -> count
  for (std::uint64_t n = 0; n < count; ++n) ++counts[(n / 4) - (n / 4) % 50][item_of(n)];
  std::vector<std::string> expected;
  std::size_t tied_windows = 0;
  for (const auto& [start, items] : counts) {
    std::vector<std::pair<std::uint64_t, std::uint64_t>> ranked;  // (count, item)
    for (const auto& [item, n] : items) ranked.emplace_back(n, item);
    std::sort(ranked.begin(), ranked.end(), [](const auto& x, const auto& y) {
      return x.first != y.first ? x.first > y.first : x.second < y.second;
    });
    const std::uint64_t second = ranked[std::min<std::size_t>(1, ranked.size() - 1)].first;
    std::size_t place = 1;
    for (std::size_t i = 0; i < ranked.size() && ranked[i].first >= second; ++i) {
      if (i > 0 && ranked[i].first < ranked[i - 1].first) place = i + 1;
      if (i >= 2) ++tied_windows;
      expected.push_back(std::to_string(start) + " " + std::to_string(place) + " " + std::to_string(ranked[i].second) +
                         " " + std::to_string(ranked[i].first));
    }
  }
  std::sort(expected.begin(), expected.end());
  CHECK(expected.size() >= 2 * counts.size());
  CHECK(tied_windows > 0);  // the ties at the second place are in the output too
  CHECK(published_lines(dir.file("out")) == expected);
}
