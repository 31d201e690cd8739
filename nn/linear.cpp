#include "linear.hpp"

#include <cmath>

#include "../core/ops.hpp"
#include "init.hpp"

namespace tg::nn {

Linear::Linear(std::size_t in_features, std::size_t out_features, bool bias, Generator& gen) {
  weight = register_parameter("weight", zeros({out_features, in_features}));
  if (bias) this->bias = register_parameter("bias", zeros({out_features}));
  reset_parameters(gen);
}

void Linear::reset_parameters(Generator& gen) {
  init::kaiming_uniform_(weight, std::sqrt(5.0f), gen);
  if (bias) {
    const std::size_t fan = in_features();
    const float bound = fan > 0 ? 1.0f / std::sqrt(static_cast<float>(fan)) : 0.0f;
    init::uniform_(*bias, -bound, bound, gen);
  }
}

Tensor Linear::forward(const Tensor& x) const {
  return tg::linear(x, weight, bias);
}

}  // namespace tg::nn
