#pragma once
// stderr_capture: everything written to stderr (the log, runtime/log.hpp) while it lives, for tests
// that check what was logged; count_lines: the lines of a text that contain a needle.

#include <sluice/runtime/log.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace sluice::test {

class stderr_capture {
 public:
  explicit stderr_capture(std::string path) : path_(std::move(path)) {
    runtime::log::flush();
    std::fflush(stderr);
    saved_ = ::dup(2);
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ::dup2(fd, 2);
    ::close(fd);
  }
  ~stderr_capture() { stop(); }
  stderr_capture(const stderr_capture&) = delete;
  stderr_capture& operator=(const stderr_capture&) = delete;
  // Restores stderr (once every line queued so far is written) and returns what was captured.
  std::string stop() {
    if (saved_ >= 0) {
      runtime::log::flush();
      std::fflush(stderr);
      ::dup2(saved_, 2);
      ::close(saved_);
      saved_ = -1;
    }
    std::ifstream in(path_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  std::string path_;
  int saved_ = -1;
};

inline std::size_t count_lines(const std::string& log, const std::string& needle) {
  std::size_t n = 0;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);) n += line.find(needle) != std::string::npos ? 1 : 0;
  return n;
}

}  // namespace sluice::test
