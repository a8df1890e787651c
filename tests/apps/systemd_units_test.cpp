// The example systemd units (examples/systemd) are valid and hardened: `systemd-analyze verify`
// accepts each (with ExecStart= pointing at the built tool), and `systemd-analyze security
// --offline=yes` rates each at most 3.0 ("OK"). Skipped where systemd-analyze is not installed.

#include "run_sluice.hpp"

#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

#ifndef SLUICE_SYSTEMD_EXAMPLES_DIR
#error "SLUICE_SYSTEMD_EXAMPLES_DIR must name examples/systemd (tests/CMakeLists.txt defines it)"
#endif

namespace {

// `command`'s exit code and its output (stdout and stderr).
std::pair<int, std::string> shell(const std::string& command) {
  std::string out;
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return {-1, "popen failed"};
  char chunk[512];
  for (std::size_t n; (n = std::fread(chunk, 1, sizeof chunk, p)) > 0;) out.append(chunk, n);
  const int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  for (std::size_t at = 0; (at = text.find(from, at)) != std::string::npos; at += to.size()) text.replace(at, from.size(), to);
  return text;
}

}  // namespace

TEST_CASE("the example systemd units verify and are rated at most 3.0 by systemd-analyze security") {
  if (shell("command -v systemd-analyze").first != 0) {
    std::puts("sluice-test-skipped: systemd-analyze is not installed");
    return;
  }
  sluice::test::temp_dir dir;
  int units = 0;
  for (const auto& e : std::filesystem::directory_iterator(SLUICE_SYSTEMD_EXAMPLES_DIR)) {
    if (e.path().extension() != ".service") continue;
    ++units;
    const std::string name = e.path().filename().string();
    INFO(name);
    // The unit as installed, but running the tool this build made.
    const std::string unit = dir.file(name);
    std::ofstream(unit) << replaced(sluice::test::read_whole_file(e.path().string()), "/usr/local/bin/sluice",
                                    SLUICE_TOOL_PATH);
    // A template is checked as an instance of it.
    const std::string checked = name.find("@.") != std::string::npos ? replaced(unit, "@.", "@0.") : unit;
    if (checked != unit) std::filesystem::copy_file(unit, checked);

    const auto [security_code, security] = shell("systemd-analyze security --offline=yes --threshold=30 '" + checked + "'");
    INFO(security);
    CHECK(security_code == 0);
    CHECK(security.find("Overall exposure level") != std::string::npos);

    // verify: the syntax, and that ExecStart= runs. (It may warn about what this machine lacks,
    // the user sluice or /etc/sluice; those are not the unit's faults.)
    const auto [verify_code, verify] = shell("systemd-analyze verify '" + checked + "'");
    INFO(verify);
    CHECK(verify.find("Unknown key") == std::string::npos);
    CHECK(verify.find("Unknown section") == std::string::npos);
    CHECK(verify.find("is not executable") == std::string::npos);
    CHECK(verify.find("Failed to parse") == std::string::npos);
    CHECK(verify.find("Invalid") == std::string::npos);
  }
  CHECK(units == 2);
}
