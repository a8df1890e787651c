#pragma once
// codec<T>: how a record type becomes bytes and back. Encodings are little-endian, fixed width for
// numbers, so records read the same on every host.
//
// A type is `codable` when `codec<T>` provides
//   static std::size_t encoded_size(const T&);      exact byte count of encode()
//   static void encode(byte_writer&, const T&);
//   static T decode(byte_reader&);                   throws decode_error on short or bad input
// Provided: arithmetic types (bool as one byte; floats by their bit pattern), std::string
// (u32 length + bytes), std::byte, std::vector<T> (u32 count + elements), std::pair, std::tuple, and
// aggregates that list their fields, in order, with a static member function (C++20 has no
// reflection; a function, because the class is complete inside its body):
//
//   struct trade {
//     std::uint64_t id; double price; std::string venue;
//     static constexpr auto fields() { return std::make_tuple(&trade::id, &trade::price, &trade::venue); }
//   };
//
// The aggregate must be default-constructible; each field is decoded in place. Specialise
// codec<T> for anything else. Decoding never trusts a length: it is checked against the bytes left.

#include <bit>
#include <cassert>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace sluice::buffers {

// Thrown when bytes do not decode: the message names what was being read and what was missing.
class decode_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Appends to a growable byte vector (the serializer's scratch), or writes into a fixed span whose
// size the caller has checked against encoded_size() (the partition's fast path).
class byte_writer {
 public:
  explicit byte_writer(std::vector<std::byte>& out) noexcept : out_(&out) {}
  explicit byte_writer(std::span<std::byte> fixed) noexcept : fixed_(fixed.data()), fixed_left_(fixed.size()) {}
  // resize + memcpy rather than vector::insert: GCC 12 at -O3 reports a false -Wstringop-overflow
  // for insert of a span into a vector.
  void write(std::span<const std::byte> bytes) {
    if (bytes.empty()) return;
    if (out_ == nullptr) {
      assert(bytes.size() <= fixed_left_ && "codec wrote more than its encoded_size()");
      std::memcpy(fixed_ + fixed_written_, bytes.data(), bytes.size());
      fixed_written_ += bytes.size();
      fixed_left_ -= bytes.size();
      return;
    }
    const std::size_t at = out_->size();
    out_->resize(at + bytes.size());
    std::memcpy(out_->data() + at, bytes.data(), bytes.size());
  }
  void write(const void* p, std::size_t n) { write({static_cast<const std::byte*>(p), n}); }
  std::size_t written() const noexcept { return out_ != nullptr ? out_->size() : fixed_written_; }

 private:
  std::vector<std::byte>* out_ = nullptr;
  std::byte* fixed_ = nullptr;
  std::size_t fixed_left_ = 0;
  std::size_t fixed_written_ = 0;
};

// Reads from a byte span, checking every read against what is left.
class byte_reader {
 public:
  explicit byte_reader(std::span<const std::byte> in) noexcept : in_(in) {}
  std::size_t remaining() const noexcept { return in_.size() - pos_; }
  // The next `n` bytes; throws decode_error naming `what` if fewer are left.
  std::span<const std::byte> read(std::size_t n, const char* what) {
    if (n > remaining()) {
      throw decode_error(std::string("decode ") + what + ": needs " + std::to_string(n) + " bytes, " +
                         std::to_string(remaining()) + " left");
    }
    auto out = in_.subspan(pos_, n);
    pos_ += n;
    return out;
  }

 private:
  std::span<const std::byte> in_;
  std::size_t pos_ = 0;
};

// No codec: the primary template is empty, so `codable<T>` is false.
template <class T, class Enable = void>
struct codec {};

template <class T>
concept codable = requires(const T& value, byte_writer& w, byte_reader& r) {
  { codec<T>::encoded_size(value) } -> std::convertible_to<std::size_t>;
  codec<T>::encode(w, value);
  { codec<T>::decode(r) } -> std::same_as<T>;
};

namespace detail {
template <std::size_t N>
struct uint_of_size;
template <> struct uint_of_size<1> { using type = std::uint8_t; };
template <> struct uint_of_size<2> { using type = std::uint16_t; };
template <> struct uint_of_size<4> { using type = std::uint32_t; };
template <> struct uint_of_size<8> { using type = std::uint64_t; };

template <class U>
U to_little(U v) noexcept {
  if constexpr (std::endian::native == std::endian::big && sizeof(U) > 1) {
    U out = 0;
    for (std::size_t i = 0; i < sizeof(U); ++i) out = static_cast<U>((out << 8) | ((v >> (8 * i)) & 0xff));
    return out;
  }
  return v;
}

inline void write_u32(byte_writer& w, std::uint32_t v) {
  v = to_little(v);
  w.write(&v, sizeof v);
}
inline std::uint32_t read_u32(byte_reader& r, const char* what) {
  std::uint32_t v;
  std::memcpy(&v, r.read(sizeof v, what).data(), sizeof v);
  return to_little(v);
}
inline std::uint32_t checked_u32(std::size_t n, const char* what) {
  if (n > UINT32_MAX) throw std::length_error(std::string("encode ") + what + ": more than 2^32-1 elements");
  return static_cast<std::uint32_t>(n);
}

template <class T>
concept has_fields = requires { T::fields(); } && std::is_default_constructible_v<T>;
}  // namespace detail

// std::byte: one byte (so std::vector<std::byte> is u32 count + the bytes).
template <>
struct codec<std::byte> {
  static constexpr std::size_t encoded_size(std::byte) noexcept { return 1; }
  static void encode(byte_writer& w, std::byte b) { w.write(&b, 1); }
  static std::byte decode(byte_reader& r) { return r.read(1, "byte")[0]; }
};

// Arithmetic types: fixed width, little-endian; bool as 0/1.
template <class T>
struct codec<T, std::enable_if_t<std::is_arithmetic_v<T>>> {
  using bits = typename detail::uint_of_size<sizeof(T)>::type;
  static constexpr std::size_t encoded_size(const T&) noexcept { return sizeof(T); }
  static void encode(byte_writer& w, const T& v) {
    bits b = detail::to_little(std::bit_cast<bits>(v));
    w.write(&b, sizeof b);
  }
  static T decode(byte_reader& r) {
    bits b;
    std::memcpy(&b, r.read(sizeof b, "number").data(), sizeof b);
    b = detail::to_little(b);
    if constexpr (std::is_same_v<T, bool>) {
      if (b > 1) throw decode_error("decode bool: byte " + std::to_string(b) + " is neither 0 nor 1");
      return b == 1;
    } else {
      return std::bit_cast<T>(b);
    }
  }
};

template <>
struct codec<std::string> {
  static std::size_t encoded_size(const std::string& s) noexcept { return 4 + s.size(); }
  static void encode(byte_writer& w, const std::string& s) {
    detail::write_u32(w, detail::checked_u32(s.size(), "string"));
    w.write(s.data(), s.size());
  }
  static std::string decode(byte_reader& r) {
    const std::uint32_t n = detail::read_u32(r, "string length");
    auto bytes = r.read(n, "string");  // checked before anything is allocated
    return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  }
};

template <codable T>
struct codec<std::vector<T>> {
  static std::size_t encoded_size(const std::vector<T>& v) {
    std::size_t n = 4;
    for (const auto& e : v) n += codec<T>::encoded_size(e);
    return n;
  }
  static void encode(byte_writer& w, const std::vector<T>& v) {
    detail::write_u32(w, detail::checked_u32(v.size(), "vector"));
    for (const auto& e : v) codec<T>::encode(w, e);
  }
  static std::vector<T> decode(byte_reader& r) {
    const std::uint32_t n = detail::read_u32(r, "vector length");
    // Every element takes at least one byte, so a count beyond the bytes left is corrupt: this
    // bounds the reservation by the input.
    if (n > r.remaining()) {
      throw decode_error("decode vector: " + std::to_string(n) + " elements but only " +
                         std::to_string(r.remaining()) + " bytes left");
    }
    std::vector<T> out;
    out.reserve(n);
    for (std::uint32_t i = 0; i < n; ++i) out.push_back(codec<T>::decode(r));
    return out;
  }
};

// Bytes in one piece, the same encoding as the element-wise vector above (u32 count, then the
// bytes): a byte at a time made an operator state or an output backlog of a few hundred KiB cost
// milliseconds in the snapshot, which the barrier waits for.
template <>
struct codec<std::vector<std::byte>> {
  static std::size_t encoded_size(const std::vector<std::byte>& v) noexcept { return 4 + v.size(); }
  static void encode(byte_writer& w, const std::vector<std::byte>& v) {
    detail::write_u32(w, detail::checked_u32(v.size(), "vector"));
    w.write(std::span<const std::byte>(v));
  }
  static std::vector<std::byte> decode(byte_reader& r) {
    const std::uint32_t n = detail::read_u32(r, "vector length");
    if (n > r.remaining()) {
      throw decode_error("decode vector: " + std::to_string(n) + " elements but only " +
                         std::to_string(r.remaining()) + " bytes left");
    }
    const std::span<const std::byte> bytes = r.read(n, "vector");
    return std::vector<std::byte>(bytes.begin(), bytes.end());
  }
};

template <codable... Ts>
struct codec<std::tuple<Ts...>> {
  static std::size_t encoded_size(const std::tuple<Ts...>& t) {
    return std::apply([](const auto&... e) { return (std::size_t{0} + ... + codec<Ts>::encoded_size(e)); }, t);
  }
  static void encode(byte_writer& w, const std::tuple<Ts...>& t) {
    std::apply([&w](const auto&... e) { (codec<Ts>::encode(w, e), ...); }, t);
  }
  static std::tuple<Ts...> decode(byte_reader& r) {
    // Braced initialisation evaluates left to right, which fixes the field order.
    return std::tuple<Ts...>{codec<Ts>::decode(r)...};
  }
};

template <codable A, codable B>
struct codec<std::pair<A, B>> {
  static std::size_t encoded_size(const std::pair<A, B>& p) {
    return codec<A>::encoded_size(p.first) + codec<B>::encoded_size(p.second);
  }
  static void encode(byte_writer& w, const std::pair<A, B>& p) {
    codec<A>::encode(w, p.first);
    codec<B>::encode(w, p.second);
  }
  static std::pair<A, B> decode(byte_reader& r) {
    A a = codec<A>::decode(r);
    B b = codec<B>::decode(r);
    return {std::move(a), std::move(b)};
  }
};

// Aggregates that list their fields (see the top comment).
template <class T>
struct codec<T, std::enable_if_t<detail::has_fields<T>>> {
  static std::size_t encoded_size(const T& v) {
    return std::apply(
        [&v](auto... member) {
          return (std::size_t{0} + ... + codec<member_type<decltype(member)>>::encoded_size(v.*member));
        },
        T::fields());
  }
  static void encode(byte_writer& w, const T& v) {
    std::apply([&](auto... member) { (codec<member_type<decltype(member)>>::encode(w, v.*member), ...); },
               T::fields());
  }
  static T decode(byte_reader& r) {
    T v{};
    std::apply([&](auto... member) { ((v.*member = codec<member_type<decltype(member)>>::decode(r)), ...); },
               T::fields());
    return v;
  }

 private:
  template <class M>
  struct member_of;
  template <class C, class F>
  struct member_of<F C::*> {
    using type = F;
  };
  template <class M>
  using member_type = typename member_of<M>::type;
};

// Encodes `value` at the end of `out`.
template <codable T>
void encode_to(std::vector<std::byte>& out, const T& value) {
  byte_writer w(out);
  codec<T>::encode(w, value);
}

// Decodes exactly one T from `bytes`; bytes left over are an error (a record of the wrong type).
template <codable T>
T decode_from(std::span<const std::byte> bytes) {
  byte_reader r(bytes);
  T value = codec<T>::decode(r);
  if (r.remaining() != 0) {
    throw decode_error("decode: " + std::to_string(bytes.size()) + " bytes held " + std::to_string(r.remaining()) +
                       " bytes more than the record type reads");
  }
  return value;
}

}  // namespace sluice::buffers
