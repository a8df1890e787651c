#pragma once
// The inside of tcp_transport (see tcp_transport.hpp for the protocol). Everything here runs on the
// transport's home executor unless a comment says otherwise.

#include <sluice/buffers/frame.hpp>
#include <sluice/buffers/hello.hpp>
#include <sluice/buffers/log_budget.hpp>
#include <sluice/buffers/tcp_transport.hpp>
#include <sluice/io/tcp.hpp>
#include <sluice/runtime/scope.hpp>

#include <deque>
#include <stop_token>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

namespace sluice::buffers::detail {

class transport_core;

// The sending end of one remote channel. The sender lives on the partition's executor.
struct remote_output final : channel_target {
  transport_core* core = nullptr;
  runtime::executor* executor = nullptr;  // the partition's
  std::uint64_t connection_id = 0;
  std::uint32_t wire_channel = 0;
  std::optional<subpartition_sender> sender;  // made on `executor`
  // On the partition's executor: hands the buffer or event to home.
  void send(buffer_view view, bool priority, std::size_t backlog) override;
};

struct served_partition {
  result_partition* partition = nullptr;
  runtime::executor* executor = nullptr;
  std::vector<bool> requested;  // per subpartition: a sender exists
};

class connection {
 public:
  connection(std::uint64_t id, io::address peer, bool dialed, const transport_options& options);

  struct in_channel {  // this side receives data
    remote_input* input = nullptr;
    std::uint64_t partition_id = 0;
    std::uint32_t subpartition = 0;
    std::deque<gate_buffer> lent;  // buffers of the gate to receive into; never released here
    std::uint64_t next_sequence = 0;
    std::uint32_t last_backlog = 0;
    std::uint32_t credits_before_request = 0;
    bool requested = false;
    bool cancel_sent = false;
  };
  struct out_channel {  // this side sends data
    remote_output* output = nullptr;
    std::uint64_t next_sequence = 0;
    std::size_t last_backlog = 0;
  };
  struct outgoing {
    frame_header header;  // data frames
    buffer_view payload;  // data frames
    encoded_frame control;
    bool is_control = false;
  };

  std::uint64_t id;
  io::address peer;
  bool dialed;
  bool up = false;  // the hello is done: frames flow
  bool failed = false;
  bool claimed = false;      // by_node_ names this connection for peer_node
  std::string peer_node;     // the peer's node id, once its hello was read
  std::string failure;
  io::tcp_stream stream;
  std::optional<frame_decoder> decoder;  // made when the connection comes up (none while in the hello)
  frame_decoder_config decoder_config;
  std::stop_source hello_stop;  // fail() ends a hello in progress
  std::uint32_t next_wire_channel;  // even if dialed, odd if accepted
  std::unordered_map<std::uint32_t, in_channel> in;
  std::unordered_map<std::uint32_t, out_channel> out;
  std::deque<outgoing> queue;
  runtime::event queue_ready;
  std::vector<std::byte> scratch;  // a payload that is discarded, or an event's
};

class transport_core {
 public:
  transport_core(io::tcp_listener listener, transport_options options);
  ~transport_core();

  // --- posted to home ------------------------------------------------------------------------
  void on_serve(std::uint64_t partition_id, result_partition* partition, runtime::executor* executor);
  void on_open_input(remote_input* input, io::address peer, std::uint64_t partition_id, std::uint32_t subpartition);
  void on_grant(remote_input* input, std::vector<gate_buffer> lent);
  void on_output(remote_output* output, buffer_view view, bool priority, std::size_t backlog);
  // The gate failed the input's channel by itself (its event bound): cancel the channel.
  void on_gate_refused(remote_input* input, const std::string& why);

  // --- gate and partition sides (their executors) ------------------------------------------------
  remote_input& make_input(input_gate& gate, std::uint32_t gate_channel, runtime::executor& gate_executor);

  runtime::task<void> accept_loop();
  runtime::task<void> housekeeping();
  runtime::task<void> close();

  runtime::executor* home;
  transport_options options;
  hello_identity identity;
  io::tcp_listener listener;
  io::address local;
  transport_stats stats;
  bool closing = false;
  bool peers_closing = false;  // tcp_transport::expect_close(): a peer's close is orderly
  std::unordered_map<std::uint64_t, std::unique_ptr<connection>> connections;

 private:
  friend class connection_loops;
  connection* find(std::uint64_t id);

  // --- dialing, accepting and the hello (transport_dialing.cpp) --------------------------------
  connection& dial(const io::address& peer);
  // Dials until the hello succeeds, a refusal not worth retrying comes, or connect_timeout passes.
  runtime::task<void> dial_and_run(connection* c);
  runtime::task<void> accept_and_run(connection* c);
  runtime::task<hello_outcome> hello(connection* c);
  // The hello succeeded: the connection carries frames now.
  void go_up(connection& c, const peer_hello& peer);
  // The hello failed: counts and logs the refusal once, and ends the connection.
  void refused(connection& c, const hello_outcome& outcome);
  // Arbiter side: true if `c` may be THE connection to `node` (and records it).
  bool claim_node(connection& c, const std::string& node);
  connection* up_connection_to(const std::string& node, const connection* besides);
  // Moves the channels `from` opened (not yet requested) to `to`, and retires `from`.
  void migrate(connection& from, connection& to);
  // Counts and logs (within the budget) a connection closed at once for want of a hello slot.
  void note_over_capacity(const io::address& peer, const std::string& why);
  // A refusal's line, through the log budget (transport_options::refusal_log_lines): logged now, or
  // counted in its reason's summary.
  void log_refusal(std::string_view kind, const std::string& line);
  // The summaries of the budget's ended windows (all of them with `all`, at close), logged.
  void log_refusal_summaries(bool all);

  runtime::task<void> run_connection(connection* c);
  runtime::task<void> reader(connection* c);
  runtime::task<void> writer(connection* c);

  // Ends a connection: fails its receiving channels, cancels its sending ones, and queues a close
  // frame naming the fault when the peer should hear it. An `orderly` end of a connection with no
  // channel open (the peer closed it at a frame boundary) is logged as information, not an error.
  // `logged`: the caller logged and counted the end already (a refused hello).
  void fail(connection& c, std::string why, bool tell_peer, bool orderly = false, bool logged = false);
  void send_partition_request(connection& c, std::uint32_t wire, connection::in_channel& ch);
  void enqueue_control(connection& c, encoded_frame frame);
  void handle_control(connection& c, const control_frame& frame);
  void accept_request(connection& c, std::uint32_t wire, const partition_request& request);
  void start_output(connection& c, std::uint32_t wire, served_partition& served, const partition_request& request);
  void close_input(connection& c, std::uint32_t wire, std::optional<std::string> failure);
  void close_input_without_connection(remote_input* input, std::string why);
  runtime::task<void> wait_all_closed();
  void cancel_output(connection& c, std::uint32_t wire, bool answer);
  // Receives one buffer or event payload; false once the connection has failed.
  runtime::task<bool> receive_payload(connection* c, std::span<std::byte>* chunk, std::size_t* begin,
                                      std::size_t* end);
  runtime::task<bool> receive_rest(connection* c, std::span<std::byte> payload);

  struct pending_request {
    std::uint64_t connection_id;
    std::uint32_t wire_channel;
    partition_request request;
    std::chrono::steady_clock::time_point deadline;
  };

  std::map<std::string, std::uint64_t> dialed_;   // peer address -> connection id
  std::map<std::string, std::uint64_t> by_node_;  // peer node id -> its one connection (non-empty ids)
  std::size_t unauthenticated_ = 0;               // accepted connections still in their hello
  // The same, per source address (peer address with port 0); no entry at 0, so at most
  // max_unauthenticated entries.
  std::unordered_map<std::string, std::size_t> unauthenticated_by_source_;
  log_budget refusal_log_;
  std::unordered_map<std::uint64_t, served_partition> served_;
  std::vector<pending_request> pending_;
  std::vector<std::unique_ptr<remote_input>> inputs_;
  std::vector<std::unique_ptr<remote_output>> outputs_;
  std::uint64_t next_connection_id_ = 1;
  runtime::scope service_;      // accept loop, housekeeping
  runtime::scope connection_tasks_;
  runtime::event all_closed_;
  bool joined_ = false;
};

}  // namespace sluice::buffers::detail
