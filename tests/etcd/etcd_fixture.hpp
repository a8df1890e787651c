#pragma once
// Shared by the etcd tests: a running etcd in a temporary directory, and a way to run a scenario
// on one executor (a client lives on one executor; block_on may be called on it again after
// the server was stopped or restarted from the test's thread).

#include <sluice/etcd/client.hpp>
#include <sluice/runtime/executor.hpp>

#include <support/etcd_server.hpp>
#include <support/temp_dir.hpp>

#include <chrono>
#include <string>

namespace sluice::test {

struct running_etcd {
  temp_dir dir;
  etcd_server server{dir.path()};

  running_etcd() { server.start(); }
  etcd::endpoint where() const { return etcd::endpoint::parse(server.endpoint()).value(); }
};

inline etcd::client_options quick(std::chrono::milliseconds timeout = std::chrono::milliseconds(3000)) {
  etcd::client_options o;
  o.request_timeout = timeout;
  return o;
}

}  // namespace sluice::test
