// Conv1d, Conv2d, the pooling layers, BatchNorm1d/2d and BCEWithLogitsLoss:
// parity with PyTorch's modules (tests/data/layers_reference.json, from
// tests/tools/gen_layers_reference.py: state dicts with their buffers, outputs,
// gradients, running statistics after each step), and buffers: named_buffers(),
// state_dict(), save/load, checkpoints and clone().
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include <tapegrad/tapegrad.hpp>

#include "helpers.hpp"

using tg::Array;
using tg::Tensor;
using J = nlohmann::json;
using tg::test::to_array;
namespace nn = tg::nn;

namespace {

const J& module_case(const std::string& name) {
  return tg::test::reference(std::string("layers_reference")).at("modules").at(name);
}

// A PyTorch state dict ([[name, array], ...]) as a StateDict.
tg::StateDict state_of(const J& state_dict) {
  tg::StateDict state;
  for (const auto& p : state_dict) state[p[0].get<std::string>()] = to_array(p[1]);
  return state;
}

// Loads PyTorch's state dict, buffers included, after checking that the model
// has exactly its names.
void load_pytorch_state(nn::Module& model, const J& state_dict) {
  const tg::StateDict theirs = state_of(state_dict), ours = model.state_dict();
  std::vector<std::string> a, b;
  for (const auto& [name, v] : ours) a.push_back(name);
  for (const auto& [name, v] : theirs) b.push_back(name);
  CHECK(a == b);
  model.load_state_dict(theirs);
}

// Every entry of the model's state dict equals PyTorch's.
void check_state(const nn::Module& model, const J& state_dict) {
  const tg::StateDict theirs = state_of(state_dict), ours = model.state_dict();
  for (const auto& [name, value] : theirs) {
    CAPTURE(name);
    REQUIRE(ours.count(name) == 1);
    CHECK_ALLCLOSE(ours.at(name), value, 1e-5, 1e-6);
  }
}

// The same layers as the PyTorch model of each module case.
std::shared_ptr<nn::Module> build(const std::string& name) {
  if (name == "conv2d") return std::make_shared<nn::Conv2d>(3, 4, 3, nn::Conv2dOptions{.stride = 2, .padding = 1});
  if (name == "conv1d_groups")
    return std::make_shared<nn::Conv1d>(4, 6, 3, nn::Conv1dOptions{.padding = 1, .groups = 2, .bias = false});
  if (name == "cnn_eval" || name == "cnn_train")
    return std::make_shared<nn::Sequential>(nn::Conv2d(1, 4, 3, {.padding = 1}), nn::BatchNorm2d(4), nn::ReLU(),
                                            nn::MaxPool2d(2), nn::Conv2d(4, 6, 3, {.padding = 1}), nn::BatchNorm2d(6),
                                            nn::ReLU(), nn::AdaptiveAvgPool2d(1), nn::Flatten(), nn::Linear(6, 3));
  if (name == "pools")
    return std::make_shared<nn::Sequential>(nn::MaxPool2d(3, {.stride = 2, .padding = 1}),
                                            nn::AvgPool2d(2, {.ceil_mode = true}));
  if (name == "pools1d")
    return std::make_shared<nn::Sequential>(nn::MaxPool1d(2), nn::AvgPool1d(3, {.stride = 1, .padding = 1}),
                                            nn::AdaptiveAvgPool1d(2));
  if (name == "batch_norm1d_train" || name == "batch_norm1d_eval_2d") return std::make_shared<nn::BatchNorm1d>(5);
  FAIL("no model for case " << name);
  return nullptr;
}

}  // namespace

TEST_SUITE("nn.conv") {
  TEST_CASE("PyTorch parity: Conv1d, Conv2d, pooling layers, BatchNorm and a CNN, in train and eval mode") {
    for (const std::string name : {"conv2d", "conv1d_groups", "cnn_eval", "cnn_train", "pools", "pools1d",
                             "batch_norm1d_train", "batch_norm1d_eval_2d"}) {
      CAPTURE(name);
      const J& c = module_case(name);
      std::shared_ptr<nn::Module> model = build(name);
      load_pytorch_state(*model, c.at("state_dict"));
      model->train(c.at("train").get<bool>());
      Tensor x(to_array(c.at("input")), true);
      Tensor out = (*model)(x);
      CHECK_ALLCLOSE(out.value(), to_array(c.at("out")), 1e-5, 1e-5);
      out.backward(to_array(c.at("w")));
      auto params = model->named_parameters();
      REQUIRE(params.size() == c.at("grads").size());
      for (std::size_t i = 0; i < params.size(); ++i) {
        CAPTURE(params[i].first);
        CHECK(params[i].first == c["grads"][i][0].get<std::string>());
        CHECK_ALLCLOSE(params[i].second.grad_dense(), to_array(c["grads"][i][1]), 1e-4, 1e-5);
      }
      CHECK_ALLCLOSE(x.grad_dense(), to_array(c.at("grad_input")), 1e-4, 1e-5);
      check_state(*model, c.at("state_after"));  // running statistics moved as PyTorch's did
    }
  }

  TEST_CASE("PyTorch parity: BatchNorm's running statistics over training steps, then eval") {
    for (const std::string name : {"batch_norm2d_steps", "batch_norm2d_cumulative", "batch_norm1d_no_tracking"}) {
      CAPTURE(name);
      const J& c = module_case(name);
      std::shared_ptr<nn::BatchNorm> bn;
      if (name == "batch_norm2d_steps") bn = std::make_shared<nn::BatchNorm2d>(3);
      if (name == "batch_norm2d_cumulative")
        bn = std::make_shared<nn::BatchNorm2d>(3, nn::BatchNormOptions{.momentum = std::nullopt});
      if (name == "batch_norm1d_no_tracking")
        bn = std::make_shared<nn::BatchNorm1d>(4, nn::BatchNormOptions{.affine = false, .track_running_stats = false});
      load_pytorch_state(*bn, c.at("state_dict"));
      for (const J& step : c.at("steps")) {
        bn->train(step.at("train").get<bool>());
        CHECK_ALLCLOSE((*bn)(Tensor(to_array(step.at("input")))).value(), to_array(step.at("out")), 1e-5, 1e-5);
        check_state(*bn, step.at("state_after"));
      }
    }
  }

  TEST_CASE("buffers: in state_dict and named_buffers, not in parameters; PyTorch's names") {
    nn::Sequential model(nn::Conv2d(1, 2, 3), nn::BatchNorm2d(2), nn::ReLU());
    std::vector<std::string> params, buffers;
    for (const auto& [name, t] : model.named_parameters()) params.push_back(name);
    for (const auto& [name, t] : model.named_buffers()) buffers.push_back(name);
    CHECK(params == std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias"});
    CHECK(buffers == std::vector<std::string>{"1.running_mean", "1.running_var", "1.num_batches_tracked"});
    CHECK(model.parameters().size() == 4);
    CHECK(model.buffers().size() == 3);
    for (const Tensor& b : model.buffers()) CHECK(!b.requires_grad());
    CHECK(model.buffers()[0].name() == "1.running_mean");  // its path, as parameters get theirs
    CHECK(model.state_dict().size() == 7);
    CHECK(model.state_dict().at("1.num_batches_tracked").dimension() == 0);
    // an optimizer over parameters() never touches a buffer
    tg::optim::SGD opt(model.parameters(), {.lr = 0.1});
    model.train();
    tg::sum(model(tg::ones({2, 1, 4, 4}))).backward();
    opt.step();
    CHECK(model.at<nn::BatchNorm2d>(1).num_batches_tracked->item() == 1.0f);
    // a buffer's name is taken like a parameter's
    nn::BatchNorm1d bn(3);
    CHECK_THROWS_WITH_AS(bn.register_buffer("running_mean", tg::zeros({3})),
                         "Module: a buffer 'running_mean' already exists", std::invalid_argument);
    CHECK_THROWS_WITH_AS(bn.register_parameter("running_var", tg::zeros({3})),
                         "Module: a buffer 'running_var' already exists", std::invalid_argument);
  }

  TEST_CASE("buffers load, save, checkpoint and clone with the parameters") {
    tg::test::TempDir dir;
    nn::Sequential model(nn::Linear(3, 4), nn::BatchNorm1d(4));
    model.train();
    tg::Generator gen(1);
    for (int i = 0; i < 3; ++i) model(tg::randn({5, 3}, gen));
    const tg::StateDict trained = model.state_dict();
    CHECK(trained.at("1.num_batches_tracked")() == 3.0f);

    // load_state_dict names a missing buffer and changes nothing
    tg::StateDict partial = trained;
    partial.erase("1.running_var");
    nn::Sequential other(nn::Linear(3, 4), nn::BatchNorm1d(4));
    CHECK_THROWS_WITH_AS(other.load_state_dict(partial),
                         "load_state_dict: the state does not fit the module; missing: 1.running_var",
                         std::invalid_argument);
    CHECK(other.state_dict().at("1.running_mean") == xt::zeros<float>({4}));

    model.save(dir.file("m.safetensors"));
    other.load(dir.file("m.safetensors"));
    CHECK(other.state_dict() == trained);

    nn::Sequential resumed(nn::Linear(3, 4), nn::BatchNorm1d(4));
    tg::optim::Adam opt(model.parameters()), resumed_opt(resumed.parameters());
    tg::save_checkpoint(dir.file("c.ckpt"), {.model = &model, .optimizer = &opt});
    tg::Checkpoint ckpt{.model = &resumed, .optimizer = &resumed_opt};
    tg::load_checkpoint(dir.file("c.ckpt"), ckpt);
    CHECK(resumed.state_dict() == trained);
    resumed.eval();
    model.eval();
    const Tensor x = tg::randn({2, 3}, gen);
    CHECK(resumed(x).to_vector() == model(x).to_vector());  // eval mode reads the running statistics

    std::shared_ptr<nn::Module> copy = model.clone();
    CHECK(copy->state_dict() == trained);
    CHECK(!copy->buffers()[0].is_same(model.buffers()[0]));  // storage of its own
    copy->train();
    (*copy)(tg::randn({5, 3}, gen));
    CHECK(model.state_dict() == trained);  // training the copy leaves the original's statistics
  }

  TEST_CASE("Conv1d and Conv2d: PyTorch's init bounds, shapes, and errors naming the layer") {
    tg::Generator gen(0);
    nn::Conv2d conv(4, 6, {3, 2}, {.groups = 2}, gen);
    CHECK(conv.weight.shape() == tg::Shape{6, 2, 3, 2});
    CHECK(conv.bias->shape() == tg::Shape{6});
    const float bound = 1.0f / std::sqrt(2.0f * 3 * 2);  // fan_in = in / groups * kH * kW
    for (float w : conv.weight.to_vector()) CHECK(std::abs(w) <= bound);
    for (float b : conv.bias->to_vector()) CHECK(std::abs(b) <= bound);
    CHECK(*std::max_element(conv.weight.value().begin(), conv.weight.value().end()) > 0.8f * bound);
    CHECK(conv(tg::zeros({1, 4, 5, 5})).shape() == tg::Shape{1, 6, 3, 4});
    nn::Conv1d c1(3, 2, 5, {.bias = false}, gen);
    CHECK(!c1.bias);
    CHECK(c1(tg::zeros({3, 9})).shape() == tg::Shape{2, 5});
    CHECK_THROWS_WITH_AS(nn::Conv2d(3, 4, 3, {.groups = 2}),
                         "Conv2d: in_channels 3 and out_channels 4 must be positive multiples of groups = 2",
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(nn::Conv1d(3, 4, 0), "Conv1d: kernel_size must be positive; got 0", std::invalid_argument);
    CHECK_THROWS_WITH_AS(conv(tg::zeros({1, 3, 5, 5})),
                         "conv2d: input [1, 3, 5, 5], weight [6, 2, 3, 2], groups = 2: the input has 3 channels, "
                         "the weight expects 4 (2 per group)",
                         std::invalid_argument);
    std::shared_ptr<nn::Module> copy = conv.clone();
    CHECK(copy->state_dict() == conv.state_dict());
    CHECK((*copy)(tg::ones({1, 4, 3, 3})).to_vector() == conv(tg::ones({1, 4, 3, 3})).to_vector());
  }

  TEST_CASE("BatchNorm: wrong inputs throw naming the layer, and a refused batch is not counted") {
    nn::BatchNorm2d bn(3);
    CHECK_THROWS_WITH_AS(bn(tg::zeros({2, 3, 4})), "BatchNorm2d: expected input [N, 3, H, W]; got [2, 3, 4]",
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(nn::BatchNorm1d(4)(tg::zeros({2, 3})), "BatchNorm1d: expected input [N, 4] or [N, 4, L]; got [2, 3]",
                         std::invalid_argument);
    bn.train();
    CHECK_THROWS_WITH_AS(bn(tg::zeros({1, 3, 1, 1})),
                         "BatchNorm2d: expected more than 1 value per channel when training; got input [1, 3, 1, 1]",
                         std::invalid_argument);
    CHECK(bn.num_batches_tracked->item() == 0.0f);
    CHECK(bn.running_mean->version() == 0);
    bn.eval();
    CHECK(bn(tg::ones({1, 3, 1, 1})).shape() == tg::Shape{1, 3, 1, 1});  // fine in eval mode
    // reset_running_stats puts back mean 0 and variance 1
    bn.train();
    bn(tg::randn({4, 3, 2, 2}, tg::default_generator()) + 5.0f);
    bn.reset_running_stats();
    CHECK(bn.running_mean->to_vector() == std::vector<float>{0, 0, 0});
    CHECK(bn.running_var->to_vector() == std::vector<float>{1, 1, 1});
    CHECK(bn.num_batches_tracked->item() == 0.0f);
  }

  TEST_CASE("BCEWithLogitsLoss: PyTorch's value and gradient; weight and pos_weight are buffers") {
    const J& c = tg::test::reference(std::string("layers_reference")).at("rnns").at("bce_with_logits_loss");
    const tg::StateDict state = state_of(c.at("state_dict"));
    nn::BCEWithLogitsLoss loss_fn(
        {.weight = Tensor(state.at("weight")), .pos_weight = Tensor(state.at("pos_weight"))});
    CHECK(loss_fn.state_dict() == state);
    CHECK(loss_fn.parameters().empty());
    Tensor x(to_array(c.at("input")), true);
    Tensor loss = loss_fn(x, Tensor(to_array(c.at("target"))));
    CHECK(loss.item() == doctest::Approx(to_array(c.at("out"))()).epsilon(1e-6));
    loss.backward();
    CHECK_ALLCLOSE(x.grad_dense(), to_array(c.at("grad_input")), 1e-5, 1e-7);
    std::shared_ptr<nn::Module> copy = loss_fn.clone();
    CHECK(copy->state_dict() == state);
    CHECK(nn::BCEWithLogitsLoss().state_dict().empty());
  }
}
