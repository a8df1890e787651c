#include <sluice/dataflow/generator.hpp>
#include <sluice/dataflow/line_file_reader.hpp>
#include <sluice/runtime/sync_wait.hpp>

#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

using sluice::dataflow::line_file_reader;
using sluice::dataflow::word_corpus_generator;
using sluice::dataflow::write_corpus;
using sluice::runtime::sync_wait;
using sluice::runtime::task;
using sluice::test::temp_dir;

namespace {

std::vector<std::string> take(word_corpus_generator& g, std::size_t n) {
  std::vector<std::string> lines;
  for (std::size_t i = 0; i < n; ++i) lines.emplace_back(g.next_line());
  return lines;
}

std::vector<std::string> split_words(const std::string& line) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (;;) {
    const auto space = line.find(' ', start);
    out.push_back(line.substr(start, space - start));
    if (space == std::string::npos) return out;
    start = space + 1;
  }
}

task<std::vector<std::string>> read_all(std::string path) {
  auto reader = (co_await line_file_reader::open(path, 0)).value();
  std::vector<std::string> lines;
  for (;;) {
    auto line = co_await reader.next_line();
    if (!line.value()) break;
    lines.emplace_back(**line);
  }
  co_return lines;
}

}  // namespace

TEST_CASE("the same seed gives the same lines, another seed other lines", "[generator]") {
  word_corpus_generator a(42);
  word_corpus_generator b(42);
  word_corpus_generator c(43);
  const auto lines_a = take(a, 500);
  CHECK(lines_a == take(b, 500));
  CHECK(lines_a != take(c, 500));
  CHECK(a.position() == 500);
  // Pinned: the corpus of a seed must not change between builds (benchmark inputs depend on it).
  word_corpus_generator pinned(1);
  const auto first = take(pinned, 3);
  CHECK(first[0] + "|" + first[1] + "|" + first[2] == "in|the to of as a|and their the the for it the of to");
}

TEST_CASE("seek(n) reproduces the sequence from line n", "[generator]") {
  word_corpus_generator g(7);
  const auto all = take(g, 1000);
  for (const std::uint64_t n : {0ull, 1ull, 17ull, 500ull, 999ull}) {
    word_corpus_generator h(7);
    h.seek(n);
    CHECK(h.position() == n);
    const auto rest = take(h, 1000 - n);
    CHECK(rest == std::vector<std::string>(all.begin() + static_cast<std::ptrdiff_t>(n), all.end()));
  }
  g.seek(3);  // backwards too
  CHECK(std::string(g.next_line()) == all[3]);
}

TEST_CASE("lines are 1 to 12 vocabulary words with Zipf-like frequencies", "[generator]") {
  const auto vocabulary = word_corpus_generator::vocabulary();
  const std::set<std::string_view> known(vocabulary.begin(), vocabulary.end());
  CHECK(known.size() == vocabulary.size());  // no duplicates
  std::map<std::string, std::uint64_t> counts;
  std::set<std::size_t> lengths;
  word_corpus_generator g(99);
  for (int i = 0; i < 20000; ++i) {
    const auto words = split_words(std::string(g.next_line()));
    lengths.insert(words.size());
    for (const auto& w : words) {
      REQUIRE(known.contains(w));
      ++counts[w];
    }
  }
  CHECK(*lengths.begin() == 1);
  CHECK(*lengths.rbegin() == word_corpus_generator::max_words_per_line);
  // Rank r has weight ~ 1/(r+1): rank 0 is about twice rank 1 and ten times rank 9.
  const auto count = [&](std::size_t rank) { return static_cast<double>(counts[std::string(vocabulary[rank])]); };
  CHECK(count(0) / count(1) == Approx(2.0).epsilon(0.1));
  CHECK(count(0) / count(9) == Approx(10.0).epsilon(0.15));
  CHECK(count(10) > count(60));
}

TEST_CASE("write_corpus writes the generator's lines to a file", "[generator]") {
  temp_dir dir;
  const std::string path = dir.file("corpus.txt");
  // Enough lines for several 256 KiB writes.
  const std::uint64_t bytes = sync_wait(write_corpus(path, 60000, 5)).value();
  const auto lines = sync_wait(read_all(path));
  word_corpus_generator g(5);
  CHECK(lines == take(g, 60000));
  std::uint64_t expected_bytes = 0;
  for (const auto& l : lines) expected_bytes += l.size() + 1;
  CHECK(bytes == expected_bytes);
  CHECK(bytes > 3 * 256 * 1024);

  CHECK(sync_wait(write_corpus(path, 0, 5)).value() == 0);
  CHECK(sync_wait(read_all(path)).empty());

  const auto failed = sync_wait(write_corpus(dir.file("no/such/dir"), 1, 5));
  REQUIRE_FALSE(failed);
  CHECK(failed.error().message() == "open '" + dir.file("no/such/dir") + "': No such file or directory");
}
