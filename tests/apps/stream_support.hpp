#pragma once
// What the tests of jobs on JetStream share (connector_jobs_test.cpp, stream_join_test.cpp): a
// stream filled with lines and read back, and a job run with SIGKILLs until it ends.
#include "cluster_support.hpp"

#include <sluice/nats/client.hpp>
#include <sluice/nats/connectors.hpp>
#include <sluice/nats/jetstream.hpp>
#include <sluice/runtime/task.hpp>

#include <support/nats_server.hpp>
#include <support/temp_dir.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace sluice::test {

// Makes stream `stream` (its subject: its name) and publishes `lines` into it, a message each.
inline runtime::task<void> fill_stream(std::uint16_t port, std::string stream, std::vector<std::string> lines) {
  auto c = (co_await nats::connection::connect(io::address::loopback_v4(port))).value();
  std::vector<std::string> subjects;
  subjects.push_back(stream);
  (co_await nats::create_stream(*c, stream, std::move(subjects))).value();
  std::vector<std::shared_ptr<nats::pending_reply>> slots;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    slots.push_back((co_await nats::publish_async(*c, stream, lines[i], "in-" + std::to_string(i))).value());
    if (slots.size() == 1000) {
      for (auto& s : slots) (co_await nats::await_ack(*c, s)).value();
      slots.clear();
    }
  }
  for (auto& s : slots) (co_await nats::await_ack(*c, s)).value();
  co_await c->close();
}

// What a source emitted (read_stream).
struct collected final : dataflow::collector<std::string> {
  std::vector<std::string> records;
  void collect(const std::string& r) override { records.push_back(r); }
  void watermark(std::uint64_t) override {}
  void end_of_data() override {}
};

// Every message of stream `stream`, in order (a bounded source read to its end).
inline runtime::task<std::vector<std::string>> read_stream(std::uint16_t port, std::string stream) {
  dataflow::connector_context ctx;
  ctx.job = "reader";
  auto url = nats::parse_url("nats://127.0.0.1:" + std::to_string(port) + "/" + stream).value();
  auto source = nats::make_jetstream_source(ctx, url, true);
  (co_await source->open()).value();
  collected got;
  dataflow::source_output<std::string> out(got);
  for (;;) {
    auto status = (co_await source->read(out, 1000)).value();
    if (status == dataflow::read_status::end) break;
    if (status == dataflow::read_status::idle) co_await source->wait_readable();
  }
  co_await source->close();
  co_return got.records;
}

// `v`, sorted: outputs compared as sets of lines.
inline std::vector<std::string> sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  return v;
}

// Runs the tool with `args` until it exits, SIGKILLing it at a random moment in [from, to) up to
// `kills` times first. Returns the final exit code; `landed` counts the kills that hit a running job.
inline int run_with_kills(const std::vector<std::string>& args, const std::string& log, int kills, std::mt19937& random,
                          int from_ms, int to_ms, int& landed) {
  landed = 0;
  for (int attempt = 0;; ++attempt) {
    tool_process p(args, log);
    if (attempt < kills) {
      std::this_thread::sleep_for(std::chrono::milliseconds(from_ms + static_cast<int>(random() % (to_ms - from_ms))));
      if (p.running()) {
        p.kill(SIGKILL);
        (void)p.wait(std::chrono::seconds(10));
        ++landed;
        continue;
      }
    }
    const std::optional<int> code = p.wait(std::chrono::seconds(120));
    if (!code) return -1000;
    if (*code != 0 && attempt < kills) continue;  // ended on its own before the kill: look at it below
    return *code;
  }
}

// dir/name, made.
inline std::string subdir(const temp_dir& dir, const std::string& name) {
  std::filesystem::create_directories(dir.file(name));
  return dir.file(name);
}

// The URL of stream or subject `name` on server `n`.
inline std::string nats_at(const nats_server& n, const std::string& name) {
  return "nats://127.0.0.1:" + std::to_string(n.port()) + "/" + name;
}

}  // namespace sluice::test
