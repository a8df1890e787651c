#pragma once
// The Nexmark event generator, following Beam's (sdks/java/testing/nexmark, sources/generator/):
// event n is a pure function of (config, n), so the stream is the same at any parallelism, in any
// run, and after any restart.
//
// The rules (Beam's, with one generator and no out-of-order groups):
// - Of every 50 events, 1 is a person, 3 are auctions and 46 are bids (n mod 50: 0 person, 1-3
//   auctions, 4-49 bids). Person and auction ids come from the event number (1000 + the count of
//   persons / auctions before it); a bid's auction and bidder, an auction's seller, are recent ids.
// - Hot keys: a bid is for a hot auction with probability 1 - 1/hot_auction_ratio (2: one half),
//   by a hot bidder with 1 - 1/hot_bidders_ratio (4), an auction's seller hot with
//   1 - 1/hot_sellers_ratio (4); "hot" is the first id of the latest block of 100. Others pick among
//   the last num_in_flight_auctions (100) auctions or num_active_people (1000) persons, plus 10 ids
//   ahead.
// - Prices: round(10^(6u) * 100) cents for u uniform in [0, 1): 1 to 100,000,000.
// - Strings: names, emails, cities, states and credit cards as Beam draws them; `extra` pads each
//   event to an average size of 200 (person), 500 (auction) and 100 (bid) bytes.
// - Every draw for event n comes from java_random(n) in Beam's order, so the fields equal Beam's
//   (up to the last-digit rounding of pow() at rare price boundaries).
// - Time: event n happens at base_time_ms + floor(n * 1000 / events_per_second) (Beam computes
//   n * (10^6 / rate, rounded to whole microseconds) / 1000: the same whenever 10^6 / rate is whole;
//   this stays exact at rates above 10^6/s). An auction expires 1 ms to twice the time of 1666
//   events later.

#include <sluice/nexmark/model.hpp>

#include <cstdint>
#include <string>

namespace sluice::nexmark {

struct generator_config {
  std::uint64_t events_per_second = 10'000;  // event time, not a throttle (Beam's firstEventRate)
  std::int64_t base_time_ms = 1'436'918'400'000;  // 2015-07-15T00:00:00Z: fixed, so runs agree
  int avg_person_bytes = 200;
  int avg_auction_bytes = 500;
  int avg_bid_bytes = 100;
  int hot_auction_ratio = 2;
  int hot_sellers_ratio = 4;
  int hot_bidders_ratio = 4;
  int num_in_flight_auctions = 100;
  int num_active_people = 1000;
};

// Checks the config (rates and ratios at least 1, and so on): throws std::invalid_argument naming the field.
void validate(const generator_config& config);

// The time of event n (epoch ms). Non-decreasing in n.
std::int64_t event_time_ms(const generator_config& config, std::uint64_t n);

// What event n is, without generating it.
event_type type_of_event(std::uint64_t n) noexcept;

// Event n.
event generate_event(const generator_config& config, std::uint64_t n);

// Event n as one JSON object (no newline) with Beam's field names and a "type" first:
//   {"type":"bid","auction":1007,"bidder":1001,"price":1234,"dateTime":1436918400000,"extra":"..."}
std::string to_json(const event& e);

// Beam's ids, exposed for the tests and the queries' reference evaluation.
inline constexpr std::int64_t first_person_id = 1000;
inline constexpr std::int64_t first_auction_id = 1000;
inline constexpr std::int64_t first_category_id = 10;
inline constexpr int num_categories = 5;

}  // namespace sluice::nexmark
