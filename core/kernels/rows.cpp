// Row kernels: softmax and log_softmax along any dim, layer_norm over the last values.
#include "rows.hpp"

#include <cmath>

#include "dispatch.hpp"
#include "fast_math.hpp"
#include "parallel.hpp"
#include "loop.hpp"
#include "reduce.hpp"

namespace tg::kernels {

namespace {

// x seen as [outer, n, inner] around axis ax: element (o, j, i) sits at
// o * n * inner + j * inner + i.
struct AxisSplit {
  std::size_t outer = 1, n = 1, inner = 1;
};
AxisSplit split_at(const Array& x, std::size_t ax) {
  AxisSplit r;
  for (std::size_t i = 0; i < ax; ++i) r.outer *= x.shape()[i];
  r.n = x.shape()[ax];
  for (std::size_t i = ax + 1; i < x.dimension(); ++i) r.inner *= x.shape()[i];
  return r;
}

// One row at a time: softmax(x) = exp(x - max) / sum(exp(x - max)) and
// log_softmax(x) = x - max - log(sum(exp(x - max))), which never overflow. The
// sum is in double.
TG_ALSO_FOR_AVX2 void softmax_row(const float* x, float* y, std::size_t n, bool log) {
  const float m = lane_max(x, n);  // a NaN is passed over here, but makes the sum NaN
  for (std::size_t i = 0; i < n; ++i) y[i] = detail::exp_fast(x[i] - m);
  const double sum = lane_sum(y, n);
  if (log) {
    const float log_sum = std::log(static_cast<float>(sum));
    for (std::size_t i = 0; i < n; ++i) y[i] = (x[i] - m) - log_sum;
  } else {
    const float total = static_cast<float>(sum);
    for (std::size_t i = 0; i < n; ++i) y[i] = y[i] / total;
  }
}

// The gradient of one row from the output y: softmax dx = y (g - sum(g y)),
// log_softmax dx = g - exp(y) sum(g).
TG_ALSO_FOR_AVX2 void softmax_row_grad(const float* y, const float* g, float* dx, std::size_t n, bool log) {
  if (log) {
    const float s = static_cast<float>(lane_sum(g, n));
    for (std::size_t i = 0; i < n; ++i) dx[i] = g[i] - detail::exp_fast(y[i]) * s;
  } else {
    const float s = static_cast<float>(lane_dot(g, y, n));
    for (std::size_t i = 0; i < n; ++i) dx[i] = y[i] * (g[i] - s);
  }
}

// Calls row(x_row, z_row, out_row) for every row along axis ax of arrays of
// the shape of `like` (z may be null), the rows split across threads when there are many.
// Rows along the last axis are used in place; others are copied into buffers
// first, and the result copied back.
template <class Row>
void for_each_row(const Array& like, std::size_t ax, const float* x, const float* z, float* out, Row row) {
  const AxisSplit s = split_at(like, ax);
  const std::size_t rows = s.outer * s.inner;
  parallel_for(rows, grain_for(rows, rows * s.n, elementwise_grain), [&](std::size_t lo, std::size_t hi) {
    if (s.inner == 1) {
      for (std::size_t r = lo; r < hi; ++r) row(x + r * s.n, z ? z + r * s.n : nullptr, out + r * s.n);
      return;
    }
    std::vector<float> xr(s.n), zr(s.n), outr(s.n);
    for (std::size_t r = lo; r < hi; ++r) {
      const std::size_t first = r / s.inner * s.n * s.inner + r % s.inner;  // element j at first + j * inner
      for (std::size_t j = 0; j < s.n; ++j) xr[j] = x[first + j * s.inner];
      if (z)
        for (std::size_t j = 0; j < s.n; ++j) zr[j] = z[first + j * s.inner];
      row(xr.data(), z ? zr.data() : nullptr, outr.data());
      for (std::size_t j = 0; j < s.n; ++j) out[first + j * s.inner] = outr[j];
    }
  });
}

// One row of layer_norm: its mean and 1 / std from the biased variance, both
// in double (so a row holding 3e38 normalises), then y = (x - mean) / std,
// times weight plus bias where given.
TG_ALSO_FOR_AVX2 void layer_norm_row(const float* x, const float* w, const float* b, float* y, std::size_t n,
                                     float eps, float& mean, float& rstd) {
  const double mu = lane_sum(x, n) / static_cast<double>(n);
  const double var = lane_sum(n,
                              [x, mu](std::size_t i) {
                                const double dev = x[i] - mu;
                                return dev * dev;
                              }) /
                     static_cast<double>(n);
  mean = static_cast<float>(mu);
  rstd = static_cast<float>(1.0 / std::sqrt(var + eps));
  for (std::size_t i = 0; i < n; ++i) {
    float v = (x[i] - mean) * rstd;
    if (w) v *= w[i];
    if (b) v += b[i];
    y[i] = v;
  }
}

// The gradient of one row. With xhat = (x - mean) * rstd and dxhat = g * weight:
//   dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
// xhat and dxhat are rows of scratch (xhat is kept for weight's gradient).
TG_ALSO_FOR_AVX2 void layer_norm_row_grad(const float* x, const float* w, const float* g, float mean,
                                          float rstd, float* xhat, float* dxhat, float* dx, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    xhat[i] = (x[i] - mean) * rstd;
    dxhat[i] = w ? g[i] * w[i] : g[i];
  }
  const float mean_d = static_cast<float>(lane_sum(dxhat, n) / static_cast<double>(n));
  const float mean_dx = static_cast<float>(lane_dot(dxhat, xhat, n) / static_cast<double>(n));
  for (std::size_t i = 0; i < n; ++i) dx[i] = rstd * (dxhat[i] - mean_d - xhat[i] * mean_dx);
}

// Columns [lo, hi) of weight's and bias's gradients: g * xhat and g summed
// over the rows (core/kernels/reduce.hpp's column sums, two in one pass).
TG_ALSO_FOR_AVX2 void layer_norm_columns(const float* x, const float* g, const float* mean, const float* rstd,
                                         std::size_t rows, std::size_t n, std::size_t lo, std::size_t hi,
                                         float* dw, float* db) {
  column_sums<2>(rows, lo, hi, {dw, db}, [=](std::size_t r, std::size_t i) {
    const float xhat = (x[r * n + i] - mean[r]) * rstd[r];
    return std::array<double, 2>{static_cast<double>(g[r * n + i] * xhat), static_cast<double>(g[r * n + i])};
  });
}

}  // namespace

Array softmax(const char* op, const Array& x, std::size_t ax, bool log) {
  const std::size_t n = x.shape()[ax];
  Array y = empty_like(op, x);
  for_each_row(x, ax, x.data(), nullptr, y.data(),
               [n, log](const float* xr, const float*, float* out) { softmax_row(xr, out, n, log); });
  return y;
}

Array softmax_backward(const char* op, const Array& y, const Array& g, std::size_t ax, bool log) {
  const std::size_t n = y.shape()[ax];
  Array dx = empty_like(op, y);
  for_each_row(y, ax, y.data(), g.data(), dx.data(), [n, log](const float* yr, const float* gr, float* out) {
    softmax_row_grad(yr, gr, out, n, log);
  });
  return dx;
}

Array layer_norm(const Array& x, std::size_t n, const float* w, const float* b, float eps,
                 std::vector<float>& mean, std::vector<float>& rstd) {
  const std::size_t rows = x.size() / n;
  mean.resize(rows);
  rstd.resize(rows);
  Array y = empty_like("layer_norm", x);
  parallel_for(rows, grain_for(rows, rows * n, elementwise_grain), [&](std::size_t lo, std::size_t hi) {
    for (std::size_t r = lo; r < hi; ++r)
      layer_norm_row(x.data() + r * n, w, b, y.data() + r * n, n, eps, mean[r], rstd[r]);
  });
  return y;
}

Array layer_norm_backward(const Array& x, const Array& g, std::size_t n, const float* w,
                          const std::vector<float>& mean, const std::vector<float>& rstd) {
  const std::size_t rows = x.size() / n;
  Array dx = empty_like("layer_norm", x);
  parallel_for(rows, grain_for(rows, rows * n, elementwise_grain), [&](std::size_t lo, std::size_t hi) {
    std::vector<float> xhat(n), dxhat(n);  // scratch rows
    for (std::size_t r = lo; r < hi; ++r)
      layer_norm_row_grad(x.data() + r * n, w, g.data() + r * n, mean[r], rstd[r], xhat.data(), dxhat.data(),
                          dx.data() + r * n, n);
  });
  return dx;
}

void layer_norm_param_grads(const Array& x, const Array& g, std::size_t n, const std::vector<float>& mean,
                            const std::vector<float>& rstd, float* dw, float* db) {
  const std::size_t rows = x.size() / n, pieces = (n + 255) / 256;
  parallel_for(pieces, grain_for(pieces, rows * n, elementwise_grain), [&](std::size_t lo, std::size_t hi) {
    layer_norm_columns(x.data(), g.data(), mean.data(), rstd.data(), rows, n, lo * 256, std::min(n, hi * 256),
                       dw, db);
  });
}

}  // namespace tg::kernels
