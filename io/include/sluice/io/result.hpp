#pragma once
// result<T>: the outcome of an io operation, either a value or an io::error. The error's message
// says what failed, on what, and why: "write '/tmp/x': No space left on device",
// "connect 127.0.0.1:5000: Connection refused". The success path never allocates; only building an
// error message does.
//
//   result<std::size_t> r = co_await f.write_at(data, 0);
//   if (!r) co_return r.error();            // propagate (or log r.error().message())
//   std::size_t n = r.value();              // value() throws io_exception on error

#include <cassert>
#include <optional>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <variant>

namespace sluice::io {

// Failures that are not an errno: a stream that ended early, an operation that made no progress.
enum class errc { unexpected_eof = 1, no_progress = 2 };
const std::error_category& io_category() noexcept;
inline std::error_code make_error_code(errc e) noexcept { return {static_cast<int>(e), io_category()}; }

}  // namespace sluice::io

template <>
struct std::is_error_code_enum<sluice::io::errc> : std::true_type {};

namespace sluice::io {

class error {
 public:
  // `message` is the whole message: operation, subject and cause.
  error(std::error_code code, std::string message) noexcept : code_(code), message_(std::move(message)) {}

  // "<context>: <strerror(errno_value)>", e.g. from_errno(ENOENT, "open 'x'").
  static error from_errno(int errno_value, std::string context);
  // "<context>: <code.message()>".
  static error from_code(std::error_code code, std::string context);

  const std::error_code& code() const noexcept { return code_; }
  const std::string& message() const noexcept { return message_; }

 private:
  std::error_code code_;
  std::string message_;
};

// Thrown by result::value() on error. what() is exactly the error's message.
class io_exception : public std::system_error {
 public:
  explicit io_exception(io::error e) : std::system_error(e.code(), e.message()), error_(std::move(e)) {}
  const char* what() const noexcept override { return error_.message().c_str(); }
  const io::error& error() const noexcept { return error_; }

 private:
  io::error error_;
};

template <class T>
class [[nodiscard]] result {
  static_assert(!std::is_reference_v<T> && !std::is_same_v<std::remove_cv_t<T>, io::error>,
                "result<T> holds a value type other than io::error");

 public:
  using value_type = T;

  template <class U = T>
    requires(std::is_constructible_v<T, U &&> && !std::is_same_v<std::remove_cvref_t<U>, result> &&
             !std::is_same_v<std::remove_cvref_t<U>, io::error>)
  explicit(!std::is_convertible_v<U&&, T>) result(U&& value) noexcept(std::is_nothrow_constructible_v<T, U&&>)
      : state_(std::in_place_index<0>, std::forward<U>(value)) {}
  result(io::error e) noexcept : state_(std::in_place_index<1>, std::move(e)) {}

  bool ok() const noexcept { return state_.index() == 0; }
  explicit operator bool() const noexcept { return ok(); }

  T& value() & {
    if (!ok()) throw io_exception(*std::get_if<1>(&state_));
    return *std::get_if<0>(&state_);
  }
  const T& value() const& {
    if (!ok()) throw io_exception(*std::get_if<1>(&state_));
    return *std::get_if<0>(&state_);
  }
  // By value, so `auto&& v = make().value()` cannot dangle.
  T value() && {
    if (!ok()) throw io_exception(std::move(*std::get_if<1>(&state_)));
    return std::move(*std::get_if<0>(&state_));
  }
  template <class U>
  T value_or(U&& fallback) const& {
    return ok() ? *std::get_if<0>(&state_) : static_cast<T>(std::forward<U>(fallback));
  }

  T& operator*() & noexcept {
    assert(ok() && "dereferencing a failed result");
    return *std::get_if<0>(&state_);
  }
  const T& operator*() const& noexcept {
    assert(ok() && "dereferencing a failed result");
    return *std::get_if<0>(&state_);
  }
  T* operator->() noexcept { return &**this; }
  const T* operator->() const noexcept { return &**this; }

  // Only on failure.
  const io::error& error() const& noexcept {
    assert(!ok() && "result::error() on success");
    return *std::get_if<1>(&state_);
  }
  io::error error() && noexcept {
    assert(!ok() && "result::error() on success");
    return std::move(*std::get_if<1>(&state_));
  }

 private:
  std::variant<T, io::error> state_;
};

template <>
class [[nodiscard]] result<void> {
 public:
  using value_type = void;

  result() noexcept = default;
  result(io::error e) noexcept : error_(std::move(e)) {}

  bool ok() const noexcept { return !error_.has_value(); }
  explicit operator bool() const noexcept { return ok(); }

  void value() const& {
    if (error_) throw io_exception(*error_);
  }
  void value() && {
    if (error_) throw io_exception(std::move(*error_));
  }

  const io::error& error() const& noexcept {
    assert(!ok() && "result::error() on success");
    return *error_;
  }
  io::error error() && noexcept {
    assert(!ok() && "result::error() on success");
    return std::move(*error_);
  }

 private:
  std::optional<io::error> error_;
};

// A successful result<void>: `co_return success();` in a task<result<void>>.
inline result<void> success() noexcept { return {}; }

}  // namespace sluice::io
