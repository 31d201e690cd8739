// Module: the base of every layer. It keeps named parameters and submodules, so
// a model can list, zero, save and load all of its weights.
//
//   struct Model : tg::nn::Module {
//     std::shared_ptr<tg::nn::Embedding> emb;
//     std::shared_ptr<tg::nn::Linear> fc;
//     Model() {
//       emb = register_module("emb", std::make_shared<tg::nn::Embedding>(1000, 16));
//       fc = register_module("fc", std::make_shared<tg::nn::Linear>(16, 2));
//     }
//   };
//   model.named_parameters();  // emb.weight, fc.weight, fc.bias
//
// Parameters are Tensor handles: the one a layer keeps in its public `weight`
// member is the same tensor as the registered one, so writing values through it
// (under NoGradGuard: `layer.weight.copy_(w)`) changes the model. Assigning a
// different Tensor to the member does not re-register it (as in libtorch).
//
// Differences from PyTorch:
//   - state_dict() returns copies of the values (PyTorch's share storage).
//   - zero_grad() empties the gradients, like PyTorch's zero_grad(set_to_none=True).
//   - there are no buffers: modules here only hold parameters.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../core/tensor.hpp"

namespace tg::nn {

// Parameter name ("fc.weight") -> values.
using StateDict = std::map<std::string, Array>;

class Module {
 public:
  virtual ~Module() = default;

  // Adds a parameter under `name` (no dots, unique in this module) and returns
  // its handle. Sets requires_grad as asked, and the tensor's name() to `name`
  // unless it has one; register_module prefixes it with the path ("fc1.weight"),
  // which tape listings, graphs and in-place-write errors then show.
  Tensor register_parameter(const std::string& name, Tensor t, bool requires_grad = true);

  // Adds a submodule; its parameters appear as "<name>.<their name>".
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }

  // This module's parameters first, then each submodule's, in registration order.
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<Tensor> parameters() const;

  void zero_grad();

  // Training mode, for layers that behave differently when training (Dropout:
  // eval() makes it the identity); train() and eval() set it in every submodule too.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  StateDict state_dict() const;
  // Copies `state` into the parameters. First checks everything: if a name is
  // missing, unexpected, or has the wrong shape, throws std::invalid_argument
  // listing every such name, and no parameter is changed. With strict = false,
  // missing and unexpected names are ignored (wrong shapes still throw).
  void load_state_dict(const StateDict& state, bool strict = true);
  // The check load_state_dict makes, alone: throws as it would, changes nothing.
  void check_state_dict(const StateDict& state, bool strict = true) const;

  // state_dict() to / from a safetensors file (see nn/safetensors.hpp).
  void save(const std::string& path) const;
  void load(const std::string& path);

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  void check_new_name(const std::string& name) const;

  std::vector<std::pair<std::string, Tensor>> parameters_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

}  // namespace tg::nn
