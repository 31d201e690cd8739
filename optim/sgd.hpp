// SGD: stochastic gradient descent with optional momentum, dampening, Nesterov
// momentum and weight decay, as torch.optim.SGD (PyTorch 1.13).
//
//   tg::optim::SGD sgd(model.parameters(), {.lr = 0.1, .momentum = 0.9});
//
// Dense gradient g of a parameter p (PyTorch's formula, lr required; PyTorch's
// AVX2 kernels compute p - lr * g as one fused multiply-add, so a value can
// differ from PyTorch's by a rounding: tests/test_optim.cpp counts how often):
//
//   g   = g + weight_decay * p
//   buf = g                                      on the parameter's first step
//   buf = momentum * buf + (1 - dampening) * g   after that      (momentum != 0)
//   g   = nesterov ? g + momentum * buf : buf                    (momentum != 0)
//   p   = p - lr * g
//
// SparseRows gradient: the same formula, applied lazily, row by row, to the rows
// the gradient lists. For each listed row r:
//
//   g_r   = g_r + weight_decay * p_r
//   buf_r = g_r                                        the first time row r is listed
//   buf_r = momentum * buf_r + (1 - dampening) * g_r   later times
//   g_r   = nesterov ? g_r + momentum * buf_r : buf_r
//   p_r   = p_r - lr * g_r
//
// A row that is not listed is not touched at all: its value, its momentum buffer
// and its weight decay wait until a gradient lists it again, however many steps
// that takes. A row never listed keeps its initial value and a zero buffer. Each
// row remembers whether it has been listed, so a sparse gradient that lists every
// row at every step gives exactly the dense result. Without momentum and weight
// decay, the lazy update equals the dense one (an absent row's gradient is 0).
//
// Where this differs from PyTorch:
//   - Sparse gradients with weight decay: PyTorch 1.13 raises ("add(sparse, dense)
//     is not supported", pytorch#30402); we decay the listed rows only.
//   - Sparse gradients with momentum: PyTorch 1.13 keeps a sparse buffer and
//     applies it to every row it holds at every step, which is the dense result:
//     a row keeps moving after it leaves the batch. Ours is lazy (above).
//   - Parameter groups set their own lr and weight_decay only; momentum,
//     dampening and nesterov are the optimizer's (PyTorch lets a group set any).
//   - No `maximize`, `foreach` or `differentiable` options.
//   - Momentum state is a dense buffer as large as the parameter plus one flag per
//     row, allocated at the first step with a gradient (none when momentum == 0).
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "state.hpp"

namespace tg::optim {

struct SGDOptions {
  // Required, as in PyTorch: left unset (NaN), the SGD constructor throws.
  double lr = std::numeric_limits<double>::quiet_NaN();
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;  // needs momentum > 0 and dampening == 0
};

// SGD's state of one parameter, made at its first step with momentum; its
// fields are declared once, in SGD::state_fields.
struct SGDState {
  Array momentum_buffer;          // in the parameter's shape
  std::vector<uint8_t> row_seen;  // row_seen[r]: row r's buffer holds a gradient
};

class SGD : public OptimizerWithState<SGDOptions, SGDState> {
 public:
  // Throws std::invalid_argument for lr unset or < 0, momentum < 0,
  // weight_decay < 0, or nesterov without momentum or with dampening.
  SGD(std::vector<Tensor> params, SGDOptions options);
  // Groups with their own lr / weight_decay; options.lr (still required) and
  // options.weight_decay are the defaults for groups that leave them unset.
  // options() are the options given here; load_state_dict() replaces
  // momentum, dampening and nesterov.
  SGD(std::vector<ParamGroup> groups, SGDOptions options);

  void step() override;

 protected:
  std::vector<StateField<SGDState>> state_fields(const SGDOptions& options) const override;
  std::string options_json() const override;
  SGDOptions options_from_json(const std::string& text) const override;
};

}  // namespace tg::optim
