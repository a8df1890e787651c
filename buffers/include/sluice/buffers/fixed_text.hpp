#pragma once
// fixed_text<N> and fixed_bytes<N>: a short string or byte string stored inline, so that an options
// struct holding them stays trivially copyable.
//
// Why: GCC 12 miscompiles a braced or default-argument temporary of a class with a std::string or
// std::vector member inside a co_await expression (`co_await tcp_transport::start(a)`, `start(a, {})`):
// it destroys a bitwise copy, and the string's small buffer is freed as if it were heap memory.
// Trivially copyable options are immune. Assigning more than N bytes throws std::length_error.
//
//   transport_options o{.job_name = "wordcount"};
//   std::string_view job = o.job_name.view();

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::buffers {

template <std::size_t N>
class fixed_text {
 public:
  fixed_text() noexcept = default;
  fixed_text(std::string_view s) { assign(s); }  // NOLINT: implicit, for designated initializers
  fixed_text(const char* s) : fixed_text(std::string_view(s)) {}
  fixed_text(const std::string& s) : fixed_text(std::string_view(s)) {}

  std::string_view view() const noexcept { return {data_.data(), size_}; }
  std::string str() const { return std::string(view()); }
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  static constexpr std::size_t capacity() noexcept { return N; }
  friend bool operator==(const fixed_text& a, const fixed_text& b) noexcept { return a.view() == b.view(); }

 private:
  void assign(std::string_view s) {
    if (s.size() > N) {
      throw std::length_error("a text of " + std::to_string(s.size()) + " bytes exceeds the limit of " +
                              std::to_string(N));
    }
    if (!s.empty()) std::memcpy(data_.data(), s.data(), s.size());
    size_ = static_cast<std::uint16_t>(s.size());
  }
  std::array<char, N> data_{};
  std::uint16_t size_ = 0;
};

template <std::size_t N>
class fixed_bytes {
 public:
  fixed_bytes() noexcept = default;
  fixed_bytes(std::span<const std::byte> b) { assign(b); }  // NOLINT: implicit
  fixed_bytes(const std::vector<std::byte>& b) : fixed_bytes(std::span<const std::byte>(b)) {}

  std::span<const std::byte> span() const noexcept { return {data_.data(), size_}; }
  std::vector<std::byte> vec() const { return {span().begin(), span().end()}; }
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  static constexpr std::size_t capacity() noexcept { return N; }

 private:
  void assign(std::span<const std::byte> b) {
    if (b.size() > N) {
      throw std::length_error(std::to_string(b.size()) + " bytes exceed the limit of " + std::to_string(N));
    }
    if (!b.empty()) std::memcpy(data_.data(), b.data(), b.size());
    size_ = static_cast<std::uint16_t>(b.size());
  }
  std::array<std::byte, N> data_{};
  std::uint16_t size_ = 0;
};

}  // namespace sluice::buffers
