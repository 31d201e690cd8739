// One training step on every thread (nn/data_parallel.hpp), and tg::grad(),
// which it is built on. Part of the `threads` suite, which CI also runs under
// ThreadSanitizer.
#include <doctest/doctest.h>

#include <stdexcept>
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

// Embedding (sparse gradient) + Linear over features -> tanh -> Linear head.
struct Model {
  tg::Generator gen{11};
  tg::nn::Embedding emb{50, 8, {.sparse = true}, gen};
  tg::nn::Linear in{6, 8, true, gen};
  tg::nn::Linear head{8, 3, true, gen};
  std::vector<Tensor> params() const { return {emb.weight, in.weight, *in.bias, head.weight, *head.bias}; }

  Tensor loss(const Data& d, std::size_t b, std::size_t e) {
    const tg::Indices rows = tg::arange(static_cast<int64_t>(b), static_cast<int64_t>(e));
    Tensor x = tg::index_select(Tensor(d.features), 0, rows);  // a Tensor of the same rows
    return tg::cross_entropy(head(tg::tanh(emb(tg::index_select(d.ids, 0, rows)) + in(x))),
                             tg::index_select(d.labels, 0, rows));
  }
};

struct Outcome {
  std::vector<float> losses;
  std::vector<Array> grads, params;
};

// Three SGD steps; `parallel` steps through data_parallel, else the plain way.
Outcome train(bool parallel) {
  Data d;
  Model m;
  tg::optim::SGD opt(m.params(), {.lr = 0.5, .momentum = 0.9});
  Outcome out;
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    Tensor loss;
    if (parallel) {
      loss = tg::nn::data_parallel(m.params(), 37, [&](std::size_t b, std::size_t e) { return m.loss(d, b, e); });
    } else {
      loss = m.loss(d, 0, 37);
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
  for (std::size_t i = 0; i < a.grads.size(); ++i) CHECK_MESSAGE(same_bits(a.grads[i], b.grads[i]), "grad ", i);
  for (std::size_t i = 0; i < a.params.size(); ++i) CHECK_MESSAGE(same_bits(a.params[i], b.params[i]), "param ", i);
}

void check_close(const Outcome& a, const Outcome& b) {
  for (std::size_t i = 0; i < a.losses.size(); ++i) CHECK(a.losses[i] == doctest::Approx(b.losses[i]).epsilon(1e-5));
  for (std::size_t i = 0; i < a.grads.size(); ++i) CHECK_MESSAGE(allclose(a.grads[i], b.grads[i], 1e-4, 1e-6), "grad ", i);
  for (std::size_t i = 0; i < a.params.size(); ++i) CHECK_MESSAGE(allclose(a.params[i], b.params[i], 1e-4, 1e-6), "param ", i);
}

}  // namespace

TEST_SUITE("threads") {
  TEST_CASE("grad(): backward()'s gradients, returned; no tensor's grad() changes") {
    Data d;
    Model a, b;
    a.loss(d, 0, 37).backward();
    const std::vector<Tensor> params = b.params();
    const std::vector<tg::Grad> grads = tg::grad(b.loss(d, 0, 37), params);
    REQUIRE(grads.size() == params.size());
    CHECK(grads[0].is_sparse());  // the Embedding's rows, as backward() gives them
    for (std::size_t i = 0; i < params.size(); ++i) {
      CAPTURE(i);
      CHECK(params[i].grad().empty());
      CHECK(same_bits(grads[i].to_dense(params[i].shape()), a.params()[i].grad().to_dense(params[i].shape())));
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
    CHECK_THROWS_WITH_AS(tg::grad(tg::sum(y), {y}), doctest::Contains("grad: input 0 (of shape [2]) is not a leaf"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(tg::grad(tg::sum(y), {x, x}), "grad: input 1 ('x') is input 0 again", std::invalid_argument);
    CHECK_THROWS_WITH_AS(tg::grad(y, {x}), doctest::Contains("implied for a one-element tensor; this one has shape [2]: pass grad_output"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(tg::grad(Tensor({1.0f}), {x}), doctest::Contains("grad: the tensor does not require grad"),
                         std::logic_error);
    CHECK(x.grad().empty());
    const std::vector<tg::Grad> g = tg::grad(tg::sum(y), {x});  // the graph is still whole
    CHECK(same_bits(g[0].dense(), Array({2.0f, 2.0f})));
  }

  TEST_CASE("data_parallel on one thread is the plain step, bit for bit") {
    Threads one(1);
    check_same(train(false), train(true));
  }

  TEST_CASE("data_parallel on 2 and 3 threads: the same bits run to run, the plain step's values within rounding") {
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

  TEST_CASE("data_parallel: more threads than rows, one shard per row") {
    Threads threads(3);
    Tensor w({{0.5f, 1.0f}, {-1.0f, 2.0f}}, true);
    Array x = {{1.0f, 2.0f}, {3.0f, 4.0f}};
    Tensor loss = tg::nn::data_parallel({w}, 2, [&](std::size_t b, std::size_t e) -> Tensor {
      CHECK(e == b + 1);
      return tg::mean(tg::matmul(tg::narrow(Tensor(x), 0, b, e - b), w));
    });
    CHECK(loss.item() == doctest::Approx(((-1.5 + 5) / 2 + (-2.5 + 11) / 2) / 2));
    CHECK(!loss.requires_grad());
    CHECK(allclose(w.grad().dense(), Array({{1.0f, 1.0f}, {1.5f, 1.5f}})));  // (x0 + x1) / 4 in each column
  }

  TEST_CASE("data_parallel: a shard that throws or returns no loss adds no gradient; grad mode off is refused") {
    Threads threads(2);
    Data d;
    Model m;
    auto throwing = [&](std::size_t b, std::size_t e) {
      if (b > 0) throw std::runtime_error("shard failed");
      return m.loss(d, b, e);
    };
    CHECK_THROWS_WITH_AS(tg::nn::data_parallel(m.params(), 37, throwing), "shard failed", std::runtime_error);
    auto not_a_loss = [&](std::size_t b, std::size_t e) { return m.head(tg::tanh(m.in(tg::narrow(Tensor(d.features), 0, b, e - b)))); };
    CHECK_THROWS_WITH_AS(tg::nn::data_parallel(m.params(), 37, not_a_loss),
                         doctest::Contains("data_parallel: shard_loss(0, 18) returned a tensor of shape [18, 3]"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(tg::nn::data_parallel(m.params(), 0, throwing), "data_parallel: the batch has no rows",
                         std::invalid_argument);
    {
      tg::NoGradGuard no_grad;
      CHECK_THROWS_AS(tg::nn::data_parallel(m.params(), 37, throwing), std::logic_error);
    }
    for (const Tensor& p : m.params()) CHECK(p.grad().empty());
  }
}
