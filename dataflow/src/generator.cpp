// word_corpus_generator and write_corpus (see generator.hpp).
//
// Line n is drawn from a splitmix64 stream seeded with a mix of (seed, n), so seek() is O(1) and no
// state carries from one line to the next. Words are sampled from a cumulative table of integer
// weights (no floating point, no std distributions: their results differ between libraries).

#include <sluice/dataflow/generator.hpp>

#include <sluice/io/file.hpp>

#include <sys/stat.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <system_error>
#include <array>
#include <span>
#include <vector>

namespace sluice::dataflow {

namespace {

constexpr std::array<std::string_view, 100> words = {
    "the",    "of",     "and",    "to",      "a",       "in",     "is",     "it",     "you",    "that",
    "he",     "was",    "for",    "on",      "are",     "with",   "as",     "his",    "they",   "be",
    "at",     "one",    "have",   "this",    "from",    "or",     "had",    "by",     "hot",    "word",
    "but",    "what",   "some",   "we",      "can",     "out",    "other",  "were",   "all",    "there",
    "when",   "up",     "use",    "your",    "how",     "said",   "an",     "each",   "she",    "which",
    "do",     "their",  "time",   "if",      "will",    "way",    "about",  "many",   "then",   "them",
    "write",  "would",  "like",   "so",      "these",   "her",    "long",   "make",   "thing",  "see",
    "him",    "two",    "has",    "look",    "more",    "day",    "could",  "go",     "come",   "did",
    "number", "sound",  "no",     "most",    "people",  "my",     "over",   "know",   "water",  "than",
    "call",   "first",  "who",    "may",     "down",    "side",   "been",   "now",    "find",   "stream",
};

// cumulative[r] = sum of weights of ranks 0..r, weight(r) = 720720 / (r + 1).
constexpr std::array<std::uint64_t, words.size()> cumulative_weights() {
  std::array<std::uint64_t, words.size()> c{};
  std::uint64_t sum = 0;
  for (std::size_t r = 0; r < words.size(); ++r) {
    sum += 720720 / (r + 1);
    c[r] = sum;
  }
  return c;
}
constexpr auto cumulative = cumulative_weights();

// splitmix64: a tiny, well-mixed generator; also the seed mixer.
struct splitmix64 {
  std::uint64_t state;
  std::uint64_t next() noexcept {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
};

std::string_view sample_word(splitmix64& rng) {
  const std::uint64_t u = rng.next() % cumulative.back();
  const auto it = std::upper_bound(cumulative.begin(), cumulative.end(), u);
  return words[static_cast<std::size_t>(it - cumulative.begin())];
}

}  // namespace

std::span<const std::string_view> word_corpus_generator::vocabulary() noexcept { return words; }

std::string_view word_corpus_generator::next_line() {
  splitmix64 mixer{seed_ ^ 0x5eed5eed5eed5eedull};
  splitmix64 rng{mixer.next() ^ (position_ * 0xd1342543de82ef95ull)};
  rng.next();  // one round so that neighbouring positions diverge at once
  ++position_;
  const std::size_t count = 1 + rng.next() % max_words_per_line;
  line_.clear();
  for (std::size_t i = 0; i < count; ++i) {
    if (i > 0) line_ += ' ';
    if (distinct_ == 0) {
      line_ += sample_word(rng);
    } else {
      char id[24];
      id[0] = 'u';
      const auto end = std::to_chars(id + 1, id + sizeof id, rng.next() % distinct_).ptr;
      line_.append(id, end);
    }
  }
  return line_;
}

namespace {

// All of `data` at `offset`, or at the descriptor's position for a stream (a pipe, a terminal: no
// offsets there).
runtime::task<io::result<void>> write_out(io::file* f, std::span<const char> data, std::uint64_t offset, bool stream) {
  if (!stream) co_return co_await f->write_all(std::as_bytes(data), offset);
  constexpr std::uint64_t at_position = ~std::uint64_t{0};
  while (!data.empty()) {  // bound: each pass writes > 0 bytes or ends
    auto n = co_await f->write_at(std::as_bytes(data), at_position);
    if (!n) co_return std::move(n).error();
    if (*n == 0) co_return io::error::from_code(io::errc::no_progress, "write '" + f->path() + "'");
    data = data.subspan(*n);
  }
  co_return io::success();
}

// Writes line(n) for n in [0, lines), each followed by '\n', in 256 KiB writes; fsync; close. A
// pipe, terminal or device (`--output /dev/stdout | ...`) is written in order and not fsynced (fsync
// of one is EINVAL, and there is nothing to make durable).
template <class Line>
runtime::task<io::result<std::uint64_t>> write_generated(std::string path, std::uint64_t lines, Line line) {
  constexpr std::size_t buffer_bytes = 256 * 1024;
  auto opened = co_await io::file::open(path, io::open_options::create_or_truncate());
  if (!opened) co_return std::move(opened).error();
  io::file f = std::move(opened).value();
  auto status = co_await f.status();
  if (!status) co_return std::move(status).error();
  const bool regular = S_ISREG(status->mode);
  std::vector<char> buffer;
  buffer.reserve(buffer_bytes + 1024);
  std::uint64_t written_bytes = 0;
  for (std::uint64_t n = 0; n < lines; ++n) {
    const std::string_view text = line(n);
    buffer.insert(buffer.end(), text.begin(), text.end());
    buffer.push_back('\n');
    if (buffer.size() >= buffer_bytes || n + 1 == lines) {
      auto written = co_await write_out(&f, std::span<const char>(buffer), written_bytes, !regular);
      if (!written) co_return std::move(written).error();
      written_bytes += buffer.size();
      buffer.clear();
    }
  }
  if (regular) {
    auto synced = co_await f.fsync();
    if (!synced) co_return std::move(synced).error();
  }
  auto closed = co_await f.close();
  if (!closed) co_return std::move(closed).error();
  co_return written_bytes;
}

struct corpus_line {
  word_corpus_generator* generator;
  std::string_view operator()(std::uint64_t) const { return generator->next_line(); }
};

struct join_line {
  const join_input_spec* spec;
  std::string* text;
  std::string_view operator()(std::uint64_t n) const {
    *text = join_input_line(*spec, n);
    return *text;
  }
};

}  // namespace

runtime::task<io::result<std::uint64_t>> write_corpus(std::string path, std::uint64_t lines, std::uint64_t seed,
                                                      std::uint64_t distinct) {
  word_corpus_generator generator(seed, distinct);
  co_return co_await write_generated(std::move(path), lines, corpus_line{&generator});
}

runtime::task<io::result<std::uint64_t>> write_generated_lines(std::string path, std::uint64_t lines,
                                                               std::function<std::string_view(std::uint64_t)> line) {
  co_return co_await write_generated(std::move(path), lines, std::move(line));
}

std::string join_input_line(const join_input_spec& spec, std::uint64_t n) {
  splitmix64 rng{(spec.seed ^ 0x6a6f696e6a6f696eull) + n * 0xd1342543de82ef95ull};
  rng.next();
  const std::uint64_t key = spec.keys == 0 ? 0 : rng.next() % spec.keys;
  const std::uint64_t t = spec.rows == 0 ? 0 : n * spec.span_ms / spec.rows;  // (write_join_input checks the product fits)
  std::string line = "k";  // (append, not "k" + ...: GCC 12 -O3 warns -Wrestrict falsely on that)
  line.append(std::to_string(key)).append(",").append(std::to_string(t)).append(",").append(spec.prefix).append(std::to_string(n));
  return line;
}

runtime::task<io::result<std::uint64_t>> write_join_input(std::string path, join_input_spec spec) {
  if (spec.span_ms != 0 && spec.rows > UINT64_MAX / spec.span_ms) {
    co_return io::error(std::make_error_code(std::errc::invalid_argument), "join input: rows x span_ms is too large");
  }
  std::string text;
  co_return co_await write_generated(std::move(path), spec.rows, join_line{&spec, &text});
}

}  // namespace sluice::dataflow
