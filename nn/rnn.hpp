// Recurrent layers, PyTorch's nn.GRU, nn.LSTM, nn.GRUCell and nn.LSTMCell: the
// same gates in the same order, the same weight names and shapes, so a PyTorch
// state dict (a safetensors file of it) loads and gives PyTorch's outputs.
//
//   tg::nn::GRU gru(10, 32, {.num_layers = 2, .batch_first = true});
//   auto [out, h_n] = gru(x);          // x [B, T, 10] -> out [B, T, 32], h_n [2, B, 32]
//   auto [out2, h2] = gru(x2, h_n);    // carry the state on
//
//   tg::nn::LSTM lstm(10, 32);
//   auto [y, h, c] = lstm(x_time_first);                    // x [T, B, 10]
//   auto [y2, h2, c2] = lstm(x2, tg::nn::LSTMState{h, c});
//
// A GRU step, from input x and state h (gates r, z, n; * is elementwise):
//   r = sigmoid(W_ir x + b_ir + W_hr h + b_hr)
//   z = sigmoid(W_iz x + b_iz + W_hz h + b_hz)
//   n = tanh(W_in x + b_in + r * (W_hn h + b_hn))
//   h' = (1 - z) * n + z * h
// An LSTM step (gates i, f, g, o): i, f, o sigmoids and g a tanh of
// W_i. x + b_i. + W_h. h + b_h.; c' = f * c + i * g; h' = o * tanh(c').
// weight_ih stacks the gates' input weights in that order ([3H, in] for a GRU,
// [4H, in] for an LSTM), weight_hh their state weights ([3H, H], [4H, H]).
//
// Every weight starts U(-1/sqrt(H), 1/sqrt(H)), as in PyTorch. A layer is a
// loop over time of the ops of core/ops.hpp (one product for every step's input
// projection, then one per step for the state), so the tape shows each step.
//
// Inputs are [T, B, in] (or [B, T, in] with batch_first), or [T, in] without a
// batch (then the states have no batch dim either). The state is [layers *
// directions, B, H] (never batch-first, as in PyTorch), zeros when not given.
// output holds the last layer's state at every step (both directions side by
// side, [.., 2H], when bidirectional); h_n (and c_n) the last step's state of
// every layer and direction. dropout > 0 drops each layer's output but the
// last's while training.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <vector>

#include "../core/factories.hpp"
#include "../core/tensor.hpp"
#include "module.hpp"

namespace tg::nn {

// One layer and direction's weights; the biases are absent when built without.
struct RNNWeights {
  Tensor weight_ih, weight_hh;
  std::optional<Tensor> bias_ih, bias_hh;
};

// An LSTM's state, h and c.
struct LSTMState {
  Tensor h, c;
};

// ---- cells: one step, input [B, in] (or [in]), state [B, H] (or [H])

class GRUCell : public Module {
 public:
  GRUCell(std::size_t input_size, std::size_t hidden_size, bool bias = true, Generator& gen = default_generator());
  Tensor forward(const Tensor& input) const override;  // from a zero state
  Tensor forward(const Tensor& input, const Tensor& hx) const;
  using Module::operator();
  Tensor operator()(const Tensor& input, const Tensor& hx) const { return forward(input, hx); }
  std::shared_ptr<Module> clone() const override;

  std::size_t input_size() const { return input_size_; }
  std::size_t hidden_size() const { return hidden_size_; }
  Tensor weight_ih, weight_hh;           // [3H, in], [3H, H]: r, z, n
  std::optional<Tensor> bias_ih, bias_hh;  // [3H]

 private:
  std::size_t input_size_, hidden_size_;
};

class LSTMCell : public Module {
 public:
  LSTMCell(std::size_t input_size, std::size_t hidden_size, bool bias = true, Generator& gen = default_generator());
  LSTMState forward(const Tensor& input, const std::optional<LSTMState>& state = std::nullopt) const;
  LSTMState operator()(const Tensor& input, const std::optional<LSTMState>& state = std::nullopt) const {
    return forward(input, state);
  }
  std::shared_ptr<Module> clone() const override;

  std::size_t input_size() const { return input_size_; }
  std::size_t hidden_size() const { return hidden_size_; }
  Tensor weight_ih, weight_hh;           // [4H, in], [4H, H]: i, f, g, o
  std::optional<Tensor> bias_ih, bias_hh;  // [4H]

 private:
  std::size_t input_size_, hidden_size_;
};

// ---- layers over a sequence

struct RNNOptions {
  std::size_t num_layers = 1;
  bool bias = true;
  bool batch_first = false;
  float dropout = 0.0f;  // on each layer's output but the last, while training
  bool bidirectional = false;
};
using GRUOptions = RNNOptions;
using LSTMOptions = RNNOptions;

// What GRU and LSTM share: the weights, named as PyTorch names them
// (weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0, then _reverse for the
// backward direction, then layer 1, ...), and the checks of inputs and states.
class RNNBase : public Module {
 public:
  std::size_t input_size() const { return input_size_; }
  std::size_t hidden_size() const { return hidden_size_; }
  const RNNOptions& options() const { return options_; }
  std::size_t directions() const { return options_.bidirectional ? 2 : 1; }
  // One per layer and direction, at [layer * directions() + direction].
  std::vector<RNNWeights> weights;

 protected:
  RNNBase(const char* name, std::size_t gates, std::size_t input_size, std::size_t hidden_size,
          const RNNOptions& options, Generator& gen);
  // The input as [T, B, in] and whether it had a batch dim; throws naming the layer.
  Tensor time_major(const Tensor& input, bool& batched) const;
  // A given state as [layers * directions, B, H], checked; zeros when not given.
  Tensor initial_state(const std::optional<Tensor>& state, const char* what, std::size_t batch, bool batched) const;
  // Runs `layer_pass` (one layer and direction over the whole sequence) for
  // every layer and direction, with dropout between layers; returns the output
  // as the caller gave the input.
  template <class Pass>
  Tensor run_layers(const Tensor& x, bool batched, Pass layer_pass) const;

  const char* name_;
  std::size_t input_size_, hidden_size_;
  RNNOptions options_;
  Generator gen_;  // dropout's masks (a handle: the generator the layer was built with)
};

struct GRUOutput {
  Tensor output, h_n;
};

class GRU : public RNNBase {
 public:
  GRU(std::size_t input_size, std::size_t hidden_size, const RNNOptions& options = {},
      Generator& gen = default_generator());
  GRUOutput forward(const Tensor& input, const std::optional<Tensor>& h0 = std::nullopt) const;
  GRUOutput operator()(const Tensor& input, const std::optional<Tensor>& h0 = std::nullopt) const {
    return forward(input, h0);
  }
  std::shared_ptr<Module> clone() const override;
};

struct LSTMOutput {
  Tensor output, h_n, c_n;
};

class LSTM : public RNNBase {
 public:
  LSTM(std::size_t input_size, std::size_t hidden_size, const RNNOptions& options = {},
       Generator& gen = default_generator());
  LSTMOutput forward(const Tensor& input, const std::optional<LSTMState>& state = std::nullopt) const;
  LSTMOutput operator()(const Tensor& input, const std::optional<LSTMState>& state = std::nullopt) const {
    return forward(input, state);
  }
  std::shared_ptr<Module> clone() const override;
};

}  // namespace tg::nn
