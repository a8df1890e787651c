#pragma once
// buffer: a move-only handle to one segment lent out by a local_buffer_pool; buffer_view: a
// read-only, reference-counted window on a buffer's written bytes.
//
// Protocol (invariants 1-3):
// - A buffer and its views belong to the executor of their pool. Reference counts are plain
//   integers in the pool, touched only there; the handle holds one reference, each view one more.
// - When the last reference goes on the owner executor, the segment goes straight back to its pool,
//   which may hand it to the first waiter (by scheduling it, never by calling it).
// - A handle or view dropped on a FOREIGN executor or thread does not touch the count: it posts the
//   release to the owner's inbox, and the owner recycles the segment there, exactly once.
// - retain()/slice()/share() add references, so they run on the owner only (asserted).
//
//   buffer b = *pool.try_request();
//   b.append(bytes);                 // or: write into b.writable(), then b.commit(n)
//   buffer_view v = b.retain();      // the channel-state writer keeps v; the task moves on

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <utility>

namespace sluice::buffers {

class local_buffer_pool;

enum class buffer_kind : std::uint8_t { data, event };

class buffer_view;

class buffer {
 public:
  buffer() noexcept = default;
  buffer(buffer&& other) noexcept { steal(other); }
  buffer& operator=(buffer&& other) noexcept {
    if (this != &other) {
      reset();
      steal(other);
    }
    return *this;
  }
  buffer(const buffer&) = delete;
  buffer& operator=(const buffer&) = delete;
  ~buffer() { reset(); }

  bool valid() const noexcept { return pool_ != nullptr; }
  explicit operator bool() const noexcept { return valid(); }

  // Bytes written so far, and the segment's size.
  std::size_t size() const noexcept { return size_bytes_; }
  std::size_t capacity() const noexcept { return capacity_bytes_; }
  std::size_t remaining() const noexcept { return capacity_bytes_ - size_bytes_; }
  bool full() const noexcept { return size_bytes_ == capacity_bytes_; }

  buffer_kind kind() const noexcept { return kind_; }
  void set_kind(buffer_kind kind) noexcept { kind_ = kind; }

  // The written bytes, and the free tail to write into (follow with commit()).
  std::span<std::byte> data() noexcept { return {data_, size_bytes_}; }
  std::span<const std::byte> data() const noexcept { return {data_, size_bytes_}; }
  std::span<std::byte> writable() noexcept { return {data_ + size_bytes_, capacity_bytes_ - size_bytes_}; }
  void commit(std::size_t bytes) noexcept {
    assert(valid() && bytes <= remaining());
    size_bytes_ += static_cast<std::uint32_t>(bytes);
  }
  // Copies as much of `bytes` as fits; returns how many bytes were copied.
  std::size_t append(std::span<const std::byte> bytes) noexcept {
    assert(valid());
    const std::size_t n = bytes.size() < remaining() ? bytes.size() : remaining();
    if (n > 0) std::memcpy(data_ + size_bytes_, bytes.data(), n);
    size_bytes_ += static_cast<std::uint32_t>(n);
    return n;
  }
  // Forgets the written bytes (the segment stays with this handle).
  void clear() noexcept { size_bytes_ = 0; }

  // A view of the bytes written so far (or of a part of them). Owner executor only.
  buffer_view retain() const;
  buffer_view slice(std::size_t offset_bytes, std::size_t length_bytes) const;

  // Drops this handle's reference now: the segment is recycled once no view is left.
  void reset() noexcept;
  // True while a view of this buffer is alive (owner executor only).
  bool shared() const noexcept;

  // Gives up the handle WITHOUT recycling and returns the segment; it must come back through
  // local_buffer_pool::recycle(segment). For code that manages raw segments (and for tests).
  std::byte* detach() noexcept {
    std::byte* segment = data_;
    pool_ = nullptr;
    data_ = nullptr;
    size_bytes_ = capacity_bytes_ = 0;
    return segment;
  }

  local_buffer_pool* pool() const noexcept { return pool_; }

 private:
  friend class local_buffer_pool;
  buffer(local_buffer_pool* pool, std::byte* data, std::uint32_t slot, std::uint32_t capacity_bytes) noexcept
      : pool_(pool), data_(data), slot_(slot), capacity_bytes_(capacity_bytes) {}
  void steal(buffer& other) noexcept {
    pool_ = std::exchange(other.pool_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    slot_ = other.slot_;
    size_bytes_ = std::exchange(other.size_bytes_, 0);
    capacity_bytes_ = std::exchange(other.capacity_bytes_, 0);
    kind_ = other.kind_;
  }

  local_buffer_pool* pool_ = nullptr;
  std::byte* data_ = nullptr;
  std::uint32_t slot_ = 0;
  std::uint32_t size_bytes_ = 0;
  std::uint32_t capacity_bytes_ = 0;
  buffer_kind kind_ = buffer_kind::data;
};

class buffer_view {
 public:
  buffer_view() noexcept = default;
  buffer_view(buffer_view&& other) noexcept { steal(other); }
  buffer_view& operator=(buffer_view&& other) noexcept {
    if (this != &other) {
      reset();
      steal(other);
    }
    return *this;
  }
  buffer_view(const buffer_view&) = delete;
  buffer_view& operator=(const buffer_view&) = delete;
  ~buffer_view() { reset(); }

  bool valid() const noexcept { return pool_ != nullptr; }
  explicit operator bool() const noexcept { return valid(); }
  std::span<const std::byte> data() const noexcept { return {data_, size_bytes_}; }
  std::size_t size() const noexcept { return size_bytes_; }
  buffer_kind kind() const noexcept { return kind_; }

  // Another reference to the same bytes, or to a part of them. Owner executor only.
  buffer_view share() const { return slice(0, size_bytes_); }
  buffer_view slice(std::size_t offset_bytes, std::size_t length_bytes) const;

  void reset() noexcept;

 private:
  friend class buffer;
  buffer_view(local_buffer_pool* pool, const std::byte* data, std::uint32_t slot, std::uint32_t size_bytes,
              buffer_kind kind) noexcept
      : pool_(pool), data_(data), slot_(slot), size_bytes_(size_bytes), kind_(kind) {}
  void steal(buffer_view& other) noexcept {
    pool_ = std::exchange(other.pool_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    slot_ = other.slot_;
    size_bytes_ = std::exchange(other.size_bytes_, 0);
    kind_ = other.kind_;
  }

  local_buffer_pool* pool_ = nullptr;
  const std::byte* data_ = nullptr;
  std::uint32_t slot_ = 0;
  std::uint32_t size_bytes_ = 0;
  buffer_kind kind_ = buffer_kind::data;
};

}  // namespace sluice::buffers
