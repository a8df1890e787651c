// io::directory: opened without following a symlink, and what it removes is in the directory it
// opened, even once its path names something else.

#include <sluice/io/directory.hpp>
#include <sluice/runtime/sync_wait.hpp>

#include <support/backends.hpp>
#include <support/dir_files.hpp>
#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

using namespace sluice::io;
using sluice::runtime::sync_wait;
using sluice::runtime::task;
using sluice::test::backend_kind;
using sluice::test::temp_dir;

namespace fs = std::filesystem;

namespace {

task<result<void>> open_then_swap_then_remove(std::string path, std::string moved_to, std::string link_to) {
  auto opened = co_await directory::open_no_follow(path);
  if (!opened) co_return std::move(opened).error();
  directory d = std::move(opened).value();
  // The path now names a symlink to another directory holding the same name.
  fs::rename(path, moved_to);
  fs::create_directory_symlink(link_to, path);
  auto removed = co_await d.remove("x");
  auto closed = co_await d.close();
  if (!removed) co_return removed;
  co_return closed;
}

task<result<file_status>> status_in(std::string path, std::string name) {
  auto opened = co_await directory::open_no_follow(path);
  if (!opened) co_return std::move(opened).error();
  directory d = std::move(opened).value();
  auto st = co_await d.entry_status(std::move(name));
  auto closed = co_await d.close();
  (void)closed;
  co_return st;
}

}  // namespace

TEST_CASE("a directory opened without following refuses a symlink and says so", "[fs][directory]") {
  const auto kind = GENERATE(backend_kind::uring, backend_kind::test);
  INFO("backend: " << to_string(kind));
  temp_dir dir;
  fs::create_directories(dir.file("real"));
  fs::create_directory_symlink(dir.file("real"), dir.file("link"));
  auto refused = sync_wait(directory::open_no_follow(dir.file("link")), sluice::test::backend_options(kind));
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message() == "open directory '" + dir.file("link") + "': it is a symbolic link, not followed");
  std::ofstream(dir.file("file")) << "x";
  auto not_dir = sync_wait(directory::open_no_follow(dir.file("file")), sluice::test::backend_options(kind));
  REQUIRE_FALSE(not_dir.ok());
  CHECK(not_dir.error().code() == std::errc::not_a_directory);
}

TEST_CASE("a directory removes entries of the directory it opened even once its path is a symlink elsewhere",
          "[fs][directory]") {
  const auto kind = GENERATE(backend_kind::uring, backend_kind::test);
  INFO("backend: " << to_string(kind));
  temp_dir dir;
  fs::create_directories(dir.file("chk-1"));
  fs::create_directories(dir.file("victim"));
  std::ofstream(dir.file("chk-1/x")) << "ours";
  std::ofstream(dir.file("victim/x")) << "theirs";
  auto removed = sync_wait(open_then_swap_then_remove(dir.file("chk-1"), dir.file("moved"), dir.file("victim")),
                           sluice::test::backend_options(kind));
  REQUIRE(removed.ok());
  CHECK_FALSE(fs::exists(dir.file("moved/x")));
  CHECK(sluice::test::read_text(dir.file("victim/x")) == "theirs");
}

TEST_CASE("a directory reports an entry that is a symlink as one and refuses a name outside it", "[fs][directory]") {
  const auto kind = GENERATE(backend_kind::uring, backend_kind::test);
  INFO("backend: " << to_string(kind));
  temp_dir dir;
  fs::create_directories(dir.file("d"));
  std::ofstream(dir.file("target")) << "x";
  fs::create_symlink(dir.file("target"), dir.file("d/link"));
  auto st = sync_wait(status_in(dir.file("d"), "link"), sluice::test::backend_options(kind));
  REQUIRE(st.ok());
  CHECK(S_ISLNK(st->mode));
  for (const char* outside : {"../target", "..", "", "a/b"}) {
    auto bad = sync_wait(status_in(dir.file("d"), outside), sluice::test::backend_options(kind));
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.error().code() == std::errc::invalid_argument);
  }
}
