// The status page's JSON views (status_api.hpp), read from a running, backpressured join with a
// plain socket client from the test's thread, and across a restart with a word count: the history
// in the checkpoint directory outlives a run.

#include <sluice/dataflow/job_runner.hpp>
#include <sluice/dataflow/samples.hpp>

#include <support/http_client.hpp>
#include <support/temp_dir.hpp>

#include "status_support.hpp"
#include "wordcount_support.hpp"

#include <catch2/catch.hpp>

#include <future>
#include <set>
#include <string>
#include <thread>

using namespace sluice::dataflow;
using namespace std::chrono_literals;
using nlohmann::json;
using sluice::test::get_json;
using sluice::test::http_client;
using sluice::test::http_get;
using sluice::test::http_reply;
using sluice::test::running_join;
using sluice::test::temp_dir;

TEST_CASE("the status API describes a running job: the job, its graph with rates and backpressure, checkpoints") {
  temp_dir dir;
  running_join j(dir);

  // Once two checkpoints completed and their lines reached the history file.
  std::optional<json> cps = j.poll("/api/checkpoints", [](const json& c) { return c["summary"]["completed"] >= 2; });
  REQUIRE(cps);
  INFO(cps->dump(2));
  CHECK((*cps)["file"] == dir.file("chk") + "/history.jsonl");
  CHECK((*cps)["summary"]["starts"] == 1);
  CHECK((*cps)["summary"]["restores"] == 0);
  REQUIRE((*cps)["starts"].size() == 1);
  CHECK((*cps)["starts"][0]["resumed_from"].is_null());
  CHECK((*cps)["starts"][0]["job"] == "join");
  REQUIRE((*cps)["checkpoints"].size() >= 2);
  std::uint64_t previous_id = 0;
  for (const json& c : (*cps)["checkpoints"]) {
    CHECK(c["id"] > previous_id);  // oldest first
    previous_id = c["id"];
    CHECK(c["mode"] == "unaligned");
    CHECK(c["triggered_unix_ms"] > 1'600'000'000'000ull);
    if (c["outcome"] == "completed") {
      CHECK(c["duration_ms"] > 0);
      CHECK(c["acknowledged"] == 6);
      CHECK(c["tasks"] == 6);
      CHECK(c["operator_state_bytes"] > 0);
    } else {
      CHECK(c.contains("reason"));
    }
  }

  std::optional<json> job = get_json(j.port(), "/api/job");
  REQUIRE(job);
  INFO(job->dump(2));
  CHECK((*job)["job"] == "join");
  CHECK((*job)["state"] == "running");
  CHECK((*job)["version"] == SLUICE_PROJECT_VERSION);
  CHECK((*job)["resumed_from"].is_null());
  CHECK((*job)["restore_ms"] >= 0);
  CHECK((*job)["uptime_ms"] > 0);
  CHECK((*job)["executors"] == 2);
  CHECK((*job)["backends"].size() == 2);
  CHECK((*job)["checkpoint_mode"] == "unaligned");
  CHECK((*job)["checkpoint_interval_ms"] == 50);
  CHECK((*job)["history"] == true);
  const json& settings = (*job)["checkpoint_settings"];
  CHECK(settings["dir"] == dir.file("chk"));
  CHECK(settings["mode"] == "unaligned");
  CHECK(settings["interval_ms"] == 50);
  CHECK(settings["min_pause_ms"] == 25);  // half the interval, as the coordinator's
  CHECK(settings["timeout_ms"] == 600'000);
  CHECK(settings["alignment_timeout_ms"].is_null());  // aligned_timeout only
  CHECK(settings["tolerable_failures"].is_null());
  CHECK(settings["retained"] == 3);
  CHECK(settings["history_entries"] == 1000);
  CHECK((*job)["checkpoints"]["completed"] >= 2);
  CHECK((*job)["checkpoints"]["last_completed"].is_number());
  CHECK((*job)["progress"]["source_records"] > 0);

  // The graph: rates need a window of a second, so until the sources' backpressure shows.
  std::optional<json> graph = j.poll("/api/graph", [](const json& g) {
    for (const json& t : g["tasks"]) {
      if (t["name"] == "left#0" && t["backpressured_ratio"] > 0.05 && t["records_out_per_s"] > 0) return true;
    }
    return false;
  });
  REQUIRE(graph);
  INFO(graph->dump(2));
  REQUIRE((*graph)["stages"].size() == 3);
  const json& stages = (*graph)["stages"];
  CHECK(stages[0]["name"] == "left");
  CHECK(stages[0]["source"] == true);
  CHECK(stages[0]["downstream"] == 2);
  CHECK(stages[1]["name"] == "right");
  CHECK(stages[2]["name"] == "join");
  CHECK(stages[2]["upstreams"] == json::array({0, 1}));
  CHECK(stages[2]["sink"] == true);
  CHECK(stages[2]["downstream"].is_null());
  CHECK(stages[2]["parallelism"] == 2);
  REQUIRE((*graph)["tasks"].size() == 6);
  std::set<std::string> names;
  for (const json& t : (*graph)["tasks"]) {
    names.insert(t["name"].get<std::string>());
    CHECK(t["here"] == true);
    CHECK(t["executor"] < 2);
    for (const char* share : {"busy_ratio", "idle_ratio", "backpressured_ratio"}) {
      INFO(t["name"] << " " << share);
      REQUIRE(t[share].is_number());
      CHECK(t[share] >= 0);
      CHECK(t[share] <= 1);
    }
    const double sum =
        t["busy_ratio"].get<double>() + t["idle_ratio"].get<double>() + t["backpressured_ratio"].get<double>();
    CHECK(sum <= 1 + 1e-9);
    CHECK(sum >= 1 - 1e-9);  // busy is the rest
    CHECK(t["bottleneck"].is_boolean());
  }
  CHECK(names == std::set<std::string>{"left#0", "left#1", "right#0", "right#1", "join#0", "join#1"});
  const json& join0 = (*graph)["tasks"][4];
  CHECK(join0["name"] == "join#0");
  CHECK(join0["records_in"] > 0);
  CHECK(join0["credits_outstanding"].is_number());
  REQUIRE((*graph)["executors"].size() == 2);
  for (const json& e : (*graph)["executors"]) {
    CHECK(e["busy_ratio"] >= 0);
    CHECK(e["busy_ratio"] <= 1);
    CHECK(e["buffers"] > 0);
  }

  // The slow sink is the bottleneck: the joins (the sink's tasks) are busy, a source that feeds
  // them backpressured. The shares are over a window of a second: until that shows. (A source that
  // has read its whole range is idle, not backpressured: under TSan one may end before the other.)
  std::optional<json> settled = j.poll("/api/graph", [](const json& g) {
    bool sink_bottleneck = false;
    bool a_source_backpressured = false;
    for (const json& t : g["tasks"]) {
      const std::string name = t["name"];
      if (name.rfind("join#", 0) == 0 && t["bottleneck"] == true) sink_bottleneck = true;
      if (name.rfind("join#", 0) != 0 && t["backpressured_ratio"] >= 0.5) a_source_backpressured = true;
    }
    return sink_bottleneck && a_source_backpressured;
  });
  REQUIRE(settled);
  INFO(settled->dump(2));
  for (const json& t : (*settled)["tasks"]) {
    const std::string name = t["name"];
    if (name.rfind("join#", 0) == 0) {
      CHECK(t["backpressured_ratio"] == 0);  // a sink has no output partition
    } else {
      // A source has no upstream to hold up. (Its busy share is not checked: the source that is
      // not the one backpressured may still be reading, busy most of a window under ASan.)
      CHECK(t["bottleneck"] == false);
    }
  }
  bool sink_hot = false;
  for (const json& t : (*settled)["tasks"]) {
    if (t["bottleneck"] == true) {
      CHECK(t["busy_ratio"] >= 0.5);
      sink_hot = true;
    }
  }
  CHECK(sink_hot);

  // The newest completed checkpoint, per task.
  std::optional<json> latest = get_json(j.port(), "/api/checkpoints/latest");
  REQUIRE(latest);
  INFO(latest->dump(2));
  REQUIRE(latest->is_object());
  CHECK((*latest)["outcome"] == "completed");
  CHECK((*latest)["id"] >= (*cps)["checkpoints"].back()["id"].get<std::uint64_t>() - 1);
  REQUIRE((*latest)["task_breakdown"].size() == 6);
  for (const json& t : (*latest)["task_breakdown"]) {
    CHECK(names.count(t["name"].get<std::string>()) == 1);
    CHECK(t["write_ms"] >= 0);
    CHECK(t["fsync_ms"] >= 0);
    CHECK((t["start_delay_ms"].is_null() || t["start_delay_ms"] >= 0));
  }

  // Any checkpoint of the history by its id, with its tasks; the newest completed one is the same.
  const std::uint64_t latest_id = (*latest)["id"];
  std::optional<json> by_id = get_json(j.port(), "/api/checkpoints/" + std::to_string(latest_id));
  REQUIRE(by_id);
  CHECK(*by_id == *latest);
  const std::uint64_t oldest_id = (*cps)["checkpoints"][0]["id"];
  std::optional<json> oldest = get_json(j.port(), "/api/checkpoints/" + std::to_string(oldest_id));
  REQUIRE(oldest);
  CHECK((*oldest)["id"] == oldest_id);
  CHECK((*oldest)["task_breakdown"].is_array());
  // An id the history does not hold: 404; not an id: 400; both say why, in JSON.
  std::optional<http_reply> missing = http_get(j.port(), "/api/checkpoints/987654321");
  REQUIRE(missing);
  CHECK(missing->status == 404);
  CHECK(missing->header("content-type") == "application/json");
  const json missing_body = json::parse(missing->body, nullptr, false);
  REQUIRE(missing_body.is_object());
  CHECK(missing_body["error"].get<std::string>().find("checkpoint 987654321 is not in the history") != std::string::npos);
  for (const char* bad_id : {"abc", "0", "-1", "7x", "99999999999999999999999", "3/tasks", "%20", ""}) {
    std::optional<http_reply> refused = http_get(j.port(), std::string("/api/checkpoints/") + bad_id);
    INFO(bad_id);
    REQUIRE(refused);
    CHECK(refused->status == 400);
    const json body = json::parse(refused->body, nullptr, false);
    REQUIRE(body.is_object());
    CHECK(body["error"].get<std::string>().find("is not a checkpoint id") != std::string::npos);
  }

  // ?recent=N keeps the newest N; bad values fall back to the default.
  std::optional<json> one = get_json(j.port(), "/api/checkpoints?recent=1");
  REQUIRE(one);
  CHECK((*one)["checkpoints"].size() == 1);
  CHECK((*one)["recent"] == 1);
  std::optional<json> bad = get_json(j.port(), "/api/checkpoints?recent=-3&x");
  REQUIRE(bad);
  CHECK((*bad)["recent"] == 200);

  // Unknown views and other methods.
  std::optional<http_reply> nope = http_get(j.port(), "/api/nope");
  REQUIRE(nope);
  CHECK(nope->status == 404);
  http_client c(j.port());
  REQUIRE(c.send("POST /api/job HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"));
  std::optional<http_reply> post = c.read_reply();
  REQUIRE(post);
  CHECK(post->status == 405);

  const job_result& r = j.stop();
  CHECK(r.exit_code == 130);
}

TEST_CASE("the status API's history outlives a run: a restart shows both starts and what it resumed from") {
  temp_dir dir;
  sluice::test::write_corpus_file(dir.file("input.txt"), 2'000'000, 5);
  const auto run = [&dir](std::stop_source& stop, std::promise<std::uint16_t>& port, std::atomic<int>& completed) {
    job_builder job("wordcount");
    build_wordcount(job, {dir.file("input.txt"), dir.file("out"), 2, 0});
    job_settings s;
    s.checkpoint_dir = dir.file("chk");
    s.checkpoint_interval = 20ms;
    s.handle_signals = false;
    s.metrics_address = "127.0.0.1:0";
    s.on_metrics_listening = [&port](std::uint16_t p) { port.set_value(p); };
    s.on_checkpoint = [&completed](const sluice::snapshot::checkpoint_stats& st) {
      if (st.outcome.completed()) ++completed;
    };
    s.stop = stop.get_token();
    return run_job(job, s);
  };
  {
    std::stop_source stop;
    std::promise<std::uint16_t> port;
    std::atomic<int> completed{0};
    job_result first;
    std::thread t([&] { first = run(stop, port, completed); });
    for (int i = 0; i < 6000 && completed.load() < 2; ++i) std::this_thread::sleep_for(5ms);
    stop.request_stop();
    t.join();
    REQUIRE(completed.load() >= 2);
    REQUIRE(first.exit_code == 130);
  }
  std::stop_source stop;
  std::promise<std::uint16_t> port_promise;
  std::future<std::uint16_t> port_future = port_promise.get_future();
  std::atomic<int> completed{0};
  job_result second;
  std::thread t([&] { second = run(stop, port_promise, completed); });
  REQUIRE(port_future.wait_for(60s) == std::future_status::ready);
  const std::uint16_t port = port_future.get();
  std::optional<json> job = get_json(port, "/api/job");
  std::optional<json> cps;
  for (int i = 0; i < 3000; ++i) {
    cps = get_json(port, "/api/checkpoints");
    if (cps && (*cps)["summary"]["starts"] == 2) break;
    std::this_thread::sleep_for(5ms);
  }
  // The checkpoint it resumed from, as the first run recorded it, per task.
  std::optional<json> resumed_checkpoint;
  if (job && (*job)["resumed_from"].is_number()) {
    resumed_checkpoint = get_json(port, "/api/checkpoints/" + std::to_string((*job)["resumed_from"].get<std::uint64_t>()));
  }
  stop.request_stop();
  t.join();
  REQUIRE(second.resumed_from.has_value());
  REQUIRE(job);
  CHECK((*job)["resumed_from"] == *second.resumed_from);
  REQUIRE(cps);
  INFO(cps->dump(2));
  CHECK((*cps)["summary"]["starts"] == 2);
  CHECK((*cps)["summary"]["restores"] == 1);
  REQUIRE((*cps)["starts"].size() == 2);
  CHECK((*cps)["starts"][0]["resumed_from"].is_null());
  CHECK((*cps)["starts"][1]["resumed_from"] == *second.resumed_from);
  CHECK((*cps)["starts"][1]["restore_ms"] > 0);
  CHECK((*cps)["summary"]["completed"] >= 2);  // the first run's
  CHECK((*cps)["starts"][1]["unix_ms"] >= (*cps)["starts"][0]["unix_ms"]);
  CHECK((*job)["checkpoint_settings"]["mode"] == "aligned");
  CHECK((*job)["checkpoint_settings"]["interval_ms"] == 20);
  REQUIRE(resumed_checkpoint);
  INFO(resumed_checkpoint->dump(2));
  CHECK((*resumed_checkpoint)["id"] == *second.resumed_from);
  CHECK((*resumed_checkpoint)["outcome"] == "completed");
  REQUIRE((*resumed_checkpoint)["task_breakdown"].size() == 4);  // 2 readers, 2 counts
  for (const json& t : (*resumed_checkpoint)["task_breakdown"]) {
    CHECK(t["write_ms"] >= 0);
    CHECK(t["operator_state_bytes"].is_number());
    CHECK(t["channel_state_bytes"] == 0);  // aligned
  }
}

TEST_CASE("the status API answers for a job whose names are not UTF-8, replacing the bytes") {
  temp_dir dir;
  sluice::test::write_corpus_file(dir.file("input.txt"), 3'000'000, 3);
  job_builder job("word\xff" "count");
  build_wordcount(job, {dir.file("input.txt"), dir.file("out"), 1, 0});
  job_settings s;
  s.checkpoint_dir = dir.file("chk");
  s.handle_signals = false;
  s.metrics_address = "127.0.0.1:0";
  std::promise<std::uint16_t> port_promise;
  std::future<std::uint16_t> port_future = port_promise.get_future();
  s.on_metrics_listening = [&port_promise](std::uint16_t p) { port_promise.set_value(p); };
  std::stop_source stop;
  s.stop = stop.get_token();
  job_result result;
  std::thread t([&] { result = run_job(job, s); });
  REQUIRE(port_future.wait_for(60s) == std::future_status::ready);
  const std::uint16_t port = port_future.get();
  std::optional<json> j = get_json(port, "/api/job");
  std::optional<json> g = get_json(port, "/api/graph");
  stop.request_stop();
  t.join();
  REQUIRE(j);
  CHECK((*j)["job"] == "word\xef\xbf\xbd" "count");
  REQUIRE(g);
  CHECK((*g)["job"] == "word\xef\xbf\xbd" "count");
}
