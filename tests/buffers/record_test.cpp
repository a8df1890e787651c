#include <sluice/buffers/buffer_pool.hpp>
#include <sluice/buffers/record_deserializer.hpp>
#include <sluice/buffers/record_serializer.hpp>
#include <sluice/runtime/sync_wait.hpp>

#include <support/backends.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
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

// --- a half-read record handed to a new deserializer (unaligned channel state) -----------------

namespace {

constexpr std::size_t segment = 4096;  // the test pools' buffer size

// A serialized stream held as the pool buffers the serializer filled (views, each kept alive), so a
// test can cut it at any byte: the buffers before the cut, a slice up to it, a slice after it, and
// the buffers after.
struct held_stream {
  std::vector<buffer_view> buffers;
  std::vector<std::byte> bytes;  // the same stream, flat
  std::vector<std::size_t> starts;  // where each record's prefix begins

  held_stream(local_buffer_pool& pool, const std::vector<std::string>& records) {
    record_serializer ser;
    buffer current;
    std::size_t offset = 0;
    for (const std::string& r : records) {
      starts.push_back(offset);
      offset += record_length_bytes + r.size();
      ser.serialize_bytes(bytes_of(r));
      for (;;) {
        if (!current.valid()) current = std::move(*pool.try_request());
        const copy_result res = ser.copy_to(current);
        if (res != copy_result::record_complete) keep(current);
        if (res != copy_result::buffer_full) break;
      }
    }
    if (current.valid() && current.size() > 0) keep(current);
  }
  void keep(buffer& b) {
    const std::size_t at = bytes.size();
    bytes.resize(at + b.size());
    std::memcpy(bytes.data() + at, b.data().data(), b.size());
    buffers.push_back(b.retain());
    b.reset();
  }

  // The views of stream bytes [from, to), in buffer order, slicing the buffers at the ends.
  std::vector<buffer_view> range(std::size_t from, std::size_t to) const {
    std::vector<buffer_view> out;
    std::size_t at = 0;
    for (const buffer_view& b : buffers) {
      const std::size_t lo = std::max(from, at);
      const std::size_t hi = std::min(to, at + b.size());
      if (lo < hi) out.push_back(b.slice(lo - at, hi - lo));
      at += b.size();
    }
    return out;
  }
};

// Feeds `views` in order, appending every record completed.
void feed(record_deserializer& des, std::vector<buffer_view> views, std::vector<std::string>& out) {
  for (buffer_view& v : views) {
    des.set_next_buffer(std::move(v));
    while (auto r = des.next_record_bytes()) out.push_back(text_of(*r));
  }
}

// The record of `size` bytes with recognisable content.
std::string record_of(std::size_t size, int seed) {
  std::string s(size, '\0');
  for (std::size_t i = 0; i < size; ++i) s[i] = static_cast<char>(i * 31 + static_cast<std::size_t>(seed) * 7 + 1);
  return s;
}

// Cuts the stream of {before, target, after} at `cut`, which lies inside the target record: the
// first deserializer reads up to it, hands partial_record() to a second one that never saw the
// stream, and the second reads the rest. Together they must yield the three records whole.
void hand_over_at(const held_stream& stream, const std::vector<std::string>& records, std::size_t cut) {
  INFO("cut at stream byte " << cut);
  const std::size_t target_start = stream.starts[1];
  std::vector<std::string> out;
  record_deserializer first;
  feed(first, stream.range(0, cut), out);
  REQUIRE(out == std::vector<std::string>{records[0]});
  REQUIRE(first.has_partial_record());
  const std::vector<std::byte> partial = first.partial_record();
  // The partial record is exactly the stream bytes from the record's start to the cut.
  REQUIRE(partial.size() == cut - target_start);
  REQUIRE(std::memcmp(partial.data(), stream.bytes.data() + target_start, partial.size()) == 0);
  first.clear();

  record_deserializer second;
  second.restore_partial(partial);
  REQUIRE(second.has_partial_record());
  feed(second, stream.range(cut, stream.bytes.size()), out);
  REQUIRE(out == records);
  REQUIRE_FALSE(second.has_partial_record());
  REQUIRE(second.partial_record().empty());
}

}  // namespace

TEST_CASE("a half-read record handed over with partial_record and restore_partial comes out whole, cut at any byte",
          "[record][partial]") {
  network_memory memory(64 * 4096, 4096, 1);
  local_buffer_pool pool(memory.pool(0), 1, 16);
  const std::size_t size = GENERATE(std::size_t{0}, std::size_t{1}, std::size_t{3}, segment - 4, segment,
                                    3 * segment + 1);
  // 10: the record starts early in the first buffer; segment - 6: its prefix straddles the first
  // buffer boundary (2 bytes before it, 2 after).
  const std::size_t lead = GENERATE(std::size_t{10}, segment - 6);
  CAPTURE(size, lead);
  {
    const std::vector<std::string> records{record_of(lead, 1), record_of(size, 2), record_of(5, 3)};
    const held_stream stream(pool, records);
    const std::size_t start = stream.starts[1];
    const std::size_t end = start + record_length_bytes + size;  // one past the record's last byte
    REQUIRE(stream.bytes.size() == end + record_length_bytes + 5);
    std::vector<std::size_t> cuts;
    if (size <= segment) {
      for (std::size_t k = start + 1; k < end; ++k) cuts.push_back(k);  // every byte inside the record
    } else {
      // Inside the prefix, just after it, the buffer boundaries inside the record, the middle and
      // before the last byte.
      cuts = {start + 1, start + 2, start + 3, start + 4, start + 5, (start + end) / 2, end - 1};
      for (std::size_t b = segment; b < end; b += segment) {
        if (b > start) cuts.insert(cuts.end(), {b - 1, b, b + 1});
      }
    }
    for (std::size_t cut : cuts) hand_over_at(stream, records, cut);
  }
  REQUIRE(pool.in_use() == 0);
  REQUIRE(pool.violations() == 0);
}

TEST_CASE("partial_record is empty at a record boundary, and on a fresh deserializer", "[record][partial]") {
  small_buffers env;
  record_deserializer fresh;
  REQUIRE(fresh.partial_record().empty());
  {
    const std::vector<std::string> records{"one", record_of(5000, 4), "", "three"};
    const held_stream stream(env.pool, records);
    // Each record boundary, including the one inside the second buffer after the large record.
    for (std::size_t i = 1; i <= records.size(); ++i) {
      const std::size_t boundary = i < records.size() ? stream.starts[i] : stream.bytes.size();
      INFO("boundary before record " << i << " at byte " << boundary);
      record_deserializer des;
      std::vector<std::string> out;
      feed(des, stream.range(0, boundary), out);
      REQUIRE(out.size() == i);
      REQUIRE_FALSE(des.has_partial_record());
      REQUIRE(des.partial_record().empty());
    }
  }
  REQUIRE(env.pool.in_use() == 0);
}

namespace {
std::vector<std::byte> prefixed(std::uint32_t length, std::size_t body_bytes) {
  std::vector<std::byte> bytes(record_length_bytes + body_bytes, std::byte{'b'});
  std::memcpy(bytes.data(), &length, record_length_bytes);
  return bytes;
}
}  // namespace

TEST_CASE("restore_partial refuses the bytes of a whole record with std::invalid_argument", "[record][partial]") {
  record_deserializer des;
  REQUIRE_THROWS_AS(des.restore_partial(prefixed(3, 3)), std::invalid_argument);
  REQUIRE_THROWS_WITH(record_deserializer().restore_partial(prefixed(3, 3)), Catch::Contains("it is whole"));
  // A zero-length record is whole with its prefix alone.
  REQUIRE_THROWS_AS(record_deserializer().restore_partial(prefixed(0, 0)), std::invalid_argument);
  // More than the record (its bytes and the next record's) is refused too.
  REQUIRE_THROWS_AS(record_deserializer().restore_partial(prefixed(2, 9)), std::invalid_argument);
  // One byte short of whole is a partial record.
  record_deserializer ok;
  ok.restore_partial(prefixed(3, 2));
  REQUIRE(ok.has_partial_record());
}

TEST_CASE("restore_partial refuses a length prefix above the maximum with record_error", "[record][partial]") {
  record_deserializer des(100);
  REQUIRE_THROWS_AS(des.restore_partial(prefixed(101, 10)), record_error);
  REQUIRE_THROWS_WITH(record_deserializer(100).restore_partial(prefixed(101, 0)),
                      Catch::Contains("101 bytes") && Catch::Contains("100 bytes"));
  // The maximum itself is fine.
  record_deserializer at_max(100);
  at_max.restore_partial(prefixed(100, 99));
  REQUIRE(at_max.partial_record().size() == record_length_bytes + 99);
}

TEST_CASE("a restored prefix fragment of an oversized length fails once the next buffer completes it",
          "[record][partial]") {
  small_buffers env;
  const std::vector<std::byte> prefix = prefixed(101, 0);
  record_deserializer des(100);
  des.restore_partial(std::span<const std::byte>(prefix).first(2));
  REQUIRE(des.partial_record() == std::vector<std::byte>(prefix.begin(), prefix.begin() + 2));
  buffer b = *env.pool.try_request();
  b.append(std::span<const std::byte>(prefix).subspan(2));
  b.append(bytes_of("body"));
  des.set_next_buffer(b.retain());
  b.reset();
  REQUIRE_THROWS_AS(des.next_record_bytes(), record_error);
  REQUIRE(env.pool.in_use() == 0);
}
