// The elementwise ops: arithmetic (broadcasting), the math functions, maximum and
// minimum, where, masked_fill, tril and triu, dropout.
#include "../ops.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "../check.hpp"
#include "../kernels/copy.hpp"
#include "../kernels/elementwise.hpp"
#include "../kernels/reduce.hpp"
#include "../tape.hpp"
#include "common.hpp"

namespace tg {

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
      d[1] = kernels::map("div", g, n.input(0), n.input(1),
                          [](float g, float x, float y) { return -g * (x / y) / y; });
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
  return record("add_scalar", std::move(y), {a},
                [](Array&& g, const Node&, Grads& d) { d[0] = std::move(g); });
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
      d[0] = kernels::map("pow", g, pow_values(n.input(0), p - 1.0f),
                          [p](float g, float v) { return g * (p * v); });
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
    d[0] = kernels::map("relu", g, n.input(0),
                        [](float g, float x) { return x <= 0.0f ? 0.0f : g; });  // NaN passes g
  });
}

Tensor abs(const Tensor& a) {
  Array y = kernels::map("abs", a.value(), [](float x) { return std::abs(x); });
  return record("abs", std::move(y), {a}, [](const Array& g, const Node& n, Grads& d) {
    // sign(x): 0 at 0, and at NaN (as PyTorch)
    d[0] = kernels::map("abs", g, n.input(0), [](float g, float x) {
      return x > 0.0f ? g : x < 0.0f ? -g : 0.0f;
    });
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
    d[0] = kernels::map("clamp", g, n.input(0),
                        [lo, hi](float g, float x) { return x >= lo && x <= hi ? g : 0.0f; });
  });
}

Tensor gelu(const Tensor& a, std::string_view approximate) {
  if (approximate != "none" && approximate != "tanh")
    throw std::invalid_argument(
        message("gelu: approximate must be \"none\" or \"tanh\"; got \"", approximate, "\""));
  const bool tanh_form = approximate == "tanh";
  return record("gelu", kernels::gelu(a.value(), tanh_form), {a},
                [tanh_form](const Array& g, const Node& n, Grads& d) {
                  d[0] = kernels::gelu_backward(n.input(0), g, tanh_form);
                });
}

// maximum and minimum. wins(x, y) is x > y (maximum) or x < y (minimum). Where
// a == b both inputs get half of g; a NaN on either side passes the whole of g to
// both (PyTorch's rule).
template <class Wins>
static Tensor pick_elementwise(const char* op, const Tensor& a, const Tensor& b, Wins wins) {
  broadcast_shapes(op, a.shape(), b.shape());
  Array y = kernels::map(op, a.value(), b.value(),
                         [wins](float x, float y) { return x != x || wins(x, y) ? x : y; });
  return record(op, std::move(y), {a, b}, [op, wins](const Array& g, const Node& n, Grads& d) {
    const Array &x = n.input(0), &y = n.input(1);
    // a loses where b wins
    if (n.needs_grad(0))
      d[0] = kernels::map(op, g, x, y, [wins](float g, float x, float y) {
        return x == y ? 0.5f * g : wins(y, x) ? 0.0f : g;
      });
    if (n.needs_grad(1))
      d[1] = kernels::map(op, g, x, y, [wins](float g, float x, float y) {
        return x == y ? 0.5f * g : wins(x, y) ? 0.0f : g;
      });
  });
}

Tensor maximum(const Tensor& a, const Tensor& b) {
  return pick_elementwise("maximum", a, b, [](float x, float y) { return x > y; });
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  return pick_elementwise("minimum", a, b, [](float x, float y) { return x < y; });
}

// ------------------------------------------------------ masks and selection

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
  Array y = kernels::map("masked_fill", a.value(), mask.value(),
                         [value](float x, float m) { return m != 0.0f ? value : x; });
  return record("masked_fill", std::move(y), {a, mask}, [](const Array& g, const Node& n, Grads& d) {
    // the filled places did not depend on a
    d[0] = kernels::map("masked_fill", g, n.input(1), [](float g, float m) { return m != 0.0f ? 0.0f : g; });
  });
}

// Zeroes element (i, j) of each [rows, cols] matrix in x unless j - i <= diagonal
// (lower) or j - i >= diagonal (upper).
static void zero_outside_triangle(float* x, std::size_t size, std::size_t rows, std::size_t cols,
                                  int64_t diagonal, bool lower) {
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
    throw std::invalid_argument(
        message(op, ": needs a tensor of 2 or more dims (matrices in the last two); got shape ", s));
  const std::size_t rows = s[s.size() - 2], cols = s.back();
  Array out = kernels::copy(op, a.value());
  zero_outside_triangle(out.data(), out.size(), rows, cols, diagonal, lower);
  return record(op, std::move(out), {a},
                [op, rows, cols, diagonal, lower](const Array& g, const Node&, Grads& d) {
                  Array ga = kernels::copy(op, g);
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
  check(p >= 0.0f && p <= 1.0f, "dropout: probability has to be between 0 and 1, but got ", p);
  if (!train || p == 0.0f) return a;
  // Each element is kept with probability 1 - p and then scaled by 1 / (1 - p).
  // A draw is the top 24 bits of one 32-bit number, so the same generator state
  // gives the same mask on every platform.
  const float scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
  Array mask = empty_array("dropout", a.shape());
  gen.draw([&](std::mt19937& e) {
    for (std::size_t i = 0; i < mask.size(); ++i)
      mask.data()[i] = static_cast<float>(e() >> 8) * 0x1p-24f >= p ? scale : 0.0f;
  });
  auto times = [](float x, float m) { return x * m; };
  Array y = kernels::map("dropout", a.value(), mask, times);
  return record("dropout", std::move(y), {a},
                [mask = std::move(mask), times](const Array& g, const Node&, Grads& d) {
                  d[0] = kernels::map("dropout", g, mask, times);
                });
}

}  // namespace tg
