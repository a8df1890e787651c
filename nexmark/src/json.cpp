// to_json (generator.hpp): one event as one JSON object with Beam's field names.
// nlohmann::ordered_json keeps the fields in Beam's order, "type" first, and escapes the strings
// (a bid's extra holds backslashes and brackets).

#include <sluice/nexmark/generator.hpp>

#include <nlohmann/json.hpp>

namespace sluice::nexmark {

std::string to_json(const event& e) {
  nlohmann::ordered_json j;
  j["type"] = to_string(e.type);
  switch (e.type) {
    case event_type::person: {
      const person& p = e.new_person;
      j["id"] = p.id;
      j["name"] = p.name;
      j["emailAddress"] = p.email_address;
      j["creditCard"] = p.credit_card;
      j["city"] = p.city;
      j["state"] = p.state;
      j["dateTime"] = p.date_time;
      j["extra"] = p.extra;
      break;
    }
    case event_type::auction: {
      const auction& a = e.new_auction;
      j["id"] = a.id;
      j["itemName"] = a.item_name;
      j["description"] = a.description;
      j["initialBid"] = a.initial_bid;
      j["reserve"] = a.reserve;
      j["dateTime"] = a.date_time;
      j["expires"] = a.expires;
      j["seller"] = a.seller;
      j["category"] = a.category;
      j["extra"] = a.extra;
      break;
    }
    case event_type::bid: {
      const bid& b = e.new_bid;
      j["auction"] = b.auction;
      j["bidder"] = b.bidder;
      j["price"] = b.price;
      j["dateTime"] = b.date_time;
      j["extra"] = b.extra;
      break;
    }
  }
  return j.dump();
}

}  // namespace sluice::nexmark
