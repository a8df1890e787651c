#pragma once
// keys: where a job across workers keeps its state in etcd, all under /sluice/<job name>/.

#include <fmt/core.h>

#include <cstdint>
#include <string>

namespace sluice::cluster::detail {

struct keys {
  std::string prefix;  // "/sluice/<job>/"

  explicit keys(const std::string& job) : prefix("/sluice/" + job + "/") {}
  std::string members() const { return prefix + "member/"; }
  std::string member(unsigned i) const { return fmt::format("{}member/{}", prefix, i); }
  std::string leader() const { return prefix + "leader"; }
  std::string attempt() const { return prefix + "attempt"; }
  std::string pointer() const { return prefix + "pointer"; }
  std::string next_id() const { return prefix + "next-id"; }
  // Written once, by the leader, when every worker's tasks ended with the final checkpoint.
  std::string finished() const { return prefix + "finished"; }
  // One attempt's messages.
  std::string messages(std::uint64_t n) const { return fmt::format("{}a/{}/", prefix, n); }
  std::string attempts() const { return prefix + "a/"; }
  // Worker <w>'s tasks of attempt <n> ended the job (no lease: it outlives the worker).
  std::string done(std::uint64_t n) const { return messages(n) + "done/"; }
  std::string done(std::uint64_t n, unsigned w) const { return fmt::format("{}{}", done(n), w); }
};

}  // namespace sluice::cluster::detail
