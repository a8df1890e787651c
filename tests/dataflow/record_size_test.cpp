// Records of any size, exactly once: word count over lines holding words from 1 byte to 4 segments
// (exactly one segment, one segment minus a length prefix, and their neighbours among them), in
// every checkpoint mode over both transports, killed with SIGKILL at random moments (so barriers
// fall at random points of records that span buffers) and restarted until one run finishes. The
// output must equal an independent count. A record above the job's maximum fails the job with a
// message naming the task, the size and the setting.
#include <sluice/buffers/record_serializer.hpp>
#include <sluice/buffers/segment.hpp>
#include <sluice/dataflow/job_runner.hpp>
#include <sluice/dataflow/samples.hpp>

#include <support/sanitizers.hpp>
#include <support/temp_dir.hpp>

#include "crash_support.hpp"
#include "wordcount_support.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <signal.h>
#include <sys/wait.h>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace sluice::dataflow;
using sluice::snapshot::checkpoint_mode;
using sluice::test::expected_counts;
using sluice::test::published_lines;
using sluice::test::temp_dir;

namespace {

constexpr std::size_t segment = sluice::buffers::default_segment_bytes;
constexpr std::size_t prefix = sluice::buffers::record_length_bytes;

// A word whose record (a string: its length, then its bytes, after the record's own length prefix)
// has about `bytes` bytes; distinct per `id`.
std::string word_of(std::size_t bytes, std::size_t id) {
  const std::string tag = std::to_string(id);
  std::string w(std::max(bytes, tag.size() + 2), static_cast<char>('a' + id % 26));
  w[0] = 'w';
  tag.copy(w.data() + 1, tag.size());
  w[tag.size() + 1] = '_';
  return w;
}

// Lines of small words, and lines of one word of a size drawn from the awkward ones (around one and
// two segments, with and without prefixes) or uniformly from 1 byte to 4 segments.
void write_sized_corpus(const std::string& path, std::size_t lines, std::uint64_t seed) {
  const std::vector<std::size_t> awkward = {1,           2,           3,           segment - 2 * prefix - 1,
                                            segment - 2 * prefix, segment - prefix - 1, segment - prefix,
                                            segment - 1, segment,     segment + 1, 2 * segment - prefix,
                                            2 * segment, 2 * segment + 3, 4 * segment - prefix, 4 * segment};
  std::mt19937_64 rng(seed);
  std::vector<std::string> big;  // a pool, so big words repeat and their counts matter
  for (std::size_t i = 0; i < 40; ++i) {
    const std::size_t bytes = i < awkward.size() ? awkward[i]
                                                 : std::uniform_int_distribution<std::size_t>(1, 4 * segment)(rng);
    big.push_back(word_of(bytes, i));
  }
  std::ofstream out(path);
  for (std::size_t i = 0; i < lines; ++i) {
    if (rng() % 6 == 0) {
      out << big[rng() % big.size()] << '\n';
    } else {
      const std::size_t n = 1 + rng() % 12;
      for (std::size_t k = 0; k < n; ++k) out << (k ? " " : "") << "s" << rng() % 300;
      out << '\n';
    }
  }
}

job_settings settings_for(const temp_dir& dir, checkpoint_mode mode, const std::string& transport) {
  job_settings s = sluice::test::test_job_settings(dir.file("checkpoints"), mode, transport);
  s.checkpoint_interval = std::chrono::milliseconds(5);
  s.alignment_timeout = std::chrono::milliseconds(1);
  s.flush_timeout = std::chrono::milliseconds(1);
  return s;
}

}  // namespace

TEST_CASE("records from 1 byte to 4 segments, killed with SIGKILL at random moments, are counted exactly once",
          "[dataflow][crash][records]") {
  const auto mode = GENERATE(checkpoint_mode::aligned, checkpoint_mode::unaligned, checkpoint_mode::aligned_timeout);
  const std::string transport = GENERATE("local", "tcp");
  INFO("mode " << sluice::snapshot::to_string(mode) << ", transport " << transport);
  temp_dir dir;
  write_sized_corpus(dir.file("input.txt"), 3000, 5 + static_cast<std::uint64_t>(mode));
  const auto job = [&dir, mode, transport] {
    job_builder b("wordcount");
    build_wordcount(b, {dir.file("input.txt"), dir.file("out"), 2, 0});
    return run_job(b, settings_for(dir, mode, transport)).exit_code;
  };
  const auto reset = [&dir] {
    std::filesystem::remove_all(dir.file("out"));
    std::filesystem::remove_all(dir.file("checkpoints"));
  };
  const auto report = sluice::test::run_until_done(job, reset, 71 + static_cast<std::uint64_t>(mode) * 7 + (transport == "tcp"),
                                                   8, 120);
  INFO("killed " << report.kills << " times");
  REQUIRE(report.exit_code == 0);
  CHECK(report.kills > 0);
  CHECK(published_lines(dir.file("out")) == expected_counts(dir.file("input.txt"), 0));
}

TEST_CASE("records larger than a segment, windowed and at parallelism 3, are counted exactly once after SIGKILLs",
          "[dataflow][crash][records]") {
  const std::string transport = GENERATE("local", "tcp");
  temp_dir dir;
  write_sized_corpus(dir.file("input.txt"), 2000, 23);
  const auto job = [&dir, transport] {
    job_builder b("wordcount");
    build_wordcount(b, {dir.file("input.txt"), dir.file("out"), 3, 100});
    return run_job(b, settings_for(dir, checkpoint_mode::unaligned, transport)).exit_code;
  };
  const auto reset = [&dir] {
    std::filesystem::remove_all(dir.file("out"));
    std::filesystem::remove_all(dir.file("checkpoints"));
  };
  const auto report = sluice::test::run_until_done(job, reset, transport == "tcp" ? 5 : 6, 6, 120);
  REQUIRE(report.exit_code == 0);
  CHECK(published_lines(dir.file("out")) == expected_counts(dir.file("input.txt"), 100));
}

TEST_CASE("a line above the job's maximum record size fails the job naming the task, the size and the setting",
          "[dataflow][records]") {
  temp_dir dir;
  {
    std::ofstream out(dir.file("input.txt"));
    out << "a b c\n" << std::string(5000, 'x') << "\nd e\n";
  }
  job_builder b("wordcount");
  build_wordcount(b, {dir.file("input.txt"), dir.file("out"), 1, 0});
  job_settings s = settings_for(dir, checkpoint_mode::unaligned, "local");
  s.max_record_bytes = 4096;
  const job_result r = run_job(b, s);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.message, Catch::Contains("read#0") && Catch::Contains("4096") && Catch::Contains("--max-record-bytes"));
  CHECK(published_lines(dir.file("out")).empty());
}

TEST_CASE("a maximum record size out of range is refused", "[dataflow][records]") {
  temp_dir dir;
  job_builder b("wordcount");
  build_wordcount(b, {dir.file("input.txt"), dir.file("out"), 1, 0});
  job_settings s = settings_for(dir, checkpoint_mode::unaligned, "local");
  s.max_record_bytes = 0;
  CHECK_THROWS_WITH(run_job(b, s), Catch::Contains("max_record_bytes"));
  s.max_record_bytes = (std::size_t{1} << 30) + 1;
  CHECK_THROWS_WITH(run_job(b, s), Catch::Contains("max_record_bytes"));
}

TEST_CASE("a segment size that is not a power of two from 4 KiB to 32 KiB, or a checkpoint timeout under 1 ms, is refused",
          "[dataflow][records]") {
  temp_dir dir;
  job_builder b("wordcount");
  build_wordcount(b, {dir.file("input.txt"), dir.file("out"), 1, 0});
  for (const std::size_t bytes : {std::size_t{0}, std::size_t{2048}, std::size_t{12288}, std::size_t{65536}}) {
    INFO("segment_bytes " << bytes);
    job_settings s = settings_for(dir, checkpoint_mode::unaligned, "local");
    s.segment_bytes = bytes;
    CHECK_THROWS_WITH(run_job(b, s), Catch::Contains("segment_bytes"));
  }
  job_settings s = settings_for(dir, checkpoint_mode::unaligned, "local");
  s.checkpoint_timeout = std::chrono::milliseconds(0);
  CHECK_THROWS_WITH(run_job(b, s), Catch::Contains("checkpoint_timeout"));
}

TEST_CASE("records from 1 byte to 4 segments in segments of 4 KiB are counted exactly once", "[dataflow][records]") {
  const auto mode = GENERATE(checkpoint_mode::aligned, checkpoint_mode::unaligned);
  const std::string transport = GENERATE("local", "tcp");
  INFO("mode " << sluice::snapshot::to_string(mode) << ", transport " << transport);
  temp_dir dir;
  {
    std::mt19937_64 rng(11);
    std::ofstream out(dir.file("input.txt"));
    for (int i = 0; i < 400; ++i) {
      out << word_of(std::uniform_int_distribution<std::size_t>(1, 4 * 4096)(rng), rng() % 20) << '\n';
    }
  }
  job_builder b("wordcount");
  build_wordcount(b, {dir.file("input.txt"), dir.file("out"), 2, 0});
  job_settings s = settings_for(dir, mode, transport);
  s.segment_bytes = 4096;
  const job_result r = run_job(b, s);
  INFO(r.message);
  REQUIRE(r.exit_code == 0);
  CHECK(published_lines(dir.file("out")) == expected_counts(dir.file("input.txt"), 0));
  CHECK(r.leaked_segments == 0);
}

TEST_CASE("resuming from an unaligned checkpoint whose channel state splits records larger than a segment restores it",
          "[dataflow][crash][records]") {
  const std::string transport = GENERATE("local", "tcp");
  INFO("transport " << transport);
  temp_dir dir;
  {
    // Only words of 40-90 KB (as in the report): every buffer of channel state is part of a record
    // that spans buffers, so the state splits records on both sides of each channel. About 100 MB,
    // a tenth of it under TSan (still hundreds of segments in flight).
    std::mt19937_64 rng(3);
    std::ofstream out(dir.file("input.txt"));
    for (std::uint64_t i = 0; i < sluice::test::scaled_for_tsan(1500); ++i) {
      out << word_of(std::uniform_int_distribution<std::size_t>(40'000, 90'000)(rng), rng() % 50) << '\n';
    }
  }
  const auto job = [&dir, transport] {
    job_builder b("wordcount");
    build_wordcount(b, {dir.file("input.txt"), dir.file("out"), 2, 0});
    return run_job(b, settings_for(dir, checkpoint_mode::unaligned, transport));
  };
  const std::filesystem::path chk_root = dir.file("checkpoints");
  const auto reset = [&dir] {
    std::filesystem::remove_all(dir.file("checkpoints"));
    std::filesystem::remove_all(dir.file("out"));
  };
  const std::filesystem::path with_state =
      sluice::test::kill_at_channel_state([&job] { return job().exit_code; }, chk_root, reset, 30);
  REQUIRE_FALSE(with_state.empty());
  const std::string keep = with_state.filename().string();
  INFO("resuming from " << keep << " with " << sluice::test::manifest_channel_bytes(with_state) << " bytes of channel state");
  const job_result r = job();
  REQUIRE(r.exit_code == 0);
  REQUIRE(r.resumed_from.has_value());
  CHECK("chk-" + std::to_string(*r.resumed_from) == keep);  // that checkpoint restored: no fallback
  CHECK(published_lines(dir.file("out")) == expected_counts(dir.file("input.txt"), 0));
}
