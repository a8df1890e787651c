#pragma once
// watch_stream: the state behind an etcd::watch (private to the etcd module; see watch.hpp for
// the protocol and the guarantees).
//
// The stream's body is read into a response_parser; each complete line is one JSON message, parsed
// and turned into a batch (events), the creation (created, watch_id), or the end (a compaction, a
// cancel, a gateway error). Batches wait in `ready_` until next() takes them; a failure is kept
// and reported after the batches that came before it.

#include "http.hpp"

#include <sluice/etcd/types.hpp>
#include <sluice/runtime/executor.hpp>

#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <string>

namespace sluice::etcd::detail {

class watch_stream {
 public:
  // Connects, sends the create request, and reads until the server says the watch is created.
  static runtime::task<io::result<std::unique_ptr<watch_stream>>> open(endpoint where, std::size_t max_message_bytes,
                                                                      std::string create_body,
                                                                      std::chrono::milliseconds dead_peer = {});

  runtime::task<io::result<watch_batch>> next();
  runtime::task<void> close();

  bool is_open() const noexcept { return !closed_ && !failed_; }
  std::int64_t id() const noexcept { return id_; }
  std::int64_t created_revision() const noexcept { return created_revision_; }
  std::int64_t compact_revision() const noexcept { return compact_revision_; }

  watch_stream(endpoint where, std::unique_ptr<http_connection> conn, std::size_t max_message_bytes)
      : where_(std::move(where)), conn_(std::move(conn)), parser_(max_message_bytes), home_(runtime::executor::current()) {}

 private:
  // One receive, then every complete message in it. A stop (ECANCELED) is returned, not kept.
  runtime::task<io::result<void>> read_more();
  void take_messages();
  void take_message(std::string_view line);
  void fail(io::error e);

  endpoint where_;
  std::unique_ptr<http_connection> conn_;
  response_parser parser_;
  runtime::executor* home_;  // where it was made, and is used
  std::deque<watch_batch> ready_;
  std::optional<io::error> failed_;
  bool created_ = false;
  bool closed_ = false;
  bool reading_ = false;
  std::int64_t id_ = 0;
  std::int64_t created_revision_ = 0;
  std::int64_t compact_revision_ = 0;
};

}  // namespace sluice::etcd::detail
