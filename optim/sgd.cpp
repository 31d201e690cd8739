#include "sgd.hpp"

#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "../core/read_json.hpp"

#include "../core/dispatch.hpp"

namespace tg::optim {

namespace {

// p -= lr * g over one row: the whole update without momentum or weight decay
// (the embedding's usual case, row after scattered row). Also compiled for AVX2
// (core/dispatch.hpp), which gives the same bits, two multiplies and subtracts
// rounded as written; tests/test_optim.cpp checks them against this formula.
TG_ALSO_FOR_AVX2 void sgd_row(float* p, const float* g, float lr, std::size_t cols) {
  for (std::size_t c = 0; c < cols; ++c) p[c] -= lr * g[c];
}

// Checks the options before anything else is built; throws std::invalid_argument.
const SGDOptions& checked(const SGDOptions& o) {
  if (!(o.lr >= 0))  // also catches the unset (NaN) default
    throw std::invalid_argument("SGD: invalid learning rate " + std::to_string(o.lr) +
                                " (lr is required and must be >= 0)");
  if (!(o.momentum >= 0)) throw std::invalid_argument("SGD: invalid momentum " + std::to_string(o.momentum));
  if (!(o.weight_decay >= 0))
    throw std::invalid_argument("SGD: invalid weight_decay " + std::to_string(o.weight_decay));
  if (o.nesterov && (o.momentum <= 0 || o.dampening != 0))
    throw std::invalid_argument("SGD: Nesterov momentum requires a momentum and zero dampening");
  return o;
}

}  // namespace

SGD::SGD(std::vector<Tensor> params, SGDOptions options) : SGD(one_group(std::move(params)), options) {}

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions options)
    : OptimizerWithState(std::move(groups), "SGD", checked(options)) {}

// SGD's state and options, declared once: state_dict(), load_state_dict(),
// state_bytes() and the shape checks of step() work from these lists.
std::vector<StateField<SGDState>> SGD::state_fields(const SGDOptions& o) const {
  if (o.momentum == 0) return {};  // no state at all
  return {{"momentum_buffer", &SGDState::momentum_buffer}, {"row_seen", &SGDState::row_seen}};
}

// The options saved in "options" (lr and weight_decay are the groups').
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(SGDOptions, momentum, dampening, nesterov)

std::string SGD::options_json() const {
  return nlohmann::json(options_).dump();
}

SGDOptions SGD::options_from_json(const std::string& text) const {
  SGDOptions o = options_;
  std::string why;
  const nlohmann::json j = detail::parse_json(text, why);
  if (j.is_discarded()) throw std::invalid_argument("the text " + why);
  j.get_to(o);
  return checked(o);
}

void SGD::step() {
  check_step();
  NoGradGuard no_grad;
  // Scalars in float, as PyTorch applies them to float32 tensors.
  const float momentum = static_cast<float>(options_.momentum);
  const float keep = static_cast<float>(1 - options_.dampening);  // share of g entering buf
  const bool nesterov = options_.nesterov;

  for (std::size_t i = 0; i < params_.size(); ++i) {
    Tensor& param = params_[i];
    if (param.grad().empty()) continue;
    const ParamGroup& group = groups_[group_of_[i]];
    const float lr = static_cast<float>(*group.lr);
    const float weight_decay = static_cast<float>(*group.weight_decay);
    const Shape shape = param.shape();
    const std::size_t rows = num_rows(shape), cols = row_size(shape);
    if (momentum != 0 && !state_[i]) state_[i] = SGDState{zero_state(shape), std::vector<uint8_t>(rows, 0)};
    SGDState* state = momentum != 0 ? &*state_[i] : nullptr;
    float* values = param.value_mut().data();

    const std::array<float*, 2> touched{values, state ? state->momentum_buffer.data() : nullptr};
    for_each_row(param.grad(), rows, cols, touched, [&](std::size_t r, const float* g) {
      float* p = values + r * cols;
      if (!state) {
        if (weight_decay == 0)  // as PyTorch: no weight_decay * p term at all (p may be inf)
          sgd_row(p, g, lr, cols);
        else
          for (std::size_t c = 0; c < cols; ++c) p[c] -= lr * (g[c] + weight_decay * p[c]);
        return;
      }
      float* buf = state->momentum_buffer.data() + r * cols;
      const bool first = !state->row_seen[r];
      for (std::size_t c = 0; c < cols; ++c) {
        float d = weight_decay == 0 ? g[c] : g[c] + weight_decay * p[c];  // no 0 * p term, as above
        buf[c] = first ? d : momentum * buf[c] + keep * d;
        d = nesterov ? d + momentum * buf[c] : buf[c];
        p[c] -= lr * d;
      }
      state->row_seen[r] = 1;
    });
  }
}

}  // namespace tg::optim
