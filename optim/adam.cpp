#include "optim/adam.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace tg::optim {

Adam::Adam(std::vector<Tensor> params, AdamOptions options)
    : Optimizer(std::move(params), options.decoupled_weight_decay ? "AdamW" : "Adam"),
      options_(options),
      state_(params_.size()) {
  const AdamOptions& o = options_;
  if (!(o.lr >= 0)) throw std::invalid_argument(name_ + ": invalid learning rate " + std::to_string(o.lr));
  if (!(o.eps >= 0)) throw std::invalid_argument(name_ + ": invalid epsilon " + std::to_string(o.eps));
  if (!(o.betas.first >= 0 && o.betas.first < 1))
    throw std::invalid_argument(name_ + ": invalid beta parameter at index 0: " +
                                std::to_string(o.betas.first) + " (must be in [0, 1))");
  if (!(o.betas.second >= 0 && o.betas.second < 1))
    throw std::invalid_argument(name_ + ": invalid beta parameter at index 1: " +
                                std::to_string(o.betas.second) + " (must be in [0, 1))");
  if (!(o.weight_decay >= 0))
    throw std::invalid_argument(name_ + ": invalid weight_decay " + std::to_string(o.weight_decay));
}

void Adam::step() {
  check_grads();
  NoGradGuard no_grad;
  const AdamOptions& o = options_;
  const auto [beta1, beta2] = o.betas;
  // Scalars in float, as PyTorch applies them to float32 tensors.
  const float b1 = static_cast<float>(beta1), b2 = static_cast<float>(beta2);
  const float one_minus_b1 = static_cast<float>(1 - beta1);
  const float one_minus_b2 = static_cast<float>(1 - beta2);
  const float eps = static_cast<float>(o.eps);
  const bool decoupled = o.decoupled_weight_decay;
  const float weight_decay = static_cast<float>(o.weight_decay);
  const float decay = static_cast<float>(1 - o.lr * o.weight_decay);  // AdamW's factor on p

  for (std::size_t i = 0; i < params_.size(); ++i) {
    Tensor& param = params_[i];
    const Grad& grad = param.grad();
    if (grad.empty() || (grad.is_sparse() && grad.sparse().nnz_rows() == 0)) continue;
    const Shape shape = param.shape();
    const std::size_t rows = num_rows(shape), cols = row_size(shape);
    State& state = state_[i];
    if (state.step == 0) {
      state.exp_avg = xt::zeros<float>({rows, cols});
      state.exp_avg_sq = xt::zeros<float>({rows, cols});
      if (o.amsgrad) state.max_exp_avg_sq = xt::zeros<float>({rows, cols});
    }
    ++state.step;
    const double t = static_cast<double>(state.step);
    const float step_size = static_cast<float>(o.lr / (1 - std::pow(beta1, t)));
    const float bias_correction2_sqrt = static_cast<float>(std::sqrt(1 - std::pow(beta2, t)));
    float* values = param.data().data();

    for_each_row(grad, rows, cols, [&](std::size_t r, const float* g_row) {
      float* p = values + r * cols;
      float* m = state.exp_avg.data() + r * cols;
      float* v = state.exp_avg_sq.data() + r * cols;
      float* vmax = o.amsgrad ? state.max_exp_avg_sq.data() + r * cols : nullptr;
      for (std::size_t c = 0; c < cols; ++c) {
        float g = g_row[c];
        if (decoupled)
          p[c] *= decay;
        else
          g += weight_decay * p[c];
        m[c] = b1 * m[c] + one_minus_b1 * g;
        v[c] = b2 * v[c] + one_minus_b2 * g * g;
        float v_used = v[c];
        if (vmax) v_used = vmax[c] = std::max(vmax[c], v[c]);
        const float denom = std::sqrt(v_used) / bias_correction2_sqrt + eps;
        p[c] -= step_size * m[c] / denom;
      }
    });
  }
}

std::size_t Adam::state_bytes() const {
  std::size_t n = 0;
  for (const State& s : state_)
    n += (s.exp_avg.size() + s.exp_avg_sq.size() + s.max_exp_avg_sq.size()) * sizeof(float);
  return n;
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options)
    : Adam(std::move(params), AdamOptions{.lr = options.lr,
                                          .betas = options.betas,
                                          .eps = options.eps,
                                          .weight_decay = options.weight_decay,
                                          .amsgrad = options.amsgrad,
                                          .decoupled_weight_decay = true}) {}

}  // namespace tg::optim
