#include "adam.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "../core/read_json.hpp"

#include "../core/dispatch.hpp"

namespace tg::optim {

namespace {

// What the update of a row needs besides the row itself.
struct RowScalars {
  float b1, b2, one_minus_b1, one_minus_b2, eps, weight_decay, decay, step_size, bias_correction2_sqrt;
};

// The update of one row (the formula in adam.hpp). The options are template
// parameters so that the loop has no branch and GCC vectorizes it (std::sqrt
// too, given -fno-math-errno).
template <bool Decoupled, bool Amsgrad>
[[gnu::always_inline]] inline void update_row(const RowScalars& k, float* p, float* m, float* v, float* vmax,
                                              const float* g_row, std::size_t cols) {
  for (std::size_t c = 0; c < cols; ++c) {
    float g = g_row[c];
    if constexpr (Decoupled)
      p[c] *= k.decay;
    else
      g += k.weight_decay * p[c];
    m[c] = k.b1 * m[c] + k.one_minus_b1 * g;
    v[c] = k.b2 * v[c] + k.one_minus_b2 * g * g;
    float v_used = v[c];
    if constexpr (Amsgrad) v_used = vmax[c] = std::max(vmax[c], v[c]);
    const float denom = std::sqrt(v_used) / k.bias_correction2_sqrt + k.eps;
    p[c] -= k.step_size * m[c] / denom;
  }
}

// The update is bound by its square root and two divisions per element, so
// the function below is also compiled for AVX2 (core/dispatch.hpp); measured
// 1.5-2x faster on the lazy step. Not FMA: a fused multiply-add rounds once
// where PyTorch rounds twice, and the results must stay PyTorch's to the bit.

// One row, for the options of this step. The branch is per row, outside the
// loop over its columns.
TG_ALSO_FOR_AVX2 void adam_row(bool decoupled, bool amsgrad, const RowScalars& k, float* p, float* m,
                               float* v, float* vmax, const float* g, std::size_t cols) {
  if (decoupled) {
    if (amsgrad)
      update_row<true, true>(k, p, m, v, vmax, g, cols);
    else
      update_row<true, false>(k, p, m, v, vmax, g, cols);
  } else {
    if (amsgrad)
      update_row<false, true>(k, p, m, v, vmax, g, cols);
    else
      update_row<false, false>(k, p, m, v, vmax, g, cols);
  }
}

}  // namespace

// Checks the options before anything else is built; throws std::invalid_argument.
static const AdamOptions& checked(const AdamOptions& o) {
  const std::string name = o.decoupled_weight_decay ? "AdamW" : "Adam";
  if (!(o.lr >= 0)) throw std::invalid_argument(name + ": invalid learning rate " + std::to_string(o.lr));
  if (!(o.eps >= 0)) throw std::invalid_argument(name + ": invalid epsilon " + std::to_string(o.eps));
  if (!(o.betas.first >= 0 && o.betas.first < 1))
    throw std::invalid_argument(name + ": invalid beta parameter at index 0: " +
                                std::to_string(o.betas.first) + " (must be in [0, 1))");
  if (!(o.betas.second >= 0 && o.betas.second < 1))
    throw std::invalid_argument(name + ": invalid beta parameter at index 1: " +
                                std::to_string(o.betas.second) + " (must be in [0, 1))");
  if (!(o.weight_decay >= 0))
    throw std::invalid_argument(name + ": invalid weight_decay " + std::to_string(o.weight_decay));
  return o;
}

Adam::Adam(std::vector<Tensor> params, AdamOptions options) : Adam(one_group(std::move(params)), options) {}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions options)
    : OptimizerWithState(std::move(groups), options.decoupled_weight_decay ? "AdamW" : "Adam",
                         checked(options)) {}

// Adam's state and options, declared once: state_dict(), load_state_dict(),
// state_bytes() and the shape checks of step() work from these lists.
std::vector<StateField<AdamState>> Adam::state_fields(const AdamOptions& o) const {
  std::vector<StateField<AdamState>> fields = {
      {"step", &AdamState::step}, {"exp_avg", &AdamState::exp_avg}, {"exp_avg_sq", &AdamState::exp_avg_sq}};
  if (o.amsgrad) fields.push_back({"max_exp_avg_sq", &AdamState::max_exp_avg_sq});
  return fields;
}

// The options saved in "options" (lr and weight_decay are the groups').
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(AdamOptions, betas, eps, amsgrad, decoupled_weight_decay)

std::string Adam::options_json() const {
  return nlohmann::json(options_).dump();
}

AdamOptions Adam::options_from_json(const std::string& text) const {
  AdamOptions o = options_;
  std::string why;
  const nlohmann::json j = detail::parse_json(text, why);
  if (j.is_discarded()) throw std::invalid_argument("the text " + why);
  j.get_to(o);
  if (o.decoupled_weight_decay != options_.decoupled_weight_decay)
    throw std::invalid_argument("decoupled_weight_decay does not match the type");
  return checked(o);
}

void Adam::step() {
  check_step();
  NoGradGuard no_grad;
  const AdamOptions& o = options_;
  const auto [beta1, beta2] = o.betas;
  const bool decoupled = o.decoupled_weight_decay;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    Tensor& param = params_[i];
    const Grad& grad = param.grad();
    if (grad.empty() || (grad.is_sparse() && grad.sparse().nnz_rows() == 0)) continue;
    const ParamGroup& group = groups_[group_of_[i]];
    const double lr = *group.lr, weight_decay = *group.weight_decay;
    const Shape shape = param.shape();
    const std::size_t rows = num_rows(shape), cols = row_size(shape);
    if (!state_[i])
      state_[i] = AdamState{0, zero_state(shape), zero_state(shape), o.amsgrad ? zero_state(shape) : Array()};
    AdamState& state = *state_[i];
    ++state.step;
    const double t = static_cast<double>(state.step);
    // Scalars in float, as PyTorch applies them to float32 tensors.
    const RowScalars k{static_cast<float>(beta1),
                       static_cast<float>(beta2),
                       static_cast<float>(1 - beta1),
                       static_cast<float>(1 - beta2),
                       static_cast<float>(o.eps),
                       static_cast<float>(weight_decay),
                       static_cast<float>(1 - lr * weight_decay),  // AdamW's factor on p
                       static_cast<float>(lr / (1 - std::pow(beta1, t))),
                       static_cast<float>(std::sqrt(1 - std::pow(beta2, t)))};
    // Without weight decay the decoupled form is exact (p *= 1) and, as in PyTorch,
    // adds no weight_decay * p term to the gradient (which would turn an inf p into NaN).
    const bool decay_p = decoupled || weight_decay == 0;
    float* values = param.value_mut().data();
    float* m = state.exp_avg.data();
    float* v = state.exp_avg_sq.data();
    float* vmax = o.amsgrad ? state.max_exp_avg_sq.data() : nullptr;
    const std::array<float*, 4> touched{values, m, v, vmax};
    for_each_row(grad, rows, cols, touched, [&](std::size_t r, const float* g_row) {
      const std::size_t at = r * cols;
      adam_row(decay_p, o.amsgrad, k, values + at, m + at, v + at, vmax ? vmax + at : nullptr, g_row, cols);
    });
  }
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options)
    : AdamW(one_group(std::move(params)), options) {}

AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions options)
    : Adam(std::move(groups), AdamOptions{.lr = options.lr,
                                          .betas = options.betas,
                                          .eps = options.eps,
                                          .weight_decay = options.weight_decay,
                                          .amsgrad = options.amsgrad,
                                          .decoupled_weight_decay = true}) {}

}  // namespace tg::optim
