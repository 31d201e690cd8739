// BCEWithLogitsLoss, the loss module: its weights kept as buffers, forward through tg::binary_cross_entropy_with_logits.
#include "loss.hpp"

namespace tg::nn {

BCEWithLogitsLoss::BCEWithLogitsLoss(const BCEWithLogitsLossOptions& options) : reduction(options.reduction) {
  // Buffers of their own: the caller's tensors are copied, as PyTorch's module
  // keeps the tensors it was given (here a later write to them does not reach it).
  if (options.weight) weight = register_buffer("weight", options.weight->detach());
  if (options.pos_weight) pos_weight = register_buffer("pos_weight", options.pos_weight->detach());
}

Tensor BCEWithLogitsLoss::forward(const Tensor& input, const Tensor& target) const {
  return tg::binary_cross_entropy_with_logits(input, target, weight, pos_weight, reduction);
}

std::shared_ptr<Module> BCEWithLogitsLoss::clone() const {
  return copy_into(std::make_shared<BCEWithLogitsLoss>(BCEWithLogitsLossOptions{weight, reduction, pos_weight}));
}

}  // namespace tg::nn
