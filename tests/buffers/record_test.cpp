#include <sluice/buffers/buffer_pool.hpp>
#include <sluice/buffers/record_deserializer.hpp>
#include <sluice/buffers/record_serializer.hpp>
#include <sluice/runtime/sync_wait.hpp>

#include <support/backends.hpp>

#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace sluice::buffers;

namespace {

std::span<const std::byte> bytes_of(const std::string& s) { return {reinterpret_cast<const std::byte*>(s.data()), s.size()}; }
std::string text_of(std::span<const std::byte> b) { return {reinterpret_cast<const char*>(b.data()), b.size()}; }

// A serializer writing into pool buffers and a deserializer reading each buffer as soon as it is
// full (or flushed), as a channel would: at most a couple of segments are in use at once.
struct record_pipe {
  explicit record_pipe(local_buffer_pool& p, std::size_t max_record_bytes = default_max_record_bytes)
      : pool(p), ser(max_record_bytes), des(max_record_bytes) {}

  void write(const std::string& record) {
    ser.serialize_bytes(bytes_of(record));
    copy_current();
  }
  template <class T>
  void write_typed(const T& record) {
    ser.serialize(record);
    copy_current();
  }
  void copy_current() {
    for (int guard = 0; guard < 100000; ++guard) {
      if (!current.valid()) current = std::move(*pool.try_request());
      const copy_result r = ser.copy_to(current);
      if (r != copy_result::record_complete) send();
      if (r != copy_result::buffer_full) return;
    }
    FAIL("a record never completed");
  }
  void send() {
    if (!current.valid() || current.size() == 0) return;
    des.set_next_buffer(current.retain());
    current.reset();
    ++buffers_sent;
    while (auto r = des.next_record_bytes()) out.push_back(text_of(*r));
  }

  local_buffer_pool& pool;
  record_serializer ser;
  record_deserializer des;
  buffer current;
  std::size_t buffers_sent = 0;
  std::vector<std::string> out;
};

// 64 segments of 4 KiB; a pool of at most 4 of them.
struct small_buffers {
  network_memory memory{64 * 4096, 4096, 1};
  local_buffer_pool pool{memory.pool(0), 1, 4};
};

}  // namespace

TEST_CASE("records spanning two to five buffers come back whole", "[record]") {
  small_buffers env;
  for (std::size_t spans = 2; spans <= 5; ++spans) {
    record_pipe pipe(env.pool);
    // The prefix takes 4 bytes, so this record ends exactly at the end of buffer `spans`.
    const std::string record(spans * 4096 - record_length_bytes, static_cast<char>('a' + spans));
    pipe.write(record);
    REQUIRE(pipe.buffers_sent == spans);
    REQUIRE(pipe.out == std::vector<std::string>{record});
    REQUIRE_FALSE(pipe.des.has_partial_record());
  }
  REQUIRE(env.pool.in_use() == 0);
  REQUIRE(env.pool.violations() == 0);
}

TEST_CASE("a record much larger than a buffer, between small ones, round trips", "[record]") {
  small_buffers env;
  record_pipe pipe(env.pool);
  std::string large(100 * 1000, '\0');
  for (std::size_t i = 0; i < large.size(); ++i) large[i] = static_cast<char>(i * 7);
  pipe.write("before");
  pipe.write(large);
  pipe.write("after");
  pipe.send();
  REQUIRE(pipe.out == std::vector<std::string>{"before", large, "after"});
  REQUIRE(pipe.buffers_sent == (4 + 6 + 4 + large.size() + 4 + 5 + 4095) / 4096);
  REQUIRE(env.pool.in_use() == 0);
}

TEST_CASE("many small typed records share buffers and come back in order", "[record]") {
  small_buffers env;
  record_pipe pipe(env.pool);
  for (std::uint64_t i = 0; i < 10000; ++i) pipe.write_typed(i * 3);
  pipe.send();
  REQUIRE(pipe.out.size() == 10000);
  REQUIRE(pipe.buffers_sent == (10000 * 12 + 4095) / 4096);
  for (std::uint64_t i = 0; i < 10000; ++i) REQUIRE(decode_from<std::uint64_t>(bytes_of(pipe.out[i])) == i * 3);
}

TEST_CASE("zero-length records and length prefixes split across buffers round trip", "[record]") {
  small_buffers env;
  for (std::size_t split = 0; split <= 4; ++split) {
    record_pipe pipe(env.pool);
    // Fill the first buffer so that the next prefix has `split` bytes in it.
    const std::string filler(4096 - record_length_bytes - split, 'f');
    pipe.write(filler);
    pipe.write("");
    pipe.write("");
    pipe.write("tail");
    pipe.write("");
    pipe.send();
    REQUIRE(pipe.out == std::vector<std::string>{filler, "", "", "tail", ""});
  }
  REQUIRE(env.pool.in_use() == 0);
}

TEST_CASE("typed records decode from the stream, and a record of the wrong type does not derail it",
          "[record]") {
  small_buffers env;
  record_pipe pipe(env.pool);
  pipe.write_typed(std::make_pair(std::string("k"), 1.5));
  pipe.write("xyz");
  pipe.write_typed(std::uint32_t{77});
  pipe.send();
  REQUIRE(pipe.out.size() == 3);
  REQUIRE(decode_from<std::pair<std::string, double>>(bytes_of(pipe.out[0])) == std::make_pair(std::string("k"), 1.5));
  REQUIRE_THROWS_AS(decode_from<std::uint32_t>(bytes_of(pipe.out[1])), decode_error);
  REQUIRE(decode_from<std::uint32_t>(bytes_of(pipe.out[2])) == 77);
}

TEST_CASE("the deserializer rejects a length prefix above the maximum with a clear error", "[record]") {
  small_buffers env;
  auto corrupt = [&](std::uint32_t length, std::size_t max_bytes) {
    buffer b = *env.pool.try_request();
    std::byte prefix[4];
    std::memcpy(prefix, &length, 4);
    b.append(prefix);
    b.append(bytes_of("garbage"));
    record_deserializer des(max_bytes);
    des.set_next_buffer(b.retain());
    b.reset();
    REQUIRE_THROWS_AS(des.next_record_bytes(), record_error);
    REQUIRE(env.pool.in_use() == 0);  // the buffer was let go, not leaked
    // The framing is lost: the stream stays failed, with the same message.
    REQUIRE_THROWS_WITH(des.next_record_bytes(), Catch::Contains("exceeds the maximum record size"));
    try {
      (void)des.next_record_bytes();
    } catch (const record_error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string default_max = corrupt(0xffffffffu, default_max_record_bytes);
  REQUIRE_THAT(default_max, Catch::Contains("4294967295 bytes") && Catch::Contains("67108864 bytes"));
  const std::string small_max = corrupt(101, 100);
  REQUIRE_THAT(small_max, Catch::Contains("101 bytes") && Catch::Contains("100 bytes"));
}

TEST_CASE("the serializer refuses a record above its maximum and stays usable", "[record]") {
  small_buffers env;
  record_serializer ser(100);
  REQUIRE_THROWS_WITH(ser.serialize_bytes(bytes_of(std::string(101, 'x'))),
                      Catch::Contains("101 bytes") && Catch::Contains("maximum of 100"));
  REQUIRE_THROWS_AS(ser.serialize(std::string(200, 'x')), std::length_error);
  REQUIRE_FALSE(ser.has_pending());
  ser.serialize_bytes(bytes_of(std::string(100, 'y')));
  buffer b = *env.pool.try_request();
  REQUIRE(ser.copy_to(b) == copy_result::record_complete);
  REQUIRE(b.size() == 104);
}

TEST_CASE("an event buffer is not accepted as records", "[record]") {
  small_buffers env;
  buffer b = *env.pool.try_request();
  b.set_kind(buffer_kind::event);
  record_deserializer des;
  REQUIRE_THROWS_WITH(des.set_next_buffer(b.retain()), Catch::Contains("event buffer"));
  b.reset();
  REQUIRE(env.pool.in_use() == 0);
}

TEST_CASE("a seeded random mix of record sizes round trips byte-exact through 4 KiB buffers", "[record]") {
  small_buffers env;
  const auto seed = GENERATE(1u, 7u, 20240611u);
  CAPTURE(seed);
  std::mt19937 rng(seed);
  record_pipe pipe(env.pool, 64 * 1024);
  std::vector<std::string> sent;
  std::size_t total_bytes = 0;
  for (int i = 0; i < 3000; ++i) {
    std::size_t size = 0;
    switch (rng() % 8) {
      case 0: size = 0; break;
      case 1: size = 4096 + rng() % 40000; break;  // larger than a buffer
      case 2: size = 1000 + rng() % 4000; break;
      default: size = rng() % 200; break;
    }
    std::string record(size, '\0');
    for (auto& c : record) c = static_cast<char>(rng());
    total_bytes += record_length_bytes + size;
    pipe.write(record);
    sent.push_back(std::move(record));
    if (rng() % 50 == 0) pipe.send();  // a flush: a partly filled buffer goes out
  }
  pipe.send();
  REQUIRE(pipe.out.size() == sent.size());
  REQUIRE(pipe.out == sent);
  REQUIRE(pipe.buffers_sent >= total_bytes / 4096);
  REQUIRE_FALSE(pipe.des.has_partial_record());
  REQUIRE(env.pool.in_use() == 0);
  REQUIRE(env.pool.recycled() == pipe.buffers_sent);
  REQUIRE(env.pool.violations() == 0);
}

namespace {
sluice::runtime::task<void> unconsumed_body(sluice::buffers::network_memory* memory) {
  using namespace sluice::buffers;
  local_buffer_pool pool(memory->pool(0), 2, 4);
  buffer b = *pool.try_request();
  record_serializer ser;
  for (std::uint64_t v : {1ull, 2ull, 3ull}) {
    ser.serialize(v);
    REQUIRE(ser.copy_to(b) == copy_result::record_complete);
  }
  record_deserializer des;
  des.set_next_buffer(b.retain());
  b.reset();
  auto first = des.next_record<std::uint64_t>();
  REQUIRE(first);
  CHECK(*first == 1);
  auto rest = des.unconsumed();
  CHECK_FALSE(rest.spanning);
  REQUIRE(rest.rest);
  CHECK(rest.rest->size() == 2 * 12);  // the two records not yet read, whole
  record_deserializer again;
  again.set_next_buffer(std::move(*rest.rest));
  std::vector<std::uint64_t> values;
  while (auto r = again.next_record<std::uint64_t>()) values.push_back(*r);
  CHECK(values == std::vector<std::uint64_t>{2, 3});
  co_return;
}
}  // namespace

TEST_CASE("the unconsumed part of a buffer is a view of the records not yet read", "[record]") {
  sluice::buffers::network_memory memory(16 * 4096, 4096, 1);
  sluice::runtime::sync_wait(unconsumed_body(&memory), sluice::test::virtual_time());
}
