#include "core/ops.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include <xtensor/xbroadcast.hpp>
#include <xtensor/xmanipulation.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xoperation.hpp>
#include <xtensor/xsort.hpp>

#include "core/tape.hpp"

namespace tg {

// ------------------------------------------------------------------ helpers
//
// Reducers (xt::sum, xt::amax) are lazy and assigned to an Array at once:
// xtensor 0.24's evaluation_strategy::immediate crashes on xarray inputs.

Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b) {
  Shape out(std::max(a.size(), b.size()));
  for (std::size_t i = 0; i < out.size(); ++i) {
    // Align from the right: a missing leading dim counts as 1.
    std::size_t da = i < out.size() - a.size() ? 1 : a[i - (out.size() - a.size())];
    std::size_t db = i < out.size() - b.size() ? 1 : b[i - (out.size() - b.size())];
    if (da != db && da != 1 && db != 1)
      throw std::invalid_argument(std::string(op) + ": shapes " + shape_str(a) + " and " + shape_str(b) +
                                  " cannot be broadcast together");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// Sum over `axes`, which stay as size-1 dims when keepdim. Zero-size inputs get
// zeros without calling xtensor, whose reducers step through a null pointer then.
static Array sum_over(const Array& x, std::vector<std::size_t> axes, bool keepdim) {
  if (axes.empty()) return x;
  Shape out(x.shape().begin(), x.shape().end());
  std::sort(axes.begin(), axes.end());                      // xtensor wants them sorted
  for (auto it = axes.rbegin(); it != axes.rend(); ++it) {  // from the back: positions stay valid
    if (keepdim)
      out[*it] = 1;
    else
      out.erase(out.begin() + static_cast<std::ptrdiff_t>(*it));
  }
  if (x.size() == 0) return xt::zeros<float>(out);
  Array r = xt::sum(x, axes);
  r.reshape(out);
  return r;
}

static std::vector<std::size_t> all_axes(std::size_t rank) {
  std::vector<std::size_t> axes(rank);
  std::iota(axes.begin(), axes.end(), 0);
  return axes;
}

Array sum_to_shape(const Array& grad, const Shape& shape) {
  const std::size_t lead = grad.dimension() - shape.size();
  std::vector<std::size_t> axes;
  for (std::size_t i = 0; i < grad.dimension(); ++i)
    if (i < lead || (shape[i - lead] == 1 && grad.shape()[i] != 1)) axes.push_back(i);
  if (axes.empty()) return grad;
  Array r = sum_over(grad, axes, false);
  r.reshape(shape);  // puts back the size-1 dims the sum removed
  return r;
}

std::size_t normalize_dim(const char* op, int64_t dim, std::size_t rank) {
  const int64_t r = static_cast<int64_t>(rank);
  if (dim < -r || dim >= r)
    throw std::invalid_argument(std::string(op) + ": dim " + std::to_string(dim) +
                                " out of range for a tensor with " + std::to_string(rank) + " dims");
  return static_cast<std::size_t>(dim < 0 ? dim + r : dim);
}

void check_indices(const char* op, const Indices& index, std::size_t size) {
  for (int64_t i : index)
    if (i < 0 || static_cast<std::size_t>(i) >= size)
      throw std::out_of_range(std::string(op) + ": index " + std::to_string(i) + " out of range for size " +
                              std::to_string(size));
}

// Views a tensor as [outer, n, inner] around axis `ax`: element (o, j, i) sits at
// o * n * inner + j * inner + i. Axis ops below loop over this.
struct AxisSplit {
  std::size_t outer = 1, n = 1, inner = 1;
};
static AxisSplit split_at(const Shape& s, std::size_t ax) {
  AxisSplit r;
  for (std::size_t i = 0; i < ax; ++i) r.outer *= s[i];
  r.n = s[ax];
  for (std::size_t i = ax + 1; i < s.size(); ++i) r.inner *= s[i];
  return r;
}
static Shape reduced_shape(Shape s, std::size_t ax, bool keepdim) {
  if (keepdim)
    s[ax] = 1;
  else
    s.erase(s.begin() + static_cast<std::ptrdiff_t>(ax));
  return s;
}

// Product of all dims but the last: the rows of a [.., k] tensor seen as 2-d.
static std::size_t leading_rows(const Shape& s) {
  std::size_t r = 1;
  for (std::size_t i = 0; i + 1 < s.size(); ++i) r *= s[i];
  return r;
}

// C[m, n] = op(A)[m, k] * op(B)[k, n] (+ C if accumulate), row-major, through BLAS.
static void gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, const float* A,
                 const float* B, float* C, bool accumulate = false) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // an empty sum: BLAS would reject the zero leading dimension
    if (!accumulate) std::fill(C, C + m * n, 0.0f);
    return;
  }
  const auto i = [](std::size_t v) { return static_cast<blasint>(v); };
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, i(m),
              i(n), i(k), 1.0f, A, i(trans_a ? m : k), B, i(trans_b ? k : n), accumulate ? 1.0f : 0.0f, C,
              i(n));
}

// ------------------------------------------------------- elementwise binary

Tensor add(const Tensor& a, const Tensor& b) {
  broadcast_shapes("add", a.shape(), b.shape());
  return record("add", a.value() + b.value(), {a, b}, Reads::nothing(),
                [](const Array& g, const Array&, std::vector<Tensor>& in) {
                  for (Tensor& t : in)
                    if (t.requires_grad()) t.accumulate_grad(sum_to_shape(g, t.shape()));
                });
}

Tensor sub(const Tensor& a, const Tensor& b) {
  broadcast_shapes("sub", a.shape(), b.shape());
  return record("sub", a.value() - b.value(), {a, b}, Reads::nothing(),
                [](const Array& g, const Array&, std::vector<Tensor>& in) {
                  if (in[0].requires_grad()) in[0].accumulate_grad(sum_to_shape(g, in[0].shape()));
                  if (in[1].requires_grad()) in[1].accumulate_grad(sum_to_shape(-g, in[1].shape()));
                });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  broadcast_shapes("mul", a.shape(), b.shape());
  return record("mul", a.value() * b.value(), {a, b}, Reads::inputs({0, 1}),
                [](const Array& g, const Array&, std::vector<Tensor>& in) {
                  const Array &x = in[0].value(), &y = in[1].value();
                  if (in[0].requires_grad()) in[0].accumulate_grad(sum_to_shape(g * y, in[0].shape()));
                  if (in[1].requires_grad()) in[1].accumulate_grad(sum_to_shape(g * x, in[1].shape()));
                });
}

Tensor div(const Tensor& a, const Tensor& b) {
  broadcast_shapes("div", a.shape(), b.shape());
  return record("div", a.value() / b.value(), {a, b}, Reads::inputs({0, 1}),
                [](const Array& g, const Array&, std::vector<Tensor>& in) {
                  const Array &x = in[0].value(), &y = in[1].value();
                  if (in[0].requires_grad()) in[0].accumulate_grad(sum_to_shape(g / y, in[0].shape()));
                  // d(x/y)/dy = -x / y^2
                  if (in[1].requires_grad())
                    in[1].accumulate_grad(sum_to_shape(-g * x / (y * y), in[1].shape()));
                });
}

Tensor neg(const Tensor& a) {
  return record(
      "neg", -a.value(), {a}, Reads::nothing(),
      [](const Array& g, const Array&, std::vector<Tensor>& in) { in[0].accumulate_grad(Array(-g)); });
}

Tensor add(const Tensor& a, float s) {
  return record("add_scalar", a.value() + s, {a}, Reads::nothing(),
                [](const Array& g, const Array&, std::vector<Tensor>& in) { in[0].accumulate_grad(g); });
}

Tensor mul(const Tensor& a, float s) {
  return record(
      "mul_scalar", a.value() * s, {a}, Reads::nothing(),
      [s](const Array& g, const Array&, std::vector<Tensor>& in) { in[0].accumulate_grad(Array(g * s)); });
}

Tensor pow(const Tensor& a, float p) {
  return record("pow", xt::pow(a.value(), p), {a}, Reads::inputs({0}),
                [p](const Array& g, const Array&, std::vector<Tensor>& in) {
                  if (p == 0.0f)  // x^0 is constant: 0 also at x = 0, where p x^(p-1) is 0 * inf (as PyTorch)
                    in[0].accumulate_grad(Array(xt::zeros<float>(in[0].shape())));
                  else
                    in[0].accumulate_grad(Array(g * p * xt::pow(in[0].value(), p - 1.0f)));
                });
}

Tensor operator+(const Tensor& a, const Tensor& b) {
  return add(a, b);
}
Tensor operator-(const Tensor& a, const Tensor& b) {
  return sub(a, b);
}
Tensor operator*(const Tensor& a, const Tensor& b) {
  return mul(a, b);
}
Tensor operator/(const Tensor& a, const Tensor& b) {
  return div(a, b);
}
Tensor operator-(const Tensor& a) {
  return neg(a);
}
Tensor operator+(const Tensor& a, float s) {
  return add(a, s);
}
Tensor operator+(float s, const Tensor& a) {
  return add(a, s);
}
Tensor operator-(const Tensor& a, float s) {
  return add(a, -s);
}
Tensor operator-(float s, const Tensor& a) {
  return add(neg(a), s);
}
Tensor operator*(const Tensor& a, float s) {
  return mul(a, s);
}
Tensor operator*(float s, const Tensor& a) {
  return mul(a, s);
}
Tensor operator/(const Tensor& a, float s) {
  return mul(a, 1.0f / s);
}
Tensor operator/(float s, const Tensor& a) {
  return mul(pow(a, -1.0f), s);
}

// ------------------------------------------------------ elementwise unary

Tensor exp(const Tensor& a) {
  return record("exp", xt::exp(a.value()), {a}, Reads::output(),
                [](const Array& g, const Array& y, std::vector<Tensor>& in) {
                  in[0].accumulate_grad(Array(g * y));  // d exp(x) = exp(x)
                });
}

Tensor log(const Tensor& a) {
  return record("log", xt::log(a.value()), {a}, Reads::inputs({0}),
                [](const Array& g, const Array&, std::vector<Tensor>& in) {
                  in[0].accumulate_grad(Array(g / in[0].value()));
                });
}

Tensor tanh(const Tensor& a) {
  return record("tanh", xt::tanh(a.value()), {a}, Reads::output(),
                [](const Array& g, const Array& y, std::vector<Tensor>& in) {
                  in[0].accumulate_grad(Array(g * (1.0f - y * y)));
                });
}

Tensor sigmoid(const Tensor& a) {
  return record("sigmoid", 1.0f / (1.0f + xt::exp(-a.value())), {a}, Reads::output(),
                [](const Array& g, const Array& y, std::vector<Tensor>& in) {
                  in[0].accumulate_grad(Array(g * y * (1.0f - y)));
                });
}

Tensor relu(const Tensor& a) {
  return record("relu", xt::maximum(a.value(), 0.0f), {a}, Reads::inputs({0}),
                [](const Array& g, const Array&, std::vector<Tensor>& in) {
                  in[0].accumulate_grad(Array(xt::where(in[0].value() > 0.0f, g, 0.0f)));
                });
}

// ------------------------------------------------------------------- matmul

Tensor matmul(const Tensor& a, const Tensor& b) {
  const Shape as = a.shape(), bs = b.shape();
  if ((as.size() != 2 && as.size() != 3) || bs.size() != 2)
    throw std::invalid_argument("matmul: supports [n, k] x [k, m] and [B, n, k] x [k, m]; got " +
                                shape_str(as) + " and " + shape_str(bs));
  const std::size_t k = as.back(), m = bs[1];
  if (bs[0] != k)
    throw std::invalid_argument("matmul: shapes " + shape_str(as) + " and " + shape_str(bs) +
                                ": inner dimensions differ (" + std::to_string(k) + " vs " +
                                std::to_string(bs[0]) + ")");
  const std::size_t rows = leading_rows(as);  // B * n rows for 3-d
  Shape out_shape = as;
  out_shape.back() = m;
  Array out = xt::empty<float>(out_shape);
  gemm(false, false, rows, m, k, a.value().data(), b.value().data(), out.data());  // [rows, m]

  return record("matmul", std::move(out), {a, b}, Reads::inputs({0, 1}),
                [rows, k, m](const Array& g, const Array&, std::vector<Tensor>& in) {
                  if (in[0].requires_grad()) {  // dA = g B^T: [rows, m] x [m, k]
                    Array ga = xt::empty<float>(in[0].shape());
                    gemm(false, true, rows, k, m, g.data(), in[1].value().data(), ga.data());
                    in[0].accumulate_grad(std::move(ga));
                  }
                  if (in[1].requires_grad()) {  // dB = A^T g: [k, rows] x [rows, m]
                    // Shape{..}: from a braced list xt::empty makes an xtensor, which Array would copy.
                    Array gb = xt::empty<float>(Shape{k, m});
                    gemm(true, false, k, m, rows, in[0].value().data(), g.data(), gb.data());
                    in[1].accumulate_grad(std::move(gb));
                  }
                });
}

Tensor linear(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias) {
  const Shape xs = x.shape(), ws = weight.shape();
  if (ws.size() != 2 || xs.empty() || xs.back() != ws[1])
    throw std::invalid_argument("linear: input " + shape_str(xs) + " does not fit weight " + shape_str(ws) +
                                " (expected input [.., " +
                                (ws.size() == 2 ? std::to_string(ws[1]) : std::string("in")) + "])");
  const std::size_t in = ws[1], out_f = ws[0], rows = leading_rows(xs);
  if (bias && bias->shape() != Shape{out_f})
    throw std::invalid_argument("linear: bias " + shape_str(bias->shape()) + " for weight " + shape_str(ws) +
                                " (expected [" + std::to_string(out_f) + "])");
  Shape out_shape = xs;
  out_shape.back() = out_f;
  Array y = xt::empty<float>(out_shape);
  if (bias) {  // start from the bias in every row, then let BLAS add x W^T on top
    for (std::size_t r = 0; r < rows; ++r) std::copy_n(bias->value().data(), out_f, y.data() + r * out_f);
  }
  // [rows, in] x [out, in]^T -> [rows, out]
  gemm(false, true, rows, out_f, in, x.value().data(), weight.value().data(), y.data(), bias.has_value());

  std::vector<Tensor> inputs{x, weight};
  if (bias) inputs.push_back(*bias);
  return record("linear", std::move(y), std::move(inputs), Reads::inputs({0, 1}),
                [rows, in, out_f](const Array& g, const Array&, std::vector<Tensor>& in_t) {
                  if (in_t[0].requires_grad()) {  // dx = g W: [rows, out] x [out, in]
                    Array gx = xt::empty<float>(in_t[0].shape());
                    gemm(false, false, rows, in, out_f, g.data(), in_t[1].value().data(), gx.data());
                    in_t[0].accumulate_grad(std::move(gx));
                  }
                  if (in_t[1].requires_grad()) {  // dW = g^T x: [out, rows] x [rows, in]
                    // Shape{..}: from a braced list xt::empty makes an xtensor, which Array would copy.
                    Array gw = xt::empty<float>(Shape{out_f, in});
                    // A weight's gradient is a fresh buffer every step (zero_grad empties the slot); a
                    // large one comes straight from the kernel, which faults it in page by page on the
                    // first write. 2 MB pages fault 512 times less often.
                    advise_huge_pages(gw.data(), gw.size());
                    gemm(true, false, out_f, in, rows, g.data(), in_t[0].value().data(), gw.data());
                    in_t[1].accumulate_grad(std::move(gw));
                  }
                  if (in_t.size() == 3 && in_t[2].requires_grad()) {  // db = column sums of g
                    Array gb = xt::zeros<float>({out_f});
                    for (std::size_t r = 0; r < rows; ++r)
                      for (std::size_t o = 0; o < out_f; ++o) gb.data()[o] += g.data()[r * out_f + o];
                    in_t[2].accumulate_grad(std::move(gb));
                  }
                });
}

// --------------------------------------------------------------- reductions

Tensor sum(const Tensor& a) {
  Array out = sum_over(a.value(), all_axes(a.dim()), false);
  return record("sum", std::move(out), {a}, Reads::nothing(),
                [](const Array& g, const Array&, std::vector<Tensor>& in) {
                  in[0].accumulate_grad(Array(xt::broadcast(g, in[0].shape())));
                });
}

Tensor mean(const Tensor& a) {
  if (a.numel() == 0)
    throw std::invalid_argument("mean: tensor of shape " + shape_str(a.shape()) + " is empty");
  return mul(sum(a), 1.0f / static_cast<float>(a.numel()));
}

// Spreads a reduced gradient back over the reduced axis: shape keep -> full.
static Array expand_reduced(const Array& g, const Shape& full, std::size_t ax) {
  Array gk = g;
  gk.reshape(reduced_shape(full, ax, true));
  return xt::broadcast(gk, full);
}

Tensor sum(const Tensor& a, int64_t dim, bool keepdim) {
  const std::size_t ax = normalize_dim("sum", dim, a.dim());
  Array out = sum_over(a.value(), {ax}, keepdim);
  return record("sum", std::move(out), {a}, Reads::nothing(),
                [ax](const Array& g, const Array&, std::vector<Tensor>& in) {
                  in[0].accumulate_grad(expand_reduced(g, in[0].shape(), ax));
                });
}

Tensor mean(const Tensor& a, int64_t dim, bool keepdim) {
  const std::size_t ax = normalize_dim("mean", dim, a.dim());
  if (a.shape()[ax] == 0)
    throw std::invalid_argument("mean: dim " + std::to_string(dim) + " of shape " + shape_str(a.shape()) +
                                " is empty");
  return mul(sum(a, dim, keepdim), 1.0f / static_cast<float>(a.shape()[ax]));
}

Tensor max(const Tensor& a, int64_t dim, bool keepdim) {
  const std::size_t ax = normalize_dim("max", dim, a.dim());
  const Shape in_shape = a.shape();
  const AxisSplit s = split_at(in_shape, ax);
  if (s.n == 0)
    throw std::invalid_argument("max: dim " + std::to_string(dim) + " of shape " + shape_str(in_shape) +
                                " is empty");
  Array out = xt::empty<float>(reduced_shape(in_shape, ax, keepdim));
  std::vector<std::size_t> arg(s.outer * s.inner);  // where each max came from
  const float* x = a.value().data();
  for (std::size_t o = 0; o < s.outer; ++o)
    for (std::size_t i = 0; i < s.inner; ++i) {
      const float* col = x + o * s.n * s.inner + i;
      std::size_t best = 0;
      for (std::size_t j = 1; j < s.n; ++j)  // strict >: the first maximum wins; NaN propagates
        if (col[j * s.inner] > col[best * s.inner] || std::isnan(col[j * s.inner])) {
          best = j;
          if (std::isnan(col[j * s.inner])) break;
        }
      arg[o * s.inner + i] = best;
      out.data()[o * s.inner + i] = col[best * s.inner];
    }
  return record("max", std::move(out), {a}, Reads::nothing(),
                [s, arg = std::move(arg)](const Array& g, const Array&, std::vector<Tensor>& in) {
                  Array gi = xt::zeros<float>(in[0].shape());
                  for (std::size_t o = 0; o < s.outer; ++o)
                    for (std::size_t i = 0; i < s.inner; ++i)
                      gi.data()[o * s.n * s.inner + arg[o * s.inner + i] * s.inner + i] +=
                          g.data()[o * s.inner + i];
                  in[0].accumulate_grad(std::move(gi));
                });
}

// ----------------------------------------------------------- softmax family

// x - max(x) - log(sum(exp(x - max(x)))) along ax: never overflows.
static Array log_softmax_values(const Array& x, std::size_t ax) {
  if (x.size() == 0) return x;
  Array m = xt::amax(x, {ax}, xt::keep_dims);
  Array shifted = x - m;
  Array lse = xt::log(xt::sum(xt::exp(shifted), {ax}, xt::keep_dims));
  return shifted - lse;
}

Tensor log_softmax(const Tensor& a, int64_t dim) {
  const std::size_t ax = normalize_dim("log_softmax", dim, a.dim());
  return record("log_softmax", log_softmax_values(a.value(), ax), {a}, Reads::output(),
                [ax](const Array& g, const Array& y, std::vector<Tensor>& in) {
                  // dx = g - softmax * sum(g), with softmax = exp(y)
                  Array gs = sum_over(g, {ax}, true);
                  in[0].accumulate_grad(Array(g - xt::exp(y) * gs));
                });
}

Tensor softmax(const Tensor& a, int64_t dim) {
  const std::size_t ax = normalize_dim("softmax", dim, a.dim());
  return record("softmax", xt::exp(log_softmax_values(a.value(), ax)), {a}, Reads::output(),
                [ax](const Array& g, const Array& y, std::vector<Tensor>& in) {
                  // dx = y * (g - sum(g * y))
                  Array gy = sum_over(g * y, {ax}, true);
                  in[0].accumulate_grad(Array(y * (g - gy)));
                });
}

// -------------------------------------------------------------------- shape

Tensor reshape(const Tensor& a, const std::vector<int64_t>& shape) {
  Shape out_shape(shape.size());
  std::size_t known = 1;
  int infer = -1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1 && infer < 0) {
      infer = static_cast<int>(i);
    } else if (shape[i] < 0) {
      throw std::invalid_argument("reshape: invalid size " + std::to_string(shape[i]) +
                                  " (only one -1 is allowed)");
    } else {
      out_shape[i] = static_cast<std::size_t>(shape[i]);
      known *= out_shape[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || a.numel() % known != 0)
      throw std::invalid_argument("reshape: cannot infer the -1 in a shape for " + std::to_string(a.numel()) +
                                  " elements of " + shape_str(a.shape()));
    out_shape[infer] = a.numel() / known;
    known *= out_shape[infer];
  }
  if (known != a.numel())
    throw std::invalid_argument("reshape: shape " + shape_str(out_shape) + " does not fit the " +
                                std::to_string(a.numel()) + " elements of " + shape_str(a.shape()));
  Array out = a.value();
  out.reshape(out_shape);
  return record("reshape", std::move(out), {a}, Reads::nothing(),
                [](const Array& g, const Array&, std::vector<Tensor>& in) {
                  Array gi = g;
                  gi.reshape(in[0].shape());
                  in[0].accumulate_grad(std::move(gi));
                });
}

Tensor transpose(const Tensor& a, int64_t dim0, int64_t dim1) {
  const std::size_t d0 = normalize_dim("transpose", dim0, a.dim());
  const std::size_t d1 = normalize_dim("transpose", dim1, a.dim());
  std::vector<std::size_t> perm(a.dim());
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[d0], perm[d1]);  // swapping two axes is its own inverse
  return record("transpose", xt::transpose(a.value(), perm), {a}, Reads::nothing(),
                [perm](const Array& g, const Array&, std::vector<Tensor>& in) {
                  in[0].accumulate_grad(Array(xt::transpose(g, perm)));
                });
}

// ----------------------------------------------------------------- indexing

Tensor index_select(const Tensor& a, int64_t dim, const Indices& index) {
  if (a.dim() == 0 || normalize_dim("index_select", dim, a.dim()) != 0)
    throw std::invalid_argument(
        "index_select: only dim 0 of a tensor with at least one dim is "
        "supported; got dim " +
        std::to_string(dim) + " of " + shape_str(a.shape()));
  if (index.dimension() != 1)
    throw std::invalid_argument("index_select: index must be 1-d; got shape " +
                                shape_str(Shape(index.shape().begin(), index.shape().end())));
  const Shape in_shape = a.shape();
  check_indices("index_select", index, in_shape[0]);
  const std::size_t row = a.numel() / std::max<std::size_t>(in_shape[0], 1);
  Shape out_shape = in_shape;
  out_shape[0] = index.size();
  Array out = xt::empty<float>(out_shape);
  for (std::size_t i = 0; i < index.size(); ++i)
    std::copy_n(a.value().data() + index(i) * row, row, out.data() + i * row);
  return record("index_select", std::move(out), {a}, Reads::nothing(),
                [index, row](const Array& g, const Array&, std::vector<Tensor>& in) {
                  Array gi = xt::zeros<float>(in[0].shape());
                  for (std::size_t i = 0; i < index.size(); ++i)  // scatter-add: repeats sum
                    for (std::size_t c = 0; c < row; ++c)
                      gi.data()[index(i) * row + c] += g.data()[i * row + c];
                  in[0].accumulate_grad(std::move(gi));
                });
}

Tensor one_hot(const Indices& index, int64_t num_classes) {
  if (num_classes < 0) {
    if (num_classes != -1 || index.size() == 0)
      throw std::invalid_argument("one_hot: num_classes " + std::to_string(num_classes) +
                                  " (use -1 only with a non-empty index)");
    num_classes = *std::max_element(index.begin(), index.end()) + 1;
  }
  check_indices("one_hot", index, static_cast<std::size_t>(num_classes));
  Shape out_shape(index.shape().begin(), index.shape().end());
  out_shape.push_back(static_cast<std::size_t>(num_classes));
  Array out = xt::zeros<float>(out_shape);
  std::size_t i = 0;
  for (int64_t c : index) out.data()[i++ * num_classes + c] = 1.0f;
  return Tensor(std::move(out));
}

// ------------------------------------------------------------------- losses

static void check_class_targets(const char* op, const Shape& input, const Indices& target) {
  if (input.size() != 2)
    throw std::invalid_argument(std::string(op) + ": input must be [N, C]; got " + shape_str(input));
  if (target.dimension() != 1 || target.size() != input[0])
    throw std::invalid_argument(std::string(op) + ": target must be [N] = [" + std::to_string(input[0]) +
                                "] class ids; got shape " +
                                shape_str(Shape(target.shape().begin(), target.shape().end())));
  check_indices(op, target, input[1]);
}

Tensor nll_loss(const Tensor& log_probs, const Indices& target, Reduction r) {
  check_class_targets("nll_loss", log_probs.shape(), target);
  const std::size_t n = target.size(), c = log_probs.shape()[1];
  Array picked = xt::empty<float>(Shape{n});
  for (std::size_t i = 0; i < n; ++i) picked(i) = -log_probs.value().data()[i * c + target(i)];
  Array out = picked;
  if (r == Reduction::sum) out = sum_over(picked, {0}, false);
  if (r == Reduction::mean) out = sum_over(picked, {0}, false) / static_cast<float>(n);
  return record("nll_loss", std::move(out), {log_probs}, Reads::nothing(),
                [target, r, n, c](const Array& g, const Array&, std::vector<Tensor>& in) {
                  Array gi = xt::zeros<float>({n, c});
                  for (std::size_t i = 0; i < n; ++i) {
                    float gi_val = r == Reduction::none ? g(i) : g();
                    if (r == Reduction::mean) gi_val /= static_cast<float>(n);
                    gi.data()[i * c + target(i)] = -gi_val;
                  }
                  in[0].accumulate_grad(std::move(gi));
                });
}

Tensor cross_entropy(const Tensor& logits, const Indices& target, Reduction r) {
  check_class_targets("cross_entropy", logits.shape(), target);
  return nll_loss(log_softmax(logits, 1), target, r);
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction r) {
  if (input.shape() != target.shape())
    throw std::invalid_argument("mse_loss: input " + shape_str(input.shape()) + " and target " +
                                shape_str(target.shape()) + " must have the same shape");
  Tensor d = input - target;
  Tensor sq = d * d;
  if (r == Reduction::sum) return sum(sq);
  if (r == Reduction::mean) return mean(sq);
  return sq;
}

}  // namespace tg
