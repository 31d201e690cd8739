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
class Progress {
 public:
  Progress(std::string label, std::size_t total);
  void update(std::size_t done, double loss);
  ~Progress();

 private:
  std::string label_;
  std::size_t total_;
  bool enabled_;
};

void write_metrics_csv(const std::string& path, const std::vector<StepRecord>& steps,
                       const std::vector<EpochRecord>& epochs);

// Writes loss per step and ms per step of every mode. A path ending in .png is
// drawn by gnuplot when it is installed; otherwise (or for .svg) the program
// writes an SVG itself. Returns the path actually written.
std::string write_plot(const std::string& path, const std::vector<StepRecord>& steps);

}  // namespace bow
