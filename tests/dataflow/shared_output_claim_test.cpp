// The workers of a job across workers claim their shared output directory at once
// (job_directories.hpp): the first writes the marker, the others find it and take it as the job's.
// A worker that read "no marker yet" and then listed the directory after another worker wrote it
// once refused the job's own marker as a foreign file (exit 2), and left the other workers waiting
// for it. Forced here: the first worker's claim runs between the second's read of the marker and
// its listing (runtime::system seam).

#include "job_directories.hpp"

#include <sluice/runtime/system.hpp>

#include <support/recording_system.hpp>
#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <functional>
#include <optional>
#include <string>
#include <string_view>

using namespace sluice;
using dataflow::detail::job_directories;

namespace {

// Answers the first stat of an output marker as the disk had it, but only after `meanwhile` ran.
class racing_system : public test::recording_system {
 public:
  std::function<void()> meanwhile;

  int stat(const char* path, struct stat* st) noexcept override {
    const int rc = recording_system::stat(path, st);
    if (meanwhile && std::string_view(path).ends_with("/.sluice-output")) {
      std::function<void()> run = std::move(meanwhile);
      meanwhile = nullptr;
      run();
    }
    return rc;
  }
};

}  // namespace

TEST_CASE("two workers claiming their shared output directory at once: the later one takes the earlier one's marker",
          "[dataflow][ownership]") {
  test::temp_dir dir;
  const std::string chk = dir.file("chk");
  const std::string out = dir.file("out");
  io::result<job_directories> w0 = job_directories::lock("shared", chk, {out}, 0u);
  io::result<job_directories> w1 = job_directories::lock("shared", chk, {out}, 1u);
  REQUIRE(w0);
  REQUIRE(w1);
  w0->set_own_tasks([](std::uint64_t task) { return task % 2 == 0; });
  w1->set_own_tasks([](std::uint64_t task) { return task % 2 == 1; });
  std::optional<io::result<void>> first;
  racing_system os;
  os.meanwhile = [&first, &w0] { first.emplace(w0->claim_outputs(false)); };
  std::optional<io::result<void>> second;
  {
    runtime::system_scope scope(os);
    second.emplace(w1->claim_outputs(false));
  }
  REQUIRE(first.has_value());  // (the race happened: worker 0 claimed in between)
  INFO((*first ? std::string("worker 0 claimed") : first->error().message()));
  REQUIRE(*first);
  INFO((*second ? std::string("worker 1 claimed") : second->error().message()));
  CHECK(*second);
}
