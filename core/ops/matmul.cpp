// matmul and linear: the checks and the formulas; the products are in core/kernels/matmul.hpp.
#include "../ops.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "../check.hpp"
#include "../kernels/matmul.hpp"
#include "../tape.hpp"
#include "common.hpp"

namespace tg {

// ------------------------------------------------------------------- matmul
//
// The products and their batch bookkeeping are in core/kernels/matmul.hpp;
// here are the checks and the formulas: dA = g B^T, dB = A^T g.

Tensor matmul(const Tensor& a, const Tensor& b) {
  const Shape as = a.shape(), bs = b.shape();
  if (as.size() < 2 || bs.size() < 2)
    throw std::invalid_argument(
        message("matmul: needs matrices, [.., n, k] x [.., k, m] (2 or more dims each); got shapes ", as,
                " and ", bs));
  const std::size_t k = as.back();
  if (bs[bs.size() - 2] != k)
    throw std::invalid_argument(message("matmul: shapes ", as, " and ", bs, ": inner dimensions differ (", k,
                                        " vs ", bs[bs.size() - 2], ")"));
  const Shape a_batch(as.begin(), as.end() - 2), b_batch(bs.begin(), bs.end() - 2);
  try {
    broadcast_shapes("matmul", a_batch, b_batch);
  } catch (const std::invalid_argument&) {
    throw std::invalid_argument(message("matmul: shapes ", as, " and ", bs, ": the batch dims ", a_batch,
                                        " and ", b_batch, " cannot be broadcast together"));
  }
  return record("matmul", kernels::matmul(a.value(), b.value()), {a, b},
                [](const Array& g, const Node& n, Grads& d) {
                  if (n.needs_grad(0))
                    d[0] = kernels::matmul_nt(g, n.input(1), shape_of_input(n, 0));  // g B^T
                  if (n.needs_grad(1))
                    d[1] = kernels::matmul_tn(n.input(0), g, shape_of_input(n, 1));  // A^T g
                });
}

Tensor linear(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias) {
  const Shape xs = x.shape(), ws = weight.shape();
  if (ws.size() != 2 || xs.empty() || xs.back() != ws[1])
    throw std::invalid_argument(message("linear: input ", xs, " does not fit weight ", ws,
                                        " (expected input [.., ",
                                        ws.size() == 2 ? std::to_string(ws[1]) : std::string("in"), "])"));
  if (bias && bias->shape() != Shape{ws[0]})
    throw std::invalid_argument(
        message("linear: bias ", bias->shape(), " for weight ", ws, " (expected [", ws[0], "])"));
  Array y = kernels::linear(x.value(), weight.value(), bias ? bias->value().data() : nullptr);
  std::vector<Tensor> inputs{x, weight};
  if (bias) inputs.push_back(*bias);
  return record("linear", std::move(y), std::move(inputs), [](Array&& g, const Node& n, Grads& d) {
    if (n.needs_grad(0)) d[0] = kernels::matmul(g, n.input(1));                           // g W
    if (n.needs_grad(1)) d[1] = kernels::matmul_tn(g, n.input(0), shape_of_input(n, 1));  // g^T x
    if (d.size() == 3) d[2] = std::move(g);  // g, summed over the rows by the engine
  });
}

}  // namespace tg
