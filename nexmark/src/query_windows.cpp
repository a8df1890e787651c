// The Nexmark queries over windows of bids: q5 (hot items: a sliding window count per auction, then
// the top auctions of each window, ties included) and q7 (the highest bids of each tumbling window,
// pre-aggregated per generator task by a combiner). Ordinary jobs of the public API.

#include "query_parts.hpp"

#include <sluice/dataflow/generate.hpp>
#include <sluice/dataflow/sinks.hpp>

#include <fmt/core.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace sluice::nexmark::detail {

using dataflow::job_builder;
using dataflow::stream;

namespace {

// q7: the bids of a window at its highest price so far (ties all kept).
using q7_row = std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t>;  // auction, price, bidder, dateTime
struct q7_top {
  std::int64_t price = -1;
  std::vector<q7_row> bids;
  static constexpr auto fields() { return std::make_tuple(&q7_top::price, &q7_top::bids); }
};
void q7_take(q7_top& top, std::int64_t price, const std::vector<q7_row>& bids) {
  if (price < top.price) return;
  if (price > top.price) {
    top.price = price;
    top.bids.clear();
  }
  top.bids.insert(top.bids.end(), bids.begin(), bids.end());
}

}  // namespace

// q5, hot items: the auctions with the most bids in each 10 s window sliding every 2 s.
void build_q5(job_builder& job, const query_spec& spec) {
  constexpr std::uint64_t size = 10'000, slide = 2'000;
  using bid_at = std::pair<std::int64_t, std::int64_t>;                  // auction, dateTime
  using counted = std::tuple<std::uint64_t, std::int64_t, std::uint64_t>;  // window start, auction, bids
  const auto bids = bids_of(events_of(job, spec)).map<bid_at>([](const bid& b) { return bid_at{b.auction, b.date_time}; });
  const auto rows =
      bids.key_by<std::int64_t>([](const bid_at& b) { return b.first; })
          .sliding_window<std::uint64_t, counted>(
              "count", spec.parallelism, size, slide, [](const bid_at& b) { return time_of(b.second); },
              [](std::uint64_t& n, const bid_at&) { ++n; },
              [](std::uint64_t start, const std::int64_t& auction, const std::uint64_t& n) {
                return counted{start, auction, n};
              })
          .key_by<std::uint64_t>([](const counted& c) { return std::get<0>(c); })
          .top_n<std::string>(
              "hottest", spec.parallelism, 1, [](const counted& c) { return std::get<0>(c) + size - 1; },
              [](const counted& c) { return static_cast<std::int64_t>(std::get<2>(c)); },
              [](const std::uint64_t& start, std::size_t, const counted& c) {
                return fmt::format("{},{},{},{}", std::get<1>(c), std::get<2>(c), start, start + size);
              });
  rows_to(rows, spec);
}

// q7, highest bid: every bid at the highest price of its 10 s tumbling window. Each generator task
// keeps its window's top bids in a combiner (sent on at each watermark and checkpoint), so the
// window stage, keyed by window, takes a few partial tops instead of every bid.
void build_q7(job_builder& job, const query_spec& spec) {
  constexpr std::uint64_t size = 10'000;
  using partial = std::pair<std::uint64_t, q7_top>;
  const auto rows =
      bids_of(events_of(job, spec))
          .key_by<std::uint64_t>([](const bid& b) { return time_of(b.date_time) / size * size; })
          .combine<q7_top>([](q7_top& top, const bid& b) {
            q7_take(top, b.price, {q7_row{b.auction, b.price, b.bidder, b.date_time}});
          })
          .window<q7_top, std::vector<std::string>>(
              "highest", spec.parallelism, size, [](const partial& p) { return p.first; },
              [](q7_top& top, const partial& p) { q7_take(top, p.second.price, p.second.bids); },
              [](std::uint64_t, const std::uint64_t&, const q7_top& top) {
                std::vector<std::string> out;
                for (const auto& [auction, price, bidder, time] : top.bids) {
                  out.push_back(fmt::format("{},{},{},{}", auction, price, bidder, time));
                }
                return out;
              })
          .flat_map<std::string>([](const std::vector<std::string>& rows, dataflow::emitter<std::string>& out) {
            for (const std::string& r : rows) out.emit(r);
          });
  rows_to(rows, spec);
}

}  // namespace sluice::nexmark::detail
