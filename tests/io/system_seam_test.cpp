// The io module's synchronous calls go through the thread's runtime::sys(): a system installed with
// system_scope sees every socket, listing, lock and path call, and its answers (errors, names, a pid,
// a working directory) are what io reports. Outside the scope the host serves again.
#include <sluice/io/directory_lock.hpp>
#include <sluice/io/fs.hpp>
#include <sluice/io/tcp.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/system.hpp>

#include <support/recording_system.hpp>
#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <cerrno>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using sluice::io::address;
using sluice::io::directory_lock;
using sluice::io::tcp_listener;
using sluice::io::tcp_stream;
using sluice::runtime::sync_wait;
using sluice::runtime::system_scope;
using sluice::test::recording_system;
using sluice::test::temp_dir;

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Answers list_directory from memory: `names` for every directory, or `error` if set.
class listing_system : public recording_system {
 public:
  std::vector<std::string> names;
  int error = 0;
  std::size_t max_entries_asked = 0;

  int list_directory(const char* dir, std::vector<std::string>& out, std::size_t max_entries) noexcept override {
    note("list_directory", dir);
    max_entries_asked = max_entries;
    if (error != 0) return error;
    out.insert(out.end(), names.begin(), names.end());
    return 0;
  }
};

// A tree of directories and files in memory: stat and mkdir never reach the disk.
class tree_system : public recording_system {
 public:
  std::set<std::string> directories{"/"};
  std::set<std::string> files;

  int stat(const char* path, struct stat* st) noexcept override {
    note("stat", path);
    *st = {};
    if (directories.count(path) != 0) {
      st->st_mode = S_IFDIR | 0755;
      return 0;
    }
    if (files.count(path) != 0) {
      st->st_mode = S_IFREG | 0644;
      return 0;
    }
    const std::string parent = std::string(path).substr(0, std::string(path).rfind('/'));
    return files.count(parent) != 0 ? -ENOTDIR : -ENOENT;
  }
  int mkdir(const char* path, mode_t) noexcept override {
    note("mkdir", path);
    if (directories.count(path) != 0 || files.count(path) != 0) return -EEXIST;
    directories.insert(path);
    return 0;
  }
  // Directories open as descriptors 900, 901, ...: their fsyncs are recorded by path.
  int open(const char* path, int, mode_t) noexcept override {
    if (directories.count(path) == 0) return -ENOENT;
    opened.push_back(path);
    return 900 + static_cast<int>(opened.size()) - 1;
  }
  int fsync(int fd) noexcept override {
    note("fsync", opened.at(static_cast<std::size_t>(fd - 900)).c_str());
    return 0;
  }
  int close(int fd) noexcept override { return fd >= 900 ? 0 : recording_system::close(fd); }
  std::vector<std::string> opened;
};

}  // namespace

TEST_CASE("tcp_listener::listen makes, binds and names its socket through the thread's system", "[io][system]") {
  recording_system os;
  {
    system_scope scope(os);
    auto listener = tcp_listener::listen(address::loopback_v4());
    REQUIRE(listener);
    CHECK(listener->local_address().port() != 0);  // the host behind the recorder bound it for real
    CHECK(os.calls == std::vector<std::string>{"socket", "setsockopt", "bind", "listen", "getsockname"});
  }  // destroyed inside the scope: shut down and closed through it too
  CHECK(os.calls == std::vector<std::string>{"socket", "setsockopt", "bind", "listen", "getsockname", "shutdown", "close"});
}

TEST_CASE("a bind the system refuses fails with the system's errno and closes the socket through it", "[io][system]") {
  struct refusing_bind : recording_system {
    int bind(int, const sockaddr*, socklen_t) noexcept override {
      note("bind");
      return -EADDRINUSE;
    }
  } os;
  system_scope scope(os);
  const address local = address::loopback_v4(5);
  auto listener = tcp_listener::listen(local);
  REQUIRE_FALSE(listener);
  CHECK(listener.error().message() == "bind " + local.to_string() + ": Address already in use");
  CHECK(listener.error().code() == std::errc::address_in_use);
  CHECK(os.calls == std::vector<std::string>{"socket", "setsockopt", "bind", "close"});
}

TEST_CASE("a stream's connect, options and close ask the thread's system, and the host serves again once the scope ends", "[io][system]") {
  auto listener = tcp_listener::listen(address::loopback_v4());
  REQUIRE(listener);
  recording_system os;
  {
    system_scope scope(os);
    auto stream = sync_wait(tcp_stream::connect(listener->local_address()));
    REQUIRE(stream);
    REQUIRE(stream->set_nodelay(true));
    REQUIRE(stream->local_address());
    REQUIRE(sync_wait(stream->close()));
  }
  // connect's socket, the option and the name, then close: the abortive-close check, the shutdown
  // (the close itself is a ring operation).
  CHECK(os.calls == std::vector<std::string>{"socket", "setsockopt", "getsockname", "getsockopt", "shutdown"});
  auto other = tcp_listener::listen(address::loopback_v4());
  REQUIRE(other);
  CHECK(os.calls.size() == 5);  // the scope ended: nothing more recorded
}

TEST_CASE("list_directory_blocking lists through the thread's system, at most max_directory_entries names", "[io][system]") {
  listing_system os;
  os.names = {"b", "a", ".hidden"};
  system_scope scope(os);
  auto names = sluice::io::list_directory_blocking("/nowhere/on/disk");
  REQUIRE(names);
  CHECK(*names == std::vector<std::string>{"b", "a", ".hidden"});
  CHECK(os.calls == std::vector<std::string>{"list_directory /nowhere/on/disk"});
  CHECK(os.max_entries_asked == sluice::io::max_directory_entries);
}

TEST_CASE("list_directory awaited under a stand-in system lists through that system, inline", "[io][system][offload]") {
  listing_system os;
  os.names = {"chk-2", "chk-1"};
  system_scope scope(os);
  struct body {
    static sluice::runtime::task<sluice::io::result<std::vector<std::string>>> run() {
      co_return co_await sluice::io::list_directory("/ckpt");
    }
  };
  auto names = sluice::runtime::sync_wait(body::run());
  REQUIRE(names);
  CHECK(*names == std::vector<std::string>{"chk-2", "chk-1"});
  CHECK(os.count("list_directory") == 1);
}

TEST_CASE("a listing the system cuts off or refuses fails with the listing's messages", "[io][system]") {
  listing_system os;
  system_scope scope(os);
  os.error = -EFBIG;
  auto too_many = sluice::io::list_directory_blocking("/big");
  REQUIRE_FALSE(too_many);
  CHECK(too_many.error().message() == "list directory '/big': more than 1048576 entries");
  CHECK(too_many.error().code() == std::errc::file_too_large);
  os.error = -EACCES;
  auto refused = sluice::io::list_directory_blocking("/closed");
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message() == "list directory '/closed': Permission denied");
}

TEST_CASE("directory_lock opens, locks and writes the system's pid through the thread's system", "[io][system]") {
  struct pid_system : recording_system {
    int getpid() noexcept override {
      note("getpid");
      return 4242;
    }
  } os;
  temp_dir dir;
  system_scope scope(os);
  auto lock = directory_lock::acquire(dir.path(), "checkpoint directory");
  REQUIRE(lock);
  const std::string lock_file = dir.file(".sluice-lock");
  const std::string probe = dir.file(".sluice-lock.probe");
  CHECK(os.calls == std::vector<std::string>{"open " + lock_file, "flock", "getpid", "ftruncate", "pwrite",
                                             "open " + probe, "close", "unlink " + probe});
  CHECK(read_text(lock_file) == "4242\n");

  auto second = directory_lock::acquire(dir.path(), "checkpoint directory");
  REQUIRE_FALSE(second);
  CHECK(second.error().message() ==
        "checkpoint directory '" + dir.path() + "' is in use by another sluice job (pid 4242)");
  CHECK(os.count("nanosleep") == 0);  // the pid was there at once
}

TEST_CASE("directory_lock waits for a holder's pid with the system's sleep, a bounded number of times", "[io][system]") {
  struct no_sleep : recording_system {
    int nanosleep(std::chrono::nanoseconds) noexcept override {
      note("nanosleep");
      return 0;  // no real time passes
    }
  } os;
  temp_dir dir;
  auto held = directory_lock::acquire(dir.path(), "output directory");
  REQUIRE(held);
  std::ofstream(dir.file(".sluice-lock"), std::ios::trunc).flush();  // a holder that has not written its pid yet
  system_scope scope(os);
  auto refused = directory_lock::acquire(dir.path(), "output directory");
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message() == "output directory '" + dir.path() + "' is in use by another sluice job (pid unknown)");
  CHECK(os.count("nanosleep") == 20);
}

TEST_CASE("make_directories_blocking makes the missing directories, outermost first, through the system", "[io][system]") {
  tree_system os;
  os.directories.insert("/sim");
  os.files.insert("/sim/file");
  system_scope scope(os);
  REQUIRE(sluice::io::make_directories_blocking("/sim/a/b/") == 0);
  CHECK(os.of("mkdir") == std::vector<std::string>{"mkdir /sim/a", "mkdir /sim/a/b"});
  CHECK(os.directories.count("/sim/a/b") == 1);
  // Durably: the parent of each directory made is fsynced.
  CHECK(os.of("fsync") == std::vector<std::string>{"fsync /sim/a", "fsync /sim"});

  os.calls.clear();
  CHECK(sluice::io::make_directories_blocking("/sim/a") == 0);  // there already: nothing made
  CHECK(os.of("mkdir").empty());
  CHECK(os.of("fsync") == std::vector<std::string>{"fsync /sim"});  // an earlier run may have made it
  CHECK(sluice::io::make_directories_blocking("/sim/file/x") == -ENOTDIR);
  CHECK(sluice::io::make_directories_blocking("/sim/file") == -ENOTDIR);
  CHECK(sluice::io::make_directories_blocking("") == -EINVAL);
  CHECK(os.of("mkdir").empty());
  CHECK(sluice::io::is_directory_blocking("/sim/a"));
  CHECK_FALSE(sluice::io::is_directory_blocking("/sim/file"));
  CHECK_FALSE(sluice::io::is_directory_blocking("/sim/missing"));
}

TEST_CASE("absolute_path joins a relative path to the system's working directory, and asks nothing else", "[io][system]") {
  struct elsewhere : recording_system {
    std::string current_directory() override {
      note("current_directory");
      return "/sim/work";
    }
  } os;
  system_scope scope(os);
  CHECK(sluice::io::absolute_path("out/x") == "/sim/work/out/x");
  CHECK(sluice::io::absolute_path("/data/out") == "/data/out");
  CHECK(sluice::io::absolute_path("") == "");
  CHECK(os.calls == std::vector<std::string>{"current_directory"});
}

TEST_CASE("read_file_blocking reads a whole file through the system, and refuses one past its bound", "[io][system]") {
  temp_dir dir;
  const std::string path = dir.file("small");
  std::ofstream(path) << std::string(100000, 'x');  // more than one read chunk
  recording_system os;
  system_scope scope(os);
  std::string text;
  REQUIRE(sluice::io::read_file_blocking(path, text, 100000) == 0);
  CHECK(text == std::string(100000, 'x'));
  CHECK(os.of("open") == std::vector<std::string>{"open " + path});
  CHECK(os.count("pread") == 3);  // 64 KiB, the rest, the end
  CHECK(os.count("close") == 1);

  std::string untouched = "before";
  CHECK(sluice::io::read_file_blocking(path, untouched, 99999) == -EFBIG);
  CHECK(untouched == "before");
  CHECK(sluice::io::read_file_blocking(dir.file("missing"), untouched, 10) == -ENOENT);
  CHECK(os.count("close") == 2);  // the refused read closed its file; the missing one had none
}
