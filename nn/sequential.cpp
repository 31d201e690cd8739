#include "sequential.hpp"

#include <map>

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
  // A module in two places (Sequential(l, Tanh(), l)) is cloned once and sits in
  // both places of the copy, as copy.deepcopy keeps it.
  std::map<const Module*, std::shared_ptr<Module>> clones;
  for (const Step& step : steps_) {
    std::shared_ptr<Module>& c = clones[step.module.get()];
    if (!c) {
      c = step.module->clone();
      step.module->check_clone_class(*c);  // push_clone casts it to the module's class
    }
    step.push_clone(*copy, c);
  }
  return copy_into(copy);
}

}  // namespace tg::nn
