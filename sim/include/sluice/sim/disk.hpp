#pragma once
// disk: a simulated file system with a visible state (what reads see) and a durable state (what
// survives a crash), as the kernel's page cache and the device have.
//
// - A file's written blocks (4 KiB) stay dirty until fsync/fdatasync copies them and the size to
//   the durable copy. On a crash each dirty block survives or not, and the size is the durable or
//   the visible one, as the crash's random source decides: unsynced data is lost, kept or torn at
//   block granularity. A failed fsync (EIO) marks the dirty blocks clean without writing all of
//   them, as Linux does: what it lost stays lost.
// - A directory's changes (create, remove, rename in or out) are journaled per directory and become
//   durable only when that directory is fsynced. On a crash a prefix of each directory's journal
//   survives (changes land in order). A rename is one journal entry of the target directory, so it
//   is atomic: the name is either still the old one or already the new one.
// - Capacity: a write that would grow the disk beyond `capacity` bytes fails with ENOSPC.

#include <sluice/sim/disk_image.hpp>
#include <sluice/sim/random.hpp>

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::sim {

inline constexpr std::size_t block_size = 4096;

class disk {
 public:
  using ino = std::uint64_t;
  static constexpr ino root = 1;

  disk();
  // Every path in `image` visible and durable.
  explicit disk(const disk_image& image);

  // Path operations (absolute, normalized paths), on the visible state. 0 or -errno.
  int lookup(std::string_view path, ino& out) const;
  // Creates an empty file (O_CREAT); -EEXIST with `exclusive` if it exists; an existing file is
  // returned as it is.
  int create(std::string_view path, bool exclusive, ino& out);
  int make_directory(std::string_view path);
  int remove(std::string_view path, bool directory);
  int rename(std::string_view from, std::string_view to);
  int list(std::string_view path, std::vector<std::string>& names) const;

  bool is_directory(ino i) const { return inodes_.at(i).directory; }
  std::uint64_t size(ino i) const { return inodes_.at(i).data.size(); }
  // Reads at most len bytes at offset (0 at or past the end).
  std::size_t read(ino i, void* buf, std::size_t len, std::uint64_t offset) const;
  // Writes all of it, or fails with -ENOSPC (nothing written) when the disk is full.
  int write(ino i, const void* buf, std::size_t len, std::uint64_t offset);
  int truncate(ino i, std::uint64_t length);
  // fsync: a file's dirty blocks and size, or a directory's journal, become durable.
  void sync(ino i);
  // A failed fsync: each dirty block reaches the device or not (rng), and all count as clean.
  void fail_sync(ino i, rng& random);

  std::uint64_t used_bytes() const noexcept { return used_; }
  std::uint64_t capacity = std::uint64_t{1} << 40;

  disk_image visible() const;
  // The image a crash now leaves: the durable state plus what of the rest survives (rng).
  disk_image crash(rng& random) const;

 private:
  struct journal_entry {
    enum class kind : std::uint8_t { add, remove, move_in } what = kind::add;
    std::string name;
    ino target = 0;
    ino from_dir = 0;  // move_in: the directory and name it left
    std::string from_name;
  };
  struct inode {
    bool directory = false;
    std::string data;
    std::string durable;
    std::set<std::uint64_t> dirty;  // block numbers written since the last sync
    bool size_dirty = false;
    std::map<std::string, ino> entries;
    std::map<std::string, ino> durable_entries;
    std::vector<journal_entry> journal;
  };

  int resolve_parent(std::string_view path, ino& dir, std::string& name) const;
  ino make_inode(bool directory);
  static void apply(std::map<ino, inode>& nodes, ino dir, const journal_entry& e);
  void walk(const std::map<ino, inode>& nodes, ino dir, const std::string& prefix, bool durable,
            disk_image& out) const;

  std::map<ino, inode> inodes_;
  ino next_ = root + 1;
  std::uint64_t used_ = 0;
};

// Splits an absolute path into its components, resolving "." and ".."; false if it is not absolute.
bool normalize_path(std::string_view path, std::string& out);

}  // namespace sluice::sim
