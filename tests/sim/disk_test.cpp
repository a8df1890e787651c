// The simulated disk: what a crash keeps of synced and unsynced state.

#include <sluice/sim/disk.hpp>

#include <catch2/catch.hpp>

#include <string>

using namespace sluice::sim;

namespace {
disk::ino make_file(disk& d, const std::string& path, const std::string& data) {
  disk::ino i = 0;
  REQUIRE(d.create(path, true, i) == 0);
  REQUIRE(d.write(i, data.data(), data.size(), 0) == static_cast<int>(data.size()));
  return i;
}
}  // namespace

TEST_CASE("disk: a file synced with its directory survives every crash") {
  for (std::uint64_t seed = 1; seed <= 64; ++seed) {
    disk d;
    REQUIRE(d.make_directory("/a") == 0);
    d.sync(disk::root);
    const disk::ino f = make_file(d, "/a/f", std::string(10000, 'x'));
    d.sync(f);
    disk::ino a = 0;
    REQUIRE(d.lookup("/a", a) == 0);
    d.sync(a);
    rng r(seed);
    const disk_image image = d.crash(r);
    const auto* e = image.find("/a/f");
    REQUIRE(e != nullptr);
    CHECK(e->data == std::string(10000, 'x'));
  }
}

TEST_CASE("disk: without a directory fsync a new name may vanish, and unsynced blocks may tear") {
  bool lost_name = false, kept_name = false, torn = false;
  for (std::uint64_t seed = 1; seed <= 200; ++seed) {
    disk d;
    const disk::ino f = make_file(d, "/f", std::string(3 * block_size, 'a'));
    d.sync(f);
    d.sync(disk::root);
    REQUIRE(d.write(f, std::string(3 * block_size, 'b').data(), 3 * block_size, 0) == 3 * block_size);
    make_file(d, "/g", "new");
    rng r(seed);
    const disk_image image = d.crash(r);
    (image.find("/g") == nullptr ? lost_name : kept_name) = true;
    const std::string data = image.find("/f")->data;
    REQUIRE(data.size() == 3 * block_size);
    // Each block is all old or all new: never a mix inside a block.
    for (std::size_t b = 0; b < 3; ++b) {
      const std::string block = data.substr(b * block_size, block_size);
      CHECK((block == std::string(block_size, 'a') || block == std::string(block_size, 'b')));
    }
    if (data != std::string(3 * block_size, 'a') && data != std::string(3 * block_size, 'b')) torn = true;
  }
  CHECK(lost_name);
  CHECK(kept_name);
  CHECK(torn);
}

TEST_CASE("disk: a rename is atomic across a crash: the old name or the new, never both or neither") {
  bool saw_old = false, saw_new = false;
  for (std::uint64_t seed = 1; seed <= 100; ++seed) {
    disk d;
    const disk::ino f = make_file(d, "/tmp-x", "payload");
    d.sync(f);
    d.sync(disk::root);
    REQUIRE(d.rename("/tmp-x", "/x") == 0);
    rng r(seed);
    const disk_image image = d.crash(r);
    const bool old_name = image.find("/tmp-x") != nullptr;
    const bool new_name = image.find("/x") != nullptr;
    CHECK(old_name != new_name);
    (old_name ? saw_old : saw_new) = true;
  }
  CHECK(saw_old);
  CHECK(saw_new);
}

TEST_CASE("disk: a failed fsync loses what it lost for good, even after a later fsync succeeds") {
  bool lost = false;
  for (std::uint64_t seed = 1; seed <= 64 && !lost; ++seed) {
    disk d;
    const disk::ino f = make_file(d, "/f", std::string(4 * block_size, 'n'));
    d.sync(disk::root);
    rng r(seed);
    d.fail_sync(f, r);
    d.sync(f);  // nothing dirty any more: nothing is written
    rng c(seed);
    const std::string data = d.crash(c).find("/f")->data;
    if (data != std::string(4 * block_size, 'n')) lost = true;
    // What reads see is unchanged.
    std::string visible(4 * block_size, '\0');
    CHECK(d.read(f, visible.data(), visible.size(), 0) == visible.size());
    CHECK(visible == std::string(4 * block_size, 'n'));
  }
  CHECK(lost);
}

TEST_CASE("disk: a full disk refuses a write with ENOSPC and keeps what it had") {
  disk d;
  d.capacity = 100;
  disk::ino f = 0;
  REQUIRE(d.create("/f", true, f) == 0);
  CHECK(d.write(f, std::string(80, 'a').data(), 80, 0) == 80);
  CHECK(d.write(f, std::string(30, 'b').data(), 30, 80) == -ENOSPC);
  CHECK(d.size(f) == 80);
  REQUIRE(d.remove("/f", false) == 0);
  CHECK(d.used_bytes() == 0);
}

TEST_CASE("disk_image: encodes and decodes to the same image, garbage is refused") {
  disk_image image;
  image.add_file("/a/b/c", std::string("\0\1\2", 3));
  image.add_directory("/d");
  const auto back = disk_image::decode(image.encode());
  REQUIRE(back.has_value());
  CHECK(*back == image);
  CHECK(image.find("/a/b") != nullptr);
  CHECK_FALSE(disk_image::decode("SIMDISK1short").has_value());
  CHECK_FALSE(disk_image::decode("").has_value());
}
