// The Nexmark queries (queries.hpp).

#include <sluice/nexmark/queries.hpp>

#include "query_parts.hpp"

#include <sluice/dataflow/generate.hpp>
#include <sluice/dataflow/sinks.hpp>

#include <fmt/core.h>

#include <stdexcept>

namespace sluice::nexmark {

namespace detail {

using dataflow::job_builder;
using dataflow::stream;

stream<event> events_of(job_builder& job, const query_spec& spec) {
  const generator_config config = spec.generator;
  const std::uint64_t first = spec.first_event;
  return job
      .generate_timed<event>(
          "events", spec.parallelism, spec.events,
          [config, first](std::uint64_t n) { return generate_event(config, first + n); },
          [config, first](std::uint64_t n) { return static_cast<std::uint64_t>(event_time_ms(config, first + n)); })
      .identify("nexmark.first_event", std::to_string(first))
      .identify("nexmark.rate", std::to_string(config.events_per_second))
      .identify("nexmark.base_time_ms", std::to_string(config.base_time_ms))
      .identify("nexmark.avg_bytes", fmt::format("{}/{}/{}", config.avg_person_bytes, config.avg_auction_bytes,
                                                 config.avg_bid_bytes))
      .identify("nexmark.hot_ratios", fmt::format("{}/{}/{}", config.hot_auction_ratio, config.hot_sellers_ratio,
                                                  config.hot_bidders_ratio))
      .identify("nexmark.in_flight_auctions", std::to_string(config.num_in_flight_auctions))
      .identify("nexmark.active_people", std::to_string(config.num_active_people));
}

stream<bid> bids_of(const stream<event>& events) {
  return events.filter([](const event& e) { return e.type == event_type::bid; })
      .map<bid>([](const event& e) { return e.new_bid; });
}
stream<person> persons_of(const stream<event>& events) {
  return events.filter([](const event& e) { return e.type == event_type::person; })
      .map<person>([](const event& e) { return e.new_person; });
}
stream<auction> auctions_of(const stream<event>& events) {
  return events.filter([](const event& e) { return e.type == event_type::auction; })
      .map<auction>([](const event& e) { return e.new_auction; });
}

void rows_to(const stream<std::string>& rows, const query_spec& spec) {
  if (spec.output.empty()) {
    rows.discard();
  } else {
    rows.write_lines(spec.output, [](const std::string& r) { return r; });
  }
}

}  // namespace detail

namespace {

using dataflow::job_builder;
using dataflow::stream;
using detail::bids_of;
using detail::events_of;

// Formatted only when written: without an output the rows are counted as they are.
template <class T>
void rows_to(const stream<T>& rows, const query_spec& spec, std::string (*format)(const T&)) {
  if (spec.output.empty()) {
    rows.discard();
  } else {
    rows.write_lines(spec.output, [format](const T& r) { return format(r); });
  }
}

// q0, passthrough: every bid, as it is (nexmark-flink's q0: SELECT auction, bidder, price, dateTime, extra FROM bid).
void build_q0(job_builder& job, const query_spec& spec) { rows_to(bids_of(events_of(job, spec)), spec, &q0_row); }

// q1, currency conversion: every bid with its price in euros.
void build_q1(job_builder& job, const query_spec& spec) { rows_to(bids_of(events_of(job, spec)), spec, &q1_row); }

// q2, selection: the bids on every 123rd auction.
void build_q2(job_builder& job, const query_spec& spec) {
  const auto selected = bids_of(events_of(job, spec)).filter([](const bid& b) { return b.auction % q2_auction_skip == 0; });
  rows_to(selected, spec, &q2_row);
}

struct query_entry {
  std::string_view name;
  std::string_view columns;
  void (*build)(job_builder&, const query_spec&);
};

constexpr query_entry queries[] = {
    {"q0", "auction,bidder,price,dateTime,extra", &build_q0},
    {"q1", "auction,bidder,price,dateTime", &build_q1},
    {"q2", "auction,price", &build_q2},
    {"q3", "name,city,state,id", &detail::build_q3},
    {"q4", "category,avg", &detail::build_q4},
    {"q5", "auction,num,starttime,endtime", &detail::build_q5},
    {"q7", "auction,price,bidder,dateTime", &detail::build_q7},
    {"q8", "id,name,starttime", &detail::build_q8},
};

const query_entry& entry_of(std::string_view query) {
  for (const auto& q : queries) {
    if (q.name == query) return q;
  }
  std::string known;
  for (const auto& q : queries) known += (known.empty() ? "" : ", ") + std::string(q.name);
  throw std::invalid_argument(fmt::format("nexmark: no query '{}' (this build has {})", query, known));
}

}  // namespace

const std::vector<std::string_view>& query_names() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> v;
    for (const auto& q : queries) v.push_back(q.name);
    return v;
  }();
  return names;
}

std::string_view query_columns(std::string_view query) { return entry_of(query).columns; }

void build_query(job_builder& job, const query_spec& spec) {
  const query_entry& q = entry_of(spec.query);
  validate(spec.generator);
  if (spec.parallelism == 0) throw std::invalid_argument("nexmark: parallelism must be at least 1");
  if (spec.events == 0) throw std::invalid_argument("nexmark: --events must be at least 1 (a query over no events has no end)");
  if (spec.state_ttl_ms != 0 && spec.query != "q3") {
    throw std::invalid_argument("nexmark: a state TTL applies to q3 (its regular join), not to " + spec.query);
  }
  q.build(job, spec);
}

std::string q0_row(const bid& b) {
  return fmt::format("{},{},{},{},{}", b.auction, b.bidder, b.price, b.date_time, b.extra);
}
std::string q1_row(const bid& b) { return fmt::format("{},{},{},{}", b.auction, b.bidder, b.price * 89 / 100, b.date_time); }
std::string q2_row(const bid& b) { return fmt::format("{},{}", b.auction, b.price); }

}  // namespace sluice::nexmark
