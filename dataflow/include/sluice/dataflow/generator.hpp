#pragma once
// word_corpus_generator: a deterministic, seeded source of text lines for benchmarks and demos
// (word count and the like). Each line is 1 to 12 words from a fixed 100-word vocabulary, drawn
// with Zipf-like frequencies (the word of rank r has weight ~ 1/(r+1)), separated by single spaces.
//
// Guarantees:
// - Line n depends only on (seed, n), through integer arithmetic only: the same on every platform
//   and build, so a benchmark's input is reproducible from its seed.
// - position() is the number of lines produced; seek(n) makes the next line line n, so a replayed
//   source (from a checkpoint that stored the position) produces exactly the same sequence.
//
//   word_corpus_generator g(42);
//   std::string_view line = g.next_line();   // valid until the next call
//   co_await write_corpus("/tmp/corpus.txt", 1'000'000, 42);  // the same lines, one per '\n'

#include <sluice/io/result.hpp>
#include <sluice/runtime/task.hpp>

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

namespace sluice::dataflow {

class word_corpus_generator {
 public:
  static constexpr std::size_t max_words_per_line = 12;

  // distinct == 0: words from the vocabulary below, by a Zipf-like law (text). distinct > 0: every
  // word is one of `distinct` ids, "u0" .. "u<distinct-1>", drawn uniformly: the key space of a
  // service's users or sessions rather than a language's most frequent words.
  explicit word_corpus_generator(std::uint64_t seed, std::uint64_t distinct = 0) noexcept
      : seed_(seed), distinct_(distinct) {}

  // The next line (no '\n'), valid until the next call.
  std::string_view next_line();
  std::uint64_t position() const noexcept { return position_; }
  void seek(std::uint64_t line_index) noexcept { position_ = line_index; }
  std::uint64_t seed() const noexcept { return seed_; }

  // The vocabulary, by rank (most frequent first).
  static std::span<const std::string_view> vocabulary() noexcept;

 private:
  std::uint64_t seed_;
  std::uint64_t distinct_;
  std::uint64_t position_ = 0;
  std::string line_;
};

// Line n of a join input (samples.hpp, build_join): "key,timestamp_ms,payload" with the key one of
// `keys` ("k0".."k<keys-1>", drawn from (seed, n)), timestamp n * span_ms / rows (so a file of `rows`
// lines is sorted by time and spans span_ms), and payload "<prefix><n>". Pure integer arithmetic.
struct join_input_spec {
  std::uint64_t rows = 100'000;
  std::uint64_t keys = 1000;
  std::uint64_t span_ms = 60'000;
  std::uint64_t seed = 42;
  std::string prefix = "p";
};
std::string join_input_line(const join_input_spec& spec, std::uint64_t n);
// Writes lines [0, spec.rows) of join_input_line() to `path`, like write_corpus. Yields the bytes.
runtime::task<io::result<std::uint64_t>> write_join_input(std::string path, join_input_spec spec);

// Writes lines [0, lines) of word_corpus_generator(seed) to `path` (created or truncated), each
// followed by '\n', through io_uring in 256 KiB writes, then fsyncs and closes it. Yields the bytes
// written. Errors name the operation and the path.
// `distinct` as for word_corpus_generator.
runtime::task<io::result<std::uint64_t>> write_corpus(std::string path, std::uint64_t lines, std::uint64_t seed,
                                                      std::uint64_t distinct = 0);

// Writes line(n) for n in [0, lines), each followed by '\n', to `path` the same way (256 KiB writes,
// fsync, close); the view line() returns must stay valid until the next call. Yields the bytes.
runtime::task<io::result<std::uint64_t>> write_generated_lines(std::string path, std::uint64_t lines,
                                                               std::function<std::string_view(std::uint64_t)> line);

}  // namespace sluice::dataflow
