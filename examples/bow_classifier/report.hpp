// Output helpers for the bag-of-words classifier: a progress bar, the metrics
// CSV, and a picture of both runs' loss curves and step times.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace bow {

// One training step of one mode, as recorded for the CSV and the plot.
struct StepRecord {
  std::string mode;  // "embedding" or "linear"
  int epoch = 0;
  std::size_t step = 0;  // counted from 0 over the whole run
  double loss = 0;
  double ms = 0;
  std::size_t grad_bytes = 0;
};

// Test metrics of one mode after one epoch.
struct EpochRecord {
  std::string mode;
  int epoch = 0;
  double train_loss = 0;  // mean over the epoch's steps
  double test_loss = 0;
  double accuracy = 0, precision = 0, recall = 0;  // precision/recall of the positive class
  double ms_per_step = 0;                          // median
  double grad_bytes_per_step = 0;
};

// A one-line progress bar on stderr, drawn only when stderr is a terminal.
// clear() wipes it, so that the next line printed starts on a clean line.
class Progress {
 public:
  Progress(std::string label, std::size_t total);
  void update(std::size_t done, double loss);
  void clear();
  ~Progress() { clear(); }

 private:
  std::string label_;
  std::size_t total_;
  bool enabled_;
  std::size_t drawn_ = 0;  // characters on the line now
};

// Throws std::invalid_argument naming `flag` unless `path` can be opened for
// writing (a file that did not exist is removed again): run before training,
// so that a typo in an output path does not cost the whole run.
void check_writable(const std::string& flag, const std::string& path);

void write_metrics_csv(const std::string& path, const std::vector<StepRecord>& steps,
                       const std::vector<EpochRecord>& epochs);

// Throws std::invalid_argument unless `path` ends in .png or .svg.
void check_plot_path(const std::string& path);

// Writes loss per step and ms per step of every mode. A path ending in .png is
// drawn by gnuplot when it is installed; without gnuplot, and for .svg, the
// program draws an SVG itself (x.png becomes x.svg). Returns the path written.
std::string write_plot(const std::string& path, const std::vector<StepRecord>& steps);

}  // namespace bow
