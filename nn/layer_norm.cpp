// The LayerNorm module.
#include "layer_norm.hpp"

#include <stdexcept>
#include <string>

#include "../core/ops.hpp"

namespace tg::nn {

LayerNorm::LayerNorm(Shape normalized_shape, float eps, bool elementwise_affine)
    : normalized_shape_(std::move(normalized_shape)), eps_(eps) {
  bool ok = !normalized_shape_.empty();
  for (std::size_t d : normalized_shape_) ok = ok && d > 0;
  if (!ok)
    throw std::invalid_argument("LayerNorm: normalized_shape " + shape_str(normalized_shape_) +
                                " must have at least one dim and no zero dims");
  if (!(eps >= 0.0f)) throw std::invalid_argument("LayerNorm: eps must be >= 0; got " + std::to_string(eps));
  if (elementwise_affine) {
    weight = register_parameter("weight", ones(normalized_shape_));
    bias = register_parameter("bias", zeros(normalized_shape_));
  }
}

Tensor LayerNorm::forward(const Tensor& x) const {
  return tg::layer_norm(x, normalized_shape_, weight, bias, eps_);
}

}  // namespace tg::nn
