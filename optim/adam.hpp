// Adam and AdamW, as torch.optim.Adam and torch.optim.AdamW (PyTorch 1.13), plus
// lazy updates for SparseRows gradients in the same optimizer.
//
//   tg::optim::Adam adam(model.parameters(), {.lr = 1e-3});
//   tg::optim::AdamW adamw(model.parameters(), {.lr = 1e-3, .weight_decay = 1e-2});
//
// Dense gradient g of a parameter p, step t = 1, 2, ... of that parameter
// (PyTorch's formula, rounded after each operation; PyTorch's AVX2 kernels
// fuse some multiply-adds, so its bits can differ: tests/test_optim.cpp counts
// how often):
//
//   g    = g + weight_decay * p             Adam  (decoupled_weight_decay = false)
//   p    = p * (1 - lr * weight_decay)      AdamW (decoupled_weight_decay = true)
//   m    = beta1 * m + (1 - beta1) * g
//   v    = beta2 * v + (1 - beta2) * g^2
//   vmax = max(vmax, v), and use vmax for v below                  (amsgrad only)
//   denom = sqrt(v) / sqrt(1 - beta2^t) + eps
//   p    = p - lr / (1 - beta1^t) * m / denom
//
// SparseRows gradient: the same formula, applied lazily to the rows the gradient
// lists (for each listed row r: g_r, p_r, m_r, v_r, vmax_r in place of g, p, m,
// v, vmax). Rows that are not listed keep their values and moments untouched:
// no decay of m and v, no weight decay, no movement. This is what
// torch.optim.SparseAdam does; PyTorch needs a second optimizer for a model that
// mixes dense and sparse gradients (libtorch has no SparseAdam at all), here one
// Adam takes both. The step t is counted per parameter: it goes up by one at each
// step() where that parameter has a non-empty gradient, so a row first listed at
// the parameter's 5th step is bias-corrected with t = 5. Weight decay, AdamW's
// decay and amsgrad also act on the listed rows only. A sparse gradient that
// lists every row at every step gives exactly dense Adam.
//
// Why lazy matters (pytorch#18404). With a dense gradient, a row that was not in
// the batch (an embedding row whose token did not occur) has gradient 0, but its m
// is not 0 from earlier steps, so m / denom keeps pushing the row for many steps
// after its last real gradient. With a sparse gradient that row is not listed, and
// lazy Adam leaves it exactly where it was.
//
// Where this differs from PyTorch:
//   - torch.optim.SparseAdam adds eps before the bias correction
//     (denom = sqrt(v) + eps, step = lr * sqrt(1 - beta2^t) / (1 - beta1^t)),
//     which amounts to using eps / sqrt(1 - beta2^t) in place of eps: ~32 * eps at
//     t = 1 with beta2 = 0.999, tending to eps as t grows. We use dense Adam's
//     formula for sparse rows too, so that sparse == dense when every row is
//     listed. A row's update differs by about eps / sqrt(v) relative; sqrt(v) is
//     about 0.03 * |g| at the row's first step, so that is 3e-7 for |g| ~ 1,
//     3e-4 for |g| ~ 1e-3 and a third of the step for |g| ~ 1e-6. With
//     gradients uniform in +-1e-3, lr = 0.05 and 20 steps, parameters end up to
//     8.1e-3 apart from SparseAdam's (mean 9.8e-5; tests/test_optim.cpp).
//   - SparseAdam has no weight_decay or amsgrad; ours applies them lazily.
//   - An empty sparse gradient (no rows) is a no-op here and does not count a step.
//     SparseAdam counts a step for any gradient that is not None (and in 1.13
//     then fails on an empty one).
//   - Parameter groups set their own lr and weight_decay only; betas, eps,
//     amsgrad are the optimizer's (PyTorch lets a group set any option).
//   - No `maximize`, `foreach`, `capturable`, `differentiable` or `fused` options.
//
// Memory: m and v (and vmax with amsgrad) are dense arrays as large as the
// parameter, allocated at its first step, for sparse gradients too (as
// SparseAdam does): for a [V, D] embedding, Adam's state is 2 * V * D floats
// (3 with amsgrad) however few rows each batch touches. state_bytes() reports it.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "state.hpp"

namespace tg::optim {

struct AdamOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};  // each in [0, 1)
  double eps = 1e-8;
  double weight_decay = 0;
  bool amsgrad = false;
  bool decoupled_weight_decay = false;  // true: AdamW's decay of p instead of g
};

// Adam's state of one parameter, made at its first step; its fields are
// declared once, in Adam::state_fields.
struct AdamState {
  int64_t step = 0;      // steps this parameter has taken
  Array exp_avg;         // m, in the parameter's shape
  Array exp_avg_sq;      // v
  Array max_exp_avg_sq;  // vmax, amsgrad only
};

class Adam : public OptimizerWithState<AdamOptions, AdamState> {
 public:
  // Throws std::invalid_argument for lr < 0, eps < 0, a beta outside [0, 1),
  // or weight_decay < 0 (in the options or a group).
  Adam(std::vector<Tensor> params, AdamOptions options = {});
  // Groups with their own lr / weight_decay; options.lr and options.weight_decay
  // are the defaults for groups that leave them unset. options() are the
  // options given here; load_state_dict() replaces betas, eps and amsgrad.
  Adam(std::vector<ParamGroup> groups, AdamOptions options = {});

  void step() override;

 protected:
  std::vector<StateField<AdamState>> state_fields(const AdamOptions& options) const override;
  std::string options_json() const override;
  AdamOptions options_from_json(const std::string& text) const override;
};

// torch.optim.AdamW's options: AdamOptions without the switch, and PyTorch
// AdamW's default weight_decay of 1e-2.
struct AdamWOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool amsgrad = false;
};

// Adam with decoupled_weight_decay = true; nothing else differs.
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, AdamWOptions options = {});
  AdamW(std::vector<ParamGroup> groups, AdamWOptions options = {});
};

}  // namespace tg::optim
