// GRU, LSTM, GRUCell and LSTMCell: parity with PyTorch's (tests/data/layers_reference.json,
// from tests/tools/gen_layers_reference.py: weight names, outputs, last states,
// gradients of the weights, the input and the initial state), a checkpoint
// PyTorch wrote (tests/data/rnn_reference.safetensors) giving PyTorch's outputs,
// gradchecks, and the errors for inputs and states of the wrong shape.
#include <doctest/doctest.h>

#include <tapegrad/tapegrad.hpp>

#include "helpers.hpp"

using tg::Array;
using tg::Tensor;
using J = nlohmann::json;
using tg::test::to_array;
namespace nn = tg::nn;

namespace {

const J& rnn_case(const std::string& name) {
  return tg::test::reference(std::string("layers_reference")).at("rnns").at(name);
}

// Runs the module of case `name` (the same layer as the PyTorch model of the
// case) on x and the case's state tensors; returns what PyTorch's returns, in
// its order: [h'] for a GRU cell, [h', c'] for an LSTM cell, [output, h_n]
// for a GRU, [output, h_n, c_n] for an LSTM.
struct Case {
  std::shared_ptr<nn::Module> module;
  std::function<std::vector<Tensor>(const Tensor&, const std::vector<Tensor>&)> run;
};

Case build(const std::string& name) {
  if (name.rfind("gru_cell", 0) == 0) {
    auto m = std::make_shared<nn::GRUCell>(4, 5, name == "gru_cell");
    return {m, [m](const Tensor& x, const std::vector<Tensor>& s) { return std::vector<Tensor>{(*m)(x, s[0])}; }};
  }
  if (name.rfind("lstm_cell", 0) == 0) {
    auto m = name == "lstm_cell" ? std::make_shared<nn::LSTMCell>(4, 5) : std::make_shared<nn::LSTMCell>(3, 2);
    return {m, [m](const Tensor& x, const std::vector<Tensor>& s) {
              auto [h, c] = s.empty() ? (*m)(x) : (*m)(x, nn::LSTMState{s[0], s[1]});
              return std::vector<Tensor>{h, c};
            }};
  }
  if (name.rfind("gru", 0) == 0) {
    std::shared_ptr<nn::GRU> m;
    if (name == "gru") m = std::make_shared<nn::GRU>(4, 5);
    if (name == "gru_2layers_batch_first_h0")
      m = std::make_shared<nn::GRU>(4, 5, nn::GRUOptions{.num_layers = 2, .batch_first = true});
    if (name == "gru_bidirectional_2layers")
      m = std::make_shared<nn::GRU>(3, 4, nn::GRUOptions{.num_layers = 2, .bidirectional = true});
    if (name == "gru_unbatched") m = std::make_shared<nn::GRU>(3, 4, nn::GRUOptions{.num_layers = 2});
    return {m, [m](const Tensor& x, const std::vector<Tensor>& s) {
              auto [out, h] = s.empty() ? (*m)(x) : (*m)(x, s[0]);
              return std::vector<Tensor>{out, h};
            }};
  }
  std::shared_ptr<nn::LSTM> m;
  if (name == "lstm") m = std::make_shared<nn::LSTM>(4, 5);
  if (name == "lstm_2layers_batch_first_state")
    m = std::make_shared<nn::LSTM>(4, 5, nn::LSTMOptions{.num_layers = 2, .bias = false, .batch_first = true});
  if (name == "lstm_bidirectional")
    m = std::make_shared<nn::LSTM>(3, 4, nn::LSTMOptions{.batch_first = true, .bidirectional = true});
  REQUIRE(m);
  return {m, [m](const Tensor& x, const std::vector<Tensor>& s) {
            auto [out, h, c] = s.empty() ? (*m)(x) : (*m)(x, nn::LSTMState{s[0], s[1]});
            return std::vector<Tensor>{out, h, c};
          }};
}

// PyTorch's state dict (names in its order) into the module, after checking
// that the module lists the same names in the same order.
void load(nn::Module& m, const J& state_dict) {
  std::vector<std::string> ours, theirs;
  for (const auto& [name, t] : m.named_parameters()) ours.push_back(name);
  tg::StateDict state;
  for (const auto& p : state_dict) {
    theirs.push_back(p[0].get<std::string>());
    state[theirs.back()] = to_array(p[1]);
  }
  CHECK(ours == theirs);
  m.load_state_dict(state);
}

tg::Generator gen(7);

}  // namespace

TEST_SUITE("nn.rnn") {
  TEST_CASE("PyTorch parity: GRU and LSTM layers and cells, outputs, states and every gradient") {
    for (const std::string name :
         {"gru_cell", "gru_cell_unbatched_nobias", "lstm_cell", "lstm_cell_zero_state", "gru",
          "gru_2layers_batch_first_h0", "gru_bidirectional_2layers", "gru_unbatched", "lstm",
          "lstm_2layers_batch_first_state", "lstm_bidirectional"}) {
      CAPTURE(name);
      const J& c = rnn_case(name);
      Case m = build(name);
      load(*m.module, c.at("state_dict"));
      Tensor x(to_array(c.at("input")), true);
      std::vector<Tensor> state;
      if (c.contains("state"))
        for (const J& s : c["state"]) state.emplace_back(to_array(s), true);
      const std::vector<Tensor> outs = m.run(x, state);
      REQUIRE(outs.size() == c.at("outs").size());
      Tensor loss = tg::zeros({});
      for (std::size_t i = 0; i < outs.size(); ++i) {
        CHECK_ALLCLOSE(outs[i].value(), to_array(c["outs"][i]), 1e-5, 1e-6);
        loss = loss + tg::sum(outs[i] * Tensor(to_array(c["ws"][i])));
      }
      loss.backward();
      CHECK_ALLCLOSE(x.grad_dense(), to_array(c.at("grad_input")), 1e-4, 1e-6);
      for (std::size_t i = 0; i < state.size(); ++i)
        CHECK_ALLCLOSE(state[i].grad_dense(), to_array(c.at("grad_state")[i]), 1e-4, 1e-6);
      const auto params = m.module->named_parameters();
      for (std::size_t i = 0; i < params.size(); ++i) {
        CAPTURE(params[i].first);
        CHECK_ALLCLOSE(params[i].second.grad_dense(), to_array(c.at("grads")[i][1]), 1e-4, 1e-6);
      }
    }
  }

  TEST_CASE("a GRU and an LSTM checkpoint written by PyTorch load through safetensors and give its outputs") {
    const J& c = tg::test::reference(std::string("layers_reference")).at("checkpoint");
    const tg::StateDict file = tg::load_safetensors(tg::test::source_path("tests/data/rnn_reference.safetensors"));
    auto part = [&](const std::string& prefix) {
      tg::StateDict s;
      for (const auto& [name, value] : file)
        if (name.rfind(prefix, 0) == 0) s[name.substr(prefix.size())] = value;
      return s;
    };
    nn::GRU gru(5, 8, {.num_layers = 2, .batch_first = true});
    gru.load_state_dict(part("gru."));
    nn::LSTM lstm(5, 6, {.num_layers = 2, .bidirectional = true});
    lstm.load_state_dict(part("lstm."));
    CHECK(file.size() == gru.state_dict().size() + lstm.state_dict().size());

    tg::NoGradGuard no_grad;
    auto [out, h_n] = gru(Tensor(to_array(c.at("gru_input"))));
    CHECK_ALLCLOSE(out.value(), to_array(c.at("gru_output")), 0.0, 1e-5);
    CHECK_ALLCLOSE(h_n.value(), to_array(c.at("gru_h_n")), 0.0, 1e-5);
    auto [y, h, cell] = lstm(Tensor(to_array(c.at("lstm_input"))));
    CHECK(y.shape() == tg::Shape{7, 3, 12});
    CHECK_ALLCLOSE(y.value(), to_array(c.at("lstm_output")), 0.0, 1e-5);
    CHECK_ALLCLOSE(h.value(), to_array(c.at("lstm_h_n")), 0.0, 1e-5);
    CHECK_ALLCLOSE(cell.value(), to_array(c.at("lstm_c_n")), 0.0, 1e-5);
  }

  TEST_CASE("PyTorch's weight names and shapes, in its order; U(+-1/sqrt(H)) initial weights") {
    nn::LSTM lstm(3, 4, {.num_layers = 2, .bidirectional = true}, gen);
    std::vector<std::string> names;
    for (const auto& [name, t] : lstm.named_parameters()) names.push_back(name);
    CHECK(names == std::vector<std::string>{"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0",
                                            "weight_ih_l0_reverse", "weight_hh_l0_reverse", "bias_ih_l0_reverse",
                                            "bias_hh_l0_reverse", "weight_ih_l1", "weight_hh_l1", "bias_ih_l1",
                                            "bias_hh_l1", "weight_ih_l1_reverse", "weight_hh_l1_reverse",
                                            "bias_ih_l1_reverse", "bias_hh_l1_reverse"});
    CHECK(lstm.weights[2].weight_ih.shape() == tg::Shape{16, 8});  // layer 1 reads both directions
    CHECK(lstm.weights[3].weight_hh.shape() == tg::Shape{16, 4});
    CHECK(lstm.weights[3].weight_hh.is_same(lstm.named_parameters()[13].second));
    for (const Tensor& p : lstm.parameters())
      for (float v : p.to_vector()) CHECK(std::abs(v) <= 0.5f);  // 1 / sqrt(4)
    nn::GRUCell cell(2, 3, false, gen);
    CHECK(cell.named_parameters().size() == 2);
    CHECK(cell.weight_ih.shape() == tg::Shape{9, 2});
  }

  TEST_CASE("gradcheck: a GRU and an LSTM over a short sequence, the initial state included") {
    nn::GRU gru(2, 3, {.num_layers = 2, .bidirectional = true}, gen);
    tg::test::check_grad(
        [&](const std::vector<Tensor>& in) {
          auto [out, h] = gru(in[0], in[1]);
          return tg::sum(out * out) + tg::sum(h);
        },
        {tg::randn({4, 2, 2}, gen, true), tg::randn({4, 2, 3}, gen, true)});
    nn::LSTM lstm(2, 3, {.batch_first = true}, gen);
    tg::test::check_grad(
        [&](const std::vector<Tensor>& in) {
          auto [out, h, c] = lstm(in[0], nn::LSTMState{in[1], in[2]});
          return tg::sum(out * out) + tg::sum(c);
        },
        {tg::randn({2, 4, 2}, gen, true), tg::randn({1, 2, 3}, gen, true), tg::randn({1, 2, 3}, gen, true)});
    // a weight, through every step: weight_hh_l0 of the GRU
    tg::test::check_grad(
        [&](const std::vector<Tensor>&) {
          auto [out, h] = gru(tg::ones({3, 1, 2}));
          return tg::sum(out * out);
        },
        {gru.weights[0].weight_hh});
  }

  TEST_CASE("dropout between layers: only while training; eval gives the same output twice") {
    nn::GRU gru(3, 4, {.num_layers = 2, .dropout = 0.5f}, gen);
    const Tensor x = tg::randn({5, 2, 3}, gen);
    gru.eval();
    CHECK(gru(x).output.to_vector() == gru(x).output.to_vector());
    gru.train();
    CHECK(gru(x).output.to_vector() != gru(x).output.to_vector());
    std::shared_ptr<nn::Module> copy = gru.clone();
    copy->eval();
    gru.eval();
    CHECK(std::static_pointer_cast<nn::GRU>(copy)->forward(x).output.to_vector() == gru(x).output.to_vector());
  }

  TEST_CASE("inputs and states of the wrong shape throw naming the layer and the shapes") {
    nn::GRU gru(3, 4, {.num_layers = 2, .batch_first = true});
    CHECK_THROWS_WITH_AS(gru(tg::zeros({2, 5, 4})), "GRU: expected input [B, T, 3] or [T, 3]; got [2, 5, 4]",
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(gru(tg::zeros({2, 5, 3}), tg::zeros({1, 2, 4})),
                         "GRU: h0 must be [2, 2, 4] ([num_layers * directions, B, hidden_size]); got [1, 2, 4]",
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(gru(tg::zeros({2, 0, 3})), "GRU: input [2, 0, 3] is empty", std::invalid_argument);
    nn::LSTM lstm(3, 4);
    CHECK_THROWS_WITH_AS(lstm(tg::zeros({5, 2, 3}), nn::LSTMState{tg::zeros({1, 2, 4}), tg::zeros({1, 3, 4})}),
                         "LSTM: c0 must be [1, 2, 4] ([num_layers * directions, B, hidden_size]); got [1, 3, 4]",
                         std::invalid_argument);
    nn::GRUCell cell(3, 4);
    CHECK_THROWS_WITH_AS(cell(tg::zeros({2, 3}), tg::zeros({3, 4})),
                         "GRUCell: hx must be [2, 4] for input [2, 3]; got [3, 4]", std::invalid_argument);
    CHECK_THROWS_WITH_AS(nn::LSTMCell(3, 4)(tg::zeros({2, 2})), "LSTMCell: expected input [B, 3] or [3]; got [2, 2]",
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(nn::GRU(3, 4, {.num_layers = 0}), "GRU: num_layers must be positive", std::invalid_argument);
    CHECK_THROWS_WITH_AS(nn::LSTM(3, 4, {.dropout = 1.5f}), "LSTM: dropout must be in [0, 1]; got 1.500000",
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(nn::GRUCell(0, 4), "GRUCell: input_size 0 and hidden_size 4 must be positive",
                         std::invalid_argument);
  }
}
