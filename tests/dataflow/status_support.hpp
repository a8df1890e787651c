#pragma once
// What the status page's tests share: a slow, backpressured join (a sink of 200 µs per line, unaligned
// checkpoints every 50 ms unless told) that runs on a thread of its own with its endpoint on an ephemeral port,
// until stopped; and a GET of a JSON view.

#include <sluice/dataflow/job_runner.hpp>
#include <sluice/dataflow/samples.hpp>

#include <support/http_client.hpp>
#include <support/temp_dir.hpp>

#include "join_support.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <functional>
#include <future>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>

namespace sluice::test {

// The view at `path`, parsed; nullopt if it did not answer 200 with JSON.
inline std::optional<nlohmann::json> get_json(std::uint16_t port, const std::string& path) {
  std::optional<http_reply> r = http_get(port, path);
  if (!r || r->status != 200 || r->header("content-type") != "application/json") return std::nullopt;
  nlohmann::json j = nlohmann::json::parse(r->body, nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

class running_join {
 public:
  explicit running_join(const temp_dir& dir, std::chrono::milliseconds checkpoint_interval = std::chrono::milliseconds(50)) {
    write_join_file(dir.file("left.csv"), 20'000, 50, 10'000, 1, "L");
    write_join_file(dir.file("right.csv"), 20'000, 50, 10'000, 2, "R");
    dataflow::build_join(job_, {dir.file("left.csv"), dir.file("right.csv"), dir.file("out"), 2, 1000,
                                std::chrono::microseconds(200)});
    settings_.checkpoint_dir = dir.file("chk");
    settings_.checkpoint_interval = checkpoint_interval;
    settings_.mode = snapshot::checkpoint_mode::unaligned;
    settings_.handle_signals = false;
    settings_.metrics_address = "127.0.0.1:0";
    settings_.on_metrics_listening = [this](std::uint16_t port) { port_.set_value(port); };
    settings_.stop = stop_.get_token();
    std::future<std::uint16_t> port = port_.get_future();
    thread_ = std::thread([this] { result_ = dataflow::run_job(job_, settings_); });
    if (port.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
      stop();
      throw std::runtime_error("running_join: the endpoint did not start");
    }
    port_number_ = port.get();
  }
  running_join(const running_join&) = delete;
  running_join& operator=(const running_join&) = delete;
  ~running_join() { stop(); }

  std::uint16_t port() const noexcept { return port_number_; }
  const dataflow::job_builder& job() const noexcept { return job_; }
  // Polls `view` (every 20 ms, up to `limit`) until `done` holds of it; the last answer.
  std::optional<nlohmann::json> poll(const std::string& view, const std::function<bool(const nlohmann::json&)>& done,
                                     std::chrono::seconds limit = std::chrono::seconds(60)) const {
    std::optional<nlohmann::json> last;
    const auto until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until) {
      last = get_json(port_number_, view);
      if (last && done(*last)) return last;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return last;
  }
  const dataflow::job_result& stop() {
    stop_.request_stop();
    if (thread_.joinable()) thread_.join();
    return result_;
  }

 private:
  dataflow::job_builder job_{"join"};
  dataflow::job_settings settings_;
  std::promise<std::uint16_t> port_;
  std::uint16_t port_number_ = 0;
  std::stop_source stop_;
  std::thread thread_;
  dataflow::job_result result_;
};

}  // namespace sluice::test
