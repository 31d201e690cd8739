// conv_step: one forward and backward pass of Conv2d(16, 32, 3, padding 1) on
// [64, 16, 28, 28], the gradient of the output given (no loss), on one thread.
// Prints the median and the fastest of --rounds timed passes, after 3 untimed
// ones, the median of the forward and of the backward pass alone, and the
// process's CPU time per pass (what a busy machine changes less). Then the
// matrix products of a pass alone, as conv2d calls them (one per image: the
// output, the weight's gradient transposed, the patches' gradient), on buffers
// of their sizes: the floor of an unfold + GEMM convolution on this BLAS.
// bench/conv_step.py times the same in PyTorch.
//
//   ./build/bench/conv_step [--rounds 20]
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <time.h>

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
  std::clock_t cpu = 0;
  using clock = std::chrono::steady_clock;
  auto since = [](clock::time_point t) { return std::chrono::duration<double, std::milli>(clock::now() - t).count(); };
  for (int i = 0; i < rounds + 3; ++i) {
    conv.zero_grad();
    tg::Tensor(x).zero_grad();
    const std::clock_t cpu_start = std::clock();
    const auto start = clock::now();
    tg::Tensor y = conv(x);
    const double forward = since(start);
    const auto middle = clock::now();
    y.backward(gy);
    const double backward = since(middle), all = since(start);
    if (i >= 3) ms.push_back(all), forward_ms.push_back(forward), backward_ms.push_back(backward);
    if (i >= 3) cpu += std::clock() - cpu_start;
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  // The products alone, the median of `rounds` passes of 64 x 3 calls, in CPU time.
  auto cpu_now = [] {
    timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return 1e3 * static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_nsec);
  };
  const int n = 64, o = 32, k = 16 * 3 * 3, l = 28 * 28;
  std::vector<float> w(o * k, 0.5f), cols(k * l, 0.25f), gwt(k * o), dcols(k * l), out(std::size_t{n} * o * l),
      g(std::size_t{n} * o * l, 0.125f);
  std::vector<double> products_ms[3];
  for (int i = 0; i < rounds + 3; ++i) {
    double parts[3] = {};
    for (int image = 0; image < n; ++image) {
      float* yn = out.data() + std::size_t(image) * o * l;
      const float* gn = g.data() + std::size_t(image) * o * l;
      double start = cpu_now();  // y_n += W cols: [32, 144] x [144, 784]
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, o, l, k, 1.0f, w.data(), k, cols.data(), l, 1.0f, yn, l);
      parts[0] += cpu_now() - start;
      start = cpu_now();  // dW^T += cols g_n^T: [144, 784] x [784, 32]
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, k, o, l, 1.0f, cols.data(), l, gn, l, 1.0f, gwt.data(), o);
      parts[1] += cpu_now() - start;
      start = cpu_now();  // dcols = W^T g_n: [144, 32] x [32, 784]
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, k, l, o, 1.0f, w.data(), k, gn, l, 0.0f, dcols.data(), l);
      parts[2] += cpu_now() - start;
    }
    if (i >= 3)
      for (int p = 0; p < 3; ++p) products_ms[p].push_back(parts[p]);
  }

  std::printf("tapegrad conv2d forward+backward: median %.1f ms, fastest %.1f ms (%d rounds); forward %.1f ms, "
              "backward %.1f ms (medians); step_ms: %.3f cpu_ms: %.3f\n",
              median(ms), *std::min_element(ms.begin(), ms.end()), rounds, median(forward_ms), median(backward_ms),
              median(ms), 1000.0 * static_cast<double>(cpu) / CLOCKS_PER_SEC / rounds);
  std::printf("its products alone (OpenBLAS sgemm, 64 x 3 calls): %.1f ms (output %.1f, weight gradient %.1f, "
              "patches' gradient %.1f; CPU time, medians)\n",
              median(products_ms[0]) + median(products_ms[1]) + median(products_ms[2]), median(products_ms[0]),
              median(products_ms[1]), median(products_ms[2]));
}
