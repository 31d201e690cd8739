// clip_grad_norm_ over dense and sparse gradients.
#include "clip_grad.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace tg::nn::utils {

float clip_grad_norm_(const std::vector<Tensor>& params, float max_norm, float norm_type) {
  if (!(norm_type > 0.0f))
    throw std::invalid_argument("clip_grad_norm_: norm_type " + std::to_string(norm_type) +
                                " must be positive (or infinity)");
  const bool inf = std::isinf(norm_type);
  double acc = 0;  // max |x| for infinity, else the sum of |x|^p
  for (Tensor p : params) {
    if (p.grad().empty()) continue;
    for (float x : p.grad_mut().values_mut()) {  // a SparseRows gradient's listed rows only
      const double a = std::abs(double(x));
      // x * x is what pow gives for p = 2 (a float's square is exact in double), without a call per value
      acc = inf ? std::max(acc, a) : acc + (norm_type == 2.0f ? a * a : std::pow(a, double(norm_type)));
    }
  }
  const double total = inf ? acc : std::pow(acc, 1.0 / norm_type);
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1.0) {
    for (Tensor p : params) {
      if (p.grad().empty()) continue;
      for (float& x : p.grad_mut().values_mut()) x *= static_cast<float>(coef);
    }
  }
  return static_cast<float>(total);
}

}  // namespace tg::nn::utils
