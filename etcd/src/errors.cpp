// The etcd client's error categories (see errors.hpp).

#include <sluice/etcd/errors.hpp>

#include <string>

namespace sluice::etcd {

namespace {

class etcd_category_impl final : public std::error_category {
 public:
  const char* name() const noexcept override { return "etcd"; }
  std::string message(int value) const override {
    switch (static_cast<errc>(value)) {
      case errc::lease_expired: return "lease expired or unknown";
      case errc::compacted: return "revision compacted";
      case errc::bad_response: return "bad response";
      case errc::response_too_large: return "response too large";
      case errc::watch_ended: return "watch ended";
    }
    return "etcd error " + std::to_string(value);
  }
};

class grpc_category_impl final : public std::error_category {
 public:
  const char* name() const noexcept override { return "grpc"; }
  std::string message(int value) const override { return std::string("gRPC ") + grpc_code_name(value); }
};

}  // namespace

const std::error_category& etcd_category() noexcept {
  static const etcd_category_impl category;
  return category;
}

const std::error_category& grpc_category() noexcept {
  static const grpc_category_impl category;
  return category;
}

const char* grpc_code_name(int code) noexcept {
  static constexpr const char* names[] = {
      "OK",           "CANCELLED",          "UNKNOWN",             "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
      "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED",       "OUT_OF_RANGE",
      "UNIMPLEMENTED", "INTERNAL",          "UNAVAILABLE",         "DATA_LOSS",        "UNAUTHENTICATED",
  };
  if (code < 0 || code >= static_cast<int>(sizeof names / sizeof names[0])) return "(unknown code)";
  return names[code];
}

}  // namespace sluice::etcd
