// fuzz_make_seeds <corpus dir>: writes the generated seeds of every fuzz target into
// <corpus dir>/<target>/gen-<what>, replacing earlier ones; other files there (regression inputs)
// are left alone. Run it after a format changes and commit the result (scripts/fuzz.sh --seeds).
//
// A seed is a small valid input made by the code that makes such inputs for real: frames by the
// frame encoders, a checkpoint (its state files and manifest) by the channel-state writer and
// checkpoint storage on io_uring, join lines by the join input generator; plus edge cases. The
// output is the same on every run (fixed ids, times, seeds and relative paths).

#include <sluice/buffers/buffer_pool.hpp>
#include <sluice/buffers/codec.hpp>
#include <sluice/buffers/crc32c.hpp>
#include <sluice/buffers/event_codec.hpp>
#include <sluice/buffers/frame.hpp>
#include <sluice/buffers/hello.hpp>
#include <sluice/buffers/input_gate.hpp>
#include <sluice/buffers/record_serializer.hpp>
#include <sluice/buffers/segment.hpp>
#include <sluice/dataflow/generator.hpp>
#include <sluice/dataflow/job.hpp>
#include <sluice/dataflow/job_fingerprint.hpp>
#include <sluice/dataflow/samples.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/snapshot/channel_state_writer.hpp>
#include <sluice/snapshot/checkpoint_storage.hpp>
#include <sluice/snapshot/manifest.hpp>
#include <sluice/snapshot/state_file.hpp>

#include <fmt/format.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

namespace fs = std::filesystem;
using namespace sluice;
using bytes = std::vector<std::byte>;

namespace {

constexpr snapshot::checkpoint_id seed_checkpoint = 7;
constexpr std::uint64_t seed_created_unix_ms = 1'712'000'000'000;

class corpus_writer {
 public:
  explicit corpus_writer(fs::path dir) : dir_(std::move(dir)) {
    fs::create_directories(dir_);
    for (const auto& entry : fs::directory_iterator(dir_)) {
      if (entry.path().filename().string().starts_with("gen-")) fs::remove(entry.path());
    }
  }
  void add(const std::string& name, std::span<const std::byte> content) {
    std::ofstream out(dir_ / ("gen-" + name), std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(content.data()), static_cast<std::streamsize>(content.size()));
    if (!out) throw std::runtime_error("cannot write seed " + (dir_ / name).string());
    ++count_;
  }
  void add(const std::string& name, std::string_view text) {
    add(name, std::as_bytes(std::span<const char>(text.data(), text.size())));
  }
  std::size_t count() const noexcept { return count_; }

 private:
  fs::path dir_;
  std::size_t count_ = 0;
};

bytes read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto view = std::as_bytes(std::span<const char>(chars));
  return {view.begin(), view.end()};
}

void append(bytes& out, std::span<const std::byte> more) { out.insert(out.end(), more.begin(), more.end()); }

// Records as a buffer carries them (record_serializer.hpp): u32 length, then the encoded record.
template <class T>
bytes serialized_records(const std::vector<T>& records) {
  bytes out;
  for (const T& r : records) {
    bytes one;
    buffers::encode_to(one, r);
    for (std::size_t i = 0; i < buffers::record_length_bytes; ++i) {
      out.push_back(static_cast<std::byte>(one.size() >> (8 * i)));
    }
    append(out, one);
  }
  return out;
}

bytes event_bytes(const buffers::gate_event& event) {
  bytes out(buffers::max_event_bytes);
  out.resize(buffers::encode_event(event, out));
  return out;
}

// ---- frames -----------------------------------------------------------------------------------------

// fuzz_frame's preamble (see fuzz_frame.cpp): options, then the channels this side registers.
bytes preamble(std::uint8_t options, const std::vector<std::uint32_t>& channels) {
  bytes out{std::byte{options}, std::byte{static_cast<std::uint8_t>(channels.size())}};
  for (std::uint32_t id : channels) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::byte>(id >> (8 * i)));
  }
  return out;
}
constexpr std::uint8_t real_limits = 0x1E;  // max_payload_bytes 32768, max_channels 1024
constexpr std::uint8_t repair_crcs = 0x01;

void frame(bytes& out, const buffers::encoded_frame& f) { append(out, f.bytes()); }
void data_frame(bytes& out, buffers::frame_type type, std::uint8_t flags, std::uint32_t channel, std::uint64_t sequence,
                std::span<const std::byte> payload) {
  buffers::header_bytes h;
  buffers::encode_header({type, flags, channel, sequence, static_cast<std::uint32_t>(payload.size())}, h);
  append(out, h);
  append(out, payload);
}

void frame_seeds(corpus_writer& corpus) {
  using namespace buffers;
  using words = std::vector<std::pair<std::string, std::uint64_t>>;

  // What the side that sends data receives: partition requests, credit, cancels, close.
  bytes sender_side = preamble(real_limits, {});
  frame(sender_side, encode_partition_request(0, 0, {7, 0, 2}));
  frame(sender_side, encode_partition_request(2, 0, {7, 1, 2}));
  frame(sender_side, encode_add_credit(0, 1, {3}));
  frame(sender_side, encode_add_credit(2, 1, {1}));
  frame(sender_side, encode_cancel(0, 2));
  frame(sender_side, encode_add_credit(2, 2, {4294967295u}));
  frame(sender_side, encode_cancel(2, 3));
  frame(sender_side, encode_close("job finished"));
  corpus.add("sender-side", sender_side);

  // What the receiving side gets on channels 0 and 2: backlog, buffers of records, a priority
  // barrier, end of data and end of partition, the cancel answers, close.
  bytes receiver_side = preamble(real_limits, {0, 2});
  frame(receiver_side, encode_backlog(0, 0, {3}));
  data_frame(receiver_side, frame_type::buffer, 0, 0, 1, serialized_records(words{{"the", 3}, {"sluice", 1}}));
  data_frame(receiver_side, frame_type::event, frame_flags::priority, 0, 2,
             event_bytes({gate_event::type::barrier, 7}));
  data_frame(receiver_side, frame_type::buffer, 0, 2, 0, serialized_records(words{{"a", 1}}));
  data_frame(receiver_side, frame_type::event, 0, 2, 1, event_bytes({gate_event::type::watermark, 1000}));
  data_frame(receiver_side, frame_type::event, 0, 0, 3, event_bytes({gate_event::type::end_of_data, 0}));
  data_frame(receiver_side, frame_type::event, 0, 0, 4, event_bytes({gate_event::type::end_of_partition, 0}));
  frame(receiver_side, encode_cancel(0, 5));
  frame(receiver_side, encode_backlog(2, 2, {0}));
  frame(receiver_side, encode_cancel(2, 3));
  frame(receiver_side, encode_close(""));
  corpus.add("receiver-side", receiver_side);

  // One connection's both directions are separate decoders; a stream may hold both kinds of
  // channel when the peer sends on some and receives on others.
  bytes both = preamble(real_limits, {1});
  frame(both, encode_partition_request(0, 0, {1, 0, 1}));
  data_frame(both, frame_type::buffer, 0, 1, 0, serialized_records(std::vector<std::string>{"x", "", "yz"}));
  frame(both, encode_add_credit(0, 1, {1}));
  corpus.add("both-directions", both);

  corpus.add("empty", preamble(real_limits, {}));
  corpus.add("registered-only", preamble(real_limits, {0, 1, 4294967294u}));

  // The longest close reason, cut by the encoder at a character boundary.
  std::string reason;
  while (reason.size() < max_close_reason_bytes + 4) reason += "é";
  bytes long_close = preamble(real_limits, {});
  frame(long_close, encode_close(reason));
  corpus.add("close-longest-reason", long_close);

  // Cut short: in a header, in a control payload, in a data payload.
  const auto cut = [&](const std::string& name, const bytes& stream, std::size_t drop) {
    corpus.add(name, std::span<const std::byte>(stream).first(stream.size() - drop));
  };
  cut("cut-in-header", sender_side, encode_close("job finished").size_bytes + 10);
  cut("cut-in-request", sender_side, sender_side.size() - 2 - frame_header_bytes - 5);
  {
    bytes s = preamble(real_limits, {0});
    data_frame(s, frame_type::buffer, 0, 0, 0, serialized_records(words{{"cut", 9}}));
    cut("cut-in-buffer", s, 3);
  }

  // Faults, one each.
  {
    bytes s = preamble(real_limits, {});
    frame(s, encode_close("bye"));
    frame(s, encode_cancel(0, 0));
    corpus.add("data-after-close", s);
  }
  {
    bytes s = preamble(real_limits, {});
    frame(s, encode_partition_request(0, 0, {1, 0, 1}));
    header_bytes h;
    encode_header({frame_type::add_credit, 0, 0, 1, 4}, h);
    append(s, h);
    append(s, bytes(4));  // a grant of 0 credits
    corpus.add("add-credit-zero", s);
  }
  {
    bytes s = preamble(real_limits & ~0x18, {});  // max_channels 1
    frame(s, encode_partition_request(0, 0, {1, 0, 1}));
    frame(s, encode_partition_request(2, 0, {1, 1, 1}));
    corpus.add("too-many-channels", s);
  }
  {
    bytes s = preamble(real_limits & ~0x06, {0});  // max_payload_bytes 16
    data_frame(s, frame_type::buffer, 0, 0, 0, bytes(16, std::byte{'a'}));
    data_frame(s, frame_type::buffer, 0, 0, 1, bytes(17, std::byte{'b'}));
    corpus.add("oversized-payload", s);
  }
  {
    bytes s = preamble(real_limits, {0});
    frame(s, encode_add_credit(0, 0, {1}));  // credit flows the other way on a receiving channel
    corpus.add("wrong-direction", s);
  }
  {
    bytes s = preamble(real_limits, {});
    frame(s, encode_partition_request(5, 0, {1, 0, 1}));
    frame(s, encode_add_credit(5, 2, {1}));
    corpus.add("out-of-sequence", s);
  }
  {
    bytes s = preamble(real_limits, {});
    frame(s, encode_partition_request(5, 0, {1, 0, 1}));
    frame(s, encode_partition_request(5, 0, {1, 0, 1}));
    corpus.add("channel-already-open", s);
  }
  {
    bytes s = preamble(real_limits, {});
    append(s, std::as_bytes(std::span<const char>("GET / HTTP/1.1\r\n\r\n", 18)));
    corpus.add("bad-magic", s);
  }
  {
    // Zeroed CRCs, which the harness puts right (option bit 0).
    bytes s = preamble(real_limits | repair_crcs, {3});
    data_frame(s, frame_type::event, frame_flags::priority, 3, 0, event_bytes({gate_event::type::barrier, 8}));
    frame(s, encode_cancel(3, 1));
    for (std::size_t p = 2 + 4; p < s.size();) {  // after the preamble with one channel
      std::uint32_t length = 0;
      for (int i = 0; i < 4; ++i) length |= std::to_integer<std::uint32_t>(s[p + 12 + i]) << (8 * i);
      for (std::size_t i = 24; i < 28; ++i) s[p + i] = std::byte{0};
      p += frame_header_bytes + length;
    }
    corpus.add("repaired-checksums", s);
  }
}

// ---- a checkpoint: state files and manifest ---------------------------------------------------

struct checkpoint_files {
  std::vector<fs::path> state_files;
  fs::path manifest;
};

void check(const io::result<void>& r, const char* what) {
  if (!r) throw std::runtime_error(std::string(what) + ": " + r.error().message());
}

buffers::buffer_view captured(buffers::local_buffer_pool& pool, std::span<const std::byte> content) {
  std::optional<buffers::buffer> b = pool.try_request();
  if (!b) throw std::runtime_error("seed pool exhausted");
  b->append(content);
  return b->retain();
}

// One task's state as a stream task hands it to its writer mid-checkpoint: a source offset and a
// word count map as operator state, captured input buffers (one ending in a partial record, whose
// rest is the deserializer's partial record), captured output buffers.
void write_unaligned_task(snapshot::channel_state_writer* writer, buffers::local_buffer_pool* pool,
                          const std::string& dir, std::uint32_t salt) {
  using words = std::vector<std::pair<std::string, std::uint64_t>>;
  const snapshot::checkpoint_id id = seed_checkpoint;
  check(writer->start(id, dir), "start");
  bytes offset;
  buffers::encode_to(offset, std::uint64_t{4096 + salt});
  check(writer->add_operator_state(id, 0, offset), "operator state 0");
  bytes counts;
  buffers::encode_to(counts, words{{"sluice", 2 + salt}, {"stream", 1}});
  check(writer->add_operator_state(id, 1, counts), "operator state 1");

  const bytes whole = serialized_records(words{{"the", 1}, {"quick", 1}});
  const bytes next = serialized_records(words{{"brown", 1}});
  check(writer->add_input_bytes(id, 0, salt, bytes(next.begin(), next.begin() + 5)), "partial record");
  std::vector<buffers::buffer_view> in;
  in.push_back(captured(*pool, whole));
  in.push_back(captured(*pool, std::span<const std::byte>(next).subspan(5)));
  check(writer->add_input(id, 0, salt, std::move(in)), "input");
  std::vector<buffers::buffer_view> out;
  out.push_back(captured(*pool, serialized_records(words{{"fox", 1}})));
  check(writer->add_output(id, 0, 1, std::move(out)), "output");
  check(writer->add_input(id, 1, 0, {}), "empty input");
  check(writer->finish_input(id), "finish input");
  check(writer->finish_output(id), "finish output");
}

runtime::task<checkpoint_files> write_checkpoint(std::string root, snapshot::checkpoint_mode mode,
                                                 std::map<std::string, bytes> metadata) {
  const snapshot::checkpoint_id id = seed_checkpoint;
  const std::vector<snapshot::task_id> tasks =
      mode == snapshot::checkpoint_mode::unaligned ? std::vector<snapshot::task_id>{0, 1}
                                                   : std::vector<snapshot::task_id>{0};
  snapshot::checkpoint_storage storage(root);
  const auto made = co_await storage.create_checkpoint_dir(id);
  check(made, "create checkpoint dir");
  const auto prepared = co_await storage.prepare_checkpoint(id, tasks);
  check(prepared, "prepare checkpoint");

  buffers::network_memory memory(16 * 4096, 4096, 1);
  buffers::local_buffer_pool pool(memory.pool(0), 1, 16);
  for (snapshot::task_id t : tasks) {
    snapshot::channel_state_writer writer(t);
    if (mode == snapshot::checkpoint_mode::unaligned) {
      write_unaligned_task(&writer, &pool, storage.checkpoint_dir(id), t);
    } else {
      bytes offset;
      buffers::encode_to(offset, std::uint64_t{123});
      std::vector<snapshot::operator_snapshot> states;
      states.push_back({0, offset});
      states.push_back({2, {}});  // an operator with empty state
      check(writer.start_aligned(id, storage.checkpoint_dir(id), std::move(states)), "start aligned");
    }
    const snapshot::checkpoint_outcome outcome = co_await writer.result(id);
    co_await writer.close();
    if (!outcome.completed()) throw std::runtime_error(fmt::format("task {}: the checkpoint did not complete", t));
  }

  snapshot::checkpoint_manifest manifest{id, mode, seed_created_unix_ms, {}, std::move(metadata)};
  for (snapshot::task_id t : tasks) {
    auto described = co_await storage.describe_state_file(id, t);
    if (!described) throw std::runtime_error(described.error().message());
    manifest.files.push_back(*described);
  }
  const auto committed = co_await storage.commit_manifest(manifest);
  check(committed, "commit");

  checkpoint_files files;
  for (snapshot::task_id t : tasks) files.state_files.emplace_back(storage.state_file_path(id, t));
  files.manifest = fs::path(storage.checkpoint_dir(id)) / snapshot::manifest_file_name;
  co_return files;
}

// An incremental checkpoint's: task 0's operator 0 a delta on checkpoint 5 (an operator_base
// record), operator 1 whole; its manifest requires checkpoint 5.
runtime::task<checkpoint_files> write_incremental_checkpoint(std::string root) {
  const snapshot::checkpoint_id id = seed_checkpoint;
  snapshot::checkpoint_storage storage(root);
  const auto made = co_await storage.create_checkpoint_dir(id);
  check(made, "create checkpoint dir");
  snapshot::channel_state_writer writer(0);
  check(writer.start(id, storage.checkpoint_dir(id)), "start");
  bytes changed;
  buffers::encode_to(changed, std::vector<std::pair<std::string, std::uint64_t>>{{"sluice", 3}});
  check(writer.add_operator_state(id, 0, changed), "operator state 0");
  check(writer.add_operator_base(id, 0, 5), "operator base 0");
  bytes offset;
  buffers::encode_to(offset, std::uint64_t{8192});
  check(writer.add_operator_state(id, 1, offset), "operator state 1");
  check(writer.finish_input(id), "finish input");
  check(writer.finish_output(id), "finish output");
  const snapshot::checkpoint_outcome outcome = co_await writer.result(id);
  co_await writer.close();
  if (!outcome.completed()) throw std::runtime_error("the incremental checkpoint did not complete");

  snapshot::checkpoint_manifest manifest{id, snapshot::checkpoint_mode::aligned, seed_created_unix_ms, {}, {}};
  auto described = co_await storage.describe_state_file(id, 0);
  if (!described) throw std::runtime_error(described.error().message());
  manifest.files.push_back(*described);
  const auto committed = co_await storage.commit_manifest(manifest);  // it requires the file's base
  check(committed, "commit");
  checkpoint_files files;
  files.state_files.emplace_back(storage.state_file_path(id, 0));
  files.manifest = fs::path(storage.checkpoint_dir(id)) / snapshot::manifest_file_name;
  co_return files;
}

// The metadata run_job puts in every manifest: the fingerprint of a word count over a small input.
std::map<std::string, bytes> wordcount_metadata() {
  {
    std::ofstream input("words.txt");
    input << "the quick brown fox\njumps over the lazy dog\n";
  }
  dataflow::job_builder job("wordcount");
  dataflow::build_wordcount(job, {"words.txt", "/srv/sluice/out", 2, 0});  // absolute: as given
  return dataflow::fingerprint_metadata(dataflow::fingerprint_job(job));
}

void checkpoint_seeds(corpus_writer& manifests, corpus_writer& state_files) {
  const auto metadata = wordcount_metadata();
  const std::pair<const char*, snapshot::checkpoint_mode> modes[] = {{"unaligned", snapshot::checkpoint_mode::unaligned},
                                                                     {"aligned", snapshot::checkpoint_mode::aligned}};
  bytes sample_state;
  for (const auto& [name, mode] : modes) {
    const std::string root = fmt::format("checkpoints-{}", name);
    const checkpoint_files files = runtime::sync_wait(write_checkpoint(root, mode, metadata));
    manifests.add(fmt::format("{}-checkpoint", name), read_file(files.manifest));
    for (const auto& path : files.state_files) {
      state_files.add(fmt::format("{}-{}", name, path.filename().string()), read_file(path));
    }
    if (sample_state.empty()) sample_state = read_file(files.state_files.front());
  }
  const checkpoint_files incremental = runtime::sync_wait(write_incremental_checkpoint("checkpoints-incremental"));
  manifests.add("incremental-checkpoint", read_file(incremental.manifest));
  state_files.add("incremental-task-0.state", read_file(incremental.state_files.front()));

  // Manifests by the encoder: without metadata, with the largest numbers, every mode.
  snapshot::checkpoint_manifest plain{1, snapshot::checkpoint_mode::aligned, 0, {}, {}};
  manifests.add("no-tasks", snapshot::encode_manifest(plain));
  snapshot::checkpoint_manifest big{UINT64_MAX, snapshot::checkpoint_mode::at_least_once, UINT64_MAX,
                                    {{"task-4294967295.state", UINT64_MAX, 0xffffffffu, UINT64_MAX, UINT64_MAX},
                                     {"a", 0, 0, 0, 0}},
                                    {{"k", {}}, {"z.-_", {std::byte{0}, std::byte{0xff}}}}};
  manifests.add("largest-numbers", snapshot::encode_manifest(big));
  plain.mode = snapshot::checkpoint_mode::aligned_timeout;
  manifests.add("aligned-timeout", snapshot::encode_manifest(plain));
  const std::string text = snapshot::encode_manifest(big);
  manifests.add("cut-in-half", text.substr(0, text.size() / 2));
  std::string bad_crc = text;
  bad_crc[bad_crc.size() - 2] = bad_crc[bad_crc.size() - 2] == '0' ? '1' : '0';
  manifests.add("bad-checksum", bad_crc);
  manifests.add("empty", "");

  // State files by the encoders: only an end record, no end record, a byte too many, cut short.
  bytes end_only;
  append(end_only, snapshot::encode_file_header({1, 0}));
  const auto end = snapshot::encode_end_payload({0, 0});
  append(end_only, snapshot::encode_record_header({snapshot::record_type::end, 0, 0,
                                                   static_cast<std::uint32_t>(end.size()), buffers::crc32c(end), 0}));
  append(end_only, end);
  state_files.add("end-record-only", end_only);
  const std::size_t end_record_bytes = snapshot::state_record_header_bytes + snapshot::state_end_payload_bytes;
  state_files.add("no-end-record", std::span<const std::byte>(sample_state).first(sample_state.size() - end_record_bytes));
  bytes longer = sample_state;
  longer.push_back(std::byte{0});
  state_files.add("byte-after-end", longer);
  state_files.add("cut-in-record", std::span<const std::byte>(sample_state).first(sample_state.size() / 2));
  state_files.add("header-only", std::span<const std::byte>(sample_state).first(snapshot::state_file_header_bytes));
  state_files.add("empty", bytes{});
}

// ---- join input lines ----------------------------------------------------------------------------

void csv_seeds(corpus_writer& corpus) {
  const dataflow::join_input_spec spec{20, 4, 1000, 42, "p"};
  std::string file;
  for (std::uint64_t n = 0; n < spec.rows; ++n) file += dataflow::join_input_line(spec, n) + "\n";
  corpus.add("join-input", file);
  corpus.add("edge-cases",
             "k,0,\n"
             ",0,\n"
             ",,\n"
             "k,18446744073709551615,max\n"
             "k,18446744073709551616,above max\n"
             "k,007,leading zeros\n"
             "k,1,payload,with,commas\n"
             "k,1,crlf\r\n"
             "k,-1,negative\n"
             "k,+1,plus\n"
             "k, 1,space\n"
             "k,1\n"
             "no commas\n"
             "k,0x10,hex\n"
             "\n"
             "last line without newline,5,x");
}

}  // namespace

// ---- hello messages ---------------------------------------------------------------------------------

// fuzz_hello's input: an options byte (0: as sent), then one message.
void hello_seeds(corpus_writer& corpus) {
  using namespace buffers;
  const auto seed = [&corpus](const std::string& name, std::span<const std::byte> message, std::uint8_t options = 0) {
    bytes s{std::byte{options}};
    append(s, message);
    corpus.add(name, s);
  };
  std::array<std::byte, hello_nonce_bytes> nonce{};
  for (std::size_t i = 0; i < nonce.size(); ++i) nonce[i] = static_cast<std::byte>(i * 13 + 5);
  const hello_identity with_secret{"wordcount", 7, "10.0.0.1:7000", bytes(32, std::byte{'k'})};
  const hello_identity without{"j", 0, "", {}};
  const bytes hello = encode_hello(with_secret, nonce);
  seed("hello", hello);
  seed("hello-no-secret", encode_hello(without, std::array<std::byte, hello_nonce_bytes>{}));
  const hello_identity longest{std::string(max_hello_name_bytes, 'j'), ~std::uint64_t{0},
                               std::string(max_hello_name_bytes, 'n'), bytes(1, std::byte{1})};
  seed("hello-longest-names", encode_hello(longest, nonce));
  const auto proof = hello_proof(with_secret.secret, 'D', "wordcount", 7, "10.0.0.2:7000", "10.0.0.1:7000", nonce, nonce);
  seed("proof", encode_proof(proof));
  seed("welcome", encode_welcome());
  seed("refuse", encode_refuse(hello_refusal::stale_epoch, "stale epoch 5 (this job is at epoch 7)"));
  seed("refuse-longest", encode_refuse(hello_refusal::authentication, std::string(max_refuse_reason_bytes, 'r')));
  bytes cut = hello;
  cut.resize(hello.size() - 9);
  seed("hello-cut", cut, 1);  // the CRC repaired over what is left: a body of the wrong length
  seed("hello-cut-length-fixed", cut, 3);
  bytes frames(hello.begin(), hello.begin() + hello_header_bytes);
  std::memcpy(frames.data(), "SLCE", 4);  // a transport without the hello
  seed("frame-magic", frames);
  const std::string garbage = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  seed("http", std::as_bytes(std::span(garbage)));
  bytes big = encode_welcome();
  big[8] = std::byte{0x01};
  big[9] = std::byte{0x04};  // body length 1025
  seed("oversized-body", big);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_make_seeds <corpus dir>   (fuzz/corpus in the repository)\n");
    return 2;
  }
  try {
    const fs::path corpus = fs::absolute(argv[1]);
    corpus_writer frames(corpus / "frame");
    corpus_writer manifests(corpus / "manifest");
    corpus_writer state_files(corpus / "state_file");
    corpus_writer csv_rows(corpus / "csv_row");
    corpus_writer hellos(corpus / "hello");
    frame_seeds(frames);
    hello_seeds(hellos);
    csv_seeds(csv_rows);

    // The checkpoint is written under a scratch directory, with paths relative to it.
    const fs::path scratch = fs::temp_directory_path() / fmt::format("sluice-seeds-{}", ::getpid());
    fs::create_directories(scratch);
    const fs::path previous = fs::current_path();
    fs::current_path(scratch);
    checkpoint_seeds(manifests, state_files);
    fs::current_path(previous);
    fs::remove_all(scratch);

    std::printf("fuzz_make_seeds: %zu frame, %zu hello, %zu manifest, %zu state file and %zu csv row seeds in %s\n",
                frames.count(), hellos.count(), manifests.count(), state_files.count(), csv_rows.count(),
                corpus.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_make_seeds: %s\n", e.what());
    return 1;
  }
}
