// expand, and exp/log/tanh/sigmoid/gelu over contiguous values, compiled for SSE2, AVX2 and AVX-512.
#include "elementwise.hpp"

#include <algorithm>

#include "dispatch.hpp"
#include "fast_math.hpp"

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

// The functions below run over contiguous values, one chunk of the array per
// call, compiled for AVX2 as well (the same bits: no fused
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

// gelu, one element at a time, in the formulas of PyTorch's CPU kernel. erf and
// tanh come from core/kernels/fast_math.hpp: std::erf is a library call per element,
// and a GPT's MLP runs gelu over 4 * C values per position.
constexpr float sqrt1_2 = 0.70710678118654752f;         // 1 / sqrt(2)
constexpr float inv_sqrt_2pi = 0.39894228040143268f;    // 1 / sqrt(2 pi)
constexpr float sqrt_2_over_pi = 0.79788456080286536f;  // sqrt(2 / pi)
constexpr float kappa = 0.044715f;

TG_ALSO_FOR_AVX2 void gelu_values(const float* x, float* y, std::size_t n, bool tanh_form) {
  if (tanh_form) {  // 0.5 x (1 + tanh(sqrt(2 / pi) (x + kappa x^3)))
    for (std::size_t i = 0; i < n; ++i)
      y[i] = 0.5f * x[i] * (1.0f + detail::tanh_fast(sqrt_2_over_pi * (x[i] + kappa * x[i] * x[i] * x[i])));
  } else {  // x Phi(x) = x 0.5 (1 + erf(x / sqrt(2)))
    for (std::size_t i = 0; i < n; ++i) y[i] = x[i] * 0.5f * (1.0f + detail::erf_fast(x[i] * sqrt1_2));
  }
}

// dx = g * gelu'(x).
TG_ALSO_FOR_AVX2 void gelu_slopes(const float* x, const float* g, float* dx, std::size_t n, bool tanh_form) {
  if (tanh_form) {                         // with u = sqrt(2 / pi) (x + kappa x^3) and t = tanh(u):
    for (std::size_t i = 0; i < n; ++i) {  // 0.5 (1 + t) + 0.5 x (1 - t^2) du/dx
      const float t = detail::tanh_fast(sqrt_2_over_pi * (x[i] + kappa * x[i] * x[i] * x[i]));
      const float du = sqrt_2_over_pi * (1.0f + 3.0f * kappa * x[i] * x[i]);
      dx[i] = g[i] * (0.5f * (1.0f + t) + 0.5f * x[i] * (1.0f - t * t) * du);
    }
  } else {  // Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi) the normal density
    for (std::size_t i = 0; i < n; ++i) {
      const float z = x[i] * sqrt1_2;
      const float e = detail::exp_fast(-z * z);  // exp(-x^2 / 2), for erf(z) and for phi(x)
      const float cdf = 0.5f * (1.0f + detail::erf_with_exp(z, e));
      const float pdf = inv_sqrt_2pi * e;
      dx[i] = g[i] * (cdf + x[i] * pdf);
    }
  }
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

Array gelu(const Array& x, bool tanh_form) {
  Array y = empty_like("gelu", x);
  for_range(x.size(), elementwise_grain, [&](std::size_t lo, std::size_t hi) {
    gelu_values(x.data() + lo, y.data() + lo, hi - lo, tanh_form);
  });
  return y;
}

Array gelu_backward(const Array& x, const Array& g, bool tanh_form) {
  Array dx = empty_like("gelu", x);
  for_range(x.size(), elementwise_grain, [&](std::size_t lo, std::size_t hi) {
    gelu_slopes(x.data() + lo, g.data() + lo, dx.data() + lo, hi - lo, tanh_form);
  });
  return dx;
}

}  // namespace tg::kernels
