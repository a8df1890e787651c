// The job fingerprint on its own: what the sample jobs' fingerprints hold, the text form through the
// manifest, the differences it names, and the inputs it refuses (job_fingerprint.hpp).
#include <sluice/buffers/crc32c.hpp>
#include <sluice/dataflow/generate.hpp>
#include <sluice/dataflow/job_fingerprint.hpp>
#include <sluice/dataflow/line_file_reader.hpp>
#include <sluice/dataflow/samples.hpp>
#include <sluice/dataflow/sinks.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/system.hpp>
#include <sluice/snapshot/manifest.hpp>

#include <support/recording_system.hpp>
#include <support/temp_dir.hpp>

#include "wordcount_support.hpp"

#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <vector>

using namespace sluice::dataflow;
using sluice::test::temp_dir;

namespace {

job_fingerprint wordcount_identity(std::size_t parallelism, std::uint64_t window_lines = 0,
                                   const std::string& input = "/data/in.txt", const std::string& out = "/data/out") {
  job_builder job("wordcount");
  build_wordcount(job, {input, out, parallelism, window_lines});
  return describe_job(job);
}

job_fingerprint join_identity(std::uint64_t window_ms, std::chrono::microseconds slow_sink = {}) {
  job_builder job("join");
  build_join(job, {"/data/l.csv", "/data/r.csv", "/data/out", 2, window_ms, slow_sink});
  return describe_job(job);
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string refusal_of(const job_builder& job) {
  try {
    (void)fingerprint_job(job);
  } catch (const job_refused& e) {
    return std::to_string(e.exit_code()) + ": " + e.what();
  }
  return "accepted";
}

job_builder wordcount_over(const std::string& input, const std::string& out) {
  job_builder job("wordcount");
  build_wordcount(job, {input, out, 2, 0});
  return job;
}

}  // namespace

TEST_CASE("the word-count fingerprint names every stage, its parallelism, upstreams and chain", "[dataflow][fingerprint]") {
  const job_fingerprint fp = wordcount_identity(2);
  CHECK(fp.job == "wordcount");
  REQUIRE(fp.stages.size() == 2);
  CHECK(fp.stages[0] ==
        stage_identity{"read", 2, {}, {"source=read_lines", "op=flat_map", "op=combine", "output=key_by"}});
  CHECK(fp.stages[1] ==
        stage_identity{"count", 2, {0}, {"key_groups=128", "op=aggregate", "sink=write_lines", "write_lines.dir=/data/out"}});
  REQUIRE(fp.inputs.size() == 1);
  CHECK(fp.inputs[0].stage == 0);
  CHECK(fp.inputs[0].path == "/data/in.txt");
  // A slow sink (`wordcount --slow-sink-us`) changes when lines are written, not which: not identity.
  for (const std::uint64_t window : {std::uint64_t{0}, std::uint64_t{1000}}) {
    job_builder slow("wordcount");
    build_wordcount(slow, {"/data/in.txt", "/data/out", 2, window, std::chrono::microseconds(500)});
    CHECK(describe_job(slow) == wordcount_identity(2, window));
  }
}

TEST_CASE("the windowed word-count fingerprint has its own source and the window's kind and size",
          "[dataflow][fingerprint]") {
  const job_fingerprint fp = wordcount_identity(3, 1000);
  REQUIRE(fp.stages.size() == 2);
  CHECK(fp.stages[0] == stage_identity{"read", 1, {}, {"source=read_indexed_lines", "op=flat_map", "output=key_by"}});
  CHECK(fp.stages[1] == stage_identity{"count", 3, {0},
                                       {"key_groups=128", "op=window", "window.kind=tumbling", "window.size=1000",
                                        "sink=write_lines", "write_lines.dir=/data/out"}});
}

TEST_CASE("the join fingerprint has both sources, the window join reading them in order, and its window",
          "[dataflow][fingerprint]") {
  const job_fingerprint fp = join_identity(1000);
  REQUIRE(fp.stages.size() == 3);
  const std::vector<std::string> side{"source=read_timed_lines", "op=map", "output=key_by"};
  CHECK(fp.stages[0] == stage_identity{"left", 2, {}, side});
  CHECK(fp.stages[1] == stage_identity{"right", 2, {}, side});
  CHECK(fp.stages[2] == stage_identity{"join", 2, {0, 1},
                                       {"key_groups=128", "op=window_join", "window_join.kind=tumbling",
                                        "window_join.window_ms=1000", "sink=write_lines", "write_lines.dir=/data/out"}});
  REQUIRE(fp.inputs.size() == 2);
  CHECK(fp.inputs[0].path == "/data/l.csv");
  CHECK(fp.inputs[1].stage == 1);
  // A slow sink changes when lines are written, not which: not identity.
  CHECK(join_identity(1000, std::chrono::microseconds(200)) == fp);
}

TEST_CASE("generate records its count, print its kind, and identify() a parameter of one's own",
          "[dataflow][fingerprint]") {
  job_builder job("gen");
  job.generate<std::uint64_t>("gen", 2, 500, [](std::uint64_t n) { return n; }, 1000.0)
      .filter([](const std::uint64_t& n) { return n % 3 == 0; })
      .identify("filter.modulus", "3")
      .key_by<std::uint64_t>([](const std::uint64_t& n) { return n; })
      .partition("spread", 1)
      .map<std::string>([](const std::uint64_t& n) { return std::to_string(n); })
      .print([](const std::string& s) { return s; });
  const job_fingerprint fp = describe_job(job);
  REQUIRE(fp.stages.size() == 2);
  CHECK(fp.stages[0].entries ==
        std::vector<std::string>{"source=generate", "generate.count=500", "op=filter", "filter.modulus=3", "output=key_by"});
  CHECK(fp.stages[1].entries == std::vector<std::string>{"key_groups=128", "op=partition", "op=map", "sink=print"});
  CHECK(fp.inputs.empty());
}

TEST_CASE("an output directory is identified by its absolute, normal path", "[dataflow][fingerprint]") {
  CHECK(detail::identity_path("/data/out/") == "/data/out");
  CHECK(detail::identity_path("/data/./x/../out") == "/data/out");
  const std::string cwd = std::filesystem::current_path().string();
  CHECK(detail::identity_path("out") == cwd + "/out");
}

TEST_CASE("a fingerprint round-trips through its text form, odd bytes and all", "[dataflow][fingerprint]") {
  job_fingerprint fp = join_identity(1000);
  fp.job = "a job % with spaces\nand a newline";
  fp.stages[0].name = "";
  fp.stages[1].entries.push_back("odd=\x01\xff=%41 ");
  fp.inputs[0] = input_identity{0, "/data/with space/l.csv", 1048576, 0x1234abcd};
  const std::string text = encode_fingerprint(fp);
  CHECK(text.rfind("sluice-fingerprint 3\njob a%20job%20%25%20with%20spaces%0Aand%20a%20newline\nstage  2 - 3\n", 0) == 0);
  CHECK(text.find("stage join 2 0,1 6\n") != std::string::npos);
  CHECK(text.find("input 0 1048576 1234abcd /data/with%20space/l.csv\n") != std::string::npos);
  auto back = decode_fingerprint(text);
  REQUIRE(back.ok());
  CHECK(back.value() == fp);
}

TEST_CASE("a fingerprint that is damaged, cut short or of another version does not decode, naming the line",
          "[dataflow][fingerprint]") {
  const std::string text = encode_fingerprint(wordcount_identity(2));
  const auto error_of = [](std::string_view t) {
    auto r = decode_fingerprint(t);
    return r.ok() ? std::string("decoded") : r.error().message();
  };
  CHECK(error_of("sluice-fingerprint 4\njob x\n") == "job fingerprint: line 1: unsupported version 4 (this build reads 3)");
  CHECK(error_of(text.substr(0, text.size() - 1)) == "job fingerprint: cut short (no '\\n' at the end)");
  CHECK(error_of("sluice-fingerprint 3\njob x\nstage a 1 - 2\nentry op=map\n") ==
        "job fingerprint: line 5: expected 'entry <key=value>'");
  CHECK(error_of("sluice-fingerprint 3\njob x%4\n") == "job fingerprint: line 2: expected 'job <name>'");
  CHECK(error_of("sluice-fingerprint 3\njob x\nstage a 1 3 0\n") ==
        "job fingerprint: line 3: upstream '3' is not an earlier stage");
  CHECK(error_of("sluice-fingerprint 3\njob x\nstage a 1 - 0\ninput 4 1 00000000 p\n") ==
        "job fingerprint: line 4: expected 'input <stage> <size_bytes> <crc32c> <path>'");
  for (std::size_t cut = 1; cut + 1 < text.size(); ++cut) {
    if (text[cut - 1] == '\n') continue;  // a cut after a whole line may still parse (fewer inputs)
    REQUIRE_FALSE(decode_fingerprint(text.substr(0, cut)).ok());
  }
}

TEST_CASE("a fingerprint travels with the manifest and comes back unchanged", "[dataflow][fingerprint]") {
  job_fingerprint fp = wordcount_identity(2);
  fp.inputs[0].size_bytes = 99;
  fp.inputs[0].crc32c = 0xdeadbeef;
  sluice::snapshot::checkpoint_manifest m;
  m.checkpoint = 7;
  m.metadata = fingerprint_metadata(fp);
  auto decoded = sluice::snapshot::decode_manifest(sluice::snapshot::encode_manifest(m), "chk-7/_manifest");
  REQUIRE(decoded.ok());
  const auto& meta = decoded.value().metadata;
  const auto it = meta.find(std::string(sluice::snapshot::job_fingerprint_key));
  REQUIRE(it != meta.end());
  auto back = decode_fingerprint(std::string_view(reinterpret_cast<const char*>(it->second.data()), it->second.size()));
  REQUIRE(back.ok());
  CHECK(back.value() == fp);
}

TEST_CASE("fingerprint differences are named in user terms", "[dataflow][fingerprint]") {
  using strings = std::vector<std::string>;
  CHECK(fingerprint_differences(wordcount_identity(2), wordcount_identity(2), 7).empty());
  CHECK(fingerprint_differences(wordcount_identity(2), wordcount_identity(3), 7) ==
        strings{"checkpoint 7 was taken with stage 'read' at parallelism 2; this run has 3",
                "checkpoint 7 was taken with stage 'count' at parallelism 2; this run has 3"});
  CHECK(fingerprint_differences(join_identity(1000), join_identity(500), 7) ==
        strings{"checkpoint 7 was taken with window_join.window_ms=1000 (stage 'join'); this run has 500"});
  CHECK(fingerprint_differences(join_identity(1000), wordcount_identity(2), 7) ==
        strings{"checkpoint 7 belongs to job 'join'; this run is job 'wordcount'"});
  CHECK(fingerprint_differences(wordcount_identity(2, 0, "/data/in.txt", "/data/out"),
                                wordcount_identity(2, 0, "/data/in.txt", "/data/other"), 3) ==
        strings{"checkpoint 3 was taken with write_lines.dir=/data/out (stage 'count'); this run has /data/other"});
  CHECK(fingerprint_differences(wordcount_identity(2, 1000), wordcount_identity(2, 500), 4) ==
        strings{"checkpoint 4 was taken with window.size=1000 (stage 'count'); this run has 500"});
  CHECK(fingerprint_differences(wordcount_identity(1, 1000), wordcount_identity(2, 0), 4) ==
        strings{"checkpoint 4 was taken with stage 'read' at parallelism 1; this run has 2",
                "checkpoint 4 was taken with stage 'read' built as [source=read_indexed_lines, op=flat_map, "
                "output=key_by]; this run builds it as [source=read_lines, op=flat_map, op=combine, output=key_by]",
                "checkpoint 4 was taken with stage 'count' at parallelism 1; this run has 2",
                "checkpoint 4 was taken with stage 'count' built as [key_groups=128, op=window, window.kind=tumbling, "
                "window.size=1000, sink=write_lines, write_lines.dir=/data/out]; this run builds it as [key_groups=128, "
                "op=aggregate, sink=write_lines, write_lines.dir=/data/out]"});
}

TEST_CASE("inputs differ by content: another file, a changed file, the same bytes under another path match",
          "[dataflow][fingerprint]") {
  using strings = std::vector<std::string>;
  job_fingerprint taken = wordcount_identity(2, 0, "a.txt");
  taken.inputs[0].size_bytes = 1048576;
  taken.inputs[0].crc32c = 0x1234abcd;
  job_fingerprint other = wordcount_identity(2, 0, "b.txt");
  other.inputs[0].size_bytes = 1048576;
  other.inputs[0].crc32c = 0x0badf00d;
  CHECK(fingerprint_differences(taken, other, 7) ==
        strings{"checkpoint 7 read input 'a.txt' (1048576 bytes, crc32c 0x1234abcd); this run reads 'b.txt' "
                "(1048576 bytes, crc32c 0x0badf00d)"});
  job_fingerprint changed = taken;
  changed.inputs[0].crc32c = 0x0badf00d;
  CHECK(fingerprint_differences(taken, changed, 7) ==
        strings{"checkpoint 7 read input 'a.txt' (1048576 bytes, crc32c 0x1234abcd); this run reads 'a.txt' "
                "(1048576 bytes, crc32c 0x0badf00d): the file changed since the checkpoint"});
  job_fingerprint cut = taken;
  cut.inputs[0].size_bytes = 1000000;
  CHECK(fingerprint_differences(taken, cut, 7) ==
        strings{"checkpoint 7 read input 'a.txt' (1048576 bytes, crc32c 0x1234abcd); this run reads 'a.txt' "
                "(1000000 bytes, crc32c 0x1234abcd): the file changed since the checkpoint (it is 48576 bytes "
                "shorter: truncated)"});
  job_fingerprint grown = taken;
  grown.inputs[0].size_bytes = 1048600;
  CHECK(fingerprint_differences(taken, grown, 7).at(0).find(
            "the file changed since the checkpoint (it is 24 bytes longer: appended to)") != std::string::npos);
  job_fingerprint copy = wordcount_identity(2, 0, "./copy-of-a.txt");
  copy.inputs[0].size_bytes = 1048576;
  copy.inputs[0].crc32c = 0x1234abcd;
  CHECK(fingerprint_differences(taken, copy, 7).empty());
}

TEST_CASE("fingerprint_job records each input's size and the CRC32C of all its bytes", "[dataflow][fingerprint]") {
  temp_dir dir;
  sluice::test::write_corpus_file(dir.file("in.txt"), 3000, 4);
  const job_builder job = wordcount_over(dir.file("in.txt"), dir.file("out"));
  const job_fingerprint fp = fingerprint_job(job);
  const std::string bytes = file_bytes(dir.file("in.txt"));
  REQUIRE(fp.inputs.size() == 1);
  CHECK(fp.inputs[0].size_bytes == bytes.size());
  CHECK(fp.inputs[0].crc32c == sluice::buffers::crc32c(std::as_bytes(std::span<const char>(bytes.data(), bytes.size()))));
}

TEST_CASE("an input that is a FIFO, a pipe, a character device or a directory is refused as not replayable",
          "[dataflow][fingerprint]") {
  temp_dir dir;
  const std::string why = ": exactly-once needs a replayable source (a regular file that can be read again from a "
                          "checkpointed offset); ";
  REQUIRE(::mkfifo(dir.file("fifo").c_str(), 0600) == 0);
  // No writer ever opens the FIFO: refusing it must not block.
  CHECK(refusal_of(wordcount_over(dir.file("fifo"), dir.file("out"))) ==
        "2: input '" + dir.file("fifo") + "' is a pipe or FIFO" + why + "save the stream to a file first");
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const std::string pipe_path = "/proc/self/fd/" + std::to_string(fds[0]);  // what /dev/stdin is under `cmd |`
  CHECK(refusal_of(wordcount_over(pipe_path, dir.file("out"))) ==
        "2: input '" + pipe_path + "' is a pipe or FIFO" + why + "save the stream to a file first");
  ::close(fds[0]);
  ::close(fds[1]);
  CHECK(refusal_of(wordcount_over("/dev/null", dir.file("out"))) ==
        "2: input '/dev/null' is a character device" + why + "save the stream to a file first");
  CHECK(refusal_of(wordcount_over(dir.path(), dir.file("out"))) ==
        "2: input '" + dir.path() + "' is a directory" + why + "name a file, not a directory");
  CHECK(refusal_of(wordcount_over(dir.file("missing.txt"), dir.file("out"))) ==
        "1: open input '" + dir.file("missing.txt") + "': No such file or directory");
}

TEST_CASE("an input that reads past its stat size such as /proc/version is refused as not replayable",
          "[dataflow][fingerprint]") {
  CHECK(refusal_of(wordcount_over("/proc/version", "/nonexistent/out")) ==
        "2: input '/proc/version': it reads more bytes than its size (0 bytes): it is a file whose size does not tell "
        "its length (one of /proc or /sys), or one being appended to; exactly-once needs a replayable source (a "
        "regular file that can be read again from a checkpointed offset and does not change until the job ends): "
        "save it to a file first");
}

TEST_CASE("a line file reader opened on a character device refuses it as not replayable", "[dataflow][fingerprint]") {
  auto opened = sluice::runtime::sync_wait(line_file_reader::open("/dev/null", 0));
  REQUIRE_FALSE(opened.ok());
  CHECK(opened.error().message().find("input '/dev/null' is a character device: exactly-once needs a replayable source") !=
        std::string::npos);
}

namespace {

sluice::snapshot::recovery_plan plan_with(std::optional<job_fingerprint> fp, std::string raw = {}) {
  sluice::snapshot::recovery_plan plan;
  plan.checkpoint = sluice::snapshot::checkpoint_info{};
  plan.checkpoint->id = 7;
  plan.checkpoint->valid = true;
  if (fp) plan.metadata = fingerprint_metadata(*fp);
  if (!raw.empty()) {
    const auto bytes = std::as_bytes(std::span<const char>(raw.data(), raw.size()));
    plan.metadata[std::string(sluice::snapshot::job_fingerprint_key)] = std::vector<std::byte>(bytes.begin(), bytes.end());
  }
  return plan;
}

}  // namespace

TEST_CASE("resume_refusal lets a fresh start and a matching checkpoint through and names what to do otherwise",
          "[dataflow][fingerprint]") {
  CHECK_FALSE(resume_refusal(wordcount_identity(2), sluice::snapshot::recovery_plan{}, "chk"));
  CHECK_FALSE(resume_refusal(wordcount_identity(2), plan_with(wordcount_identity(2)), "chk"));
  CHECK(resume_refusal(wordcount_identity(3), plan_with(wordcount_identity(2)), "chk") ==
        "checkpoint 7 was taken with stage 'read' at parallelism 2; this run has 3\n"
        "checkpoint 7 was taken with stage 'count' at parallelism 2; this run has 3\n"
        "not resuming from 'chk' (nothing was changed): rerun with the arguments checkpoint 7 was taken with, or start "
        "afresh with empty checkpoint and output directories; resuming at another parallelism (rescaling) is not "
        "supported yet");
  CHECK(resume_refusal(join_identity(500), plan_with(join_identity(1000)), "chk") ==
        "checkpoint 7 was taken with window_join.window_ms=1000 (stage 'join'); this run has 500\n"
        "not resuming from 'chk' (nothing was changed): rerun with the arguments checkpoint 7 was taken with, or start "
        "afresh with empty checkpoint and output directories");
  CHECK(resume_refusal(wordcount_identity(2), plan_with(std::nullopt), "chk") ==
        "checkpoint 7 under 'chk' records no job fingerprint: it predates job identity checks, so this run cannot tell "
        "whether it is a checkpoint of this job with these arguments; not resuming (nothing was changed): start afresh "
        "with empty checkpoint and output directories, or finish the job with the sluice build that wrote it");
  CHECK(resume_refusal(wordcount_identity(2), plan_with(std::nullopt, "sluice-fingerprint 9\n"), "chk") ==
        "checkpoint 7 under 'chk' records a job fingerprint this build cannot read (job fingerprint: line 1: "
        "unsupported version 9 (this build reads 3)); not resuming (nothing was changed): start afresh with empty "
        "checkpoint and output directories");
  CHECK(resume_refusal(wordcount_identity(2), plan_with(std::nullopt, "sluice-fingerprint 1\njob wordcount\n"), "chk") ==
        "checkpoint 7 under 'chk' was taken by an earlier sluice build (job fingerprint version 1; this build writes 3), "
        "whose operator and sink state this build cannot read; not resuming (nothing was changed): finish the job with "
        "the sluice build that took it, or start afresh with empty checkpoint and output directories");
}

TEST_CASE("a checkpoint taken before key groups is refused by its fingerprint version, not restored into other tasks",
          "[dataflow][fingerprint][key_group]") {
  // Version 2 routed key_by by stable_hash(key) mod n: its keyed state sits in tasks that no longer
  // receive those keys. The text is what such a build wrote for the word count.
  const std::string version_2 =
      "sluice-fingerprint 2\njob wordcount\nstage read 2 - 4\nentry source=read_lines\nentry op=flat_map\n"
      "entry op=combine\nentry output=key_by\nstage count 2 0 3\nentry op=aggregate\nentry sink=write_lines\n"
      "entry write_lines.dir=/data/out\ninput 0 0 00000000 /data/in.txt\n";
  CHECK(resume_refusal(wordcount_identity(2), plan_with(std::nullopt, version_2), "chk") ==
        "checkpoint 7 under 'chk' was taken by an earlier sluice build (job fingerprint version 2; this build writes 3), "
        "whose operator and sink state this build cannot read; not resuming (nothing was changed): finish the job with "
        "the sluice build that took it, or start afresh with empty checkpoint and output directories");
}

TEST_CASE("a resume with another max parallelism is refused naming the stage and both values",
          "[dataflow][fingerprint][key_group]") {
  const auto counts = [](std::size_t groups) {
    job_builder job("counts");
    job.generate<std::uint64_t>("gen", 1, 100, [](std::uint64_t n) { return n; })
        .key_by<std::uint64_t>([](const std::uint64_t& n) { return n % 7; })
        .max_parallelism(groups)
        .aggregate<std::uint64_t, std::string>(
            "count", 2, [](std::uint64_t& c, const std::uint64_t&) { ++c; },
            [](const std::uint64_t& k, const std::uint64_t& c) { return std::to_string(k) + " " + std::to_string(c); })
        .discard();
    return describe_job(job);
  };
  CHECK(fingerprint_differences(counts(128), counts(256), 7) ==
        std::vector<std::string>{"checkpoint 7 was taken with stage 'count' at max parallelism 128 (key groups); this "
                                 "run has 256"});
  CHECK(resume_refusal(counts(256), plan_with(counts(128)), "chk") ==
        "checkpoint 7 was taken with stage 'count' at max parallelism 128 (key groups); this run has 256\n"
        "not resuming from 'chk' (nothing was changed): rerun with the arguments checkpoint 7 was taken with, or start "
        "afresh with empty checkpoint and output directories; a keyed stage's max parallelism cannot change across a "
        "resume (its state is kept by key group)");
  CHECK_FALSE(resume_refusal(counts(128), plan_with(counts(128)), "chk"));
}

TEST_CASE("a checkpoint of the word count before its combiner is refused, naming both chains and the build",
          "[dataflow][fingerprint]") {
  // The word count's read stage gained op=combine: its exchange now carries (word, partial count)
  // pairs, not words, so an unaligned checkpoint's channel state of the older job does not decode.
  job_fingerprint before = wordcount_identity(2);
  auto& read = before.stages.at(0).entries;
  const auto combine = std::find(read.begin(), read.end(), "op=combine");
  REQUIRE(combine != read.end());
  read.erase(combine);
  CHECK(resume_refusal(wordcount_identity(2), plan_with(before), "chk") ==
        "checkpoint 7 was taken with stage 'read' built as [source=read_lines, op=flat_map, output=key_by]; this run "
        "builds it as [source=read_lines, op=flat_map, op=combine, output=key_by]\n"
        "not resuming from 'chk' (nothing was changed): rerun with the arguments checkpoint 7 was taken with, or start "
        "afresh with empty checkpoint and output directories; with the same arguments, the job's operators changed "
        "(another build of the job or of sluice): finish it with the build that took checkpoint 7");
}

TEST_CASE("a refusal names at most ten differences and counts the rest", "[dataflow][fingerprint]") {
  job_builder wide("many");
  job_builder wider("many");
  for (int i = 0; i < 12; ++i) {
    wide.add_stage("s" + std::to_string(i), 1, {});
    wider.add_stage("s" + std::to_string(i), 2, {});
  }
  const std::optional<std::string> refusal = resume_refusal(describe_job(wider), plan_with(describe_job(wide)), "chk");
  REQUIRE(refusal);
  CHECK(refusal->find("stage 's9' at parallelism 1; this run has 2\n(and 2 more differences)\n") != std::string::npos);
  CHECK(refusal->find("'s10'") == std::string::npos);
}

TEST_CASE("fingerprint_job reads its inputs and names relative outputs through the thread's system",
          "[dataflow][fingerprint][system]") {
  // One input that exists only in memory, and a working directory that is not the process's.
  struct memory_system : sluice::test::recording_system {
    const std::string path = "/sim/in.txt";
    const std::string bytes = "the quick brown fox\njumps over the lazy dog\n";
    const int fd = 1000;
    std::size_t stat_extra_bytes = 0;  // a size above what reads give: a file truncated while hashed

    int stat(const char* p, struct stat* st) noexcept override {
      note("stat", p);
      if (p != path) return -ENOENT;
      *st = {};
      st->st_mode = S_IFREG | 0644;
      st->st_size = static_cast<off_t>(bytes.size() + stat_extra_bytes);
      return 0;
    }
    int open(const char* p, int, mode_t) noexcept override {
      note("open", p);
      return p == path ? fd : -ENOENT;
    }
    int fstat(int f, struct stat* st) noexcept override { return f == fd ? stat(path.c_str(), st) : -EBADF; }
    ssize_t pread(int f, void* buf, std::size_t len, off_t offset) noexcept override {
      note("pread");
      if (f != fd) return -EBADF;
      const std::size_t at = std::min(bytes.size(), static_cast<std::size_t>(offset));
      const std::size_t n = std::min(len, bytes.size() - at);
      std::memcpy(buf, bytes.data() + at, n);
      return static_cast<ssize_t>(n);
    }
    int close(int f) noexcept override {
      note("close");
      return f == fd ? 0 : -EBADF;
    }
    std::string current_directory() override {
      note("current_directory");
      return "/sim/work";
    }
  } os;
  sluice::runtime::system_scope scope(os);
  const job_builder job = wordcount_over(os.path, "out");
  const job_fingerprint fp = fingerprint_job(job);
  REQUIRE(fp.inputs.size() == 1);
  CHECK(fp.inputs[0].size_bytes == os.bytes.size());
  CHECK(fp.inputs[0].crc32c == sluice::buffers::crc32c(std::as_bytes(std::span<const char>(os.bytes.data(), os.bytes.size()))));
  bool named = false;
  for (const stage_identity& s : fp.stages) {
    for (const std::string& e : s.entries) named = named || e == "write_lines.dir=/sim/work/out";
  }
  CHECK(named);
  CHECK(os.count("close") == 1);

  os.stat_extra_bytes = 10;
  CHECK(refusal_of(job) == "2: input '/sim/in.txt': it ended at byte 44 while read, before its size (54 bytes): it is "
                           "being truncated or replaced; exactly-once needs a replayable source (a regular file that "
                           "can be read again from a checkpointed offset and does not change until the job ends): "
                           "save it to a file first");
  CHECK(os.count("close") == 2);
}
