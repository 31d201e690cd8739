#include "optim/sgd.hpp"

#include <memory>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "core/dispatch.hpp"

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
    : Optimizer(std::move(groups), "SGD", checked(options).lr, options.weight_decay),
      options_(options),
      state_(params_.size()) {}

void SGD::step() {
  check_grads();
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
    State& state = state_[i];
    if (momentum != 0 && state.row_seen.size() != rows) {
      state.momentum_buffer = zero_state(rows, cols);
      state.row_seen.assign(rows, 0);
    }
    float* values = param.value_mut().data();

    const std::array<float*, 2> touched{values, momentum != 0 ? state.momentum_buffer.data() : nullptr};
    for_each_row(param.grad(), rows, cols, touched, [&](std::size_t r, const float* g) {
      float* p = values + r * cols;
      if (momentum == 0) {
        if (weight_decay == 0)  // as PyTorch: no weight_decay * p term at all (p may be inf)
          sgd_row(p, g, lr, cols);
        else
          for (std::size_t c = 0; c < cols; ++c) p[c] -= lr * (g[c] + weight_decay * p[c]);
        return;
      }
      float* buf = state.momentum_buffer.data() + r * cols;
      const bool first = !state.row_seen[r];
      for (std::size_t c = 0; c < cols; ++c) {
        float d = weight_decay == 0 ? g[c] : g[c] + weight_decay * p[c];  // no 0 * p term, as above
        buf[c] = first ? d : momentum * buf[c] + keep * d;
        d = nesterov ? d + momentum * buf[c] : buf[c];
        p[c] -= lr * d;
      }
      state.row_seen[r] = 1;
    });
  }
}

std::size_t SGD::state_bytes() const {
  std::size_t n = 0;
  for (const State& s : state_)
    n += s.momentum_buffer.size() * sizeof(float) + s.row_seen.size() * sizeof(uint8_t);
  return n;
}

// ---------------------------------------------------------------- state

void SGD::save_state(StateDict& out) const {
  const SGDOptions& o = options_;
  out.metadata["options"] =
      nlohmann::json{{"momentum", o.momentum}, {"dampening", o.dampening}, {"nesterov", o.nesterov}}.dump();
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const State& s = state_[i];
    if (s.row_seen.empty()) continue;  // no buffer yet (or no momentum)
    const std::string prefix = "state." + std::to_string(i) + ".";
    out.tensors[prefix + "momentum_buffer"] = to_param_shape(s.momentum_buffer, params_[i].shape());
    Array seen = xt::empty<float>({s.row_seen.size()});  // the flags as 0.0 / 1.0 (see optimizer.hpp)
    std::copy(s.row_seen.begin(), s.row_seen.end(), seen.begin());
    out.tensors[prefix + "row_seen"] = std::move(seen);
  }
}

std::function<void()> SGD::prepare_load(const StateDict& state) {
  // The options: the saved momentum, dampening and nesterov replace ours, as in PyTorch.
  const auto text = state.metadata.find("options");
  if (text == state.metadata.end()) fail_load("no \"options\" entry");
  const nlohmann::json j = nlohmann::json::parse(text->second, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("momentum") || !j["momentum"].is_number() || !j.contains("dampening") ||
      !j["dampening"].is_number() || !j.contains("nesterov") || !j["nesterov"].is_boolean())
    fail_load("\"options\" is not {\"momentum\": m, \"dampening\": d, \"nesterov\": bool}: " + text->second);
  SGDOptions o = options_;
  o.momentum = j["momentum"].get<double>();
  o.dampening = j["dampening"].get<double>();
  o.nesterov = j["nesterov"].get<bool>();
  try {
    checked(o);
  } catch (const std::invalid_argument& e) {
    fail_load(std::string("\"options\": ") + e.what());
  }
  for (const auto& [key, value] : state.metadata)
    if (key.rfind("state.", 0) == 0)
      fail_load("unexpected metadata entry '" + key + "' (SGD keeps no step count)");

  // Each parameter: a momentum buffer and its row flags, or nothing at all.
  check_known_tensors(state, [&](std::size_t, const std::string& name) {
    return o.momentum != 0 && (name == "momentum_buffer" || name == "row_seen");
  });
  std::vector<State> states(params_.size());
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const std::string prefix = "state." + std::to_string(i) + ".";
    const bool has_buffer = state.tensors.count(prefix + "momentum_buffer") > 0;
    const auto seen = state.tensors.find(prefix + "row_seen");
    if (!has_buffer && seen == state.tensors.end()) continue;
    State& s = states[i];
    s.momentum_buffer = from_state(state, i, "momentum_buffer");
    if (seen == state.tensors.end()) fail_load("missing tensor '" + prefix + "row_seen'");
    const std::size_t rows = num_rows(params_[i].shape());
    const Shape seen_shape(seen->second.shape().begin(), seen->second.shape().end());
    if (seen_shape != Shape{rows})
      fail_load("tensor '" + prefix + "row_seen' has shape " + shape_str(seen_shape) + ", not [" +
                std::to_string(rows) + "]");
    for (std::size_t r = 0; r < rows; ++r) {
      const float flag = seen->second.data()[r];
      if (flag != 0.0f && flag != 1.0f)
        fail_load("tensor '" + prefix + "row_seen' holds " + std::to_string(flag) + " at row " +
                  std::to_string(r) + "; its flags are 0 or 1");
      s.row_seen.push_back(static_cast<uint8_t>(flag));
    }
  }
  // The function is copied into std::function, so hold the arrays by shared pointer.
  auto moved = std::make_shared<std::vector<State>>(std::move(states));
  return [this, o, moved] {
    options_ = o;
    state_ = std::move(*moved);
  };
}

}  // namespace tg::optim
