// One training step on every thread (nn/data_parallel.hpp), and tg::grad(),
// which it is built on. Part of the `threads` suite, which CI also runs under
// ThreadSanitizer.
#include <doctest/doctest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include <tapegrad/tapegrad.hpp>

#include "helpers.hpp"

using tg::Array;
using tg::Tensor;
using tg::test::allclose;
using tg::test::same_bits;
using tg::test::Threads;

namespace {

// Inputs of a small classifier: ids for an Embedding (sparse rows), features
// for a Linear, and labels, 37 rows (so shards are of unequal sizes).
struct Data {
  tg::Indices ids = xt::zeros<int64_t>({37});
  Array features = xt::zeros<float>({37, 6});
  tg::Indices labels = xt::zeros<int64_t>({37});
  Data() {
    tg::Generator gen(3);
    for (std::size_t i = 0; i < 37; ++i) {
      ids(i) = static_cast<int64_t>(gen() % 50);
      labels(i) = static_cast<int64_t>(gen() % 3);
      for (std::size_t j = 0; j < 6; ++j) features(i, j) = static_cast<float>(gen() % 200) / 100.0f - 1.0f;
    }
  }
};

// Embedding (sparse gradient) + Linear over features -> tanh -> Dropout(p) -> Linear head.
struct Model {
  explicit Model(float p = 0) : drop(p, gen) {}
  tg::Generator gen{11};
  tg::nn::Embedding emb{50, 8, {.sparse = true}, gen};
  tg::nn::Linear in{6, 8, true, gen};
  tg::nn::Linear head{8, 3, true, gen};
  tg::nn::Dropout drop;
  std::vector<Tensor> params() const { return {emb.weight, in.weight, *in.bias, head.weight, *head.bias}; }

  // The logits of rows [b, e) of the batch.
  Tensor logits(const Data& d, std::size_t b, std::size_t e) {
    const tg::Indices rows = tg::arange(static_cast<int64_t>(b), static_cast<int64_t>(e));
    Tensor x = tg::index_select(Tensor(d.features), 0, rows);
    return head(drop(tg::tanh(emb(tg::index_select(d.ids, 0, rows)) + in(x))));
  }
};

struct Outcome {
  std::vector<float> losses;
  std::vector<Array> grads, params;
};

// Three SGD steps; `parallel` steps through data_parallel, else the plain way.
Outcome train(bool parallel, float dropout = 0) {
  Data d;
  Model m(dropout);
  tg::optim::SGD opt(m.params(), {.lr = 0.5, .momentum = 0.9});
  Outcome out;
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    Tensor loss;
    auto loss_of = [&](const Tensor& logits) { return tg::cross_entropy(logits, d.labels); };
    if (parallel) {
      loss = tg::nn::data_parallel(
          m.params(), 37, [&](std::size_t b, std::size_t e) { return m.logits(d, b, e); }, loss_of, m.gen);
    } else {
      loss = loss_of(m.logits(d, 0, 37));
      loss.backward();
    }
    out.losses.push_back(loss.item());
    for (const Tensor& p : m.params()) out.grads.push_back(p.grad().to_dense(p.shape()));
    opt.step();
  }
  for (const Tensor& p : m.params()) out.params.push_back(p.value());
  return out;
}

void check_same(const Outcome& a, const Outcome& b) {
  CHECK(a.losses == b.losses);
  for (std::size_t i = 0; i < a.grads.size(); ++i)
    CHECK_MESSAGE(same_bits(a.grads[i], b.grads[i]), "grad ", i);
  for (std::size_t i = 0; i < a.params.size(); ++i)
    CHECK_MESSAGE(same_bits(a.params[i], b.params[i]), "param ", i);
}

void check_close(const Outcome& a, const Outcome& b) {
  for (std::size_t i = 0; i < a.losses.size(); ++i)
    CHECK(a.losses[i] == doctest::Approx(b.losses[i]).epsilon(1e-5));
  for (std::size_t i = 0; i < a.grads.size(); ++i)
    CHECK_MESSAGE(allclose(a.grads[i], b.grads[i], 1e-4, 1e-6), "grad ", i);
  for (std::size_t i = 0; i < a.params.size(); ++i)
    CHECK_MESSAGE(allclose(a.params[i], b.params[i], 1e-4, 1e-6), "param ", i);
}

}  // namespace

TEST_SUITE("threads") {
  TEST_CASE("grad(): backward()'s gradients, returned; no tensor's grad() changes") {
    Data d;
    Model a, b;
    tg::cross_entropy(a.logits(d, 0, 37), d.labels).backward();
    const std::vector<Tensor> params = b.params();
    const std::vector<tg::Grad> grads = tg::grad(tg::cross_entropy(b.logits(d, 0, 37), d.labels), params);
    REQUIRE(grads.size() == params.size());
    CHECK(grads[0].is_sparse());  // the Embedding's rows, as backward() gives them
    for (std::size_t i = 0; i < params.size(); ++i) {
      CAPTURE(i);
      CHECK(params[i].grad().empty());
      CHECK(
          same_bits(grads[i].to_dense(params[i].shape()), a.params()[i].grad().to_dense(params[i].shape())));
    }
  }

  TEST_CASE("grad(): a leaf the output does not use gets an empty gradient; grad_output for a non-scalar") {
    Tensor x({1.0f, 2.0f, 3.0f}, true), unused({5.0f}, true);
    std::vector<tg::Grad> g = tg::grad(tg::sum(x * x), {x, unused});
    CHECK(same_bits(g[0].dense(), Array({2.0f, 4.0f, 6.0f})));
    CHECK(g[1].empty());
    g = tg::grad(x * x, {x}, Array({1.0f, 0.0f, -1.0f}));
    CHECK(same_bits(g[0].dense(), Array({2.0f, 0.0f, -6.0f})));
  }

  TEST_CASE("grad(): bad inputs are named, and nothing changes") {
    Tensor x({1.0f, 2.0f}, true), y = x * 2.0f;
    x.set_name("x");
    CHECK_THROWS_WITH_AS(tg::grad(tg::sum(y), {y}),
                         doctest::Contains("grad: input 0 (of shape [2]) is not a leaf"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(tg::grad(tg::sum(y), {x, x}), "grad: input 1 ('x') is input 0 again",
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(
        tg::grad(y, {x}),
        doctest::Contains("implied for a one-element tensor; this one has shape [2]: pass grad_output"),
        std::invalid_argument);
    CHECK_THROWS_WITH_AS(tg::grad(Tensor({1.0f}), {x}),
                         doctest::Contains("grad: the tensor does not require grad"), std::logic_error);
    CHECK(x.grad().empty());
    const std::vector<tg::Grad> g = tg::grad(tg::sum(y), {x});  // the graph is still whole
    CHECK(same_bits(g[0].dense(), Array({2.0f, 2.0f})));
  }

  TEST_CASE("data_parallel on one thread is the plain step, bit for bit") {
    Threads one(1);
    check_same(train(false), train(true));
  }

  TEST_CASE(
      "data_parallel on 2 and 3 threads: the same bits run to run, the plain step's values within rounding") {
    const Outcome plain = train(false);
    for (std::size_t n : {2, 3}) {
      CAPTURE(n);
      Threads threads(n);
      const std::size_t split_before = tg::detail::split_loops();
      const Outcome first = train(true);
      CHECK(tg::detail::split_loops() > split_before);  // the shards ran on several threads
      check_same(first, train(true));
      check_close(first, plain);
    }
  }

  TEST_CASE(
      "data_parallel with dropout: the plain step on one thread; on 2 and 3, the same masks run to run") {
    for (std::size_t n : {1, 2, 3}) {
      CAPTURE(n);
      Threads threads(n);
      const Outcome first = train(true, 0.3f);
      check_same(first, train(true, 0.3f));
      if (n == 1) check_same(first, train(false, 0.3f));
      // Dropout did drop: the run differs from the one without it.
      CHECK(first.losses != train(true, 0.0f).losses);
    }
  }

  TEST_CASE("data_parallel: more threads than rows, one shard per row; a loss that uses a parameter itself") {
    Threads threads(3);
    Tensor w({{0.5f, 1.0f}, {-1.0f, 2.0f}}, true);
    Tensor x({{1.0f, 2.0f}, {3.0f, 4.0f}});
    auto forward = [&](std::size_t b, std::size_t e) -> Tensor {
      CHECK(e == b + 1);
      return tg::matmul(tg::narrow(x, 0, b, e - b), w);
    };
    // mean(x w) + sum(w): d/dw = x^T 1 / 4 + 1 = [[2, 2], [2.5, 2.5]]
    Tensor loss =
        tg::nn::data_parallel({w}, 2, forward, [&](const Tensor& y) { return tg::mean(y) + tg::sum(w); });
    CHECK(loss.item() == doctest::Approx((-1.5 + 5 - 2.5 + 11) / 4 + 2.5));
    CHECK(!loss.requires_grad());
    CHECK(allclose(w.grad().dense(), Array({{2.0f, 2.0f}, {2.5f, 2.5f}})));
  }

  TEST_CASE(
      "data_parallel: a shard that throws, a wrong output or loss: no gradient added; grad mode off is "
      "refused") {
    Threads threads(2);
    Data d;
    Model m;
    auto logits = [&](std::size_t b, std::size_t e) { return m.logits(d, b, e); };
    auto loss = [&](const Tensor& y) { return tg::cross_entropy(y, d.labels); };
    auto throwing = [&](std::size_t b, std::size_t e) {
      if (b > 0) throw std::runtime_error("shard failed");
      return m.logits(d, b, e);
    };
    CHECK_THROWS_WITH_AS(tg::nn::data_parallel(m.params(), 37, throwing, loss), "shard failed",
                         std::runtime_error);
    auto wrong_rows = [&](std::size_t b, std::size_t e) { return m.logits(d, b, b == 0 ? e - 1 : e); };
    CHECK_THROWS_WITH_AS(
        tg::nn::data_parallel(m.params(), 37, wrong_rows, loss),
        doctest::Contains("data_parallel: forward(0, 18) returned a tensor of shape [17, 3]"),
        std::invalid_argument);
    CHECK_THROWS_WITH_AS(tg::nn::data_parallel(m.params(), 37, logits, [](const Tensor& y) { return y; }),
                         doctest::Contains("data_parallel: loss(output) returned a tensor of shape [37, 3]"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(tg::nn::data_parallel(m.params(), 0, logits, loss),
                         "data_parallel: the batch has no rows", std::invalid_argument);
    {
      tg::NoGradGuard no_grad;
      CHECK_THROWS_AS(tg::nn::data_parallel(m.params(), 37, logits, loss), std::logic_error);
    }
    for (const Tensor& p : m.params()) CHECK(p.grad().empty());
  }

  TEST_CASE("data_parallel with BatchNorm: each shard normalises its own rows; their running-statistics updates take turns") {
    Threads threads(2);
    tg::Generator gen(5);
    tg::nn::Sequential model(tg::nn::Linear(4, 6, true, gen), tg::nn::BatchNorm1d(6), tg::nn::ReLU(),
                             tg::nn::Linear(6, 2, true, gen));
    const Tensor x = tg::randn({20, 4}, gen);
    const tg::Indices y = tg::indices(std::vector<int64_t>(20, 1));
    model.train();
    for (int step = 0; step < 3; ++step)
      tg::nn::data_parallel(
          model.parameters(), 20, [&](std::size_t b, std::size_t e) { return model(tg::narrow(x, 0, b, e - b)); },
          [&](const Tensor& logits) { return tg::cross_entropy(logits, y); }, gen);
    const auto& bn = model.at<tg::nn::BatchNorm1d>(1);
    CHECK(bn.num_batches_tracked->item() == 6.0f);  // each of the 2 shards counts as a batch
    for (float v : bn.running_var->to_vector()) CHECK(std::isfinite(v));
    CHECK(bn.running_mean->version() == 6u);
  }

  TEST_CASE(
      "data_parallel: a leaf the forward or the loss uses that is not in parameters gets its gradient") {
    // The plain step gives every leaf its gradient; so must the split one.
    auto run = [](std::size_t threads) {
      Threads t(threads);
      Data d;
      Model m;
      Tensor scale({1.5f, -0.5f, 2.0f}, true), bias({0.25f}, true);  // not in m.params()
      tg::nn::data_parallel(
          m.params(), 37, [&](std::size_t b, std::size_t e) { return m.logits(d, b, e) * scale; },
          [&](const Tensor& y) { return tg::cross_entropy(y, d.labels) + tg::sum(bias * bias); }, m.gen);
      return std::vector<Array>{scale.grad_dense(), bias.grad_dense(), m.head.weight.grad_dense()};
    };
    const std::vector<Array> one = run(1);
    CHECK(tg::sum(tg::abs(Tensor(one[0]))).item() > 0);
    for (std::size_t n : {2, 3}) {
      CAPTURE(n);
      const std::vector<Array> many = run(n);
      for (std::size_t i = 0; i < one.size(); ++i)
        CHECK_MESSAGE(allclose(many[i], one[i], 1e-4, 1e-6), "grad ", i);
    }
  }

  TEST_CASE(
      "data_parallel: an Embedding with max_norm (it writes the weight in forward) is refused in shards") {
    Threads threads(2);
    tg::Generator gen(4);
    tg::nn::Embedding emb(10, 4, {.max_norm = 0.5f}, gen);
    tg::nn::EmbeddingBag bag(10, 4, {.mode = tg::nn::EmbeddingBagMode::sum, .max_norm = 0.5f}, gen);
    const tg::Indices ids{1, 2, 3, 1, 5, 6};
    const Array before = emb.weight.value(), bag_before = bag.weight.value();
    auto loss = [](const Tensor& y) { return tg::sum(y); };
    CHECK_THROWS_WITH_AS(
        tg::nn::data_parallel(
            {emb.weight}, 6,
            [&](std::size_t b, std::size_t e) {
              return emb(tg::index_select(ids, 0, tg::arange(int64_t(b), int64_t(e))));
            },
            loss),
        doctest::Contains(
            "Embedding: max_norm rescales rows of the weight in place during forward, which the shards "
            "of nn::data_parallel cannot do at once"),
        std::logic_error);
    CHECK_THROWS_WITH_AS(tg::nn::data_parallel(
                             {bag.weight}, 3,
                             [&](std::size_t b, std::size_t e) {
                               return bag.forward(
                                   tg::index_select(ids, 0, tg::arange(int64_t(2 * b), int64_t(2 * e))),
                                   tg::arange(int64_t(0), int64_t(2 * (e - b)), int64_t(2)));
                             },
                             loss),
                         doctest::Contains("EmbeddingBag: max_norm"), std::logic_error);
    CHECK(same_bits(emb.weight.value(), before));
    CHECK(same_bits(bag.weight.value(), bag_before));
    CHECK(emb.weight.grad().empty());
    // On one thread data_parallel is the plain step, and max_norm works there.
    Threads one(1);
    tg::nn::data_parallel(
        {emb.weight}, 6, [&](std::size_t, std::size_t) { return emb(ids); }, loss);
    CHECK(!emb.weight.grad().empty());
    CHECK(!same_bits(emb.weight.value(), before));
  }

  TEST_CASE(
      "data_parallel: a Generator made or seeded inside a shard holds its seed; the others' draws do not "
      "change") {
    // The model's dropout masks with nothing else drawing, to compare against.
    const Outcome plain = [] {
      Threads threads(2);
      return train(true, 0.3f);
    }();
    Threads threads(2);
    Data d;
    Model m(0.3f);
    std::vector<std::vector<uint32_t>> drawn(2);
    std::vector<std::string> states(2);
    auto forward = [&](std::size_t b, std::size_t e) {
      tg::Generator own(123);  // made inside the shard
      tg::manual_seed(7);      // the default generator, seeded inside the shard
      const std::size_t k = b == 0 ? 0 : 1;
      states[k] = own.state();
      for (int i = 0; i < 3; ++i) drawn[k].push_back(own());
      for (int i = 0; i < 3; ++i) drawn[k].push_back(tg::default_generator()());
      return m.logits(d, b, e);
    };
    tg::optim::SGD opt(m.params(), {.lr = 0.5, .momentum = 0.9});
    const std::string default_before = tg::default_generator().state();
    Outcome out;
    for (int step = 0; step < 3; ++step) {
      opt.zero_grad();
      for (auto& v : drawn) v.clear();
      const Tensor loss = tg::nn::data_parallel(
          m.params(), 37, forward, [&](const Tensor& y) { return tg::cross_entropy(y, d.labels); }, m.gen);
      out.losses.push_back(loss.item());
      for (const Tensor& p : m.params()) out.grads.push_back(p.grad().to_dense(p.shape()));
      opt.step();
      // Each shard drew what Generator(123) and Generator(7) draw anywhere.
      tg::Generator g123(123), g7(7);
      std::vector<uint32_t> expected;
      for (int i = 0; i < 3; ++i) expected.push_back(g123());
      for (int i = 0; i < 3; ++i) expected.push_back(g7());
      CHECK(drawn[0] == expected);
      CHECK(drawn[1] == expected);
      CHECK((states[0] == tg::Generator(123).state()));
      // The default generator holds the seed it was given: its state is seed 7's.
      CHECK((tg::default_generator().state() == tg::Generator(7).state()));
    }
    tg::default_generator().set_state(default_before);
    for (const Tensor& p : m.params()) out.params.push_back(p.value());
    // The model's Dropout drew the masks it draws without them.
    check_same(out, plain);
  }

  TEST_CASE("data_parallel: anomaly mode reaches every shard, in forward and in backward") {
    Threads threads(3);
    Tensor w({1.0f, 1.0f}, true);
    for (std::size_t row : {0, 4, 8}) {  // in the first, the second and the last shard
      CAPTURE(row);
      Array x = xt::ones<float>({9, 2});
      x(row, 0) = 0.0f;  // sqrt(0 * w): a finite value, an infinite slope
      auto forward = [&](std::size_t b, std::size_t e) {
        return tg::sqrt(tg::narrow(Tensor(x), 0, b, e - b) * w);
      };
      auto loss = [](const Tensor& y) { return tg::sum(y); };
      auto anomaly = [&]() -> std::string {  // what AnomalyError says, "" if nothing is thrown
        try {
          tg::nn::data_parallel({w}, 9, forward, loss);
        } catch (const tg::AnomalyError& e) {
          return e.what();
        }
        return "";
      };
      {
        tg::DetectAnomalyGuard guard;
        std::string message = anomaly();
        CHECK(message.find("op 'sqrt'") != std::string::npos);
        CHECK(message.find("in the gradient of its input") != std::string::npos);
        x(row, 0) = -1.0f;  // NaN in the forward value, found in the shard, not later in the loss's sum
        message = anomaly();
        CHECK(message.find("op 'sqrt'") != std::string::npos);
        CHECK(message.find("in its forward value") != std::string::npos);
      }
      CHECK(w.grad().empty());
      CHECK_NOTHROW(tg::nn::data_parallel({w}, 9, forward, loss));  // without the guard: NaN, as PyTorch
      w.zero_grad();
    }
  }

  TEST_CASE("data_parallel: backward() on the loss it returned says that data_parallel ran it") {
    Threads threads(2);
    Data d;
    Model m;
    for (std::size_t n : {1, 2}) {
      Threads t(n);
      const Tensor loss = tg::nn::data_parallel(
          m.params(), 37, [&](std::size_t b, std::size_t e) { return m.logits(d, b, e); },
          [&](const Tensor& y) { return tg::cross_entropy(y, d.labels); }, m.gen);
      CHECK_THROWS_WITH_AS(
          loss.backward(),
          doctest::Contains("nn::data_parallel returned this loss after running its backward pass"),
          std::logic_error);
      CHECK_THROWS_WITH_AS(tg::grad(loss, m.params()), doctest::Contains("data_parallel"), std::logic_error);
    }
  }
}
