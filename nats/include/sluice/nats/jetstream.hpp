#pragma once
// JetStream over a nats::connection: JSON requests on $JS.API.* through the connection's inbox.
//
//   $JS.API.STREAM.CREATE.<name>  {"name","subjects":[..],"duplicate_window":<ns>,"storage":"file"}
//   $JS.API.STREAM.INFO.<name>    -> {"config":{"duplicate_window":ns,..},"state":{"first_seq","last_seq"}}
// An API answer with {"error":{"code","err_code","description"}} is an error quoting the description.
//
// Publishing: HPUB <subject> with "Nats-Msg-Id: <id>"; the stream answers on the reply subject with
// a PubAck {"stream":"S","seq":N} (and "duplicate":true when the id was seen within the stream's
// duplicate_window: the message was NOT stored again). publish_async sends and returns at once, so
// many publishes are in flight together; await_ack waits for one PubAck.

#include <sluice/nats/client.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace sluice::nats {

struct stream_info {
  std::string name;
  std::uint64_t first_seq = 0;
  std::uint64_t last_seq = 0;
  std::uint64_t messages = 0;
  std::chrono::nanoseconds duplicate_window{0};
  std::vector<std::string> subjects;
};

struct pub_ack {
  std::string stream;
  std::uint64_t seq = 0;
  bool duplicate = false;
};

inline constexpr std::chrono::milliseconds api_timeout{5000};

// Creates stream `name` storing `subjects` (a stream that exists with the same config is fine).
runtime::task<io::result<stream_info>> create_stream(connection& c, std::string name, std::vector<std::string> subjects,
                                                     std::chrono::nanoseconds duplicate_window = std::chrono::minutes(2));
runtime::task<io::result<stream_info>> get_stream_info(connection& c, std::string name);
// The name of the stream that stores `subject`, or an error (none does).
runtime::task<io::result<std::string>> stream_for_subject(connection& c, std::string subject);

runtime::task<io::result<std::shared_ptr<pending_reply>>> publish_async(connection& c, std::string subject, std::string payload,
                                                                       std::string msg_id);
runtime::task<io::result<pub_ack>> await_ack(connection& c, std::shared_ptr<pending_reply> slot,
                                             std::chrono::milliseconds timeout = api_timeout);

}  // namespace sluice::nats

namespace sluice::nats {

// An ephemeral pull consumer of `stream` starting at stream sequence `start_seq` (>= 1), no acks
// (ack_policy none: a replay is driven by the source's own position, not by redelivery). The
// server removes it after inactive_threshold without fetches. Yields its name.
runtime::task<io::result<std::string>> create_pull_consumer(connection& c, std::string stream, std::uint64_t start_seq,
                                                            std::chrono::nanoseconds inactive_threshold = std::chrono::seconds(30));

// A message fetched from a pull consumer: its stream sequence and JetStream timestamp come from the
// reply subject $JS.ACK.<stream>.<consumer>.<delivered>.<stream_seq>.<consumer_seq>.<ns>.<pending>.
struct stream_message {
  std::uint64_t seq = 0;
  std::uint64_t timestamp_ns = 0;
  std::string payload;
};
// Parses the $JS.ACK reply subject; nullopt when it is not one.
std::optional<stream_message> stream_message_from(message m);

}  // namespace sluice::nats
