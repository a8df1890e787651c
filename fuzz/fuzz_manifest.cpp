// fuzz_manifest: the checkpoint manifest's decoder (snapshot/manifest.hpp).
//
// Input: a manifest's text, as in chk-<id>/_manifest. Each input is decoded twice: as it is, and
// with its end line replaced by the right checksum of what precedes it (so mutations get past the
// checksum to the line-by-line checks behind it).
//
// Properties:
// - a manifest that decodes encodes back to exactly its text (the format has one spelling per
//   manifest), and decoding that again gives the same manifest;
// - a rejected one fails with storage_errc::bad_manifest and a message that starts with its label;
// - the other way round: a manifest built from the input bytes (any ids, sizes, names, keys and
//   required checkpoints the format allows) encodes to text that decodes to the same manifest.

#include "fuzz_support.hpp"

#include <sluice/buffers/crc32c.hpp>
#include <sluice/snapshot/manifest.hpp>
#include <sluice/snapshot/storage_error.hpp>

#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <string>

using namespace sluice::snapshot;

namespace {

constexpr std::string_view label = "chk-7/_manifest";

std::string with_right_checksum(std::string_view text) {
  // Drop the last line if it is an end line, then seal what is left.
  std::string body(text);
  const std::size_t cut = body.size() < 2 ? std::string::npos : body.rfind('\n', body.size() - 2);
  const std::size_t last = cut == std::string::npos ? 0 : cut + 1;
  if (body.compare(last, 4, "end ") == 0) body.resize(last);
  if (!body.empty() && body.back() != '\n') body += '\n';
  const auto crc = sluice::buffers::crc32c(std::as_bytes(std::span<const char>(body.data(), body.size())));
  return body + fmt::format("end {:08x}\n", crc);
}

void check_decode(std::string_view text) {
  const auto decoded = decode_manifest(text, label);
  if (!decoded) {
    const auto& e = decoded.error();
    FUZZ_REQUIRE(e.code() == make_error_code(storage_errc::bad_manifest), "error code {} for '{}'", e.code().message(),
                 e.message());
    FUZZ_REQUIRE(e.message().starts_with(fmt::format("{}: ", label)), "message without its label: '{}'", e.message());
    return;
  }
  const std::string encoded = encode_manifest(*decoded);
  FUZZ_REQUIRE(encoded == text, "decoded, then encoded, the manifest of {} bytes changed (now {} bytes):\n{}",
               text.size(), encoded.size(), encoded);
  const auto again = decode_manifest(encoded, label);
  FUZZ_REQUIRE(again && *again == *decoded, "the re-encoded manifest decodes differently");
}

std::string name_from(FuzzedDataProvider& in, bool file_name) {
  static constexpr std::string_view chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-";
  const std::size_t size = in.ConsumeIntegralInRange<std::size_t>(1, max_manifest_name_bytes);
  std::string name;
  for (std::size_t i = 0; i < size; ++i) {
    // A file name may not start with '.' or '_' (the first 62 characters are letters and digits).
    const std::size_t limit = file_name && i == 0 ? 61 : chars.size() - 1;
    name += chars[in.ConsumeIntegralInRange<std::size_t>(0, limit)];
    if (in.remaining_bytes() == 0) break;
  }
  return name;
}

// A manifest built from the input, within what the format allows.
checkpoint_manifest manifest_from(FuzzedDataProvider& in) {
  checkpoint_manifest m;
  m.checkpoint = in.ConsumeIntegralInRange<checkpoint_id>(1, UINT64_MAX);
  constexpr checkpoint_mode modes[] = {checkpoint_mode::aligned, checkpoint_mode::unaligned,
                                       checkpoint_mode::aligned_timeout, checkpoint_mode::at_least_once};
  m.mode = modes[in.ConsumeIntegralInRange<std::size_t>(0, 3)];
  m.created_unix_ms = in.ConsumeIntegral<std::uint64_t>();
  const std::size_t files = in.ConsumeIntegralInRange<std::size_t>(0, 8);
  for (std::size_t i = 0; i < files && in.remaining_bytes() > 0; ++i) {
    manifest_file f{name_from(in, true), in.ConsumeIntegral<std::uint64_t>(), in.ConsumeIntegral<std::uint32_t>(),
                    in.ConsumeIntegral<std::uint64_t>(), in.ConsumeIntegral<std::uint64_t>()};
    bool seen = false;
    for (const auto& g : m.files) seen = seen || g.name == f.name;
    if (!seen) m.files.push_back(std::move(f));
  }
  const std::size_t entries = in.ConsumeIntegralInRange<std::size_t>(0, 8);
  for (std::size_t i = 0; i < entries && in.remaining_bytes() > 0; ++i) {
    std::string key = name_from(in, false);
    const std::string value = in.ConsumeRandomLengthString(512);
    const auto bytes = std::as_bytes(std::span<const char>(value.data(), value.size()));
    m.metadata.emplace(std::move(key), std::vector<std::byte>(bytes.begin(), bytes.end()));
  }
  // Required checkpoints: below this one, ascending, each once (what the encoder takes).
  const std::size_t required = m.checkpoint > 1 ? in.ConsumeIntegralInRange<std::size_t>(0, 8) : 0;
  for (std::size_t i = 0; i < required && in.remaining_bytes() > 0; ++i) {
    m.requires_checkpoints.push_back(in.ConsumeIntegralInRange<checkpoint_id>(1, m.checkpoint - 1));
  }
  std::sort(m.requires_checkpoints.begin(), m.requires_checkpoints.end());
  m.requires_checkpoints.erase(std::unique(m.requires_checkpoints.begin(), m.requires_checkpoints.end()),
                               m.requires_checkpoints.end());
  return m;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text = sluice::fuzz::as_text(sluice::fuzz::as_bytes(data, size));
  check_decode(text);
  const std::string sealed = with_right_checksum(text);
  if (sealed != text) check_decode(sealed);

  FuzzedDataProvider in(data, size);
  const checkpoint_manifest built = manifest_from(in);
  const std::string encoded = encode_manifest(built);
  const auto decoded = decode_manifest(encoded, label);
  FUZZ_REQUIRE(decoded, "an encoded manifest does not decode: {}\n{}", decoded.error().message(), encoded);
  FUZZ_REQUIRE(*decoded == built, "an encoded manifest decodes to another manifest:\n{}", encoded);
  return 0;
}
