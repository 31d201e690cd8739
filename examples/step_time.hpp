// Times a training step for the --bench-steps flag of the examples
// (scripts/steptime reads what it prints).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <vector>

// Runs step() 10 times to warm up, then `steps` times, and prints the median
// wall time of one step and the mean CPU time of one step, in ms:
// "step_ms: 1.234 cpu_ms: 1.200".
template <class Step>
void print_step_time(int steps, Step step) {
  for (int i = 0; i < 10; ++i) step();  // warm-up
  std::vector<double> ms;
  const std::clock_t cpu_start = std::clock();
  for (int i = 0; i < steps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    step();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  const double cpu_ms =
      1000.0 * static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC / std::max(1, steps);
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  std::printf("step_ms: %.3f cpu_ms: %.3f\n", ms.empty() ? 0.0 : ms[ms.size() / 2], cpu_ms);
}
