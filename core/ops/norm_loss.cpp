// Normalization and losses: layer_norm, nll_loss, cross_entropy, mse_loss.
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

// ------------------------------------------------------------ normalization

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const std::optional<Tensor>& weight,
                  const std::optional<Tensor>& bias, float eps) {
  const Shape xs = x.shape();
  const std::size_t k = normalized_shape.size();
  if (k == 0 || k > xs.size() || !std::equal(normalized_shape.begin(), normalized_shape.end(), xs.end() - k))
    throw std::invalid_argument(
        message("layer_norm: input ", xs, " does not end with normalized_shape ", normalized_shape));
  for (const auto& [what, t] : {std::pair{"weight", weight}, std::pair{"bias", bias}})
    if (t && t->shape() != normalized_shape)
      throw std::invalid_argument(
          message("layer_norm: ", what, " ", t->shape(), " for normalized_shape ", normalized_shape));
  std::size_t n = 1;
  for (std::size_t d : normalized_shape) n *= d;
  check(n != 0, "layer_norm: normalized_shape ", normalized_shape, " is empty");
  check(eps >= 0.0f, "layer_norm: eps must be >= 0; got ", eps);

  // Each row of n values gets its own mean and 1/std; backward needs both again.
  std::vector<float> mean, rstd;
  const float* w = weight ? weight->value().data() : nullptr;
  Array y = kernels::layer_norm(x.value(), n, w, bias ? bias->value().data() : nullptr, eps, mean, rstd);
  std::vector<Tensor> inputs{x};
  if (weight) inputs.push_back(*weight);
  if (bias) inputs.push_back(*bias);
  const bool has_w = weight.has_value(), has_b = bias.has_value();
  return record("layer_norm", std::move(y), std::move(inputs),
                [n, has_w, has_b, mean = std::move(mean), rstd = std::move(rstd)](Array&& g, const Node& node,
                                                                                  Grads& d) {
                  const float* w = has_w ? node.input(1).data() : nullptr;
                  d[0] = kernels::layer_norm_backward(node.input(0), g, n, w, mean, rstd);
                  if (!has_w && !has_b) return;
                  // dweight = sum over rows of g * xhat, dbias = sum over rows of g: one pass.
                  const auto& ps = node.input_shape(1);
                  Array dw = has_w ? empty_array("layer_norm", Shape(ps.begin(), ps.end())) : Array();
                  Array db = has_b ? empty_array("layer_norm", Shape(ps.begin(), ps.end())) : Array();
                  kernels::layer_norm_param_grads(node.input(0), g, n, mean, rstd, has_w ? dw.data() : nullptr,
                                                  has_b ? db.data() : nullptr);
                  if (has_w) d[1] = std::move(dw);
                  if (has_b) d[has_w ? 2 : 1] = std::move(db);
                });
}

// ------------------------------------------------------------------- losses

static void check_class_targets(const char* op, const Shape& input, const Indices& target) {
  check(input.size() == 2, op, ": input must be [N, C]; got ", input);
  if (target.dimension() != 1 || target.size() != input[0])
    throw std::invalid_argument(
        message(op, ": target must be [N] = [", input[0], "] class ids; got shape ", target.shape()));
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
  Tensor loss =
      record("nll_loss", std::move(out), {log_probs}, [r, n, c](const Array& g, const Node& node, Grads& d) {
        const Indices& target = *node.ids;
        Array gi = zeros_array("nll_loss", Shape{n, c});
        for (std::size_t i = 0; i < n; ++i) {
          float gi_val = r == Reduction::none ? g(i) : g();
          if (r == Reduction::mean) gi_val /= static_cast<float>(n);
          gi.data()[i * c + target(i)] = -gi_val;
        }
        d[0] = std::move(gi);
      });
  // Kept by the tape entry: the backward reads them there, and the inspector shows them.
  if (loss.creator()) loss.creator()->ids = std::make_unique<Indices>(target);
  return loss;
}

Tensor cross_entropy(const Tensor& logits, const Indices& target, Reduction r) {
  check_class_targets("cross_entropy", logits.shape(), target);
  OpGroup group("cross_entropy");  // the two ops it records show up as one call, the one written
  return nll_loss(log_softmax(logits, 1), target, r);
}

// One op, as in PyTorch: the squares, then their sum or mean (in double);
// backward is 2 (input - target) g, scaled by 1/N for the mean.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction r) {
  if (input.shape() != target.shape())
    throw std::invalid_argument(message("mse_loss: input ", input.shape(), " and target ", target.shape(),
                                        " must have the same shape"));
  if (r == Reduction::mean && input.numel() == 0)
    throw std::invalid_argument(message("mse_loss: mean of an empty input ", input.shape()));
  Array sq = kernels::map("mse_loss", input.value(), target.value(),
                          [](float x, float t) { return (x - t) * (x - t); });
  const float count = static_cast<float>(input.numel());
  Array y = sq;
  if (r != Reduction::none) {
    const double total = kernels::sum(sq.data(), sq.size());
    y = Array(static_cast<float>(r == Reduction::mean ? total / count : total));
  }
  return record(
      "mse_loss", std::move(y), {input, target}, [r, count](const Array& g, const Node& n, Grads& d) {
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
