#include <sluice/runtime/version.hpp>

#include <catch2/catch.hpp>

#include <string>
#include <string_view>

TEST_CASE("the runtime reports the version the build was configured with",
          "[version]") {
  const std::string_view version = sluice::runtime::version();
  REQUIRE_FALSE(version.empty());
  REQUIRE(std::string(version) == SLUICE_PROJECT_VERSION);
}
