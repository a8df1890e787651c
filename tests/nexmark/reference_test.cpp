// The Nexmark queries' reference evaluation itself (reference.hpp): each query's semantics pinned on
// small hand-built event vectors (filters, join order, window edges, ties), and every query giving
// rows on generated events.

#include "nexmark/reference.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

using namespace sluice;
using nexmark::event;
using nexmark::event_type;
using sluice::test::reference_events;
using sluice::test::reference_rows;
using rows_t = std::vector<std::string>;

namespace {

event person_event(std::int64_t id, std::int64_t time, const std::string& state = "OR",
                   const std::string& city = "Portland") {
  event e;
  e.type = event_type::person;
  e.new_person.id = id;
  e.new_person.name = "Name " + std::to_string(id);
  e.new_person.city = city;
  e.new_person.state = state;
  e.new_person.date_time = time;
  return e;
}

event auction_event(std::int64_t id, std::int64_t seller, std::int64_t category, std::int64_t time,
                    std::int64_t expires) {
  event e;
  e.type = event_type::auction;
  e.new_auction.id = id;
  e.new_auction.seller = seller;
  e.new_auction.category = category;
  e.new_auction.date_time = time;
  e.new_auction.expires = expires;
  return e;
}

event bid_event(std::int64_t auction, std::int64_t price, std::int64_t time, std::int64_t bidder = 1,
                const std::string& extra = "") {
  event e;
  e.type = event_type::bid;
  e.new_bid.auction = auction;
  e.new_bid.bidder = bidder;
  e.new_bid.price = price;
  e.new_bid.date_time = time;
  e.new_bid.extra = extra;
  return e;
}

// The rows of `rows` whose CSV line ends with `suffix`.
rows_t ending_with(const rows_t& rows, const std::string& suffix) {
  rows_t out;
  for (const auto& r : rows) {
    if (r.size() >= suffix.size() && r.compare(r.size() - suffix.size(), suffix.size(), suffix) == 0) out.push_back(r);
  }
  return out;
}

// The number of rows per value of column `column` (0-based) of the CSV rows.
std::map<std::string, std::size_t> per_column(const rows_t& rows, std::size_t column) {
  std::map<std::string, std::size_t> out;
  for (const auto& r : rows) {
    std::size_t begin = 0;
    for (std::size_t i = 0; i < column; ++i) begin = r.find(',', begin) + 1;
    ++out[r.substr(begin, r.find(',', begin) - begin)];
  }
  return out;
}

}  // namespace

TEST_CASE("nexmark reference events are generate_event over the range, in order", "[nexmark][reference]") {
  nexmark::generator_config c;
  c.events_per_second = 1000;
  const auto events = reference_events(95, 60, c);
  REQUIRE(events.size() == 60u);
  for (std::uint64_t i = 0; i < 60; ++i) CHECK(events[i] == nexmark::generate_event(c, 95 + i));
  CHECK(reference_events(7, 0, c).empty());
}

TEST_CASE("nexmark reference q0, q1 and q2 are every bid, its price in euros, and the bids on every 123rd auction",
          "[nexmark][reference]") {
  const std::vector<event> events = {bid_event(123, 1000, 5, 7, "xyz"), person_event(1, 0),
                                     auction_event(246, 1, 10, 0, 9), bid_event(124, 101, 6, 8, ""),
                                     bid_event(246, 99, 6, 9, "a b")};
  CHECK(reference_rows("q0", events) == rows_t{"123,7,1000,5,xyz", "124,8,101,6,", "246,9,99,6,a b"});
  CHECK(reference_rows("q1", events) == rows_t{"123,7,890,5", "124,8,89,6", "246,9,88,6"});
  CHECK(reference_rows("q2", events) == rows_t{"123,1000", "246,99"});
}

TEST_CASE("nexmark reference q3 joins local sellers with their category 10 auctions whichever comes first",
          "[nexmark][reference]") {
  const std::vector<event> events = {
      auction_event(100, 1, 10, 5, 50),  // before its seller
      person_event(1, 10, "OR", "Portland"),
      person_event(2, 11, "ID", "Boise"),
      auction_event(101, 2, 10, 12, 50),  // after its seller
      person_event(3, 13, "CA", "San Francisco"),
      person_event(4, 14, "WA", "Seattle"),
      person_event(5, 15, "AZ", "Phoenix"),
      auction_event(102, 3, 11, 16, 50),  // category 11
      auction_event(103, 4, 10, 17, 50),  // WA
      auction_event(104, 3, 10, 18, 50),
      auction_event(105, 1, 10, 19, 50),  // p1's second
      auction_event(106, 5, 10, 20, 50),  // AZ
      auction_event(107, 9, 10, 21, 50),  // no such person
  };
  CHECK(reference_rows("q3", events) == rows_t{"Name 1,Portland,OR,100", "Name 1,Portland,OR,105",
                                               "Name 2,Boise,ID,101", "Name 3,San Francisco,CA,104"});
  CHECK(reference_rows("q3", {person_event(1, 10, "or")}).empty());
  CHECK(reference_rows("q3", {auction_event(1, 1, 10, 0, 1)}).empty());
}

TEST_CASE("nexmark reference q4 counts the bids from an auction's start to its expiry, both included",
          "[nexmark][reference]") {
  const auto auction = auction_event(1, 1, 10, 1000, 2000);
  CHECK(reference_rows("q4", {auction, bid_event(1, 5, 999)}).empty());
  CHECK(reference_rows("q4", {auction, bid_event(1, 5, 1000)}) == rows_t{"10,5"});
  CHECK(reference_rows("q4", {auction, bid_event(1, 5, 2000)}) == rows_t{"10,5"});
  CHECK(reference_rows("q4", {auction, bid_event(1, 5, 2001)}).empty());
  CHECK(reference_rows("q4", {bid_event(1, 5, 1500), auction}) == rows_t{"10,5"});  // the bid first
  CHECK(reference_rows("q4", {auction, bid_event(2, 5, 1500)}).empty());            // another auction's
  CHECK(reference_rows("q4", {auction}).empty());
  CHECK(reference_rows("q4", {bid_event(1, 5, 1500)}).empty());
}

TEST_CASE("nexmark reference q4 averages the highest qualifying bids per category in integer division",
          "[nexmark][reference]") {
  const std::vector<event> events = {
      bid_event(1, 60, 1500),  // before its auction in the vector
      auction_event(1, 1, 10, 1000, 2000),
      bid_event(1, 900, 999),  // the highest, but before the start
      bid_event(1, 50, 1000),
      bid_event(1, 70, 2000),   // final(1) = 70
      bid_event(1, 1000, 2001),  // after the expiry
      auction_event(2, 1, 10, 5000, 6000),
      bid_event(2, 75, 5500),               // final(2) = 75: category 10 averages 145 / 2 = 72
      auction_event(3, 1, 11, 0, 100),      // no bids: category 11 has no row
      auction_event(4, 1, 12, 0, 100),      // only a late bid: category 12 has no row
      bid_event(4, 5, 101),
      bid_event(5, 3, 10),
      auction_event(5, 1, 13, 10, 20),
      auction_event(6, 1, 13, 10, 20),
      bid_event(6, 4, 20),
      bid_event(6, 1, 15),  // category 13: (3 + 4) / 2 = 3
  };
  CHECK(reference_rows("q4", events) == rows_t{"10,72", "13,3"});
}

TEST_CASE("nexmark reference q5 puts a bid in the 10 s windows every 2 s that hold it, from time 0",
          "[nexmark][reference]") {
  // One bid at 19999: the windows from 10000 to 18000, five of them.
  CHECK(reference_rows("q5", {bid_event(7, 1, 19'999)}) ==
        rows_t{"7,1,10000,20000", "7,1,12000,22000", "7,1,14000,24000", "7,1,16000,26000", "7,1,18000,28000"});
  // Near 0 there are no windows before 0.
  CHECK(reference_rows("q5", {bid_event(7, 1, 3000)}) == rows_t{"7,1,0,10000", "7,1,2000,12000"});
  CHECK(reference_rows("q5", {bid_event(7, 1, 0)}) == rows_t{"7,1,0,10000"});
  CHECK(reference_rows("q5", {bid_event(7, 1, -1)}).empty());
  CHECK(reference_rows("q5", {bid_event(7, 1, 1999)}) == rows_t{"7,1,0,10000"});
  CHECK(reference_rows("q5", {bid_event(7, 1, 2000)}) == rows_t{"7,1,0,10000", "7,1,2000,12000"});
  // A window holds s + 9999, not s + 10000.
  const auto rows = reference_rows("q5", {bid_event(1, 1, 29'999), bid_event(2, 1, 30'000)});
  CHECK(ending_with(rows, ",20000,30000") == rows_t{"1,1,20000,30000"});
  CHECK(ending_with(rows, ",30000,40000") == rows_t{"2,1,30000,40000"});
  CHECK(ending_with(rows, ",28000,38000") == rows_t{"1,1,28000,38000", "2,1,28000,38000"});
  CHECK(rows.size() == 10u);
  CHECK(reference_rows("q5", {person_event(1, 0), auction_event(1, 1, 10, 0, 5)}).empty());
}

TEST_CASE("nexmark reference q5 gives every auction with its window's highest count, ties included",
          "[nexmark][reference]") {
  const std::vector<event> events = {
      bid_event(1, 5, 8000), bid_event(1, 5, 9000), bid_event(2, 5, 8500), bid_event(2, 5, 9999),
      bid_event(3, 5, 9000), bid_event(4, 5, 10'000), bid_event(4, 6, 10'000), bid_event(4, 7, 10'000),
  };
  // Window 0 holds auctions 1 and 2 twice, 3 once; the windows 2000 to 10000 also auction 4 three times.
  CHECK(reference_rows("q5", events) == rows_t{"1,2,0,10000", "2,2,0,10000", "4,3,10000,20000", "4,3,2000,12000",
                                               "4,3,4000,14000", "4,3,6000,16000", "4,3,8000,18000"});
}

TEST_CASE("nexmark reference q7 gives every bid with its 10 s window's highest price, ties and duplicates included",
          "[nexmark][reference]") {
  const std::vector<event> events = {
      bid_event(1, 50, 0, 5),
      bid_event(2, 80, 9999, 6),
      bid_event(3, 80, 5000, 7),
      bid_event(3, 80, 5000, 7),  // the same bid twice: two rows
      bid_event(4, 10, 1000, 8),
      bid_event(5, 100, 10'000, 9),  // the next window's, though higher
      bid_event(6, 99, 19'999, 9),
      bid_event(7, 1, 20'000, 1),  // alone in the third window
      auction_event(8, 1, 10, 100, 200),
  };
  CHECK(reference_rows("q7", events) ==
        rows_t{"2,80,6,9999", "3,80,7,5000", "3,80,7,5000", "5,100,9,10000", "7,1,1,20000"});
  // Before 0 the windows go on: -1 is in [-10000, 0).
  CHECK(reference_rows("q7", {bid_event(1, 5, -1, 1), bid_event(2, 3, 0, 1)}) == rows_t{"1,5,1,-1", "2,3,1,0"});
}

TEST_CASE("nexmark reference q8 gives a person once per 10 s window in which it also opened an auction",
          "[nexmark][reference]") {
  const std::vector<event> events = {
      person_event(1, 1000),
      auction_event(10, 1, 10, 2000, 3000),
      auction_event(11, 1, 11, 9999, 12000),  // a second in the window: still one row
      person_event(2, 5000),
      auction_event(12, 2, 10, 10'000, 11'000),  // the next window: no row
      auction_event(13, 3, 10, 19'999, 20'000),  // before its seller in the vector
      person_event(3, 10'000),
      auction_event(14, 4, 10, 9999, 10'500),  // the previous window
      person_event(4, 15'000),
      person_event(5, 15'000),
      auction_event(15, 6, 10, 15'000, 16'000),  // another seller's
      bid_event(5, 10, 15'000, 5),
  };
  CHECK(reference_rows("q8", events) == rows_t{"1,Name 1,0", "3,Name 3,10000"});
}

TEST_CASE("nexmark reference rows refuse an unknown query, naming it", "[nexmark][reference]") {
  CHECK_THROWS_AS(reference_rows("q6", {}), std::invalid_argument);
  CHECK_THROWS_WITH(reference_rows("q6", {}), Catch::Contains("q6") && Catch::Contains("q8"));
  CHECK_THROWS_AS(reference_rows("", {}), std::invalid_argument);
  CHECK_THROWS_AS(reference_rows("Q1", {}), std::invalid_argument);
  for (const auto query : sluice::test::reference_queries()) CHECK(reference_rows(query, {}).empty());
}

TEST_CASE("nexmark reference queries all give rows on 50000 generated events at 1000 events per second",
          "[nexmark][reference]") {
  nexmark::generator_config c;
  c.events_per_second = 1000;  // 50 s of event time: 5 tumbling windows, 29 sliding ones
  const auto events = reference_events(0, 50'000, c);
  std::map<std::string_view, std::size_t> counts;
  for (const auto query : sluice::test::reference_queries()) counts[query] = reference_rows(query, events).size();
  INFO("rows: q0 " << counts["q0"] << ", q2 " << counts["q2"] << ", q3 " << counts["q3"] << ", q4 " << counts["q4"]
                   << ", q5 " << counts["q5"] << ", q7 " << counts["q7"] << ", q8 " << counts["q8"]);
  CHECK(counts["q0"] == 46'000u);
  CHECK(counts["q1"] == 46'000u);
  CHECK(counts["q2"] > 10u);
  CHECK(counts["q3"] > 100u);
  // q4: every category has closed auctions; q5 and q7: every window has a row; q8: many new sellers.
  CHECK(per_column(reference_rows("q4", events), 0) ==
        std::map<std::string, std::size_t>{{"10", 1}, {"11", 1}, {"12", 1}, {"13", 1}, {"14", 1}});
  CHECK(per_column(reference_rows("q5", events), 2).size() == 29u);
  std::set<std::int64_t> q7_windows;
  for (const auto& [time, rows] : per_column(reference_rows("q7", events), 3)) {
    q7_windows.insert(std::stoll(time) / 10'000);
  }
  CHECK(q7_windows.size() == 5u);
  CHECK(counts["q8"] > 50u);
}
