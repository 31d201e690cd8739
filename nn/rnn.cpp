// GRU, LSTM and their cells: PyTorch's gate order and weight names, layers and directions over time.
#include "rnn.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

#include "../core/ops.hpp"
#include "init.hpp"

namespace tg::nn {

namespace {

// Gate k of a [.., G H] tensor of G gates side by side.
Tensor gate(const Tensor& t, int64_t k, int64_t hidden) {
  return tg::narrow(t, -1, k * hidden, hidden);
}

// One GRU step from gi = W_ih x + b_ih (the input's part, computed beforehand)
// and the state h [B, H].
Tensor gru_step(const Tensor& gi, const Tensor& h, const RNNWeights& w) {
  const int64_t hidden = h.size(-1);
  const Tensor gh = tg::linear(h, w.weight_hh, w.bias_hh);  // [B, 3H]: r, z, n
  const Tensor r = tg::sigmoid(gate(gi, 0, hidden) + gate(gh, 0, hidden));
  const Tensor z = tg::sigmoid(gate(gi, 1, hidden) + gate(gh, 1, hidden));
  const Tensor n = tg::tanh(gate(gi, 2, hidden) + r * gate(gh, 2, hidden));
  return (1.0f - z) * n + z * h;
}

// One LSTM step from gi = W_ih x + b_ih and the state (h, c), each [B, H].
LSTMState lstm_step(const Tensor& gi, const LSTMState& s, const RNNWeights& w) {
  const int64_t hidden = s.h.size(-1);
  const Tensor gates = gi + tg::linear(s.h, w.weight_hh, w.bias_hh);  // [B, 4H]: i, f, g, o
  const Tensor i = tg::sigmoid(gate(gates, 0, hidden)), f = tg::sigmoid(gate(gates, 1, hidden));
  const Tensor g = tg::tanh(gate(gates, 2, hidden)), o = tg::sigmoid(gate(gates, 3, hidden));
  const Tensor c = f * s.c + i * g;
  return {o * tg::tanh(c), c};
}

const Tensor& hidden_of(const Tensor& h) {
  return h;
}
const Tensor& hidden_of(const LSTMState& s) {
  return s.h;
}

// One layer and direction over x [T, B, in]: the state at every step, [T, B, H]
// (in time order also when walking backwards); `state` ends as the last step's.
template <class State, class Step>
Tensor over_time(const Tensor& x, const RNNWeights& w, State& state, bool reverse, Step step) {
  const int64_t steps = x.size(0), batch = x.size(1);
  const Tensor gi = tg::linear(x, w.weight_ih, w.bias_ih);  // [T, B, G H]: every step's input part, one product
  std::vector<Tensor> outs(static_cast<std::size_t>(steps));
  for (int64_t k = 0; k < steps; ++k) {
    const int64_t t = reverse ? steps - 1 - k : k;
    state = step(tg::reshape(tg::narrow(gi, 0, t, 1), {batch, gi.size(2)}), state, w);
    outs[static_cast<std::size_t>(t)] = hidden_of(state);
  }
  return tg::stack(outs, 0);
}

// Registers one weight set under PyTorch's names (suffix: "_l0", "_l1_reverse", ...).
RNNWeights register_weights(Module& m, const char* layer, const std::string& suffix, std::size_t gates,
                            std::size_t input_size, std::size_t hidden_size, bool bias) {
  RNNWeights w;
  w.weight_ih = m.register_parameter("weight_ih" + suffix, Tensor(empty_array(layer, {gates * hidden_size, input_size})));
  w.weight_hh = m.register_parameter("weight_hh" + suffix, Tensor(empty_array(layer, {gates * hidden_size, hidden_size})));
  if (bias) {
    w.bias_ih = m.register_parameter("bias_ih" + suffix, Tensor(empty_array(layer, {gates * hidden_size})));
    w.bias_hh = m.register_parameter("bias_hh" + suffix, Tensor(empty_array(layer, {gates * hidden_size})));
  }
  return w;
}

// PyTorch's reset_parameters of every recurrent layer: U(+-1/sqrt(H)) for all.
void init_uniform(Module& m, std::size_t hidden_size, Generator& gen) {
  const float bound = 1.0f / std::sqrt(static_cast<float>(hidden_size));
  for (Tensor& p : m.parameters()) init::uniform_(p, -bound, bound, gen);
}

void check_sizes(const char* layer, std::size_t input_size, std::size_t hidden_size) {
  if (input_size == 0 || hidden_size == 0)
    throw std::invalid_argument(std::string(layer) + ": input_size " + std::to_string(input_size) +
                                " and hidden_size " + std::to_string(hidden_size) + " must be positive");
}

// A cell's input as [B, in] (batched tells whether it was) and its state as
// [B, H], checked against each other.
Tensor cell_input(const char* layer, const Tensor& input, std::size_t input_size, bool& batched) {
  if ((input.dim() != 1 && input.dim() != 2) || input.shape().back() != input_size)
    throw std::invalid_argument(std::string(layer) + ": expected input [B, " + std::to_string(input_size) + "] or [" +
                                std::to_string(input_size) + "]; got " + shape_str(input.shape()));
  batched = input.dim() == 2;
  return batched ? input : tg::reshape(input, {1, static_cast<int64_t>(input_size)});
}
Tensor cell_state(const char* layer, const char* what, const Tensor& state, const Tensor& x, bool batched,
                  std::size_t hidden_size) {
  const Shape want = batched ? Shape{x.shape()[0], hidden_size} : Shape{hidden_size};
  if (state.shape() != want)
    throw std::invalid_argument(std::string(layer) + ": " + what + " must be " + shape_str(want) + " for input " +
                                (batched ? shape_str(x.shape()) : shape_str(Shape{x.shape()[1]})) +
                                "; got " + shape_str(state.shape()));
  return batched ? state : tg::reshape(state, {1, static_cast<int64_t>(hidden_size)});
}
Tensor as_given(const Tensor& h, bool batched) {  // [1, H] back to [H] for an input without a batch dim
  return batched ? h : tg::reshape(h, {h.size(1)});
}

}  // namespace

// -------------------------------------------------------------------- cells

GRUCell::GRUCell(std::size_t input_size, std::size_t hidden_size, bool bias, Generator& gen)
    : input_size_(input_size), hidden_size_(hidden_size) {
  check_sizes("GRUCell", input_size, hidden_size);
  RNNWeights w = register_weights(*this, "GRUCell", "", 3, input_size, hidden_size, bias);
  weight_ih = w.weight_ih, weight_hh = w.weight_hh, bias_ih = w.bias_ih, bias_hh = w.bias_hh;
  init_uniform(*this, hidden_size, gen);
}

Tensor GRUCell::forward(const Tensor& input) const {
  bool batched;
  const Tensor x = cell_input("GRUCell", input, input_size_, batched);
  return forward(input, batched ? zeros({x.shape()[0], hidden_size_}) : zeros({hidden_size_}));
}

Tensor GRUCell::forward(const Tensor& input, const Tensor& hx) const {
  bool batched;
  const Tensor x = cell_input("GRUCell", input, input_size_, batched);
  const Tensor h = cell_state("GRUCell", "hx", hx, x, batched, hidden_size_);
  return as_given(gru_step(tg::linear(x, weight_ih, bias_ih), h, {weight_ih, weight_hh, bias_ih, bias_hh}), batched);
}

std::shared_ptr<Module> GRUCell::clone() const {
  Generator unused;  // the values are copied over the fresh initialisation
  return copy_into(std::make_shared<GRUCell>(input_size_, hidden_size_, bias_ih.has_value(), unused));
}

LSTMCell::LSTMCell(std::size_t input_size, std::size_t hidden_size, bool bias, Generator& gen)
    : input_size_(input_size), hidden_size_(hidden_size) {
  check_sizes("LSTMCell", input_size, hidden_size);
  RNNWeights w = register_weights(*this, "LSTMCell", "", 4, input_size, hidden_size, bias);
  weight_ih = w.weight_ih, weight_hh = w.weight_hh, bias_ih = w.bias_ih, bias_hh = w.bias_hh;
  init_uniform(*this, hidden_size, gen);
}

LSTMState LSTMCell::forward(const Tensor& input, const std::optional<LSTMState>& state) const {
  bool batched;
  const Tensor x = cell_input("LSTMCell", input, input_size_, batched);
  const Shape zero_shape = batched ? Shape{x.shape()[0], hidden_size_} : Shape{hidden_size_};
  const Tensor h = cell_state("LSTMCell", "h", state ? state->h : zeros(zero_shape), x, batched, hidden_size_);
  const Tensor c = cell_state("LSTMCell", "c", state ? state->c : zeros(zero_shape), x, batched, hidden_size_);
  const LSTMState next = lstm_step(tg::linear(x, weight_ih, bias_ih), {h, c}, {weight_ih, weight_hh, bias_ih, bias_hh});
  return {as_given(next.h, batched), as_given(next.c, batched)};
}

std::shared_ptr<Module> LSTMCell::clone() const {
  Generator unused;
  return copy_into(std::make_shared<LSTMCell>(input_size_, hidden_size_, bias_ih.has_value(), unused));
}

// ------------------------------------------------------------------- layers

RNNBase::RNNBase(const char* name, std::size_t gates, std::size_t input_size, std::size_t hidden_size,
                 const RNNOptions& options, Generator& gen)
    : name_(name), input_size_(input_size), hidden_size_(hidden_size), options_(options), gen_(gen) {
  check_sizes(name, input_size, hidden_size);
  if (options.num_layers == 0) throw std::invalid_argument(std::string(name) + ": num_layers must be positive");
  if (!(options.dropout >= 0.0f && options.dropout <= 1.0f))
    throw std::invalid_argument(std::string(name) + ": dropout must be in [0, 1]; got " +
                                std::to_string(options.dropout));
  for (std::size_t layer = 0; layer < options.num_layers; ++layer)
    for (std::size_t dir = 0; dir < directions(); ++dir) {
      const std::size_t in = layer == 0 ? input_size : hidden_size * directions();
      const std::string suffix = "_l" + std::to_string(layer) + (dir == 1 ? "_reverse" : "");
      weights.push_back(register_weights(*this, name, suffix, gates, in, hidden_size, options.bias));
    }
  init_uniform(*this, hidden_size, gen);
}

Tensor RNNBase::time_major(const Tensor& input, bool& batched) const {
  const std::string want = std::string(options_.batch_first ? "[B, T, " : "[T, B, ") + std::to_string(input_size_) +
                           "] or [T, " + std::to_string(input_size_) + "]";
  if ((input.dim() != 2 && input.dim() != 3) || input.shape().back() != input_size_)
    throw std::invalid_argument(std::string(name_) + ": expected input " + want + "; got " + shape_str(input.shape()));
  batched = input.dim() == 3;
  const int64_t steps = input.size(batched && options_.batch_first ? 1 : 0);
  if (steps == 0 || (batched && input.numel() == 0))
    throw std::invalid_argument(std::string(name_) + ": input " + shape_str(input.shape()) + " is empty");
  if (!batched) return tg::reshape(input, {steps, 1, static_cast<int64_t>(input_size_)});
  return options_.batch_first ? tg::transpose(input, 0, 1) : input;
}

Tensor RNNBase::initial_state(const std::optional<Tensor>& state, const char* what, std::size_t batch,
                              bool batched) const {
  const std::size_t count = options_.num_layers * directions();
  if (!state) return zeros({count, batch, hidden_size_});
  const Shape want = batched ? Shape{count, batch, hidden_size_} : Shape{count, hidden_size_};
  if (state->shape() != want)
    throw std::invalid_argument(std::string(name_) + ": " + what + " must be " + shape_str(want) +
                                " ([num_layers * directions, " + (batched ? "B, " : "") + "hidden_size]); got " +
                                shape_str(state->shape()));
  return batched ? *state : tg::reshape(*state, {static_cast<int64_t>(count), 1, static_cast<int64_t>(hidden_size_)});
}

template <class Pass>
Tensor RNNBase::run_layers(const Tensor& x, bool batched, Pass layer_pass) const {
  Tensor in = x;
  for (std::size_t layer = 0; layer < options_.num_layers; ++layer) {
    std::vector<Tensor> outs;  // [T, B, H] per direction
    for (std::size_t dir = 0; dir < directions(); ++dir) outs.push_back(layer_pass(in, layer * directions() + dir, dir == 1));
    in = outs.size() == 1 ? outs[0] : tg::cat(outs, 2);
    if (layer + 1 < options_.num_layers && options_.dropout > 0.0f) {
      Generator gen = gen_;  // a handle: draws move gen_ too
      in = tg::dropout(in, options_.dropout, is_training(), gen);
    }
  }
  if (!batched) return tg::reshape(in, {in.size(0), in.size(2)});  // [T, 1, D H] -> [T, D H]
  return options_.batch_first ? tg::transpose(in, 0, 1) : in;
}

// The last states of every layer and direction, [L D, B, H] (or [L D, H]).
static Tensor stacked(const std::vector<Tensor>& last, bool batched) {
  const Tensor s = tg::stack(last, 0);
  return batched ? s : tg::reshape(s, {s.size(0), s.size(2)});
}

GRU::GRU(std::size_t input_size, std::size_t hidden_size, const RNNOptions& options, Generator& gen)
    : RNNBase("GRU", 3, input_size, hidden_size, options, gen) {}

GRUOutput GRU::forward(const Tensor& input, const std::optional<Tensor>& h0) const {
  bool batched;
  const Tensor x = time_major(input, batched);
  const int64_t batch = x.size(1), hidden = static_cast<int64_t>(hidden_size_);
  const Tensor h = initial_state(h0, "h0", static_cast<std::size_t>(batch), batched);
  std::vector<Tensor> last(weights.size());
  const Tensor out = run_layers(x, batched, [&](const Tensor& in, std::size_t index, bool reverse) {
    Tensor state = tg::reshape(tg::narrow(h, 0, static_cast<int64_t>(index), 1), {batch, hidden});
    Tensor y = over_time(in, weights[index], state, reverse, gru_step);
    last[index] = state;
    return y;
  });
  return {out, stacked(last, batched)};
}

std::shared_ptr<Module> GRU::clone() const {
  Generator scratch;  // draws the fresh weights, which copy_into overwrites
  auto fresh = std::make_shared<GRU>(input_size_, hidden_size_, options_, scratch);
  fresh->gen_ = gen_;  // the same dropout generator, as Dropout::clone
  return copy_into(fresh);
}

LSTM::LSTM(std::size_t input_size, std::size_t hidden_size, const RNNOptions& options, Generator& gen)
    : RNNBase("LSTM", 4, input_size, hidden_size, options, gen) {}

LSTMOutput LSTM::forward(const Tensor& input, const std::optional<LSTMState>& state) const {
  bool batched;
  const Tensor x = time_major(input, batched);
  const int64_t batch = x.size(1), hidden = static_cast<int64_t>(hidden_size_);
  const Tensor h = initial_state(state ? std::optional<Tensor>(state->h) : std::nullopt, "h0",
                                 static_cast<std::size_t>(batch), batched);
  const Tensor c = initial_state(state ? std::optional<Tensor>(state->c) : std::nullopt, "c0",
                                 static_cast<std::size_t>(batch), batched);
  std::vector<Tensor> last_h(weights.size()), last_c(weights.size());
  const Tensor out = run_layers(x, batched, [&](const Tensor& in, std::size_t index, bool reverse) {
    auto at = [&](const Tensor& s) { return tg::reshape(tg::narrow(s, 0, static_cast<int64_t>(index), 1), {batch, hidden}); };
    LSTMState s{at(h), at(c)};
    Tensor y = over_time(in, weights[index], s, reverse, lstm_step);
    last_h[index] = s.h;
    last_c[index] = s.c;
    return y;
  });
  return {out, stacked(last_h, batched), stacked(last_c, batched)};
}

std::shared_ptr<Module> LSTM::clone() const {
  Generator scratch;
  auto fresh = std::make_shared<LSTM>(input_size_, hidden_size_, options_, scratch);
  fresh->gen_ = gen_;
  return copy_into(fresh);
}

}  // namespace tg::nn
