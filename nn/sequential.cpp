#include "sequential.hpp"

namespace tg::nn {

Tensor Sequential::run_from(std::size_t first, Tensor x) const {
  for (std::size_t i = first; i < steps_.size(); ++i) x = steps_[i].on_tensor(x);
  return x;
}

Tensor Sequential::forward(const Tensor& x) const {
  if (steps_.empty()) return x;  // PyTorch's empty Sequential is the identity too
  if (!steps_[0].on_tensor)
    throw std::invalid_argument("Sequential: module 0 takes Indices; got a Tensor of shape " + shape_str(x.shape()));
  return run_from(0, x);
}

Tensor Sequential::forward(const Indices& x) const {
  if (steps_.empty() || !steps_[0].on_indices)
    throw std::invalid_argument("Sequential: given Indices, but " +
                                std::string(steps_.empty() ? "it is empty" : "module 0 takes a Tensor") +
                                " (only a first module such as Embedding takes Indices)");
  return run_from(1, steps_[0].on_indices(x));
}

std::shared_ptr<Module> Sequential::clone() const {
  auto copy = std::make_shared<Sequential>();
  for (const Step& step : steps_) step.push_clone(*copy, *step.module);
  copy->train(is_training());
  return copy;
}

}  // namespace tg::nn
