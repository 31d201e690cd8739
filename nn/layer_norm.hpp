// LayerNorm: PyTorch's nn.LayerNorm. Normalises over the last dims of its
// input, which must equal normalized_shape, then applies an elementwise scale
// and shift:
//   y = (x - mean) / sqrt(var + eps) * weight + bias     (var is biased: / n)
//
//   tg::nn::LayerNorm norm(64);         // over the last dim of [.., 64]
//   tg::nn::LayerNorm norm2({3, 64});   // over the last two dims of [.., 3, 64]
//   tg::nn::LayerNorm plain({64}, 1e-3f, /*elementwise_affine=*/false);
//
// weight starts at ones and bias at zeros (PyTorch's init); with
// elementwise_affine = false there are neither. The forward pass is core's
// tg::layer_norm, one op with its own backward.
#pragma once

#include <optional>

#include "../core/tensor.hpp"
#include "module.hpp"

namespace tg::nn {

class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, float eps = 1e-5f, bool elementwise_affine = true);
  // LayerNorm(64) is LayerNorm({64}). (With eps or elementwise_affine, write the
  // braces: a size_t overload taking them would make LayerNorm({3, 64}) ambiguous.)
  explicit LayerNorm(std::size_t normalized_size) : LayerNorm(Shape{normalized_size}) {}

  Tensor forward(const Tensor& x) const override;
  std::shared_ptr<Module> clone() const override {
    return copy_into(std::make_shared<LayerNorm>(normalized_shape_, eps_, weight.has_value()));
  }

  const Shape& normalized_shape() const { return normalized_shape_; }
  float eps() const { return eps_; }

  std::optional<Tensor> weight;  // normalized_shape, ones; none without elementwise_affine
  std::optional<Tensor> bias;    // normalized_shape, zeros

 private:
  Shape normalized_shape_;
  float eps_;
};

}  // namespace tg::nn
