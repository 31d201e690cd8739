// The bag-of-words example's tables and plot.
#include "report.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

namespace bow {

Progress::Progress(std::string label, std::size_t total)
    : label_(std::move(label)), total_(total), enabled_(isatty(STDERR_FILENO) == 1) {}

void Progress::update(std::size_t done, double loss) {
  if (!enabled_ || total_ == 0) return;
  const int width = 30, filled = static_cast<int>(width * done / total_);
  const int n = std::fprintf(stderr, "\r%-10s [%s%s] %zu/%zu loss %.4f", label_.c_str(),
                             std::string(filled, '#').c_str(), std::string(width - filled, ' ').c_str(), done,
                             total_, loss);
  drawn_ = n > 1 ? static_cast<std::size_t>(n - 1) : 0;  // less the \r
  std::fflush(stderr);
}

void Progress::clear() {
  if (drawn_ == 0) return;
  std::fprintf(stderr, "\r%*s\r", static_cast<int>(drawn_), "");
  std::fflush(stderr);
  drawn_ = 0;
}

void check_writable(const std::string& flag, const std::string& path) {
  std::error_code ec;
  const bool existed = std::filesystem::exists(path, ec);
  errno = 0;
  std::FILE* f = std::fopen(path.c_str(), "a");  // "a": an existing file is left as it is
  if (!f) throw std::invalid_argument(flag + ": cannot write " + path + " (" + std::strerror(errno) + ")");
  std::fclose(f);
  if (!existed) std::remove(path.c_str());
}

static std::ofstream open_or_throw(const std::string& path) {
  std::ofstream out(path);
  if (!out) throw std::runtime_error("cannot write " + path);
  return out;
}

void write_metrics_csv(const std::string& path, const std::vector<StepRecord>& steps,
                       const std::vector<EpochRecord>& epochs) {
  std::ofstream out = open_or_throw(path);
  out << "kind,mode,epoch,step,loss,ms,grad_bytes,test_loss,accuracy,precision,recall\n";
  for (const StepRecord& s : steps)
    out << "step," << s.mode << ',' << s.epoch << ',' << s.step << ',' << s.loss << ',' << s.ms << ','
        << s.grad_bytes << ",,,,\n";
  for (const EpochRecord& e : epochs)
    out << "epoch," << e.mode << ',' << e.epoch << ",," << e.train_loss << ',' << e.ms_per_step << ','
        << std::llround(e.grad_bytes_per_step) << ',' << e.test_loss << ',' << e.accuracy << ','
        << e.precision << ',' << e.recall << '\n';
  if (!out) throw std::runtime_error("error writing " + path);
}

static bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

static std::map<std::string, std::vector<const StepRecord*>> by_mode(const std::vector<StepRecord>& steps) {
  std::map<std::string, std::vector<const StepRecord*>> m;
  for (const StepRecord& s : steps) m[s.mode].push_back(&s);
  return m;
}

void check_plot_path(const std::string& path) {
  if (!ends_with(path, ".png") && !ends_with(path, ".svg"))
    throw std::invalid_argument("--plot: " + path + ": the plot is written as .png (gnuplot) or .svg");
}

static bool have_gnuplot() {
  return std::system("command -v gnuplot >/dev/null 2>&1") == 0;
}

// A string in gnuplot's single quotes, where a quote is written twice.
static std::string gnuplot_quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("''") : std::string(1, c);
  return q + "'";
}

// The data goes to gnuplot inside the script itself ($name << EOD blocks),
// through a pipe: no temporary file is written.
static void gnuplot_png(const std::string& path, const std::vector<StepRecord>& steps) {
  std::ostringstream g;
  std::string loss_plot, ms_plot;
  int i = 0;
  for (auto& [mode, rows] : by_mode(steps)) {
    const std::string block = "$mode" + std::to_string(i);
    g << block << " << EOD\n";
    for (const StepRecord* s : rows) g << s->step << ' ' << s->loss << ' ' << s->ms << '\n';
    g << "EOD\n";
    const std::string sep = i++ ? ", " : "";
    loss_plot += sep + block + " using 1:2 with lines title " + gnuplot_quoted(mode);
    ms_plot += sep + block + " using 1:3 with lines title " + gnuplot_quoted(mode);
  }
  g << "set terminal pngcairo size 1100,420\nset output " << gnuplot_quoted(path) << '\n'
    << "set multiplot layout 1,2\nset key top right\nset grid\nset xlabel 'step'\n"
    << "set title 'training loss'\nset ylabel 'loss'\nplot " << loss_plot << '\n'
    << "set title 'time per step (log scale)'\nset ylabel 'ms'\nset logscale y\nplot " << ms_plot << '\n'
    << "unset multiplot\nunset output\n";

  std::FILE* pipe = popen("gnuplot 2>/dev/null", "w");
  if (!pipe) throw std::runtime_error("plot: cannot start gnuplot to draw " + path);
  // If gnuplot stops reading early, the write must fail rather than kill us.
  void (*old_handler)(int) = std::signal(SIGPIPE, SIG_IGN);
  const std::string script = g.str();
  const bool written = std::fwrite(script.data(), 1, script.size(), pipe) == script.size();
  const int status = pclose(pipe);
  std::signal(SIGPIPE, old_handler);
  if (!written || status != 0) throw std::runtime_error("plot: gnuplot could not draw " + path);
}

// ------------------------------------------------------------------ SVG

// Tick positions for [lo, hi]: multiples of 1, 2 or 5 x 10^k, about `target` of them.
static std::vector<double> linear_ticks(double lo, double hi, int target = 5) {
  const double raw = (hi - lo) / target, p = std::pow(10.0, std::floor(std::log10(raw)));
  const double step = raw / p < 1.5 ? p : raw / p < 3.5 ? 2 * p : raw / p < 7.5 ? 5 * p : 10 * p;
  std::vector<double> t;
  for (double v = std::ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step)
    t.push_back(std::abs(v) < step * 1e-9 ? 0.0 : v);
  return t;
}

// Ticks for a log axis over [lo, hi] (values, not logs): 1, 2 and 5 x 10^k,
// or only the powers of ten when the range spans many decades.
static std::vector<double> log_ticks(double lo, double hi) {
  const int k0 = static_cast<int>(std::floor(std::log10(lo))),
            k1 = static_cast<int>(std::ceil(std::log10(hi)));
  const std::vector<double> mantissas = k1 - k0 > 3 ? std::vector<double>{1} : std::vector<double>{1, 2, 5};
  std::vector<double> t;
  for (int k = k0; k <= k1; ++k)
    for (double m : mantissas) {
      const double v = m * std::pow(10.0, k);
      if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) t.push_back(v);
    }
  return t;
}

// A tick label with no more digits than the ticks need: 0.25, 2, 1e+03 never 1.31463e-05.
static std::string tick_label(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

// Two panels, loss per step and ms per step (log scale), one polyline per mode,
// with ticks, a light grid and tick labels outside the frame.
static void svg_plot(const std::string& path, const std::vector<StepRecord>& steps) {
  const auto modes = by_mode(steps);
  const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c"};
  const double W = 550, H = 420, left = 70, right = 20, top = 40, bottom = 50;
  std::ostringstream svg;
  svg << "<svg xmlns='http://www.w3.org/2000/svg' width='" << 2 * W << "' height='" << H
      << "' font-family='sans-serif' font-size='12'>\n<rect width='100%' height='100%' fill='white'/>\n";
  const char* titles[] = {"training loss", "time per step (log scale)"};
  const char* ylabels[] = {"loss", "ms"};
  double xmax = 1;
  for (const StepRecord& s : steps) xmax = std::max(xmax, static_cast<double>(s.step));
  for (int panel = 0; panel < 2; ++panel) {
    const bool log_y = panel == 1;
    auto raw = [&](const StepRecord* s) { return log_y ? std::max(s->ms, 1e-3) : s->loss; };
    double ymin = 1e300, ymax = -1e300;
    for (auto& [mode, rows] : modes)
      for (const StepRecord* s : rows) ymin = std::min(ymin, raw(s)), ymax = std::max(ymax, raw(s));
    if (!log_y) ymin = std::min(ymin, 0.0);  // a loss axis starts at 0
    if (ymax <= ymin) ymax = log_y ? ymin * 10 : ymin + 1;
    std::vector<double> yticks = log_y ? log_ticks(ymin, ymax) : linear_ticks(ymin, ymax);
    if (!log_y) ymax = std::max(ymax, yticks.back());
    if (log_y && yticks.size() < 2) {  // less than a decade: widen to the powers of ten around it
      ymin = std::pow(10.0, std::floor(std::log10(ymin)));
      ymax = std::pow(10.0, std::ceil(std::log10(ymax)));
      yticks = log_ticks(ymin, ymax);
    }
    auto y_of = [&](double v) {
      return log_y ? (std::log10(v) - std::log10(ymin)) / (std::log10(ymax) - std::log10(ymin))
                   : (v - ymin) / (ymax - ymin);
    };
    const double x0 = panel * W + left, y0 = H - bottom, w = W - left - right, h = H - top - bottom;
    auto px = [&](double step) { return x0 + w * step / xmax; };
    auto py = [&](double v) { return y0 - h * y_of(v); };

    svg << "<text x='" << x0 + w / 2 << "' y='" << top - 15 << "' text-anchor='middle' font-size='14'>"
        << titles[panel] << "</text>\n";
    for (double t : yticks) {
      svg << "<line x1='" << x0 << "' x2='" << x0 + w << "' y1='" << py(t) << "' y2='" << py(t)
          << "' stroke='#e6e6e6'/>\n<line x1='" << x0 - 5 << "' x2='" << x0 << "' y1='" << py(t) << "' y2='"
          << py(t) << "' stroke='#333'/>\n<text x='" << x0 - 8 << "' y='" << py(t) + 4
          << "' text-anchor='end'>" << tick_label(t) << "</text>\n";
    }
    for (double t : linear_ticks(0, xmax)) {
      svg << "<line x1='" << px(t) << "' x2='" << px(t) << "' y1='" << top << "' y2='" << y0
          << "' stroke='#e6e6e6'/>\n<line x1='" << px(t) << "' x2='" << px(t) << "' y1='" << y0 << "' y2='"
          << y0 + 5 << "' stroke='#333'/>\n<text x='" << px(t) << "' y='" << y0 + 18
          << "' text-anchor='middle'>" << tick_label(t) << "</text>\n";
    }
    svg << "<rect x='" << x0 << "' y='" << top << "' width='" << w << "' height='" << h
        << "' fill='none' stroke='#333'/>\n<text x='" << x0 + w / 2 << "' y='" << H - 12
        << "' text-anchor='middle'>step</text>\n<text transform='translate(" << x0 - 52 << ',' << top + h / 2
        << ") rotate(-90)' text-anchor='middle'>" << ylabels[panel] << "</text>\n";
    int c = 0;
    for (auto& [mode, rows] : modes) {
      const char* color = colors[c % 3];
      svg << "<polyline fill='none' stroke-width='1.2' stroke='" << color << "' points='";
      for (const StepRecord* s : rows) svg << px(static_cast<double>(s->step)) << ',' << py(raw(s)) << ' ';
      const double ly = top + 18 + 18 * c;  // legend, top right inside the frame
      svg << "'/>\n<line x1='" << x0 + w - 110 << "' x2='" << x0 + w - 85 << "' y1='" << ly - 4 << "' y2='"
          << ly - 4 << "' stroke-width='2' stroke='" << color << "'/>\n<text x='" << x0 + w - 80 << "' y='"
          << ly << "'>" << mode << "</text>\n";
      ++c;
    }
  }
  svg << "</svg>\n";
  std::ofstream out = open_or_throw(path);
  out << svg.str();
  if (!out) throw std::runtime_error("error writing " + path);
}

std::string write_plot(const std::string& path, const std::vector<StepRecord>& steps) {
  check_plot_path(path);
  if (ends_with(path, ".png")) {
    if (have_gnuplot()) {
      gnuplot_png(path, steps);
      return path;
    }
    const std::string svg = path.substr(0, path.size() - 4) + ".svg";
    svg_plot(svg, steps);
    return svg + " (gnuplot not found: an SVG in place of " + path + ")";
  }
  svg_plot(path, steps);
  return path;
}

}  // namespace bow
