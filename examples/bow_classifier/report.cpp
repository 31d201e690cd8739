#include "report.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
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
  std::fprintf(stderr, "\r%-10s [%s%s] %zu/%zu loss %.4f", label_.c_str(), std::string(filled, '#').c_str(),
               std::string(width - filled, ' ').c_str(), done, total_, loss);
  std::fflush(stderr);
}

Progress::~Progress() {
  if (enabled_) std::fprintf(stderr, "\r%80s\r", "");  // clear the line
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
        << e.grad_bytes_per_step << ',' << e.test_loss << ',' << e.accuracy << ',' << e.precision << ','
        << e.recall << '\n';
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

static bool gnuplot_png(const std::string& path, const std::vector<StepRecord>& steps) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) return false;
  const std::string data = path + ".dat", script = path + ".gp";
  const auto modes = by_mode(steps);
  std::string loss_plot, ms_plot;  // one gnuplot data block (index i) per mode
  {
    std::ofstream d = open_or_throw(data);
    int i = 0;
    for (auto& [mode, rows] : modes) {
      for (const StepRecord* s : rows) d << s->step << ' ' << s->loss << ' ' << s->ms << '\n';
      d << "\n\n";
      const std::string sep = i ? ", " : "";
      loss_plot +=
          sep + "'" + data + "' index " + std::to_string(i) + " using 1:2 with lines title '" + mode + "'";
      ms_plot +=
          sep + "'" + data + "' index " + std::to_string(i) + " using 1:3 with lines title '" + mode + "'";
      ++i;
    }
    std::ofstream g = open_or_throw(script);
    g << "set terminal pngcairo size 1100,420\nset output '" << path << "'\n"
      << "set multiplot layout 1,2\nset key top right\nset xlabel 'step'\n"
      << "set title 'training loss'\nset ylabel 'loss'\nplot " << loss_plot << '\n'
      << "set title 'time per step'\nset ylabel 'ms'\nset logscale y\nplot " << ms_plot << '\n'
      << "unset multiplot\n";
  }
  const bool ok = std::system(("gnuplot '" + script + "' 2>/dev/null").c_str()) == 0;
  std::remove(data.c_str());
  std::remove(script.c_str());
  return ok;
}

// A plain SVG: two panels, one polyline per mode.
static void svg_plot(const std::string& path, const std::vector<StepRecord>& steps) {
  const auto modes = by_mode(steps);
  const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c"};
  const double W = 520, H = 360, pad = 50;
  std::ostringstream svg;
  svg << "<svg xmlns='http://www.w3.org/2000/svg' width='" << 2 * W << "' height='" << H
      << "' font-family='sans-serif' font-size='12'>\n<rect width='100%' height='100%' fill='white'/>\n";
  const char* titles[] = {"training loss per step", "ms per step (log scale)"};
  for (int panel = 0; panel < 2; ++panel) {
    auto value = [&](const StepRecord* s) {
      return panel == 0 ? s->loss : std::log10(std::max(s->ms, 1e-3));
    };
    double xmax = 1, ymin = 1e300, ymax = -1e300;
    for (auto& [mode, rows] : modes)
      for (const StepRecord* s : rows) {
        xmax = std::max(xmax, static_cast<double>(s->step));
        ymin = std::min(ymin, value(s));
        ymax = std::max(ymax, value(s));
      }
    if (ymax <= ymin) ymax = ymin + 1;
    const double x0 = panel * W + pad, y0 = H - pad, w = W - 1.5 * pad, h = H - 2 * pad;
    svg << "<text x='" << x0 << "' y='" << pad - 15 << "'>" << titles[panel] << "</text>\n"
        << "<rect x='" << x0 << "' y='" << pad << "' width='" << w << "' height='" << h
        << "' fill='none' stroke='#999'/>\n"
        << "<text x='" << x0 - 45 << "' y='" << pad + 10 << "'>" << (panel == 0 ? ymax : std::pow(10, ymax))
        << "</text>\n"
        << "<text x='" << x0 - 45 << "' y='" << y0 << "'>" << (panel == 0 ? ymin : std::pow(10, ymin))
        << "</text>\n<text x='" << x0 + w - 40 << "' y='" << y0 + 18 << "'>step " << xmax << "</text>\n";
    int c = 0;
    for (auto& [mode, rows] : modes) {
      svg << "<polyline fill='none' stroke-width='1.2' stroke='" << colors[c % 3] << "' points='";
      for (const StepRecord* s : rows)
        svg << x0 + w * s->step / xmax << ',' << y0 - h * (value(s) - ymin) / (ymax - ymin) << ' ';
      svg << "'/>\n<text x='" << x0 + w - 90 << "' y='" << pad + 18 + 16 * c << "' fill='" << colors[c % 3]
          << "'>" << mode << "</text>\n";
      ++c;
    }
  }
  svg << "</svg>\n";
  std::ofstream out = open_or_throw(path);
  out << svg.str();
}

std::string write_plot(const std::string& path, const std::vector<StepRecord>& steps) {
  if (ends_with(path, ".png")) {
    if (gnuplot_png(path, steps)) return path;
    const std::string svg = path.substr(0, path.size() - 4) + ".svg";
    svg_plot(svg, steps);
    return svg;
  }
  svg_plot(path, steps);
  return path;
}

}  // namespace bow
