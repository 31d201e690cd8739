// matmul and linear: the checks and the formulas; the products are in core/kernels/matmul.hpp.
#include "../ops.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

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
        "matmul: needs matrices, [.., n, k] x [.., k, m] (2 or more dims each); got shapes " + shape_str(as) +
        " and " + shape_str(bs));
  const std::size_t k = as.back();
  if (bs[bs.size() - 2] != k)
    throw std::invalid_argument("matmul: shapes " + shape_str(as) + " and " + shape_str(bs) +
                                ": inner dimensions differ (" + std::to_string(k) + " vs " +
                                std::to_string(bs[bs.size() - 2]) + ")");
  const Shape a_batch(as.begin(), as.end() - 2), b_batch(bs.begin(), bs.end() - 2);
  try {
    broadcast_shapes("matmul", a_batch, b_batch);
  } catch (const std::invalid_argument&) {
    throw std::invalid_argument("matmul: shapes " + shape_str(as) + " and " + shape_str(bs) +
                                ": the batch dims " + shape_str(a_batch) + " and " + shape_str(b_batch) +
                                " cannot be broadcast together");
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
    if (n.needs_grad(0)) d[0] = kernels::matmul(g, n.input(1));                           // g W
    if (n.needs_grad(1)) d[1] = kernels::matmul_tn(g, n.input(0), shape_of_input(n, 1));  // g^T x
    if (d.size() == 3) d[2] = std::move(g);  // g, summed over the rows by the engine
  });
}

}  // namespace tg
