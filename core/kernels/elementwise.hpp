// Elementwise kernels: map a function over one, two or three arrays that
// broadcast together, into a new array. The ops' forward values and their
// backward formulas are written with these:
//
//   Array y = kernels::map("tanh", x, [](float v) { return std::tanh(v); });
//   Array dx = kernels::map("tanh", g, y, [](float g, float y) { return g * (1 - y * y); });
//
// The function is inlined into the loop (core/kernels/loop.hpp), which runs
// over raw buffers: contiguous runs compile to SIMD code. Inputs broadcast as
// in NumPy and PyTorch; the shapes must be compatible (the ops check them at
// entry and name themselves; `op` here only names the allocation). The output
// is never zero-filled first: every element is written.
//
// exp, log, tanh and sigmoid, which a loop cannot vectorize as library calls,
// have kernels of their own in plain arithmetic (core/fast_math.hpp).
#pragma once

#include <cstddef>

#include "../array.hpp"
#include "loop.hpp"

namespace tg::kernels {

// y[i] = f(x[i]), y of x's shape.
template <class F>
Array map(const char* op, const Array& x, F f) {
  Array y = empty_like(op, x);
  const float* in = x.data();
  float* out = y.data();
  for_range(x.size(), elementwise_grain, [&](std::size_t lo, std::size_t hi) {
    for (std::size_t i = lo; i < hi; ++i) out[i] = f(in[i]);
  });
  return y;
}

// z = f(x, y), of the broadcast shape of x and y.
template <class F>
Array map(const char* op, const Array& x, const Array& y, F f) {
  if (x.shape() == y.shape()) {  // the common case: one flat run, no plan
    Array z = empty_like(op, x);
    const float *a = x.data(), *b = y.data();
    float* out = z.data();
    for_range(z.size(), elementwise_grain, [&](std::size_t lo, std::size_t hi) {
      for (std::size_t i = lo; i < hi; ++i) out[i] = f(a[i], b[i]);
    });
    return z;
  }
  const Shape xs = shape_of(x), ys = shape_of(y);
  const Shape zs = broadcast_shapes(op, xs, ys);
  Array z = empty_array(op, zs);
  const Loop<2> loop = plan<2>(zs, {&xs, &ys});
  const std::size_t sa = loop.stride[0].back(), sb = loop.stride[1].back();
  const float *a0 = x.data(), *b0 = y.data();
  float* out0 = z.data();
  for_each_run(loop, [&](std::size_t pos, std::size_t n, const std::array<std::size_t, 2>& at) {
    const float *a = a0 + at[0], *b = b0 + at[1];
    float* out = out0 + pos;
    if (sa == 1 && sb == 1) {
      for (std::size_t i = 0; i < n; ++i) out[i] = f(a[i], b[i]);
    } else if (sa == 1) {  // y broadcast along the row: one value
      const float bv = *b;
      for (std::size_t i = 0; i < n; ++i) out[i] = f(a[i], bv);
    } else if (sb == 1) {
      const float av = *a;
      for (std::size_t i = 0; i < n; ++i) out[i] = f(av, b[i]);
    } else {
      const float v = f(*a, *b);
      for (std::size_t i = 0; i < n; ++i) out[i] = v;
    }
  });
  return z;
}

// w = f(x, y, z), of the broadcast shape of all three.
template <class F>
Array map(const char* op, const Array& x, const Array& y, const Array& z, F f) {
  const Shape xs = shape_of(x), ys = shape_of(y), zs = shape_of(z);
  const Shape ws = broadcast_shapes(op, broadcast_shapes(op, xs, ys), zs);
  Array w = empty_array(op, ws);
  const Loop<3> loop = plan<3>(ws, {&xs, &ys, &zs});
  const std::size_t sa = loop.stride[0].back(), sb = loop.stride[1].back(), sc = loop.stride[2].back();
  const float *a0 = x.data(), *b0 = y.data(), *c0 = z.data();
  float* out0 = w.data();
  for_each_run(loop, [&](std::size_t pos, std::size_t n, const std::array<std::size_t, 3>& at) {
    const float *a = a0 + at[0], *b = b0 + at[1], *c = c0 + at[2];
    float* out = out0 + pos;
    if (sa == 1 && sb == 1 && sc == 1) {
      for (std::size_t i = 0; i < n; ++i) out[i] = f(a[i], b[i], c[i]);
    } else {  // some input broadcast along the row: step 0 for it
      for (std::size_t i = 0; i < n; ++i) out[i] = f(a[i * sa], b[i * sb], c[i * sc]);
    }
  });
  return w;
}

// x repeated to `shape`, which it must broadcast to (torch.expand, copied).
Array expand(const char* op, const Array& x, const Shape& shape);

// exp, log, tanh and sigmoid of every element, in plain arithmetic that
// vectorizes (core/fast_math.hpp: within 2 ulp of the C library; inf, NaN and
// the edges as PyTorch gives them).
Array exp(const Array& x);
Array log(const Array& x);
Array tanh(const Array& x);
Array sigmoid(const Array& x);

// PyTorch's GELU, x Phi(x) with erf (tanh_form false) or GPT-2's tanh form,
// and its backward, g gelu'(x), in the formulas of PyTorch's CPU kernel.
Array gelu(const Array& x, bool tanh_form);
Array gelu_backward(const Array& x, const Array& g, bool tanh_form);

}  // namespace tg::kernels
