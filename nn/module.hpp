// Module: the base of every layer. It keeps named parameters and submodules, so
// a model can list, zero, save, load and clone all of its weights.
//
//   struct Model : tg::nn::Module {
//     std::shared_ptr<tg::nn::Linear> fc1, fc2;
//     Model() {
//       fc1 = register_module("fc1", tg::nn::Linear(16, 32));   // moved in, or
//       fc2 = register_module("fc2", std::make_shared<tg::nn::Linear>(32, 2));  // a handle
//     }
//     tg::Tensor forward(const tg::Tensor& x) const override { return (*fc2)(tg::relu((*fc1)(x))); }
//   };
//   Model model;
//   tg::Tensor y = model(x);     // calls forward
//   model.named_parameters();    // fc1.weight, fc1.bias, fc2.weight, fc2.bias
//
// A module is not copyable: a copy would share its parameters with the original
// (they are handles), so `Model copy = model;` does not compile. clone() gives an
// independent copy; a module of your own gets one by overriding clone() (see
// below). Moving a module is fine.
//
// Parameters are Tensor handles: the one a layer keeps in its public `weight`
// member is the same tensor as the registered one, so writing values through it
// (under NoGradGuard: `layer.weight.copy_(w)`) changes the model. Assigning a
// different Tensor to the member does not re-register it (as in libtorch).
//
// Differences from PyTorch:
//   - state_dict() returns copies of the values (PyTorch's share storage).
//   - forward() of the base takes one Tensor; modules that take other inputs
//     (Embedding's Indices, EmbeddingBag's bags) have forward()s of their own.
//   - zero_grad() empties the gradients, like PyTorch's zero_grad(set_to_none=True).
//
// Buffers (register_buffer) are state that is saved and loaded with the
// parameters but not trained: BatchNorm's running mean and variance. They are
// in state_dict() (so in save(), checkpoints and clone()), not in parameters().
#pragma once

#include <concepts>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../io/safetensors.hpp"  // StateDict
#include "../core/tensor.hpp"

namespace tg::nn {

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;  // would share the parameters: use clone() for a copy
  Module& operator=(const Module&) = delete;
  Module(Module&&) = default;
  Module& operator=(Module&&) = default;

  // The module's computation on one Tensor; a module of your own overrides it
  // (`const override`) and is then callable: model(x). The base throws std::logic_error.
  virtual Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }

  // An independent copy, as libtorch's clone(): the same layers, parameters with
  // the same values and requires_grad but their own storage, no gradients, the
  // same training mode. A tensor registered under two names (a module in two
  // places, Sequential(l, Tanh(), l)) is one tensor in the copy too, as with
  // PyTorch's copy.deepcopy. Every layer here has one. A module of your own
  // overrides it with a new module built the same way, filled by copy_into():
  //   std::shared_ptr<Module> clone() const override { return copy_into(std::make_shared<Model>()); }
  // The base throws std::logic_error. copy_into throws std::logic_error naming
  // the class when the new module is of another class (a subclass of Linear
  // that does not override clone() would otherwise become a plain Linear), or
  // ties its tensors otherwise.
  virtual std::shared_ptr<Module> clone() const;

  // The C++ class of this module, as the compiler names it: "tg::nn::Linear", "Model".
  std::string type_name() const;

  // Adds a parameter under `name` (no dots, unique in this module) and returns
  // its handle. Sets requires_grad as asked, and the tensor's name() to `name`
  // unless it has one; register_module prefixes it with the path ("fc1.weight"),
  // which tape listings, graphs and in-place-write errors then show.
  Tensor register_parameter(const std::string& name, Tensor t, bool requires_grad = true);

  // Adds a buffer under `name` (the same rules as a parameter's) and returns its
  // handle: state saved and loaded with the parameters (state_dict) that no
  // optimizer sees and no gradient reaches; requires_grad is turned off.
  Tensor register_buffer(const std::string& name, Tensor t);

  // Adds a submodule; its parameters appear as "<name>.<their name>". Pass a
  // std::shared_ptr, or the module itself (moved in); the handle is returned.
  // A module registered inside itself, or inside a module it contains, would
  // make a cycle: that throws std::invalid_argument naming both.
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }
  template <class M>
    requires std::derived_from<std::remove_cvref_t<M>, Module>
  std::shared_ptr<std::remove_cvref_t<M>> register_module(const std::string& name, M&& module) {
    return register_module(name, std::make_shared<std::remove_cvref_t<M>>(std::forward<M>(module)));
  }

  // This module's parameters first, then each submodule's, in registration
  // order. A tensor registered twice (one module under two names, say) is
  // listed once, under its first name, as in PyTorch: an optimizer or
  // clip_grad_norm_ given parameters() sees each parameter once.
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<Tensor> parameters() const;
  // The buffers, in the same order and under the same rules.
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;
  std::vector<Tensor> buffers() const;

  void zero_grad();

  // Training mode, for layers that behave differently when training (Dropout:
  // eval() makes it the identity); train() and eval() set it in every submodule too.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Every parameter's and buffer's name, a shared tensor under each of its names (as PyTorch's).
  tg::StateDict state_dict() const;
  // Copies `state` into the parameters and buffers. First checks everything: if a name is
  // missing, unexpected, or has the wrong shape, throws std::invalid_argument
  // listing every such name, and no parameter is changed. With strict = false,
  // missing and unexpected names are ignored (wrong shapes still throw).
  void load_state_dict(const tg::StateDict& state, bool strict = true);
  // The check load_state_dict makes, alone: throws as it would, changes nothing.
  void check_state_dict(const tg::StateDict& state, bool strict = true) const;

  // state_dict() to / from a safetensors file (see io/safetensors.hpp).
  void save(const std::string& path) const;
  void load(const std::string& path);

 protected:
  // For clone(): copies this module's parameter values, requires_grad and
  // training mode into `fresh`, a new module of the same structure, and returns it.
  template <class M>
  std::shared_ptr<M> copy_into(std::shared_ptr<M> fresh) const {
    copy_state_to(*fresh);
    return fresh;
  }

 private:
  void copy_state_to(Module& fresh) const;
  // Throws std::logic_error unless `copy` is of this module's class.
  void check_clone_class(const Module& copy) const;
  friend class Sequential;  // its clone() checks each child's clone
  // Every (name, parameter), a tensor registered twice under each of its names.
  std::vector<std::pair<std::string, Tensor>> all_named_parameters() const;
  std::vector<std::pair<std::string, Tensor>> all_named_buffers() const;
  // What state_dict() holds: every parameter, then every buffer, by path.
  std::vector<std::pair<std::string, Tensor>> all_named_state() const;
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  std::optional<std::string> path_to(const Module* target) const;
  void check_new_name(const std::string& name) const;

  std::vector<std::pair<std::string, Tensor>> parameters_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

}  // namespace tg::nn
