// floor: what this machine can do at best, on one thread, for the two kinds of
// work a training step does: move bytes through memory, and multiply matrices.
// run.py divides each cell's bytes by the bandwidth and its GEMM FLOPs by the
// sgemm throughput; the sum is the cell's floor, the time no implementation of
// that step could beat on this machine.
//
//   floor [--sizes MB,MB,...] [--gemm M,N,K,TA,TB ...] [--seconds S]
//
// Bandwidth: a STREAM-like triad, a[i] = b[i] + s * c[i], over three arrays that
// together hold the working set (MB); bytes moved = 3 arrays (two read, one
// written; write-allocate traffic is not counted, as STREAM does not). The best
// of the repeats is kept, as STREAM does: it is a ceiling, not a typical value.
// A working set that fits in a cache gets that cache's bandwidth.
//
// Times are the process's CPU time, as the step cells are timed (harness.hpp):
// on a shared machine wall time also counts the waits for a core, which would
// make the machine look slower than it is and the floor too high.
//
// sgemm: cblas_sgemm, row-major C[M, N] = op(A) op(B), TA/TB 0 or 1, best of
// the repeats; 1024,1024,1024,0,0 (the machine's peak) is always measured.
//
// Prints one line of JSON.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <time.h>

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// CPU time of the process, in seconds.
double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

std::vector<double> numbers(const std::string& list) {
  std::vector<double> out;
  std::stringstream s(list);
  for (std::string x; std::getline(s, x, ',');) out.push_back(std::stod(x));
  return out;
}

// Bytes per second of the triad over a working set of `bytes`, best of the runs
// made within about `budget` seconds (at least 3).
double triad_bandwidth(std::size_t bytes, double budget) {
  const std::size_t n = std::max<std::size_t>(bytes / (3 * sizeof(float)), 1024);
  std::vector<float> a(n, 0.0f), b(n, 1.0f), c(n, 2.0f);
  const float s = 0.5f;
  double best = 1e300;
  const Clock::time_point start = Clock::now();
  for (int run = 0; run < 3 || (seconds_since(start) < budget && run < 1000); ++run) {
    // Small arrays: repeat inside one timing so the clock's resolution does not matter.
    const std::size_t inner = std::max<std::size_t>(1, (1u << 22) / n);
    const double t = cpu_seconds();
    for (std::size_t r = 0; r < inner; ++r) {
      for (std::size_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
      // Keeps the compiler from dropping the repeats: the next pass reads a.
      std::swap(a, b);
    }
    best = std::min(best, (cpu_seconds() - t) / static_cast<double>(inner));
  }
  return 3.0 * static_cast<double>(n) * sizeof(float) / best;
}

struct Gemm {
  int m, n, k;
  bool ta, tb;
};

// FLOP per second of one sgemm shape (2 M N K per call), best of the runs.
double sgemm_throughput(const Gemm& g, double budget) {
  std::vector<float> A(static_cast<std::size_t>(g.m) * g.k, 0.01f), B(static_cast<std::size_t>(g.k) * g.n, 0.02f),
      C(static_cast<std::size_t>(g.m) * g.n, 0.0f);
  const int lda = g.ta ? g.m : g.k, ldb = g.tb ? g.k : g.n;
  double best = 1e300;
  const Clock::time_point start = Clock::now();
  for (int run = 0; run < 3 || (seconds_since(start) < budget && run < 1000); ++run) {
    const double t = cpu_seconds();
    cblas_sgemm(CblasRowMajor, g.ta ? CblasTrans : CblasNoTrans, g.tb ? CblasTrans : CblasNoTrans, g.m, g.n, g.k,
                1.0f, A.data(), lda, B.data(), ldb, 0.0f, C.data(), g.n);
    best = std::min(best, cpu_seconds() - t);
  }
  return 2.0 * g.m * static_cast<double>(g.n) * g.k / best;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::vector<double> sizes_mb = {1, 4, 16, 64, 256};
    std::vector<Gemm> gemms = {{1024, 1024, 1024, false, false}};
    double budget = 0.5;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      const std::string v = argv[++i];
      if (a == "--sizes") {
        sizes_mb = numbers(v);
      } else if (a == "--gemm") {
        const std::vector<double> x = numbers(v);
        if (x.size() != 5 || x[0] < 1 || x[1] < 1 || x[2] < 1)
          throw std::invalid_argument("--gemm M,N,K,TA,TB (M, N, K >= 1); got " + v);
        gemms.push_back({static_cast<int>(x[0]), static_cast<int>(x[1]), static_cast<int>(x[2]), x[3] != 0,
                         x[4] != 0});
      } else if (a == "--seconds") {
        budget = std::stod(v);
      } else {
        throw std::invalid_argument("unknown option " + a);
      }
    }
    std::ostringstream out;
    out << "{\"bandwidth\": [";
    for (std::size_t i = 0; i < sizes_mb.size(); ++i) {
      const std::size_t bytes = static_cast<std::size_t>(sizes_mb[i] * 1048576.0);
      out << (i ? ", " : "") << "{\"mb\": " << sizes_mb[i]
          << ", \"bytes_per_s\": " << triad_bandwidth(bytes, budget) << "}";
    }
    out << "], \"sgemm\": [";
    for (std::size_t i = 0; i < gemms.size(); ++i) {
      const Gemm& g = gemms[i];
      out << (i ? ", " : "") << "{\"m\": " << g.m << ", \"n\": " << g.n << ", \"k\": " << g.k
          << ", \"ta\": " << g.ta << ", \"tb\": " << g.tb << ", \"flop_per_s\": " << sgemm_throughput(g, budget)
          << "}";
    }
    out << "]}";
    std::printf("%s\n", out.str().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "floor: %s\n", e.what());
    return 2;
  }
}
