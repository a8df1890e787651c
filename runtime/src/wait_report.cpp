// See wait_report.hpp.

#include <sluice/runtime/wait_report.hpp>

#include <algorithm>

namespace sluice::runtime {

namespace {
thread_local std::vector<const wait_reporter*> reporters;
}  // namespace

wait_report_scope::wait_report_scope(const wait_reporter& reporter) : reporter_(&reporter) {
  reporters.push_back(reporter_);
}

wait_report_scope::~wait_report_scope() {
  const auto it = std::find(reporters.begin(), reporters.end(), reporter_);
  if (it != reporters.end()) reporters.erase(it);
}

std::string describe_waits() {
  std::string out;
  for (const wait_reporter* r : reporters) r->report_waits(out);
  return out;
}

}  // namespace sluice::runtime
