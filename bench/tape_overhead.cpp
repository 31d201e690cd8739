// The engine's own cost per op, where it is largest: a chain of tiny ops
// (4-element tensors: mul_scalar, add, tanh) recorded and backwarded, so the
// bookkeeping (record, version and shape checks, the walk, teardown) is most
// of the time. Prints CPU ns per op, the best of REPEATS chains.
//
//   tape_overhead [OPS] [REPEATS]     default 3000 ops, 100 repeats
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include <tapegrad/tapegrad.hpp>

int main(int argc, char** argv) {
  const int ops = argc > 1 ? std::atoi(argv[1]) : 3000;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 100;
  if (ops < 3 || repeats < 1) {
    std::fprintf(stderr, "tape_overhead: OPS must be >= 3 and REPEATS >= 1\n");
    return 2;
  }
  tg::Tensor w({0.1f, 0.2f, 0.3f, 0.4f}, true);
  double best = 1e300;
  for (int r = 0; r < repeats; ++r) {
    const std::clock_t start = std::clock();
    {
      tg::Tensor x = w;
      for (int i = 0; i < ops / 3; ++i) x = tg::tanh(x * 0.9f + w);
      tg::sum(x).backward();
    }  // the graph is freed here, inside the timing
    const double seconds = double(std::clock() - start) / CLOCKS_PER_SEC;
    if (seconds < best) best = seconds;
    w.zero_grad();
  }
  std::printf("tape_overhead: %.0f ns per op (best of %d chains of %d ops)\n", best / (ops / 3 * 3) * 1e9, repeats,
              ops / 3 * 3);
  return 0;
}
