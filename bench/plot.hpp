#pragma once
// A chart a benchmark fills while it runs, drawn by gnuplot into a PNG (`sluice bench <name> --plot
// FILE.png`).
//
// The chart is a set of sample series grouped by category along the x axis: for each category
// (a mode, a shape) one series per compared thing (sluice, its baseline). Two styles:
// - bars: each series' median as a bar, every sample as a dot on it (figure beside baseline);
// - distribution: each series as a box plot (quartiles, whiskers at 1.5 IQR) with every sample as a
//   dot (e.g. the checkpoint durations of one run).
// The y axis becomes logarithmic when the positive values span more than 50x, so a 5 ms and a
// 500 ms mode both stay readable. The PNG is written by gnuplot (Debian's gnuplot-nox, pngcairo
// terminal); nothing is drawn in-process.

#include <string>
#include <utility>
#include <vector>

namespace sluice::bench {

enum class chart_style { bars, distribution };

class chart {
 public:
  chart() = default;
  // What the chart shows; a benchmark calls this once, before adding samples.
  // `sample_name` names the dots in the key ("runs", "checkpoints").
  void describe(std::string title, std::string y_label, chart_style style, std::string sample_name = "runs");
  // The command that produced the chart, printed under it so a reader can run it again.
  void set_footnote(std::string text) { footnote_ = std::move(text); }
  // The samples of `series` in `category` (both shown as given). Empty samples are left out.
  void add(const std::string& category, const std::string& series, std::vector<double> samples);
  // A short text shown at the top of the category's group, e.g. "ratio 0.45".
  void annotate(const std::string& category, std::string text);
  bool empty() const noexcept { return sets_.empty(); }

  // The data file's text (gnuplot blocks, separated by two blank lines) and the script that reads
  // it from `data_path` and writes `png_path`.
  std::string data() const;
  std::string script(const std::string& data_path, const std::string& png_path) const;

  // Writes `png_path` with gnuplot: data and script in a temporary directory, gnuplot run on them,
  // the directory removed. Throws std::runtime_error with gnuplot's own message when it fails.
  void render(const std::string& png_path) const;

 private:
  struct sample_set {
    std::size_t category = 0;
    std::size_t series = 0;
    std::vector<double> samples;
  };
  double x_of(const sample_set& s) const noexcept;
  bool log_scale() const noexcept;

  std::string title_;
  std::string y_label_;
  std::string footnote_;
  std::string sample_name_ = "runs";
  chart_style style_ = chart_style::bars;
  std::vector<std::string> categories_;
  std::vector<std::string> series_;
  std::vector<sample_set> sets_;
  std::vector<std::pair<std::size_t, std::string>> notes_;  // category, text
};

// Checks, before a benchmark runs for minutes, that a plot can be written at `png_path`: the name
// ends in .png, its directory exists and is writable, and gnuplot is on PATH. Throws
// std::invalid_argument saying what to fix (e.g. "apt-get install gnuplot-nox").
void check_plot_target(const std::string& png_path);

}  // namespace sluice::bench
