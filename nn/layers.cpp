// The layers without weights: activations, Dropout, Flatten.
#include "layers.hpp"

#include <stdexcept>
#include <string>

namespace tg::nn {

static float checked_p(float p) {
  if (!(p >= 0.0f && p <= 1.0f))
    throw std::invalid_argument("Dropout: probability has to be between 0 and 1, but got " + std::to_string(p));
  return p;
}

GELU::GELU(std::string_view approximate) : approximate_(approximate) {
  if (approximate_ != "none" && approximate_ != "tanh")
    throw std::invalid_argument("GELU: approximate must be \"none\" or \"tanh\"; got \"" + approximate_ + "\"");
}

Dropout::Dropout(float p) : p_(checked_p(p)) {}
Dropout::Dropout(float p, Generator gen) : p_(checked_p(p)), gen_(std::move(gen)) {}

Tensor Dropout::forward(const Tensor& x) const {
  Generator gen = gen_ ? *gen_ : default_generator();  // a handle: the same state
  return tg::dropout(x, p_, is_training(), gen);
}

}  // namespace tg::nn
