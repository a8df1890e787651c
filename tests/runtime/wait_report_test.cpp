// wait_report: what registered parts of a program say they wait for, asked in a hang report.

#include <sluice/runtime/wait_report.hpp>

#include <catch2/catch.hpp>

#include <optional>
#include <string>

using namespace sluice::runtime;

namespace {

class line_reporter final : public wait_reporter {
 public:
  explicit line_reporter(std::string line) : line_(std::move(line)) {}
  void report_waits(std::string& out) const override { out += line_ + "\n"; }

 private:
  std::string line_;
};

}  // namespace

TEST_CASE("wait_report: every reporter registered on the thread answers, in order, while its scope lives") {
  CHECK(describe_waits().empty());
  const line_reporter first("task 0 waits for input");
  const line_reporter second("task 1 waits for credit");
  {
    const wait_report_scope a(first);
    std::optional<wait_report_scope> b;
    b.emplace(second);
    CHECK(describe_waits() == "task 0 waits for input\ntask 1 waits for credit\n");
    b.reset();
    CHECK(describe_waits() == "task 0 waits for input\n");
  }
  CHECK(describe_waits().empty());
}
