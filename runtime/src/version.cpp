#include <sluice/runtime/version.hpp>

// Set for this file only, by the top-level CMakeLists.txt.
#ifndef SLUICE_VERSION_STRING
#error "SLUICE_VERSION_STRING must be defined by the build"
#endif

namespace sluice::runtime {

std::string_view version() noexcept { return SLUICE_VERSION_STRING; }

}  // namespace sluice::runtime
