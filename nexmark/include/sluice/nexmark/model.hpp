#pragma once
// Nexmark's three kinds of event (Beam's org.apache.beam.sdk.nexmark.model: Person, Auction, Bid),
// with Beam's field names and meanings. Times are epoch milliseconds; prices are in cents.
//
// An `event` is one of the three, tagged by `type`; only that member is meaningful (and only it is
// encoded when the event crosses a stage: codec<event> below).

#include <sluice/buffers/codec.hpp>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <tuple>

namespace sluice::nexmark {

struct person {
  std::int64_t id = 0;
  std::string name;
  std::string email_address;
  std::string credit_card;
  std::string city;
  std::string state;
  std::int64_t date_time = 0;
  std::string extra;
  static constexpr auto fields() {
    return std::make_tuple(&person::id, &person::name, &person::email_address, &person::credit_card, &person::city,
                           &person::state, &person::date_time, &person::extra);
  }
  bool operator==(const person&) const = default;
};

struct auction {
  std::int64_t id = 0;
  std::string item_name;
  std::string description;
  std::int64_t initial_bid = 0;
  std::int64_t reserve = 0;
  std::int64_t date_time = 0;
  std::int64_t expires = 0;
  std::int64_t seller = 0;
  std::int64_t category = 0;
  std::string extra;
  static constexpr auto fields() {
    return std::make_tuple(&auction::id, &auction::item_name, &auction::description, &auction::initial_bid,
                           &auction::reserve, &auction::date_time, &auction::expires, &auction::seller,
                           &auction::category, &auction::extra);
  }
  bool operator==(const auction&) const = default;
};

struct bid {
  std::int64_t auction = 0;
  std::int64_t bidder = 0;
  std::int64_t price = 0;
  std::int64_t date_time = 0;
  std::string extra;
  static constexpr auto fields() {
    return std::make_tuple(&bid::auction, &bid::bidder, &bid::price, &bid::date_time, &bid::extra);
  }
  bool operator==(const bid&) const = default;
};

enum class event_type : std::uint8_t { person = 0, auction = 1, bid = 2 };

const char* to_string(event_type t) noexcept;

struct event {
  event_type type = event_type::bid;
  person new_person;    // type == person
  auction new_auction;  // type == auction
  bid new_bid;          // type == bid

  // The event's time (the dateTime of whichever it is).
  std::int64_t date_time() const noexcept {
    switch (type) {
      case event_type::person: return new_person.date_time;
      case event_type::auction: return new_auction.date_time;
      case event_type::bid: break;
    }
    return new_bid.date_time;
  }
  bool operator==(const event&) const = default;
};

}  // namespace sluice::nexmark

namespace sluice::buffers {

// The tag byte, then only the member the tag names.
template <>
struct codec<nexmark::event> {
  static std::size_t encoded_size(const nexmark::event& e) {
    switch (e.type) {
      case nexmark::event_type::person: return 1 + codec<nexmark::person>::encoded_size(e.new_person);
      case nexmark::event_type::auction: return 1 + codec<nexmark::auction>::encoded_size(e.new_auction);
      case nexmark::event_type::bid: break;
    }
    return 1 + codec<nexmark::bid>::encoded_size(e.new_bid);
  }
  static void encode(byte_writer& w, const nexmark::event& e) {
    const auto tag = static_cast<std::uint8_t>(e.type);
    w.write(&tag, 1);
    switch (e.type) {
      case nexmark::event_type::person: codec<nexmark::person>::encode(w, e.new_person); return;
      case nexmark::event_type::auction: codec<nexmark::auction>::encode(w, e.new_auction); return;
      case nexmark::event_type::bid: codec<nexmark::bid>::encode(w, e.new_bid); return;
    }
  }
  static nexmark::event decode(byte_reader& r) {
    nexmark::event e;
    const auto tag = static_cast<std::uint8_t>(r.read(1, "nexmark event type")[0]);
    switch (tag) {
      case 0: e.type = nexmark::event_type::person; e.new_person = codec<nexmark::person>::decode(r); break;
      case 1: e.type = nexmark::event_type::auction; e.new_auction = codec<nexmark::auction>::decode(r); break;
      case 2: e.type = nexmark::event_type::bid; e.new_bid = codec<nexmark::bid>::decode(r); break;
      default: throw decode_error("decode nexmark event: type " + std::to_string(tag) + " is not 0, 1 or 2");
    }
    return e;
  }
};

}  // namespace sluice::buffers
