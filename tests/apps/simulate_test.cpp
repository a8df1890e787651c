// `sluice simulate` as a user runs it: its ranges and refusals, its determinism check under --trace
// (apps/sluice/simulate_cmd.cpp, sim_seed.cpp; docs/simulation.md).

#include "run_sluice.hpp"

#include <catch2/catch.hpp>

#include <string>

using sluice::test::run_sluice;
using sluice::test::tool_run;

TEST_CASE("sluice simulate ends a seed range that ends at the largest seed") {
  // The loop used to step past 2^64-1 to 0 and go on for ever (run_sluice's deadline then kills it).
  const tool_run r = run_sluice({"simulate", "--job", "generate", "--faults", "none", "--twice-every", "0", "--seeds",
                                 "18446744073709551614-18446744073709551615"});
  INFO(r.out << r.err);
  CHECK(r.signal == 0);
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("2 seeds, 0 failed") != std::string::npos);
  const tool_run one = run_sluice({"simulate", "--job", "generate", "--faults", "none", "--twice-every", "0", "--seeds",
                                   "18446744073709551615"});
  INFO(one.out << one.err);
  CHECK(one.exit_code == 0);
  CHECK(one.out.find("1 seeds, 0 failed") != std::string::npos);
}

TEST_CASE("sluice simulate refuses a seed above the largest and a range that ends before it starts") {
  const tool_run above = run_sluice({"simulate", "--job", "generate", "--seeds", "18446744073709551616"});
  CHECK(above.exit_code == 2);
  CHECK(above.err.find("above the largest seed") != std::string::npos);
  const tool_run backwards = run_sluice({"simulate", "--job", "generate", "--seeds", "5-3"});
  CHECK(backwards.exit_code == 2);
  CHECK(backwards.err.find("ends at 3, before it starts") != std::string::npos);
  const tool_run junk = run_sluice({"simulate", "--job", "generate", "--seeds", "1-2-3"});
  CHECK(junk.exit_code == 2);
}

TEST_CASE("a seed run twice with --trace is deterministic and so is its reproduce command") {
  // Seed 10 of wordcount crashes 3 times and has restore points: every kind of simulated process.
  // The traced run and the untraced one must hash alike (the executors' eventfds got other numbers
  // when --trace left the child's stderr alone, and their cancels were hashed).
  const tool_run r = run_sluice(
      {"simulate", "--job", "wordcount", "--faults", "all", "--seeds", "10", "--twice-every", "1", "--trace"});
  INFO(r.out.substr(0, 2000));
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("1 seeds, 0 failed") != std::string::npos);
  CHECK(r.out.find("not deterministic") == std::string::npos);
  CHECK(r.err.find(" cancel ") != std::string::npos);  // the trace was printed, with the cancels
  // A reproduce command (it carries --trace) of a seed that runs twice under the default --twice-every.
  const tool_run again = run_sluice({"simulate", "--job", "join", "--faults", "all", "--seeds", "20-20", "--trace"});
  CHECK(again.exit_code == 0);
  CHECK(again.out.find("1 seeds, 0 failed") != std::string::npos);
}

TEST_CASE("sluice simulate refuses a ring too small for a tcp channel and names the smallest") {
  for (const char* ring : {"1", "2"}) {
    const tool_run r = run_sluice({"simulate", "--job", "join", "--seeds", "1", "--ring", ring});
    INFO(ring << ": " << r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("the smallest ring is 3") != std::string::npos);
    CHECK(r.out.empty());  // refused before any seed ran
  }
  // Seed 4 of wordcount has tcp channels, one task per stage over 3 executors: it runs on a ring of 3.
  const tool_run three =
      run_sluice({"simulate", "--job", "wordcount", "--faults", "none", "--seeds", "4", "--ring", "3"});
  INFO(three.out << three.err);
  CHECK(three.exit_code == 0);
}
