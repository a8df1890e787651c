// The benchmarks' charts: gnuplot data and script, and gnuplot run on them (see plot.hpp).

#include "plot.hpp"

#include "bench.hpp"

#include <fmt/core.h>

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <system_error>

extern char** environ;

namespace sluice::bench {

namespace {

constexpr double log_span = 50;  // positive values spanning more than this: logarithmic y axis
constexpr const char* colours[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"};

std::size_t index_of(std::vector<std::string>& names, const std::string& name) {
  auto it = std::find(names.begin(), names.end(), name);
  if (it != names.end()) return static_cast<std::size_t>(it - names.begin());
  names.push_back(name);
  return names.size() - 1;
}

// A gnuplot single-quoted string: a quote inside is written twice.
std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += '\'';
    if (c == '\n') {
      out += ' ';
      continue;
    }
    out += c;
  }
  out += '\'';
  return out;
}

// A gnuplot double-quoted string: backslash and quote escaped, a newline as \n.
std::string double_quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  out += '"';
  return out;
}

bool on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  std::istringstream in(dirs);
  std::string dir;
  while (std::getline(in, dir, ':')) {
    const std::filesystem::path base = dir.empty() ? std::filesystem::path(".") : std::filesystem::path(dir);
    if (::access((base / program).c_str(), X_OK) == 0) return true;
  }
  return false;
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_file(const std::filesystem::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::trunc);
  out << text;
  out.close();
  if (!out) throw std::runtime_error(fmt::format("--plot: cannot write '{}'", p.string()));
}

// Runs `gnuplot script`, its output into `log`; returns its exit status (or -1: not started).
int run_gnuplot(const std::filesystem::path& script, const std::filesystem::path& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::string program = "gnuplot";
  std::string script_arg = script.string();
  char* argv[] = {program.data(), script_arg.data(), nullptr};
  pid_t pid = 0;
  const int rc = ::posix_spawnp(&pid, "gnuplot", &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return -1;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

void chart::describe(std::string title, std::string y_label, chart_style style, std::string sample_name) {
  sample_name_ = std::move(sample_name);
  title_ = std::move(title);
  y_label_ = std::move(y_label);
  style_ = style;
}

void chart::add(const std::string& category, const std::string& series, std::vector<double> samples) {
  samples.erase(std::remove_if(samples.begin(), samples.end(), [](double v) { return !std::isfinite(v); }),
                samples.end());
  if (samples.empty()) return;
  const std::size_t c = index_of(categories_, category);
  const std::size_t s = index_of(series_, series);
  sets_.push_back({c, s, std::move(samples)});
}

void chart::annotate(const std::string& category, std::string text) {
  notes_.emplace_back(index_of(categories_, category), std::move(text));
}

// Category i occupies x in (i*(S+1), (i+1)*(S+1)): its S series at offsets 1..S, a gap after.
double chart::x_of(const sample_set& s) const noexcept {
  return static_cast<double>(s.category * (series_.size() + 1) + s.series + 1);
}

bool chart::log_scale() const noexcept {
  double lo = 0, hi = 0;
  for (const sample_set& s : sets_) {
    for (double v : s.samples) {
      if (v <= 0) return false;  // a log axis cannot show it
      lo = lo == 0 ? v : std::min(lo, v);
      hi = std::max(hi, v);
    }
  }
  return lo > 0 && hi / lo > log_span;
}

// Blocks: 0..S-1 the medians of series s (x median), then one block per sample set (x sample).
std::string chart::data() const {
  std::string out;
  for (std::size_t s = 0; s < series_.size(); ++s) {
    out += fmt::format("# medians of {}\n", series_[s]);
    for (const sample_set& set : sets_) {
      if (set.series == s) out += fmt::format("{} {}\n", x_of(set), median(set.samples));
    }
    out += "\n\n";
  }
  for (const sample_set& set : sets_) {
    out += fmt::format("# {} / {}\n", categories_[set.category], series_[set.series]);
    for (double v : set.samples) out += fmt::format("{} {}\n", x_of(set), v);
    out += "\n\n";
  }
  return out;
}

std::string chart::script(const std::string& data_path, const std::string& png_path) const {
  const std::size_t per_category = series_.size() + 1;
  std::string s;
  s += "set terminal pngcairo size 1100,640 font 'DejaVu Sans,10' noenhanced\n";
  s += fmt::format("set output {}\n", quoted(png_path));
  // Double-quoted, so that "\n" puts the command on a second line under the title.
  s += fmt::format("set title {}\n", double_quoted(footnote_.empty() ? title_ : title_ + "\n" + footnote_));
  s += fmt::format("set bmargin {}\n", categories_.size() > 4 ? 8 : 5);
  s += fmt::format("set ylabel {}\n", quoted(y_label_));
  s += "set grid ytics\nset key below horizontal\nset border 3\nset tics nomirror\nset tmargin 5\n";
  s += fmt::format("set xrange [0:{}]\n", categories_.size() * per_category);
  if (log_scale()) {
    s += "set logscale y\n";
  } else {
    s += "set yrange [0:*]\n";
  }
  int label = 2;
  for (const auto& [category, text] : notes_) {
    const double centre = static_cast<double>(category * per_category) + static_cast<double>(per_category) / 2.0;
    s += fmt::format("set label {} {} at first {}, graph 1.025 center\n", label++, quoted(text), centre);
  }
  std::string tics;
  for (std::size_t c = 0; c < categories_.size(); ++c) {
    if (!tics.empty()) tics += ", ";
    tics += fmt::format("{} {}", quoted(categories_[c]),
                        static_cast<double>(c * per_category) + static_cast<double>(per_category) / 2.0);
  }
  s += fmt::format("set xtics ({}){}\n", tics, categories_.size() > 4 ? " rotate by -20" : "");
  s += "set style fill solid 0.55 border -1\nset boxwidth 0.8\n";
  s += "set style boxplot outliers pointtype 7\nset style data boxplot\n";

  std::vector<std::string> plots;
  const std::string file = quoted(data_path);
  if (style_ == chart_style::bars) {
    for (std::size_t k = 0; k < series_.size(); ++k) {
      plots.push_back(fmt::format("{} index {} using 1:2 with boxes lc rgb '{}' title {}", file, k,
                                  colours[k % std::size(colours)], quoted(series_[k] + " (median)")));
    }
  }
  std::vector<bool> titled(series_.size(), false);
  for (std::size_t i = 0; i < sets_.size(); ++i) {
    const sample_set& set = sets_[i];
    const std::size_t block = series_.size() + i;
    const char* colour = colours[set.series % std::size(colours)];
    if (style_ == chart_style::distribution) {
      std::string title = "notitle";
      if (!titled[set.series]) title = "title " + quoted(series_[set.series]);
      titled[set.series] = true;
      plots.push_back(fmt::format("{} index {} using ({}):2 with boxplot lc rgb '{}' {}", file, block, x_of(set),
                                  colour, title));
    }
    plots.push_back(fmt::format("{} index {} using 1:2 with points pointtype 7 pointsize 0.6 lc rgb '#303030' {}",
                                file, block, i == 0 ? "title " + quoted(sample_name_) : std::string("notitle")));
  }
  s += "plot ";
  for (std::size_t i = 0; i < plots.size(); ++i) {
    if (i > 0) s += ", \\\n     ";
    s += plots[i];
  }
  s += "\n";
  return s;
}

void chart::render(const std::string& png_path) const {
  if (empty()) throw std::runtime_error("--plot: the benchmark produced no samples to draw");
  const std::filesystem::path tmp_base = std::filesystem::temp_directory_path();
  std::string pattern = (tmp_base / "sluice-plot.XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw std::system_error(errno, std::generic_category(), "--plot: mkdtemp in " + tmp_base.string());
  }
  const std::filesystem::path dir = pattern;
  struct remove_dir {
    std::filesystem::path p;
    ~remove_dir() {
      std::error_code ec;
      std::filesystem::remove_all(p, ec);
    }
  } cleanup{dir};
  write_file(dir / "chart.dat", data());
  write_file(dir / "chart.gp", script((dir / "chart.dat").string(), png_path));
  const int status = run_gnuplot(dir / "chart.gp", dir / "gnuplot.log");
  if (status != 0) {
    std::string log = read_file(dir / "gnuplot.log");
    while (!log.empty() && (log.back() == '\n' || log.back() == ' ')) log.pop_back();
    throw std::runtime_error(status < 0 ? "--plot: could not start gnuplot (apt-get install gnuplot-nox)"
                                        : fmt::format("--plot: gnuplot failed (exit {}): {}", status, log));
  }
  std::error_code ec;
  if (std::filesystem::file_size(png_path, ec) == 0 || ec) {
    throw std::runtime_error(fmt::format("--plot: gnuplot wrote no image at '{}'", png_path));
  }
}

void check_plot_target(const std::string& png_path) {
  const std::filesystem::path p(png_path);
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (ext != ".png") throw std::invalid_argument(fmt::format("--plot: '{}' must name a .png file", png_path));
  const std::filesystem::path dir = p.has_parent_path() ? p.parent_path() : std::filesystem::path(".");
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    throw std::invalid_argument(fmt::format("--plot: directory '{}' does not exist", dir.string()));
  }
  if (::access(dir.c_str(), W_OK) != 0) {
    throw std::invalid_argument(fmt::format("--plot: directory '{}' is not writable: {}", dir.string(), std::strerror(errno)));
  }
  if (!on_path("gnuplot")) {
    throw std::invalid_argument("--plot needs gnuplot, which is not on PATH (Debian: apt-get install gnuplot-nox)");
  }
}

}  // namespace sluice::bench
