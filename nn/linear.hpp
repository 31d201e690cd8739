// Linear: y = x W^T + b, PyTorch's nn.Linear.
//
//   tg::nn::Linear fc(16, 2);          // weight [2, 16], bias [2]
//   tg::Tensor y = fc(x);              // x [.., 16] -> y [.., 2]
//
// Initialised like PyTorch: weight by kaiming_uniform_ with a = sqrt(5), which
// is U(-1/sqrt(in), 1/sqrt(in)); bias U(-1/sqrt(in), 1/sqrt(in)). The forward
// pass is core's tg::linear (one GEMM); gradients are dense.
#pragma once

#include <optional>

#include "../core/factories.hpp"
#include "module.hpp"

namespace tg::nn {

class Linear : public Module {
 public:
  Linear(std::size_t in_features, std::size_t out_features, bool bias = true,
         Generator& gen = default_generator());

  Tensor forward(const Tensor& x) const override;
  std::shared_ptr<Module> clone() const override;

  // Re-draws the weights as the constructor does.
  void reset_parameters(Generator& gen = default_generator());

  std::size_t in_features() const { return weight.shape()[1]; }
  std::size_t out_features() const { return weight.shape()[0]; }

  Tensor weight;               // [out, in]
  std::optional<Tensor> bias;  // [out], or none when built with bias = false
};

}  // namespace tg::nn
