// Job identity end to end: every checkpoint carries the job's fingerprint, and a run whose job,
// graph, parallelism or inputs differ from the checkpoint it would resume is refused before any task
// starts (exit code 2, naming the difference), leaving the checkpoint and output directories as they
// were; a run that matches resumes to the exact output. Inputs that cannot be replayed are refused.
#include <sluice/dataflow/job_fingerprint.hpp>
#include <sluice/dataflow/job_runner.hpp>
#include <sluice/dataflow/samples.hpp>
#include <sluice/snapshot/manifest.hpp>

#include <support/temp_dir.hpp>

#include "join_support.hpp"
#include "wordcount_support.hpp"

#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <span>
#include <string>
#include <vector>

using namespace sluice::dataflow;
using sluice::snapshot::checkpoint_mode;
using sluice::test::expected_counts;
using sluice::test::nested_loop_join;
using sluice::test::published_lines;
using sluice::test::temp_dir;
using sluice::test::write_corpus_file;
using sluice::test::write_join_file;

namespace fs = std::filesystem;

namespace {

struct wordcount_args {
  std::string input;
  std::string output;
  std::size_t parallelism = 2;
  std::uint64_t window_lines = 0;
};

job_settings settings_for(const temp_dir& dir, const std::string& checkpoints = "checkpoints") {
  return sluice::test::test_job_settings(dir.file(checkpoints), checkpoint_mode::aligned, "local");
}

job_result run_wordcount(const temp_dir& dir, const wordcount_args& a, const std::string& checkpoints = "checkpoints") {
  job_builder job("wordcount");
  build_wordcount(job, {a.input, a.output, a.parallelism, a.window_lines});
  return run_job(job, settings_for(dir, checkpoints));
}

job_result run_join(const temp_dir& dir, std::uint64_t window_ms) {
  job_builder job("join");
  build_join(job, {dir.file("left.csv"), dir.file("right.csv"), dir.file("out"), 2, window_ms, {}});
  return run_job(job, settings_for(dir));
}

// Word count in a child process that kills itself with SIGKILL the moment a checkpoint completes:
// a crash with a checkpoint to resume from.
void crash_after_first_checkpoint(const temp_dir& dir, const wordcount_args& a) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    try {
      job_builder job("wordcount");
      build_wordcount(job, {a.input, a.output, a.parallelism, a.window_lines});
      job_settings settings = settings_for(dir);
      settings.on_checkpoint = [](const sluice::snapshot::checkpoint_stats& s) {
        if (s.outcome.completed()) ::kill(::getpid(), SIGKILL);
      };
      (void)run_job(job, settings);
    } catch (...) {
    }
    ::_exit(3);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFSIGNALED(status));
  REQUIRE(WTERMSIG(status) == SIGKILL);
}

std::string file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Every entry under `root` (hidden ones too) with its content: what "unchanged" compares.
std::map<std::string, std::string> tree_of(const std::string& root) {
  std::map<std::string, std::string> out;
  if (!fs::exists(root)) return out;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (e.path().filename() == ".sluice-lock") continue;  // taken before the checkpoint is read
    out[fs::relative(e.path(), root).string()] = e.is_regular_file() ? file_bytes(e.path()) : std::string("<dir>");
  }
  return out;
}

// Changes one letter of `path` in place: the same size, other content.
void change_one_letter(const std::string& path) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  REQUIRE(f.good());
  char c = 0;
  std::streamoff at = 0;
  while (f.get(c) && !(c >= 'a' && c <= 'y')) ++at;
  REQUIRE((c >= 'a' && c <= 'y'));
  f.seekp(at);
  f.put(static_cast<char>(c + 1));
  REQUIRE(f.good());
}

// The checkpoints that committed. A job that ends while a checkpoint is in flight leaves that one's
// directory prepared, with an empty _manifest (never committed, docs/design.md invariant 7).
std::vector<fs::path> committed_checkpoint_dirs(const std::string& root) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(root)) {
    const bool committed = fs::exists(e.path() / "_manifest") && fs::file_size(e.path() / "_manifest") > 0;
    if (e.path().filename().string().rfind("chk-", 0) == 0 && committed) out.push_back(e.path());
  }
  return out;
}

sluice::snapshot::checkpoint_manifest manifest_of(const fs::path& chk) {
  auto m = sluice::snapshot::decode_manifest(file_bytes(chk / "_manifest"), (chk / "_manifest").string());
  REQUIRE(m.ok());
  return std::move(m).value();
}

}  // namespace

TEST_CASE("every checkpoint's manifest carries the fingerprint of the job that took it", "[dataflow][identity]") {
  temp_dir dir;
  write_corpus_file(dir.file("input.txt"), 3'000, 3);
  const wordcount_args args{dir.file("input.txt"), dir.file("out")};
  const job_result r = run_wordcount(dir, args);
  INFO(r.message);
  REQUIRE(r.exit_code == 0);
  job_builder job("wordcount");
  build_wordcount(job, {args.input, args.output, 2, 0});
  const job_fingerprint expected = fingerprint_job(job);
  const auto dirs = committed_checkpoint_dirs(dir.file("checkpoints"));
  REQUIRE_FALSE(dirs.empty());
  for (const fs::path& chk : dirs) {
    const auto m = manifest_of(chk);
    const auto it = m.metadata.find(std::string(sluice::snapshot::job_fingerprint_key));
    REQUIRE(it != m.metadata.end());
    auto fp = decode_fingerprint(std::string_view(reinterpret_cast<const char*>(it->second.data()), it->second.size()));
    REQUIRE(fp.ok());
    CHECK(fp.value() == expected);
  }
}

TEST_CASE("word count resumed after a crash with another parallelism is refused, naming both, and changes nothing, "
          "with its own it resumes to the exact output",
          "[dataflow][identity]") {
  temp_dir dir;
  write_corpus_file(dir.file("input.txt"), 100'000, 21);
  const wordcount_args args{dir.file("input.txt"), dir.file("out"), 2};
  crash_after_first_checkpoint(dir, args);
  const auto checkpoints_before = tree_of(dir.file("checkpoints"));
  const auto output_before = tree_of(dir.file("out"));
  REQUIRE_FALSE(checkpoints_before.empty());

  wordcount_args wider = args;
  wider.parallelism = 3;
  const job_result refused = run_wordcount(dir, wider);
  INFO(refused.message);
  CHECK(refused.exit_code == 2);
  CHECK_FALSE(refused.resumed_from);
  CHECK(refused.message.find("was taken with stage 'read' at parallelism 2; this run has 3") != std::string::npos);
  CHECK(refused.message.find("was taken with stage 'count' at parallelism 2; this run has 3") != std::string::npos);
  CHECK(tree_of(dir.file("checkpoints")) == checkpoints_before);  // no new chk-N, nothing removed
  CHECK(tree_of(dir.file("out")) == output_before);               // nothing published or deleted

  const job_result resumed = run_wordcount(dir, args);
  INFO(resumed.message);
  REQUIRE(resumed.exit_code == 0);
  CHECK(resumed.resumed_from.has_value());
  CHECK(published_lines(dir.file("out")) == expected_counts(dir.file("input.txt"), 0));
}

TEST_CASE("a resume over another input file of the same size is refused, naming both files", "[dataflow][identity]") {
  temp_dir dir;
  write_corpus_file(dir.file("a.txt"), 20'000, 5);
  fs::copy_file(dir.file("a.txt"), dir.file("b.txt"));
  change_one_letter(dir.file("b.txt"));
  REQUIRE(fs::file_size(dir.file("a.txt")) == fs::file_size(dir.file("b.txt")));
  crash_after_first_checkpoint(dir, {dir.file("a.txt"), dir.file("out")});
  const auto checkpoints_before = tree_of(dir.file("checkpoints"));
  const auto output_before = tree_of(dir.file("out"));

  const job_result refused = run_wordcount(dir, {dir.file("b.txt"), dir.file("out")});
  INFO(refused.message);
  CHECK(refused.exit_code == 2);
  const std::string size = std::to_string(fs::file_size(dir.file("a.txt")));
  CHECK(refused.message.find("read input '" + dir.file("a.txt") + "' (" + size + " bytes, crc32c 0x") != std::string::npos);
  CHECK(refused.message.find("this run reads '" + dir.file("b.txt") + "' (" + size + " bytes, crc32c 0x") !=
        std::string::npos);
  CHECK(tree_of(dir.file("checkpoints")) == checkpoints_before);
  CHECK(tree_of(dir.file("out")) == output_before);
}

TEST_CASE("a resume over an input changed in place is refused, put back, it resumes to the exact output",
          "[dataflow][identity]") {
  temp_dir dir;
  write_corpus_file(dir.file("input.txt"), 20'000, 6);
  const std::string original = file_bytes(dir.file("input.txt"));
  const wordcount_args args{dir.file("input.txt"), dir.file("out")};
  crash_after_first_checkpoint(dir, args);
  const auto checkpoints_before = tree_of(dir.file("checkpoints"));

  change_one_letter(dir.file("input.txt"));
  const job_result refused = run_wordcount(dir, args);
  INFO(refused.message);
  CHECK(refused.exit_code == 2);
  CHECK(refused.message.find("this run reads '" + dir.file("input.txt") + "' (") != std::string::npos);
  CHECK(refused.message.find("the file changed since the checkpoint") != std::string::npos);
  CHECK(tree_of(dir.file("checkpoints")) == checkpoints_before);

  std::ofstream(dir.file("input.txt"), std::ios::binary | std::ios::trunc) << original;
  const job_result resumed = run_wordcount(dir, args);
  INFO(resumed.message);
  REQUIRE(resumed.exit_code == 0);
  CHECK(resumed.resumed_from.has_value());
  CHECK(published_lines(dir.file("out")) == expected_counts(dir.file("input.txt"), 0));
}

TEST_CASE("a resume over an input truncated or appended since the checkpoint is refused naming both sizes",
          "[dataflow][identity]") {
  const bool truncate = GENERATE(true, false);
  temp_dir dir;
  write_corpus_file(dir.file("input.txt"), 20'000, 8);
  const std::string original = file_bytes(dir.file("input.txt"));
  const wordcount_args args{dir.file("input.txt"), dir.file("out")};
  crash_after_first_checkpoint(dir, args);
  const auto checkpoints_before = tree_of(dir.file("checkpoints"));

  if (truncate) {
    fs::resize_file(dir.file("input.txt"), original.size() - 100);
  } else {
    std::ofstream(dir.file("input.txt"), std::ios::binary | std::ios::app) << "more words\n";
  }
  const job_result refused = run_wordcount(dir, args);
  INFO(refused.message);
  CHECK(refused.exit_code == 2);
  CHECK(refused.message.find("read input '" + dir.file("input.txt") + "' (" + std::to_string(original.size()) +
                             " bytes, crc32c 0x") != std::string::npos);
  CHECK(refused.message.find(truncate ? "the file changed since the checkpoint (it is 100 bytes shorter: truncated)"
                                      : "the file changed since the checkpoint (it is 11 bytes longer: appended to)") !=
        std::string::npos);
  CHECK(refused.message.find("not resuming") != std::string::npos);
  CHECK(tree_of(dir.file("checkpoints")) == checkpoints_before);

  std::ofstream(dir.file("input.txt"), std::ios::binary | std::ios::trunc) << original;
  const job_result resumed = run_wordcount(dir, args);
  INFO(resumed.message);
  REQUIRE(resumed.exit_code == 0);
  CHECK(resumed.resumed_from.has_value());
  CHECK(published_lines(dir.file("out")) == expected_counts(dir.file("input.txt"), 0));
}

TEST_CASE("a finished join rerun with another window is refused naming window_ms, with its own it changes nothing",
          "[dataflow][identity][join]") {
  temp_dir dir;
  write_join_file(dir.file("left.csv"), 2'000, 20, 10'000, 1, "L");
  write_join_file(dir.file("right.csv"), 2'000, 20, 10'000, 2, "R");
  const job_result first = run_join(dir, 1000);
  INFO(first.message);
  REQUIRE(first.exit_code == 0);
  const auto checkpoints_before = tree_of(dir.file("checkpoints"));
  const auto output_before = tree_of(dir.file("out"));

  const job_result refused = run_join(dir, 500);
  INFO(refused.message);
  CHECK(refused.exit_code == 2);
  CHECK(refused.message.find("was taken with window_join.window_ms=1000 (stage 'join'); this run has 500") !=
        std::string::npos);
  CHECK(tree_of(dir.file("checkpoints")) == checkpoints_before);
  CHECK(tree_of(dir.file("out")) == output_before);

  const job_result again = run_join(dir, 1000);
  INFO(again.message);
  REQUIRE(again.exit_code == 0);
  CHECK(again.resumed_from.has_value());
  CHECK(published_lines(dir.file("out")) == nested_loop_join(dir.file("left.csv"), dir.file("right.csv"), 1000));
}

TEST_CASE("word count pointed at a join's checkpoint directory is refused, naming both jobs", "[dataflow][identity]") {
  temp_dir dir;
  write_join_file(dir.file("left.csv"), 500, 10, 5'000, 1, "L");
  write_join_file(dir.file("right.csv"), 500, 10, 5'000, 2, "R");
  REQUIRE(run_join(dir, 1000).exit_code == 0);
  write_corpus_file(dir.file("input.txt"), 1'000, 3);
  const auto checkpoints_before = tree_of(dir.file("checkpoints"));

  const job_result refused = run_wordcount(dir, {dir.file("input.txt"), dir.file("words")});
  INFO(refused.message);
  CHECK(refused.exit_code == 2);
  CHECK(refused.message.rfind("checkpoint ", 0) == 0);
  CHECK(refused.message.find("belongs to job 'join'; this run is job 'wordcount'") != std::string::npos);
  CHECK(tree_of(dir.file("checkpoints")) == checkpoints_before);
  CHECK_FALSE(fs::exists(dir.file("words")));
}

TEST_CASE("a finished word count rerun with other arguments is refused, with the same it changes nothing",
          "[dataflow][identity]") {
  temp_dir dir;
  write_corpus_file(dir.file("input.txt"), 3'000, 8);
  const wordcount_args args{dir.file("input.txt"), dir.file("out")};
  REQUIRE(run_wordcount(dir, args).exit_code == 0);
  const auto checkpoints_before = tree_of(dir.file("checkpoints"));
  const auto published = published_lines(dir.file("out"));
  REQUIRE(published == expected_counts(dir.file("input.txt"), 0));

  wordcount_args windowed = args;
  windowed.window_lines = 100;
  const job_result by_window = run_wordcount(dir, windowed);
  INFO(by_window.message);
  CHECK(by_window.exit_code == 2);
  CHECK(by_window.message.find("stage 'read' built as [source=read_lines, op=flat_map, op=combine, output=key_by]; "
                               "this run builds it as [source=read_indexed_lines, op=flat_map, output=key_by]") !=
        std::string::npos);
  wordcount_args elsewhere = args;
  elsewhere.output = dir.file("other-out");
  const job_result other_output = run_wordcount(dir, elsewhere);
  INFO(other_output.message);
  CHECK(other_output.exit_code == 2);
  CHECK(other_output.message.find("write_lines.dir=" + dir.file("out") + " (stage 'count'); this run has " +
                                  dir.file("other-out")) != std::string::npos);
  CHECK(tree_of(dir.file("checkpoints")) == checkpoints_before);

  const job_result same = run_wordcount(dir, args);
  INFO(same.message);
  REQUIRE(same.exit_code == 0);
  CHECK(same.resumed_from.has_value());
  CHECK(published_lines(dir.file("out")) == published);
}

namespace {

// Runs a word count to its end, rewrites every manifest's metadata with `rewrite` (as an older build
// wrote it), then runs it again: refused (exit 2) with `named` in the message, nothing changed.
template <class Rewrite>
void refused_after_rewrite(Rewrite rewrite, const std::string& named) {
  temp_dir dir;
  write_corpus_file(dir.file("input.txt"), 2'000, 9);
  const wordcount_args args{dir.file("input.txt"), dir.file("out")};
  REQUIRE(run_wordcount(dir, args).exit_code == 0);
  for (const fs::path& chk : committed_checkpoint_dirs(dir.file("checkpoints"))) {
    auto m = manifest_of(chk);
    rewrite(m.metadata);
    std::ofstream(chk / "_manifest", std::ios::binary | std::ios::trunc) << sluice::snapshot::encode_manifest(m);
  }
  const auto checkpoints_before = tree_of(dir.file("checkpoints"));
  const auto output_before = tree_of(dir.file("out"));

  const job_result refused = run_wordcount(dir, args);
  INFO(refused.message);
  CHECK(refused.exit_code == 2);
  CHECK(refused.message.find(named) != std::string::npos);
  CHECK(refused.message.find(dir.file("checkpoints")) != std::string::npos);
  CHECK(tree_of(dir.file("checkpoints")) == checkpoints_before);
  CHECK(tree_of(dir.file("out")) == output_before);
}

using manifest_metadata = std::map<std::string, std::vector<std::byte>>;

// The fingerprint in `meta` as a build of fingerprint version `version` wrote it (its header).
void rewrite_version(manifest_metadata& meta, int version) {
  const std::string now = "sluice-fingerprint " + std::to_string(job_fingerprint_version) + "\n";
  auto& bytes = meta.at(std::string(sluice::snapshot::job_fingerprint_key));
  std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  REQUIRE(text.rfind(now, 0) == 0);
  text.replace(0, now.size(), "sluice-fingerprint " + std::to_string(version) + "\n");
  const auto raw = std::as_bytes(std::span<const char>(text.data(), text.size()));
  bytes.assign(raw.begin(), raw.end());
}

}  // namespace

TEST_CASE("a checkpoint that records no fingerprint predates identity checks and is refused", "[dataflow][identity]") {
  refused_after_rewrite(
      [](manifest_metadata& meta) { REQUIRE(meta.erase(std::string(sluice::snapshot::job_fingerprint_key)) == 1); },
      "records no job fingerprint: it predates job identity checks");
}

TEST_CASE("a checkpoint of an earlier build (fingerprint version 1) is refused before any sink reads its state",
          "[dataflow][identity]") {
  // Version 1 wrote sink state without the run's framing (sink_run.cpp).
  refused_after_rewrite([](manifest_metadata& meta) { rewrite_version(meta, 1); },
                        "was taken by an earlier sluice build (job fingerprint version 1");
}

TEST_CASE("a checkpoint taken before key groups (fingerprint version 2) is refused before any task restores it",
          "[dataflow][identity][key_group]") {
  // Version 2 routed key_by by stable_hash(key) mod n: its keyed state is in the wrong tasks.
  refused_after_rewrite([](manifest_metadata& meta) { rewrite_version(meta, 2); },
                        "was taken by an earlier sluice build (job fingerprint version 2; this build writes 3)");
}

TEST_CASE("run_job refuses a FIFO, a character device or a directory as input before it makes anything",
          "[dataflow][identity]") {
  temp_dir dir;
  REQUIRE(::mkfifo(dir.file("fifo").c_str(), 0600) == 0);
  const std::string replayable = ": exactly-once needs a replayable source (a regular file that can be read again "
                                 "from a checkpointed offset)";
  struct refused_input {
    std::string path;
    std::string kind;
  };
  for (const refused_input& in : {refused_input{dir.file("fifo"), "a pipe or FIFO"},
                                  refused_input{"/dev/null", "a character device"},
                                  refused_input{dir.path(), "a directory"}}) {
    INFO(in.path);
    const job_result r = run_wordcount(dir, {in.path, dir.file("out")});
    CHECK(r.exit_code == 2);
    CHECK(r.message.rfind("input '" + in.path + "' is " + in.kind + replayable, 0) == 0);
    CHECK_FALSE(fs::exists(dir.file("checkpoints")));
    CHECK_FALSE(fs::exists(dir.file("out")));
  }
}
