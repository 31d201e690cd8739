// Sequential: modules called one after another, PyTorch's nn.Sequential. The
// children are named "0", "1", ... in order, so named_parameters() and
// state_dict() give the names PyTorch gives ("0.weight", "2.bias"; a layer
// without weights takes a number but adds no entry), and a state dict saved
// from a PyTorch nn.Sequential of the same layers loads here.
//
//   tg::nn::Sequential model(tg::nn::Linear(64, 128), tg::nn::ReLU(), tg::nn::Linear(128, 10));
//   tg::Tensor logits = model(x);             // x [B, 64] -> [B, 10]
//   model.push_back(tg::nn::Tanh());          // "3"
//   model.at<tg::nn::Linear>(0).weight;       // a child by position and type
//
// The first module may take Indices (an Embedding), the others take the Tensor
// the one before gives:
//   tg::nn::Sequential lm(tg::nn::Embedding(27, 10), tg::nn::Flatten(), tg::nn::Linear(30, 200),
//                         tg::nn::Tanh(), tg::nn::Linear(200, 27));
//   tg::Tensor logits = lm(context);          // context: Indices [B, 3]
//
// A module given by value is moved in (modules cannot be copied: a copy would
// share their parameters; clone() makes an independent one). Pass a
// std::shared_ptr to keep a handle of your own. train()/eval() reach every child.
#pragma once

#include <concepts>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "../core/tensor.hpp"
#include "module.hpp"

namespace tg::nn {

template <class M>
concept TakesTensor = requires(M& m, const Tensor& x) {
  { m.forward(x) } -> std::convertible_to<Tensor>;
};
template <class M>
concept TakesIndices = requires(M& m, const Indices& x) {
  { m.forward(x) } -> std::convertible_to<Tensor>;
};

class Sequential : public Module {
 public:
  Sequential() = default;
  template <class... M>
    requires(sizeof...(M) > 0 && (!std::is_same_v<std::remove_cvref_t<M>, Sequential> && ...))
  explicit Sequential(M&&... modules) {
    (push_back(std::forward<M>(modules)), ...);
  }

  // Appends a module under the next number and returns its handle.
  template <class M>
    requires(TakesTensor<M> || TakesIndices<M>)
  std::shared_ptr<M> push_back(std::shared_ptr<M> module) {
    Step step;
    if constexpr (TakesTensor<M>) step.on_tensor = [module](const Tensor& x) { return module->forward(x); };
    if constexpr (TakesIndices<M>) step.on_indices = [module](const Indices& x) { return module->forward(x); };
    // clone() appends this module's clone the same way, as an M (clone() checked that it is one).
    step.push_clone = [](Sequential& to, const std::shared_ptr<Module>& copy) {
      to.push_back(std::static_pointer_cast<M>(copy));
    };
    if (!step.on_tensor && !steps_.empty())
      throw std::invalid_argument("Sequential: module " + std::to_string(steps_.size()) +
                                  " takes Indices, not a Tensor, so it can only come first");
    step.module = register_module(std::to_string(steps_.size()), std::move(module));
    steps_.push_back(std::move(step));
    return std::static_pointer_cast<M>(steps_.back().module);
  }
  template <class M>
    requires(TakesTensor<std::remove_cvref_t<M>> || TakesIndices<std::remove_cvref_t<M>>)
  std::shared_ptr<std::remove_cvref_t<M>> push_back(M&& module) {
    return push_back(std::make_shared<std::remove_cvref_t<M>>(std::forward<M>(module)));
  }

  Tensor forward(const Tensor& x) const override;
  Tensor forward(const Indices& x) const;  // the first module takes Indices
  Tensor operator()(const Tensor& x) const { return forward(x); }
  Tensor operator()(const Indices& x) const { return forward(x); }
  std::shared_ptr<Module> clone() const override;

  std::size_t size() const { return steps_.size(); }
  // Child i as the module type it is (throws std::out_of_range or, for another
  // type, std::invalid_argument), or as a plain Module.
  template <class M>
  M& at(std::size_t i) const {
    return *ptr<M>(i);
  }
  template <class M = Module>
  std::shared_ptr<M> ptr(std::size_t i) const {
    if (i >= steps_.size())
      throw std::out_of_range("Sequential: no module " + std::to_string(i) + " in a Sequential of " +
                              std::to_string(steps_.size()));
    auto p = std::dynamic_pointer_cast<M>(steps_[i].module);
    if (!p) throw std::invalid_argument("Sequential: module " + std::to_string(i) + " is not of the type asked for");
    return p;
  }

 private:
  struct Step {
    std::shared_ptr<Module> module;
    std::function<Tensor(const Tensor&)> on_tensor;     // empty if it does not take a Tensor
    std::function<Tensor(const Indices&)> on_indices;  // empty if it does not take Indices
    std::function<void(Sequential&, const std::shared_ptr<Module>&)> push_clone;
  };
  Tensor run_from(std::size_t first, Tensor x) const;

  std::vector<Step> steps_;
};

}  // namespace tg::nn
