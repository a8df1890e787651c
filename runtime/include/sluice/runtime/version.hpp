#pragma once

// The version of the sluice libraries, fixed by the build (project() in the
// top-level CMakeLists.txt). It is "major.minor.patch" and never empty.

#include <string_view>

namespace sluice::runtime {

[[nodiscard]] std::string_view version() noexcept;

}  // namespace sluice::runtime
