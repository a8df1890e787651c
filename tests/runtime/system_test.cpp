// system: the thread's current system is the host until a system_scope installs another; scopes
// nest and belong to their thread; the host answers >= 0 or -errno.
#include <sluice/runtime/system.hpp>

#include <support/recording_system.hpp>
#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

using sluice::runtime::host_system;
using sluice::runtime::sys;
using sluice::runtime::system_scope;
using sluice::test::recording_system;
using sluice::test::temp_dir;

TEST_CASE("sys() is the host until a system_scope installs another, and scopes nest", "[runtime][system]") {
  CHECK(&sys() == &host_system());
  recording_system outer;
  recording_system inner;
  {
    system_scope a(outer);
    CHECK(&sys() == &outer);
    {
      system_scope b(inner);
      CHECK(&sys() == &inner);
    }
    CHECK(&sys() == &outer);
  }
  CHECK(&sys() == &host_system());
}

TEST_CASE("a system_scope installs its system for the calling thread only", "[runtime][system]") {
  recording_system os;
  system_scope scope(os);
  const sluice::runtime::system* seen = nullptr;
  std::thread other([&seen] { seen = &sys(); });
  other.join();
  CHECK(seen == &host_system());
  CHECK(&sys() == &os);
}

TEST_CASE("the host answers what the kernel answers, failures as -errno", "[runtime][system]") {
  sluice::runtime::system& host = host_system();
  temp_dir dir;
  std::ofstream(dir.file("a")) << "x";
  std::ofstream(dir.file("b")) << "y";

  CHECK(host.close(-1) == -EBADF);
  CHECK(host.open(dir.file("missing").c_str(), O_RDONLY | O_CLOEXEC, 0) == -ENOENT);
  struct stat st {};
  CHECK(host.stat(dir.file("missing").c_str(), &st) == -ENOENT);
  CHECK(host.mkdir(dir.file("a").c_str(), 0755) == -EEXIST);

  std::vector<std::string> names;
  CHECK(host.list_directory(dir.path().c_str(), names, 2) == 0);
  CHECK(names.size() == 2);
  names.clear();
  CHECK(host.list_directory(dir.path().c_str(), names, 1) == -EFBIG);
  CHECK(host.list_directory(dir.file("missing").c_str(), names, 10) == -ENOENT);

  std::string resolved;
  REQUIRE(host.realpath((dir.path() + "/./a").c_str(), resolved) == 0);
  char expected[PATH_MAX];
  REQUIRE(::realpath(dir.file("a").c_str(), expected) != nullptr);
  CHECK(resolved == expected);
  CHECK(host.realpath(dir.file("missing/x").c_str(), resolved) == -ENOENT);

  CHECK(host.getpid() == ::getpid());
  const auto before = std::chrono::steady_clock::now();
  CHECK(host.nanosleep(std::chrono::milliseconds(2)) == 0);
  CHECK(std::chrono::steady_clock::now() - before >= std::chrono::milliseconds(2));
  CHECK(host.nanosleep(std::chrono::nanoseconds(-1)) == 0);
}
