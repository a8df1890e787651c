// A job across two workers (job_worker, cluster_link.hpp) in one process, over a link of the test's
// own: the follower's sinks must commit the leader's final checkpoint even when its end of data
// (over the data port) comes long before the leader's word that the checkpoint completed.
//
// In the cluster the leader's `c/<id>` and `f` travel through etcd (cluster/src/attempt_link.cpp),
// while its end of data travels over TCP, straight after its final checkpoint completed; nothing
// orders the two on a follower. The windowed word count reads its input in one task, on the leader:
// a follower's sinks have no input of their own worker, so their end of data comes only from the
// leader. A sink that ended on its end of data and never waited for the completion left its final
// checkpoint's staged output unpublished, and its worker still ended the job with exit code 0 (the
// abuse test lost 63 lines of its last part so, once). Here the link delivers every message the
// leader sends after its tasks' data ended a second late, in order: what etcd does on a loaded host.

#include <sluice/dataflow/cluster_link.hpp>
#include <sluice/dataflow/job_plan.hpp>
#include <sluice/dataflow/job_worker.hpp>
#include <sluice/dataflow/samples.hpp>
#include <sluice/runtime/engine.hpp>
#include <sluice/runtime/event.hpp>
#include <sluice/runtime/scope.hpp>
#include <sluice/runtime/timer.hpp>

#include <support/free_port.hpp>
#include <support/temp_dir.hpp>

#include "wordcount_support.hpp"

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <deque>
#include <fstream>
#include <latch>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace sluice;
namespace ss = sluice::snapshot;
namespace rt = sluice::runtime;
using namespace std::chrono_literals;

namespace {

// What the leader says to the follower (attempt_link's t/, c/, x/ and f), in the order it says it.
struct leader_message {
  char kind;  // 't', 'c', 'x', 'f'
  ss::checkpoint_id id = 0;
  ss::checkpoint_mode mode = ss::checkpoint_mode::aligned;
  bool late = false;  // sent after every task's data ended: delivered `delay` later
};

class fake_link;

struct bus {
  std::vector<std::string> ports;
  std::atomic<unsigned> ready{0};
  fake_link* links[2] = {nullptr, nullptr};
  std::chrono::milliseconds delay{1000};
};

class fake_link final : public dataflow::cluster_link, public ss::checkpoint_acknowledger {
 public:
  fake_link(bus& b, const dataflow::job_plan& plan, unsigned me) : bus_(b), plan_(plan), me_(me) {}

  rt::executor* home = nullptr;  // executor 0 of this worker's engine (set before either runs)
  std::vector<std::string> failures;

  unsigned workers() const noexcept override { return 2; }
  unsigned worker() const noexcept override { return me_; }
  bool leader() const noexcept override { return me_ == 0; }
  io::address listen() const override { return io::address::parse(bus_.ports[me_]).value(); }
  std::vector<io::address> peers() const override {
    return {io::address::parse(bus_.ports[0]).value(), io::address::parse(bus_.ports[1]).value()};
  }
  buffers::transport_options transport() const override {
    buffers::transport_options o;
    o.job_name = "final-commit";
    o.epoch = 1;
    o.node_id = bus_.ports[me_];
    return o;
  }
  ss::checkpoint_id newest_allowed() const override { return ss::max_checkpoint_id; }
  ss::checkpoint_id first_free_id() const override { return 1; }
  rt::task<void> ports_ready() override {
    bus_.ready.fetch_add(1);
    while (bus_.ready.load() < 2) {
      const bool slept = co_await rt::sleep_for(5ms);
      if (!slept) co_return;
    }
  }

  // --- the leader ---
  rt::task<io::result<void>> reserve_ids(ss::checkpoint_id) override { co_return io::result<void>{}; }
  rt::task<io::result<void>> publish(ss::checkpoint_id) override { co_return io::result<void>{}; }
  std::vector<ss::checkpoint_participant*> remote_tasks(ss::checkpoint_acknowledger& coordinator) override {
    coordinator_ = &coordinator;
    std::vector<ss::checkpoint_participant*> out;
    for (const dataflow::task_plan& t : plan_.tasks()) {
      if (t.worker == me_) continue;
      remote_.push_back(std::make_unique<remote>(*this, t.id, plan_.stages()[t.stage].upstreams.empty()));
      out.push_back(remote_.back().get());
    }
    return out;
  }
  rt::task<void> all_data_ended() override { (void)co_await all_data_ended_.wait(); }
  void finish() override { say({'f'}); }

  // --- every worker ---
  ss::checkpoint_acknowledger& leader_acknowledger() override { return *this; }
  void attach_local(ss::checkpoint_participant& task) override { local_.push_back(&task); }
  void data_ended(ss::task_id task) override {
    fake_link* leader = bus_.links[0];
    leader->home->post([leader, task] { leader->count_data_ended(task); });
  }
  rt::task<void> finish_requested() override { (void)co_await finish_.wait(); }
  void failed(std::string why) override { failures.push_back(std::move(why)); }
  rt::task<std::string> ended() override {
    (void)co_await never_.wait();  // (returns once the runner stops waiting)
    co_return std::string();
  }

  // The follower's acknowledgements, to the leader's coordinator (any executor).
  void acknowledge(ss::task_id task, ss::checkpoint_id id, ss::task_checkpoint_stats stats) override {
    fake_link* leader = bus_.links[0];
    leader->home->post([leader, task, id, stats]() mutable { leader->coordinator_->acknowledge(task, id, std::move(stats)); });
  }
  void decline(ss::task_id task, ss::checkpoint_id id, ss::abort_reason reason, std::string detail) override {
    fake_link* leader = bus_.links[0];
    leader->home->post([leader, task, id, reason, detail]() mutable {
      leader->coordinator_->decline(task, id, reason, std::move(detail));
    });
  }

  // Once the attempt returned: the deliveries still running end.
  rt::task<void> close() {
    deliveries_.request_stop();
    co_await deliveries_.join();
  }

 private:
  class remote final : public ss::checkpoint_participant {
   public:
    remote(fake_link& link, ss::task_id id, bool source) : link_(link), id_(id), source_(source) {}
    ss::task_id id() const noexcept override { return id_; }
    bool is_source() const noexcept override { return source_; }
    rt::executor& home() const noexcept override { return *link_.home; }
    void trigger_checkpoint(ss::checkpoint_id id, ss::checkpoint_mode mode, const ss::trigger_options&) override {
      if (link_.triggered_.insert(id).second) link_.say({'t', id, mode});
    }
    void notify_checkpoint_complete(ss::checkpoint_id id) override {
      if (link_.completed_.insert(id).second) link_.say({'c', id});
    }
    void notify_checkpoint_aborted(ss::checkpoint_id id, ss::abort_reason, std::string_view) override {
      if (link_.aborted_.insert(id).second) link_.say({'x', id});
    }

   private:
    fake_link& link_;
    ss::task_id id_;
    bool source_;
  };

  void count_data_ended(ss::task_id task) {
    data_ended_.insert(task);
    if (data_ended_.size() == plan_.tasks().size()) all_data_ended_.set();
  }

  // Leader: to the follower, in order.
  void say(leader_message m) {
    m.late = all_data_ended_.is_set();
    fake_link* follower = bus_.links[1];
    follower->home->post([follower, m] { follower->hear(m); });
  }

  // Follower: one delivery at a time, in the order the leader said them.
  void hear(leader_message m) {
    heard_.push_back(m);
    if (delivering_) return;
    delivering_ = true;
    deliveries_.spawn(deliver());
  }
  rt::task<void> deliver() {
    while (!heard_.empty()) {
      const leader_message m = heard_.front();
      heard_.pop_front();
      if (m.late) {
        const bool slept = co_await rt::sleep_for(bus_.delay);
        if (!slept) break;
      }
      dispatch(m);
    }
    delivering_ = false;
  }
  // As attempt_link::on_message does for a follower.
  void dispatch(const leader_message& m) {
    if (m.kind == 'f') {
      finish_.set();
      return;
    }
    for (ss::checkpoint_participant* t : local_) {
      const ss::checkpoint_id id = m.id;
      if (m.kind == 't' && t->is_source()) {
        const ss::checkpoint_mode mode = m.mode;
        t->home().post([t, id, mode] { t->trigger_checkpoint(id, mode, ss::trigger_options{}); });
      } else if (m.kind == 'c') {
        t->home().post([t, id] { t->notify_checkpoint_complete(id); });
      } else if (m.kind == 'x') {
        t->home().post([t, id] { t->notify_checkpoint_aborted(id, ss::abort_reason::coordinator, "aborted"); });
      }
    }
  }

  bus& bus_;
  const dataflow::job_plan& plan_;
  unsigned me_;
  ss::checkpoint_acknowledger* coordinator_ = nullptr;
  std::vector<std::unique_ptr<remote>> remote_;
  std::vector<ss::checkpoint_participant*> local_;
  std::set<ss::task_id> data_ended_;
  std::set<ss::checkpoint_id> triggered_, completed_, aborted_;
  rt::event all_data_ended_;
  rt::event finish_;
  rt::event never_;
  std::deque<leader_message> heard_;
  bool delivering_ = false;
  rt::scope deliveries_;
};

rt::task<dataflow::job_result> run_worker(dataflow::job_worker* w, rt::engine* eng, fake_link* link) {
  dataflow::job_result r = co_await w->run_attempt(*eng, *link);
  co_await link->close();
  co_return r;
}

}  // namespace

TEST_CASE("job worker: a follower whose end of data outruns the leader's word that the final checkpoint completed "
          "still publishes it (two workers in one process)") {
  test::temp_dir dir;
  const std::string input = dir.file("input.txt");
  constexpr std::uint64_t window = 500;
  test::write_corpus_file(input, 6000, 3);
  dataflow::wordcount_options o{input, dir.file("out"), 2, window};

  bus b;
  b.ports = {"127.0.0.1:" + std::to_string(test::free_port()), "127.0.0.1:" + std::to_string(test::free_port())};
  dataflow::job_result results[2];
  std::vector<std::string> failures[2];
  {
    dataflow::job_builder jobs[2] = {dataflow::job_builder("final-commit"), dataflow::job_builder("final-commit")};
    std::unique_ptr<dataflow::job_worker> workers[2];
    std::optional<dataflow::job_plan> plans[2];
    for (unsigned i = 0; i < 2; ++i) {
      dataflow::build_wordcount(jobs[i], o);
      dataflow::job_settings s = test::test_job_settings(dir.file("chk"), ss::checkpoint_mode::aligned, "local");
      s.checkpoint_interval = 50ms;
      auto prepared = dataflow::job_worker::prepare(jobs[i], s, 2, i);
      REQUIRE(std::holds_alternative<std::unique_ptr<dataflow::job_worker>>(prepared));
      workers[i] = std::move(std::get<std::unique_ptr<dataflow::job_worker>>(prepared));
      plans[i].emplace(dataflow::job_plan::make(jobs[i], dataflow::plan_shape{.workers = 2, .executors = s.executors,
                                                                               .transport = s.transport,
                                                                               .floating_buffers = s.floating_buffers}));
    }
    // The follower's tasks all take their input from the leader's one reader.
    for (const dataflow::task_plan& t : plans[1]->tasks()) {
      if (t.worker == 1) REQUIRE_FALSE(plans[1]->stages()[t.stage].upstreams.empty());
    }
    fake_link links[2] = {fake_link(b, *plans[0], 0), fake_link(b, *plans[1], 1)};
    b.links[0] = &links[0];
    b.links[1] = &links[1];
    std::latch homes_set(2);
    std::vector<std::thread> threads;
    for (unsigned i = 0; i < 2; ++i) {
      threads.emplace_back([&, i] {
        rt::engine eng({.executors = workers[i]->settings().executors, .handle_signals = false});
        links[i].home = &eng.at(0);
        homes_set.arrive_and_wait();
        results[i] = eng.block_on(run_worker(workers[i].get(), &eng, &links[i]));
        eng.stop();
      });
    }
    for (std::thread& t : threads) t.join();
    for (unsigned i = 0; i < 2; ++i) failures[i] = links[i].failures;
  }
  for (unsigned i = 0; i < 2; ++i) {
    INFO("worker " << i << ": " << results[i].message);
    CHECK(results[i].exit_code == 0);
    CHECK(failures[i].empty());
  }
  const std::vector<std::string> expected = test::expected_counts(input, window);
  const std::vector<std::string> got = test::published_lines(dir.file("out"));
  INFO(expected.size() << " lines expected, " << got.size() << " published");
  CHECK(got.size() == expected.size());
  CHECK((got == expected));
}
