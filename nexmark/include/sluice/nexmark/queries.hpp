#pragma once
// The Nexmark queries as ordinary jobs of the public job API (dataflow/job.hpp): each build_qN
// below reads like any other job and is an example of the API.
//
// Every query reads the generated events (generator.hpp) from a generate_timed source: event n of
// [first_event, first_event + events) is made by task n mod parallelism, with its event time, so the
// rows do not depend on the parallelism. Rows are CSV lines, columns as listed in query_columns().
//
//   job_builder job("nexmark-q1");
//   build_query(job, {.query = "q1", .events = 1'000'000, .output = "/data/q1"});
//   run_job(job, settings);

#include <sluice/dataflow/job.hpp>
#include <sluice/nexmark/generator.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::nexmark {

struct query_spec {
  std::string query = "q0";
  std::uint64_t events = 100'000;
  std::uint64_t first_event = 0;
  generator_config generator;
  std::size_t parallelism = 2;
  std::string output;  // a directory (exactly-once CSV files); empty: rows are only counted
  // q3 only: the join's state TTL in event-time milliseconds (dataflow/state_ttl.hpp); 0: none, the
  // join keeps every person and auction for ever. A person or auction whose seller saw no event of
  // the join for this long is forgotten, so the join runs in bounded memory; a row whose auction
  // comes later than that after its seller's last event is missed (Nexmark's sellers are the
  // recent persons: a ttl of a minute or more misses none at the default rates).
  std::uint64_t state_ttl_ms = 0;
};

// The queries this build has, in order ("q0", "q1", ...).
const std::vector<std::string_view>& query_names();
// The CSV columns of a query's rows, e.g. "auction,bidder,price,dateTime" for q1.
std::string_view query_columns(std::string_view query);

// Adds the query's stages to `job`. Throws std::invalid_argument for an unknown query or a bad spec.
void build_query(dataflow::job_builder& job, const query_spec& spec);

// The rows as the queries format them (shared with the tests' reference evaluation).
std::string q0_row(const bid& b);
std::string q1_row(const bid& b);  // the price in euros: price * 89 / 100, Beam's integer conversion
std::string q2_row(const bid& b);
inline constexpr std::int64_t q2_auction_skip = 123;  // Beam's default auctionSkip

}  // namespace sluice::nexmark
