// Key groups (key_group.hpp) and how a job uses them (job.hpp): the ranges tasks own, a keyed
// stage's max parallelism (its default, how it is set, what is refused), the task builder's view of
// it, a key_by exchange sending each key to the task whose range holds its group (one exchange and
// two of a fan-out, with other max parallelisms), and a resume with another max parallelism refused.
// GCC 12 at -O3 reports a std::string copy inlined into these tests as a memcpy past PTRDIFF_MAX
// (-Wstringop-overflow, -Wrestrict: known false positives of its range analysis).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#pragma GCC diagnostic ignored "-Wrestrict"
#endif

#include <sluice/dataflow/generate.hpp>
#include <sluice/dataflow/job_runner.hpp>
#include <sluice/dataflow/join.hpp>
#include <sluice/dataflow/key_group.hpp>
#include <sluice/dataflow/keyed_process.hpp>
#include <sluice/dataflow/sinks.hpp>

#include <support/temp_dir.hpp>

#include "wordcount_support.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

using namespace sluice::dataflow;
using sluice::snapshot::checkpoint_mode;
using sluice::test::temp_dir;

namespace {

using num = std::uint64_t;

std::string message_of(const std::function<void()>& build) {
  try {
    build();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "accepted";
}

keyed_stream<num, num> numbers(job_builder& job, const std::string& name, num count = 100) {
  return job.generate<num>(name, 1, count, [](num n) { return n; }).key_by<num>([](const num& n) { return n; });
}

stream<std::string> counted(const keyed_stream<num, num>& keyed, std::size_t parallelism) {
  return keyed.aggregate<num, std::string>("count", parallelism, [](num& c, const num&) { ++c; },
                                           [](const num& k, const num& c) { return std::to_string(k) + " " + std::to_string(c); });
}

// The keyed stream's partition stage, each record written as "<subtask> <first> <last> <key>": the
// task and the key groups its builder says it owns.
void tag_and_write(const keyed_stream<num, num>& keyed, const std::string& name, std::size_t parallelism,
                   const std::string& dir) {
  const stream<num> routed = keyed.partition(name, parallelism);
  const stream<std::string> tagged(routed.job(), routed.stage(), [parent = routed.take()](task_builder& b,
                                                                                            collector<std::string>& down) {
    const key_group_range owned = b.key_groups_owned();
    const std::string tag = std::to_string(b.subtask()) + " " + std::to_string(owned.first) + " " +
                            std::to_string(owned.last) + " ";
    parent(b, b.make<map_op<num, std::string>>([tag](const num& n) { return tag + std::to_string(n); }, down));
  }, routed.identity());
  tagged.write_lines(dir, [](const std::string& s) { return s; });
}

struct tagged_line {
  std::size_t task = 0;  // from the file's name, part-<task>-<sequence>
  std::size_t subtask = 0;
  key_group_range owned;
  num key = 0;
};

std::vector<tagged_line> read_tagged(const std::string& dir) {
  std::vector<tagged_line> out;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("part-", 0) != 0) continue;
    const std::size_t task = std::stoul(name.substr(5, name.find('-', 5) - 5));
    std::ifstream in(entry.path());
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      tagged_line t;
      t.task = task;
      fields >> t.subtask >> t.owned.first >> t.owned.last >> t.key;
      out.push_back(t);
    }
  }
  return out;
}

// Every key in [0, count) came once, to the task whose range (as its builder gave it, and as
// key_group_range_of computes it) holds the key's group; every task got some.
void check_routed(const std::vector<tagged_line>& lines, num count, std::size_t first_task, std::size_t parallelism,
                  std::size_t groups) {
  std::set<num> keys;
  std::set<std::size_t> tasks;
  for (const tagged_line& t : lines) {
    INFO("key " << t.key << " at subtask " << t.subtask << " (task " << t.task << ")");
    CHECK(t.task == first_task + t.subtask);
    CHECK(t.owned == key_group_range_of(t.subtask, parallelism, groups));
    CHECK(t.owned.contains(key_group_of(t.key, groups)));
    CHECK(keys.insert(t.key).second);
    tasks.insert(t.subtask);
  }
  CHECK(keys.size() == count);
  CHECK(tasks.size() == parallelism);
}

}  // namespace

TEST_CASE("key_group_range_of covers the key groups exactly once and agrees with owner_of", "[dataflow][key_group]") {
  for (const std::size_t groups : std::initializer_list<std::size_t>{1, 2, 3, 7, 10, 64, 128, 129, 1000, 4096, 32768}) {
    std::vector<std::size_t> parallelisms;
    for (std::size_t p = 1; p <= groups && p <= 40; ++p) parallelisms.push_back(p);
    for (const std::size_t p : {groups / 3, groups / 2, groups - 1, groups}) {
      if (p >= 1) parallelisms.push_back(p);
    }
    for (const std::size_t p : parallelisms) {
      INFO("parallelism " << p << ", key groups " << groups);
      key_group next = 0;
      for (std::size_t i = 0; i < p; ++i) {
        const key_group_range r = key_group_range_of(i, p, groups);
        REQUIRE(r.first == next);  // contiguous, in order, no group twice
        REQUIRE(r.size() >= groups / p);
        REQUIRE(r.size() <= groups / p + 1);  // as even as it can be
        for (key_group g = r.first; g < r.last; ++g) REQUIRE(owner_of(g, p, groups) == i);
        next = r.last;
      }
      REQUIRE(next == groups);  // every group
    }
  }
}

TEST_CASE("keys spread over every key group and keep their group", "[dataflow][key_group]") {
  std::vector<std::size_t> per_group(128, 0);
  for (num k = 0; k < 12'800; ++k) ++per_group.at(key_group_of(k, 128));
  for (std::size_t g = 0; g < per_group.size(); ++g) {
    INFO("key group " << g);
    CHECK(per_group[g] > 50);  // 100 on average: a hash that leaves groups empty would fail
    CHECK(per_group[g] < 150);
  }
  CHECK(key_group_of(std::string("word"), 128) == key_group_of(std::string("word"), 128));
  CHECK(key_group_of(num{42}, 1) == 0);
}

// FNV-1a of a key's codec encoding, as stable_hash was first written (the hash checkpoints' key
// groups depend on): a string's own fast path must give exactly this.
static std::uint64_t encoded_fnv(const std::string& key) {
  std::vector<std::byte> bytes;
  sluice::buffers::byte_writer w(bytes);
  sluice::buffers::codec<std::string>::encode(w, key);
  std::uint64_t h = 1469598103934665603ull;
  for (std::byte b : bytes) h = (h ^ std::to_integer<std::uint64_t>(b)) * 1099511628211ull;
  return h;
}

TEST_CASE("a string's stable hash is FNV-1a of its encoding, the same as ever", "[dataflow][key_group]") {
  for (const std::string& key : {std::string(), std::string("u1"), std::string("word"), std::string(300, 'x'),
                                 std::string("\0\xff odd \x80 bytes", 14)}) {
    INFO("key of " << key.size() << " bytes");
    CHECK(stable_hash(key) == encoded_fnv(key));
    CHECK(stable_hash(std::make_pair(key, num{7})) != 0);  // other keys still take the encoding path
  }
  // Pinned: a change of these moves every string key to another key group (checkpoints would not
  // restore into the tasks that own their keys).
  CHECK(stable_hash(std::string()) == 0x315446a086a23133ull);
  CHECK(key_group_of(std::string("u123456"), 128) == key_group_of_hash(mix_hash(encoded_fnv("u123456")), 128));
}

TEST_CASE("a keyed stage's max parallelism defaults to 128 and is set per stage", "[dataflow][key_group]") {
  job_builder job("groups");
  const keyed_stream<num, num> keyed = numbers(job, "gen");
  CHECK(keyed.max_parallelism() == default_key_groups);
  CHECK(default_key_groups == 128);
  counted(keyed, 2).discard();
  const keyed_stream<num, num> wide = numbers(job, "gen2").max_parallelism(1000);
  CHECK(wide.max_parallelism() == 1000);
  wide.partition("spread", 3).discard();
  const auto& stages = job.stages();
  REQUIRE(stages.size() == 4);
  CHECK(stages[0].key_groups == 0);  // a source is not keyed
  CHECK(stages[1].key_groups == 128);
  CHECK(stages[1].identity.front() == "key_groups=128");
  CHECK(stages[3].key_groups == 1000);
  CHECK(stages[3].identity == std::vector<std::string>{"key_groups=1000", "op=partition", "sink=discard"});
  CHECK(stages[2].identity.back() == "output=key_by");  // the producer's identity does not change
  // A combiner keeps the max parallelism set before it.
  const auto partials = numbers(job, "gen3").max_parallelism(64).combine<num>([](num& c, const num&) { ++c; });
  CHECK(partials.max_parallelism() == 64);
  partials.partition("merged", 2).discard();
  CHECK(job.stages().back().key_groups == 64);
}

TEST_CASE("a two-input keyed stage takes the max parallelism either input sets and refuses two", "[dataflow][key_group]") {
  using ctx = process_context<num, num, num>;
  const auto on = [](const num& n, ctx& c) { c.emit(n); };
  job_builder job("two");
  numbers(job, "a").max_parallelism(16).process_with<num, num, num>(numbers(job, "b"), "left-set", 2, on, on).discard();
  numbers(job, "c").join<num, num>(numbers(job, "d").max_parallelism(8), "right-set", 2,
                                   [](const num&, const num& l, const num&) { return l; })
      .discard();
  numbers(job, "e").max_parallelism(32).window_join<num, num>(
      numbers(job, "f").max_parallelism(32), "both-alike", 2, 10, [](const num& n) { return n; },
      [](const num& n) { return n; }, [](num, const num&, const num& l, const num&) { return l; })
      .discard();
  std::map<std::string, const stage_def*> by_name;
  for (const stage_def& s : job.stages()) by_name[s.name] = &s;
  CHECK(by_name.at("left-set")->key_groups == 16);
  CHECK(by_name.at("right-set")->key_groups == 8);
  CHECK(by_name.at("right-set")->identity.front() == "key_groups=8");
  CHECK(by_name.at("both-alike")->key_groups == 32);
  const std::size_t before = job.stages().size();
  CHECK(message_of([&] {
          numbers(job, "g").max_parallelism(16).process_with<num, num, num>(numbers(job, "h").max_parallelism(64),
                                                                            "two-values", 2, on, on);
        }) == "stage 'two-values': its inputs set max parallelism 16 and 64; a two-input stage has one (set it on one "
              "input, or on both alike)");
  CHECK(job.stages().size() == before + 2);  // the two sources, not the refused stage
}

TEST_CASE("a max parallelism out of range or below the stage's parallelism is refused naming the stage",
          "[dataflow][key_group]") {
  job_builder job("refused");
  const keyed_stream<num, num> keyed = numbers(job, "gen");
  CHECK(message_of([&] { (void)keyed.max_parallelism(0); }) ==
        "max_parallelism 0 is out of range: a keyed stage has 1 to 32768 key groups");
  CHECK(message_of([&] { (void)keyed.max_parallelism(max_key_groups + 1); }) ==
        "max_parallelism 32769 is out of range: a keyed stage has 1 to 32768 key groups");
  CHECK(message_of([&] { (void)counted(keyed, 200); }) ==
        "stage 'count': parallelism 200 above its max parallelism 128 (key groups); raise it with max_parallelism()");
  CHECK(message_of([&] { (void)counted(keyed.max_parallelism(4), 5); }) ==
        "stage 'count': parallelism 5 above its max parallelism 4 (key groups); raise it with max_parallelism()");
  CHECK(job.stages().size() == 1);  // nothing was added
  counted(keyed.max_parallelism(5), 5).discard();  // as many tasks as key groups: one group each
  CHECK(job.stages().at(1).key_groups == 5);
  // A stage made by hand is checked when the job is planned.
  job.stages().at(1).key_groups = 3;
  CHECK(message_of([&] { (void)job_plan::make(job, plan_shape{}); }) ==
        "stage 'count': parallelism 5 above its max parallelism 3 (key groups); raise it with max_parallelism()");
  job.stages().at(1).key_groups = max_key_groups * 2;
  CHECK(message_of([&] { (void)job_plan::make(job, plan_shape{}); }) ==
        "stage 'count': max parallelism 65536 above the most key groups a stage may have (32768)");
}

TEST_CASE("a task builder gives its stage's key groups and the contiguous range its task owns", "[dataflow][key_group]") {
  task_builder plain(4, 1, 3, nullptr, 0);
  CHECK(plain.key_groups() == 0);
  CHECK(plain.key_groups_owned() == key_group_range{});
  for (std::size_t subtask = 0; subtask < 3; ++subtask) {
    task_builder b(static_cast<sluice::snapshot::task_id>(4 + subtask), subtask, 3, nullptr, 0);
    b.set_key_groups(10);
    CHECK(b.key_groups() == 10);
    CHECK(b.key_groups_owned() == key_group_range_of(subtask, 3, 10));
  }
  task_builder middle(5, 1, 3, nullptr, 0);
  middle.set_key_groups(10);
  CHECK(middle.key_groups_owned() == key_group_range{4, 7});  // [ceil(10/3), ceil(20/3))
}

TEST_CASE("a key_by exchange sends each key to the task whose key-group range holds its group",
          "[dataflow][key_group]") {
  // One source feeds two keyed stages (a fan-out: one partition, a range of subpartitions each) with
  // other parallelisms and max parallelisms: each exchange routes by its own consumer's.
  temp_dir dir;
  job_builder job("routes");
  const num count = 3000;
  const stream<num> source = job.generate<num>("gen", 2, count, [](num n) { return n; });
  const auto by_value = [](const num& n) { return n; };
  tag_and_write(source.key_by<num>(by_value).max_parallelism(10), "three", 3, dir.file("three"));
  tag_and_write(source.key_by<num>(by_value).max_parallelism(7), "two", 2, dir.file("two"));
  const job_result r = run_job(job, sluice::test::test_job_settings(dir.file("chk"), checkpoint_mode::aligned, "local"));
  INFO(r.message);
  REQUIRE(r.exit_code == 0);
  check_routed(read_tagged(dir.file("three")), count, 2, 3, 10);
  check_routed(read_tagged(dir.file("two")), count, 5, 2, 7);
}

TEST_CASE("a job resumed with another max parallelism is refused and changes nothing", "[dataflow][key_group]") {
  temp_dir dir;
  const auto run = [&](std::size_t groups) {
    job_builder job("counts");
    counted(numbers(job, "gen", 500).max_parallelism(groups), 2).write_lines(dir.file("out"), [](const std::string& s) {
      return s;
    });
    return run_job(job, sluice::test::test_job_settings(dir.file("chk"), checkpoint_mode::aligned, "local"));
  };
  const job_result first = run(10);
  INFO(first.message);
  REQUIRE(first.exit_code == 0);
  const std::vector<std::string> published = sluice::test::published_lines(dir.file("out"));
  CHECK(published.size() == 500);
  const job_result other = run(12);
  INFO(other.message);
  CHECK(other.exit_code == 2);
  CHECK(other.message.find(" was taken with stage 'count' at max parallelism 10 (key groups); this run has 12\n") !=
        std::string::npos);
  CHECK(other.message.find("a keyed stage's max parallelism cannot change across a resume") != std::string::npos);
  CHECK(sluice::test::published_lines(dir.file("out")) == published);
  const job_result same = run(10);  // the same arguments resume the finished job and change nothing
  INFO(same.message);
  CHECK(same.exit_code == 0);
  CHECK(same.resumed_from.has_value());
  CHECK(sluice::test::published_lines(dir.file("out")) == published);
}
