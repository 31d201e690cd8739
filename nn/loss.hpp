// Losses under tg::nn, as in torch.nn.functional: the functions are core's
// (core/ops.hpp, core/ops_nn.hpp). Most have no module (PyTorch's
// nn.CrossEntropyLoss() and nn.MSELoss()): they would only hold the reduction,
// which the functions take as an argument, and a loss does not go inside a
// Sequential.
//   criterion = nn.CrossEntropyLoss(reduction="sum")   ->   tg::cross_entropy(logits, y, tg::Reduction::sum)
//
// BCEWithLogitsLoss is the exception: its weight and pos_weight are state a
// model keeps (PyTorch registers them as buffers), so it is a module whose
// state_dict() holds them.
#pragma once

#include <memory>
#include <optional>

#include "../core/ops.hpp"
#include "../core/ops_nn.hpp"
#include "module.hpp"

namespace tg::nn {

using tg::binary_cross_entropy;              // probabilities and targets of one shape
using tg::binary_cross_entropy_with_logits;  // logits and targets of one shape
using tg::cross_entropy;                     // logits [N, C], class ids [N]
using tg::mse_loss;                          // input and target of the same shape
using tg::nll_loss;                          // log-probabilities [N, C], class ids [N]
using tg::Reduction;

struct BCEWithLogitsLossOptions {
  std::optional<Tensor> weight = std::nullopt;  // a weight per element, broadcast to the input's shape
  Reduction reduction = Reduction::mean;
  std::optional<Tensor> pos_weight = std::nullopt;  // a weight of the positive term per class, e.g. [C] for input [N, C]
};

// nn.BCEWithLogitsLoss: loss(logits, targets) is
// tg::binary_cross_entropy_with_logits with the options' weight, pos_weight and
// reduction. weight and pos_weight, when given, are buffers ("weight",
// "pos_weight"): saved and loaded with the model, never trained.
//   tg::nn::BCEWithLogitsLoss loss_fn({.pos_weight = tg::tensor({3.0f})});   // positives count 3 times
//   tg::Tensor loss = loss_fn(logits, targets);                              // [N, 1] each
class BCEWithLogitsLoss : public Module {
 public:
  explicit BCEWithLogitsLoss(const BCEWithLogitsLossOptions& options = {});
  Tensor forward(const Tensor& input, const Tensor& target) const;
  Tensor operator()(const Tensor& input, const Tensor& target) const { return forward(input, target); }
  std::shared_ptr<Module> clone() const override;

  std::optional<Tensor> weight, pos_weight;  // the buffers
  Reduction reduction;
};

}  // namespace tg::nn
