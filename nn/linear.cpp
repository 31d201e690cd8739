// The Linear module, with PyTorch's initialisation.
#include "linear.hpp"

#include <cmath>

#include "../core/ops.hpp"
#include "init.hpp"

namespace tg::nn {

Linear::Linear(std::size_t in_features, std::size_t out_features, bool bias, Generator& gen) {
  // Filled by reset_parameters; empty_array names the layer if the size is too large.
  weight = register_parameter("weight", Tensor(empty_array("Linear", {out_features, in_features})));
  if (bias) this->bias = register_parameter("bias", Tensor(empty_array("Linear", {out_features})));
  reset_parameters(gen);
}

std::shared_ptr<Module> Linear::clone() const {
  Generator unused;  // the values are copied over the fresh initialisation
  return copy_into(std::make_shared<Linear>(in_features(), out_features(), bias.has_value(), unused));
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
