// In-place initialisers, as in torch.nn.init. Each one writes new values into a
// tensor's storage without recording anything (like PyTorch's, which run under
// no_grad) and returns the same handle.
//
// Randomness comes from the Generator you pass; without one, from
// tg::default_generator() (reset it with tg::manual_seed). The numbers are not
// the ones PyTorch would draw, only their distribution is the same.
#pragma once

#include "../core/factories.hpp"

namespace tg::nn::init {

Tensor uniform_(Tensor t, float low = 0.0f, float high = 1.0f, Generator& gen = default_generator());
Tensor normal_(Tensor t, float mean = 0.0f, float std = 1.0f, Generator& gen = default_generator());
Tensor zeros_(Tensor t);

// He initialisation for a layer followed by leaky_relu with negative slope `a`:
// U(-bound, bound) with bound = gain * sqrt(3 / fan_in), gain = sqrt(2 / (1 + a^2)).
// fan_in = t.shape()[1] times the product of the dims after it. PyTorch's
// default mode='fan_in', nonlinearity='leaky_relu' only.
Tensor kaiming_uniform_(Tensor t, float a = 0.0f, Generator& gen = default_generator());

// fan_in of a weight as kaiming_uniform_ counts it; throws for fewer than 2 dims.
std::size_t fan_in(const Tensor& t);

}  // namespace tg::nn::init
