// The guide's examples run as written: every ```sh block of docs/cli.md (the page a newcomer types
// from) runs in a fresh directory with bash -euo pipefail, the `sluice` this build made first on the
// PATH, and must exit 0. A block that needs a server or a second terminal is written as ```text.

#include "run_sluice.hpp"

#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#ifndef SLUICE_DOCS_DIR
#error "SLUICE_DOCS_DIR must name docs/ (tests/CMakeLists.txt defines it)"
#endif

namespace {

struct example {
  int line = 0;  // of its opening fence
  std::string script;
};

std::vector<example> sh_blocks(const std::string& path) {
  std::ifstream in(path);
  std::vector<example> out;
  std::string line;
  int number = 0;
  bool inside = false;
  while (std::getline(in, line)) {
    ++number;
    if (!inside && line == "```sh") {
      inside = true;
      out.push_back({number, {}});
    } else if (inside && line.rfind("```", 0) == 0) {
      inside = false;
    } else if (inside) {
      out.back().script += line + "\n";
    }
  }
  return out;
}

}  // namespace

TEST_CASE("every sh example of docs/cli.md runs as written and exits 0", "[apps][docs]") {
  const std::string page = std::string(SLUICE_DOCS_DIR) + "/cli.md";
  const std::vector<example> examples = sh_blocks(page);
  REQUIRE(examples.size() >= 2);
  const std::string bin = std::filesystem::path(SLUICE_TOOL_PATH).parent_path().string();
  for (const example& e : examples) {
    INFO("docs/cli.md line " << e.line << ":\n" << e.script);
    sluice::test::temp_dir dir;
    const std::string script = dir.file("example.sh");
    std::ofstream(script) << "set -euo pipefail\n" << e.script;
    const std::string command = "cd '" + dir.path() + "' && PATH='" + bin + ":'\"$PATH\" SLUICE_LOG=warn timeout 300 bash '" +
                                script + "' > '" + dir.file("output.txt") + "' 2>&1";
    const int status = std::system(command.c_str());
    INFO("output:\n" << sluice::test::read_whole_file(dir.file("output.txt")));
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
}
