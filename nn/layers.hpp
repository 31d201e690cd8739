// Layers without weights: the activations ReLU, Tanh, Sigmoid and GELU, Flatten, and
// Dropout, as PyTorch's nn modules of the same names. They exist so a model can
// be written as a list of layers (nn::Sequential); each forward() is the core
// op of the same name.
//
//   tg::nn::Sequential model(tg::nn::Linear(64, 128), tg::nn::ReLU(), tg::nn::Dropout(0.2),
//                            tg::nn::Linear(128, 10));
//   model.train();   // Dropout drops
//   model.eval();    // Dropout passes its input through unchanged
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "../core/ops.hpp"
#include "../core/tensor.hpp"
#include "module.hpp"

namespace tg::nn {

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) const override { return tg::relu(x); }
  std::shared_ptr<Module> clone() const override { return copy_into(std::make_shared<ReLU>()); }
};

class Tanh : public Module {
 public:
  Tensor forward(const Tensor& x) const override { return tg::tanh(x); }
  std::shared_ptr<Module> clone() const override { return copy_into(std::make_shared<Tanh>()); }
};

class Sigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) const override { return tg::sigmoid(x); }
  std::shared_ptr<Module> clone() const override { return copy_into(std::make_shared<Sigmoid>()); }
};

// tg::gelu: approximate "none" (erf, PyTorch's default) or "tanh" (GPT-2's);
// another string throws.
class GELU : public Module {
 public:
  explicit GELU(std::string_view approximate = "none");
  Tensor forward(const Tensor& x) const override { return tg::gelu(x, approximate_); }
  std::shared_ptr<Module> clone() const override { return copy_into(std::make_shared<GELU>(approximate_)); }
  const std::string& approximate() const { return approximate_; }

 private:
  std::string approximate_;
};

// Merges dims start_dim..end_dim. The default keeps dim 0 (the batch) and
// merges the rest: [B, 3, 10] -> [B, 30], as PyTorch's nn.Flatten.
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_dim_(start_dim), end_dim_(end_dim) {}
  Tensor forward(const Tensor& x) const override { return tg::flatten(x, start_dim_, end_dim_); }
  std::shared_ptr<Module> clone() const override {
    return copy_into(std::make_shared<Flatten>(start_dim_, end_dim_));
  }

 private:
  int64_t start_dim_, end_dim_;
};

// While training, zeroes each element with probability p and scales the rest by
// 1 / (1 - p) (see tg::dropout); after eval() it is the identity. The mask is
// drawn from the generator given to the constructor (a handle: the module shares
// its state with the caller's copy), or else from tg::default_generator().
class Dropout : public Module {
 public:
  explicit Dropout(float p = 0.5f);
  Dropout(float p, Generator gen);

  Tensor forward(const Tensor& x) const override;
  std::shared_ptr<Module> clone() const override {  // shares the generator, as a copy of its handle
    return copy_into(gen_ ? std::make_shared<Dropout>(p_, *gen_) : std::make_shared<Dropout>(p_));
  }

  float p() const { return p_; }

 private:
  float p_;
  std::optional<Generator> gen_;  // none: the default generator
};

}  // namespace tg::nn
