#include <sluice/snapshot/storage_error.hpp>

#include <string>

namespace sluice::snapshot {

namespace {

std::string_view name_of(storage_errc e) noexcept {
  switch (e) {
    case storage_errc::missing_manifest: return "missing-manifest";
    case storage_errc::bad_manifest: return "bad-manifest";
    case storage_errc::missing_file: return "missing-file";
    case storage_errc::size_mismatch: return "size-mismatch";
    case storage_errc::bad_checksum: return "bad-checksum";
    case storage_errc::truncated: return "truncated";
    case storage_errc::bad_format: return "bad-format";
    case storage_errc::unrestorable: return "unrestorable";
    case storage_errc::bad_name: return "bad-name";
    case storage_errc::not_a_directory: return "not-a-directory";
    case storage_errc::not_owned: return "not-owned";
  }
  return "unknown";
}

class storage_category_impl final : public std::error_category {
 public:
  const char* name() const noexcept override { return "sluice.snapshot.storage"; }
  std::string message(int value) const override { return std::string(name_of(static_cast<storage_errc>(value))); }
};

}  // namespace

const std::error_category& storage_category() noexcept {
  static const storage_category_impl instance;
  return instance;
}

std::string_view fault_name(const std::error_code& code) noexcept {
  if (code.category() != storage_category()) return "io-error";
  return name_of(static_cast<storage_errc>(code.value()));
}

}  // namespace sluice::snapshot
