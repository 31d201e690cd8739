// Sequential, ReLU, Tanh, Sigmoid, Flatten, Dropout and LayerNorm: parity with
// PyTorch's modules (tests/data/modules_reference.json: state dict names,
// outputs, gradients), train/eval, and a training loop written without xtensor.
#include <doctest/doctest.h>

#include <sstream>

#include <tapegrad/tapegrad.hpp>

#include "helpers.hpp"

using tg::Array;
using tg::Indices;
using tg::Tensor;
using J = nlohmann::json;
namespace nn = tg::nn;

namespace {

// The same layers as the PyTorch model of each case in gen_modules_reference.py.
nn::Sequential build(const std::string& name) {
  if (name == "mlp")
    return nn::Sequential(nn::Linear(4, 8), nn::ReLU(), nn::LayerNorm(8), nn::Tanh(), nn::Dropout(0.5f),
                          nn::Linear(8, 3), nn::Sigmoid());
  if (name == "char_mlp")
    return nn::Sequential(nn::Embedding(27, 4), nn::Flatten(), nn::Linear(12, 16), nn::Tanh(), nn::Linear(16, 27));
  if (name == "layer_norm_2d") return nn::Sequential(nn::LayerNorm({3, 4}, 1e-3f));
  if (name == "layer_norm_no_affine") return nn::Sequential(nn::LayerNorm({5}, 1e-5f, false));
  if (name == "relu") return nn::Sequential(nn::ReLU());
  if (name == "tanh") return nn::Sequential(nn::Tanh());
  if (name == "sigmoid") return nn::Sequential(nn::Sigmoid());
  if (name == "flatten") return nn::Sequential(nn::Flatten());
  if (name == "flatten_0_1") return nn::Sequential(nn::Flatten(0, 1));
  FAIL("no model for case " << name);
  return {};
}

}  // namespace

TEST_SUITE("nn.layers") {
  TEST_CASE("PyTorch parity: state dict names, outputs and gradients of each layer") {
    for (const char* name : {"mlp", "char_mlp", "layer_norm_2d", "layer_norm_no_affine", "relu", "tanh", "sigmoid",
                             "flatten", "flatten_0_1"}) {
      CAPTURE(name);
      const J& c = tg::test::reference_case("modules_reference", name);
      nn::Sequential model = build(name);
      // PyTorch's own names load as they are: the same names in the same order.
      tg::test::load_reference_state(model, c.at("state_dict"));
      model.eval();

      Tensor out, x;
      if (c.at("input").at("data")[0].is_number_integer()) {
        out = model(tg::test::to_int_array(c.at("input")));
      } else {
        x = Tensor(tg::test::to_array(c.at("input")), true);
        out = model(x);
      }
      CHECK_ALLCLOSE(out.value(), tg::test::to_array(c.at("out")), 1e-5, 1e-6);
      if (c.contains("target")) {
        Tensor loss = tg::cross_entropy(out, tg::test::to_int_array(c.at("target")));
        CHECK(loss.item() == doctest::Approx(c.at("loss").get<double>()).epsilon(1e-5));
        loss.backward();
      } else {
        out.backward(tg::test::to_array(c.at("w")));
      }
      auto params = model.named_parameters();
      for (std::size_t i = 0; i < params.size(); ++i) {
        CAPTURE(params[i].first);
        CHECK_ALLCLOSE(params[i].second.grad_dense(), tg::test::to_array(c.at("grads")[i][1]), 1e-4, 1e-6);
      }
      if (x.requires_grad()) CHECK_ALLCLOSE(x.grad_dense(), tg::test::to_array(c.at("grad_input")), 1e-4, 1e-6);
    }
  }

  TEST_CASE("Sequential: children 0, 1, ...; handles; push_back; errors") {
    auto fc = std::make_shared<nn::Linear>(3, 4);
    nn::Sequential model(fc, nn::Tanh());
    auto head = model.push_back(nn::Linear(4, 2));
    CHECK(model.size() == 3);
    CHECK(model.ptr<nn::Linear>(0) == fc);  // the handle passed in is the child
    CHECK(model.ptr<nn::Linear>(2) == head);
    CHECK(&model.at<nn::Linear>(2) == head.get());
    CHECK(model.parameters().size() == 4);
    auto names = model.named_parameters();
    CHECK(names[0].first == "0.weight");
    CHECK(names[3].first == "2.bias");
    {  // writing through a handle changes the model
      tg::NoGradGuard no_grad;
      head->bias->copy_(Array{10, -10});
    }
    Tensor y = model(tg::zeros({5, 3}));
    CHECK(y.shape() == tg::Shape{5, 2});
    CHECK(model.state_dict().at("2.bias") == Array{10, -10});

    CHECK_THROWS_WITH_AS(model.at<nn::ReLU>(1), "Sequential: module 1 is not of the type asked for",
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(model.ptr(3), "Sequential: no module 3 in a Sequential of 3", std::out_of_range);
    CHECK_THROWS_WITH_AS(model(Indices{0, 1}), doctest::Contains("Sequential: given Indices, but module 0 takes a Tensor"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(model.push_back(nn::Embedding(5, 2)),
                         "Sequential: module 3 takes Indices, not a Tensor, so it can only come first",
                         std::invalid_argument);
    CHECK(model.size() == 3);  // the failed push_back added nothing
    CHECK(model.named_parameters().size() == 4);
    nn::Sequential lm(nn::Embedding(5, 2), nn::Flatten());
    CHECK(lm(tg::indices({1, 2, 3, 4}, {2, 2})).shape() == tg::Shape{2, 4});
    CHECK_THROWS_WITH_AS(lm(tg::zeros({2, 2})), doctest::Contains("Sequential: module 0 takes Indices"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(model(tg::zeros({5, 4})), doctest::Contains("linear: input [5, 4]"), std::invalid_argument);
    nn::Sequential empty;
    Tensor z = tg::ones({2});
    CHECK(empty(z).is_same(z));  // an empty Sequential is the identity, as PyTorch's
  }

  TEST_CASE("Sequential nests, and a saved state dict loads by the same names") {
    auto inner = std::make_shared<nn::Sequential>(nn::Linear(2, 3), nn::ReLU());
    nn::Sequential outer(inner, nn::Linear(3, 1));
    std::vector<std::string> names;
    for (const auto& [n, t] : outer.named_parameters()) names.push_back(n);
    CHECK(names == std::vector<std::string>{"0.0.weight", "0.0.bias", "1.weight", "1.bias"});
    tg::test::TempDir dir;
    outer.save(dir.file("m.safetensors"));
    nn::Sequential again(std::make_shared<nn::Sequential>(nn::Linear(2, 3), nn::ReLU()), nn::Linear(3, 1));
    again.load(dir.file("m.safetensors"));
    Tensor x = tg::tensor({0.5f, -1.0f, 2.0f, 0.25f}, {2, 2});
    CHECK(again(x).value() == outer(x).value());
  }

  TEST_CASE("Dropout: train() drops with the module's generator, eval() is the identity") {
    tg::Generator gen(4), same(4);
    nn::Sequential model(nn::Linear(6, 6), nn::Dropout(0.5f, gen));
    Tensor x = tg::ones({20, 6});
    CHECK(model.is_training());  // modules start in training mode, as in PyTorch
    Tensor h = model.at<nn::Linear>(0)(x);
    Tensor y = model(x);
    CHECK(y.value() == tg::dropout(h, 0.5f, true, same).value());  // the same draws as the op
    model.eval();
    CHECK_FALSE(model.at<nn::Dropout>(1).is_training());
    CHECK(model(x).value() == h.value());
    model.train();
    CHECK_FALSE(model(x).value() == h.value());

    nn::Dropout d;  // p = 0.5, the default generator
    CHECK(d.p() == 0.5f);
    tg::manual_seed(3);
    Array a = d(x).value();
    tg::manual_seed(3);
    CHECK(d(x).value() == a);
    CHECK_THROWS_WITH_AS(nn::Dropout(1.5f), doctest::Contains("Dropout: probability has to be between 0 and 1"),
                         std::invalid_argument);
  }

  TEST_CASE("LayerNorm: PyTorch's init, options, errors") {
    nn::LayerNorm norm({2, 3});
    CHECK(nn::LayerNorm(7).normalized_shape() == tg::Shape{7});
    CHECK(norm.weight->value() == xt::ones<float>({2, 3}));
    CHECK(norm.bias->value() == xt::zeros<float>({2, 3}));
    CHECK(norm.eps() == 1e-5f);
    CHECK(norm(tg::ones({4, 2, 3})).shape() == tg::Shape{4, 2, 3});
    nn::LayerNorm plain({4}, 1e-3f, false);
    CHECK_FALSE(plain.weight.has_value());
    CHECK(plain.parameters().empty());
    CHECK_THROWS_WITH_AS(norm(tg::ones({4, 3})), "layer_norm: input [4, 3] does not end with normalized_shape [2, 3]",
                         std::invalid_argument);
    CHECK_THROWS_AS(nn::LayerNorm(tg::Shape{}), std::invalid_argument);
    CHECK_THROWS_AS(nn::LayerNorm(tg::Shape{3, 0}), std::invalid_argument);
    CHECK_THROWS_AS(nn::LayerNorm({3}, -1.0f), std::invalid_argument);
  }

  // What a user writes: data from std::vectors, batches by position, accuracy
  // by argmax, sampling by multinomial; no xtensor call.
  TEST_CASE("a training loop without xtensor") {
    tg::Generator gen(0);
    // Two blobs in 2-d: class 0 around (-1, -1), class 1 around (1, 1).
    std::vector<float> points;
    std::vector<int64_t> labels;
    std::normal_distribution<float> noise(0.0f, 0.5f);
    for (int i = 0; i < 200; ++i) {
      const int64_t label = i % 2;
      const float centre = label == 1 ? 1.0f : -1.0f;
      points.push_back(centre + noise(gen));
      points.push_back(centre + noise(gen));
      labels.push_back(label);
    }
    Tensor x = tg::tensor(points, {200, 2});
    Indices y = tg::indices(labels);

    nn::Sequential model(nn::Linear(2, 16, true, gen), nn::ReLU(), nn::Dropout(0.1f, gen), nn::Linear(16, 2, true, gen));
    tg::optim::SGD opt(model.parameters(), {.lr = 0.1});
    float first = 0, last = 0;
    for (int epoch = 0; epoch < 20; ++epoch) {
      for (int64_t start = 0; start < 200; start += 40) {
        Tensor xb = tg::narrow(x, 0, start, 40);
        Indices yb = tg::narrow(y, 0, start, 40);
        Tensor loss = tg::cross_entropy(model(xb), yb);
        opt.zero_grad();
        loss.backward();
        opt.step();
        if (epoch == 0 && start == 0) first = loss.item();
        last = loss.item();
      }
    }
    CHECK(last < first / 2);

    model.eval();
    tg::NoGradGuard no_grad;
    Indices predicted = tg::argmax(model(x), 1);
    int correct = 0;
    for (std::size_t i = 0; i < labels.size(); ++i) correct += predicted(i) == y(i);
    CHECK(correct > 180);
    // Sampling a class from the predicted probabilities of one point.
    Tensor probs = tg::softmax(model(tg::index_select(x, 0, tg::indices({3}))), 1);  // [1, 2]
    Indices sample = tg::multinomial(probs, 1, gen);                                 // [1, 1]
    CHECK((sample(0, 0) == 0 || sample(0, 0) == 1));
    std::ostringstream printed;
    printed << probs;
    CHECK(printed.str().find("shape=[1, 2]") != std::string::npos);
  }
}
