// The combiner (combiner.hpp, keyed_stream::combine): its partials sum to what it folded, its table
// is bounded, it flushes before a watermark and the end of the input; a job with it publishes what
// the job without it does; and it flushes at every checkpoint, so a run stopped at a checkpoint and
// resumed from it counts exactly (no partial is lost with the task's memory).

#include <sluice/dataflow/combiner.hpp>
#include <sluice/dataflow/job_runner.hpp>
#include <sluice/dataflow/samples.hpp>
#include <sluice/dataflow/sinks.hpp>

#include <support/temp_dir.hpp>

#include "wordcount_support.hpp"

#include <catch2/catch.hpp>

#include <filesystem>

#include <chrono>
#include <cstdint>
#include <map>
#include <stop_token>
#include <string>
#include <utility>
#include <variant>
#include <vector>

using namespace sluice::dataflow;
using sluice::snapshot::checkpoint_mode;
using sluice::test::expected_counts;
using sluice::test::published_lines;
using sluice::test::temp_dir;
using sluice::test::write_corpus_file;

namespace {

using partial = std::pair<std::string, std::uint64_t>;

// What reaches the combiner's downstream, in order: partials, watermarks (as their time) and the end.
struct recorder final : collector<partial> {
  struct end {};
  std::vector<std::variant<partial, std::uint64_t, end>> seen;
  void collect(const partial& p) override { seen.emplace_back(p); }
  void watermark(std::uint64_t t) override { seen.emplace_back(t); }
  void end_of_data() override { seen.emplace_back(end{}); }
  std::size_t partials() const {
    std::size_t n = 0;
    for (const auto& s : seen) n += std::holds_alternative<partial>(s) ? 1 : 0;
    return n;
  }
  std::map<std::string, std::uint64_t> sums() const {
    std::map<std::string, std::uint64_t> out;
    for (const auto& s : seen) {
      if (const auto* p = std::get_if<partial>(&s)) out[p->first] += p->second;
    }
    return out;
  }
};

using counter = combine_op<std::string, std::string, std::uint64_t>;
counter::functions count_words() {
  return {[](const std::string& w) { return w; }, [](std::uint64_t& n, const std::string&) { ++n; }};
}

using counted = std::pair<std::string, std::uint64_t>;

// Words of the corpus counted, with a combiner of `max_keys` (0: none) before the exchange.
void build_count(job_builder& job, const temp_dir& dir, std::size_t max_keys) {
  auto words = job.read_lines("read", dir.file("input.txt"), 2)
                   .flat_map<std::string>([](const std::string& line, emitter<std::string>& out) {
                     for_each_word(line, [&](std::string_view w) { out.emit(std::string(w)); });
                   })
                   .key_by<std::string>([](const std::string& w) { return w; });
  const auto emit = [](const std::string& w, const std::uint64_t& n) { return counted(w, n); };
  const auto format = [](const counted& c) { return c.first + " " + std::to_string(c.second); };
  if (max_keys == 0) {
    words.aggregate<std::uint64_t, counted>("count", 3, [](std::uint64_t& n, const std::string&) { ++n; }, emit)
        .write_lines(dir.file("out"), format);
    return;
  }
  words.combine<std::uint64_t>([](std::uint64_t& n, const std::string&) { ++n; }, max_keys)
      .aggregate<std::uint64_t, counted>("count", 3, [](std::uint64_t& n, const partial& p) { n += p.second; }, emit)
      .write_lines(dir.file("out"), format);
}

}  // namespace

TEST_CASE("a combiner's partials sum to the counts it folded, and it flushes whenever its table reaches max_keys",
          "[dataflow][combiner]") {
  recorder down;
  counter c(count_words(), 2, down);
  for (const char* w : {"a", "a", "b", "a", "c", "c", "b"}) c.collect(w);
  // "a" "a" "b": two keys, flushed; "a" "c": flushed; "c" "b": flushed.
  CHECK(c.flushes() == 3);
  CHECK(c.keys() == 0);
  CHECK(down.partials() == 6);
  CHECK(down.sums() == std::map<std::string, std::uint64_t>{{"a", 3}, {"b", 2}, {"c", 2}});
  c.collect("d");
  CHECK(c.keys() == 1);  // below the bound: held
  CHECK(down.partials() == 6);
  c.end_of_data();
  REQUIRE(down.seen.size() == 8);
  CHECK(std::get<partial>(down.seen[6]) == partial("d", 1));
  CHECK(std::holds_alternative<recorder::end>(down.seen[7]));
}

TEST_CASE("a combiner whose table fills with keys seen once passes records through and tries its table again",
          "[dataflow][combiner]") {
  constexpr std::size_t max_keys = counter::adaptive_min_keys;
  constexpr std::size_t window = counter::pass_through_tables * max_keys;
  recorder down;
  counter c(count_words(), max_keys, down);
  std::map<std::string, std::uint64_t> expected;
  const auto feed = [&](const char* prefix, std::size_t n) {
    std::string w = prefix;
    w += std::to_string(n);
    c.collect(w);
    ++expected[w];
  };
  // Distinct ids: the first table fills with one record per key, is flushed, and the records after
  // it pass through as one-record partials.
  for (std::size_t i = 0; i < max_keys; ++i) feed("u", i);
  CHECK(c.flushes() == 1);
  CHECK(c.passing() == window);
  for (std::size_t i = 0; i < window; ++i) feed("u", i % 1000);
  CHECK(c.passed_through() == window);
  CHECK(c.passing() == 0);
  CHECK(down.partials() == max_keys + window);
  // Then the table is tried again: three words repeated (a0, a1, a2) reduce well, and stay in it.
  for (std::size_t i = 0; i < 300; ++i) feed("a", i % 3);
  CHECK(c.keys() == 3);
  CHECK(c.passed_through() == window);
  // A full table that reduced well (two records or more per key) does not switch to passing.
  for (std::size_t i = 0; i < 2 * max_keys; ++i) feed("w", i % (max_keys - 3));
  CHECK(c.passing() == 0);
  c.end_of_data();
  CHECK(down.sums() == expected);
}

TEST_CASE("a combiner flushes what it holds before it passes a watermark on, and a flush of nothing emits nothing",
          "[dataflow][combiner]") {
  recorder down;
  counter c(count_words(), 1000, down);
  c.collect("x");
  c.collect("x");
  c.watermark(41);
  REQUIRE(down.seen.size() == 2);
  CHECK(std::get<partial>(down.seen[0]) == partial("x", 2));
  CHECK(std::get<std::uint64_t>(down.seen[1]) == 41);
  c.flush();  // as the task does at a checkpoint
  CHECK(down.seen.size() == 2);
  CHECK(c.flushes() == 1);
  c.collect("y");
  c.flush();
  REQUIRE(down.seen.size() == 3);
  CHECK(std::get<partial>(down.seen[2]) == partial("y", 1));
  CHECK_THROWS_AS(counter(count_words(), 0, down), std::invalid_argument);
}

TEST_CASE("a job with a combiner publishes what the same job without one publishes, bounded table or not",
          "[dataflow][combiner]") {
  const auto mode = GENERATE(checkpoint_mode::aligned, checkpoint_mode::unaligned);
  // 64 (counter::adaptive_min_keys) over 50,000 distinct ids: the table fills with ids seen once
  // each, so the combiner keeps switching to passing records through and back.
  const std::size_t max_keys = GENERATE(std::size_t{3}, counter::adaptive_min_keys,
                                        keyed_stream<std::string, std::string>::default_combine_keys);
  INFO("mode " << sluice::snapshot::to_string(mode) << ", max_keys " << max_keys);
  temp_dir plain;
  temp_dir combined;
  const std::uint64_t distinct = max_keys == counter::adaptive_min_keys ? 50'000 : 0;
  write_corpus_file(plain.file("input.txt"), 20'000, 5, distinct);
  write_corpus_file(combined.file("input.txt"), 20'000, 5, distinct);
  job_builder a("count");
  build_count(a, plain, 0);
  job_builder b("count");
  build_count(b, combined, max_keys);
  const job_result ra = run_job(a, sluice::test::test_job_settings(plain.file("chk"), mode, "local"));
  const job_result rb = run_job(b, sluice::test::test_job_settings(combined.file("chk"), mode, "local"));
  INFO(ra.message << " / " << rb.message);
  REQUIRE(ra.exit_code == 0);
  REQUIRE(rb.exit_code == 0);
  const std::vector<std::string> lines = published_lines(combined.file("out"));
  CHECK(lines == published_lines(plain.file("out")));
  CHECK(lines == expected_counts(combined.file("input.txt")));
  // With room for the vocabulary, the exchange carried partials, far fewer than the words.
  if (max_keys > 100) CHECK(rb.final.records_in * 10 < ra.final.records_in);
}

TEST_CASE("a combiner flushes at every checkpoint: a run stopped at a checkpoint mid-input and resumed counts exactly",
          "[dataflow][combiner]") {
  const auto mode = GENERATE(checkpoint_mode::aligned, checkpoint_mode::unaligned);
  INFO("mode " << sluice::snapshot::to_string(mode));
  temp_dir dir;
  // A run that read the whole input before its drain took effect (a loaded machine) tries again
  // with twice the input: the test needs a stop mid-input.
  job_result r;
  for (std::uint64_t lines = 300'000;; lines *= 2) {
    std::filesystem::remove_all(dir.file("chk"));
    std::filesystem::remove_all(dir.file("out"));
    write_corpus_file(dir.file("input.txt"), lines, 9);
    std::stop_source drain;
    job_settings s = sluice::test::test_job_settings(dir.file("chk"), mode, "local");
    s.drain = drain.get_token();
    s.on_checkpoint = [&drain](const sluice::snapshot::checkpoint_stats&) { drain.request_stop(); };
    job_builder first("count");
    build_count(first, dir, keyed_stream<std::string, std::string>::default_combine_keys);
    r = run_job(first, s);
    INFO(r.message);
    REQUIRE(r.exit_code == 0);
    if (r.stopped_at.has_value() && r.final.source_records < lines) break;  // stopped with partials held
    REQUIRE(lines < 2'400'000);
  }
  job_builder second("count");
  build_count(second, dir, keyed_stream<std::string, std::string>::default_combine_keys);
  const job_result r2 = run_job(second, sluice::test::test_job_settings(dir.file("chk"), mode, "local"));
  INFO(r2.message);
  REQUIRE(r2.exit_code == 0);
  CHECK(r2.resumed_from == r.stopped_at);
  CHECK(published_lines(dir.file("out")) == expected_counts(dir.file("input.txt")));
}
