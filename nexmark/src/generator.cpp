// The Nexmark generator (generator.hpp): Beam's rules, one java_random per event seeded with its number.

#include <sluice/nexmark/generator.hpp>
#include <sluice/nexmark/java_random.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string_view>

namespace sluice::nexmark {

namespace {

constexpr std::int64_t person_proportion = 1;
constexpr std::int64_t auction_proportion = 3;
constexpr std::int64_t proportion_denominator = 50;  // 1 person + 3 auctions + 46 bids
constexpr std::int64_t hot_block = 100;              // Beam's HOT_*_RATIO: hot ids are the first of a block of 100
constexpr std::int64_t id_lead = 10;                 // ids not yet created that may be drawn
constexpr int min_string_length = 3;

constexpr std::array<std::string_view, 6> us_states = {"AZ", "CA", "ID", "OR", "WA", "WY"};
constexpr std::array<std::string_view, 10> us_cities = {"Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland",
                                                        "Bend",    "Redmond",     "Seattle",       "Kent",  "Cheyenne"};
constexpr std::array<std::string_view, 11> first_names = {"Peter", "Paul",  "Luke",  "John",   "Saul",  "Vicky",
                                                          "Kate",  "Julie", "Sarah", "Deiter", "Walter"};
constexpr std::array<std::string_view, 9> last_names = {"Shultz", "Abrams", "Spencer", "White", "Bartels",
                                                        "Walton", "Smith",  "Jones",   "Noris"};

template <std::size_t N>
std::string_view pick(java_random& r, const std::array<std::string_view, N>& from) {
  return from[static_cast<std::size_t>(r.next_int(static_cast<std::int32_t>(N)))];
}

// Beam's LongGenerator.nextLong: [0, n) (skewed for n >= 2^31, as Beam's).
std::int64_t next_long(java_random& r, std::int64_t n) {
  if (n < INT32_MAX) return r.next_int(static_cast<std::int32_t>(n));
  const std::int64_t v = r.next_long() % n;
  return v < 0 ? -v : v;
}

// Java's Math.round for the non-negative values used here.
std::int64_t java_round(double v) { return static_cast<std::int64_t>(std::floor(v + 0.5)); }

std::int64_t next_price(java_random& r) { return java_round(std::pow(10.0, r.next_double() * 6.0) * 100.0); }

// Up to max_length letters (a space with probability 1/13), trimmed.
std::string next_string(java_random& r, int max_length) {
  int length = min_string_length + r.next_int(max_length - min_string_length);
  std::string s;
  s.reserve(static_cast<std::size_t>(length));
  while (length-- > 0) s.push_back(r.next_int(13) == 0 ? ' ' : static_cast<char>('a' + r.next_int(26)));
  const auto first = s.find_first_not_of(' ');
  if (first == std::string::npos) return {};
  return s.substr(first, s.find_last_not_of(' ') - first + 1);
}

// Exactly `length` characters, six from each 31-bit draw. Java's % keeps the sign of a negative
// draw, so these run from 'H' to 'z' (the backslash and brackets included), as Beam's do.
std::string next_exact_string(java_random& r, int length) {
  std::string s(static_cast<std::size_t>(std::max(length, 0)), '\0');
  char* out = s.data();
  char* const end = out + s.size();
  // Beam takes rnd % 26, then rnd /= 26, six times per draw. Truncating division composes
  // (trunc(trunc(x / a) / b) == trunc(x / (a * b))), so the six quotients are computed independently
  // of one another rather than in a chain; each character is Java's rnd % 26 of its quotient, sign included.
  while (end - out >= 6) {
    const std::int32_t q0 = r.next_int();
    const std::int32_t q1 = q0 / 26, q2 = q0 / 676, q3 = q0 / 17'576, q4 = q0 / 456'976, q5 = q0 / 11'881'376;
    const std::int32_t q6 = q0 / 308'915'776;
    out[0] = static_cast<char>('a' + (q0 - 26 * q1));
    out[1] = static_cast<char>('a' + (q1 - 26 * q2));
    out[2] = static_cast<char>('a' + (q2 - 26 * q3));
    out[3] = static_cast<char>('a' + (q3 - 26 * q4));
    out[4] = static_cast<char>('a' + (q4 - 26 * q5));
    out[5] = static_cast<char>('a' + (q5 - 26 * q6));
    out += 6;
  }
  if (out != end) {
    std::int32_t rnd = r.next_int();
    while (out != end) {
      const std::int32_t quotient = rnd / 26;
      *out++ = static_cast<char>('a' + (rnd - quotient * 26));
      rnd = quotient;
    }
  }
  return s;
}

// Pads an event of current_size bytes towards desired_average: uniform in +-20% of what is missing.
std::string next_extra(java_random& r, int current_size, int desired_average) {
  if (current_size > desired_average) return {};
  desired_average -= current_size;
  const int delta = static_cast<int>(java_round(desired_average * 0.2));
  const int min_size = desired_average - delta;
  const int size = min_size + (delta == 0 ? 0 : r.next_int(2 * delta));
  return next_exact_string(r, size);
}

// The last person id (base 0) at event n: the current one if n is a person.
std::int64_t last_base0_person_id(std::int64_t n) {
  std::int64_t epoch = n / proportion_denominator;
  std::int64_t offset = n % proportion_denominator;
  if (offset >= person_proportion) offset = person_proportion - 1;
  return epoch * person_proportion + offset;
}

std::int64_t last_base0_auction_id(std::int64_t n) {
  std::int64_t epoch = n / proportion_denominator;
  std::int64_t offset = n % proportion_denominator;
  if (offset < person_proportion) {  // a person: the last auction of the previous epoch
    --epoch;
    offset = auction_proportion - 1;
  } else if (offset >= person_proportion + auction_proportion) {  // a bid: the last auction of this epoch
    offset = auction_proportion - 1;
  } else {
    offset -= person_proportion;
  }
  return epoch * auction_proportion + offset;
}

std::int64_t next_base0_person_id(std::int64_t n, java_random& r, const generator_config& c) {
  const std::int64_t people = last_base0_person_id(n) + 1;
  const std::int64_t active = std::min<std::int64_t>(people, c.num_active_people);
  return people - active + next_long(r, active + id_lead);
}

std::int64_t next_base0_auction_id(std::int64_t n, java_random& r, const generator_config& c) {
  const std::int64_t max_auction = last_base0_auction_id(n);
  const std::int64_t min_auction = std::max<std::int64_t>(max_auction - c.num_in_flight_auctions, 0);
  return min_auction + next_long(r, max_auction - min_auction + 1 + id_lead);
}

person next_person(std::int64_t n, java_random& r, std::int64_t time, const generator_config& c) {
  person p;
  p.id = last_base0_person_id(n) + first_person_id;
  p.name = std::string(pick(r, first_names)) + " ";
  p.name += pick(r, last_names);
  p.email_address = next_string(r, 7) + "@";
  p.email_address += next_string(r, 5);
  p.email_address += ".com";
  for (int i = 0; i < 4; ++i) {
    char group[8];
    std::snprintf(group, sizeof group, "%04d", r.next_int(10000));
    if (i > 0) p.credit_card += ' ';
    p.credit_card += group;
  }
  p.city = pick(r, us_cities);
  p.state = pick(r, us_states);
  const auto size = 8 + p.name.size() + p.email_address.size() + p.credit_card.size() + p.city.size() + p.state.size();
  p.extra = next_extra(r, static_cast<int>(size), c.avg_person_bytes);
  p.date_time = time;
  return p;
}

auction next_auction(std::int64_t n, java_random& r, std::int64_t time, const generator_config& c) {
  auction a;
  a.id = last_base0_auction_id(n) + first_auction_id;
  if (r.next_int(c.hot_sellers_ratio) > 0) {
    a.seller = (last_base0_person_id(n) / hot_block) * hot_block;
  } else {
    a.seller = next_base0_person_id(n, r, c);
  }
  a.seller += first_person_id;
  a.category = first_category_id + r.next_int(num_categories);
  a.initial_bid = next_price(r);
  // The auction lasts on average as long as it takes to create num_in_flight_auctions more of them.
  const std::int64_t events_ahead = std::int64_t{c.num_in_flight_auctions} * proportion_denominator / auction_proportion;
  const std::int64_t horizon = event_time_ms(c, static_cast<std::uint64_t>(n + events_ahead)) - time;
  a.expires = time + 1 + next_long(r, std::max<std::int64_t>(horizon * 2, 1));
  a.item_name = next_string(r, 20);
  a.description = next_string(r, 100);
  a.reserve = a.initial_bid + next_price(r);
  const auto size = 8 + a.item_name.size() + a.description.size() + 8 + 8 + 8 + 8 + 8;
  a.extra = next_extra(r, static_cast<int>(size), c.avg_auction_bytes);
  a.date_time = time;
  return a;
}

bid next_bid(std::int64_t n, java_random& r, std::int64_t time, const generator_config& c) {
  bid b;
  if (r.next_int(c.hot_auction_ratio) > 0) {
    b.auction = (last_base0_auction_id(n) / hot_block) * hot_block;
  } else {
    b.auction = next_base0_auction_id(n, r, c);
  }
  b.auction += first_auction_id;
  if (r.next_int(c.hot_bidders_ratio) > 0) {
    b.bidder = (last_base0_person_id(n) / hot_block) * hot_block + 1;  // the second: hot bidders are not hot sellers
  } else {
    b.bidder = next_base0_person_id(n, r, c);
  }
  b.bidder += first_person_id;
  b.price = next_price(r);
  b.extra = next_extra(r, 8 + 8 + 8 + 8, c.avg_bid_bytes);
  b.date_time = time;
  return b;
}

void require_positive(long long v, const char* name) {
  if (v < 1) throw std::invalid_argument(std::string("nexmark generator: ") + name + " must be at least 1, not " + std::to_string(v));
}

}  // namespace

const char* to_string(event_type t) noexcept {
  switch (t) {
    case event_type::person: return "person";
    case event_type::auction: return "auction";
    case event_type::bid: break;
  }
  return "bid";
}

void validate(const generator_config& c) {
  require_positive(static_cast<long long>(std::min<std::uint64_t>(c.events_per_second, INT64_MAX)), "events_per_second");
  require_positive(c.avg_person_bytes, "avg_person_bytes");
  require_positive(c.avg_auction_bytes, "avg_auction_bytes");
  require_positive(c.avg_bid_bytes, "avg_bid_bytes");
  require_positive(c.hot_auction_ratio, "hot_auction_ratio");
  require_positive(c.hot_sellers_ratio, "hot_sellers_ratio");
  require_positive(c.hot_bidders_ratio, "hot_bidders_ratio");
  require_positive(c.num_in_flight_auctions, "num_in_flight_auctions");
  require_positive(c.num_active_people, "num_active_people");
  if (c.base_time_ms < 0) throw std::invalid_argument("nexmark generator: base_time_ms must not be negative");
}

std::int64_t event_time_ms(const generator_config& c, std::uint64_t n) {
  // floor(n * 1000 / rate) without overflow: whole seconds of events, then the remainder.
  const std::uint64_t rate = c.events_per_second;
  const std::uint64_t whole = n / rate;
  const std::uint64_t rest = n % rate;
  const auto rest_ms = static_cast<std::uint64_t>((static_cast<unsigned __int128>(rest) * 1000) / rate);
  return c.base_time_ms + static_cast<std::int64_t>(whole * 1000 + rest_ms);
}

event_type type_of_event(std::uint64_t n) noexcept {
  const std::uint64_t rem = n % proportion_denominator;
  if (rem < person_proportion) return event_type::person;
  if (rem < person_proportion + auction_proportion) return event_type::auction;
  return event_type::bid;
}

event generate_event(const generator_config& c, std::uint64_t n) {
  const auto id = static_cast<std::int64_t>(n);
  java_random r(id);
  const std::int64_t time = event_time_ms(c, n);
  event e;
  e.type = type_of_event(n);
  switch (e.type) {
    case event_type::person: e.new_person = next_person(id, r, time, c); break;
    case event_type::auction: e.new_auction = next_auction(id, r, time, c); break;
    case event_type::bid: e.new_bid = next_bid(id, r, time, c); break;
  }
  return e;
}

}  // namespace sluice::nexmark
