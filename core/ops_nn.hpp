// Smooth activations, a log-domain reduction, binary losses and batch
// normalization, as torch.nn.functional's: softplus, log_sigmoid, logsumexp,
// binary_cross_entropy, binary_cross_entropy_with_logits, batch_norm.
//
// Each is one op with its own backward, in PyTorch's formulas, so values and
// gradients at 0, +-inf, huge values and NaN are PyTorch's
// (tests/test_special_values.cpp). Built from smaller ops they go wrong at
// exactly those points: the textbook stable softplus, relu(x) + log(1 + exp(-|x|)),
// has gradient 0 at x = 0 (relu's and abs's gradients are 0 there) where the
// slope is 1/2, so a table of logits that starts at zero never moves.
#pragma once

#include <cstdint>
#include <optional>

#include "ops.hpp"  // Reduction
#include "tensor.hpp"

namespace tg {

// log(1 + exp(beta x)) / beta, and x itself where beta x > threshold (PyTorch's
// F.softplus): a smooth relu. Gradient sigmoid(beta x), 1 past the threshold.
Tensor softplus(const Tensor& x, float beta = 1.0f, float threshold = 20.0f);

// log(sigmoid(x)) = min(x, 0) - log(1 + exp(-|x|)), without overflow for any x
// (F.logsigmoid). Gradient 1 - sigmoid(x): 1/2 at 0.
Tensor log_sigmoid(const Tensor& x);

// log(sum(exp(x))) along dim, as torch.logsumexp: the largest value is taken
// out first, so no exp overflows (a row whose largest value is +-inf is
// shifted by 0 instead). Gradient softmax(x) along dim.
Tensor logsumexp(const Tensor& x, int64_t dim, bool keepdim = false);

// F.binary_cross_entropy: -weight (target log(input) + (1 - target) log(1 - input)),
// input probabilities in [0, 1] (anything else, NaN included, throws
// std::invalid_argument, as in PyTorch), each log clamped at -100 so that 0 and 1
// give 100 and not inf. target has input's shape; weight (optional) broadcasts
// to it. Gradients for input, target and weight (PyTorch: none for weight).
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target,
                            const std::optional<Tensor>& weight = std::nullopt, Reduction reduction = Reduction::mean);

// F.binary_cross_entropy_with_logits: binary_cross_entropy(sigmoid(input), target)
// computed from the logits without overflow:
//   loss = (1 - t) x + lw (log(1 + exp(-x)))           lw = 1 + (pos_weight - 1) t
// times weight. pos_weight weighs the positive term (one per class: [C] for
// input [N, C]); weight and pos_weight broadcast to input's shape. Gradients for
// input, target, weight and pos_weight (PyTorch: none for the last two).
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const std::optional<Tensor>& weight = std::nullopt,
                                        const std::optional<Tensor>& pos_weight = std::nullopt,
                                        Reduction reduction = Reduction::mean);

// F.batch_norm over the channels of input [N, C, ...] (dim 1): each channel is
// normalised by a mean and variance, then scaled by weight[c] and shifted by bias[c]:
//   y = (x - mean[c]) / sqrt(var[c] + eps) * weight[c] + bias[c]
// When training, mean and var are the batch's (over N and every dim after C;
// var biased), and running_mean and running_var, when given, are updated in
// place: r = (1 - momentum) r + momentum batch_stat, with the unbiased variance
// (n / (n - 1)), as PyTorch does. When not training, the running statistics are
// used and must be given. Statistics are computed in double. weight and bias
// (optional) are [C]; the running statistics get no gradient.
Tensor batch_norm(const Tensor& input, const std::optional<Tensor>& running_mean,
                  const std::optional<Tensor>& running_var, const std::optional<Tensor>& weight = std::nullopt,
                  const std::optional<Tensor>& bias = std::nullopt, bool training = false, float momentum = 0.1f,
                  float eps = 1e-5f);

}  // namespace tg
