// disk: the simulated file system's visible and durable states (see disk.hpp).

#include <sluice/sim/disk.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace sluice::sim {

bool normalize_path(std::string_view path, std::string& out) {
  if (path.empty() || path.front() != '/') return false;
  std::vector<std::string_view> parts;
  std::size_t i = 0;
  while (i < path.size()) {
    while (i < path.size() && path[i] == '/') ++i;
    std::size_t j = i;
    while (j < path.size() && path[j] != '/') ++j;
    const std::string_view part = path.substr(i, j - i);
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
    } else if (!part.empty() && part != ".") {
      parts.push_back(part);
    }
    i = j;
  }
  // Sized first, then copied (string appends here trip a false -Wrestrict in GCC 12 at -O3).
  std::size_t total = 0;
  for (std::string_view p : parts) total += 1 + p.size();
  if (total == 0) {
    out.assign(1, '/');
    return true;
  }
  out.assign(total, '/');
  std::size_t at = 0;
  for (std::string_view p : parts) {
    std::memcpy(out.data() + at + 1, p.data(), p.size());
    at += 1 + p.size();
  }
  return true;
}

disk::disk() { inodes_[root].directory = true; }

disk::disk(const disk_image& image) : disk() {
  for (const disk_image::entry& e : image.entries) {
    ino dir = 0;
    std::string name;
    if (resolve_parent(e.path, dir, name) != 0) continue;
    const ino i = make_inode(e.directory);
    inode& n = inodes_[i];
    n.data = e.data;
    n.durable = e.data;
    used_ += e.data.size();
    inodes_[dir].entries[name] = i;
    inodes_[dir].durable_entries[name] = i;
  }
}

disk::ino disk::make_inode(bool directory) {
  const ino i = next_++;
  inodes_[i].directory = directory;
  return i;
}

int disk::lookup(std::string_view path, ino& out) const {
  std::string p;
  if (!normalize_path(path, p)) return -EINVAL;
  ino cur = root;
  std::size_t i = 1;
  while (i < p.size()) {
    const std::size_t j = std::min(p.find('/', i), p.size());
    const inode& dir = inodes_.at(cur);
    if (!dir.directory) return -ENOTDIR;
    auto it = dir.entries.find(std::string(p.substr(i, j - i)));
    if (it == dir.entries.end()) return -ENOENT;
    cur = it->second;
    i = j + 1;
  }
  out = cur;
  return 0;
}

int disk::resolve_parent(std::string_view path, ino& dir, std::string& name) const {
  std::string p;
  if (!normalize_path(path, p)) return -EINVAL;
  if (p == "/") return -EEXIST;
  const std::size_t slash = p.rfind('/');
  name = p.substr(slash + 1);
  const int rc = lookup(slash == 0 ? std::string_view("/") : std::string_view(p).substr(0, slash), dir);
  if (rc != 0) return rc;
  return inodes_.at(dir).directory ? 0 : -ENOTDIR;
}

int disk::create(std::string_view path, bool exclusive, ino& out) {
  ino dir = 0;
  std::string name;
  if (const int rc = resolve_parent(path, dir, name); rc != 0) return rc;
  inode& d = inodes_[dir];
  if (auto it = d.entries.find(name); it != d.entries.end()) {
    if (exclusive) return -EEXIST;
    if (inodes_[it->second].directory) return -EISDIR;
    out = it->second;
    return 0;
  }
  out = make_inode(false);
  inodes_[dir].entries[name] = out;
  inodes_[dir].journal.push_back({journal_entry::kind::add, name, out, 0, {}});
  return 0;
}

int disk::make_directory(std::string_view path) {
  ino dir = 0;
  std::string name;
  if (const int rc = resolve_parent(path, dir, name); rc != 0) return rc;
  if (inodes_[dir].entries.count(name) != 0) return -EEXIST;
  const ino i = make_inode(true);
  inodes_[dir].entries[name] = i;
  inodes_[dir].journal.push_back({journal_entry::kind::add, name, i, 0, {}});
  return 0;
}

int disk::remove(std::string_view path, bool directory) {
  ino dir = 0;
  std::string name;
  if (const int rc = resolve_parent(path, dir, name); rc != 0) return rc;
  inode& d = inodes_[dir];
  auto it = d.entries.find(name);
  if (it == d.entries.end()) return -ENOENT;
  const inode& target = inodes_[it->second];
  if (directory && !target.directory) return -ENOTDIR;
  if (!directory && target.directory) return -EISDIR;
  if (directory && !target.entries.empty()) return -ENOTEMPTY;
  if (!target.directory) used_ -= std::min<std::uint64_t>(used_, target.data.size());
  d.entries.erase(it);
  d.journal.push_back({journal_entry::kind::remove, name, 0, 0, {}});
  return 0;
}

int disk::rename(std::string_view from, std::string_view to) {
  ino from_dir = 0, to_dir = 0;
  std::string from_name, to_name;
  if (const int rc = resolve_parent(from, from_dir, from_name); rc != 0) return rc;
  if (const int rc = resolve_parent(to, to_dir, to_name); rc != 0) return rc;
  auto src = inodes_[from_dir].entries.find(from_name);
  if (src == inodes_[from_dir].entries.end()) return -ENOENT;
  const ino moved = src->second;
  if (from_dir == to_dir && from_name == to_name) return 0;
  auto& to_entries = inodes_[to_dir].entries;
  if (auto dst = to_entries.find(to_name); dst != to_entries.end()) {
    const inode& old = inodes_[dst->second];
    if (old.directory != inodes_[moved].directory) return old.directory ? -EISDIR : -ENOTDIR;
    if (old.directory && !old.entries.empty()) return -ENOTEMPTY;
    if (!old.directory) used_ -= std::min<std::uint64_t>(used_, old.data.size());
  }
  inodes_[from_dir].entries.erase(from_name);
  inodes_[to_dir].entries[to_name] = moved;
  inodes_[to_dir].journal.push_back({journal_entry::kind::move_in, to_name, moved, from_dir, from_name});
  return 0;
}

int disk::list(std::string_view path, std::vector<std::string>& names) const {
  ino i = 0;
  if (const int rc = lookup(path, i); rc != 0) return rc;
  const inode& d = inodes_.at(i);
  if (!d.directory) return -ENOTDIR;
  for (const auto& [name, child] : d.entries) names.push_back(name);
  return 0;
}

std::size_t disk::read(ino i, void* buf, std::size_t len, std::uint64_t offset) const {
  const std::string& data = inodes_.at(i).data;
  if (offset >= data.size()) return 0;
  const std::size_t n = std::min<std::uint64_t>(len, data.size() - offset);
  std::memcpy(buf, data.data() + offset, n);
  return n;
}

int disk::write(ino i, const void* buf, std::size_t len, std::uint64_t offset) {
  inode& n = inodes_[i];
  const std::uint64_t end = offset + len;
  const std::uint64_t growth = end > n.data.size() ? end - n.data.size() : 0;
  if (used_ + growth > capacity) return -ENOSPC;
  if (len == 0) return 0;
  if (end > n.data.size()) {
    n.data.resize(end, '\0');
    n.size_dirty = true;
  }
  std::memcpy(n.data.data() + offset, buf, len);
  used_ += growth;
  for (std::uint64_t b = offset / block_size; b <= (end - 1) / block_size; ++b) n.dirty.insert(b);
  return static_cast<int>(len);
}

int disk::truncate(ino i, std::uint64_t length) {
  inode& n = inodes_[i];
  if (length > n.data.size()) {
    if (used_ + (length - n.data.size()) > capacity) return -ENOSPC;
    used_ += length - n.data.size();
  } else {
    used_ -= std::min<std::uint64_t>(used_, n.data.size() - length);
  }
  n.data.resize(length, '\0');
  n.size_dirty = true;
  return 0;
}

void disk::sync(ino i) {
  inode& n = inodes_[i];
  if (n.directory) {
    for (const journal_entry& e : n.journal) apply(inodes_, i, e);
    n.journal.clear();
    return;
  }
  // Only what is dirty reaches the device: blocks a failed fsync dropped stay lost (fail_sync).
  n.durable.resize(n.data.size(), '\0');
  for (std::uint64_t b : n.dirty) {
    const std::uint64_t from = b * block_size;
    if (from >= n.data.size()) continue;
    const std::uint64_t len = std::min<std::uint64_t>(block_size, n.data.size() - from);
    std::memcpy(n.durable.data() + from, n.data.data() + from, len);
  }
  n.dirty.clear();
  n.size_dirty = false;
}

void disk::fail_sync(ino i, rng& random) {
  inode& n = inodes_[i];
  if (n.directory) return;  // the journal stays: a later fsync may still commit it
  std::string landed = n.durable;
  if (random.coin()) landed.resize(n.data.size(), '\0');
  for (std::uint64_t b : n.dirty) {
    if (!random.coin()) continue;
    const std::uint64_t from = b * block_size;
    if (from >= landed.size() || from >= n.data.size()) continue;
    const std::uint64_t len = std::min<std::uint64_t>({block_size, landed.size() - from, n.data.size() - from});
    std::memcpy(landed.data() + from, n.data.data() + from, len);
  }
  n.durable = std::move(landed);
  n.dirty.clear();
  n.size_dirty = false;
}

void disk::apply(std::map<ino, inode>& nodes, ino dir, const journal_entry& e) {
  auto& durable = nodes[dir].durable_entries;
  switch (e.what) {
    case journal_entry::kind::add: durable[e.name] = e.target; break;
    case journal_entry::kind::remove: durable.erase(e.name); break;
    case journal_entry::kind::move_in: {
      auto& from = nodes[e.from_dir].durable_entries;
      if (auto it = from.find(e.from_name); it != from.end() && it->second == e.target) from.erase(it);
      durable[e.name] = e.target;
      break;
    }
  }
}

void disk::walk(const std::map<ino, inode>& nodes, ino dir, const std::string& prefix, bool durable,
                disk_image& out) const {
  const inode& d = nodes.at(dir);
  for (const auto& [name, child] : durable ? d.durable_entries : d.entries) {
    const inode& c = nodes.at(child);
    const std::string path = prefix + "/" + name;
    out.entries.push_back({path, c.directory, c.directory ? std::string() : (durable ? c.durable : c.data)});
    if (c.directory) walk(nodes, child, path, durable, out);
  }
}

disk_image disk::visible() const {
  disk_image out;
  walk(inodes_, root, "", false, out);
  std::sort(out.entries.begin(), out.entries.end(), [](const auto& a, const auto& b) { return a.path < b.path; });
  return out;
}

disk_image disk::crash(rng& random) const {
  std::map<ino, inode> nodes = inodes_;
  for (auto& [i, n] : nodes) {
    if (n.directory) {
      const std::size_t kept = random.below(n.journal.size() + 1);
      for (std::size_t k = 0; k < kept; ++k) apply(nodes, i, n.journal[k]);
      continue;
    }
    if (n.dirty.empty() && !n.size_dirty) continue;
    std::string landed = n.durable;
    if (n.size_dirty && random.coin()) landed.resize(n.data.size(), '\0');
    for (std::uint64_t b : n.dirty) {
      if (!random.coin()) continue;
      const std::uint64_t from = b * block_size;
      if (from >= landed.size() || from >= n.data.size()) continue;
      const std::uint64_t len = std::min<std::uint64_t>({block_size, landed.size() - from, n.data.size() - from});
      std::memcpy(landed.data() + from, n.data.data() + from, len);
    }
    n.durable = std::move(landed);
  }
  disk_image out;
  walk(nodes, root, "", true, out);
  std::sort(out.entries.begin(), out.entries.end(), [](const auto& a, const auto& b) { return a.path < b.path; });
  return out;
}

}  // namespace sluice::sim
