#pragma once
// JetStream connectors (issue 16): a source that replays a stream from its own position, and a
// two-phase sink that publishes with deduplicating message ids.
//
// jetstream_source (records: one message payload each, as std::string)
//   - Every task of the stage reads the WHOLE stream (its own ephemeral pull consumer) and emits
//     the messages whose stream sequence is = subtask (mod parallelism): parallelism 1 is the
//     efficient case; more tasks read the stream that many times.
//   - Position: the last stream sequence this task has passed (emitted, or skipped as another
//     task's), and with `bounded` the stream's last sequence as of the job's FIRST open, fixed in the
//     position, so a restart stops at the same place. A restore starts a new consumer at position+1.
//   - A fetcher coroutine fills a bounded buffer with batches (CONSUMER.MSG.NEXT, expires 1 s);
//     read() only drains it, wait_readable() waits on the event the fetcher sets. A fetch the server
//     does not answer (stopped, cut off) is an error naming the server and stream, never a hang.
//   - Exactly once on the read side: records after the checkpoint's position are read again after
//     a restart, in the same order (JetStream sequences are stable), unless the stream's limits
//     removed them meanwhile (then the first sequence moved past them: the source fails naming it).
//
// jetstream_sink (records: payloads, published on one subject)
//   - write() stages in memory (a record above max_payload with its headers fails it, naming the
//     record, before it can be in a checkpoint); precommit(id) turns the staged records into batch `id` and returns
//     every batch not yet committed, encoded; commit(id) publishes each batch <= id with
//     Nats-Msg-Id "<job>.<run>/<task>/<checkpoint>/<n>" (the run: dataflow::sink_recovery, so two
//     jobs of one name never share ids, nor does a fresh start), many in flight, waits for every PubAck, then
//     forgets them. recover(from) publishes the batches in from.precommitted again: JetStream drops the ones
//     it already stored (PubAck duplicate=true).
//   - Exactly once holds ONLY IF a replay comes within the stream's duplicate_window (2 min by
//     default) of the first publish of the same id: a restart later than that publishes a batch
//     that was committed but not yet forgotten again, as new messages. recover() refuses a stream
//     whose duplicate_window is 0 (nats-server 2.9 never reports one: it stores
//     duplicate_window 0 as the 2 min default, checked against the real server). The sink's staged records are in memory: bounded by what one
//     checkpoint interval produces.
//   - The subject must be stored by a stream. If none stores it, recover() creates one named after
//     the subject ('.', '*', '>' become '_'), file storage, duplicate_window 2 min.
//
// URLs: nats://HOST:PORT/STREAM (source) and nats://HOST:PORT/SUBJECT (sink). HOST is an IP
// address or localhost (io::address::parse: no DNS lookup). The server is NOT part of the job's identity (the stream or subject
// is): the same stream reached at another address (a moved server, another cluster member) resumes.

#include <sluice/dataflow/connector.hpp>
#include <sluice/io/address.hpp>

#include <string>

namespace sluice::nats {

struct nats_url {
  io::address server;
  std::string server_text;  // "HOST:PORT"
  std::string name;         // the stream (source) or subject (sink)
};
// Parses "nats://HOST:PORT/NAME"; the error says what is wrong with the URL.
io::result<nats_url> parse_url(std::string_view url);

dataflow::source_spec<std::string> jetstream_source_spec(const nats_url& url, bool bounded);
dataflow::sink_spec<std::string> jetstream_sink_spec(const nats_url& url);

// The connectors themselves (what the specs make), for tests and embedding.
std::unique_ptr<dataflow::source_connector<std::string>> make_jetstream_source(const dataflow::connector_context& ctx,
                                                                               const nats_url& url, bool bounded);
std::unique_ptr<dataflow::sink_connector<std::string>> make_jetstream_sink(const dataflow::connector_context& ctx,
                                                                           const nats_url& url);

}  // namespace sluice::nats
