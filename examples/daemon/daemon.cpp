// A small service that embeds a sluice job in its own engine (docs/writing-a-job.md, "Embedding a
// job in a service"), built against the installed package and run end to end by scripts/run-tests.sh
// (tests/install/daemon_smoke.sh).
//
//   sluice_daemon --input FILE --output DIR --checkpoint-dir DIR [--control HOST:PORT]
//                 [--metrics HOST:PORT]
//
// - The engine is the daemon's: its executors run the job's tasks and the daemon's own coroutines
//   (here a control port: a line "stats" answers the job's progress, "drain" stops it).
// - Signals are the daemon's: it asks the engine to read SIGINT/SIGTERM and decides what they mean:
//   SIGTERM drains the job (stop with a final checkpoint, exit 0; the next start resumes from it),
//   SIGINT stops it at once (exit 130; the next start resumes from the latest checkpoint).
// - It prints "ready (fresh start)" or "ready (resumed from checkpoint N)" once the job runs, and
//   the job's end; its exit code is the job's. With --metrics, the job serves Prometheus metrics
//   (and its status page) there, and the daemon prints "metrics on http://HOST:PORT/metrics".

#include <sluice/dataflow/job_handle.hpp>
#include <sluice/dataflow/samples.hpp>
#include <sluice/io/address.hpp>
#include <sluice/io/tcp.hpp>
#include <sluice/runtime/engine.hpp>
#include <sluice/runtime/scope.hpp>

#include <array>
#include <csignal>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

using namespace sluice;

namespace {

struct options {
  std::string input, output, checkpoint_dir;
  std::string control = "127.0.0.1:0";
  std::string metrics;
};

// One control connection: a line in, a line out.
runtime::task<void> serve_control(io::tcp_stream s, dataflow::job_handle job) {
  std::array<std::byte, 256> buf;
  std::string line;
  for (;;) {
    auto n = co_await s.recv(buf);
    if (!n || n.value() == 0) co_return;
    line.append(reinterpret_cast<const char*>(buf.data()), n.value());
    std::size_t nl = 0;
    while ((nl = line.find('\n')) != std::string::npos) {
      const std::string command = line.substr(0, nl);
      line.erase(0, nl + 1);
      std::string answer;
      if (command == "stats") {
        const dataflow::job_progress p = co_await job.stats();
        answer = "records " + std::to_string(p.source_records) + " written " + std::to_string(p.records_written) +
                 " checkpoints " + std::to_string(p.checkpoints_completed) + "\n";
      } else if (command == "drain") {
        job.stop(dataflow::stop_mode::drain);
        answer = "draining\n";
      } else {
        answer = "unknown command (stats, drain)\n";
      }
      auto sent = co_await s.send_all({reinterpret_cast<const std::byte*>(answer.data()), answer.size()});
      if (!sent) co_return;
    }
  }
}

runtime::task<void> control_port(io::tcp_listener* listener, dataflow::job_handle job) {
  runtime::scope clients;
  for (;;) {
    auto s = co_await listener->accept();  // ends when the daemon's stop token fires
    if (!s) break;
    clients.spawn(serve_control(std::move(s).value(), job));
  }
  co_await clients.join();
}

runtime::task<int> run(options o, runtime::engine* eng, dataflow::job_handle* handle) {
  dataflow::job_builder graph("daemon-wordcount");
  // Any job graph goes here (dataflow/job.hpp); this one is the sample word count per 1000 lines.
  dataflow::build_wordcount(graph, {o.input, o.output, 2, 1000});
  dataflow::job_settings settings;
  settings.checkpoint_dir = o.checkpoint_dir;
  settings.checkpoint_interval = std::chrono::milliseconds(200);
  settings.executors = static_cast<unsigned>(eng->size());
  settings.metrics_address = o.metrics;
  settings.on_metrics_listening = [](std::uint16_t port) {
    std::printf("metrics on http://127.0.0.1:%u/metrics\n", static_cast<unsigned>(port));
    std::fflush(stdout);
  };
  settings.on_ready = [](std::optional<snapshot::checkpoint_id> from) {
    if (from) {
      std::printf("ready (resumed from checkpoint %llu)\n", static_cast<unsigned long long>(*from));
    } else {
      std::printf("ready (fresh start)\n");
    }
    std::fflush(stdout);
  };
  *handle = dataflow::start_job(*eng, graph, std::move(settings));

  auto where = io::address::parse(o.control);
  if (!where) {
    std::fprintf(stderr, "--control: %s\n", where.error().message().c_str());
    handle->stop(dataflow::stop_mode::now);
    co_await handle->wait();
    co_return 2;
  }
  auto listener = io::tcp_listener::listen(where.value());
  if (!listener) {
    std::fprintf(stderr, "--control: %s\n", listener.error().message().c_str());
    handle->stop(dataflow::stop_mode::now);
    co_await handle->wait();
    co_return 1;
  }
  std::printf("control on %s\n", listener.value().local_address().to_string().c_str());
  std::fflush(stdout);
  std::stop_source control_stop;
  runtime::scope daemon_tasks;
  daemon_tasks.spawn(runtime::with_stop_token(control_port(&listener.value(), *handle), control_stop.get_token()));

  const dataflow::job_result r = co_await handle->wait();
  control_stop.request_stop();
  co_await daemon_tasks.join();
  if (r.stopped_at) {
    std::printf("job stopped with checkpoint %llu (resumable)\n", static_cast<unsigned long long>(*r.stopped_at));
  } else {
    std::printf("job ended: exit %d%s%s\n", r.exit_code, r.message.empty() ? "" : ": ", r.message.c_str());
  }
  std::printf("records %llu, checkpoints %llu\n", static_cast<unsigned long long>(r.final.source_records),
              static_cast<unsigned long long>(r.final.checkpoints_completed));
  co_return r.exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view flag = argv[i];
    if (flag == "--input") o.input = argv[i + 1];
    else if (flag == "--output") o.output = argv[i + 1];
    else if (flag == "--checkpoint-dir") o.checkpoint_dir = argv[i + 1];
    else if (flag == "--control") o.control = argv[i + 1];
    else if (flag == "--metrics") o.metrics = argv[i + 1];
    else {
      std::fprintf(stderr, "unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (o.input.empty() || o.output.empty() || o.checkpoint_dir.empty()) {
    std::fprintf(stderr, "usage: %s --input FILE --output DIR --checkpoint-dir DIR [--control HOST:PORT] [--metrics HOST:PORT]\n", argv[0]);
    return 2;
  }
  dataflow::job_handle handle;  // set on executor 0 before any signal can be read there
  runtime::engine_options eo;
  eo.executors = 2;
  eo.handle_signals = true;  // the daemon's choice: the engine reads them, the daemon decides
  eo.on_signal = [&handle](int signo) {
    std::printf("%s: %s\n", signo == SIGTERM ? "SIGTERM" : "SIGINT",
                signo == SIGTERM ? "draining the job" : "stopping the job now");
    std::fflush(stdout);
    handle.stop(signo == SIGTERM ? dataflow::stop_mode::drain : dataflow::stop_mode::now);
    return false;  // the engine runs on: the job's end ends the daemon
  };
  runtime::engine eng(eo);
  try {
    return eng.block_on(run(o, &eng, &handle));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice_daemon: %s\n", e.what());
    return 2;
  }
}
