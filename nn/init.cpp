// Initialisers: uniform, normal, Kaiming and Xavier, as PyTorch's.
#include "init.hpp"

#include <cmath>
#include <stdexcept>

namespace tg::nn::init {

Tensor uniform_(Tensor t, float low, float high, Generator& gen) {
  if (!(low <= high))
    throw std::invalid_argument("uniform_: low " + std::to_string(low) + " is greater than high " +
                                std::to_string(high));
  std::uniform_real_distribution<float> dist(low, high);
  gen.draw([&](std::mt19937& e) {
    for (float& x : t.value_mut()) x = low == high ? low : dist(e);
  });
  return t;
}

Tensor normal_(Tensor t, float mean, float std, Generator& gen) {
  if (!(std >= 0.0f)) throw std::invalid_argument("normal_: std " + std::to_string(std) + " is negative");
  std::normal_distribution<float> dist(mean, std);
  gen.draw([&](std::mt19937& e) {
    for (float& x : t.value_mut()) x = std == 0.0f ? mean : dist(e);
  });
  return t;
}

Tensor zeros_(Tensor t) {
  t.value_mut().fill(0.0f);
  return t;
}

std::size_t fan_in(const Tensor& t) {
  const Shape s = t.shape();
  if (s.size() < 2)
    throw std::invalid_argument("fan_in: needs a tensor with at least 2 dims; got shape " + shape_str(s));
  std::size_t fan = s[1];
  for (std::size_t i = 2; i < s.size(); ++i) fan *= s[i];  // conv kernels: the receptive field
  return fan;
}

Tensor kaiming_uniform_(Tensor t, float a, Generator& gen) {
  const std::size_t fan = fan_in(t);
  if (t.numel() == 0) return t;  // nothing to draw (and fan may be 0)
  const float gain = std::sqrt(2.0f / (1.0f + a * a));
  const float bound = gain * std::sqrt(3.0f / static_cast<float>(fan));
  return uniform_(t, -bound, bound, gen);
}

}  // namespace tg::nn::init
