// What the C++ step runners (step_tapegrad, step_libtorch) share with each other
// and, line for line, with step_pytorch.py: the command line, the initial
// weights, the timing loop and the one line of JSON they print.
//
// One run = one model path (embedding | linear) with one optimizer (sgd | adam)
// on one ids file:
//   1. build the model and set the same initial weights in every system
//      (a formula of the element's position, no random generator involved);
//   2. warm up: `warmup` steps, whose losses are the cross-system check (with
//      the same weights, batches and SGD, every system must print the same losses);
//   3. measure: `repeats` timed runs of K steps each, K chosen from the warm-up
//      speed so one run lasts about target_ms; ms/step is the median over runs,
//      both wall time and the process's CPU time (steadier on a busy machine).
// A step is: batch build (ids -> the model's input), forward, zero_grad +
// backward, optimizer step. Step s trains on batch s % batches.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <time.h>

#include "ids_file.hpp"
#include "options.hpp"

namespace bench {

struct Args {
  // zero_grad: "idiomatic" (the library's optimizer.zero_grad()) or "none" (gradients
  // reset to undefined, PyTorch's set_to_none; what tapegrad's zero_grad does anyway).
  std::string ids, model = "embedding", optim = "sgd", zero_grad = "idiomatic";
  int64_t dim = 64, batch = 32, warmup = 8, repeats = 5, max_steps = 200;
  int64_t threads = 1;  // the library's own threads (tg::set_num_threads, at::set_num_threads)
  double target_ms = 300, lr = -1;  // lr: 0.1 for sgd, 0.01 for adam (bow_classifier's)
};

inline Args parse_args(int argc, char** argv) {
  Args a;
  const std::vector<std::string> rest = read_options(
      argc, argv,
      {{"--ids", &a.ids}, {"--model", &a.model}, {"--optim", &a.optim}, {"--dim", &a.dim}, {"--batch", &a.batch},
       {"--warmup", &a.warmup}, {"--repeats", &a.repeats}, {"--max-steps", &a.max_steps},
       {"--target-ms", &a.target_ms}, {"--lr", &a.lr}, {"--zero-grad", &a.zero_grad},
       {"--threads", &a.threads}});
  if (!rest.empty()) throw std::invalid_argument("unexpected argument '" + rest[0] + "'");
  if (a.ids.empty()) throw std::invalid_argument("--ids FILE is required");
  if (a.model != "embedding" && a.model != "linear") throw std::invalid_argument("--model embedding|linear");
  if (a.optim != "sgd" && a.optim != "adam") throw std::invalid_argument("--optim sgd|adam");
  if (a.zero_grad != "idiomatic" && a.zero_grad != "none") throw std::invalid_argument("--zero-grad idiomatic|none");
  if (a.warmup < 1 || a.repeats < 1 || a.max_steps < 1 || a.threads < 1) throw std::invalid_argument("counts must be >= 1");
  if (a.lr < 0) a.lr = a.optim == "sgd" ? 0.1 : 0.01;
  return a;
}

// ------------------------------------------------------------ initial weights
//
// Element i of a tensor with salt s gets (2u - 1) * bound, u = ((i + s) * 2654435761
// mod 2^32) / 2^32 (Knuth's multiplicative hash), computed in double and rounded
// to float: bit-identical in C++ and numpy. Bounds are PyTorch's defaults for the
// layer shapes: 1/sqrt(V) for the first layer (as bow_classifier initialises its
// EmbeddingBag), 1/sqrt(D) for the head.
inline float init_value(uint64_t i, uint64_t salt, double bound) {
  const uint64_t h = ((i + salt) * 2654435761ull) & 0xffffffffull;
  return static_cast<float>((2.0 * (static_cast<double>(h) / 4294967296.0) - 1.0) * bound);
}
inline constexpr uint64_t salt_table = 0, salt_head_weight = 1000000007, salt_head_bias = 2000000011;

// The [V, D] table: element (v, d) is element v * D + d.
inline void fill_table(float* w, int64_t vocab, int64_t dim) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(vocab));
  for (int64_t i = 0; i < vocab * dim; ++i) w[i] = init_value(static_cast<uint64_t>(i), salt_table, bound);
}
// The same table stored as a Linear's [D, V] weight: w[d, v] = table[v, d].
inline void fill_projection(float* w, int64_t vocab, int64_t dim) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(vocab));
  for (int64_t d = 0; d < dim; ++d)
    for (int64_t v = 0; v < vocab; ++v)
      w[d * vocab + v] = init_value(static_cast<uint64_t>(v * dim + d), salt_table, bound);
}
// head weight [C, D] and bias [C].
inline void fill_head(float* w, float* b, int64_t classes, int64_t dim) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(dim));
  for (int64_t i = 0; i < classes * dim; ++i)
    w[i] = init_value(static_cast<uint64_t>(i), salt_head_weight, bound);
  for (int64_t i = 0; i < classes; ++i) b[i] = init_value(static_cast<uint64_t>(i), salt_head_bias, bound);
}

// ----------------------------------------------------------------- timing

using Clock = std::chrono::steady_clock;
inline double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}
// CPU time of the whole process (every thread) in ms. On a shared machine it
// leaves out the time spent waiting for a core, which wall time counts.
inline double cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) * 1e-6;
}

// Where one step's time went; each runner adds to it as it goes.
struct Phases {
  double batch = 0, forward = 0, backward = 0, step = 0;
};
// Marks the end of one phase and the start of the next.
struct PhaseClock {
  Clock::time_point last = Clock::now();
  void lap(double& into) {
    const Clock::time_point now = Clock::now();
    into += std::chrono::duration<double, std::milli>(now - last).count();
    last = now;
  }
};

// A field of /proc/self/status in kB ("VmRSS", "VmHWM"); 0 if unavailable.
inline long status_kb(const std::string& field) {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind(field + ":", 0) == 0) return std::stol(line.substr(field.size() + 1));
  return 0;
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Measured {
  std::vector<double> losses;          // warm-up steps
  std::vector<double> ms_repeats;      // wall ms/step of each timed run
  std::vector<double> cpu_ms_repeats;  // CPU ms/step of each timed run
  int64_t steps_per_repeat = 0;
  Phases phases;  // wall ms per step, averaged over the timed steps
};

// step(s, phases) runs training step s and returns its loss (only read in warm-up).
inline Measured measure(const Args& a, const std::function<double(int64_t, Phases&)>& step) {
  Measured m;
  Phases ignored;
  int64_t s = 0;
  std::vector<double> warm_ms;
  for (; s < a.warmup; ++s) {
    const Clock::time_point t = Clock::now();
    m.losses.push_back(step(s, ignored));
    warm_ms.push_back(ms_since(t));
  }
  // The later warm-up steps (the first ones allocate optimizer state) set K.
  std::vector<double> late(warm_ms.begin() + static_cast<std::ptrdiff_t>(warm_ms.size() / 2), warm_ms.end());
  std::sort(late.begin(), late.end());
  const double per_step = std::max(late[late.size() / 2], 1e-3);
  m.steps_per_repeat = std::clamp<int64_t>(std::llround(a.target_ms / per_step), 1, a.max_steps);
  for (int64_t r = 0; r < a.repeats; ++r) {
    const Clock::time_point t = Clock::now();
    const double cpu = cpu_ms();
    for (int64_t k = 0; k < m.steps_per_repeat; ++k, ++s) step(s, m.phases);
    m.cpu_ms_repeats.push_back((cpu_ms() - cpu) / static_cast<double>(m.steps_per_repeat));
    m.ms_repeats.push_back(ms_since(t) / static_cast<double>(m.steps_per_repeat));
  }
  const double n = static_cast<double>(a.repeats * m.steps_per_repeat);
  m.phases = {m.phases.batch / n, m.phases.forward / n, m.phases.backward / n, m.phases.step / n};
  return m;
}

inline std::string json_list(const std::vector<double>& v) {
  std::ostringstream s;
  s.precision(9);
  s << '[';
  for (std::size_t i = 0; i < v.size(); ++i) s << (i ? ", " : "") << v[i];
  s << ']';
  return s.str();
}

// The one line the orchestrator (run.py) reads.
inline void print_result(const std::string& system, const std::string& version, const Args& a,
                         const Corpus& c, const Measured& m, std::size_t param_bytes, std::size_t state_bytes,
                         long rss_start_kb, long rss_model_kb) {
  std::ostringstream s;
  s.precision(9);
  s << "RESULT {\"system\": \"" << system << "\", \"version\": \"" << version << "\", \"model\": \""
    << a.model << "\", \"optim\": \"" << a.optim << "\", \"vocab\": " << c.vocab << ", \"dim\": " << a.dim
    << ", \"batch\": " << a.batch << ", \"warmup\": " << a.warmup << ", \"repeats\": " << a.repeats
    << ", \"steps_per_repeat\": " << m.steps_per_repeat << ", \"ms_per_step\": " << median(m.ms_repeats)
    << ", \"cpu_ms_per_step\": " << median(m.cpu_ms_repeats)
    << ", \"ms_repeats\": " << json_list(m.ms_repeats)
    << ", \"cpu_ms_repeats\": " << json_list(m.cpu_ms_repeats)
    << ", \"phases_ms\": {\"batch\": " << m.phases.batch << ", \"forward\": " << m.phases.forward
    << ", \"backward\": " << m.phases.backward << ", \"step\": " << m.phases.step
    << "}, \"losses\": " << json_list(m.losses) << ", \"param_bytes\": " << param_bytes
    << ", \"state_bytes\": " << state_bytes << ", \"rss_start_kb\": " << rss_start_kb
    << ", \"rss_model_kb\": " << rss_model_kb << ", \"rss_peak_kb\": " << status_kb("VmHWM") << "}";
  std::printf("%s\n", s.str().c_str());
  std::fflush(stdout);
}

// A runner's main(): run(options from argv), or a one-line error and exit code 2.
inline int main(const char* program, int argc, char** argv, int (*run)(const Args&)) {
  try {
    return run(parse_args(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 2;
  }
}

}  // namespace bench
