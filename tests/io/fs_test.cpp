#include <sluice/io/file.hpp>
#include <sluice/io/fs.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/test_backend.hpp>

#include <support/backends.hpp>
#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <string>

using namespace sluice::io;
using sluice::runtime::op_code;
using sluice::runtime::sync_wait;
using sluice::runtime::task;
using sluice::test::backend_kind;
using sluice::test::temp_dir;

namespace {

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

task<result<void>> make_dir_with_file(std::string dir) {
  auto made = co_await make_directory(dir);
  if (!made) co_return made;
  auto f = co_await file::open(dir + "/x", open_options::create_new());
  if (!f) co_return std::move(f).error();
  co_return co_await f->close();
}

}  // namespace

TEST_CASE("a directory made through the ring exists, and making it again names the path", "[fs]") {
  const auto kind = GENERATE(backend_kind::uring, backend_kind::test);
  INFO("backend: " << to_string(kind));
  temp_dir dir;
  const std::string path = dir.file("chk-1");
  REQUIRE(sync_wait(make_directory(path), sluice::test::backend_options(kind)).ok());
  CHECK(is_directory(path));
  auto again = sync_wait(make_directory(path), sluice::test::backend_options(kind));
  REQUIRE_FALSE(again.ok());
  CHECK(again.error().message() == "mkdir '" + path + "': File exists");
}

TEST_CASE("a file and then its emptied directory are removed through the ring", "[fs]") {
  const auto kind = GENERATE(backend_kind::uring, backend_kind::test);
  INFO("backend: " << to_string(kind));
  temp_dir dir;
  const std::string path = dir.file("d");
  REQUIRE(sync_wait(make_dir_with_file(path), sluice::test::backend_options(kind)).ok());

  auto not_empty = sync_wait(remove_directory(path), sluice::test::backend_options(kind));
  REQUIRE_FALSE(not_empty.ok());
  CHECK(not_empty.error().message() == "rmdir '" + path + "': Directory not empty");

  REQUIRE(sync_wait(remove(path + "/x"), sluice::test::backend_options(kind)).ok());
  CHECK_FALSE(exists(path + "/x"));
  REQUIRE(sync_wait(remove_directory(path), sluice::test::backend_options(kind)).ok());
  CHECK_FALSE(exists(path));

  auto gone = sync_wait(remove(path + "/x"), sluice::test::backend_options(kind));
  REQUIRE_FALSE(gone.ok());
  CHECK(gone.error().message() == "unlink '" + path + "/x': No such file or directory");
}

TEST_CASE("mkdir and unlink go through the backend as their own operations", "[fs]") {
  sluice::runtime::test_backend* backend = nullptr;
  auto options = sluice::test::test_backend_options(backend);
  temp_dir dir;
  sluice::runtime::executor ex(std::move(options));
  REQUIRE(ex.block_on(make_directory(dir.file("a"))).ok());
  REQUIRE(ex.block_on(remove_directory(dir.file("a"))).ok());
  CHECK(backend->submitted(op_code::mkdirat) == 1);
  CHECK(backend->performed(op_code::unlinkat) == 1);
  CHECK(std::string(sluice::runtime::to_string(op_code::mkdirat)) == "mkdir");
  CHECK(std::string(sluice::runtime::to_string(op_code::unlinkat)) == "unlink");
}

namespace {

task<result<std::vector<std::string>>> list_it(std::string dir) { co_return co_await list_directory(std::move(dir)); }

}  // namespace

TEST_CASE("list_directory lists a real directory from an executor, and names the directory it cannot list",
          "[fs][offload]") {
  const auto kind = GENERATE(backend_kind::uring, backend_kind::test);
  INFO(to_string(kind));
  temp_dir dir;
  REQUIRE(sync_wait(make_dir_with_file(dir.file("sub")), sluice::test::backend_options(kind)));
  auto names = sync_wait(list_it(dir.path()), sluice::test::backend_options(kind));
  REQUIRE(names);
  CHECK(*names == std::vector<std::string>{"sub"});
  auto inner = sync_wait(list_it(dir.file("sub")), sluice::test::backend_options(kind));
  REQUIRE(inner);
  CHECK(*inner == std::vector<std::string>{"x"});
  auto missing = sync_wait(list_it(dir.file("nothing")), sluice::test::backend_options(kind));
  REQUIRE_FALSE(missing);
  CHECK(missing.error().message() == "list directory '" + dir.file("nothing") + "': No such file or directory");
}
