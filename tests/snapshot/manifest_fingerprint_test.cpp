// The job fingerprint's place in the manifest: an optional metadata entry, so a manifest written
// before fingerprints existed still decodes and simply has none (run_job refuses to resume it).
#include <sluice/snapshot/manifest.hpp>

#include <support/state_files.hpp>

#include <catch2/catch.hpp>

#include <string>

using namespace sluice::snapshot;

TEST_CASE("a manifest carries the job fingerprint as metadata and gives it back byte for byte", "[snapshot][manifest]") {
  REQUIRE(is_valid_metadata_key(job_fingerprint_key));
  checkpoint_manifest m;
  m.checkpoint = 7;
  m.files.push_back({"task-0.state", 4096, 0x1a2b3c4d, 120, 0});
  const std::string text = "sluice-fingerprint 1\njob wordcount\nstage read 2 - 1\nentry source=read_lines\n";
  m.metadata[std::string(job_fingerprint_key)] = sluice::test::bytes_of(text);
  const std::string encoded = encode_manifest(m);
  CHECK(encoded.find("metadata 1\nmeta job.fingerprint 736c756963652d") != std::string::npos);
  auto back = decode_manifest(encoded, "chk-7/_manifest");
  REQUIRE(back.ok());
  CHECK(back.value() == m);
}

TEST_CASE("a manifest written before job fingerprints decodes, with no fingerprint", "[snapshot][manifest]") {
  // Byte for byte what earlier builds wrote: version 1, no metadata.
  const std::string old = "sluice-manifest 1\ncheckpoint 3\nmode aligned\ncreated_unix_ms 1712000000000\ntasks 1\n"
                          "file task-0.state 10 00000000 0 0\nmetadata 0\n";
  checkpoint_manifest m;
  m.checkpoint = 3;
  m.created_unix_ms = 1712000000000;
  m.files.push_back({"task-0.state", 10, 0, 0, 0});
  const std::string encoded = encode_manifest(m);
  REQUIRE(encoded.rfind(old, 0) == 0);
  auto back = decode_manifest(encoded, "chk-3/_manifest");
  REQUIRE(back.ok());
  CHECK(back.value().metadata.count(std::string(job_fingerprint_key)) == 0);
}
