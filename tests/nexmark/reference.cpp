// The Nexmark queries' reference evaluation (reference.hpp): plain loops, maps and vectors.

#include "nexmark/reference.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <stdexcept>
#include <utility>

namespace sluice::test {

namespace {

using nexmark::auction;
using nexmark::bid;
using nexmark::event;
using nexmark::event_type;
using nexmark::person;

constexpr std::int64_t q5_size = 10'000, q5_slide = 2'000;
constexpr std::int64_t tumble = 10'000;  // q7 and q8

// floor(t / size) * size, also for negative t.
std::int64_t window_start(std::int64_t t, std::int64_t size) {
  std::int64_t k = t / size;
  if (t % size != 0 && t < 0) --k;
  return k * size;
}

std::vector<const person*> persons_of(const std::vector<event>& events) {
  std::vector<const person*> out;
  for (const auto& e : events) {
    if (e.type == event_type::person) out.push_back(&e.new_person);
  }
  return out;
}

std::vector<const auction*> auctions_of(const std::vector<event>& events) {
  std::vector<const auction*> out;
  for (const auto& e : events) {
    if (e.type == event_type::auction) out.push_back(&e.new_auction);
  }
  return out;
}

std::vector<const bid*> bids_of(const std::vector<event>& events) {
  std::vector<const bid*> out;
  for (const auto& e : events) {
    if (e.type == event_type::bid) out.push_back(&e.new_bid);
  }
  return out;
}

void q0(const std::vector<event>& events, std::vector<std::string>& rows) {
  for (const bid* b : bids_of(events)) {
    rows.push_back(fmt::format("{},{},{},{},{}", b->auction, b->bidder, b->price, b->date_time, b->extra));
  }
}

void q1(const std::vector<event>& events, std::vector<std::string>& rows) {
  for (const bid* b : bids_of(events)) {
    rows.push_back(fmt::format("{},{},{},{}", b->auction, b->bidder, b->price * 89 / 100, b->date_time));
  }
}

void q2(const std::vector<event>& events, std::vector<std::string>& rows) {
  for (const bid* b : bids_of(events)) {
    if (b->auction % 123 == 0) rows.push_back(fmt::format("{},{}", b->auction, b->price));
  }
}

// q3 with an event-time state TTL of `ttl_ms` (0: none): a person and an auction join only when
// their times are less than the ttl apart.
void q3_within(const std::vector<event>& events, std::uint64_t ttl_ms, std::vector<std::string>& rows) {
  std::multimap<std::int64_t, const person*> local;  // by id, the persons of OR, ID and CA
  for (const person* p : persons_of(events)) {
    if (p->state == "OR" || p->state == "ID" || p->state == "CA") local.emplace(p->id, p);
  }
  for (const auction* a : auctions_of(events)) {
    if (a->category != 10) continue;
    const auto [begin, end] = local.equal_range(a->seller);
    for (auto it = begin; it != end; ++it) {
      const person& p = *it->second;
      const auto apart = static_cast<std::uint64_t>(std::abs(a->date_time - p.date_time));
      if (ttl_ms != 0 && apart >= ttl_ms) continue;
      rows.push_back(fmt::format("{},{},{},{}", p.name, p.city, p.state, a->id));
    }
  }
}
void q3(const std::vector<event>& events, std::vector<std::string>& rows) { q3_within(events, 0, rows); }

void q4(const std::vector<event>& events, std::vector<std::string>& rows) {
  std::multimap<std::int64_t, const bid*> by_auction;
  for (const bid* b : bids_of(events)) by_auction.emplace(b->auction, b);
  std::map<std::int64_t, std::pair<std::int64_t, std::int64_t>> per_category;  // category: sum of finals, count
  for (const auction* a : auctions_of(events)) {
    bool closed = false;
    std::int64_t final_price = 0;
    const auto [begin, end] = by_auction.equal_range(a->id);
    for (auto it = begin; it != end; ++it) {
      const bid& b = *it->second;
      if (b.date_time < a->date_time || b.date_time > a->expires) continue;
      final_price = closed ? std::max(final_price, b.price) : b.price;
      closed = true;
    }
    if (!closed) continue;
    auto& [sum, count] = per_category[a->category];
    sum += final_price;
    ++count;
  }
  for (const auto& [category, sum_count] : per_category) {
    rows.push_back(fmt::format("{},{}", category, sum_count.first / sum_count.second));
  }
}

void q5(const std::vector<event>& events, std::vector<std::string>& rows) {
  std::map<std::int64_t, std::map<std::int64_t, std::int64_t>> counts;  // window start: auction: bids
  for (const bid* b : bids_of(events)) {
    // The starts s = k * 2000, k >= 0, with s <= t < s + 10000.
    const std::int64_t last = window_start(b->date_time, q5_slide);
    for (std::int64_t s = last; s >= 0 && s > b->date_time - q5_size; s -= q5_slide) ++counts[s][b->auction];
  }
  for (const auto& [start, per_auction] : counts) {
    std::int64_t highest = 0;
    for (const auto& [auction_id, n] : per_auction) highest = std::max(highest, n);
    for (const auto& [auction_id, n] : per_auction) {
      if (n == highest) rows.push_back(fmt::format("{},{},{},{}", auction_id, n, start, start + q5_size));
    }
  }
}

void q7(const std::vector<event>& events, std::vector<std::string>& rows) {
  std::map<std::int64_t, std::vector<const bid*>> windows;
  for (const bid* b : bids_of(events)) windows[window_start(b->date_time, tumble)].push_back(b);
  for (const auto& [start, bids] : windows) {
    std::int64_t highest = bids.front()->price;
    for (const bid* b : bids) highest = std::max(highest, b->price);
    for (const bid* b : bids) {
      if (b->price != highest) continue;
      rows.push_back(fmt::format("{},{},{},{}", b->auction, b->price, b->bidder, b->date_time));
    }
  }
}

void q8(const std::vector<event>& events, std::vector<std::string>& rows) {
  std::multimap<std::int64_t, std::int64_t> auction_windows;  // seller: the window start of each of its auctions
  for (const auction* a : auctions_of(events)) auction_windows.emplace(a->seller, window_start(a->date_time, tumble));
  for (const person* p : persons_of(events)) {
    const std::int64_t start = window_start(p->date_time, tumble);
    const auto [begin, end] = auction_windows.equal_range(p->id);
    const bool any = std::any_of(begin, end, [start](const auto& seller_window) {
      return seller_window.second == start;
    });
    if (any) rows.push_back(fmt::format("{},{},{}", p->id, p->name, start));
  }
}

struct reference_query {
  std::string_view name;
  void (*evaluate)(const std::vector<event>&, std::vector<std::string>&);
};

constexpr reference_query queries[] = {{"q0", &q0}, {"q1", &q1}, {"q2", &q2}, {"q3", &q3},
                                       {"q4", &q4}, {"q5", &q5}, {"q7", &q7}, {"q8", &q8}};

}  // namespace

std::vector<nexmark::event> reference_events(std::uint64_t first, std::uint64_t count,
                                             const nexmark::generator_config& config) {
  std::vector<nexmark::event> events;
  events.reserve(count);
  for (std::uint64_t n = first; n < first + count; ++n) events.push_back(nexmark::generate_event(config, n));
  return events;
}

std::vector<std::string> reference_rows(std::string_view query, const std::vector<nexmark::event>& events) {
  for (const auto& q : queries) {
    if (q.name != query) continue;
    std::vector<std::string> rows;
    q.evaluate(events, rows);
    std::sort(rows.begin(), rows.end());
    return rows;
  }
  throw std::invalid_argument(fmt::format("nexmark reference: no query '{}' (there are q0, q1, q2, q3, q4, q5, q7, q8)",
                                          query));
}

std::vector<std::string> reference_q3_rows(const std::vector<nexmark::event>& events, std::uint64_t ttl_ms) {
  std::vector<std::string> rows;
  q3_within(events, ttl_ms, rows);
  std::sort(rows.begin(), rows.end());
  return rows;
}

const std::vector<std::string_view>& reference_queries() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> out;
    for (const auto& q : queries) out.push_back(q.name);
    return out;
  }();
  return names;
}

}  // namespace sluice::test
