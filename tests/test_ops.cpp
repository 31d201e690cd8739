// Every op: forward values, gradients against finite differences (gradcheck),
// and against PyTorch where tests/data/core_reference.json has the op.
#include <doctest/doctest.h>

#include <limits>

#include <tapegrad/tapegrad.hpp>

#include "helpers.hpp"

using tg::Array;
using tg::Tensor;
using Inputs = std::vector<Tensor>;
using tg::test::check_core_parity;
using tg::test::check_grad;

namespace {

tg::Generator gen(2024);

// Random inputs in [lo, hi), away from 0 when `away_from_zero` (for log, div, relu).
Tensor rnd(const tg::Shape& shape, float lo = -1.0f, float hi = 1.0f, bool away_from_zero = false) {
  Tensor t = tg::rand(shape, gen, true);
  for (float& x : t.value_mut()) {
    x = lo + (hi - lo) * x;
    if (away_from_zero && std::abs(x) < 0.1f) x += x < 0 ? -0.1f : 0.1f;
  }
  return t;
}

}  // namespace

TEST_SUITE("core.ops") {
  TEST_CASE("elementwise binary ops: values and broadcasting") {
    Tensor a({{1, 2, 3}, {4, 5, 6}}), b({10, 20, 30});
    CHECK((a + b).value() == Array{{11, 22, 33}, {14, 25, 36}});
    CHECK((a - b).value() == Array{{-9, -18, -27}, {-6, -15, -24}});
    CHECK((a * b).value() == Array{{10, 40, 90}, {40, 100, 180}});
    CHECK_ALLCLOSE((b / a).value(), Array({{10, 10, 10}, {2.5, 4, 5}}));
    CHECK((-a).value()(1, 2) == -6);
    CHECK((a + 1.0f).value()(0, 0) == 2);
    CHECK((1.0f - a).value()(0, 1) == -1);
    CHECK((2.0f * a).value()(1, 0) == 8);
    CHECK((a / 2.0f).value()(1, 1) == 2.5f);
    CHECK_ALLCLOSE((6.0f / a).value(), Array({{6, 3, 2}, {1.5, 1.2, 1}}));
    CHECK(tg::pow(a, 2.0f).value()(1, 2) == 36);
  }

  TEST_CASE("gradcheck: binary ops, same shape and broadcast") {
    const std::vector<std::pair<tg::Shape, tg::Shape>> shapes = {{{2, 3}, {2, 3}},       {{2, 3}, {3}},
                                                                 {{2, 3}, {2, 1}},       {{3, 1}, {1, 4}},
                                                                 {{2, 2, 3}, {2, 1, 3}}, {{4}, {}}};
    for (auto& [sa, sb] : shapes) {
      CAPTURE(tg::shape_str(sa));
      CAPTURE(tg::shape_str(sb));
      Tensor a = rnd(sa), b = rnd(sb), bpos = rnd(sb, 0.5f, 2.0f);
      check_grad([](const Inputs& x) { return x[0] + x[1]; }, {a, b});
      check_grad([](const Inputs& x) { return x[0] - x[1]; }, {a, b});
      check_grad([](const Inputs& x) { return x[0] * x[1]; }, {a, b});
      check_grad([](const Inputs& x) { return x[0] / x[1]; }, {a, bpos});
      check_grad([](const Inputs& x) { return x[1] - x[0]; }, {a, b});  // broadcast on the left
    }
  }

  TEST_CASE("gradcheck: scalar variants, neg, pow") {
    Tensor a = rnd({3, 2}, 0.5f, 2.0f);
    check_grad([](const Inputs& x) { return x[0] + 3.0f; }, {a});
    check_grad([](const Inputs& x) { return 3.0f - x[0]; }, {a});
    check_grad([](const Inputs& x) { return x[0] * -2.5f; }, {a});
    check_grad([](const Inputs& x) { return x[0] / 4.0f; }, {a});
    check_grad([](const Inputs& x) { return 2.0f / x[0]; }, {a});
    check_grad([](const Inputs& x) { return -x[0]; }, {a});
    check_grad([](const Inputs& x) { return tg::pow(x[0], 3.0f); }, {a});
    check_grad([](const Inputs& x) { return tg::pow(x[0], 0.5f); }, {a});
  }

  TEST_CASE("pow with exponent 0 has gradient 0, also at x = 0 (as PyTorch)") {
    // p * x^(p - 1) would be 0 * inf = NaN at 0; torch.pow(x, 0) gives [0, 0] here too (PyTorch 1.13).
    Tensor x({0.0f, 2.0f}, true);
    tg::sum(tg::pow(x, 0.0f)).backward();
    CHECK(x.grad().dense() == Array({0.0f, 0.0f}));
  }

  TEST_CASE("gradcheck: exp, log, tanh, sigmoid, relu") {
    Tensor a = rnd({2, 4}, -2.0f, 2.0f, true), pos = rnd({2, 4}, 0.3f, 3.0f);
    check_grad([](const Inputs& x) { return tg::exp(x[0]); }, {a});
    check_grad([](const Inputs& x) { return tg::log(x[0]); }, {pos});
    check_grad([](const Inputs& x) { return tg::tanh(x[0]); }, {a});
    check_grad([](const Inputs& x) { return tg::sigmoid(x[0]); }, {a});
    check_grad([](const Inputs& x) { return tg::relu(x[0]); }, {a});
    CHECK(tg::relu(Tensor({-1.0f, 0.0f, 2.0f})).value() == Array({0, 0, 2}));
    CHECK_ALLCLOSE(tg::sigmoid(Tensor({0.0f})).value(), Array({0.5f}));
  }

  TEST_CASE("gradcheck: matmul 2-d and batched, linear") {
    check_grad([](const Inputs& x) { return tg::matmul(x[0], x[1]); }, {rnd({3, 4}), rnd({4, 2})});
    check_grad([](const Inputs& x) { return tg::matmul(x[0], x[1]); }, {rnd({2, 3, 4}), rnd({4, 5})});
    check_grad([](const Inputs& x) { return tg::linear(x[0], x[1], x[2]); },
               {rnd({3, 4}), rnd({2, 4}), rnd({2})});
    check_grad([](const Inputs& x) { return tg::linear(x[0], x[1]); }, {rnd({2, 3, 4}), rnd({5, 4})});
  }

  TEST_CASE("matmul and linear with dimensions of size 1: values by a plain loop, gradients by gradcheck") {
    // xtensor gives a dimension of size 1 the stride 0; BLAS must still be handed the
    // row length as leading dimension, for every transpose the backward passes use.
    for (auto [n, k, m] : {std::array<std::size_t, 3>{1, 4, 3}, {3, 1, 2}, {2, 4, 1}, {1, 1, 1}}) {
      INFO("[" << n << ", " << k << "] x [" << k << ", " << m << "]");
      Tensor a = rnd({n, k}), b = rnd({k, m}), w = rnd({m, k}), bias = rnd({m});
      Array expected = xt::zeros<float>({n, m});
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t j = 0; j < m; ++j)
          for (std::size_t p = 0; p < k; ++p) expected(i, j) += a.value()(i, p) * b.value()(p, j);
      CHECK_ALLCLOSE(tg::matmul(a, b).value(), expected);
      check_grad([](const Inputs& x) { return tg::matmul(x[0], x[1]); }, {a, b});
      check_grad([](const Inputs& x) { return tg::linear(x[0], x[1], x[2]); }, {a, w, bias});
    }
  }

  TEST_CASE("gradcheck: reductions") {
    Tensor a = rnd({2, 3, 4});
    check_grad([](const Inputs& x) { return tg::sum(x[0]); }, {a});
    check_grad([](const Inputs& x) { return tg::mean(x[0]); }, {a});
    for (int64_t dim : {0, 1, 2, -1})
      for (bool keep : {false, true}) {
        CAPTURE(dim);
        CAPTURE(keep);
        check_grad([=](const Inputs& x) { return tg::sum(x[0], dim, keep); }, {a});
        check_grad([=](const Inputs& x) { return tg::mean(x[0], dim, keep); }, {a});
        check_grad([=](const Inputs& x) { return tg::max(x[0], dim, keep).values; }, {a});
      }
    CHECK(tg::sum(a, 1, true).shape() == tg::Shape{2, 1, 4});
    CHECK(tg::mean(a, -1).shape() == tg::Shape{2, 3});
    CHECK(tg::sum(a).shape() == tg::Shape{});
  }

  TEST_CASE("max: values and the gradient goes to the first arg-max") {
    Tensor a({{1, 5, 5}, {7, 2, 3}}, true);
    Tensor m = tg::max(a, 1).values;
    CHECK(m.value() == Array({5, 7}));
    tg::sum(m).backward();
    CHECK(a.grad().dense() == Array{{0, 1, 0}, {1, 0, 0}});
  }

  TEST_CASE("gradcheck: softmax, log_softmax on either dim") {
    Tensor a = rnd({3, 5}, -2.0f, 2.0f);
    for (int64_t dim : {0, 1}) {
      check_grad([=](const Inputs& x) { return tg::softmax(x[0], dim); }, {a});
      check_grad([=](const Inputs& x) { return tg::log_softmax(x[0], dim); }, {a});
    }
  }

  TEST_CASE("gradcheck: reshape, transpose, index_select") {
    Tensor a = rnd({2, 3, 4});
    check_grad([](const Inputs& x) { return tg::reshape(x[0], {6, -1}); }, {a});
    check_grad([](const Inputs& x) { return tg::transpose(x[0], 0, 2); }, {a});
    check_grad([](const Inputs& x) { return tg::transpose(x[0], -1, 1); }, {a});
    // Repeated rows: their gradients must add up.
    check_grad([](const Inputs& x) { return tg::index_select(x[0], 0, tg::Indices{1, 0, 1, 1}); }, {a});
    CHECK(tg::reshape(a, {4, -1}).shape() == tg::Shape{4, 6});
    CHECK(tg::transpose(Tensor({{1, 2, 3}, {4, 5, 6}})).value() == Array{{1, 4}, {2, 5}, {3, 6}});
  }

  TEST_CASE("gradcheck: losses") {
    tg::Indices y = {2, 0, 1, 2};
    Tensor logits = rnd({4, 3}, -2.0f, 2.0f);
    for (auto r : {tg::Reduction::mean, tg::Reduction::sum, tg::Reduction::none}) {
      check_grad([&](const Inputs& x) { return tg::cross_entropy(x[0], y, r); }, {logits});
      check_grad([&](const Inputs& x) { return tg::mse_loss(x[0], x[1], r); }, {rnd({2, 3}), rnd({2, 3})});
    }
  }

  TEST_CASE("one_hot") {
    Tensor h = tg::one_hot(tg::Indices{2, 0, 1});
    CHECK(h.value() == Array{{0, 0, 1}, {1, 0, 0}, {0, 1, 0}});
    CHECK_FALSE(h.requires_grad());
    CHECK(tg::one_hot(tg::Indices{{1, 0}, {3, 3}}, 4).shape() == tg::Shape{2, 2, 4});
    CHECK_THROWS_WITH_AS(tg::one_hot(tg::Indices{0, 4}, 4), doctest::Contains("one_hot: index 4"),
                         std::out_of_range);
    CHECK_THROWS_AS(tg::one_hot(tg::Indices{-1}, 3), std::out_of_range);
    // Sizes from a label value are checked as the factories check theirs: one
    // whose element count overflows is a length_error naming one_hot (before,
    // 2^62 classes wrapped a stride around), and so is the largest int64 label
    // with num_classes = -1 (max + 1 overflows).
    const int64_t huge = int64_t{1} << 62;
    CHECK_THROWS_WITH_AS(tg::one_hot(tg::Indices{0, huge - 1}, huge), doctest::Contains("one_hot"), std::length_error);
    CHECK_THROWS_WITH_AS(tg::one_hot(tg::Indices{std::numeric_limits<int64_t>::max()}), doctest::Contains("one_hot"),
                         std::length_error);
    // A size that fits the addresses but not the memory: OutOfMemory naming one_hot
    // (AddressSanitizer's allocator stops the program there instead of throwing).
    if (!tg::test::address_sanitizer)
      CHECK_THROWS_WITH_AS(tg::one_hot(tg::Indices{0, 1}, int64_t{9} << 50), doctest::Contains("one_hot"),
                           tg::OutOfMemory);
  }

  TEST_CASE("PyTorch parity: log_softmax, softmax, cross_entropy, matmul, linear, mse_loss") {
    using J = nlohmann::json;
    check_core_parity("log_softmax_dim1", [](Inputs& x, const J&) { return tg::log_softmax(x[0], 1); });
    check_core_parity("log_softmax_dim0", [](Inputs& x, const J&) { return tg::log_softmax(x[0], 0); });
    check_core_parity("log_softmax_big", [](Inputs& x, const J&) { return tg::log_softmax(x[0], 1); });
    check_core_parity("softmax_dim1", [](Inputs& x, const J&) { return tg::softmax(x[0], 1); });
    const std::pair<const char*, tg::Reduction> reductions[] = {{"cross_entropy_mean", tg::Reduction::mean},
                                                                {"cross_entropy_sum", tg::Reduction::sum},
                                                                {"cross_entropy_none", tg::Reduction::none}};
    for (auto [name, r] : reductions)
      check_core_parity(name, [r = r](Inputs& x, const J& c) {
        return tg::cross_entropy(x[0], tg::test::to_int_array(c.at("target")), r);
      });
    check_core_parity("matmul_2d", [](Inputs& x, const J&) { return tg::matmul(x[0], x[1]); });
    check_core_parity("matmul_3d", [](Inputs& x, const J&) { return tg::matmul(x[0], x[1]); });
    check_core_parity("linear_bias", [](Inputs& x, const J&) { return tg::linear(x[0], x[1], x[2]); });
    check_core_parity("mse_loss", [](Inputs& x, const J&) { return tg::mse_loss(x[0], x[1]); });
  }

  TEST_CASE("log_softmax stays finite for huge logits") {
    Tensor big({{1000.0f, 0.0f, -1000.0f}});
    Array y = tg::log_softmax(big).value();
    CHECK(y(0, 0) == 0.0f);
    CHECK(std::isfinite(y(0, 2)));
    CHECK(y(0, 2) == -2000.0f);
  }

  TEST_CASE("shape errors name the op and both shapes") {
    Tensor a = tg::zeros({2, 3}), b = tg::zeros({4}), c = tg::zeros({3, 5});
    CHECK_THROWS_WITH_AS(a + b, "add: shapes [2, 3] and [4] cannot be broadcast together",
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(a - b, doctest::Contains("sub: shapes [2, 3] and [4]"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(a * b, doctest::Contains("mul: shapes [2, 3] and [4]"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(a / b, doctest::Contains("div: shapes [2, 3] and [4]"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(tg::matmul(a, a), doctest::Contains("matmul: shapes [2, 3] and [2, 3]"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(tg::matmul(b, c), doctest::Contains("matmul"), std::invalid_argument);
    CHECK_NOTHROW(tg::matmul(a, c));
    CHECK_THROWS_WITH_AS(tg::linear(a, c),
                         doctest::Contains("linear: input [2, 3] does not fit weight [3, 5]"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(tg::linear(a, tg::zeros({5, 3}), tg::zeros({4})), doctest::Contains("bias [4]"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(tg::sum(a, 2), doctest::Contains("sum: dim 2"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(tg::max(a, -3), doctest::Contains("max: dim -3"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(tg::softmax(a, 5), doctest::Contains("softmax"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(tg::reshape(a, {4, -1}), doctest::Contains("reshape"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(tg::reshape(a, {5}), doctest::Contains("[2, 3]"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(tg::transpose(a, 0, 2), doctest::Contains("transpose"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(tg::index_select(a, 1, tg::Indices{0}), doctest::Contains("index_select"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(tg::index_select(a, 0, tg::Indices{2}),
                         "index_select: index 2 out of range for size 2", std::out_of_range);
    CHECK_THROWS_AS(tg::index_select(a, 0, tg::Indices{-1}), std::out_of_range);
    CHECK_THROWS_WITH_AS(tg::cross_entropy(a, tg::Indices{0, 3}),
                         "cross_entropy: index 3 out of range for size 3", std::out_of_range);
    CHECK_THROWS_WITH_AS(tg::cross_entropy(a, tg::Indices{0}), doctest::Contains("target must be [N] = [2]"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(tg::cross_entropy(b, tg::Indices{0}), doctest::Contains("[N, C]"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(tg::mse_loss(a, tg::zeros({3, 2})),
                         doctest::Contains("mse_loss: input [2, 3] and target [3, 2]"),
                         std::invalid_argument);
  }

  TEST_CASE("zero-size edge cases do not crash") {
    Tensor e = tg::zeros({0, 3}, true), w = tg::ones({3, 2}, true);
    Tensor y = tg::matmul(e, w);
    CHECK(y.shape() == tg::Shape{0, 2});
    tg::sum(y).backward();
    CHECK(w.grad().dense() == xt::zeros<float>({3, 2}));
    Tensor k0 = tg::matmul(tg::zeros({2, 0}), tg::zeros({0, 4}));
    CHECK(k0.value() == xt::zeros<float>({2, 4}));
    CHECK_THROWS_AS(tg::max(tg::zeros({2, 0}), 1), std::invalid_argument);
    CHECK_THROWS_AS(tg::mean(tg::zeros({0})), std::invalid_argument);
  }
}
