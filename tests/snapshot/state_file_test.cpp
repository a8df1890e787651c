#include <sluice/buffers/crc32c.hpp>
#include <sluice/snapshot/state_file.hpp>

#include <catch2/catch.hpp>

using namespace sluice::snapshot;

TEST_CASE("a state file header and a record header round-trip through encode and decode") {
  const auto file = encode_file_header({.checkpoint = 42, .task = 7});
  auto decoded = decode_file_header(file, "chk-42/task-7.state");
  REQUIRE(decoded.ok());
  CHECK(decoded.value() == state_file_header{42, 7});

  const state_record_header rec{record_type::input_channel, 1, 3, 100, 0xABCD, 5};
  const auto bytes = encode_record_header(rec);
  auto back = decode_record_header(bytes, "x");
  REQUIRE(back.ok());
  CHECK(back.value() == rec);
}

TEST_CASE("a corrupted state record header is rejected with the fault named") {
  auto bytes = encode_record_header({record_type::operator_state, 0, 0, 10, 0, 0});
  bytes[4] ^= std::byte{1};
  auto r = decode_record_header(bytes, "chk-1/task-0.state");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message() == "chk-1/task-0.state: record header checksum mismatch");

  auto file = encode_file_header({1, 0});
  file[0] = std::byte{'X'};
  auto f = decode_file_header(file, "f");
  REQUIRE_FALSE(f.ok());
  CHECK(f.error().message() == "f: bad magic (not a sluice state file)");
}

TEST_CASE("reserved header bytes that are not 0 are rejected, even under a matching checksum") {
  // The header's checksum (its last 4 bytes) made right again.
  const auto reseal = [](std::span<std::byte> header) {
    const std::size_t crc_offset = header.size() - 4;
    const std::uint32_t crc = sluice::buffers::crc32c(header.first(crc_offset));
    for (std::size_t i = 0; i < 4; ++i) header[crc_offset + i] = static_cast<std::byte>(crc >> (8 * i));
  };
  for (const std::size_t reserved : {6, 7, 20, 27}) {
    INFO("file header byte " << reserved);
    auto file = encode_file_header({1, 0});
    file[reserved] = std::byte{1};
    reseal(file);
    auto f = decode_file_header(file, "f");
    REQUIRE_FALSE(f.ok());
    CHECK(f.error().message() == "f: reserved file header bytes (6..7, 20..27) are not 0");
  }
  auto record = encode_record_header({record_type::input_channel, 0, 0, 10, 0, 0});
  record[1] = std::byte{0x80};
  reseal(record);
  auto r = decode_record_header(record, "r");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message() == "r: reserved record header byte 1 is 128 (not 0)");
}
