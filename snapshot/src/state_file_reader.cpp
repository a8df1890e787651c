// The state file parser and the readers built on it (see state_file_reader.hpp).
//
// The parser is a small state machine: file header -> (record header -> payload)* -> after end.
// Headers are assembled in header_ across feed() calls; payloads stream through (CRC extended,
// bytes appended in keep mode), so no record is ever buffered whole.

#include <sluice/buffers/crc32c.hpp>
#include <sluice/io/file.hpp>
#include <sluice/snapshot/state_file_reader.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <cstring>
#include <utility>

namespace sluice::snapshot {

namespace {

constexpr std::size_t read_chunk_bytes = 256 * 1024;

std::uint32_t load_u32(const std::byte* p) noexcept {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= std::uint32_t{std::to_integer<std::uint8_t>(p[i])} << (8 * i);
  return v;
}

const char* type_name(record_type type) noexcept {
  switch (type) {
    case record_type::operator_state: return "operator state";
    case record_type::input_channel: return "input channel";
    case record_type::output_channel: return "output channel";
    case record_type::end: return "end";
    case record_type::operator_base: return "operator base";
  }
  return "unknown";
}

}  // namespace

state_file_parser::state_file_parser(std::string label, state_file_expectation expect, task_state* keep)
    : label_(std::move(label)), expect_(expect), keep_(keep) {}

void state_file_parser::fail(storage_errc code, std::string fault) {
  fail(io::error(make_error_code(code), fmt::format("{}: {}", label_, fault)));
}

void state_file_parser::fail(io::error e) {
  if (!error_) error_ = std::move(e);
  stage_ = stage::failed;
}

// Moves up to `need - header_got_` bytes into header_; returns how many were taken.
std::size_t state_file_parser::take_header(std::span<const std::byte>& bytes, std::size_t need) {
  assert(header_got_ < need && need <= header_.size());
  const std::size_t n = std::min(need - header_got_, bytes.size());
  std::memcpy(header_.data() + header_got_, bytes.data(), n);
  header_got_ += n;
  bytes = bytes.subspan(n);
  return n;
}

bool state_file_parser::feed(std::span<const std::byte> bytes) {
  if (stage_ == stage::failed) return false;
  summary_.size_bytes += bytes.size();
  summary_.crc32c = buffers::crc32c_extend(summary_.crc32c, bytes);
  // Each pass consumes at least one byte or changes stage, so the loop ends.
  while (!bytes.empty() && stage_ != stage::failed) {
    switch (stage_) {
      case stage::file_header:
        take_header(bytes, state_file_header_bytes);
        if (header_got_ == state_file_header_bytes) on_file_header();
        break;
      case stage::record_header:
        take_header(bytes, state_record_header_bytes);
        if (header_got_ == state_record_header_bytes) on_record_header();
        break;
      case stage::payload: {
        const std::size_t n = std::min<std::size_t>(record_.payload_bytes - payload_got_, bytes.size());
        const auto part = bytes.first(n);
        payload_crc_ = buffers::crc32c_extend(payload_crc_, part);
        if (record_.type == record_type::end) {
          std::memcpy(end_payload_.data() + payload_got_, part.data(), n);
        } else if (record_.type == record_type::operator_base) {
          std::memcpy(base_payload_.data() + payload_got_, part.data(), n);
        } else if (payload_target_ != nullptr) {
          payload_target_->insert(payload_target_->end(), part.begin(), part.end());
        }
        payload_got_ += static_cast<std::uint32_t>(n);
        bytes = bytes.subspan(n);
        if (payload_got_ == record_.payload_bytes) on_payload_done();
        break;
      }
      case stage::after_end:
        bytes_after_end_ += bytes.size();
        bytes = {};
        break;
      case stage::failed: break;
    }
  }
  return stage_ != stage::failed;
}

void state_file_parser::on_file_header() {
  const std::span<const std::byte> h(header_.data(), state_file_header_bytes);
  header_got_ = 0;
  if (std::memcmp(h.data(), "SLST", 4) == 0 && load_u32(h.data() + 28) != buffers::crc32c(h.first(28))) {
    return fail(storage_errc::bad_checksum, "bad checksum in the file header");
  }
  auto decoded = decode_file_header(h, label_);
  if (!decoded) return fail(io::error(make_error_code(storage_errc::bad_format), decoded.error().message()));
  summary_.checkpoint = decoded->checkpoint;
  summary_.task = decoded->task;
  if (expect_.checkpoint && *expect_.checkpoint != decoded->checkpoint) {
    return fail(storage_errc::bad_format, fmt::format("the file header names checkpoint {} (expected {})",
                                                      decoded->checkpoint, *expect_.checkpoint));
  }
  if (expect_.task && *expect_.task != decoded->task) {
    return fail(storage_errc::bad_format,
                fmt::format("the file header names task {} (expected {})", decoded->task, *expect_.task));
  }
  stage_ = stage::record_header;
}

void state_file_parser::on_record_header() {
  const std::span<const std::byte> h(header_.data(), state_record_header_bytes);
  header_got_ = 0;
  const std::uint64_t n = summary_.records;  // this record's position
  if (load_u32(h.data() + 20) != buffers::crc32c(h.first(20))) {
    return fail(storage_errc::bad_checksum, fmt::format("bad checksum in the header of record {}", n));
  }
  auto decoded = decode_record_header(h, fmt::format("{}: record {}", label_, n));
  if (!decoded) return fail(io::error(make_error_code(storage_errc::bad_format), decoded.error().message()));
  record_ = *decoded;
  if (record_.sequence != n) {
    return fail(storage_errc::bad_format,
                fmt::format("record {} has sequence number {} (records out of order or missing)", n, record_.sequence));
  }
  if ((record_.type == record_type::operator_state || record_.type == record_type::operator_base) &&
      record_.group != 0) {
    return fail(storage_errc::bad_format, fmt::format("record {}: {} record with group {} (expected 0)", n,
                                                      type_name(record_.type), record_.group));
  }
  payload_got_ = 0;
  payload_crc_ = 0;
  payload_target_ = nullptr;
  if (keep_ != nullptr) {
    const channel_key key{record_.group, record_.index};
    switch (record_.type) {
      case record_type::operator_state: payload_target_ = &keep_->operator_state[record_.index]; break;
      case record_type::input_channel: payload_target_ = &keep_->input_channels[key]; break;
      case record_type::output_channel: payload_target_ = &keep_->output_channels[key]; break;
      case record_type::end:
      case record_type::operator_base: break;
    }
  }
  stage_ = stage::payload;
  if (record_.payload_bytes == 0) on_payload_done();
}

void state_file_parser::on_payload_done() {
  const std::uint64_t n = summary_.records;
  if (payload_crc_ != record_.payload_crc) {
    return fail(storage_errc::bad_checksum, fmt::format("bad checksum in record {} ({} payload, {} bytes)", n,
                                                        type_name(record_.type), record_.payload_bytes));
  }
  if (record_.type == record_type::end) {
    auto end = decode_end_payload(end_payload_, fmt::format("{}: record {}", label_, n));
    if (!end) return fail(io::error(make_error_code(storage_errc::bad_format), end.error().message()));
    if (end->records != summary_.records || end->payload_bytes != payload_bytes_before_end_) {
      return fail(storage_errc::bad_format,
                  fmt::format("the end record counts {} records and {} payload bytes, the file holds {} and {}",
                              end->records, end->payload_bytes, summary_.records, payload_bytes_before_end_));
    }
    stage_ = stage::after_end;
    return;
  }
  if (record_.type == record_type::operator_base) {
    on_operator_base();
    if (stage_ == stage::failed) return;
  }
  if (summary_.records == 0xFFFF'FFFFu) {
    return fail(storage_errc::bad_format, "more records than a sequence number can count");
  }
  ++summary_.records;
  payload_bytes_before_end_ += record_.payload_bytes;
  if (record_.type == record_type::operator_state) {
    summary_.operator_state_bytes += record_.payload_bytes;
  } else if (record_.type != record_type::operator_base) {
    summary_.channel_state_bytes += record_.payload_bytes;
  }
  stage_ = stage::record_header;
}

// A base must be an earlier checkpoint (so a chain of bases ends) and one per operator (so it is
// one chain).
void state_file_parser::on_operator_base() {
  const std::uint64_t n = summary_.records;
  auto base = decode_operator_base_payload(base_payload_, fmt::format("{}: record {}", label_, n));
  if (!base) return fail(io::error(make_error_code(storage_errc::bad_format), base.error().message()));
  const std::uint32_t op = record_.index;
  if (*base == no_checkpoint || *base >= summary_.checkpoint) {
    return fail(storage_errc::bad_format,
                fmt::format("record {}: operator {} is based on checkpoint {} (a base is above 0 and below this "
                            "file's checkpoint {})",
                            n, op, *base, summary_.checkpoint));
  }
  const auto [it, inserted] = bases_.emplace(op, *base);
  if (!inserted) {
    return fail(storage_errc::bad_format,
                fmt::format("record {}: operator {} has a second base record (checkpoint {}, after checkpoint {})", n,
                            op, *base, it->second));
  }
  if (keep_ != nullptr) keep_->operator_bases.emplace(op, *base);
}

io::result<state_file_summary> state_file_parser::finish() {
  const std::uint64_t n = summary_.records;
  switch (stage_) {
    case stage::failed: return *error_;
    case stage::file_header:
      fail(storage_errc::truncated, fmt::format("truncated: the file header needs {} bytes, {} remain",
                                                state_file_header_bytes, header_got_));
      return *error_;
    case stage::record_header:
      if (header_got_ == 0) {
        fail(storage_errc::truncated,
             n == 0 ? std::string("missing end record (the file ends after its header)")
                    : fmt::format("missing end record (the file ends after record {})", n - 1));
      } else {
        fail(storage_errc::truncated, fmt::format("truncated: record {} header needs {} bytes, {} remain", n,
                                                  state_record_header_bytes, header_got_));
      }
      return *error_;
    case stage::payload:
      fail(storage_errc::truncated, fmt::format("truncated: record {} payload needs {} bytes, {} remain", n,
                                                record_.payload_bytes, payload_got_));
      return *error_;
    case stage::after_end:
      if (bytes_after_end_ != 0) {
        fail(storage_errc::bad_format, fmt::format("{} bytes after the end record", bytes_after_end_));
        return *error_;
      }
      summary_.bases.clear();
      for (const auto& entry : bases_) summary_.bases.push_back(entry.second);
      std::sort(summary_.bases.begin(), summary_.bases.end());
      summary_.bases.erase(std::unique(summary_.bases.begin(), summary_.bases.end()), summary_.bases.end());
      summary_.operator_bases = bases_;
      if (keep_ != nullptr) keep_->summary = summary_;
      return summary_;
  }
  return *error_;
}

io::result<state_file_summary> validate_state_bytes(std::span<const std::byte> bytes, std::string label,
                                                    state_file_expectation expect) {
  state_file_parser parser(std::move(label), expect);
  parser.feed(bytes);
  return parser.finish();
}

namespace {

// Streams the file at `path` through `parser` in chunks, reading until end of file.
runtime::task<io::result<state_file_summary>> stream_file(std::string path, state_file_parser* parser) {
  auto opened = co_await io::file::open(path, io::open_options::read_only());
  if (!opened) co_return std::move(opened).error();
  io::file f = std::move(opened).value();
  std::vector<std::byte> buffer(read_chunk_bytes);
  std::uint64_t offset = 0;
  std::optional<io::error> failed;
  for (;;) {
    auto got = co_await f.read_at(buffer, offset);
    if (!got) {
      failed = std::move(got).error();
      break;
    }
    if (*got == 0) break;  // end of file
    offset += *got;
    const bool good = parser->feed(std::span<const std::byte>(buffer).first(*got));
    if (!good) break;  // the verdict is in; the rest of the file cannot change it
  }
  auto closed = co_await f.close();  // a read-only close failing loses nothing
  (void)closed;
  if (failed) co_return std::move(*failed);
  co_return parser->finish();
}

}  // namespace

runtime::task<io::result<state_file_summary>> validate_state_file(std::string path, std::string label,
                                                                  state_file_expectation expect) {
  state_file_parser parser(std::move(label), expect);
  co_return co_await stream_file(std::move(path), &parser);
}

runtime::task<io::result<task_state>> read_state_file(std::string path, std::string label,
                                                      state_file_expectation expect) {
  task_state state;
  state_file_parser parser(std::move(label), expect, &state);
  auto summary = co_await stream_file(std::move(path), &parser);
  if (!summary) co_return std::move(summary).error();
  co_return state;
}

}  // namespace sluice::snapshot
