// The manifest's text format (see manifest.hpp): an encoder, and a strict line-by-line decoder.

#include <sluice/buffers/crc32c.hpp>
#include <sluice/snapshot/manifest.hpp>
#include <sluice/snapshot/storage_error.hpp>

#include <fmt/format.h>

#include <cassert>
#include <charconv>
#include <optional>
#include <span>

namespace sluice::snapshot {

namespace {

constexpr std::string_view magic = "sluice-manifest";
constexpr std::size_t max_files = 1u << 20;
constexpr std::size_t max_metadata_entries = 1u << 16;

bool is_name_char(char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
         c == '-';
}

bool all_name_chars(std::string_view s) noexcept {
  if (s.empty() || s.size() > max_manifest_name_bytes) return false;
  for (char c : s) {
    if (!is_name_char(c)) return false;
  }
  return true;
}

std::uint32_t crc_of(std::string_view text) noexcept {
  return buffers::crc32c(std::as_bytes(std::span<const char>(text.data(), text.size())));
}

std::optional<std::uint64_t> parse_decimal(std::string_view s) noexcept {
  std::uint64_t v = 0;
  if (s.empty() || (s.size() > 1 && s[0] == '0')) return std::nullopt;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<std::uint32_t> parse_crc(std::string_view s) noexcept {
  if (s.size() != 8) return std::nullopt;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return std::nullopt;
  }
  std::uint32_t v = 0;
  std::from_chars(s.data(), s.data() + s.size(), v, 16);
  return v;
}

int hex_value(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

std::optional<std::vector<std::byte>> parse_hex_bytes(std::string_view s) {
  if (s.size() % 2 != 0) return std::nullopt;
  std::vector<std::byte> out(s.size() / 2);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const int hi = hex_value(s[2 * i]);
    const int lo = hex_value(s[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out[i] = static_cast<std::byte>(hi * 16 + lo);
  }
  return out;
}

std::optional<checkpoint_mode> parse_mode(std::string_view s) noexcept {
  for (auto m : {checkpoint_mode::aligned, checkpoint_mode::unaligned, checkpoint_mode::aligned_timeout,
                 checkpoint_mode::at_least_once}) {
    if (to_string(m) == s) return m;
  }
  return std::nullopt;
}

// Splits a line on single spaces.
std::vector<std::string_view> fields_of(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  for (;;) {
    const std::size_t space = line.find(' ', start);
    out.push_back(line.substr(start, space == std::string_view::npos ? std::string_view::npos : space - start));
    if (space == std::string_view::npos) return out;
    start = space + 1;
  }
}

// Walks the lines before the end line, one at a time.
class line_reader {
 public:
  line_reader(std::string_view body, std::string_view label) : rest_(body), label_(label) {}

  io::error fail(std::string_view fault) const {
    return io::error(make_error_code(storage_errc::bad_manifest), fmt::format("{}: line {}: {}", label_, line_, fault));
  }
  // The next line's fields if it starts with `keyword` and has `count` fields (any number: npos).
  std::optional<std::vector<std::string_view>> next(std::string_view keyword, std::size_t count) {
    ++line_;
    if (rest_.empty()) return std::nullopt;
    const std::size_t nl = rest_.find('\n');
    assert(nl != std::string_view::npos);  // the body ends with '\n'
    const std::string_view line = rest_.substr(0, nl);
    rest_.remove_prefix(nl + 1);
    auto fields = fields_of(line);
    if ((count != std::string_view::npos && fields.size() != count) || fields[0] != keyword) return std::nullopt;
    return fields;
  }
  bool at_end() const noexcept { return rest_.empty(); }
  // Whether the next line's first field is `keyword` (nothing is consumed).
  bool next_is(std::string_view keyword) const {
    const std::string_view line = rest_.substr(0, rest_.find('\n'));
    return line.substr(0, line.find(' ')) == keyword;
  }
  io::error fail_next(std::string_view fault) const {
    return io::error(make_error_code(storage_errc::bad_manifest), fmt::format("{}: line {}: {}", label_, line_ + 1, fault));
  }

 private:
  std::string_view rest_;
  std::string_view label_;
  std::size_t line_ = 0;
};

}  // namespace

bool is_valid_file_name(std::string_view name) noexcept {
  return all_name_chars(name) && name[0] != '.' && name[0] != '_';
}

bool is_valid_metadata_key(std::string_view key) noexcept { return all_name_chars(key); }

std::string encode_manifest(const checkpoint_manifest& m) {
  std::string out = fmt::format("{} {}\ncheckpoint {}\nmode {}\ncreated_unix_ms {}\ntasks {}\n", magic,
                                manifest_version, m.checkpoint, to_string(m.mode), m.created_unix_ms, m.files.size());
  for (const auto& f : m.files) {
    assert(is_valid_file_name(f.name));
    out += fmt::format("file {} {} {:08x} {} {}\n", f.name, f.size_bytes, f.crc32c, f.operator_state_bytes,
                       f.channel_state_bytes);
  }
  if (!m.requires_checkpoints.empty()) {
    out += fmt::format("requires {}", m.requires_checkpoints.size());
    [[maybe_unused]] checkpoint_id previous = no_checkpoint;
    for (const checkpoint_id id : m.requires_checkpoints) {
      assert(id > previous && id < m.checkpoint);
      previous = id;
      out += fmt::format(" {}", id);
    }
    out += '\n';
  }
  out += fmt::format("metadata {}\n", m.metadata.size());
  for (const auto& [key, value] : m.metadata) {
    assert(is_valid_metadata_key(key));
    out += fmt::format("meta {} ", key);
    for (std::byte b : value) out += fmt::format("{:02x}", std::to_integer<unsigned>(b));
    out += '\n';
  }
  out += fmt::format("end {:08x}\n", crc_of(out));
  return out;
}

io::result<checkpoint_manifest> decode_manifest(std::string_view text, std::string_view label) {
  auto bad = [label](std::string_view fault) {
    return io::error(make_error_code(storage_errc::bad_manifest), fmt::format("{}: {}", label, fault));
  };
  if (text.size() > max_manifest_bytes) return bad(fmt::format("{} bytes, above the limit {}", text.size(), max_manifest_bytes));
  // The end line first: it vouches for everything before it.
  if (text.empty() || text.back() != '\n') return bad("missing end line (the manifest is cut short)");
  const std::size_t previous_newline = text.size() < 2 ? std::string_view::npos : text.rfind('\n', text.size() - 2);
  const std::size_t last_start = previous_newline == std::string_view::npos ? 0 : previous_newline + 1;
  const auto end_fields = fields_of(text.substr(last_start, text.size() - 1 - last_start));
  if (end_fields.size() != 2 || end_fields[0] != "end") return bad("missing end line (the manifest is cut short)");
  const auto stated = parse_crc(end_fields[1]);
  if (!stated) return bad(fmt::format("malformed end line checksum '{}'", end_fields[1]));
  const std::string_view body = text.substr(0, last_start);
  if (const auto actual = crc_of(body); actual != *stated) {
    return bad(fmt::format("bad checksum (the end line says {:08x}, the content has {:08x})", *stated, actual));
  }

  line_reader lines(body, label);
  checkpoint_manifest m;
  auto header = lines.next(magic, 2);
  if (!header) return lines.fail("not a sluice manifest (expected 'sluice-manifest <version>')");
  if ((*header)[1] != std::to_string(manifest_version)) {
    return lines.fail(fmt::format("unsupported manifest version {} (this build reads {})", (*header)[1], manifest_version));
  }
  auto id = lines.next("checkpoint", 2);
  const auto id_value = id ? parse_decimal((*id)[1]) : std::nullopt;
  if (!id_value || *id_value == no_checkpoint) return lines.fail("expected 'checkpoint <id>' with an id above 0");
  m.checkpoint = *id_value;
  auto mode = lines.next("mode", 2);
  const auto mode_value = mode ? parse_mode((*mode)[1]) : std::nullopt;
  if (!mode_value) return lines.fail("expected 'mode <aligned|unaligned|aligned-timeout|at-least-once>'");
  m.mode = *mode_value;
  auto created = lines.next("created_unix_ms", 2);
  const auto created_value = created ? parse_decimal((*created)[1]) : std::nullopt;
  if (!created_value) return lines.fail("expected 'created_unix_ms <n>'");
  m.created_unix_ms = *created_value;

  auto tasks = lines.next("tasks", 2);
  const auto task_count = tasks ? parse_decimal((*tasks)[1]) : std::nullopt;
  if (!task_count || *task_count > max_files) return lines.fail(fmt::format("expected 'tasks <n>' with n <= {}", max_files));
  for (std::uint64_t i = 0; i < *task_count; ++i) {
    auto f = lines.next("file", 6);
    if (!f) return lines.fail("expected 'file <name> <size_bytes> <crc32c> <operator_state_bytes> <channel_state_bytes>'");
    manifest_file entry;
    entry.name = std::string((*f)[1]);
    const auto size = parse_decimal((*f)[2]);
    const auto crc = parse_crc((*f)[3]);
    const auto op_bytes = parse_decimal((*f)[4]);
    const auto ch_bytes = parse_decimal((*f)[5]);
    if (!is_valid_file_name(entry.name)) return lines.fail(fmt::format("invalid file name '{}'", entry.name));
    if (!size || !crc || !op_bytes || !ch_bytes) return lines.fail(fmt::format("malformed numbers for file '{}'", entry.name));
    for (const auto& seen : m.files) {
      if (seen.name == entry.name) return lines.fail(fmt::format("file '{}' listed twice", entry.name));
    }
    entry.size_bytes = *size;
    entry.crc32c = *crc;
    entry.operator_state_bytes = *op_bytes;
    entry.channel_state_bytes = *ch_bytes;
    m.files.push_back(std::move(entry));
  }

  if (lines.next_is("requires")) {
    auto req = lines.next("requires", std::string_view::npos);
    const auto count = req->size() >= 2 ? parse_decimal((*req)[1]) : std::nullopt;
    if (!count || *count == 0 || *count != req->size() - 2) {
      return lines.fail("expected 'requires <n> <id>...' with n above 0 and n ids");
    }
    for (std::size_t i = 2; i < req->size(); ++i) {
      const auto required = parse_decimal((*req)[i]);
      if (!required || *required == no_checkpoint || *required >= m.checkpoint) {
        return lines.fail(
            fmt::format("required checkpoint '{}' is not an id from 1 to {}", (*req)[i], m.checkpoint - 1));
      }
      if (!m.requires_checkpoints.empty() && *required <= m.requires_checkpoints.back()) {
        return lines.fail(fmt::format("required checkpoint {} after {} (ids come in ascending order, each once)",
                                      *required, m.requires_checkpoints.back()));
      }
      m.requires_checkpoints.push_back(*required);
    }
  }
  auto meta = lines.next("metadata", 2);
  const auto meta_count = meta ? parse_decimal((*meta)[1]) : std::nullopt;
  if (!meta_count || *meta_count > max_metadata_entries) {
    return lines.fail(fmt::format("expected 'metadata <n>' with n <= {}", max_metadata_entries));
  }
  for (std::uint64_t i = 0; i < *meta_count; ++i) {
    auto kv = lines.next("meta", 3);
    if (!kv) return lines.fail("expected 'meta <key> <hex bytes>'");
    const std::string key((*kv)[1]);
    auto value = parse_hex_bytes((*kv)[2]);
    if (!is_valid_metadata_key(key)) return lines.fail(fmt::format("invalid metadata key '{}'", key));
    if (!value) return lines.fail(fmt::format("metadata '{}' is not lowercase hex", key));
    // In ascending order, as the encoder writes them: one text per manifest.
    if (!m.metadata.empty() && key <= m.metadata.rbegin()->first) {
      if (key == m.metadata.rbegin()->first) return lines.fail(fmt::format("metadata '{}' given twice", key));
      return lines.fail(fmt::format("metadata '{}' after '{}' (keys come in ascending order)", key,
                                    m.metadata.rbegin()->first));
    }
    m.metadata.emplace_hint(m.metadata.end(), key, std::move(*value));
  }
  if (!lines.at_end()) return lines.fail_next("unexpected line before the end line");
  return m;
}

}  // namespace sluice::snapshot
