// Proves the installed package works: headers found, static libraries and
// their dependencies linked, and the library agrees with its package version.
#include <sluice/runtime/version.hpp>

#include <cstdio>
#include <string_view>

int main() {
  const std::string_view version = sluice::runtime::version();
  std::printf("consumer: sluice::runtime::version() = %.*s\n",
              static_cast<int>(version.size()), version.data());
  if (version != SLUICE_PACKAGE_VERSION) {
    std::fprintf(stderr, "consumer: expected version %s from the package\n",
                 SLUICE_PACKAGE_VERSION);
    return 1;
  }
  return 0;
}
