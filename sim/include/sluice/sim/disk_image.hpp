#pragma once
// disk_image: what a simulated disk holds, as a list of paths. The durable image after a crash is
// one; the next run of the job starts from it. It travels between processes as bytes (encode,
// decode), because each crash of a simulated job ends a process.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::sim {

struct disk_image {
  struct entry {
    std::string path;  // absolute, without a trailing slash; "/" is implied
    bool directory = false;
    std::string data;  // a file's bytes
    bool operator==(const entry&) const = default;
  };
  std::vector<entry> entries;  // sorted by path; a directory before what is in it

  bool operator==(const disk_image&) const = default;
  const entry* find(std::string_view path) const noexcept;
  // Adds a file (and the directories above it).
  void add_file(std::string path, std::string data);
  void add_directory(std::string path);

  std::string encode() const;
  static std::optional<disk_image> decode(std::string_view bytes);
};

}  // namespace sluice::sim
