#include "optim/adam.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "core/dispatch.hpp"

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
    : Optimizer(std::move(groups), options.decoupled_weight_decay ? "AdamW" : "Adam", checked(options).lr,
                options.weight_decay),
      options_(options),
      state_(params_.size()) {}

void Adam::step() {
  check_grads();
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
    State& state = state_[i];
    if (state.step == 0) {
      state.exp_avg = zero_state(rows, cols);
      state.exp_avg_sq = zero_state(rows, cols);
      if (o.amsgrad) state.max_exp_avg_sq = zero_state(rows, cols);
    }
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

std::size_t Adam::state_bytes() const {
  std::size_t n = 0;
  for (const State& s : state_)
    n += (s.exp_avg.size() + s.exp_avg_sq.size() + s.max_exp_avg_sq.size()) * sizeof(float);
  return n;
}

// ---------------------------------------------------------------- state

void Adam::save_state(StateDict& out) const {
  const AdamOptions& o = options_;
  out.metadata["options"] = nlohmann::json{{"betas", {o.betas.first, o.betas.second}},
                                           {"eps", o.eps},
                                           {"amsgrad", o.amsgrad},
                                           {"decoupled_weight_decay", o.decoupled_weight_decay}}
                                .dump();
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const State& s = state_[i];
    if (s.step == 0) continue;  // no step taken: nothing to save, as in PyTorch
    const std::string prefix = "state." + std::to_string(i) + ".";
    const Shape shape = params_[i].shape();
    out.metadata[prefix + "step"] = std::to_string(s.step);
    out.tensors[prefix + "exp_avg"] = to_param_shape(s.exp_avg, shape);
    out.tensors[prefix + "exp_avg_sq"] = to_param_shape(s.exp_avg_sq, shape);
    if (o.amsgrad) out.tensors[prefix + "max_exp_avg_sq"] = to_param_shape(s.max_exp_avg_sq, shape);
  }
}

std::function<void()> Adam::prepare_load(const StateDict& state) {
  // The options: the saved betas, eps and amsgrad replace ours, as in PyTorch.
  const auto text = state.metadata.find("options");
  if (text == state.metadata.end()) fail_load("no \"options\" entry");
  const nlohmann::json j = nlohmann::json::parse(text->second, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("betas") || !j["betas"].is_array() || j["betas"].size() != 2 ||
      !j["betas"][0].is_number() || !j["betas"][1].is_number() || !j.contains("eps") ||
      !j["eps"].is_number() || !j.contains("amsgrad") || !j["amsgrad"].is_boolean() ||
      !j.contains("decoupled_weight_decay") || !j["decoupled_weight_decay"].is_boolean())
    fail_load(
        "\"options\" is not {\"betas\": [b1, b2], \"eps\": e, \"amsgrad\": bool, "
        "\"decoupled_weight_decay\": bool}: " +
        text->second);
  AdamOptions o = options_;
  o.betas = {j["betas"][0].get<double>(), j["betas"][1].get<double>()};
  o.eps = j["eps"].get<double>();
  o.amsgrad = j["amsgrad"].get<bool>();
  if (j["decoupled_weight_decay"].get<bool>() != o.decoupled_weight_decay)
    fail_load("\"options\" says decoupled_weight_decay = " + j["decoupled_weight_decay"].dump() + " for " +
              name_);
  try {
    checked(o);
  } catch (const std::invalid_argument& e) {
    fail_load(std::string("\"options\": ") + e.what());
  }

  // Each parameter: a step count and its moments, or nothing at all.
  std::vector<State> states(params_.size());
  for (const auto& [key, value] : state.metadata) {
    const auto parsed = state_key(key);
    if (key.rfind("state.", 0) == 0 && (!parsed || parsed->second != "step"))
      fail_load("unexpected metadata entry '" + key + "' for " + std::to_string(params_.size()) +
                " parameters");
    if (!parsed) continue;
    int64_t step = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), step);
    if (ec != std::errc() || end != value.data() + value.size() || step < 1)
      fail_load("'" + key + "' is \"" + value + "\", not a step count >= 1");
    states[parsed->first].step = step;
  }
  check_known_tensors(state, [&](std::size_t i, const std::string& name) {
    return states[i].step > 0 &&
           (name == "exp_avg" || name == "exp_avg_sq" || (o.amsgrad && name == "max_exp_avg_sq"));
  });
  for (std::size_t i = 0; i < params_.size(); ++i) {
    State& s = states[i];
    if (s.step == 0) continue;
    s.exp_avg = from_state(state, i, "exp_avg");
    s.exp_avg_sq = from_state(state, i, "exp_avg_sq");
    if (o.amsgrad) s.max_exp_avg_sq = from_state(state, i, "max_exp_avg_sq");
  }
  // The function is copied into std::function, so hold the arrays by shared pointer.
  auto moved = std::make_shared<std::vector<State>>(std::move(states));
  return [this, o, moved] {
    options_ = o;
    state_ = std::move(*moved);
  };
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
