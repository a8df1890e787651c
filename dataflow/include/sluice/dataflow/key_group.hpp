#pragma once
// Key groups: the unit keyed state is owned, snapshotted and (later) moved in (docs/state.md).
//
// A keyed stage has a fixed number of key groups, its max parallelism G (default 128, at least its
// parallelism, part of the job's identity). A key belongs to key group
//     key_group_of(key, G) = mix(stable_hash(key)) mod G
// and task i of a stage of parallelism P owns the contiguous range of key groups
//     key_group_range_of(i, P, G) = [ceil(i * G / P), ceil((i + 1) * G / P))
// so key group g goes to task owner_of(g, P, G) = floor(g * P / G), as Flink assigns them. The
// routing of a key_by exchange (key -> key group -> task) and the state of the task that receives the
// key agree by construction; a job resumed at another parallelism moves whole key groups.
//
// mix() is a 64-bit finaliser (MurmurHash3's fmix64): FNV-1a, which stable_hash is, leaves its low
// bits poorly mixed, and both the key group and a state table's buckets take bits from the result.

#include <sluice/dataflow/key_hash.hpp>

#include <cstddef>
#include <cstdint>

namespace sluice::dataflow {

using key_group = std::uint32_t;

// The default max parallelism of a keyed stage; the most a stage may have is max_key_groups.
inline constexpr std::size_t default_key_groups = 128;
inline constexpr std::size_t max_key_groups = 32768;

constexpr std::uint64_t mix_hash(std::uint64_t h) noexcept {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

// A key's hash as key groups and state tables use it: stable across runs and hosts.
template <class K>
std::uint64_t key_group_hash(const K& key) {
  return mix_hash(stable_hash(key));
}

constexpr key_group key_group_of_hash(std::uint64_t mixed, std::size_t groups) noexcept {
  return static_cast<key_group>(mixed % groups);
}

template <class K>
key_group key_group_of(const K& key, std::size_t groups) {
  return key_group_of_hash(key_group_hash(key), groups);
}

// The task of a stage of `parallelism` tasks that owns key group g of `groups`.
constexpr std::size_t owner_of(key_group g, std::size_t parallelism, std::size_t groups) noexcept {
  return static_cast<std::size_t>(std::uint64_t{g} * parallelism / groups);
}

// The key groups [first, last) task `subtask` of `parallelism` owns.
struct key_group_range {
  key_group first = 0;
  key_group last = 0;
  constexpr std::size_t size() const noexcept { return last - first; }
  constexpr bool contains(key_group g) const noexcept { return g >= first && g < last; }
  friend constexpr bool operator==(const key_group_range&, const key_group_range&) = default;
};

constexpr key_group_range key_group_range_of(std::size_t subtask, std::size_t parallelism,
                                             std::size_t groups) noexcept {
  const auto start = [&](std::size_t i) {
    return static_cast<key_group>((std::uint64_t{i} * groups + parallelism - 1) / parallelism);
  };
  return {start(subtask), start(subtask + 1)};
}

}  // namespace sluice::dataflow
