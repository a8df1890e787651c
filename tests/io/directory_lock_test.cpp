// directory_lock: one holder per directory, in this process or another, named by its pid; released
// when the holder goes (destroyed, or its process dead); a directory that cannot be written is
// refused with the reason.
#include <sluice/io/directory_lock.hpp>

#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <optional>
#include <sstream>
#include <string>

using sluice::io::directory_lock;
using sluice::test::temp_dir;

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string in_use(const std::string& dir, long pid) {
  return "checkpoint directory '" + dir + "' is in use by another sluice job (pid " + std::to_string(pid) + ")";
}

}  // namespace

TEST_CASE("a second lock on a directory is refused while the first is held, even in the same process", "[io][lock]") {
  temp_dir dir;
  auto first = directory_lock::acquire(dir.path(), "checkpoint directory");
  REQUIRE(first);
  CHECK(first->held());
  CHECK(read_text(dir.file(".sluice-lock")) == std::to_string(::getpid()) + "\n");

  auto second = directory_lock::acquire(dir.path(), "checkpoint directory");
  REQUIRE_FALSE(second);
  CHECK(second.error().code() == std::errc::resource_unavailable_try_again);
  CHECK(second.error().message() == in_use(dir.path(), ::getpid()));
}

TEST_CASE("a lock is released when its holder is destroyed, and a moved lock stays held", "[io][lock]") {
  temp_dir dir;
  {
    auto first = directory_lock::acquire(dir.path(), "output directory");
    REQUIRE(first);
    directory_lock moved = std::move(first).value();
    CHECK(moved.held());
    CHECK_FALSE(directory_lock::acquire(dir.path(), "output directory"));
  }
  auto again = directory_lock::acquire(dir.path(), "output directory");
  CHECK(again);
}

TEST_CASE("a lock held by another process is refused naming its pid, and released when that process dies",
          "[io][lock]") {
  temp_dir dir;
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::close(ready[0]);
    auto held = directory_lock::acquire(dir.path(), "checkpoint directory");
    const char ok = held ? 'y' : 'n';
    (void)::write(ready[1], &ok, 1);
    ::pause();  // until killed: the kernel then drops the lock
    ::_exit(0);
  }
  ::close(ready[1]);
  char ok = 0;
  REQUIRE(::read(ready[0], &ok, 1) == 1);
  ::close(ready[0]);

  std::optional<std::string> refused;
  if (auto second = directory_lock::acquire(dir.path(), "checkpoint directory"); !second) {
    refused = second.error().message();
  }
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);

  REQUIRE(ok == 'y');
  REQUIRE(refused);
  CHECK(*refused == in_use(dir.path(), child));
  auto after = directory_lock::acquire(dir.path(), "checkpoint directory");
  CHECK(after);
}

TEST_CASE("a directory that cannot be written is refused with the reason", "[io][lock]") {
  temp_dir dir;
  std::ofstream(dir.file("plain")) << "a file, not a directory\n";
  auto under_file = directory_lock::acquire(dir.file("plain"), "checkpoint directory");
  REQUIRE_FALSE(under_file);
  CHECK(under_file.error().message() == "checkpoint directory '" + dir.file("plain") + "' is not writable: Not a directory");

  auto missing = directory_lock::acquire(dir.file("missing"), "output directory");
  REQUIRE_FALSE(missing);
  CHECK(missing.error().message() ==
        "output directory '" + dir.file("missing") + "' is not writable: No such file or directory");
}
