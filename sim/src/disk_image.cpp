// disk_image: sorted path lists and their byte encoding.

#include <sluice/sim/disk_image.hpp>

#include <algorithm>
#include <cstring>

namespace sluice::sim {

namespace {

void put_u64(std::string& out, std::uint64_t v) {
  char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<char>(v >> (8 * i));
  out.append(b, 8);
}

bool get_u64(std::string_view& in, std::uint64_t& v) {
  if (in.size() < 8) return false;
  v = 0;
  for (int i = 0; i < 8; ++i) v |= std::uint64_t{static_cast<unsigned char>(in[i])} << (8 * i);
  in.remove_prefix(8);
  return true;
}

bool get_bytes(std::string_view& in, std::string& out) {
  std::uint64_t n = 0;
  if (!get_u64(in, n) || n > in.size()) return false;
  out.assign(in.substr(0, n));
  in.remove_prefix(n);
  return true;
}

void insert_sorted(std::vector<disk_image::entry>& entries, disk_image::entry e) {
  auto it = std::lower_bound(entries.begin(), entries.end(), e.path,
                             [](const disk_image::entry& a, const std::string& p) { return a.path < p; });
  if (it != entries.end() && it->path == e.path) {
    *it = std::move(e);
  } else {
    entries.insert(it, std::move(e));
  }
}

void add_parents(disk_image& image, const std::string& path) {
  for (std::size_t slash = path.find('/', 1); slash != std::string::npos; slash = path.find('/', slash + 1)) {
    const std::string dir = path.substr(0, slash);
    if (image.find(dir) == nullptr) insert_sorted(image.entries, {dir, true, {}});
  }
}

}  // namespace

const disk_image::entry* disk_image::find(std::string_view path) const noexcept {
  auto it = std::lower_bound(entries.begin(), entries.end(), path,
                             [](const entry& a, std::string_view p) { return a.path < p; });
  return it != entries.end() && it->path == path ? &*it : nullptr;
}

void disk_image::add_file(std::string path, std::string data) {
  add_parents(*this, path);
  insert_sorted(entries, {std::move(path), false, std::move(data)});
}

void disk_image::add_directory(std::string path) {
  add_parents(*this, path);
  insert_sorted(entries, {std::move(path), true, {}});
}

std::string disk_image::encode() const {
  std::string out = "SIMDISK1";
  put_u64(out, entries.size());
  for (const entry& e : entries) {
    put_u64(out, e.directory ? 1 : 0);
    put_u64(out, e.path.size());
    out += e.path;
    put_u64(out, e.data.size());
    out += e.data;
  }
  return out;
}

std::optional<disk_image> disk_image::decode(std::string_view in) {
  if (in.substr(0, 8) != "SIMDISK1") return std::nullopt;
  in.remove_prefix(8);
  std::uint64_t n = 0;
  if (!get_u64(in, n)) return std::nullopt;
  disk_image image;
  for (std::uint64_t i = 0; i < n; ++i) {
    entry e;
    std::uint64_t dir = 0;
    if (!get_u64(in, dir) || !get_bytes(in, e.path) || !get_bytes(in, e.data)) return std::nullopt;
    e.directory = dir != 0;
    image.entries.push_back(std::move(e));
  }
  if (!in.empty()) return std::nullopt;
  return image;
}

}  // namespace sluice::sim
