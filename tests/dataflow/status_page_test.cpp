// The status page (status_page.hpp) in a real browser: headless Chromium (Debian's chromium) loads
// it from a running, backpressured join, runs its script against the live JSON views, and the test
// asserts on the DOM it dumps; a screenshot goes to the test output (status-page.png in the tests'
// build directory). Without chromium the test is reported skipped.

#include <support/temp_dir.hpp>

#include "status_support.hpp"

#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <regex>
#include <string>

using sluice::test::http_get;
using sluice::test::running_join;
using sluice::test::temp_dir;

namespace {

constexpr const char* chromium = "/usr/bin/chromium";

// Says so (ctest then reports the test skipped) if there is no Chromium here.
bool chromium_missing() {
  if (::access(chromium, X_OK) == 0) return false;
  std::puts("sluice-test-skipped: /usr/bin/chromium is not installed (Debian package chromium)");
  return true;
}

// Chromium's stdout for `args` and `url` (its stderr, chatty about D-Bus, to `log`).
std::string run_chromium(const temp_dir& dir, const std::string& args, const std::string& url) {
  // --no-sandbox: the tests may run as root, where Chromium's sandbox refuses to start. Its own
  // profile directory, so nothing of the user's is read or written.
  const std::string command = "timeout 120 " + std::string(chromium) +
                              " --headless --no-sandbox --disable-gpu --no-first-run --disable-extensions"
                              " --user-data-dir=" + dir.file("profile") + " " + args + " '" + url + "' 2>>" +
                              dir.file("chromium.log");
  FILE* p = ::popen(command.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[65536];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int status = ::pclose(p);
  INFO(command);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  return out;
}

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

// The inner HTML of the element with that id (no nesting of the same tag inside, as here).
std::string element(const std::string& dom, const std::string& tag, const std::string& id) {
  const std::string open = "<" + tag + " id=\"" + id + "\"";
  const std::size_t at = dom.find(open);
  if (at == std::string::npos) return {};
  const std::size_t start = dom.find('>', at) + 1;
  const std::size_t end = dom.find("</" + tag + ">", start);
  return dom.substr(start, end - start);
}

// The slow sink's tasks (join#*) are the bottleneck and every source is backpressured: the state the
// page is to show, over the API's window of a second.
bool sink_is_bottleneck(const nlohmann::json& graph) {
  bool bottleneck = false;
  for (const nlohmann::json& t : graph["tasks"]) {
    const bool join = t["name"].get<std::string>().rfind("join#", 0) == 0;
    if (join && t["bottleneck"] == true) bottleneck = true;
    if (!join && t["backpressured_ratio"] < 0.5) return false;
  }
  return bottleneck;
}

// The newest completed checkpoint of the history.
std::uint64_t newest_completed(const nlohmann::json& checkpoints) {
  std::uint64_t id = 0;
  for (const nlohmann::json& c : checkpoints["checkpoints"]) {
    if (c["outcome"] == "completed") id = c["id"];
  }
  return id;
}

}  // namespace

TEST_CASE("the status page draws a running job in headless Chromium: graph, checkpoints, per-task breakdown") {
  if (chromium_missing()) return;
  temp_dir dir;
  running_join j(dir);
  // Two completed checkpoints in the history first, so every view has something to draw; and the
  // sink's backpressure established.
  std::optional<nlohmann::json> cps =
      j.poll("/api/checkpoints", [](const nlohmann::json& c) { return c["summary"]["completed"] >= 2; });
  REQUIRE(cps);
  REQUIRE(j.poll("/api/graph", sink_is_bottleneck));
  std::optional<sluice::test::http_reply> page = http_get(j.port(), "/");
  REQUIRE(page);
  CHECK(page->status == 200);
  CHECK(page->header("content-type") == "text/html; charset=utf-8");

  // A checkpoint of the history opened by the URL, as a click in the history table does.
  const std::uint64_t chosen = newest_completed(*cps);
  REQUIRE(chosen > 0);
  const std::string url = "http://127.0.0.1:" + std::to_string(j.port()) + "/#checkpoint=" + std::to_string(chosen);
  // --virtual-time-budget: the page's script runs (its fetches answered by the job) until the
  // budget of virtual time is spent, then the DOM is dumped.
  const std::string dom = run_chromium(dir, "--virtual-time-budget=5000 --dump-dom", url);
  INFO(dom);
  CHECK(dom.find("data-loaded=\"1\"") != std::string::npos);
  CHECK(dom.find("<h1 id=\"job-name\">join</h1>") != std::string::npos);
  CHECK(std::regex_search(dom, std::regex("<span class=\"pill running\" id=\"job-state\">running</span>|"
                                          "id=\"job-state\" class=\"pill running\">running</span>|"
                                          "<span id=\"job-state\" class=\"pill running\">running</span>")));
  CHECK(element(dom, "b", "job-resumed") == "a fresh start");
  // The graph: one .task per task, each named; three stages.
  const std::string graph = element(dom, "div", "graph");
  CHECK(count_of(graph, "<g class=\"task") == 6);
  for (const char* t : {"left#0", "left#1", "right#0", "right#1", "join#0", "join#1"}) {
    CHECK(graph.find(std::string("data-task=\"") + t + "\"") != std::string::npos);
  }
  // Busy and backpressure side by side; the slow sink marked the bottleneck, its sources backpressured.
  CHECK(std::regex_search(graph, std::regex("<g class=\"task bottleneck busy\" data-task=\"join#[01]\"")));
  CHECK(!std::regex_search(graph, std::regex("class=\"task bottleneck[^\"]*\" data-task=\"(left|right)#")));
  // At least one source backpressured: a source that has read its whole range is idle (under
  // TSan two of the four had, and showed idle).
  CHECK(count_of(graph, "class=\"task backpressured\"") >= 1);
  CHECK(count_of(graph, "busy ") >= 6);
  const std::string tasks = element(dom, "tbody", "tasks");
  CHECK(count_of(tasks, "<tr class=\"task-row") == 6);
  CHECK(count_of(tasks, "<td class=\"busy\">") == 6);
  CHECK(count_of(tasks, "<td class=\"backpressured\">") == 6);
  CHECK(std::regex_search(tasks, std::regex("<tr class=\"task-row bottleneck\" data-task=\"join#[01]\">"
                                            "<td>join#[01]<span class=\"badge\">bottleneck</span>")));
  CHECK(graph.find(">left<") != std::string::npos);
  CHECK(graph.find(">join<") != std::string::npos);
  CHECK(graph.find("marker-end") != std::string::npos);  // the edges
  CHECK(count_of(element(dom, "tbody", "executors"), "<tr>") == 2);
  // Checkpoints: counts, both charts, the history table, the newest one per task, the start.
  CHECK(dom.find("<div class=\"l\">completed</div>") != std::string::npos);  // a card of checkpoint-counts
  CHECK(element(dom, "div", "chart-duration").find("<circle") != std::string::npos);
  CHECK(element(dom, "div", "chart-size").find("<rect") != std::string::npos);
  const std::string history = element(dom, "tbody", "history-rows");
  CHECK(count_of(history, "<tr class=\"checkpoint") >= 2);
  CHECK(history.find("unaligned") != std::string::npos);
  CHECK(history.find("completed") != std::string::npos);
  CHECK(element(dom, "span", "latest-id").find("unaligned") != std::string::npos);
  const std::string latest = element(dom, "tbody", "latest-tasks");
  CHECK(count_of(latest, "<tr>") == 6);
  CHECK(latest.find("join#1") != std::string::npos);
  CHECK(latest.find("class=\"stack\"") != std::string::npos);
  CHECK(element(dom, "tbody", "restores").find("fresh start") != std::string::npos);
  // The checkpoint the URL chose: its row marked, its tasks shown.
  const std::string id = std::to_string(chosen);
  // (The table lists the newest 50: under TSan more than 50 checkpoints may come between the choice
  // and the page's dump, and the chosen one is then no longer listed; listed, it is marked.)
  const bool listed = history.find("data-checkpoint=\"" + id + "\"") != std::string::npos;
  CHECK((!listed || history.find("<tr class=\"checkpoint selected\" data-checkpoint=\"" + id + "\">") != std::string::npos));
  CHECK(count_of(history, "<a href=\"#checkpoint=") >= 2);
  CHECK(dom.find("<section id=\"checkpoint-detail\" data-state=\"shown\">") != std::string::npos);
  CHECK(element(dom, "span", "detail-id") == id);
  CHECK(element(dom, "div", "detail-summary").find("completed") != std::string::npos);
  const std::string detail = element(dom, "tbody", "detail-tasks");
  CHECK(count_of(detail, "<tr>") == 6);
  CHECK(detail.find("left#0") != std::string::npos);
  CHECK(detail.find("class=\"stack\"") != std::string::npos);
  // The checkpoint settings.
  const std::string settings = element(dom, "tbody", "settings");
  CHECK(settings.find("<th>mode</th><td>unaligned</td>") != std::string::npos);
  CHECK(settings.find("<th>interval</th><td>50.0 ms</td>") != std::string::npos);
  CHECK(settings.find("<th>retained</th><td>3 completed</td>") != std::string::npos);
  CHECK(settings.find(dir.file("chk")) != std::string::npos);
  CHECK(element(dom, "div", "chart-duration").find("restart-marker") == std::string::npos);  // never restarted
  // The job is up: no "ended" banner.
  CHECK(dom.find("data-ended") == std::string::npos);

  // The screenshot, for a human to look at.
  const std::string shot = std::string(SLUICE_TEST_OUTPUT_DIR) + "/status-page.png";
  std::filesystem::remove(shot);
  run_chromium(dir, "--virtual-time-budget=5000 --hide-scrollbars --window-size=1400,1700 --screenshot=" + shot, url);
  CHECK(std::filesystem::exists(shot));
  CHECK(std::filesystem::file_size(shot) > 20'000);
  std::printf("status page screenshot: %s\n", shot.c_str());

  CHECK(j.stop().exit_code == 130);
}

TEST_CASE("the status page marks a restart on its charts and opens no checkpoint the history lacks") {
  if (chromium_missing()) return;
  temp_dir dir;
  // Checkpoints every half second: the page's charts show the newest 200, and the first run's must
  // still be among them when the page loads (the restart is marked within the checkpoints shown).
  constexpr std::chrono::milliseconds interval(500);
  {
    running_join first(dir, interval);
    REQUIRE(first.poll("/api/checkpoints", [](const nlohmann::json& c) { return c["summary"]["completed"] >= 2; }));
    REQUIRE(first.stop().exit_code == 130);
  }
  running_join j(dir, interval);  // resumes from the first run's newest checkpoint
  // Once the restart's line reached the history (it is written beside the job, not before it).
  std::optional<nlohmann::json> cps =
      j.poll("/api/checkpoints", [](const nlohmann::json& c) { return c["summary"]["restores"] == 1; });
  REQUIRE(cps);
  REQUIRE((*cps)["starts"].size() == 2);
  const nlohmann::json resumed = (*cps)["starts"][1]["resumed_from"];
  REQUIRE(resumed.is_number());
  const std::string resumed_from = std::to_string(resumed.get<std::uint64_t>());

  const std::string url = "http://127.0.0.1:" + std::to_string(j.port()) + "/#checkpoint=987654321";
  const std::string dom = run_chromium(dir, "--virtual-time-budget=5000 --dump-dom", url);
  INFO(dom);
  CHECK(dom.find("data-loaded=\"1\"") != std::string::npos);
  CHECK(element(dom, "b", "job-resumed") == "checkpoint " + resumed_from);
  // One restart, marked where it happened with what it resumed from; the first start precedes
  // every checkpoint shown, so it is no marker.
  const std::string chart = element(dom, "div", "chart-duration");
  CHECK(count_of(chart, "<g class=\"restart-marker\">") == 1);
  CHECK(chart.find(">restart, resumed from checkpoint " + resumed_from + "</text>") != std::string::npos);
  CHECK(count_of(element(dom, "tbody", "restores"), "<tr>") == 2);
  // The URL's checkpoint is not in the history: the panel says so instead of a breakdown.
  CHECK(dom.find("<section id=\"checkpoint-detail\" data-state=\"missing\">") != std::string::npos);
  CHECK(element(dom, "div", "detail-summary").find("checkpoint 987654321 is not in the history") != std::string::npos);
  CHECK(element(dom, "tbody", "detail-tasks").empty());
  CHECK(j.stop().exit_code == 130);
}

TEST_CASE("the status page says so when the job's endpoint stops answering") {
  if (chromium_missing()) return;
  temp_dir dir;
  running_join j(dir);
  REQUIRE(j.poll("/api/checkpoints", [](const nlohmann::json& c) { return c["summary"]["completed"] >= 1; }));
  const std::string page = http_get(j.port(), "/").value().body;
  j.stop();
  // The page as the job served it, with its views gone: loaded from a file, its relative fetches
  // (api/job, ...) fail as a page left open does once the job's endpoint has closed.
  const std::string file = dir.file("page.html");
  {
    std::FILE* f = std::fopen(file.c_str(), "w");
    REQUIRE(f != nullptr);
    std::fwrite(page.data(), 1, page.size(), f);
    std::fclose(f);
  }
  const std::string dom = run_chromium(dir, "--virtual-time-budget=6000 --dump-dom", "file://" + file);
  INFO(dom);
  CHECK(dom.find("data-ended=\"1\"") != std::string::npos);
  CHECK(dom.find("id=\"job-state\">ended<") != std::string::npos);
  CHECK(dom.find("data-loaded") == std::string::npos);
}
