// io::error construction and the io error category (see result.hpp).

#include <sluice/io/result.hpp>

namespace sluice::io {

namespace {
class io_category_impl final : public std::error_category {
 public:
  const char* name() const noexcept override { return "sluice.io"; }
  std::string message(int value) const override {
    switch (static_cast<errc>(value)) {
      case errc::unexpected_eof: return "unexpected end of stream";
      case errc::no_progress: return "no progress (0 bytes transferred)";
    }
    return "unknown io error";
  }
};
}  // namespace

const std::error_category& io_category() noexcept {
  static const io_category_impl instance;
  return instance;
}

error error::from_errno(int errno_value, std::string context) {
  return from_code(std::error_code(errno_value, std::system_category()), std::move(context));
}

error error::from_code(std::error_code code, std::string context) {
  context += ": ";
  context += code.message();
  return error(code, std::move(context));
}

}  // namespace sluice::io
