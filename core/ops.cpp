#include "ops.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

#include <xtensor/xadapt.hpp>
#include <xtensor/xbroadcast.hpp>
#include <xtensor/xmanipulation.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xoperation.hpp>
#include <xtensor/xsort.hpp>
#include <xtensor/xview.hpp>

#include "dispatch.hpp"
#include "factories.hpp"
#include "fast_math.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/matmul.hpp"
#include "kernels/reduce.hpp"
#include "parallel.hpp"
#include "tape.hpp"

namespace tg {


// ------------------------------------------------------------------ helpers

Array sum_to_shape(const Array& grad, const Shape& shape) {
  return kernels::sum_to_shape(grad, std::span<const std::size_t>(shape));
}

// The shape input i had when the op ran.
static Shape shape_of_input(const Node& n, std::size_t i) {
  return Shape(n.input_shape(i).begin(), n.input_shape(i).end());
}

std::size_t normalize_dim(const char* op, int64_t dim, std::size_t rank) {
  const int64_t r = static_cast<int64_t>(rank);
  if (dim < -r || dim >= r)
    throw std::invalid_argument(std::string(op) + ": dim " + std::to_string(dim) +
                                " out of range for a tensor with " + std::to_string(rank) + " dims");
  return static_cast<std::size_t>(dim < 0 ? dim + r : dim);
}

std::size_t normalize_dim(const char* op, int64_t dim, const Shape& shape) {
  const int64_t r = static_cast<int64_t>(shape.size());
  if (dim < -r || dim >= r)
    throw std::invalid_argument(std::string(op) + ": dim " + std::to_string(dim) + " out of range for shape " +
                                shape_str(shape) + " (" + std::to_string(r) + " dims)");
  return static_cast<std::size_t>(dim < 0 ? dim + r : dim);
}

void check_indices(const char* op, const Indices& index, std::size_t size) {
  // One pass that a compiler vectorizes (a negative index is a huge unsigned
  // one), then, only if something is out of range, a second to name it.
  const int64_t* first = index.data();
  bool bad = false;
  for (std::size_t k = 0; k < index.size(); ++k) bad |= static_cast<uint64_t>(first[k]) >= size;
  if (!bad) return;
  for (std::size_t k = 0; k < index.size(); ++k)
    if (static_cast<uint64_t>(first[k]) >= size)
      throw std::out_of_range(std::string(op) + ": index " + std::to_string(first[k]) + " out of range for size " +
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

// ------------------------------------------------------- elementwise binary
//
// Values and gradients come from kernels::map (core/kernels/elementwise.hpp):
// the function given is applied to every element, the inputs broadcast. A
// gradient computed at the broadcast shape is summed back to its input's shape
// by the engine.

Tensor add(const Tensor& a, const Tensor& b) {
  broadcast_shapes("add", a.shape(), b.shape());
  Array y = kernels::map("add", a.value(), b.value(), [](float x, float y) { return x + y; });
  return record("add", std::move(y), {a, b}, [](Array&& g, const Node& n, Grads& d) {
    // Both get g. b's share is summed to b's shape here (a copy where it was not
    // broadcast); a takes g itself, and the engine sums it to a's shape.
    if (n.needs_grad(1)) d[1] = kernels::sum_to_shape(g, n.input_shape(1));
    d[0] = std::move(g);
  });
}

Tensor sub(const Tensor& a, const Tensor& b) {
  broadcast_shapes("sub", a.shape(), b.shape());
  Array y = kernels::map("sub", a.value(), b.value(), [](float x, float y) { return x - y; });
  return record("sub", std::move(y), {a, b}, [](Array&& g, const Node& n, Grads& d) {
    if (n.needs_grad(1)) d[1] = kernels::map("sub", g, [](float g) { return -g; });
    d[0] = std::move(g);
  });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  broadcast_shapes("mul", a.shape(), b.shape());
  Array y = kernels::map("mul", a.value(), b.value(), [](float x, float y) { return x * y; });
  return record("mul", std::move(y), {a, b}, [](const Array& g, const Node& n, Grads& d) {
    auto times = [](float g, float v) { return g * v; };
    if (n.needs_grad(0)) d[0] = kernels::map("mul", g, n.input(1), times);  // d(a*b)/da = b
    if (n.needs_grad(1)) d[1] = kernels::map("mul", g, n.input(0), times);
  });
}

Tensor div(const Tensor& a, const Tensor& b) {
  broadcast_shapes("div", a.shape(), b.shape());
  Array y = kernels::map("div", a.value(), b.value(), [](float x, float y) { return x / y; });
  return record("div", std::move(y), {a, b}, [](const Array& g, const Node& n, Grads& d) {
    if (n.needs_grad(0)) d[0] = kernels::map("div", g, n.input(1), [](float g, float y) { return g / y; });
    // d(x/y)/dy = -x / y^2, as (x / y) / y: y * y overflows first (PyTorch's order)
    if (n.needs_grad(1))
      d[1] = kernels::map("div", g, n.input(0), n.input(1), [](float g, float x, float y) { return -g * (x / y) / y; });
  });
}

Tensor neg(const Tensor& a) {
  Array y = kernels::map("neg", a.value(), [](float x) { return -x; });
  return record("neg", std::move(y), {a}, [](const Array& g, const Node&, Grads& d) {
    d[0] = kernels::map("neg", g, [](float g) { return -g; });
  });
}

Tensor add(const Tensor& a, float s) {
  Array y = kernels::map("add_scalar", a.value(), [s](float x) { return x + s; });
  return record("add_scalar", std::move(y), {a}, [](Array&& g, const Node&, Grads& d) { d[0] = std::move(g); });
}

Tensor mul(const Tensor& a, float s) {
  Array y = kernels::map("mul_scalar", a.value(), [s](float x) { return x * s; });
  return record("mul_scalar", std::move(y), {a}, [s](const Array& g, const Node&, Grads& d) {
    d[0] = kernels::map("mul_scalar", g, [s](float g) { return g * s; });
  });
}

// Divides, not a * (1 / s): 1 / 1e-39 is inf in float32, 1e-10 / 1e-39 is 1e29.
Tensor div(const Tensor& a, float s) {
  Array y = kernels::map("div_scalar", a.value(), [s](float x) { return x / s; });
  return record("div_scalar", std::move(y), {a}, [s](const Array& g, const Node&, Grads& d) {
    d[0] = kernels::map("div_scalar", g, [s](float g) { return g / s; });
  });
}

// x^p as PyTorch computes it: the common exponents by their own formula (x * x,
// sqrt(x), 1 / x, ...), which differ from std::pow at the edges: sqrt(-inf) is
// NaN where std::pow(-inf, 0.5) is inf. The formula is picked once, outside the loop.
static Array pow_values(const Array& x, float p) {
  if (p == 1.0f) return x;
  if (p == 2.0f) return kernels::map("pow", x, [](float v) { return v * v; });
  if (p == 3.0f) return kernels::map("pow", x, [](float v) { return v * v * v; });
  if (p == 0.5f) return kernels::map("pow", x, [](float v) { return std::sqrt(v); });
  if (p == -0.5f) return kernels::map("pow", x, [](float v) { return 1.0f / std::sqrt(v); });
  if (p == -1.0f) return kernels::map("pow", x, [](float v) { return 1.0f / v; });
  if (p == -2.0f) return kernels::map("pow", x, [](float v) { return 1.0f / (v * v); });
  return kernels::map("pow", x, [p](float v) { return std::pow(v, p); });
}

Tensor pow(const Tensor& a, float p) {
  return record("pow", pow_values(a.value(), p), {a}, [p](const Array& g, const Node& n, Grads& d) {
    // x^0 is constant: 0 also at x = 0, where p x^(p-1) is 0 * inf (as PyTorch)
    if (p == 0.0f)
      d[0] = kernels::map("pow", g, [](float) { return 0.0f; });
    else
      d[0] = kernels::map("pow", g, pow_values(n.input(0), p - 1.0f), [p](float g, float v) { return g * (p * v); });
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
  return div(a, s);
}
Tensor operator/(float s, const Tensor& a) {
  return mul(pow(a, -1.0f), s);
}

// ------------------------------------------------------ elementwise unary

Tensor exp(const Tensor& a) {
  return record("exp", kernels::exp(a.value()), {a}, [](const Array& g, const Node& n, Grads& d) {
    d[0] = kernels::map("exp", g, n.output_value(), [](float g, float y) { return g * y; });  // d e^x = e^x
  });
}

Tensor log(const Tensor& a) {
  return record("log", kernels::log(a.value()), {a}, [](const Array& g, const Node& n, Grads& d) {
    d[0] = kernels::map("log", g, n.input(0), [](float g, float x) { return g / x; });
  });
}

Tensor tanh(const Tensor& a) {
  return record("tanh", kernels::tanh(a.value()), {a}, [](const Array& g, const Node& n, Grads& d) {
    d[0] = kernels::map("tanh", g, n.output_value(), [](float g, float y) { return g * (1.0f - y * y); });
  });
}

Tensor sigmoid(const Tensor& a) {
  return record("sigmoid", kernels::sigmoid(a.value()), {a}, [](const Array& g, const Node& n, Grads& d) {
    d[0] = kernels::map("sigmoid", g, n.output_value(), [](float g, float y) { return g * y * (1.0f - y); });
  });
}

Tensor relu(const Tensor& a) {
  // NaN stays NaN (as PyTorch): max(x, 0) would turn it into 0 and hide it.
  Array y = kernels::map("relu", a.value(), [](float x) { return x > 0.0f || x != x ? x : 0.0f; });
  return record("relu", std::move(y), {a}, [](const Array& g, const Node& n, Grads& d) {
    d[0] = kernels::map("relu", g, n.input(0), [](float g, float x) { return x <= 0.0f ? 0.0f : g; });  // NaN passes g
  });
}

Tensor abs(const Tensor& a) {
  Array y = kernels::map("abs", a.value(), [](float x) { return std::abs(x); });
  return record("abs", std::move(y), {a}, [](const Array& g, const Node& n, Grads& d) {
    // sign(x): 0 at 0, and at NaN (as PyTorch)
    d[0] = kernels::map("abs", g, n.input(0), [](float g, float x) { return x > 0.0f ? g : x < 0.0f ? -g : 0.0f; });
  });
}

Tensor sqrt(const Tensor& a) {
  Array y = kernels::map("sqrt", a.value(), [](float x) { return std::sqrt(x); });
  return record("sqrt", std::move(y), {a}, [](const Array& g, const Node& n, Grads& d) {
    d[0] = kernels::map("sqrt", g, n.output_value(), [](float g, float y) { return g / (2.0f * y); });
  });
}

Tensor clamp(const Tensor& a, std::optional<float> min, std::optional<float> max) {
  if (!min && !max) throw std::invalid_argument("clamp: give at least one of min and max");
  const float lo = min.value_or(-std::numeric_limits<float>::infinity());
  const float hi = max.value_or(std::numeric_limits<float>::infinity());
  // NaN fails both tests and stays NaN; lo first, so with lo > hi everything becomes hi, as PyTorch.
  Array y = kernels::map("clamp", a.value(), [lo, hi](float x) {
    const float up = x < lo ? lo : x;
    return up > hi ? hi : up;
  });
  return record("clamp", std::move(y), {a}, [lo, hi](const Array& g, const Node& n, Grads& d) {
    d[0] = kernels::map("clamp", g, n.input(0), [lo, hi](float g, float x) { return x >= lo && x <= hi ? g : 0.0f; });
  });
}

// gelu, one element at a time, in the formulas of PyTorch's CPU kernel. erf and
// tanh come from core/fast_math.hpp: std::erf is a library call per element,
// and a GPT's MLP runs gelu over 4 * C values per position.
namespace {
constexpr float sqrt1_2 = 0.70710678118654752f;        // 1 / sqrt(2)
constexpr float inv_sqrt_2pi = 0.39894228040143268f;   // 1 / sqrt(2 pi)
constexpr float sqrt_2_over_pi = 0.79788456080286536f;  // sqrt(2 / pi)
constexpr float kappa = 0.044715f;
}  // namespace

TG_ALSO_FOR_AVX2 static void gelu_values(const float* x, float* y, std::size_t n, bool tanh_form) {
  if (tanh_form) {  // 0.5 x (1 + tanh(sqrt(2 / pi) (x + kappa x^3)))
    for (std::size_t i = 0; i < n; ++i)
      y[i] = 0.5f * x[i] * (1.0f + detail::tanh_fast(sqrt_2_over_pi * (x[i] + kappa * x[i] * x[i] * x[i])));
  } else {  // x Phi(x) = x 0.5 (1 + erf(x / sqrt(2)))
    for (std::size_t i = 0; i < n; ++i) y[i] = x[i] * 0.5f * (1.0f + detail::erf_fast(x[i] * sqrt1_2));
  }
}

// dx = g * gelu'(x).
TG_ALSO_FOR_AVX2 static void gelu_slopes(const float* x, const float* g, float* dx, std::size_t n, bool tanh_form) {
  if (tanh_form) {  // with u = sqrt(2 / pi) (x + kappa x^3) and t = tanh(u):
    for (std::size_t i = 0; i < n; ++i) {  // 0.5 (1 + t) + 0.5 x (1 - t^2) du/dx
      const float t = detail::tanh_fast(sqrt_2_over_pi * (x[i] + kappa * x[i] * x[i] * x[i]));
      const float du = sqrt_2_over_pi * (1.0f + 3.0f * kappa * x[i] * x[i]);
      dx[i] = g[i] * (0.5f * (1.0f + t) + 0.5f * x[i] * (1.0f - t * t) * du);
    }
  } else {  // Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi) the normal density
    for (std::size_t i = 0; i < n; ++i) {
      const float cdf = 0.5f * (1.0f + detail::erf_fast(x[i] * sqrt1_2));
      const float pdf = inv_sqrt_2pi * detail::exp_fast(-0.5f * x[i] * x[i]);
      dx[i] = g[i] * (cdf + x[i] * pdf);
    }
  }
}

Tensor gelu(const Tensor& a, std::string_view approximate) {
  if (approximate != "none" && approximate != "tanh")
    throw std::invalid_argument("gelu: approximate must be \"none\" or \"tanh\"; got \"" + std::string(approximate) +
                                "\"");
  const bool tanh_form = approximate == "tanh";
  Array y = empty_array("gelu", a.shape());
  gelu_values(a.value().data(), y.data(), y.size(), tanh_form);
  return record("gelu", std::move(y), {a}, [tanh_form](const Array& g, const Node& n, Grads& d) {
                  Array dx = xt::empty<float>(n.input_shape(0));
                  gelu_slopes(n.input(0).data(), g.data(), dx.data(), dx.size(), tanh_form);
                  d[0] = std::move(dx);
                });
}

// maximum and minimum. wins(x, y) is x > y (maximum) or x < y (minimum). Where
// a == b both inputs get half of g; a NaN on either side passes the whole of g to
// both (PyTorch's rule).
template <class Wins>
static Tensor pick_elementwise(const char* op, const Tensor& a, const Tensor& b, Wins wins) {
  broadcast_shapes(op, a.shape(), b.shape());
  Array y = kernels::map(op, a.value(), b.value(), [wins](float x, float y) { return x != x || wins(x, y) ? x : y; });
  return record(op, std::move(y), {a, b}, [op, wins](const Array& g, const Node& n, Grads& d) {
    const Array &x = n.input(0), &y = n.input(1);
    // a loses where b wins
    if (n.needs_grad(0))
      d[0] = kernels::map(op, g, x, y, [wins](float g, float x, float y) { return x == y ? 0.5f * g : wins(y, x) ? 0.0f : g; });
    if (n.needs_grad(1))
      d[1] = kernels::map(op, g, x, y, [wins](float g, float x, float y) { return x == y ? 0.5f * g : wins(x, y) ? 0.0f : g; });
  });
}

Tensor maximum(const Tensor& a, const Tensor& b) {
  return pick_elementwise("maximum", a, b, [](float x, float y) { return x > y; });
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  return pick_elementwise("minimum", a, b, [](float x, float y) { return x < y; });
}

// ------------------------------------------------------ masks and selection

template <class Cmp>
static Tensor compare(const char* op, const Tensor& a, const Tensor& b, Cmp cmp) {
  broadcast_shapes(op, a.shape(), b.shape());
  // not recorded: a mask has no gradient
  return Tensor(kernels::map(op, a.value(), b.value(), [cmp](float x, float y) { return cmp(x, y) ? 1.0f : 0.0f; }));
}

Tensor gt(const Tensor& a, const Tensor& b) {
  return compare("gt", a, b, [](float x, float y) { return x > y; });
}
Tensor ge(const Tensor& a, const Tensor& b) {
  return compare("ge", a, b, [](float x, float y) { return x >= y; });
}
Tensor lt(const Tensor& a, const Tensor& b) {
  return compare("lt", a, b, [](float x, float y) { return x < y; });
}
Tensor le(const Tensor& a, const Tensor& b) {
  return compare("le", a, b, [](float x, float y) { return x <= y; });
}
Tensor eq(const Tensor& a, const Tensor& b) {
  return compare("eq", a, b, [](float x, float y) { return x == y; });
}
Tensor ne(const Tensor& a, const Tensor& b) {
  return compare("ne", a, b, [](float x, float y) { return x != y; });
}
Tensor gt(const Tensor& a, float b) {
  return gt(a, Tensor(Array(b)));
}
Tensor ge(const Tensor& a, float b) {
  return ge(a, Tensor(Array(b)));
}
Tensor lt(const Tensor& a, float b) {
  return lt(a, Tensor(Array(b)));
}
Tensor le(const Tensor& a, float b) {
  return le(a, Tensor(Array(b)));
}
Tensor eq(const Tensor& a, float b) {
  return eq(a, Tensor(Array(b)));
}
Tensor ne(const Tensor& a, float b) {
  return ne(a, Tensor(Array(b)));
}

Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  broadcast_shapes("where", broadcast_shapes("where", condition.shape(), a.shape()), b.shape());
  Array y = kernels::map("where", condition.value(), a.value(), b.value(),
                         [](float c, float x, float y) { return c != 0.0f ? x : y; });
  return record("where", std::move(y), {condition, a, b}, [](const Array& g, const Node& n, Grads& d) {
    d[1] = kernels::map("where", g, n.input(0), [](float g, float c) { return c != 0.0f ? g : 0.0f; });
    d[2] = kernels::map("where", g, n.input(0), [](float g, float c) { return c != 0.0f ? 0.0f : g; });
  });
}

Tensor masked_fill(const Tensor& a, const Tensor& mask, float value) {
  broadcast_shapes("masked_fill", a.shape(), mask.shape());
  Array y = kernels::map("masked_fill", a.value(), mask.value(), [value](float x, float m) { return m != 0.0f ? value : x; });
  return record("masked_fill", std::move(y), {a, mask}, [](const Array& g, const Node& n, Grads& d) {
    // the filled places did not depend on a
    d[0] = kernels::map("masked_fill", g, n.input(1), [](float g, float m) { return m != 0.0f ? 0.0f : g; });
  });
}

// Zeroes element (i, j) of each [rows, cols] matrix in x unless j - i <= diagonal
// (lower) or j - i >= diagonal (upper).
static void zero_outside_triangle(float* x, std::size_t size, std::size_t rows, std::size_t cols, int64_t diagonal,
                                  bool lower) {
  for (std::size_t at = 0; at < size; at += rows * cols)
    for (std::size_t i = 0; i < rows; ++i)
      for (std::size_t j = 0; j < cols; ++j) {
        const int64_t off = static_cast<int64_t>(j) - static_cast<int64_t>(i);
        if (lower ? off > diagonal : off < diagonal) x[at + i * cols + j] = 0.0f;
      }
}

static Tensor triangle(const char* op, const Tensor& a, int64_t diagonal, bool lower) {
  const Shape s = a.shape();
  if (s.size() < 2)
    throw std::invalid_argument(std::string(op) +
                                ": needs a tensor of 2 or more dims (matrices in the last two); got shape " +
                                shape_str(s));
  const std::size_t rows = s[s.size() - 2], cols = s.back();
  Array out = a.value();
  zero_outside_triangle(out.data(), out.size(), rows, cols, diagonal, lower);
  return record(op, std::move(out), {a}, [rows, cols, diagonal, lower](const Array& g, const Node&, Grads& d) {
                  Array ga = g;
                  zero_outside_triangle(ga.data(), ga.size(), rows, cols, diagonal, lower);
                  d[0] = std::move(ga);
                });
}

Tensor tril(const Tensor& a, int64_t diagonal) {
  return triangle("tril", a, diagonal, true);
}
Tensor triu(const Tensor& a, int64_t diagonal) {
  return triangle("triu", a, diagonal, false);
}

Tensor dropout(const Tensor& a, float p, bool train, Generator& gen) {
  if (!(p >= 0.0f && p <= 1.0f))
    throw std::invalid_argument("dropout: probability has to be between 0 and 1, but got " + std::to_string(p));
  if (!train || p == 0.0f) return a;
  // Each element is kept with probability 1 - p and then scaled by 1 / (1 - p).
  // A draw is the top 24 bits of one 32-bit number, so the same generator state
  // gives the same mask on every platform.
  const float scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
  Array mask = empty_array("dropout", a.shape());
  gen.draw([&](std::mt19937& e) {
    for (std::size_t i = 0; i < mask.size(); ++i) mask.data()[i] = static_cast<float>(e() >> 8) * 0x1p-24f >= p ? scale : 0.0f;
  });
  auto times = [](float x, float m) { return x * m; };
  Array y = kernels::map("dropout", a.value(), mask, times);
  return record("dropout", std::move(y), {a}, [mask = std::move(mask), times](const Array& g, const Node&, Grads& d) {
    d[0] = kernels::map("dropout", g, mask, times);
  });
}

// ------------------------------------------------------------------- matmul
//
// The products and their batch bookkeeping are in core/kernels/matmul.hpp;
// here are the checks and the formulas: dA = g B^T, dB = A^T g.

Tensor matmul(const Tensor& a, const Tensor& b) {
  const Shape as = a.shape(), bs = b.shape();
  if (as.size() < 2 || bs.size() < 2)
    throw std::invalid_argument("matmul: needs matrices, [.., n, k] x [.., k, m] (2 or more dims each); got shapes " +
                                shape_str(as) + " and " + shape_str(bs));
  const std::size_t k = as.back();
  if (bs[bs.size() - 2] != k)
    throw std::invalid_argument("matmul: shapes " + shape_str(as) + " and " + shape_str(bs) +
                                ": inner dimensions differ (" + std::to_string(k) + " vs " +
                                std::to_string(bs[bs.size() - 2]) + ")");
  const Shape a_batch(as.begin(), as.end() - 2), b_batch(bs.begin(), bs.end() - 2);
  try {
    broadcast_shapes("matmul", a_batch, b_batch);
  } catch (const std::invalid_argument&) {
    throw std::invalid_argument("matmul: shapes " + shape_str(as) + " and " + shape_str(bs) + ": the batch dims " +
                                shape_str(a_batch) + " and " + shape_str(b_batch) + " cannot be broadcast together");
  }
  return record("matmul", kernels::matmul(a.value(), b.value()), {a, b}, [](const Array& g, const Node& n, Grads& d) {
    if (n.needs_grad(0)) d[0] = kernels::matmul_nt(g, n.input(1), shape_of_input(n, 0));  // g B^T
    if (n.needs_grad(1)) d[1] = kernels::matmul_tn(n.input(0), g, shape_of_input(n, 1));  // A^T g
  });
}

Tensor linear(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias) {
  const Shape xs = x.shape(), ws = weight.shape();
  if (ws.size() != 2 || xs.empty() || xs.back() != ws[1])
    throw std::invalid_argument("linear: input " + shape_str(xs) + " does not fit weight " + shape_str(ws) +
                                " (expected input [.., " +
                                (ws.size() == 2 ? std::to_string(ws[1]) : std::string("in")) + "])");
  if (bias && bias->shape() != Shape{ws[0]})
    throw std::invalid_argument("linear: bias " + shape_str(bias->shape()) + " for weight " + shape_str(ws) +
                                " (expected [" + std::to_string(ws[0]) + "])");
  Array y = kernels::linear(x.value(), weight.value(), bias ? bias->value().data() : nullptr);
  std::vector<Tensor> inputs{x, weight};
  if (bias) inputs.push_back(*bias);
  return record("linear", std::move(y), std::move(inputs), [](Array&& g, const Node& n, Grads& d) {
    if (n.needs_grad(0)) d[0] = kernels::matmul(g, n.input(1));                            // g W
    if (n.needs_grad(1)) d[1] = kernels::matmul_tn(g, n.input(0), shape_of_input(n, 1));  // g^T x
    if (d.size() == 3) d[2] = std::move(g);  // g, summed over the rows by the engine
  });
}

// --------------------------------------------------------------- reductions
//
// Sums run in core/kernels/reduce.hpp (in double, in an order fixed by the
// shape). Backward spreads the output's gradient over what was summed.

Tensor sum(const Tensor& a) {
  Array y = Array(static_cast<float>(kernels::sum(a.value().data(), a.numel())));
  return record("sum", std::move(y), {a}, [](const Array& g, const Node& n, Grads& d) {
    d[0] = kernels::expand("sum", g, shape_of_input(n, 0));  // every element gets g
  });
}

Tensor mean(const Tensor& a) {
  if (a.numel() == 0)
    throw std::invalid_argument("mean: tensor of shape " + shape_str(a.shape()) + " is empty");
  const float count = static_cast<float>(a.numel());
  Array y = Array(static_cast<float>(kernels::sum(a.value().data(), a.numel()) / count));
  return record("mean", std::move(y), {a}, [count](const Array& g, const Node& n, Grads& d) {
    d[0] = kernels::expand("mean", Array(g() / count), shape_of_input(n, 0));  // every element gets g / count
  });
}

// The gradient of a sum or mean along `ax`, spread back over that dim: g
// (reduced, keepdim or not) seen with the dim as 1, then repeated along it.
static Array spread_along(const char* op, Array g, const Shape& full, std::size_t ax) {
  g.reshape(reduced_shape(full, ax, true));
  return kernels::expand(op, g, full);
}

Tensor sum(const Tensor& a, int64_t dim, bool keepdim) {
  const std::size_t ax = normalize_dim("sum", dim, a.dim());
  Array y = kernels::sum_over("sum", a.value(), {ax}, keepdim);
  return record("sum", std::move(y), {a}, [ax](const Array& g, const Node& n, Grads& d) {
    d[0] = spread_along("sum", g, shape_of_input(n, 0), ax);
  });
}

Tensor mean(const Tensor& a, int64_t dim, bool keepdim) {
  const std::size_t ax = normalize_dim("mean", dim, a.dim());
  if (a.shape()[ax] == 0)
    throw std::invalid_argument("mean: dim " + std::to_string(dim) + " of shape " + shape_str(a.shape()) +
                                " is empty");
  const float count = static_cast<float>(a.shape()[ax]);
  auto over_count = [count](float v) { return v / count; };
  Array y = kernels::map("mean", kernels::sum_over("mean", a.value(), {ax}, keepdim), over_count);
  return record("mean", std::move(y), {a}, [ax, over_count](const Array& g, const Node& n, Grads& d) {
    d[0] = spread_along("mean", kernels::map("mean", g, over_count), shape_of_input(n, 0), ax);
  });
}

// Where the largest value of each [outer, n, inner] column sits: the first one
// on a tie (strict >), the first NaN if there is one (NaN wins, as PyTorch).
static std::vector<std::size_t> argmax_along(const char* op, const Array& x, std::size_t ax, int64_t dim) {
  const Shape shape(x.shape().begin(), x.shape().end());
  const AxisSplit s = split_at(shape, ax);
  if (s.n == 0)
    throw std::invalid_argument(std::string(op) + ": dim " + std::to_string(dim) + " of shape " +
                                shape_str(shape) + " is empty");
  std::vector<std::size_t> arg(s.outer * s.inner);
  for (std::size_t o = 0; o < s.outer; ++o)
    for (std::size_t i = 0; i < s.inner; ++i) {
      const float* col = x.data() + o * s.n * s.inner + i;
      std::size_t best = 0;
      for (std::size_t j = 1; j < s.n && !std::isnan(col[best * s.inner]); ++j)
        if (col[j * s.inner] > col[best * s.inner] || std::isnan(col[j * s.inner])) best = j;
      arg[o * s.inner + i] = best;
    }
  return arg;
}

MaxResult max(const Tensor& a, int64_t dim, bool keepdim) {
  const std::size_t ax = normalize_dim("max", dim, a.dim());
  const std::vector<std::size_t> arg = argmax_along("max", a.value(), ax, dim);
  const Shape out_shape = reduced_shape(a.shape(), ax, keepdim);
  const AxisSplit s = split_at(a.shape(), ax);
  Array values = xt::empty<float>(out_shape);
  Indices indices = xt::empty<int64_t>(out_shape);
  for (std::size_t o = 0; o < s.outer; ++o)
    for (std::size_t i = 0; i < s.inner; ++i) {
      const std::size_t k = o * s.inner + i;
      values.data()[k] = a.value().data()[o * s.n * s.inner + arg[k] * s.inner + i];
      indices.data()[k] = static_cast<int64_t>(arg[k]);
    }
  Tensor out = record("max", std::move(values), {a}, [s, arg](const Array& g, const Node& n, Grads& d) {
                        Array gi = xt::zeros<float>(n.input_shape(0));  // only the arg-max gets g
                        for (std::size_t o = 0; o < s.outer; ++o)
                          for (std::size_t i = 0; i < s.inner; ++i)
                            gi.data()[o * s.n * s.inner + arg[o * s.inner + i] * s.inner + i] +=
                                g.data()[o * s.inner + i];
                        d[0] = std::move(gi);
                      });
  return {out, indices};
}

Tensor max(const Tensor& a) {
  if (a.numel() == 0) throw std::invalid_argument("max: tensor of shape " + shape_str(a.shape()) + " is empty");
  const float* x = a.value().data();
  float m = x[0];
  for (std::size_t i = 1; i < a.numel() && !std::isnan(m); ++i)
    if (x[i] > m || std::isnan(x[i])) m = x[i];
  return record("max", Array(m), {a}, [](const Array& g, const Node& n, Grads& d) {
                  // Every element equal to the max (every NaN, when it is NaN) gets an equal share.
                  const Array& x = n.input(0);
                  auto is_max = [m = n.output_value()()](float v) { return std::isnan(m) ? std::isnan(v) : v == m; };
                  std::size_t count = 0;
                  for (std::size_t i = 0; i < x.size(); ++i) count += is_max(x.data()[i]);
                  Array gi = xt::zeros<float>(n.input_shape(0));
                  for (std::size_t i = 0; i < x.size(); ++i)
                    if (is_max(x.data()[i])) gi.data()[i] = g() / static_cast<float>(count);
                  d[0] = std::move(gi);
                });
}

Indices argmax(const Tensor& a, int64_t dim, bool keepdim) {
  const std::size_t ax = normalize_dim("argmax", dim, a.dim());
  const std::vector<std::size_t> arg = argmax_along("argmax", a.value(), ax, dim);
  Indices out = xt::empty<int64_t>(reduced_shape(a.shape(), ax, keepdim));
  std::copy(arg.begin(), arg.end(), out.begin());
  return out;
}

Indices argmax(const Tensor& a) {
  if (a.numel() == 0)
    throw std::invalid_argument("argmax: tensor of shape " + shape_str(a.shape()) + " is empty");
  Array flat = a.value();
  flat.reshape({a.numel()});
  return Indices(static_cast<int64_t>(argmax_along("argmax", flat, 0, 0)[0]));
}

// ----------------------------------------------------------- softmax family

// One row at a time: softmax(x) = exp(x - max) / sum(exp(x - max)) and
// log_softmax(x) = x - max - log(sum(exp(x - max))), which never overflow. The
// sum is in double.
TG_ALSO_FOR_AVX2 static void softmax_row(const float* x, float* y, std::size_t n, bool log) {
  const float m = kernels::lane_max(x, n);  // a NaN is passed over here, but makes the sum NaN
  for (std::size_t i = 0; i < n; ++i) y[i] = detail::exp_fast(x[i] - m);
  const double sum = kernels::lane_sum(y, n);
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
TG_ALSO_FOR_AVX2 static void softmax_row_grad(const float* y, const float* g, float* dx, std::size_t n, bool log) {
  if (log) {
    const float s = static_cast<float>(kernels::lane_sum(g, n));
    for (std::size_t i = 0; i < n; ++i) dx[i] = g[i] - detail::exp_fast(y[i]) * s;
  } else {
    const float s = static_cast<float>(kernels::lane_dot(g, y, n));
    for (std::size_t i = 0; i < n; ++i) dx[i] = y[i] * (g[i] - s);
  }
}

// Calls row(x_row, z_row, out_row) for every row along axis ax of arrays of
// `shape` (z may be null), the rows split across threads when there are many.
// Rows along the last axis are used in place; others are copied into buffers
// first, and the result copied back.
template <class Row>
static void for_each_row(const Shape& shape, std::size_t ax, const float* x, const float* z, float* out, Row row) {
  const AxisSplit s = split_at(shape, ax);
  const std::size_t rows = s.outer * s.inner;
  parallel_for(rows, grain_for(rows, rows * s.n, kernels::elementwise_grain), [&](std::size_t lo, std::size_t hi) {
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

static Tensor softmax_along(const char* op, const Tensor& a, int64_t dim, bool log) {
  const Shape shape = a.shape();
  const std::size_t ax = normalize_dim(op, dim, shape);
  const std::size_t n = shape[ax];
  Array y = empty_array(op, shape);
  for_each_row(shape, ax, a.value().data(), nullptr, y.data(),
               [n, log](const float* x, const float*, float* out) { softmax_row(x, out, n, log); });
  return record(op, std::move(y), {a}, [op, shape, ax, n, log](const Array& g, const Node& node, Grads& d) {
                  Array dx = empty_array(op, shape);
                  for_each_row(shape, ax, node.output_value().data(), g.data(), dx.data(),
                               [n, log](const float* y, const float* gr, float* out) {
                                 softmax_row_grad(y, gr, out, n, log);
                               });
                  d[0] = std::move(dx);
                });
}

Tensor log_softmax(const Tensor& a, int64_t dim) {
  return softmax_along("log_softmax", a, dim, true);
}

Tensor softmax(const Tensor& a, int64_t dim) {
  return softmax_along("softmax", a, dim, false);
}

// -------------------------------------------------------------------- shape

// Marks the result of an op whose PyTorch counterpart returns a view: it is a
// copy here, so Tensor::value_mut() on it throws instead of writing into a copy.
static Tensor copy_of_view(Tensor t, const char* op) {
  t.impl()->copy_of_view = op;
  return t;
}

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
  return copy_of_view(record("reshape", std::move(out), {a}, [](Array&& g, const Node& n, Grads& d) {
                       g.reshape(n.input_shape(0));  // the same values, seen in the input's shape
                       d[0] = std::move(g);
                     }),
                     "reshape");
}

// Copies x (of shape `in`) into out, whose dim i is x's dim perm[i]. Walks out
// in order and reads x through the permuted strides. When out's last dim is
// also x's last, each row is one contiguous copy. Otherwise (a transpose of
// the last dims) x is read across its rows: the rows are then walked in
// 64 x 64 tiles, which stay in the cache between the strided reads and the
// contiguous writes (a [4096, 1024] transpose read row after row is 5x slower).
static void permute_copy(const float* x, float* out, const Shape& in, const std::vector<std::size_t>& perm) {
  const std::size_t rank = in.size();
  std::size_t total = 1;
  for (std::size_t d : in) total *= d;
  if (total == 0) return;
  if (rank == 0) {
    out[0] = x[0];
    return;
  }
  std::vector<std::size_t> in_stride(rank, 1);
  for (std::size_t d = rank - 1; d-- > 0;) in_stride[d] = in_stride[d + 1] * in[d + 1];
  Shape shape(rank);
  std::vector<std::size_t> stride(rank), out_stride(rank, 1);  // x's and out's steps along out's dims
  for (std::size_t i = 0; i < rank; ++i) {
    shape[i] = in[perm[i]];
    stride[i] = in_stride[perm[i]];
  }
  for (std::size_t d = rank - 1; d-- > 0;) out_stride[d] = out_stride[d + 1] * shape[d + 1];
  // Out's dim k is x's last one; tiles are [k, last] when it is not out's last.
  std::size_t k = rank - 1;
  for (std::size_t i = 0; i < rank; ++i)
    if (perm[i] == rank - 1) k = i;
  const bool tiled = k != rank - 1 && in.back() > 1;
  const std::size_t inner = shape.back(), step = stride.back();
  // Every other dim is walked by the counter below (k too, when not tiled).
  std::vector<std::size_t> coord(rank, 0);
  std::size_t from = 0, to = 0;  // where the current row (or tile block) starts in x and in out
  for (;;) {
    if (!tiled) {
      if (step == 1)
        std::copy_n(x + from, inner, out + to);
      else
        for (std::size_t j = 0; j < inner; ++j) out[to + j] = x[from + j * step];
    } else {
      constexpr std::size_t tile = 64;
      const std::size_t rows = shape[k], out_row = out_stride[k];
      for (std::size_t r0 = 0; r0 < rows; r0 += tile)
        for (std::size_t c0 = 0; c0 < inner; c0 += tile)
          for (std::size_t r = r0; r < std::min(rows, r0 + tile); ++r)
            for (std::size_t c = c0; c < std::min(inner, c0 + tile); ++c)
              out[to + r * out_row + c] = x[from + r + c * step];
    }
    // The next row or block: count up the outer dims (skipping k when tiled).
    std::size_t d = rank - 1;
    for (;;) {
      if (d == 0) return;
      --d;
      if (tiled && d == k) continue;
      from += stride[d];
      to += out_stride[d];
      if (++coord[d] < shape[d]) break;
      from -= stride[d] * shape[d];
      to -= out_stride[d] * shape[d];
      coord[d] = 0;
    }
  }
}

// a with its dims reordered by perm (checked); backward reorders the gradient back.
static Tensor permuted(const char* op, const Tensor& a, const std::vector<std::size_t>& perm) {
  const Shape in = a.shape();
  Shape out_shape(in.size());
  std::vector<std::size_t> inverse(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    out_shape[i] = in[perm[i]];
    inverse[perm[i]] = i;
  }
  Array out = empty_array(op, out_shape);
  permute_copy(a.value().data(), out.data(), in, perm);
  Tensor t = record(op, std::move(out), {a}, [out_shape, inverse](const Array& g, const Node& n, Grads& d) {
    Array ga = xt::empty<float>(n.input_shape(0));
    permute_copy(g.data(), ga.data(), out_shape, inverse);
    d[0] = std::move(ga);
  });
  return copy_of_view(t, op);
}

Tensor transpose(const Tensor& a, int64_t dim0, int64_t dim1) {
  const std::size_t d0 = normalize_dim("transpose", dim0, a.shape());
  const std::size_t d1 = normalize_dim("transpose", dim1, a.shape());
  std::vector<std::size_t> perm(a.dim());
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[d0], perm[d1]);
  return permuted("transpose", a, perm);
}

Tensor permute(const Tensor& a, const std::vector<int64_t>& dims) {
  const Shape s = a.shape();
  std::string listed;
  for (int64_t d : dims) listed += (listed.empty() ? "" : ", ") + std::to_string(d);
  if (dims.size() != s.size())
    throw std::invalid_argument("permute: dims [" + listed + "] for shape " + shape_str(s) + ": name each of its " +
                                std::to_string(s.size()) + " dims once");
  std::vector<std::size_t> perm;
  for (int64_t d : dims) {
    perm.push_back(normalize_dim("permute", d, s));
    if (std::find(perm.begin(), perm.end() - 1, perm.back()) != perm.end() - 1)
      throw std::invalid_argument("permute: dims [" + listed + "] for shape " + shape_str(s) + " name dim " +
                                  std::to_string(perm.back()) + " twice");
  }
  return permuted("permute", a, perm);
}

Tensor flatten(const Tensor& a, int64_t start_dim, int64_t end_dim) {
  if (a.dim() == 0) {  // as in PyTorch, its dims are those of a 1-d tensor: 0 or -1
    for (int64_t d : {start_dim, end_dim})
      if (d != 0 && d != -1)
        throw std::invalid_argument("flatten: dim " + std::to_string(d) +
                                    " out of range for a 0-d tensor (its dims are 0 and -1)");
    return copy_of_view(reshape(a, {1}), "flatten");
  }
  const std::size_t first = normalize_dim("flatten", start_dim, a.dim());
  const std::size_t last = normalize_dim("flatten", end_dim, a.dim());
  if (first > last)
    throw std::invalid_argument("flatten: start_dim " + std::to_string(start_dim) + " comes after end_dim " +
                                std::to_string(end_dim) + " for shape " + shape_str(a.shape()));
  std::vector<int64_t> shape;
  int64_t merged = 1;
  for (std::size_t d = 0; d < a.dim(); ++d) {
    const auto n = static_cast<int64_t>(a.shape()[d]);
    if (d < first || d > last) {
      shape.push_back(n);
    } else {
      merged *= n;
      if (d == last) shape.push_back(merged);
    }
  }
  return copy_of_view(reshape(a, shape), "flatten");
}

// cat and stack: the output is [outer, n, inner] around axis `ax`, and tensor t
// fills counts[t] of the n positions (cat: its size along ax; stack: 1, on a
// new axis). For every outer index the tensors' blocks of counts[t] * inner
// values are copied side by side; backward cuts the gradient up the same way.
static Tensor join(const char* op, const std::vector<Tensor>& tensors, const Shape& out_shape, std::size_t ax,
                   const std::vector<std::size_t>& counts) {
  const AxisSplit out_split = split_at(out_shape, ax);
  std::vector<std::size_t> block(tensors.size());  // counts[t] * inner
  for (std::size_t t = 0; t < tensors.size(); ++t) block[t] = counts[t] * out_split.inner;
  const std::size_t row = out_split.n * out_split.inner;
  Array out = xt::empty<float>(out_shape);
  float* dst = out.data();
  for (std::size_t o = 0; o < out_split.outer; ++o)
    for (std::size_t t = 0; t < tensors.size(); ++t) {
      std::copy_n(tensors[t].value().data() + o * block[t], block[t], dst);
      dst += block[t];
    }
  return record(op, std::move(out), tensors, [block, row, outer = out_split.outer](const Array& g, const Node& n, Grads& d) {
                  std::size_t start = 0;  // where tensor t's block begins within an output row
                  for (std::size_t t = 0; t < d.size(); ++t) {
                    if (n.needs_grad(t)) {
                      Array gi = xt::empty<float>(n.input_shape(t));
                      for (std::size_t o = 0; o < outer; ++o)
                        std::copy_n(g.data() + o * row + start, block[t], gi.data() + o * block[t]);
                      d[t] = std::move(gi);
                    }
                    start += block[t];
                  }
                });
}

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  if (tensors.empty()) throw std::invalid_argument("cat: expected a non-empty list of tensors");
  const Shape first = tensors[0].shape();
  const std::size_t ax = normalize_dim("cat", dim, first.size());
  Shape out_shape = first;
  out_shape[ax] = 0;
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    Shape s = tensors[t].shape();
    bool fits = s.size() == first.size();
    for (std::size_t d = 0; fits && d < s.size(); ++d) fits = d == ax || s[d] == first[d];
    if (!fits)
      throw std::invalid_argument("cat: tensor " + std::to_string(t) + " has shape " + shape_str(s) +
                                  ", tensor 0 has " + shape_str(first) + "; they must match except in dim " +
                                  std::to_string(ax));
    out_shape[ax] += s[ax];
  }
  std::vector<std::size_t> counts;
  for (const Tensor& t : tensors) counts.push_back(t.shape()[ax]);
  return join("cat", tensors, out_shape, ax, counts);
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  if (tensors.empty()) throw std::invalid_argument("stack: expected a non-empty list of tensors");
  const Shape first = tensors[0].shape();
  const std::size_t ax = normalize_dim("stack", dim, first.size() + 1);
  for (std::size_t t = 0; t < tensors.size(); ++t)
    if (tensors[t].shape() != first)
      throw std::invalid_argument("stack: tensor " + std::to_string(t) + " has shape " +
                                  shape_str(tensors[t].shape()) + ", tensor 0 has " + shape_str(first) +
                                  "; all must be equal");
  // One op on the tape with every tensor as an input (not a cat of reshaped
  // copies), so that backward() sees an in-place change to any of them.
  Shape out_shape = first;
  out_shape.insert(out_shape.begin() + static_cast<std::ptrdiff_t>(ax), tensors.size());
  return join("stack", tensors, out_shape, ax, std::vector<std::size_t>(tensors.size(), 1));
}

// Checks narrow's range and returns where it starts (a negative start counts
// from the end, as in PyTorch).
static std::size_t narrow_start(const char* op, const Shape& shape, std::size_t ax, int64_t start,
                                int64_t length) {
  const auto n = static_cast<int64_t>(shape[ax]);
  const int64_t begin = start < 0 ? start + n : start;
  if (begin < 0 || begin > n || length < 0 || begin + length > n)
    throw std::out_of_range(std::string(op) + ": start " + std::to_string(start) + " and length " +
                            std::to_string(length) + " do not fit dim " + std::to_string(ax) + " of shape " +
                            shape_str(shape));
  return static_cast<std::size_t>(begin);
}

// Copies positions [begin, begin + length) along the axis of an [outer, n, inner] view.
template <class T>
static void copy_narrow(const T* src, T* dst, const AxisSplit& s, std::size_t begin, std::size_t length) {
  for (std::size_t o = 0; o < s.outer; ++o)
    std::copy_n(src + (o * s.n + begin) * s.inner, length * s.inner, dst + o * length * s.inner);
}

Tensor narrow(const Tensor& a, int64_t dim, int64_t start, int64_t length) {
  const std::size_t ax = normalize_dim("narrow", dim, a.dim());
  const std::size_t begin = narrow_start("narrow", a.shape(), ax, start, length);
  const AxisSplit s = split_at(a.shape(), ax);
  Shape out_shape = a.shape();
  out_shape[ax] = static_cast<std::size_t>(length);
  Array out = xt::empty<float>(out_shape);
  copy_narrow(a.value().data(), out.data(), s, begin, out_shape[ax]);
  Tensor t = record("narrow", std::move(out), {a}, [s, begin, len = out_shape[ax]](const Array& g, const Node& n, Grads& d) {
                  Array gi = xt::zeros<float>(n.input_shape(0));  // zero outside the slice
                  for (std::size_t o = 0; o < s.outer; ++o)
                    std::copy_n(g.data() + o * len * s.inner, len * s.inner,
                                gi.data() + (o * s.n + begin) * s.inner);
                  d[0] = std::move(gi);
                });
  return copy_of_view(t, "narrow");
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
                                shape_str(index.shape()));
  const Shape in_shape = a.shape();
  check_indices("index_select", index, in_shape[0]);
  const std::size_t row = a.numel() / std::max<std::size_t>(in_shape[0], 1);
  Shape out_shape = in_shape;
  out_shape[0] = index.size();
  Array out = xt::empty<float>(out_shape);
  for (std::size_t i = 0; i < index.size(); ++i)
    std::copy_n(a.value().data() + index(i) * row, row, out.data() + i * row);
  return record("index_select", std::move(out), {a}, [index, row](const Array& g, const Node& n, Grads& d) {
                  Array gi = xt::zeros<float>(n.input_shape(0));
                  for (std::size_t i = 0; i < index.size(); ++i)  // scatter-add: repeats sum
                    for (std::size_t c = 0; c < row; ++c)
                      gi.data()[index(i) * row + c] += g.data()[i * row + c];
                  d[0] = std::move(gi);
                });
}

// Calls f(k, source) for every element k of index (row-major), with source
// the element of an input of shape `in` that gather reads for it: k's own
// position (counted in index's shape) with the coordinate along ax replaced
// by index[k]. Walks index row by row (its last dim), so the inner loop is a
// plain one.
template <class F>
static void for_each_gathered(const Shape& in, const Indices& index, std::size_t ax, F f) {
  const std::size_t rank = in.size();
  if (index.size() == 0) return;
  std::vector<std::size_t> stride(rank, 1);
  for (std::size_t d = rank - 1; d-- > 0;) stride[d] = stride[d + 1] * in[d + 1];
  const std::size_t row = rank == 0 ? 1 : index.shape()[rank - 1];
  const int64_t* idx = index.data();
  std::vector<std::size_t> coord(rank, 0);
  std::size_t base = 0;  // the row's start in the input, its coordinate along ax at 0
  for (std::size_t k = 0; k < index.size(); k += row) {
    if (rank == 0 || ax == rank - 1)
      for (std::size_t j = 0; j < row; ++j) f(k + j, base + static_cast<std::size_t>(idx[k + j]));
    else
      for (std::size_t j = 0; j < row; ++j) f(k + j, base + j + static_cast<std::size_t>(idx[k + j]) * stride[ax]);
    for (std::size_t d = rank - 1; d-- > 0;) {  // the next row: count up the outer dims of index
      if (d != ax) base += stride[d];
      if (++coord[d] < index.shape()[d]) break;
      if (d != ax) base -= stride[d] * index.shape()[d];
      coord[d] = 0;
    }
  }
}

Tensor gather(const Tensor& a, int64_t dim, const Indices& index) {
  const Shape in_shape = a.shape();
  const Shape index_shape(index.shape().begin(), index.shape().end());
  const std::size_t ax = normalize_dim("gather", dim, in_shape.size());
  bool fits = index_shape.size() == in_shape.size();
  for (std::size_t d = 0; fits && d < in_shape.size(); ++d) fits = d == ax || index_shape[d] <= in_shape[d];
  if (!fits)
    throw std::invalid_argument("gather: index of shape " + shape_str(index_shape) + " does not fit input " +
                                shape_str(in_shape) + " (same number of dims, none larger except dim " +
                                std::to_string(ax) + ")");
  check_indices("gather", index, in_shape[ax]);
  Array out = empty_array("gather", index_shape);
  const float* x = a.value().data();
  float* y = out.data();
  for_each_gathered(in_shape, index, ax, [x, y](std::size_t k, std::size_t from) { y[k] = x[from]; });
  return record("gather", std::move(out), {a}, [index, ax](const Array& g, const Node& n, Grads& d) {
    const Shape in_shape = shape_of_input(n, 0);
    Array gi = xt::zeros<float>(in_shape);  // scatter-add: repeats sum
    float* gx = gi.data();
    const float* gy = g.data();
    for_each_gathered(in_shape, index, ax, [gx, gy](std::size_t k, std::size_t to) { gx[to] += gy[k]; });
    d[0] = std::move(gi);
  });
}

Indices index_select(const Indices& a, int64_t dim, const Indices& index) {
  const Shape in_shape(a.shape().begin(), a.shape().end());
  if (a.dimension() == 0 || normalize_dim("index_select", dim, a.dimension()) != 0)
    throw std::invalid_argument("index_select: only dim 0 of indices with at least one dim is supported; got dim " +
                                std::to_string(dim) + " of " + shape_str(in_shape));
  if (index.dimension() != 1)
    throw std::invalid_argument("index_select: index must be 1-d; got shape " +
                                shape_str(index.shape()));
  check_indices("index_select", index, in_shape[0]);
  const std::size_t row = a.size() / std::max<std::size_t>(in_shape[0], 1);
  Shape out_shape = in_shape;
  out_shape[0] = index.size();
  Indices out = xt::empty<int64_t>(out_shape);
  for (std::size_t i = 0; i < index.size(); ++i)
    std::copy_n(a.data() + index(i) * row, row, out.data() + i * row);
  return out;
}

Indices narrow(const Indices& a, int64_t dim, int64_t start, int64_t length) {
  const Shape in_shape(a.shape().begin(), a.shape().end());
  const std::size_t ax = normalize_dim("narrow", dim, in_shape.size());
  const std::size_t begin = narrow_start("narrow", in_shape, ax, start, length);
  Shape out_shape = in_shape;
  out_shape[ax] = static_cast<std::size_t>(length);
  Indices out = xt::empty<int64_t>(out_shape);
  copy_narrow(a.data(), out.data(), split_at(in_shape, ax), begin, out_shape[ax]);
  return out;
}

Tensor one_hot(const Indices& index, int64_t num_classes) {
  if (num_classes < 0) {
    if (num_classes != -1 || index.size() == 0)
      throw std::invalid_argument("one_hot: num_classes " + std::to_string(num_classes) +
                                  " (use -1 only with a non-empty index)");
    const int64_t largest = *std::max_element(index.data(), index.data() + index.size());
    if (largest == std::numeric_limits<int64_t>::max())  // + 1 would overflow
      throw std::length_error("one_hot: class " + std::to_string(largest) + " gives more classes than memory can address");
    num_classes = largest + 1;
  }
  check_indices("one_hot", index, static_cast<std::size_t>(num_classes));
  Shape out_shape(index.shape().begin(), index.shape().end());
  out_shape.push_back(static_cast<std::size_t>(num_classes));
  // Checked like the factories: a size that overflows throws std::length_error,
  // one that does not fit in memory tg::OutOfMemory, both naming one_hot.
  Array out = empty_array("one_hot", out_shape);
  std::fill_n(out.data(), out.size(), 0.0f);
  const std::size_t classes = static_cast<std::size_t>(num_classes);
  for (std::size_t i = 0; i < index.size(); ++i) out.data()[i * classes + static_cast<std::size_t>(index.data()[i])] = 1.0f;
  return Tensor(std::move(out));
}

// ------------------------------------------------------------ normalization

// One row of layer_norm: its mean and 1 / std from the biased variance, both
// in double (so a row holding 3e38 normalises), then y = (x - mean) / std,
// times weight plus bias where given.
TG_ALSO_FOR_AVX2 static void layer_norm_row(const float* x, const float* w, const float* b, float* y, std::size_t n,
                                            float eps, float& mean, float& rstd) {
  const double mu = kernels::lane_sum(x, n) / static_cast<double>(n);
  const double var = kernels::lane_sum(n, [x, mu](std::size_t i) {
                       const double dev = x[i] - mu;
                       return dev * dev;
                     }) / static_cast<double>(n);
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
TG_ALSO_FOR_AVX2 static void layer_norm_row_grad(const float* x, const float* w, const float* g, float mean,
                                                 float rstd, float* xhat, float* dxhat, float* dx, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    xhat[i] = (x[i] - mean) * rstd;
    dxhat[i] = w ? g[i] * w[i] : g[i];
  }
  const float mean_d = static_cast<float>(kernels::lane_sum(dxhat, n) / static_cast<double>(n));
  const float mean_dx = static_cast<float>(kernels::lane_dot(dxhat, xhat, n) / static_cast<double>(n));
  for (std::size_t i = 0; i < n; ++i) dx[i] = rstd * (dxhat[i] - mean_d - xhat[i] * mean_dx);
}

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const std::optional<Tensor>& weight,
                  const std::optional<Tensor>& bias, float eps) {
  const Shape xs = x.shape();
  const std::size_t k = normalized_shape.size();
  if (k == 0 || k > xs.size() || !std::equal(normalized_shape.begin(), normalized_shape.end(), xs.end() - k))
    throw std::invalid_argument("layer_norm: input " + shape_str(xs) + " does not end with normalized_shape " +
                                shape_str(normalized_shape));
  for (const auto& [what, t] : {std::pair{"weight", weight}, std::pair{"bias", bias}})
    if (t && t->shape() != normalized_shape)
      throw std::invalid_argument(std::string("layer_norm: ") + what + " " + shape_str(t->shape()) +
                                  " for normalized_shape " + shape_str(normalized_shape));
  std::size_t n = 1;
  for (std::size_t d : normalized_shape) n *= d;
  if (n == 0) throw std::invalid_argument("layer_norm: normalized_shape " + shape_str(normalized_shape) + " is empty");
  if (!(eps >= 0.0f)) throw std::invalid_argument("layer_norm: eps must be >= 0; got " + std::to_string(eps));

  // Each row of n values gets its own mean and 1/std; backward needs both again.
  const std::size_t rows = x.numel() / n;
  std::vector<float> mean(rows), rstd(rows);
  Array y = empty_array("layer_norm", xs);
  const float* w = weight ? weight->value().data() : nullptr;
  const float* b = bias ? bias->value().data() : nullptr;
  parallel_for(rows, grain_for(rows, rows * n, kernels::elementwise_grain), [&](std::size_t lo, std::size_t hi) {
    for (std::size_t r = lo; r < hi; ++r)
      layer_norm_row(x.value().data() + r * n, w, b, y.data() + r * n, n, eps, mean[r], rstd[r]);
  });
  std::vector<Tensor> inputs{x};
  if (weight) inputs.push_back(*weight);
  if (bias) inputs.push_back(*bias);
  const bool has_w = weight.has_value(), has_b = bias.has_value();
  return record("layer_norm", std::move(y), std::move(inputs),
                [n, rows, has_w, has_b, mean = std::move(mean), rstd = std::move(rstd)](
                    Array&& g, const Node& node, Grads& d) {
                  const float* x = node.input(0).data();
                  const float* w = has_w ? node.input(1).data() : nullptr;
                  // xhat for every row when weight needs it, else one row of scratch per chunk
                  Array xhat = has_w ? empty_array("layer_norm", shape_of(g)) : Array();
                  Array gx = empty_array("layer_norm", shape_of(g));
                  parallel_for(rows, grain_for(rows, rows * n, kernels::elementwise_grain),
                               [&](std::size_t lo, std::size_t hi) {
                                 std::vector<float> dxhat(n), row(has_w ? 0 : n);
                                 for (std::size_t r = lo; r < hi; ++r)
                                   layer_norm_row_grad(x + r * n, w, g.data() + r * n, mean[r], rstd[r],
                                                       has_w ? xhat.data() + r * n : row.data(), dxhat.data(),
                                                       gx.data() + r * n, n);
                               });
                  d[0] = std::move(gx);
                  // dweight = g * xhat and dbias = g, summed over the rows by the engine
                  if (has_w) d[1] = kernels::map("layer_norm", g, xhat, [](float g, float xh) { return g * xh; });
                  if (has_b) d[has_w ? 2 : 1] = std::move(g);
                });
}

// ----------------------------------------------------------------- sampling

// A uniform double in [0, 1) from two 32-bit draws (53 random bits), the same
// on every platform (std::uniform_real_distribution's algorithm is not fixed).
static double uniform_double(Generator& gen) {
  const double high = static_cast<double>(gen() >> 5);  // 27 bits
  const double low = static_cast<double>(gen() >> 6);   // 26 bits
  return (high * 67108864.0 + low) / 9007199254740992.0;
}

Indices multinomial(const Tensor& probs, int64_t num_samples, bool replacement, Generator& gen) {
  const Shape ps = probs.shape();
  if (ps.size() != 1 && ps.size() != 2)
    throw std::invalid_argument("multinomial: probs must be 1-d or 2-d; got shape " + shape_str(ps));
  const std::size_t rows = ps.size() == 2 ? ps[0] : 1, c = ps.back();
  if (num_samples <= 0)
    throw std::invalid_argument("multinomial: num_samples must be positive; got " + std::to_string(num_samples));
  if (!replacement && static_cast<std::size_t>(num_samples) > c)
    throw std::invalid_argument("multinomial: cannot draw " + std::to_string(num_samples) +
                                " samples without replacement from " + std::to_string(c) + " categories");
  // Check every row before drawing anything, so a bad row leaves gen untouched.
  for (std::size_t r = 0; r < rows; ++r) {
    const float* w = probs.value().data() + r * c;
    double total = 0;
    std::size_t nonzero = 0;
    for (std::size_t j = 0; j < c; ++j) {
      if (!std::isfinite(w[j]) || w[j] < 0)
        throw std::invalid_argument("multinomial: probs of shape " + shape_str(ps) + " holds " +
                                    std::to_string(w[j]) + " at row " + std::to_string(r) + ", column " +
                                    std::to_string(j) + "; weights must be finite and >= 0");
      total += w[j];
      nonzero += w[j] > 0;
    }
    if (total <= 0)
      throw std::invalid_argument("multinomial: row " + std::to_string(r) + " of probs " + shape_str(ps) +
                                  " sums to 0");
    if (!replacement && nonzero < static_cast<std::size_t>(num_samples))
      throw std::invalid_argument("multinomial: row " + std::to_string(r) + " has " + std::to_string(nonzero) +
                                  " non-zero weights, too few for " + std::to_string(num_samples) +
                                  " samples without replacement");
  }
  Shape out_shape = ps;
  out_shape.back() = static_cast<std::size_t>(num_samples);
  Indices out = xt::empty<int64_t>(out_shape);
  std::vector<double> w(c);
  for (std::size_t r = 0; r < rows; ++r) {
    std::copy_n(probs.value().data() + r * c, c, w.begin());
    for (int64_t s = 0; s < num_samples; ++s) {
      // Inverse CDF: the first category whose running total passes u * total.
      double total = 0;
      for (double v : w) total += v;
      const double u = uniform_double(gen) * total;
      std::size_t pick = c;
      double running = 0;
      for (std::size_t j = 0; j < c; ++j) {
        if (w[j] <= 0) continue;  // a zero weight is never drawn
        pick = j;                 // the last non-zero one, should rounding leave u past the end
        running += w[j];
        if (u < running) break;
      }
      out.data()[r * num_samples + s] = static_cast<int64_t>(pick);
      if (!replacement) w[pick] = 0;  // drawn once at most
    }
  }
  return out;
}

Indices multinomial(const Tensor& probs, int64_t num_samples, Generator& gen) {
  return multinomial(probs, num_samples, false, gen);
}

// ------------------------------------------------------------------- losses

static void check_class_targets(const char* op, const Shape& input, const Indices& target) {
  if (input.size() != 2)
    throw std::invalid_argument(std::string(op) + ": input must be [N, C]; got " + shape_str(input));
  if (target.dimension() != 1 || target.size() != input[0])
    throw std::invalid_argument(std::string(op) + ": target must be [N] = [" + std::to_string(input[0]) +
                                "] class ids; got shape " +
                                shape_str(target.shape()));
  check_indices(op, target, input[1]);
}

Tensor nll_loss(const Tensor& log_probs, const Indices& target, Reduction r) {
  check_class_targets("nll_loss", log_probs.shape(), target);
  const std::size_t n = target.size(), c = log_probs.shape()[1];
  Array picked = empty_array("nll_loss", Shape{n});
  for (std::size_t i = 0; i < n; ++i) picked(i) = -log_probs.value().data()[i * c + target(i)];
  Array out = picked;
  if (r != Reduction::none) {
    const float total = static_cast<float>(kernels::sum(picked.data(), n));
    out = Array(r == Reduction::mean ? total / static_cast<float>(n) : total);
  }
  return record("nll_loss", std::move(out), {log_probs}, [target, r, n, c](const Array& g, const Node&, Grads& d) {
                  Array gi = xt::zeros<float>({n, c});
                  for (std::size_t i = 0; i < n; ++i) {
                    float gi_val = r == Reduction::none ? g(i) : g();
                    if (r == Reduction::mean) gi_val /= static_cast<float>(n);
                    gi.data()[i * c + target(i)] = -gi_val;
                  }
                  d[0] = std::move(gi);
                });
}

Tensor cross_entropy(const Tensor& logits, const Indices& target, Reduction r) {
  check_class_targets("cross_entropy", logits.shape(), target);
  return nll_loss(log_softmax(logits, 1), target, r);
}

// One op, as in PyTorch: the squares, then their sum or mean (in double);
// backward is 2 (input - target) g, scaled by 1/N for the mean.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction r) {
  if (input.shape() != target.shape())
    throw std::invalid_argument("mse_loss: input " + shape_str(input.shape()) + " and target " +
                                shape_str(target.shape()) + " must have the same shape");
  if (r == Reduction::mean && input.numel() == 0)
    throw std::invalid_argument("mse_loss: mean of an empty input " + shape_str(input.shape()));
  Array sq = kernels::map("mse_loss", input.value(), target.value(), [](float x, float t) { return (x - t) * (x - t); });
  const float count = static_cast<float>(input.numel());
  Array y = sq;
  if (r != Reduction::none) {
    const double total = kernels::sum(sq.data(), sq.size());
    y = Array(static_cast<float>(r == Reduction::mean ? total / count : total));
  }
  return record("mse_loss", std::move(y), {input, target}, [r, count](const Array& g, const Node& n, Grads& d) {
    // g is one number unless r is none; `scale` folds in the 2 and the mean's 1/N.
    const float scale = r == Reduction::mean ? 2.0f / count : 2.0f;
    Array gx = r == Reduction::none
                   ? kernels::map("mse_loss", g, n.input(0), n.input(1),
                                  [scale](float g, float x, float t) { return scale * (x - t) * g; })
                   : kernels::map("mse_loss", n.input(0), n.input(1),
                                  [scale, g = g()](float x, float t) { return scale * (x - t) * g; });
    if (n.needs_grad(1)) d[1] = kernels::map("mse_loss", gx, [](float v) { return -v; });
    d[0] = std::move(gx);
  });
}

}  // namespace tg
