// Modules of one's own, and copies of modules: submodules registered by value
// or by handle, a model called as model(x), clone() as an independent copy,
// and a tensor registered twice seen once by parameters(), clipping and optimizers.
#include <doctest/doctest.h>

#include <cmath>
#include <type_traits>

#include <tapegrad/tapegrad.hpp>

using tg::Indices;
using tg::Tensor;
namespace nn = tg::nn;

namespace {

// The README's shape of a custom module: one submodule moved in, one by handle.
struct Mlp : nn::Module {
  std::shared_ptr<nn::Linear> fc1, fc2;
  explicit Mlp(tg::Generator gen = tg::Generator(0)) {
    fc1 = register_module("fc1", nn::Linear(3, 4, true, gen));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(4, 2, true, gen));
  }
  Tensor forward(const Tensor& x) const override { return (*fc2)(tg::relu((*fc1)(x))); }
  std::shared_ptr<nn::Module> clone() const override { return copy_into(std::make_shared<Mlp>()); }
};

// A module that does not override forward() or clone().
struct Bare : nn::Module {
  Bare() { register_parameter("w", tg::ones({2})); }
};

// A Linear that doubles its output: it overrides forward() but not clone(),
// so the clone() it inherits (Linear's) would make a plain Linear.
struct Doubled : nn::Linear {
  using nn::Linear::Linear;
  Tensor forward(const Tensor& x) const override { return nn::Linear::forward(x) * 2.0f; }
};
// The same with a clone() of its own.
struct DoubledClone : Doubled {
  using Doubled::Doubled;
  std::shared_ptr<nn::Module> clone() const override {
    tg::Generator unused;  // copy_into overwrites the fresh weights
    return copy_into(std::make_shared<DoubledClone>(in_features(), out_features(), bias.has_value(), unused));
  }
};

// One Linear used twice, registered under two names by its constructor, so
// that a copy built by clone() is tied the same way.
struct TiedTwice : nn::Module {
  std::shared_ptr<nn::Linear> first, second;
  explicit TiedTwice(bool tie = true) {
    tg::Generator gen(1);
    first = register_module("first", nn::Linear(2, 2, true, gen));
    second = register_module("second", tie ? first : std::make_shared<nn::Linear>(2, 2, true, gen));
  }
  Tensor forward(const Tensor& x) const override { return (*second)(tg::tanh((*first)(x))); }
};
struct CloneKeepsTie : TiedTwice {
  using TiedTwice::TiedTwice;
  std::shared_ptr<nn::Module> clone() const override { return copy_into(std::make_shared<CloneKeepsTie>()); }
};
struct CloneLosesTie : TiedTwice {
  using TiedTwice::TiedTwice;
  std::shared_ptr<nn::Module> clone() const override {
    return copy_into(std::make_shared<CloneLosesTie>(false));
  }
};

// One SGD step on the sum of m(x), then m(x).
std::vector<float> stepped(nn::Module& m, const Tensor& x) {
  tg::optim::SGD opt(m.parameters(), {.lr = 0.5f});
  tg::sum(m(x)).backward();
  opt.step();
  tg::NoGradGuard no_grad;
  return m(x).to_vector();
}

// Every parameter of a, as values, in order.
std::vector<std::vector<float>> values_of(const nn::Module& m) {
  std::vector<std::vector<float>> out;
  for (const Tensor& p : m.parameters()) out.push_back(p.to_vector());
  return out;
}

}  // namespace

// A copy of a module would share its parameter handles with the original.
static_assert(!std::is_copy_constructible_v<nn::Linear>);
static_assert(!std::is_copy_assignable_v<nn::Linear>);
static_assert(!std::is_copy_constructible_v<nn::Sequential>);
static_assert(!std::is_copy_constructible_v<Mlp>);
static_assert(std::is_move_constructible_v<nn::Linear>);

TEST_SUITE("nn") {
  TEST_CASE("a module of one's own: by value and by handle, called as model(x)") {
    Mlp model(tg::Generator(3));
    CHECK(model.named_parameters().size() == 4);
    CHECK(model.named_parameters()[0].first == "fc1.weight");
    CHECK(model.named_parameters()[2].first == "fc2.weight");
    // The handle returned by register_module is the registered module.
    CHECK(model.fc1->weight.is_same(model.named_parameters()[0].second));

    const Tensor x = tg::tensor({1.0f, -2.0f, 0.5f, 0.0f, 1.0f, 2.0f}, {2, 3});
    const Tensor by_call = model(x);
    const Tensor by_hand = model.fc2->forward(tg::relu(model.fc1->forward(x)));
    CHECK(by_call.to_vector() == by_hand.to_vector());
    // Through a reference to the base class too: forward is virtual.
    const nn::Module& base = model;
    CHECK(base(x).to_vector() == by_hand.to_vector());

    // It trains with an optimizer over its parameters.
    tg::optim::SGD opt(model.parameters(), {.lr = 0.1f});
    const float before = tg::mean(tg::pow(model(x), 2.0f)).item();
    for (int step = 0; step < 20; ++step) {
      opt.zero_grad();
      tg::mean(tg::pow(model(x), 2.0f)).backward();
      opt.step();
    }
    CHECK(tg::mean(tg::pow(model(x), 2.0f)).item() < before);
  }

  TEST_CASE("a module without forward() or clone() says which to override") {
    Bare bare;
    CHECK_THROWS_WITH_AS(bare(tg::ones({2})), doctest::Contains("does not override Tensor forward"),
                         std::logic_error);
    CHECK_THROWS_WITH_AS(bare.clone(), doctest::Contains("copy_into"), std::logic_error);
  }

  TEST_CASE("clone(): same values, own storage, no gradients, same requires_grad and mode") {
    Mlp model(tg::Generator(5));
    model.fc1->bias->set_requires_grad(false);
    model.eval();
    const Tensor x = tg::tensor({0.5f, 1.0f, -1.0f}, {1, 3});
    tg::sum(model(x)).backward();  // the original has gradients; the copy starts without

    const std::shared_ptr<nn::Module> copy = model.clone();
    const auto& mine = dynamic_cast<const Mlp&>(*copy);
    CHECK(values_of(*copy) == values_of(model));
    CHECK(mine(x).to_vector() == model(x).to_vector());
    CHECK_FALSE(copy->is_training());
    CHECK_FALSE(mine.fc1->bias->requires_grad());
    CHECK(mine.fc1->weight.requires_grad());
    for (const auto& [name, p] : copy->named_parameters()) {
      CAPTURE(name);
      CHECK(p.grad().empty());
      for (const Tensor& q : model.parameters()) CHECK_FALSE(p.is_same(q));
    }

    // Training the copy leaves the original where it was, and the other way round.
    const auto original = values_of(model);
    std::vector<Tensor> trainable;
    for (const Tensor& p : copy->parameters())
      if (p.requires_grad()) trainable.push_back(p);
    tg::optim::SGD opt(trainable, {.lr = 0.5f});
    tg::sum(mine(x)).backward();
    opt.step();
    CHECK(values_of(model) == original);
    CHECK(values_of(*copy) != original);
    const auto copied = values_of(*copy);
    {
      tg::NoGradGuard no_grad;
      model.fc2->weight.value_mut().fill(7.0f);
    }
    CHECK(values_of(*copy) == copied);
  }

  TEST_CASE("clone() of every layer and of a Sequential gives the same outputs, independently") {
    tg::Generator gen(11);
    nn::Sequential seq(nn::Linear(3, 4, true, gen), nn::Tanh(), nn::LayerNorm(4), nn::ReLU(), nn::Linear(4, 2, false, gen),
                       nn::Sigmoid());
    const Tensor x = tg::tensor({0.1f, -0.2f, 0.3f, 1.0f, 2.0f, -3.0f}, {2, 3});
    const auto copy = std::static_pointer_cast<nn::Sequential>(seq.clone());
    CHECK(copy->size() == seq.size());
    CHECK(copy->named_parameters().size() == seq.named_parameters().size());
    CHECK((*copy)(x).to_vector() == seq(x).to_vector());
    copy->at<nn::Linear>(0).weight.value_mut().fill(0.0f);
    CHECK((*copy)(x).to_vector() != seq(x).to_vector());

    nn::Embedding emb(6, 3, {}, gen);
    nn::EmbeddingBag bag(6, 3, {.mode = nn::EmbeddingBagMode::sum}, gen);
    const auto emb_copy = std::static_pointer_cast<nn::Embedding>(emb.clone());
    const auto bag_copy = std::static_pointer_cast<nn::EmbeddingBag>(bag.clone());
    const Indices ids{0, 5, 2};
    CHECK(emb_copy->forward(ids).to_vector() == emb.forward(ids).to_vector());
    CHECK_FALSE(emb_copy->weight.is_same(emb.weight));
    CHECK(bag_copy->forward(ids, Indices{0, 1}).to_vector() == bag.forward(ids, Indices{0, 1}).to_vector());
    CHECK_FALSE(bag_copy->weight.is_same(bag.weight));
  }

  TEST_CASE("clone() keeps a module used twice tied, as copy.deepcopy does") {
    tg::Generator gen(6);
    auto l = std::make_shared<nn::Linear>(2, 2, true, gen);
    nn::Sequential seq(l, nn::Tanh(), l);  // PyTorch: the copy has 2 parameters, c[0] is c[2]
    const std::shared_ptr<nn::Module> copy = seq.clone();
    CHECK(copy->parameters().size() == 2);
    CHECK(copy->state_dict().size() == 4);
    const auto& s = dynamic_cast<const nn::Sequential&>(*copy);
    CHECK(s.ptr(0) == s.ptr(2));
    CHECK_FALSE(s.at<nn::Linear>(0).weight.is_same(l->weight));
    // Trained the same way, the copy and the original stay equal.
    const Tensor x = tg::tensor({0.5f, -1.0f, 2.0f, 0.25f}, {2, 2});
    CHECK(stepped(*copy, x) == stepped(seq, x));

    // A module of one's own whose clone() builds the same ties keeps them.
    CloneKeepsTie tied;
    const auto tied_copy = tied.clone();
    CHECK(tied_copy->parameters().size() == 2);
    CHECK(stepped(*tied_copy, x) == stepped(tied, x));
    // One whose clone() does not is refused, naming both names, not copied untied.
    CHECK_THROWS_WITH_AS(
        CloneLosesTie().clone(),
        doctest::Contains("'first.weight' and 'second.weight' are one tensor, but in the copy its "
                          "clone() built two"),
        std::logic_error);
  }

  TEST_CASE(
      "clone() of a subclass that does not override it throws naming the class; one that does clones as "
      "itself") {
    tg::Generator gen(8);
    Doubled doubled(3, 2, true, gen);
    CHECK_THROWS_WITH_AS(doubled.clone(),
                         doctest::Contains("clone: this (anonymous namespace)::Doubled's clone() makes a "
                                           "tg::nn::Linear"),
                         std::logic_error);
    // Inside a Sequential too (whose own clone would otherwise cast a Linear to a Doubled).
    nn::Sequential seq(Doubled(3, 2, true, gen), nn::Tanh());
    CHECK_THROWS_WITH_AS(seq.clone(), doctest::Contains("Doubled's clone() makes a tg::nn::Linear"),
                         std::logic_error);
    // A subclass of Sequential is a Sequential's subclass like any other.
    struct Stack : nn::Sequential {
      Stack() : nn::Sequential(nn::Tanh()) {}
    };
    CHECK_THROWS_WITH_AS(Stack().clone(), doctest::Contains("Stack's clone() makes a tg::nn::Sequential"),
                         std::logic_error);

    DoubledClone own(3, 2, true, gen);
    nn::Sequential with_own(std::make_shared<DoubledClone>(3, 2, true, gen), nn::Tanh());
    const Tensor x = tg::tensor({1.0f, 2.0f, 3.0f}, {1, 3});
    const auto copy = own.clone();
    CHECK(dynamic_cast<DoubledClone*>(copy.get()) != nullptr);
    CHECK((*copy)(x).to_vector() == own(x).to_vector());
    const auto seq_copy = std::static_pointer_cast<nn::Sequential>(with_own.clone());
    CHECK(seq_copy->ptr<DoubledClone>(0) != nullptr);
    CHECK((*seq_copy)(x).to_vector() == with_own(x).to_vector());
  }

  TEST_CASE("a tensor registered twice is one parameter: listed, clipped and stepped once") {
    tg::Generator gen(2);
    struct Tied : nn::Module {
      std::shared_ptr<nn::Linear> shared;
      explicit Tied(tg::Generator& gen) {
        shared = register_module("encoder", std::make_shared<nn::Linear>(2, 2, false, gen));
        register_module("decoder", shared);              // the same module under a second name
        register_parameter("also", shared->weight);      // and its weight under a third
      }
      Tensor forward(const Tensor& x) const override { return (*shared)((*shared)(x)); }
    } tied(gen);

    const auto named = tied.named_parameters();
    REQUIRE(named.size() == 1);
    CHECK(named[0].first == "also");  // own parameters first, then submodules: the first name wins
    CHECK(tied.state_dict().size() == 3);  // every name, as PyTorch's state_dict()

    // The norm is the one parameter's, not counted three times.
    tg::sum(tied(tg::tensor({1.0f, 2.0f}, {1, 2}))).backward();
    const tg::Array g = tied.shared->weight.grad_dense();
    double sq = 0;
    for (float v : g) sq += double(v) * v;
    CHECK(tg::nn::utils::clip_grad_norm_(tied.parameters(), 1e9f) == doctest::Approx(std::sqrt(sq)).epsilon(1e-6));

    // One SGD step moves it by lr * grad once.
    const std::vector<float> w = tied.shared->weight.to_vector();
    tg::optim::SGD opt(tied.parameters(), {.lr = 0.25f});
    opt.step();
    const std::vector<float> after = tied.shared->weight.to_vector();
    for (std::size_t i = 0; i < w.size(); ++i) CHECK(after[i] == doctest::Approx(w[i] - 0.25f * g.flat(i)));
  }
}
