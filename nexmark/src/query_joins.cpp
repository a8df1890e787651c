// The Nexmark queries that join: q3 (a regular join of persons and auctions), q4 (auctions and their
// bids, joined by a keyed process with event-time timers, then averaged per category) and q8 (a
// window join of persons and auctions). Each reads the one stream of generated events, fanned out
// to its branches (persons, auctions, bids), as an ordinary job of the public API.

#include "query_parts.hpp"

#include <sluice/dataflow/generate.hpp>
#include <sluice/dataflow/join.hpp>
#include <sluice/dataflow/keyed_process.hpp>
#include <sluice/dataflow/sinks.hpp>

#include <fmt/core.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace sluice::nexmark::detail {

using dataflow::job_builder;
using dataflow::process_context;
using dataflow::stream;

namespace {

// What q3 keeps of a person and of an auction (the join's state holds every one of them), with its
// event time (what an event-time state TTL counts from).
using q3_person = std::tuple<std::int64_t, std::string, std::string, std::string, std::int64_t>;  // id, name, city,
                                                                                                 // state, dateTime
using q3_auction = std::tuple<std::int64_t, std::int64_t, std::int64_t>;  // seller, id, dateTime

bool in_q3_states(const std::string& state) { return state == "OR" || state == "ID" || state == "CA"; }

// q4: what an auction's key holds until the auction closes. Bids may come before their auction (in
// the stream's order, at the same or an earlier time): kept until the watermark passes their time,
// when an auction they could belong to would have come.
struct q4_auction {
  std::int64_t category = 0;
  std::int64_t date_time = 0;
  std::int64_t expires = 0;
  static constexpr auto fields() {
    return std::make_tuple(&q4_auction::category, &q4_auction::date_time, &q4_auction::expires);
  }
};
struct q4_state {
  bool has_auction = false;
  q4_auction auction;
  bool has_bid = false;
  std::int64_t max_price = 0;                            // of the bids in [dateTime, expires]
  std::vector<std::pair<std::int64_t, std::int64_t>> early;  // (dateTime, price) of bids before it
  static constexpr auto fields() {
    return std::make_tuple(&q4_state::has_auction, &q4_state::auction, &q4_state::has_bid, &q4_state::max_price,
                           &q4_state::early);
  }
};
using q4_bid = std::pair<std::int64_t, std::int64_t>;     // dateTime, price (keyed by auction id)
using q4_final = std::pair<std::int64_t, std::int64_t>;   // category, winning price
using q4_context = process_context<std::int64_t, q4_state, q4_final>;

void q4_take_bid(q4_state& s, std::int64_t time, std::int64_t price) {
  if (time < s.auction.date_time || time > s.auction.expires) return;
  s.max_price = s.has_bid ? std::max(s.max_price, price) : price;
  s.has_bid = true;
}

void q4_on_auction(const std::pair<std::int64_t, q4_auction>& a, q4_context& ctx) {
  q4_state& s = ctx.state();
  s.has_auction = true;
  s.auction = a.second;
  for (const auto& [time, price] : s.early) q4_take_bid(s, time, price);
  s.early.clear();
  ctx.timer_at(time_of(s.auction.expires));  // it closes: no bid after this time counts
}

void q4_on_bid(const std::pair<std::int64_t, q4_bid>& b, q4_context& ctx) {
  const auto [time, price] = b.second;
  if (ctx.has_state() && ctx.state().has_auction) {
    q4_take_bid(ctx.state(), time, price);
    return;
  }
  // No auction (yet, or it closed and was forgotten): kept until its time has passed.
  ctx.state().early.emplace_back(time, price);
  ctx.timer_at(time_of(time));
}

void q4_on_timer(std::uint64_t t, q4_context& ctx) {
  if (!ctx.has_state()) return;
  q4_state& s = ctx.state();
  if (s.has_auction) {
    if (t < time_of(s.auction.expires)) return;  // a bid's timer from before the auction came
    if (s.has_bid) ctx.emit({s.auction.category, s.max_price});
    ctx.clear();
    return;
  }
  std::erase_if(s.early, [t](const auto& e) { return time_of(e.first) <= t; });
  if (s.early.empty()) ctx.clear();
}

}  // namespace

// q3, local item suggestion: who sells in category 10 from Oregon, Idaho or California, as an
// incremental join of persons and auctions on the seller (every match once, whichever came first).
void build_q3(job_builder& job, const query_spec& spec) {
  const auto events = events_of(job, spec);
  const auto persons = persons_of(events)
                           .filter([](const person& p) { return in_q3_states(p.state); })
                           .map<q3_person>([](const person& p) {
                             return q3_person{p.id, p.name, p.city, p.state, p.date_time};
                           });
  const auto auctions = auctions_of(events)
                            .filter([](const auction& a) { return a.category == 10; })
                            .map<q3_auction>([](const auction& a) { return q3_auction{a.seller, a.id, a.date_time}; });
  auto by_seller = auctions.key_by<std::int64_t>([](const q3_auction& a) { return std::get<0>(a); });
  auto by_id = persons.key_by<std::int64_t>([](const q3_person& p) { return std::get<0>(p); });
  if (spec.state_ttl_ms != 0) {
    const auto ttl = dataflow::state_ttl::event_time(spec.state_ttl_ms);
    by_seller = by_seller.state_ttl(ttl, [](const q3_auction& a) { return static_cast<std::uint64_t>(std::get<2>(a)); });
    by_id = by_id.state_ttl(ttl, [](const q3_person& p) { return static_cast<std::uint64_t>(std::get<4>(p)); });
  }
  const auto rows = by_seller
                        .join<q3_person, std::string>(
                            by_id, "join",
                            spec.parallelism, [](const std::int64_t&, const q3_auction& a, const q3_person& p) {
                              return fmt::format("{},{},{},{}", std::get<1>(p), std::get<2>(p), std::get<3>(p),
                                                 std::get<1>(a));
                            });
  rows_to(rows, spec);
}

// q4, average price per category: each auction's winning bid (the highest of its bids between its
// start and its expiry), emitted when the watermark passes the expiry (or at the end of the input),
// then averaged per category over the whole input (integer average, as nexmark-flink's BIGINT AVG).
void build_q4(job_builder& job, const query_spec& spec) {
  const auto events = events_of(job, spec);
  const auto auctions = auctions_of(events).map<std::pair<std::int64_t, q4_auction>>([](const auction& a) {
    return std::pair{a.id, q4_auction{a.category, a.date_time, a.expires}};
  });
  const auto bids = bids_of(events).map<std::pair<std::int64_t, q4_bid>>(
      [](const bid& b) { return std::pair{b.auction, q4_bid{b.date_time, b.price}}; });
  const auto id = [](const auto& keyed) { return keyed.first; };
  using sum_count = std::pair<std::int64_t, std::int64_t>;
  const auto rows =
      auctions.key_by<std::int64_t>(id)
          .process_with<std::pair<std::int64_t, q4_bid>, q4_state, q4_final>(bids.key_by<std::int64_t>(id), "winning",
                                                                              spec.parallelism, &q4_on_auction,
                                                                              &q4_on_bid, &q4_on_timer)
          .key_by<std::int64_t>([](const q4_final& f) { return f.first; })
          .aggregate<sum_count, std::string>(
              "average", spec.parallelism,
              [](sum_count& acc, const q4_final& f) {
                acc.first += f.second;
                ++acc.second;
              },
              [](const std::int64_t& category, const sum_count& acc) {
                return fmt::format("{},{}", category, acc.first / acc.second);
              });
  rows_to(rows, spec);
}

// q8, monitor new users: people who opened an auction in the 10 s window they registered in, by a
// window join of persons and auctions on the seller, one row per person and window.
void build_q8(job_builder& job, const query_spec& spec) {
  constexpr std::uint64_t window = 10'000;
  using q8_person = std::tuple<std::int64_t, std::string, std::int64_t>;  // id, name, dateTime
  using q8_auction = std::pair<std::int64_t, std::int64_t>;             // seller, dateTime
  using q8_match = std::tuple<std::uint64_t, std::int64_t, std::string>;  // window start, id, name
  const auto events = events_of(job, spec);
  const auto persons = persons_of(events).map<q8_person>([](const person& p) { return q8_person{p.id, p.name, p.date_time}; });
  const auto auctions = auctions_of(events).map<q8_auction>([](const auction& a) { return q8_auction{a.seller, a.date_time}; });
  const auto rows =
      persons.key_by<std::int64_t>([](const q8_person& p) { return std::get<0>(p); })
          .window_join<q8_auction, q8_match>(
              auctions.key_by<std::int64_t>([](const q8_auction& a) { return a.first; }), "join", spec.parallelism,
              window, [](const q8_person& p) { return time_of(std::get<2>(p)); },
              [](const q8_auction& a) { return time_of(a.second); },
              [](std::uint64_t start, const std::int64_t& id, const q8_person& p, const q8_auction&) {
                return q8_match{start, id, std::get<1>(p)};
              })
          // One row per person and window, however many auctions matched: a window of the matches,
          // timed by their window's start.
          .key_by<std::int64_t>([](const q8_match& m) { return std::get<1>(m); })
          .window<std::string, std::string>(
              "distinct", spec.parallelism, window, [](const q8_match& m) { return std::get<0>(m); },
              [](std::string& name, const q8_match& m) { name = std::get<2>(m); },
              [](std::uint64_t start, const std::int64_t& id, const std::string& name) {
                return fmt::format("{},{},{}", id, name, start);
              });
  rows_to(rows, spec);
}

}  // namespace sluice::nexmark::detail
