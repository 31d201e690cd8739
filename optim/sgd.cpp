#include "optim/sgd.hpp"

#include <stdexcept>
#include <string>

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

}  // namespace

SGD::SGD(std::vector<Tensor> params, SGDOptions options)
    : Optimizer(std::move(params), "SGD"), options_(options), state_(params_.size()) {
  const SGDOptions& o = options_;
  if (!(o.lr >= 0))  // also catches the unset (NaN) default
    throw std::invalid_argument("SGD: invalid learning rate " + std::to_string(o.lr) +
                                " (lr is required and must be >= 0)");
  if (o.momentum < 0) throw std::invalid_argument("SGD: invalid momentum " + std::to_string(o.momentum));
  if (o.weight_decay < 0)
    throw std::invalid_argument("SGD: invalid weight_decay " + std::to_string(o.weight_decay));
  if (o.nesterov && (o.momentum <= 0 || o.dampening != 0))
    throw std::invalid_argument("SGD: Nesterov momentum requires a momentum and zero dampening");
}

void SGD::step() {
  check_grads();
  NoGradGuard no_grad;
  // Scalars in float, as PyTorch applies them to float32 tensors.
  const float lr = static_cast<float>(options_.lr);
  const float momentum = static_cast<float>(options_.momentum);
  const float keep = static_cast<float>(1 - options_.dampening);  // share of g entering buf
  const float weight_decay = static_cast<float>(options_.weight_decay);
  const bool nesterov = options_.nesterov;

  for (std::size_t i = 0; i < params_.size(); ++i) {
    Tensor& param = params_[i];
    if (param.grad().empty()) continue;
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

}  // namespace tg::optim
