// job_plan: placement, channels and the memory budget, from the graph alone (no engine).

#include <sluice/dataflow/job.hpp>
#include <sluice/dataflow/job_plan.hpp>
#include <sluice/dataflow/sinks.hpp>

#include <catch2/catch.hpp>

#include <set>
#include <stdexcept>

using namespace sluice::dataflow;

namespace {

// read (p) -> count (p) -> sink, as the word count.
job_builder two_stages(std::size_t p) {
  job_builder job("plan");
  job.read_lines("read", "/nonexistent/in.txt", p)
      .key_by<std::string>([](const std::string& w) { return w; })
      .aggregate<std::uint64_t, std::string>(
          "count", p, [](std::uint64_t& n, const std::string&) { ++n; },
          [](const std::string& w, const std::uint64_t& n) { return w + " " + std::to_string(n); })
      .write_lines("/nonexistent/out", [](const std::string& line) { return line; });
  return job;
}

}  // namespace

TEST_CASE("job_plan: one worker places task t on executor t mod E, as every run before it") {
  job_builder job = two_stages(3);
  const job_plan plan = job_plan::make(job, plan_shape{.workers = 1, .executors = 2});
  REQUIRE(plan.tasks().size() == 6);
  for (const task_plan& t : plan.tasks()) {
    CHECK(t.worker == 0);
    CHECK(t.executor == t.id % 2);
  }
  CHECK(plan.stages()[0].outputs == std::vector<output_port>{{1, 0, 0, 3}});
  CHECK(plan.task(0).downstream_parallelism == 3);
  CHECK(plan.task(3).downstream_parallelism == 0);
  CHECK(plan.task(3).input_channels == std::vector<std::size_t>{3});
}

TEST_CASE("job_plan: across workers every worker gets tasks, and channels between workers are tcp") {
  job_builder job = two_stages(3);
  const job_plan plan = job_plan::make(job, plan_shape{.workers = 3, .executors = 2, .transport = transport_kind::local});
  for (unsigned w = 0; w < 3; ++w) CHECK(plan.tasks_on(w) == 2);
  std::set<std::pair<unsigned, unsigned>> places;
  for (const task_plan& t : plan.tasks()) {
    CHECK(t.worker == t.id % 3);
    CHECK(t.executor == (t.id / 3) % 2);
    places.emplace(t.worker, t.executor);
  }
  CHECK(places.size() == 6);  // read#i and count#i of one worker on different executors
  for (const task_plan& t : plan.tasks()) {
    for (const channel_plan& c : plan.inputs_of(t.id)) {
      const bool same = plan.task(c.producer).worker == plan.task(c.consumer).worker;
      CHECK(c.transport == (same ? transport_kind::local : transport_kind::tcp));
    }
  }
}

TEST_CASE("job_plan: the channels into a consumer are in gate order, and outputs mirror them") {
  job_builder job = two_stages(2);
  const job_plan plan = job_plan::make(job, plan_shape{.workers = 2, .executors = 1});
  const std::vector<channel_plan> in = plan.inputs_of(3);
  REQUIRE(in.size() == 2);
  CHECK(in[0].producer == 0);
  CHECK(in[1].producer == 1);
  CHECK(in[0].gate_channel == 0);
  CHECK(in[1].gate_channel == 1);
  CHECK(in[0].subpartition == 1);  // consumer subtask
  const std::vector<channel_plan> out = plan.outputs_of(1);
  REQUIRE(out.size() == 2);
  CHECK(out[0].consumer == 2);
  CHECK(out[1].consumer == 3);
  CHECK(out[1].gate_channel == 1);
  CHECK(plan.outputs_of(2).empty());
}

TEST_CASE("job_plan: an executor's share of network memory is the sum of its tasks' budgets") {
  job_builder job = two_stages(4);
  const job_plan plan = job_plan::make(job, plan_shape{.workers = 1, .executors = 2, .floating_buffers = 8});
  // read: output 3*4+8 = 20, priority 4; count: exclusive 2*4 = 8, floating 8.
  CHECK(plan.task(0).buffers.total() == 24);
  CHECK(plan.task(4).buffers.total() == 16);
  // Each executor holds two readers and two counters: 2*24 + 2*16 + 16 slack.
  CHECK(plan.segments_per_executor() == 2 * 24 + 2 * 16 + 16);
  const job_plan spread = job_plan::make(job, plan_shape{.workers = 2, .executors = 2, .floating_buffers = 8});
  // Worker 0 has tasks 0, 2, 4, 6: executor 0 gets 0 and 4 (24 + 16), executor 1 gets 2 and 6.
  CHECK(spread.segments_per_executor(0) == 24 + 16 + 16);
}

TEST_CASE("job_plan: graphs and shapes that cannot run are refused, naming the stage") {
  job_builder empty("empty");
  CHECK_THROWS_AS(job_plan::make(empty, {}), std::invalid_argument);
  job_builder open("open");
  (void)open.read_lines("read", "/nonexistent", 1);
  open.add_stage("dangling", 1, {});
  CHECK_THROWS_WITH(job_plan::make(open, {}), "stage 'read' has no output (add a sink)");
  job_builder fine = two_stages(1);
  CHECK_THROWS_AS(job_plan::make(fine, plan_shape{.workers = 0}), std::invalid_argument);
  CHECK_THROWS_AS(job_plan::make(fine, plan_shape{.executors = 0}), std::invalid_argument);
}

TEST_CASE("job_plan: transport names parse both ways") {
  CHECK(parse_transport("local") == transport_kind::local);
  CHECK(parse_transport("tcp") == transport_kind::tcp);
  CHECK_FALSE(parse_transport("udp").has_value());
  CHECK(std::string(to_string(transport_kind::tcp)) == "tcp");
}

TEST_CASE("job_plan: the memory budget names the busiest executor, its tasks and buffers, and the total") {
  job_builder job = two_stages(4);
  const job_plan plan = job_plan::make(job, plan_shape{.workers = 1, .executors = 2, .floating_buffers = 8});
  const memory_budget m = plan.budget(32 * 1024);
  CHECK(m.executors == 2);
  CHECK(m.busiest_tasks == 4);
  CHECK(m.busiest.output == 2 * 20);
  CHECK(m.busiest.priority == 2 * 4);
  CHECK(m.busiest.exclusive == 2 * 8);
  CHECK(m.busiest.floating == 2 * 8);
  CHECK(m.segments_per_executor == plan.segments_per_executor());
  CHECK(m.total_bytes() == 2 * (2 * 24 + 2 * 16 + 16) * 32 * 1024);
  // 64 x 64 on 64 executors: each executor a reader and a counter, 64 channels each way.
  job_builder wide = two_stages(64);
  const memory_budget w =
      job_plan::make(wide, plan_shape{.workers = 1, .executors = 64, .floating_buffers = 8}).budget(32 * 1024);
  CHECK(w.segments_per_executor == (3 * 64 + 8 + 4) + (2 * 64 + 8) + 16);
  CHECK(w.total_bytes() == std::size_t{64} * w.segments_per_executor * 32 * 1024);
}
