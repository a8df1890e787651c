// `sluice bench nats|postgres|kafka` end to end with tiny counts: each starts its own server (or the
// mock cluster), measures into and out of it beside its baseline, and prints one JSON result per
// figure with a positive ratio; a missing server binary is an error naming it, not a crash.

#include "run_sluice.hpp"

#include <support/nats_server.hpp>
#include <support/postgres_server.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>
#include <vector>

extern char** environ;

using sluice::test::lines_of;
using sluice::test::run_sluice;
using sluice::test::tool_run;

namespace {

// The JSON results of `sluice bench <name> --records 2000 --per-checkpoint 500 --runs 1 --json more...`.
std::vector<nlohmann::json> tiny_run(const std::string& bench, const std::vector<std::string>& more = {}) {
  std::vector<std::string> args = {"bench", bench, "--records", "2000", "--per-checkpoint", "500", "--runs", "1", "--json"};
  args.insert(args.end(), more.begin(), more.end());
  tool_run r = run_sluice(args);
  INFO("stderr: " << r.err << "\nstdout: " << r.out);
  REQUIRE(r.exit_code == 0);
  std::vector<nlohmann::json> results;
  for (const std::string& line : lines_of(r.out)) results.push_back(nlohmann::json::parse(line));
  for (const auto& j : results) {
    INFO(j.dump());
    CHECK(j.at("bench") == bench);
    CHECK(j.at("records") == 2000);
    CHECK(j.at("records_per_s").get<double>() > 0);
    CHECK(j.at("baseline_records_per_s").get<double>() > 0);
    CHECK(j.at("ratio").get<double>() > 0);
  }
  return results;
}

std::vector<std::string> directions(const std::vector<nlohmann::json>& results) {
  std::vector<std::string> d;
  for (const auto& j : results) d.push_back(j.at("direction").get<std::string>());
  return d;
}

// The tool run with `setting` ("NAME=value") added to this process's environment.
tool_run run_with(const std::string& setting, std::vector<std::string> args) {
  std::vector<std::string> env = {setting};
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  sluice::test::tool_setup setup;
  setup.envp = envp.data();
  return run_sluice(std::move(args), setup);
}

}  // namespace

TEST_CASE("sluice bench nats measures into and out of a real nats-server beside the plain client", "[bench]") {
  SLUICE_SKIP_WITHOUT_NATS();
  const auto results = tiny_run("nats");
  CHECK(directions(results) == std::vector<std::string>{"in", "out"});
}

TEST_CASE("sluice bench postgres measures INSERT and upsert into a real PostgreSQL beside blocking libpq", "[bench]") {
  SLUICE_SKIP_WITHOUT_POSTGRES();
  const auto results = tiny_run("postgres");
  REQUIRE(results.size() == 2);
  CHECK(results[0].at("statement") == "INSERT");
  CHECK(results[1].at("statement") == "upsert");
}

TEST_CASE("sluice bench kafka measures into and out of the mock cluster beside plain librdkafka loops", "[bench]") {
  const auto results = tiny_run("kafka", {"--source-records", "2000"});
  CHECK(directions(results) == std::vector<std::string>{"in", "out"});
}

TEST_CASE("a connector benchmark without its server binary fails naming what to install", "[bench]") {
  const tool_run nats = run_with("SLUICE_NATS_SERVER=/nonexistent/nats-server", {"bench", "nats", "--runs", "1"});
  INFO("nats stderr: " << nats.err);
  CHECK(nats.exit_code == 1);
  CHECK(nats.err.find("sluice bench nats: nats bench: nats-server is not installed") != std::string::npos);
  const tool_run pg = run_with("SLUICE_PG_BIN=/nonexistent", {"bench", "postgres", "--runs", "1"});
  INFO("postgres stderr: " << pg.err);
  CHECK(pg.exit_code == 1);
  CHECK(pg.err.find("PostgreSQL 15 is not installed in /nonexistent") != std::string::npos);
}
