// conv_step: one forward and backward pass of Conv2d(16, 32, 3, padding 1) on
// [64, 16, 28, 28], the gradient of the output given (no loss), on one thread.
// Prints the median and the fastest of --rounds timed passes, after 3 untimed
// ones, and the median of the forward and of the backward pass alone.
// bench/conv_step.py times the same in PyTorch.
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
  std::vector<double> ms, forward_ms, backward_ms;
  using clock = std::chrono::steady_clock;
  auto since = [](clock::time_point t) { return std::chrono::duration<double, std::milli>(clock::now() - t).count(); };
  for (int i = 0; i < rounds + 3; ++i) {
    conv.zero_grad();
    tg::Tensor(x).zero_grad();
    const auto start = clock::now();
    tg::Tensor y = conv(x);
    const double forward = since(start);
    const auto middle = clock::now();
    y.backward(gy);
    const double backward = since(middle), all = since(start);
    if (i >= 3) ms.push_back(all), forward_ms.push_back(forward), backward_ms.push_back(backward);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf("tapegrad conv2d forward+backward: median %.1f ms, fastest %.1f ms (%d rounds); forward %.1f ms, "
              "backward %.1f ms (medians)\n",
              median(ms), *std::min_element(ms.begin(), ms.end()), rounds, median(forward_ms), median(backward_ms));
}
