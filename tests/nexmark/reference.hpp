#pragma once
// The Nexmark queries' reference evaluation: what each query's job must publish, computed by plain
// single-threaded loops over a vector of events (no job API, no windows or joins of dataflow/), so a
// job's output can be checked against it. Rows are CSV lines as the queries print them (no header,
// no spaces), returned sorted (std::sort of the strings).
//
// Times are epoch ms; "window [s, e)" holds the events with s <= date_time < e; all arithmetic is on
// std::int64_t. A window's start is floor(date_time / size) * size (floor, also for negative times).
// Every person, auction and bid event of the vector counts on its own (a duplicated event counts twice),
// wherever it is in the vector: the order of the events never matters.
//
// - q0 (passthrough): every bid: auction,bidder,price,dateTime,extra
// - q1 (currency conversion): every bid: auction,bidder,price * 89 / 100,dateTime
// - q2 (selection): every bid with auction % 123 == 0: auction,price
// - q3 (local item suggestion): every pair (person p, auction a) with a.seller == p.id, a.category == 10
//   and p.state one of "OR", "ID", "CA", whichever comes first: name,city,state,id (p's, then a.id).
// - q4 (average price per category): an auction a's final price is the highest price of the bids b with
//   b.auction == a.id and a.date_time <= b.date_time <= a.expires (both ends included); an auction without
//   such a bid has none. Per category of the auctions that have a final: category,avg with
//   avg = sum of the finals / their count (integer division, truncated toward zero).
// - q5 (hot items): sliding windows [s, s + 10000) for every s = k * 2000 with k >= 0 (so a bid at
//   t = 3000 is in the windows 0 and 2000 only; one at t >= 8000 is in 5). Per window with bids, the
//   number of its bids per auction; a row for each auction whose number is the window's highest (ties
//   all give rows): auction,num,starttime,endtime = auction, number, s, s + 10000.
// - q7 (highest bid): tumbling windows [k * 10000, (k + 1) * 10000). Per window with bids, a row for
//   every bid of the window with the window's highest price (each of several equal bids gives a row):
//   auction,price,bidder,dateTime.
// - q8 (monitor new users): tumbling windows of 10000 ms. A row for each person p such that at least
//   one auction a with a.seller == p.id has a.date_time in p.date_time's window (however many there
//   are): id,name,starttime = p.id, p.name, the window's start.

#include <sluice/nexmark/generator.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::test {

// generate_event(config, n) for n in [first, first + count), in order.
std::vector<nexmark::event> reference_events(std::uint64_t first, std::uint64_t count,
                                             const nexmark::generator_config& config);

// The sorted rows of `query` ("q0", "q1", "q2", "q3", "q4", "q5", "q7" or "q8") over `events`, as above.
// Throws std::invalid_argument, naming the query, for any other query.
std::vector<std::string> reference_rows(std::string_view query, const std::vector<nexmark::event>& events);

// q3's rows with an event-time state TTL of ttl_ms (query_spec::state_ttl_ms): the pairs whose
// times are less than the ttl apart.
std::vector<std::string> reference_q3_rows(const std::vector<nexmark::event>& events, std::uint64_t ttl_ms);

// The queries reference_rows knows, in order.
const std::vector<std::string_view>& reference_queries();

}  // namespace sluice::test
