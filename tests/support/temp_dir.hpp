#pragma once
// temp_dir: a fresh directory under /tmp for one test, removed with everything in it on destruction.
//
//   temp_dir dir;
//   std::string p = dir.file("data");  // "/tmp/sluice-test-XXXXXX/data"

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>

namespace sluice::test {

class temp_dir {
 public:
  temp_dir() {
    std::string pattern = "/tmp/sluice-test-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw std::system_error(errno, std::generic_category(), "mkdtemp '" + pattern + "'");
    }
    path_ = pattern;
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  ~temp_dir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }

  const std::string& path() const noexcept { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace sluice::test
