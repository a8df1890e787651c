#pragma once
// wait_report: parts of a program that can say what they wait for, asked when a simulation finds
// the program stuck (sim::world's hang report). A reporter registers for its lifetime on the thread
// that made it (wait_report_scope); describe_waits() asks every reporter of this thread, in the
// order they registered. Nothing is asked outside of such a report: a reporter costs nothing else.

#include <string>
#include <vector>

namespace sluice::runtime {

class wait_reporter {
 public:
  // Appends one line per part that waits ("task 3 (count#1) on executor 1: ..."), '\n' included.
  virtual void report_waits(std::string& out) const = 0;

 protected:
  ~wait_reporter() = default;
};

// Registers `reporter` on this thread while the scope lives.
class wait_report_scope {
 public:
  explicit wait_report_scope(const wait_reporter& reporter);
  ~wait_report_scope();
  wait_report_scope(const wait_report_scope&) = delete;
  wait_report_scope& operator=(const wait_report_scope&) = delete;

 private:
  const wait_reporter* reporter_;
};

// What every reporter registered on this thread says; empty if none is.
std::string describe_waits();

}  // namespace sluice::runtime
