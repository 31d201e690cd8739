// Reductions: sum, mean, max and argmax, all elements or along a dim; softmax
// and log_softmax.
#include "../ops.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "../check.hpp"
#include "../kernels/elementwise.hpp"
#include "../kernels/reduce.hpp"
#include "../kernels/rows.hpp"
#include "../tape.hpp"
#include "common.hpp"

namespace tg {

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
  if (a.numel() == 0) throw std::invalid_argument(message("mean: tensor of shape ", a.shape(), " is empty"));
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
    throw std::invalid_argument(message("mean: dim ", dim, " of shape ", a.shape(), " is empty"));
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
  check(s.n != 0, op, ": dim ", dim, " of shape ", shape, " is empty");
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
  Array values = empty_array("max", out_shape);
  Indices indices = empty_indices("max", out_shape);
  for (std::size_t o = 0; o < s.outer; ++o)
    for (std::size_t i = 0; i < s.inner; ++i) {
      const std::size_t k = o * s.inner + i;
      values.data()[k] = a.value().data()[o * s.n * s.inner + arg[k] * s.inner + i];
      indices.data()[k] = static_cast<int64_t>(arg[k]);
    }
  Tensor out = record("max", std::move(values), {a}, [s, arg](const Array& g, const Node& n, Grads& d) {
    Array gi = zeros_array("max", n.input_shape(0));  // only the arg-max gets g
    for (std::size_t o = 0; o < s.outer; ++o)
      for (std::size_t i = 0; i < s.inner; ++i)
        gi.data()[o * s.n * s.inner + arg[o * s.inner + i] * s.inner + i] += g.data()[o * s.inner + i];
    d[0] = std::move(gi);
  });
  return {out, indices};
}

Tensor max(const Tensor& a) {
  if (a.numel() == 0) throw std::invalid_argument(message("max: tensor of shape ", a.shape(), " is empty"));
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
    Array gi = zeros_array("max", n.input_shape(0));
    for (std::size_t i = 0; i < x.size(); ++i)
      if (is_max(x.data()[i])) gi.data()[i] = g() / static_cast<float>(count);
    d[0] = std::move(gi);
  });
}

Indices argmax(const Tensor& a, int64_t dim, bool keepdim) {
  const std::size_t ax = normalize_dim("argmax", dim, a.dim());
  const std::vector<std::size_t> arg = argmax_along("argmax", a.value(), ax, dim);
  Indices out = empty_indices("argmax", reduced_shape(a.shape(), ax, keepdim));
  std::copy(arg.begin(), arg.end(), out.begin());
  return out;
}

Indices argmax(const Tensor& a) {
  if (a.numel() == 0)
    throw std::invalid_argument(message("argmax: tensor of shape ", a.shape(), " is empty"));
  Array flat = a.value();
  flat.reshape({a.numel()});
  return Indices(static_cast<int64_t>(argmax_along("argmax", flat, 0, 0)[0]));
}

// ----------------------------------------------------------- softmax family

// Rows along dim, in core/kernels/rows.hpp: softmax(x) = exp(x - max) / sum(exp(x - max)),
// log_softmax(x) = x - max - log(sum(exp(x - max))), which never overflow.
static Tensor softmax_along(const char* op, const Tensor& a, int64_t dim, bool log) {
  const std::size_t ax = normalize_dim(op, dim, a.shape());
  return record(op, kernels::softmax(op, a.value(), ax, log), {a},
                [op, ax, log](const Array& g, const Node& n, Grads& d) {
                  d[0] = kernels::softmax_backward(op, n.output_value(), g, ax, log);
                });
}

Tensor log_softmax(const Tensor& a, int64_t dim) {
  return softmax_along("log_softmax", a, dim, true);
}

Tensor softmax(const Tensor& a, int64_t dim) {
  return softmax_along("softmax", a, dim, false);
}

}  // namespace tg
