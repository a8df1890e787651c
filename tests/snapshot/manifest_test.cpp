#include <sluice/buffers/crc32c.hpp>
#include <sluice/snapshot/manifest.hpp>
#include <sluice/snapshot/storage_error.hpp>

#include <support/state_files.hpp>

#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <span>
#include <string>
#include <vector>

using namespace sluice::snapshot;

namespace {

checkpoint_manifest sample_manifest() {
  checkpoint_manifest m;
  m.checkpoint = 7;
  m.mode = checkpoint_mode::unaligned;
  m.created_unix_ms = 1712000000000;
  m.files.push_back({"task-0.state", 4096, 0x1a2b3c4d, 120, 3900});
  m.files.push_back({"task-1.state", 2048, 0x99aa00ff, 64, 1900});
  m.metadata["job.name"] = sluice::test::bytes_of("window");
  m.metadata["empty"] = {};
  return m;
}

// `body` (every line but the end line) sealed with a correct end line.
std::string sealed(const std::string& body) {
  const auto crc = sluice::buffers::crc32c(std::as_bytes(std::span<const char>(body.data(), body.size())));
  return body + fmt::format("end {:08x}\n", crc);
}

std::string error_of(std::string_view text) {
  auto r = decode_manifest(text, "chk-7/_manifest");
  return r.ok() ? "" : r.error().message();
}

}  // namespace

TEST_CASE("a manifest round-trips through its text form, which reads as documented") {
  const auto m = sample_manifest();
  const std::string text = encode_manifest(m);
  CHECK(text.rfind("sluice-manifest 1\ncheckpoint 7\nmode unaligned\ncreated_unix_ms 1712000000000\ntasks 2\n"
                   "file task-0.state 4096 1a2b3c4d 120 3900\nfile task-1.state 2048 99aa00ff 64 1900\n"
                   "metadata 2\nmeta empty \nmeta job.name 77696e646f77\nend ",
                   0) == 0);
  auto back = decode_manifest(text, "m");
  REQUIRE(back.ok());
  CHECK(back.value() == m);
}

TEST_CASE("a manifest with any byte changed fails its checksum") {
  std::string text = encode_manifest(sample_manifest());
  text[text.find("4096")] = '5';
  auto r = decode_manifest(text, "chk-7/_manifest");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == storage_errc::bad_manifest);
  CHECK(r.error().message().rfind("chk-7/_manifest: bad checksum (the end line says ", 0) == 0);
}

TEST_CASE("a manifest cut short is missing its end line") {
  const std::string text = encode_manifest(sample_manifest());
  for (std::size_t cut = 0; cut < text.size(); ++cut) {
    REQUIRE_FALSE(decode_manifest(text.substr(0, cut), "m").ok());
  }
  CHECK(error_of(text.substr(0, text.size() - 1)) == "chk-7/_manifest: missing end line (the manifest is cut short)");
  CHECK(error_of(text + "x\n") == "chk-7/_manifest: missing end line (the manifest is cut short)");
  CHECK(error_of("") == "chk-7/_manifest: missing end line (the manifest is cut short)");
}

TEST_CASE("a manifest with a correct checksum but a malformed line names the line") {
  CHECK(error_of(sealed("sluice-manifest 2\n")) ==
        "chk-7/_manifest: line 1: unsupported manifest version 2 (this build reads 1)");
  CHECK(error_of(sealed("sluice-manifest 1\ncheckpoint 0\n")) ==
        "chk-7/_manifest: line 2: expected 'checkpoint <id>' with an id above 0");
  CHECK(error_of(sealed("sluice-manifest 1\ncheckpoint 7\nmode sideways\n")) ==
        "chk-7/_manifest: line 3: expected 'mode <aligned|unaligned|aligned-timeout|at-least-once>'");
  const std::string head = "sluice-manifest 1\ncheckpoint 7\nmode aligned\ncreated_unix_ms 5\n";
  CHECK(error_of(sealed(head + "tasks 1\nfile ../etc/passwd 1 00000000 0 0\nmetadata 0\n")) ==
        "chk-7/_manifest: line 6: invalid file name '../etc/passwd'");
  CHECK(error_of(sealed(head + "tasks 2\nfile a 1 00000000 0 0\n")) ==
        "chk-7/_manifest: line 7: expected 'file <name> <size_bytes> <crc32c> <operator_state_bytes> "
        "<channel_state_bytes>'");
  CHECK(error_of(sealed(head + "tasks 0\nmetadata 0\nextra\n")) ==
        "chk-7/_manifest: line 7: unexpected line before the end line");
  CHECK(decode_manifest(sealed(head + "tasks 0\nmetadata 0\n"), "m").ok());
}

TEST_CASE("a manifest's metadata must come in ascending key order, so each manifest has one text") {
  const std::string head = "sluice-manifest 1\ncheckpoint 7\nmode aligned\ncreated_unix_ms 5\ntasks 0\n";
  CHECK(error_of(sealed(head + "metadata 2\nmeta k \nmeta f 00\n")) ==
        "chk-7/_manifest: line 8: metadata 'f' after 'k' (keys come in ascending order)");
  CHECK(error_of(sealed(head + "metadata 2\nmeta k \nmeta k 00\n")) == "chk-7/_manifest: line 8: metadata 'k' given twice");
  const std::string in_order = sealed(head + "metadata 2\nmeta f 00\nmeta k \n");
  auto decoded = decode_manifest(in_order, "m");
  REQUIRE(decoded.ok());
  CHECK(encode_manifest(decoded.value()) == in_order);
}

TEST_CASE("a manifest that requires earlier checkpoints lists them on one line before its metadata, and round-trips") {
  auto m = sample_manifest();
  m.requires_checkpoints = {2, 3, 6};
  const std::string text = encode_manifest(m);
  CHECK(text.find("file task-1.state 2048 99aa00ff 64 1900\nrequires 3 2 3 6\nmetadata 2\n") != std::string::npos);
  auto back = decode_manifest(text, "m");
  REQUIRE(back.ok());
  CHECK(back->requires_checkpoints == std::vector<checkpoint_id>{2, 3, 6});
  CHECK(back.value() == m);
  CHECK(encode_manifest(back.value()) == text);
}

TEST_CASE("a manifest without requires is the text it was before the line existed, and decodes with none") {
  const auto m = sample_manifest();
  const std::string text = encode_manifest(m);
  CHECK(text.find("requires") == std::string::npos);
  // As a build from before the line wrote it (sealed by hand).
  const std::string old = sealed("sluice-manifest 1\ncheckpoint 7\nmode aligned\ncreated_unix_ms 5\ntasks 1\n"
                                 "file task-0.state 10 0000abcd 1 2\nmetadata 0\n");
  auto decoded = decode_manifest(old, "m");
  REQUIRE(decoded.ok());
  CHECK(decoded->requires_checkpoints.empty());
  CHECK(encode_manifest(decoded.value()) == old);
}

TEST_CASE("a requires line out of order, repeated, miscounted, empty or naming no earlier checkpoint is rejected") {
  const std::string head = "sluice-manifest 1\ncheckpoint 7\nmode aligned\ncreated_unix_ms 5\ntasks 0\n";
  const auto with = [&](std::string_view line) {
    return error_of(sealed(head + std::string(line) + "\nmetadata 0\n"));
  };
  CHECK(with("requires 1 3").empty());
  CHECK(with("requires 2 1 6").empty());
  CHECK(with("requires 2 3 2") ==
        "chk-7/_manifest: line 6: required checkpoint 2 after 3 (ids come in ascending order, each once)");
  CHECK(with("requires 2 3 3") ==
        "chk-7/_manifest: line 6: required checkpoint 3 after 3 (ids come in ascending order, each once)");
  CHECK(with("requires 1 7") == "chk-7/_manifest: line 6: required checkpoint '7' is not an id from 1 to 6");
  CHECK(with("requires 1 9") == "chk-7/_manifest: line 6: required checkpoint '9' is not an id from 1 to 6");
  CHECK(with("requires 1 0") == "chk-7/_manifest: line 6: required checkpoint '0' is not an id from 1 to 6");
  CHECK(with("requires 1 03") == "chk-7/_manifest: line 6: required checkpoint '03' is not an id from 1 to 6");
  CHECK(with("requires 1 x") == "chk-7/_manifest: line 6: required checkpoint 'x' is not an id from 1 to 6");
  for (std::string_view miscounted : {"requires 2 3", "requires 1 2 3", "requires 0", "requires", "requires x 1"}) {
    INFO(miscounted);
    CHECK(with(miscounted) == "chk-7/_manifest: line 6: expected 'requires <n> <id>...' with n above 0 and n ids");
  }
  // After the metadata count it is no requires line but an unexpected one.
  CHECK(error_of(sealed(head + "metadata 0\nrequires 1 3\n")) ==
        "chk-7/_manifest: line 7: unexpected line before the end line");
}
