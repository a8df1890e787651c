// read_secret_file (buffers/secret_file.hpp): the data port's shared secret, read only from a file
// that its owner alone may access.

#include <sluice/buffers/secret_file.hpp>

#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <fstream>
#include <string>

using namespace sluice::buffers;

TEST_CASE("a secret file is read only when its owner alone may read it", "[tcp][hello][secret]") {
  sluice::test::temp_dir dir;
  const std::string path = dir.file("secret");
  {
    std::ofstream f(path, std::ios::binary);
    f << "0123456789abcdef0123456789abcdef";
  }
  ::chmod(path.c_str(), 0600);
  auto ok = read_secret_file(path);
  REQUIRE(ok);
  CHECK(ok.value().size() == 32);
  CHECK(ok.value().front() == std::byte{'0'});
  ::chmod(path.c_str(), 0640);
  auto group = read_secret_file(path);
  REQUIRE_FALSE(group);
  CHECK(group.error().message().find("mode 0640") != std::string::npos);
  CHECK(group.error().message().find(path) != std::string::npos);
  ::chmod(path.c_str(), 0604);
  CHECK_FALSE(read_secret_file(path));
  auto missing = read_secret_file(dir.file("none"));
  REQUIRE_FALSE(missing);
  CHECK(missing.error().message().find("No such file") != std::string::npos);
  const std::string empty = dir.file("empty");
  { std::ofstream f(empty); }
  ::chmod(empty.c_str(), 0600);
  CHECK_FALSE(read_secret_file(empty));
  const std::string big = dir.file("big");
  {
    std::ofstream f(big);
    f << std::string(65, 'x');
  }
  ::chmod(big.c_str(), 0600);
  auto too_big = read_secret_file(big);
  REQUIRE_FALSE(too_big);
  CHECK(too_big.error().message().find("at most 64") != std::string::npos);
}
