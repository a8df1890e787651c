#include <sluice/io/result.hpp>

#include <catch2/catch.hpp>

#include <cstdlib>
#include <memory>
#include <new>
#include <string>

using namespace sluice::io;

// Counts this thread's allocations, so a test can prove that a path allocates nothing. Replacing
// the global operator new is legal once per program; this is the io_tests binary's one. Every
// non-aligned form is replaced, so each allocation and its release go through malloc and free.
namespace {
thread_local long allocations = 0;
void* counted_allocation(std::size_t size) noexcept {
  ++allocations;
  return std::malloc(size == 0 ? 1 : size);
}
}  // namespace

void* operator new(std::size_t size) {
  if (void* p = counted_allocation(size)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size) {
  if (void* p = counted_allocation(size)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t size, const std::nothrow_t&) noexcept { return counted_allocation(size); }
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept { return counted_allocation(size); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace {
result<std::size_t> half(std::size_t n) {
  if (n % 2 != 0) return error::from_errno(EINVAL, "halve '" + std::to_string(n) + "'");
  return n / 2;
}
result<void> check(bool good) {
  if (!good) return error::from_errno(EIO, "check 'disk'");
  return success();
}
}  // namespace

TEST_CASE("a successful result holds its value and allocates nothing", "[result]") {
  const long before = allocations;
  auto r = half(84);
  const bool ok = r.ok() && static_cast<bool>(r);
  const std::size_t v = r.value();
  auto moved = std::move(r);
  auto copied = moved;
  auto nothing = check(true);
  const long after = allocations;
  REQUIRE(ok);
  REQUIRE(v == 42);
  REQUIRE(*copied == 42);
  REQUIRE(nothing.ok());
  REQUIRE(after == before);
}

TEST_CASE("a failed result carries an error code and a message naming operation, subject and cause", "[result]") {
  const auto r = half(3);
  REQUIRE_FALSE(r.ok());
  REQUIRE_FALSE(static_cast<bool>(r));
  REQUIRE(r.error().code() == std::errc::invalid_argument);
  REQUIRE(r.error().message() == "halve '3': Invalid argument");
  REQUIRE(r.value_or(7) == 7);
}

TEST_CASE("value() on a failure throws an io_exception whose what() is the message", "[result]") {
  try {
    (void)half(5).value();
    FAIL("value() did not throw");
  } catch (const io_exception& e) {
    REQUIRE(std::string(e.what()) == "halve '5': Invalid argument");
    REQUIRE(e.code() == std::errc::invalid_argument);
    REQUIRE(e.error().message() == "halve '5': Invalid argument");
  }
  REQUIRE_THROWS_AS(check(false).value(), std::system_error);
  REQUIRE_THROWS_WITH(check(false).value(), "check 'disk': Input/output error");
}

TEST_CASE("a result can hold a move-only value and hand it out", "[result]") {
  result<std::unique_ptr<int>> r = std::make_unique<int>(9);
  REQUIRE(r.ok());
  REQUIRE(**r == 9);
  std::unique_ptr<int> p = std::move(r).value();
  REQUIRE(*p == 9);
}

TEST_CASE("io error codes compare to io::errc and print a cause", "[result]") {
  const auto e = error::from_code(errc::unexpected_eof, "recv from 1.2.3.4:5");
  REQUIRE(e.code() == errc::unexpected_eof);
  REQUIRE(e.code() != errc::no_progress);
  REQUIRE(e.message() == "recv from 1.2.3.4:5: unexpected end of stream");
  REQUIRE(std::string(e.code().category().name()) == "sluice.io");
}
