#include <sluice/buffers/segment.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <set>
#include <stdexcept>

using namespace sluice::buffers;

TEST_CASE("network memory is cut into whole segments shared out among executors", "[segment]") {
  // 10 segments over 3 executors: 4, 3, 3.
  network_memory memory(10 * 4096 + 100, 4096, 3);
  REQUIRE(memory.segment_count() == 10);
  REQUIRE(memory.total_bytes() == 10 * 4096);
  REQUIRE(memory.executors() == 3);
  REQUIRE(memory.pool(0).total_segments() == 4);
  REQUIRE(memory.pool(1).total_segments() == 3);
  REQUIRE(memory.pool(2).total_segments() == 3);
  REQUIRE(memory.pool(1).first_index() == 4);
  REQUIRE(memory.pool(2).first_index() == 7);
}

TEST_CASE("the default network memory is 64 MiB of 32 KiB segments, 2048 in all", "[segment]") {
  network_memory memory(64u << 20, default_segment_bytes, 2);
  REQUIRE(memory.segment_count() == 2048);
  REQUIRE(memory.pool(0).total_segments() + memory.pool(1).total_segments() == 2048);
}

TEST_CASE("segments are aligned to their size, disjoint, and all come back", "[segment]") {
  network_memory memory(8 * 8192, 8192, 2);
  std::set<std::byte*> seen;
  for (std::size_t e = 0; e < 2; ++e) {
    segment_pool& pool = memory.pool(e);
    std::vector<std::byte*> taken;
    while (std::byte* s = pool.take()) {
      REQUIRE(reinterpret_cast<std::uintptr_t>(s) % 8192 == 0);
      REQUIRE(pool.owns(s));
      REQUIRE(seen.insert(s).second);
      taken.push_back(s);
    }
    REQUIRE(taken.size() == 4);
    REQUIRE(pool.free_segments() == 0);
    REQUIRE(memory.pool(1 - e).owns(taken.front()) == false);
    for (auto* s : taken) pool.give(s);
    REQUIRE(pool.free_segments() == 4);
  }
  REQUIRE(seen.size() == 8);
}

TEST_CASE("a segment size that is not a power of two of at least 4 KiB is refused with the reason",
          "[segment]") {
  REQUIRE_THROWS_WITH(network_memory(1 << 20, 3000, 1), Catch::Contains("power of two") && Catch::Contains("3000"));
  REQUIRE_THROWS_WITH(network_memory(1 << 20, 2048, 1), Catch::Contains("at least 4096"));
  REQUIRE_THROWS_WITH(network_memory(1 << 20, 12288, 1), Catch::Contains("power of two"));
}

TEST_CASE("network memory smaller than one segment per executor is refused with the size needed", "[segment]") {
  REQUIRE_THROWS_WITH(network_memory(3 * 4096, 4096, 4),
                      Catch::Contains("3 segments") && Catch::Contains("4 executors") && Catch::Contains("16384"));
  REQUIRE_THROWS_AS(network_memory(1 << 20, 4096, 0), std::invalid_argument);
}
