#pragma once
// progress_line: one status line for a running job on stderr, and a summary line at the end.
//
// On a terminal (and unless quiet) update() redraws the line in place ('\r', the text, then
// clear-to-end-of-line) at most every 250 ms, cut to the terminal's width so it never wraps. When
// stderr is a file or a pipe nothing is redrawn, so logs stay clean. finish(summary) always prints
// the summary, on the status line's place when there is one.
//
//   progress_line progress({.quiet = opts.quiet});
//   for (...) { progress.set_records(total, rate); progress.update(); }
//   progress.finish(fmt::format("done: {} lines", total));
//
// One owner calls set*/update/finish (typically a timer task on one executor). print_above() may be
// called from any thread meanwhile (the log's sink: runtime/log.hpp): the line's output is locked.

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

namespace sluice::apps {

struct checkpoint_progress {
  std::uint64_t id = 0;
  std::uint64_t duration_ms = 0;
  std::uint64_t size_bytes = 0;
};

// What the line shows; a field left empty is left out.
struct running_checkpoint_progress {
  std::uint64_t id = 0;
  std::uint64_t age_ms = 0;
};

struct progress_fields {
  std::uint64_t elapsed_ms = 0;
  std::optional<double> done;                 // fraction of the input read, 0..1
  std::optional<std::uint64_t> time_left_ms;  // an estimate, with `done`

  // What the sources read, in the unit a user knows the input by (lines of a text file, rows of
  // a CSV file, events), and its bytes where the input is a file.
  const char* unit = "records";
  std::optional<std::uint64_t> records_total;
  std::optional<std::uint64_t> bytes_read;
  std::optional<double> records_per_second;
  std::optional<std::uint64_t> records_written;  // by the sinks; shown when not 0
  std::optional<double> backpressure;  // fraction of time blocked on credit, 0..1
  std::optional<checkpoint_progress> last_checkpoint;
  std::optional<running_checkpoint_progress> running_checkpoint;  // shown once it is 1 s old
  std::optional<std::uint64_t> checkpoints_aborted;              // shown when not 0
};

// "1m05s | 45%, 1m20s left | 1,234,567 lines read (30.2 MiB) | 98.1k lines/s | 1,200 written |
//  backpressure 12% | last chk-7: 143 ms, 10.6 KiB | chk-8 running 2.1 s | 2 aborted"
std::string format_progress(const progress_fields& fields);

class progress_line {
 public:
  using clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds redraw_interval{250};

  struct options {
    bool quiet = false;                 // never draw the status line (finish still prints)
    std::FILE* out = stderr;
    std::optional<bool> terminal;       // empty: isatty(out)
    std::optional<unsigned> width;      // columns; empty: asked of the terminal (80 if it can't say)
    clock::time_point start = clock::now();
  };

  explicit progress_line(options o);
  progress_line() : progress_line(options{}) {}
  progress_line(const progress_line&) = delete;
  progress_line& operator=(const progress_line&) = delete;
  // Ends a status line left showing with a newline, so what follows does not overwrite it.
  ~progress_line();

  void set_records(std::uint64_t total, double per_second);
  void set_backpressure(double fraction);
  void set_checkpoint(std::uint64_t id, std::uint64_t duration_ms, std::uint64_t size_bytes);
  // Shows `fields` from now on, an empty one left out. Their elapsed_ms is not used: the line's own
  // clock (options::start) gives the elapsed time.
  void set(const progress_fields& fields);

  // Redraws the status line when it is drawn at all and the last redraw is 250 ms old or more.
  void update(clock::time_point now = clock::now());
  // Prints `summary` and a newline (replacing the status line, if any). After it, update() does nothing.
  void finish(std::string_view summary);
  // Prints `line` and a newline above the status line: the status line is cleared first and drawn
  // again after, so the two never run together. Any thread.
  void print_above(std::string_view line);

  bool draws() const noexcept { return draws_; }
  progress_fields fields(clock::time_point now) const;

 private:
  std::FILE* out_;
  bool draws_;
  unsigned width_;
  clock::time_point start_;
  std::optional<clock::time_point> last_draw_;
  std::mutex output_;  // out_, showing_ and shown_
  bool showing_ = false;  // a status line is on screen, without its newline
  std::string shown_;     // what it shows
  bool finished_ = false;
  progress_fields fields_;
};

}  // namespace sluice::apps
