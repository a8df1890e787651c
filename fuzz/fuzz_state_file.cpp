// fuzz_state_file: the state-file reader (snapshot/state_file_reader.hpp) and the header codecs
// under it (snapshot/state_file.hpp).
//
// Input: a task's state file, as in chk-<id>/task-<t>.state. Each input is checked twice: as it
// is, and with every CRC32C put right (file header, and each record's payload and header, walking
// the records by their stated lengths), so mutations get past the checksums to the checks behind.
//
// Properties:
// - the parser's verdict does not depend on how the file is cut into feed() calls, nor on whether
//   it keeps the payloads (what read_state_file does) or only totals (validate_state_file);
// - a file it accepts is, record by record, what the header decoders read: encoding the file header,
//   every record header, the payloads and the end record again gives the input back byte for byte;
//   the kept state is those payloads concatenated per key; the summary's size, CRC32C, record count
//   and byte totals are the input's; each operator_base record names one operator's base, once,
//   above 0 and below the file's checkpoint, and the bases are the summary's (ascending, each once);
// - an accepted file cut anywhere is rejected as truncated, and one with a byte after it as bad
//   format; expecting the checkpoint and task its header names changes nothing, expecting others
//   rejects it;
// - a rejected file fails with one of truncated, bad_checksum or bad_format and its label first;
// - the software and hardware CRC32C agree on the input.
// Memory: the parser keeps what it was fed, never what a length field claims (-malloc_limit_mb).

#include "fuzz_support.hpp"

#include <sluice/buffers/crc32c.hpp>
#include <sluice/snapshot/state_file.hpp>
#include <sluice/snapshot/state_file_reader.hpp>
#include <sluice/snapshot/storage_error.hpp>

#include <algorithm>
#include <cstring>
#include <map>
#include <vector>

using namespace sluice::snapshot;
using sluice::buffers::crc32c;
using sluice::fuzz::chunk_splitter;

namespace {

const std::string label = "chk-7/task-2.state";

std::uint32_t load_le32(const std::byte* p) noexcept {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= std::uint32_t{std::to_integer<std::uint8_t>(p[i])} << (8 * i);
  return v;
}
void store_le32(std::byte* p, std::uint32_t v) noexcept {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}

std::vector<std::byte> with_right_checksums(std::span<const std::byte> input) {
  std::vector<std::byte> out(input.begin(), input.end());
  if (out.size() < state_file_header_bytes) return out;
  store_le32(out.data() + 28, crc32c({out.data(), 28}));
  for (std::uint64_t p = state_file_header_bytes; p + state_record_header_bytes <= out.size();) {
    std::byte* h = out.data() + p;
    const std::uint32_t length = load_le32(h + 8);
    const std::uint64_t start = p + state_record_header_bytes;
    const std::uint64_t have = std::min<std::uint64_t>(length, out.size() - start);
    store_le32(h + 12, crc32c({out.data() + start, static_cast<std::size_t>(have)}));
    store_le32(h + 20, crc32c({h, 20}));
    p = start + length;
  }
  return out;
}

bool same(const sluice::io::result<state_file_summary>& a, const sluice::io::result<state_file_summary>& b) {
  if (a.ok() != b.ok()) return false;
  if (!a) return a.error().code() == b.error().code() && a.error().message() == b.error().message();
  const auto& x = *a;
  const auto& y = *b;
  return x.checkpoint == y.checkpoint && x.task == y.task && x.size_bytes == y.size_bytes && x.crc32c == y.crc32c &&
         x.records == y.records && x.operator_state_bytes == y.operator_state_bytes &&
         x.channel_state_bytes == y.channel_state_bytes && x.bases == y.bases;
}

std::string describe(const sluice::io::result<state_file_summary>& r) {
  return r ? fmt::format("valid, {} records", r->records) : r.error().message();
}

// Fed in chunks, keeping the payloads.
sluice::io::result<state_file_summary> parse_in_chunks(std::span<const std::byte> file, task_state& kept) {
  state_file_parser parser(label, {}, &kept);
  chunk_splitter chunks(file);
  bool good = true;
  for (std::span<const std::byte> rest = file; !rest.empty();) {
    const std::size_t n = chunks.next(rest.size());
    const bool fed = parser.feed(rest.first(n));
    FUZZ_REQUIRE(good || !fed, "feed() accepted bytes after it had failed");
    good = fed;
    rest = rest.subspan(n);
  }
  return parser.finish();
}

// A file the parser accepted, read again with the header decoders alone and encoded again.
void check_accepted(std::span<const std::byte> file, const state_file_summary& summary, const task_state& kept) {
  FUZZ_REQUIRE(summary.size_bytes == file.size(), "summary size {} of a {} byte file", summary.size_bytes, file.size());
  FUZZ_REQUIRE(summary.crc32c == crc32c(file), "summary CRC {:08x}, file CRC {:08x}", summary.crc32c, crc32c(file));

  const auto header = decode_file_header(file, label);
  FUZZ_REQUIRE(header, "the file header does not decode: {}", header.error().message());
  FUZZ_REQUIRE(header->checkpoint == summary.checkpoint && header->task == summary.task, "summary names {}/{}",
               summary.checkpoint, summary.task);
  std::vector<std::byte> again;
  const auto append = [&again](std::span<const std::byte> bytes) { again.insert(again.end(), bytes.begin(), bytes.end()); };
  append(encode_file_header(*header));

  std::map<std::uint32_t, std::vector<std::byte>> operator_state;
  std::map<channel_key, std::vector<std::byte>> inputs, outputs;
  std::map<std::uint32_t, checkpoint_id> bases;
  std::uint64_t records = 0, operator_bytes = 0, channel_bytes = 0, base_bytes = 0;
  std::size_t p = state_file_header_bytes;
  for (;;) {
    FUZZ_REQUIRE(p + state_record_header_bytes <= file.size(), "record {} header beyond the file", records);
    const auto h = decode_record_header(file.subspan(p, state_record_header_bytes), label);
    FUZZ_REQUIRE(h, "record {} header does not decode: {}", records, h.error().message());
    p += state_record_header_bytes;
    FUZZ_REQUIRE(p + h->payload_bytes <= file.size(), "record {} payload beyond the file", records);
    const auto payload = file.subspan(p, h->payload_bytes);
    p += h->payload_bytes;
    FUZZ_REQUIRE(crc32c(payload) == h->payload_crc && h->sequence == records, "record {}: CRC or sequence", records);
    append(encode_record_header(*h));
    if (h->type == record_type::end) {
      const auto end = decode_end_payload(payload, label);
      FUZZ_REQUIRE(end && end->records == records && end->payload_bytes == operator_bytes + channel_bytes + base_bytes,
                   "the end record does not count the records");
      append(encode_end_payload(*end));
      break;
    }
    append(payload);
    ++records;
    if (h->type == record_type::operator_base) {
      const auto base = decode_operator_base_payload(payload, label);
      FUZZ_REQUIRE(base && *base != no_checkpoint && *base < summary.checkpoint && h->group == 0,
                   "record {}: an operator base record the parser should have rejected", records - 1);
      FUZZ_REQUIRE(bases.emplace(h->index, *base).second, "operator {} has two base records", h->index);
      base_bytes += payload.size();
      continue;
    }
    const channel_key key{h->group, h->index};
    auto& target = h->type == record_type::operator_state  ? operator_state[h->index]
                   : h->type == record_type::input_channel ? inputs[key]
                                                           : outputs[key];
    target.insert(target.end(), payload.begin(), payload.end());
    (h->type == record_type::operator_state ? operator_bytes : channel_bytes) += payload.size();
  }
  FUZZ_REQUIRE(p == file.size(), "{} bytes after the end record of an accepted file", file.size() - p);
  FUZZ_REQUIRE(again.size() == file.size() && std::equal(again.begin(), again.end(), file.begin()),
               "encoding the decoded file again does not give it back");
  FUZZ_REQUIRE(summary.records == records && summary.operator_state_bytes == operator_bytes &&
                   summary.channel_state_bytes == channel_bytes,
               "summary: {} records, {}+{} bytes; the file: {}, {}+{}", summary.records, summary.operator_state_bytes,
               summary.channel_state_bytes, records, operator_bytes, channel_bytes);
  FUZZ_REQUIRE(kept.operator_state == operator_state && kept.input_channels == inputs && kept.output_channels == outputs,
               "the kept state is not the records' payloads concatenated per key");
  std::vector<checkpoint_id> base_ids;
  for (const auto& entry : bases) base_ids.push_back(entry.second);
  std::sort(base_ids.begin(), base_ids.end());
  base_ids.erase(std::unique(base_ids.begin(), base_ids.end()), base_ids.end());
  FUZZ_REQUIRE(kept.operator_bases == bases && summary.bases == base_ids && kept.operator_chain.empty(),
               "the bases kept ({}) or summed up ({}) are not the operator base records' ({})",
               kept.operator_bases.size(), summary.bases.size(), bases.size());

  // Cut anywhere, or with a byte more, it is rejected.
  const std::size_t cut = summary.crc32c % file.size();
  const auto cut_short = validate_state_bytes(file.first(cut), label);
  FUZZ_REQUIRE(!cut_short && cut_short.error().code() == make_error_code(storage_errc::truncated),
               "the file cut at {} of {} bytes: {}", cut, file.size(), describe(cut_short));
  std::vector<std::byte> longer(file.begin(), file.end());
  longer.push_back(std::byte{0});
  const auto too_long = validate_state_bytes(longer, label);
  FUZZ_REQUIRE(!too_long && too_long.error().code() == make_error_code(storage_errc::bad_format),
               "the file with a byte more: {}", describe(too_long));

  // The expectation only ever rejects.
  const auto expected = validate_state_bytes(file, label, {summary.checkpoint, summary.task});
  FUZZ_REQUIRE(expected && expected->records == summary.records, "expecting its own ids: {}", describe(expected));
  const auto other_checkpoint = validate_state_bytes(file, label, {summary.checkpoint + 1, std::nullopt});
  const auto other_task = validate_state_bytes(file, label, {std::nullopt, summary.task + 1});
  FUZZ_REQUIRE(!other_checkpoint && other_checkpoint.error().code() == make_error_code(storage_errc::bad_format),
               "expecting another checkpoint: {}", describe(other_checkpoint));
  FUZZ_REQUIRE(!other_task && other_task.error().code() == make_error_code(storage_errc::bad_format),
               "expecting another task: {}", describe(other_task));
}

void check_file(std::span<const std::byte> file) {
  const auto whole = validate_state_bytes(file, label);
  task_state kept;
  const auto chunked = parse_in_chunks(file, kept);
  FUZZ_REQUIRE(same(whole, chunked), "whole: '{}'; in chunks, keeping payloads: '{}'", describe(whole),
               describe(chunked));
  if (whole) {
    FUZZ_REQUIRE(kept.summary.records == whole->records, "read_state_file's summary differs");
    check_accepted(file, *whole, kept);
    return;
  }
  const auto code = whole.error().code();
  FUZZ_REQUIRE(code == make_error_code(storage_errc::truncated) || code == make_error_code(storage_errc::bad_checksum) ||
                   code == make_error_code(storage_errc::bad_format),
               "error code {}: {}", code.message(), whole.error().message());
  FUZZ_REQUIRE(whole.error().message().starts_with(label + ": "), "message without its label: '{}'",
               whole.error().message());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto input = sluice::fuzz::as_bytes(data, size);
  if (sluice::buffers::crc32c_uses_hardware()) {
    FUZZ_REQUIRE(sluice::buffers::detail::crc32c_extend_software(0, input) == sluice::buffers::detail::crc32c_extend_hardware(0, input),
                 "software and hardware CRC32C differ on {} bytes", size);
  }
  check_file(input);
  const auto repaired = with_right_checksums(input);
  if (!std::equal(repaired.begin(), repaired.end(), input.begin())) check_file(repaired);
  return 0;
}
