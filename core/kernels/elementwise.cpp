#include "elementwise.hpp"

#include <algorithm>

#include "../dispatch.hpp"
#include "../fast_math.hpp"

namespace tg::kernels {

Array expand(const char* op, const Array& x, const Shape& shape) {
  if (std::equal(x.shape().begin(), x.shape().end(), shape.begin(), shape.end())) return x;
  const Shape xs = shape_of(x);
  Array y = empty_array(op, shape);
  const Loop<1> loop = plan<1>(shape, {&xs});
  const std::size_t step = loop.stride[0].back();
  for_each_run(loop, [&](std::size_t pos, std::size_t n, const std::array<std::size_t, 1>& at) {
    const float* in = x.data() + at[0];
    float* out = y.data() + pos;
    if (step == 1)
      std::copy_n(in, n, out);
    else
      std::fill_n(out, n, *in);
  });
  return y;
}

// The four functions below run over contiguous values, one chunk of the
// array per call, compiled for AVX2 as well (the same bits: no fused
// multiply-add, the same operations in the same order).
namespace {

using Run = void (*)(const float*, float*, std::size_t);

TG_ALSO_FOR_AVX2 void exp_run(const float* x, float* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = detail::exp_fast(x[i]);
}
TG_ALSO_FOR_AVX2 void log_run(const float* x, float* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = detail::log_fast(x[i]);
}
TG_ALSO_FOR_AVX2 void tanh_run(const float* x, float* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = detail::tanh_fast(x[i]);
}
// 1 / (1 + e^-x): e^-x overflows to inf for x < -89, giving 0, as PyTorch.
TG_ALSO_FOR_AVX2 void sigmoid_run(const float* x, float* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = 1.0f / (1.0f + detail::exp_fast(-x[i]));
}

Array apply(const char* op, const Array& x, Run run) {
  Array y = empty_like(op, x);
  for_range(x.size(), elementwise_grain,
               [&](std::size_t lo, std::size_t hi) { run(x.data() + lo, y.data() + lo, hi - lo); });
  return y;
}

}  // namespace

Array exp(const Array& x) {
  return apply("exp", x, exp_run);
}
Array log(const Array& x) {
  return apply("log", x, log_run);
}
Array tanh(const Array& x) {
  return apply("tanh", x, tanh_run);
}
Array sigmoid(const Array& x) {
  return apply("sigmoid", x, sigmoid_run);
}

}  // namespace tg::kernels
