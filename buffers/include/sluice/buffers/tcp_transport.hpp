#pragma once
// tcp_transport: remote channels. One per process; it listens for peers, keeps ONE connection per
// peer address it dials (plus those peers dialed to it), and multiplexes every channel between two
// processes over that connection with the frame format of frame.hpp and the credit protocol of
// channel.hpp.
//
// Executors. The transport and all its connections live on one HOME executor (the one start() ran
// on). Gates and partitions may live on any executor of the process: everything between them and
// the connection is a posted message (invariant 2), and nothing of one side runs inside the other.
//
// A remote channel, receiver R (an input_gate channel, on executor B) <- sender S (a result_partition
// subpartition, on executor A):
//   1. R: open_input() on B registers the channel; home dials the peer if no connection is up and
//      sends a partition request carrying the credit granted so far.
//   2. S: home looks the partition up (serve_partition() registered it; an early request waits up to
//      partition_request_timeout), and starts a subpartition_sender on A with that credit.
//   3. Credit. The gate's credit pump calls grant(n) on R (a credit_route): B takes n buffers from the
//      gate against those credits and lends them to home, which sends add-credit. A buffer frame is
//      received STRAIGHT INTO one of those lent buffers (no intermediate copy), which then goes back
//      to B and is delivered to the gate. A buffer frame with no lent buffer left is a protocol fault.
//   4. S sends a backlog frame whenever its backlog changes, so R can ask for floating buffers.
//   5. End. After end-of-partition R sends cancel; S answers with cancel; unused lent buffers go
//      back to the gate, and wait_closed() returns.
// The port. start() binds exactly the address given (callers use loopback unless the job spans
// hosts). Every connection opens with the hello of hello.hpp before any frame: job name, epoch and
// node id must match (transport_options), and with a secret each side proves it knows it (HMAC-SHA256
// over both nonces); a refusal is logged once per connection with its reason ("connection from
// 10.0.0.2:4711 refused: stale epoch 5 (this job is at epoch 7)"), or past the log budget counted in
// a summary line instead, and counted in transport_stats::rejected. The secret authenticates peers
// and fences stale workers by epoch; it does not encrypt, and frames after the hello have only TCP's
// checksum and the header CRC (see hello.hpp). Bounds on the port: at most max_unauthenticated
// accepted connections are in their hello (one more is closed at once), at most
// max_unauthenticated_per_source of them from one source address, each must finish it within
// hello_timeout, and one in its hello holds no receive buffer and no channel table (those come
// after it). A flood of refusals is logged a few lines per reason per
// refusal_log_window, with a summary line counting the rest (transport_options).
// What the bounds give, measured with 2,000 idle connections held against a running job's worker
// (tests/apps/cluster_abuse_test.cpp): the worker keeps 16 of them in their hello for hello_timeout
// and closes the rest at once; its checkpoints keep completing and its memory does not grow (under
// +1 MiB); a peer from another address is welcomed at once. A peer from the abuser's own address is
// closed at once while the abuser holds its share; as a dialer it retries (backoff up to 1 s) until
// connect_timeout, and gets in once the held ones time out, unless the abuser refills its share as
// fast. Addresses are compared whole: an IPv6 abuser with a /64 has many.
// Dialing. A dial retries, with backoff up to 1 s, on a refused or reset connection, a hello cut
// short, and a peer not at this epoch yet, until connect_timeout; then its channels fail with the
// last error. A peer at a newer epoch (this worker is stale), another job or a wrong secret fail them
// at once. Two workers that dial each other at once end on one connection: the one with the smaller
// node id arbitrates (hello.hpp) and the loser's channels ride the winner's connection. A dial to an
// address that is the node id of a peer already connected rides that connection too.
//
// Channel table. A channel that does not fit (more than max_channels_per_connection open) fails alone
// with that reason; a peer that opens a channel in this side's id space, like any protocol fault,
// closes its connection only. A channel its gate failed (the gate's event bound, input_gate.hpp) is
// cancelled with the handshake below; the connection carries on.
//
// Faults. A malformed frame (frame.hpp's faults), a buffer without credit, an event that does not
// decode, a peer that disconnects (mid-frame or not) or a failed send end THAT connection: its
// receiving channels fail (the gate yields channel_failed, and failure() names the peer and the
// fault), its sending channels are cancelled, a close frame naming the fault goes to the peer where
// possible, and the error is logged. Other connections and the process carry on.
//
// Lifetime: channel objects belong to the transport and live until it is destroyed. Destroy a gate
// only after wait_closed() of each of its remote inputs; a partition only after its senders ended
// (end-of-partition sent, or withdraw_partition()). Destroy the transport after close() and after the
// executors of its gates and partitions have run their queued messages (e.g. after the engine
// stopped).
//
//   transport_options o{.job_name = "wordcount", .epoch = 7, .node_id = "10.0.0.1:7000", .secret = key};
//   auto t = (co_await tcp_transport::start(io::address::loopback_v4(), o)).value();  // on home
//   t->serve_partition(7, partition);                                      // on the partition's executor
//   remote_input& in = t->open_input(peer, 7, 0, gate, 0);                 // on the gate's executor
//   pump.connect(0, in);

#include <sluice/buffers/channel.hpp>
#include <sluice/buffers/fixed_text.hpp>
#include <sluice/buffers/segment.hpp>
#include <sluice/io/address.hpp>
#include <sluice/io/result.hpp>
#include <sluice/runtime/event.hpp>
#include <sluice/runtime/executor.hpp>
#include <sluice/runtime/task.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace sluice::buffers {

struct transport_options {
  // --- who this process is (hello.hpp): every peer must present the same job, epoch and secret ---
  // (Inline storage keeps the options trivially copyable: see fixed_text.hpp.)
  fixed_text<255> job_name;
  std::uint64_t epoch = 0;
  fixed_text<255> node_id;           // e.g. this worker's advertised HOST:PORT
  fixed_bytes<64> secret;            // empty: peers are not authenticated (job and epoch still are)
  // A connection (either way) that has not completed its hello by then is closed.
  std::chrono::milliseconds hello_timeout{5'000};
  // Accepted connections still in their hello; one more is closed at once.
  std::size_t max_unauthenticated = 64;
  // Of those, from one source address (any port); one more from that address is closed at once. So
  // one host holding idle connections cannot take every slot from a peer that dials later from
  // another host (a peer on the abuser's own address still competes with it; see below).
  std::size_t max_unauthenticated_per_source = 16;
  // Refusals are logged one line each, but at most refusal_log_lines per reason in each
  // refusal_log_window; the rest of that window are counted in one summary line when it ends
  // (log_budget.hpp), so a flood writes a few lines per reason, and each refusal is still in exactly
  // one line or one summary's count. The counters (transport_stats::rejected) count every one.
  std::size_t refusal_log_lines = 10;
  std::chrono::milliseconds refusal_log_window{10'000};
  // How long a dial keeps retrying (refused, reset during the hello, peer not at this epoch yet).
  std::chrono::milliseconds connect_timeout{30'000};
  // A peer gone silent (a partition: no reset, no FIN) ends its connections after about this long
  // (io::tcp_stream::set_dead_peer_timeout), and with them the channels they carry; 0 leaves it
  // to TCP (about 15 minutes). Jobs across workers set it from the lease (cluster/worker.hpp).
  std::chrono::milliseconds dead_peer_timeout{0};

  // The largest buffer payload accepted; at least the segment size of the gates it feeds.
  std::uint32_t max_frame_payload_bytes = default_segment_bytes;
  std::uint32_t max_channels_per_connection = 4096;
  // Frames are gathered into one send of up to this many bytes.
  std::size_t send_batch_bytes = 256 * 1024;
  std::size_t receive_chunk_bytes = 64 * 1024;
  // How long a partition request for a partition not (yet) served here waits before it is refused.
  std::chrono::milliseconds partition_request_timeout{10'000};
};
static_assert(std::is_trivially_copyable_v<transport_options>, "see fixed_text.hpp");

class tcp_transport;
namespace detail {
class transport_core;
}

// The receiving end of one remote channel: the credit route of a gate channel.
class remote_input final : public credit_route {
 public:
  // On the gate's executor.
  void grant(std::uint32_t credits) override;
  // True once the channel is closed and every lent buffer is back in the gate; false if stopped.
  runtime::task<bool> wait_closed();
  bool closed() const noexcept { return closed_.is_set(); }

 private:
  friend class detail::transport_core;
  remote_input(detail::transport_core* core, input_gate& gate, std::uint32_t gate_channel,
               runtime::executor& gate_executor)
      : core_(core), gate_(&gate), gate_channel_(gate_channel), gate_executor_(&gate_executor) {}

  detail::transport_core* core_;
  input_gate* gate_;
  std::uint32_t gate_channel_;
  runtime::executor* gate_executor_;
  runtime::event closed_;
  bool gate_refused_ = false;  // gate executor only: on_gate_refused was posted
  // Home executor only: where the channel lives on the wire.
  std::uint64_t connection_id_ = 0;
  std::uint32_t wire_channel_ = 0;
};

// Connections whose hello failed, by reason (hello_refusal), both ways.
struct hello_rejections {
  std::uint64_t malformed = 0;       // not a hello: garbage, another protocol
  std::uint64_t wrong_job = 0;
  std::uint64_t stale_epoch = 0;
  std::uint64_t future_epoch = 0;
  std::uint64_t authentication = 0;  // wrong secret, or a secret on one side only
  std::uint64_t same_node = 0;
  std::uint64_t closed = 0;          // the peer went away during the hello
  std::uint64_t timeout = 0;         // no hello within hello_timeout
  std::uint64_t over_capacity = 0;   // closed at once: max_unauthenticated were in their hello (or
                                     // max_unauthenticated_per_source from that address)
  std::uint64_t total() const noexcept {
    return malformed + wrong_job + stale_epoch + future_epoch + authentication + same_node + closed + timeout +
           over_capacity;
  }
};

struct transport_stats {
  hello_rejections rejected;
  std::uint64_t duplicates_closed = 0;  // connections closed because the pair already had one
  std::uint64_t dial_retries = 0;
  std::size_t unauthenticated = 0;       // accepted connections in their hello now
  std::size_t unauthenticated_peak = 0;
  std::uint64_t connections_accepted = 0;
  std::uint64_t connections_dialed = 0;
  std::uint64_t connections_failed = 0;
  std::uint64_t frames_sent = 0;
  std::uint64_t frames_received = 0;
  std::uint64_t bytes_sent = 0;
  std::uint64_t bytes_received = 0;
  // Why the latest failed connections ended (at most 16, oldest first): "connection from
  // 127.0.0.1:4711: malformed frame at stream byte 0: bad magic ...".
  std::vector<std::string> recent_failures;
};

class tcp_transport {
 public:
  // On the home executor. Listens on `listen_on` (port 0: the kernel picks one).
  static runtime::task<io::result<std::unique_ptr<tcp_transport>>> start(io::address listen_on,
                                                                         transport_options options = {});
  ~tcp_transport();
  tcp_transport(const tcp_transport&) = delete;
  tcp_transport& operator=(const tcp_transport&) = delete;

  io::address local_address() const;
  runtime::executor& home() const noexcept;

  // On the partition's executor: peers may now request its subpartitions.
  void serve_partition(std::uint64_t partition_id, result_partition& partition);
  // On the gate's executor: channel `gate_channel` of `gate` receives subpartition `subpartition` of
  // partition `partition_id` served at `peer`. Connect the returned route to the gate's credit pump.
  remote_input& open_input(io::address peer, std::uint64_t partition_id, std::uint32_t subpartition,
                           input_gate& gate, std::uint32_t gate_channel);

  // On home: refuses new work, fails every channel ("transport closed"), closes every connection and
  // the listener, and waits for their loops to end. Idempotent.
  runtime::task<void> close();
  // On home: the peers are closing too (the transports of one process, closed one after another
  // at the job's end), so a peer's close from now on is an orderly end and not a failure to log.
  void expect_close() noexcept;

  // On home.
  transport_stats stats() const;
  std::size_t connections() const;

 private:
  explicit tcp_transport(std::unique_ptr<detail::transport_core> core);
  std::unique_ptr<detail::transport_core> core_;
};

}  // namespace sluice::buffers
