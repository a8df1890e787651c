#include <sluice/dataflow/line_file_reader.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/test_backend.hpp>

#include <support/backends.hpp>
#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

using sluice::dataflow::line_file_reader;
using sluice::runtime::io_op;
using sluice::runtime::op_code;
using sluice::runtime::sync_wait;
using sluice::runtime::task;
using sluice::runtime::test_backend;
using sluice::test::backend_kind;
using sluice::test::temp_dir;

namespace {

void write_file(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
  REQUIRE(out.good());
}

// What a reader yields from `start`, or the error message.
struct read_outcome {
  std::vector<std::string> lines;
  std::vector<std::uint64_t> offsets;  // offset_bytes() after each line
  std::uint64_t lines_read = 0;
  std::uint64_t file_size = 0;
  std::optional<std::string> error;
};

// Reads at most `max_lines` lines from `start`.
task<read_outcome> read_lines(std::string path, std::uint64_t start, std::size_t max_lines = SIZE_MAX,
                              std::size_t max_line_bytes = line_file_reader::default_max_line_bytes) {
  read_outcome out;
  auto opened = co_await line_file_reader::open(path, start, max_line_bytes);
  if (!opened) {
    out.error = opened.error().message();
    co_return out;
  }
  line_file_reader reader = std::move(opened).value();
  out.file_size = reader.file_size();
  while (out.lines.size() < max_lines) {
    auto line = co_await reader.next_line();
    if (!line) {
      out.error = line.error().message();
      break;
    }
    if (!*line) break;
    out.lines.emplace_back(**line);
    out.offsets.push_back(reader.offset_bytes());
  }
  out.lines_read = reader.lines_read();
  (co_await reader.close()).value();
  co_return out;
}

std::string join(const std::vector<std::string>& lines, bool final_newline = true) {
  std::string s;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    s += lines[i];
    if (i + 1 < lines.size() || final_newline) s += '\n';
  }
  return s;
}

}  // namespace

TEST_CASE("a file is read line by line, lines split across 64 KiB chunks included", "[line_file_reader]") {
  const auto kind = GENERATE(backend_kind::uring, backend_kind::test);
  INFO("backend: " << to_string(kind));
  temp_dir dir;
  std::vector<std::string> lines;
  // Lengths chosen so that lines straddle chunk boundaries, and one spans several chunks.
  for (std::size_t i = 0; i < 40; ++i) lines.push_back(std::string(1000 + i * 97, static_cast<char>('a' + i % 26)));
  lines.push_back(std::string(3 * line_file_reader::chunk_bytes + 5, 'x'));
  for (std::size_t i = 0; i < 40; ++i) lines.push_back("line " + std::to_string(i));
  write_file(dir.file("in"), join(lines));

  const auto out = sync_wait(read_lines(dir.file("in"), 0), sluice::test::backend_options(kind));
  REQUIRE_FALSE(out.error);
  CHECK(out.lines == lines);
  CHECK(out.lines_read == lines.size());
  CHECK(out.offsets.back() == join(lines).size());
  CHECK(out.file_size == join(lines).size());
}

TEST_CASE("a last line without a newline is still a line", "[line_file_reader]") {
  temp_dir dir;
  write_file(dir.file("in"), "one\ntwo\nthree");
  const auto out = sync_wait(read_lines(dir.file("in"), 0));
  REQUIRE_FALSE(out.error);
  CHECK(out.lines == std::vector<std::string>{"one", "two", "three"});
  CHECK(out.offsets == std::vector<std::uint64_t>{4, 8, 13});
}

TEST_CASE("empty lines are lines, and an empty file has none", "[line_file_reader]") {
  temp_dir dir;
  write_file(dir.file("in"), "\n\na\n\n");
  const auto out = sync_wait(read_lines(dir.file("in"), 0));
  REQUIRE_FALSE(out.error);
  CHECK(out.lines == std::vector<std::string>{"", "", "a", ""});

  write_file(dir.file("empty"), "");
  const auto none = sync_wait(read_lines(dir.file("empty"), 0));
  REQUIRE_FALSE(none.error);
  CHECK(none.lines.empty());
  CHECK(none.lines_read == 0);
}

TEST_CASE("reopening at any offset_bytes() continues with exactly the next line", "[line_file_reader][property]") {
  const auto seed = GENERATE(1u, 2u, 3u);
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  temp_dir dir;
  std::vector<std::string> lines;
  std::size_t total = 0;
  while (total < 3 * line_file_reader::chunk_bytes) {
    // Mostly short lines, some empty, a few longer than a chunk.
    const unsigned kind = rng() % 100;
    const std::size_t length = kind < 10 ? 0 : kind < 97 ? rng() % 300 : 64 * 1024 + rng() % 5000;
    std::string line(length, ' ');
    for (auto& c : line) c = static_cast<char>('!' + rng() % 90);
    total += line.size() + 1;
    lines.push_back(std::move(line));
  }
  const bool final_newline = seed % 2 == 1;
  write_file(dir.file("in"), join(lines, final_newline));

  const auto whole = sync_wait(read_lines(dir.file("in"), 0));
  REQUIRE_FALSE(whole.error);
  REQUIRE(whole.lines == lines);

  // Reopen at every stored offset: the next lines are exactly the ones after it.
  for (std::size_t i = 0; i < whole.offsets.size(); ++i) {
    const auto next = sync_wait(read_lines(dir.file("in"), whole.offsets[i], 2));
    REQUIRE_FALSE(next.error);
    const std::vector<std::string> expected(lines.begin() + static_cast<std::ptrdiff_t>(i + 1),
                                            lines.begin() + static_cast<std::ptrdiff_t>(std::min(i + 3, lines.size())));
    REQUIRE(next.lines == expected);
    if (!next.offsets.empty()) CHECK(next.offsets[0] == whole.offsets[i + 1]);
  }
  // And from a few of them, to the end.
  for (std::size_t i = 0; i < whole.offsets.size(); i += whole.offsets.size() / 7 + 1) {
    const auto rest = sync_wait(read_lines(dir.file("in"), whole.offsets[i]));
    REQUIRE_FALSE(rest.error);
    CHECK(rest.lines == std::vector<std::string>(lines.begin() + static_cast<std::ptrdiff_t>(i + 1), lines.end()));
    CHECK(rest.lines_read == lines.size() - i - 1);
  }
}

TEST_CASE("a line longer than max_line_bytes is an error naming the file and offset", "[line_file_reader]") {
  temp_dir dir;
  const std::string path = dir.file("in");
  write_file(path, "ok\n" + std::string(100, 'y') + "\n" + std::string(101, 'z') + "\nafter\n");
  const auto out = sync_wait(read_lines(path, 0, SIZE_MAX, 100));
  CHECK(out.lines == std::vector<std::string>{"ok", std::string(100, 'y')});
  REQUIRE(out.error);
  const std::string limit = " bytes, the job's maximum record size (job_settings::max_record_bytes, --max-record-bytes)";
  CHECK(*out.error == "read line file '" + path + "': the line at offset 104 is longer than 100" + limit);

  // Also when the over-long line is the last one, without a newline, spread over chunks.
  write_file(path, std::string(2 * line_file_reader::chunk_bytes, 'w'));
  const auto tail = sync_wait(read_lines(path, 0, SIZE_MAX, line_file_reader::chunk_bytes));
  REQUIRE(tail.error);
  CHECK(*tail.error == "read line file '" + path + "': the line at offset 0 is longer than 65536" + limit);
}

TEST_CASE("a missing file is an error naming the path", "[line_file_reader]") {
  temp_dir dir;
  const auto out = sync_wait(read_lines(dir.file("nope"), 0));
  REQUIRE(out.error);
  CHECK(*out.error == "open '" + dir.file("nope") + "': No such file or directory");
}

TEST_CASE("a file that shrank below the start offset is a clear error", "[line_file_reader]") {
  temp_dir dir;
  const std::string path = dir.file("in");
  write_file(path, "short\n");
  const auto out = sync_wait(read_lines(path, 1000));
  REQUIRE(out.error);
  CHECK(*out.error == "open line file '" + path +
                          "': start offset 1000 is beyond the end of the file (6 bytes): it shrank or was replaced "
                          "since the offset was stored");
  // The end of the file itself is a valid start: nothing more to read.
  const auto at_end = sync_wait(read_lines(path, 6));
  REQUIRE_FALSE(at_end.error);
  CHECK(at_end.lines.empty());
}

TEST_CASE("a failing read is an error naming the file", "[line_file_reader][faults]") {
  temp_dir dir;
  const std::string path = dir.file("in");
  write_file(path, "a\nb\n");
  test_backend* backend = nullptr;
  auto options = sluice::test::test_backend_options(backend);
  backend->add_fault([](const io_op& op) -> std::optional<std::int32_t> {
    return op.code == op_code::read ? std::optional<std::int32_t>(-EIO) : std::nullopt;
  });
  const auto out = sync_wait(read_lines(path, 0), std::move(options));
  REQUIRE(out.error);
  CHECK(*out.error == "read '" + path + "': Input/output error");
  CHECK(out.lines.empty());
}

namespace {

// Opens `path` expecting `expected` bytes (none: its size now), reads `before` lines, runs `change`,
// then reads on to the end: the lines and the error.
task<read_outcome> read_around_change(std::string path, std::optional<std::uint64_t> expected, std::size_t before,
                                      std::function<void()> change) {
  read_outcome out;
  auto opened = co_await line_file_reader::open(path, 0, line_file_reader::default_max_line_bytes, expected);
  if (!opened) {
    out.error = opened.error().message();
    co_return out;
  }
  line_file_reader reader = std::move(opened).value();
  out.file_size = reader.file_size();
  for (;;) {
    if (out.lines.size() == before) change();
    auto line = co_await reader.next_line();
    if (!line) {
      out.error = line.error().message();
      break;
    }
    if (!*line) break;
    out.lines.emplace_back(**line);
  }
  (co_await reader.close()).value();
  co_return out;
}

std::vector<std::string> numbered_lines(std::size_t n) {
  std::vector<std::string> lines;
  for (std::size_t i = 0; i < n; ++i) lines.push_back("line " + std::to_string(i) + " of the input");
  return lines;
}

}  // namespace

TEST_CASE("a file truncated while read is an error naming it and both sizes", "[line_file_reader]") {
  temp_dir dir;
  const std::string path = dir.file("in");
  const auto lines = numbered_lines(20'000);  // over five chunks
  const std::string content = join(lines);
  write_file(path, content);
  const std::uint64_t cut = 100'000;  // inside the second chunk, which is not read yet
  const auto out = sync_wait(read_around_change(path, content.size(), 1, [&] { std::filesystem::resize_file(path, cut); }));
  REQUIRE(out.error);
  CHECK(*out.error == "read line file '" + path + "': it has " + std::to_string(cut) + " bytes, not the " +
                          std::to_string(content.size()) +
                          " it had when the job started (its fingerprint): it was truncated or replaced while the job "
                          "ran; an input must not change until the job ends");
  // Nothing past the end is made up; the lines before it are the file's.
  REQUIRE(!out.lines.empty());
  CHECK(out.lines.size() < lines.size());
  CHECK(std::equal(out.lines.begin(), out.lines.end(), lines.begin()));
}

TEST_CASE("a file appended to while read is an error after its last line and nothing past it is returned",
          "[line_file_reader]") {
  temp_dir dir;
  const std::string path = dir.file("in");
  write_file(path, "a\nb\n");
  const auto out = sync_wait(read_around_change(path, std::nullopt, 1, [&] {
    std::ofstream(path, std::ios::binary | std::ios::app) << "c\n";
  }));
  CHECK(out.lines == std::vector<std::string>{"a", "b"});
  REQUIRE(out.error);
  CHECK(*out.error == "read line file '" + path +
                          "': it has 6 bytes, not the 4 it had when it was opened: it was appended to or replaced while "
                          "the job ran; an input must not change until the job ends");
  // A last line without '\n' that grows is not returned grown either.
  write_file(path, "a\nb");
  const auto grown = sync_wait(read_around_change(path, std::nullopt, 1, [&] {
    std::ofstream(path, std::ios::binary | std::ios::app) << "bb\n";
  }));
  CHECK(grown.lines == std::vector<std::string>{"a"});
  CHECK(grown.error);
}

TEST_CASE("a file that is not the size the job fingerprinted is refused at open naming both sizes",
          "[line_file_reader]") {
  temp_dir dir;
  const std::string path = dir.file("in");
  write_file(path, "a\nb\n");
  const auto shorter = sync_wait(read_around_change(path, 10, 0, [] {}));
  REQUIRE(shorter.error);
  CHECK(*shorter.error == "open line file '" + path +
                              "': it has 4 bytes, not the 10 it had when the job started (its fingerprint): it was "
                              "truncated or replaced while the job ran; an input must not change until the job ends");
  const auto longer = sync_wait(read_around_change(path, 3, 0, [] {}));
  REQUIRE(longer.error);
  CHECK(longer.error->find("it has 4 bytes, not the 3 it had when the job started (its fingerprint): it was appended "
                           "to or replaced") != std::string::npos);
  const auto same = sync_wait(read_around_change(path, 4, 0, [] {}));
  CHECK_FALSE(same.error);
  CHECK(same.lines == std::vector<std::string>{"a", "b"});
}

TEST_CASE("a kernel file whose stat size is 0 is refused once read past it", "[line_file_reader]") {
  const auto out = sync_wait(read_around_change("/proc/version", std::nullopt, 0, [] {}));
  CHECK(out.file_size == 0);
  CHECK(out.lines.empty());
  REQUIRE(out.error);
  CHECK(*out.error == "read line file '/proc/version': it reads more bytes than its size (0 bytes when it was opened): "
                      "it is a file whose size does not tell its length (one of /proc or /sys); an input must be a "
                      "regular file that does not change until the job ends");
}
