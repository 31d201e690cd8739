// conv_step: one forward and backward pass of Conv2d(16, 32, 3, padding 1) on
// [64, 16, 28, 28], the gradient of the output given (no loss), on one thread.
// Prints the median and the fastest of --rounds timed passes, after 3 untimed
// ones. bench/conv_step.py times the same in PyTorch.
//
//   ./build/bench/conv_step [--rounds 20]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <tapegrad/tapegrad.hpp>

int main(int argc, char** argv) {
  int rounds = 20;
  if (argc == 3 && std::strcmp(argv[1], "--rounds") == 0) rounds = std::max(1, std::stoi(argv[2]));
  tg::set_num_threads(1);
  tg::Generator gen(0);
  tg::nn::Conv2d conv(16, 32, 3, {.padding = 1}, gen);
  const tg::Tensor x = tg::randn({64, 16, 28, 28}, gen, true);
  const tg::Array gy = tg::randn({64, 32, 28, 28}, gen).value();
  std::vector<double> ms;
  for (int i = 0; i < rounds + 3; ++i) {
    conv.zero_grad();
    tg::Tensor(x).zero_grad();
    const auto start = std::chrono::steady_clock::now();
    conv(x).backward(gy);
    const auto end = std::chrono::steady_clock::now();
    if (i >= 3) ms.push_back(std::chrono::duration<double, std::milli>(end - start).count());
  }
  std::sort(ms.begin(), ms.end());
  std::printf("tapegrad conv2d forward+backward: median %.1f ms, fastest %.1f ms (%d rounds)\n", ms[ms.size() / 2],
              ms.front(), rounds);
}
