// abs, sqrt, clamp, maximum, minimum, layer_norm, dropout and multinomial:
// values on paper (the gradient at kinks and ties follows PyTorch's rules),
// gradients against finite differences (gradcheck), PyTorch's numbers
// (tests/data/core_reference.json), and the random ops by their statistics.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>

#include <tapegrad/tapegrad.hpp>

#include "helpers.hpp"

using tg::Array;
using tg::Indices;
using tg::Tensor;
using Inputs = std::vector<Tensor>;
using tg::test::check_core_parity;
using tg::test::check_grad;
using J = nlohmann::json;

namespace {

tg::Generator gen(99);

// Uniform in [lo, hi), kept at least 0.05 away from each point in `avoid` (kinks).
Tensor rnd(const tg::Shape& shape, float lo = -1.0f, float hi = 1.0f, std::vector<float> avoid = {}) {
  Tensor t = tg::rand(shape, gen, true);
  for (float& x : t.value_mut()) {
    x = lo + (hi - lo) * x;
    for (float k : avoid)
      if (std::abs(x - k) < 0.05f) x = k + (x < k ? -0.05f : 0.05f);
  }
  return t;
}

Array grad_of(const std::function<Tensor(const Tensor&)>& fn, Tensor x) {
  x.zero_grad();
  tg::sum(fn(x)).backward();
  return x.grad().dense();
}

}  // namespace

TEST_SUITE("core.ops.math") {
  TEST_CASE("abs and sqrt: values, gradients at 0 as PyTorch") {
    Tensor x({-2.0f, 0.0f, 3.0f}, true);
    CHECK(tg::abs(x).value() == Array{2, 0, 3});
    CHECK(grad_of([](const Tensor& t) { return tg::abs(t); }, x) == Array{-1, 0, 1});  // sign, 0 at 0
    Tensor y({0.0f, 4.0f}, true);
    CHECK(tg::sqrt(y).value() == Array{0, 2});
    Array gy = grad_of([](const Tensor& t) { return tg::sqrt(t); }, y);
    CHECK(std::isinf(gy(0)));  // 1 / (2 sqrt(0)), as PyTorch
    CHECK(gy(1) == 0.25f);
    check_grad([](const Inputs& v) { return tg::abs(v[0]); }, {rnd({3, 4}, -1, 1, {0})});
    check_grad([](const Inputs& v) { return tg::sqrt(v[0]); }, {rnd({3, 4}, 0.2f, 3)});
    check_core_parity("abs", [](Inputs& v, const J&) { return tg::abs(v[0]); }, 1e-5);
    check_core_parity("sqrt", [](Inputs& v, const J&) { return tg::sqrt(v[0]); }, 1e-5);
  }

  TEST_CASE("clamp: the gradient passes at the bounds, as PyTorch") {
    Tensor x({-1.0f, 0.0f, 0.5f, 1.0f, 2.0f, NAN}, true);
    Tensor y = tg::clamp(x, 0.0f, 1.0f);
    CHECK(y.value()(0) == 0);
    CHECK(y.value()(4) == 1);
    CHECK(std::isnan(y.value()(5)));
    Array g = grad_of([](const Tensor& t) { return tg::clamp(t, 0.0f, 1.0f); }, x);
    CHECK(g == Array{0, 1, 1, 1, 0, 0});
    CHECK(tg::clamp(x, std::nullopt, 0.5f).value()(4) == 0.5f);
    CHECK(tg::clamp(x, -0.5f, std::nullopt).value()(0) == -0.5f);
    // min > max: everything becomes max and no gradient passes (PyTorch too)
    CHECK(grad_of([](const Tensor& t) { return tg::clamp(t, 1.0f, 0.0f); }, x) == Array{0, 0, 0, 0, 0, 0});
    CHECK(tg::clamp(Tensor({-3.0f, 3.0f}), 1.0f, 0.0f).value() == Array{0, 0});
    check_grad([](const Inputs& v) { return tg::clamp(v[0], -0.5f, 0.5f); }, {rnd({4, 5}, -1, 1, {-0.5f, 0.5f})});
    check_core_parity("clamp", [](Inputs& v, const J&) { return tg::clamp(v[0], -0.5f, 0.5f); }, 1e-5);
    check_core_parity("clamp_min", [](Inputs& v, const J&) { return tg::clamp(v[0], 0.25f, std::nullopt); }, 1e-5);
    check_core_parity("clamp_max", [](Inputs& v, const J&) { return tg::clamp(v[0], std::nullopt, -0.25f); }, 1e-5);
    CHECK_THROWS_WITH_AS(tg::clamp(x, std::nullopt, std::nullopt), "clamp: give at least one of min and max",
                         std::invalid_argument);
  }

  TEST_CASE("maximum and minimum: a tie splits the gradient in halves, as PyTorch") {
    Tensor a({1.0f, 2.0f, 3.0f}, true), b({1.0f, 5.0f, 0.0f}, true);
    CHECK(tg::maximum(a, b).value() == Array{1, 5, 3});
    CHECK(tg::minimum(a, b).value() == Array{1, 2, 0});
    tg::sum(tg::maximum(a, b)).backward();
    CHECK(a.grad().dense() == Array{0.5f, 0, 1});
    CHECK(b.grad().dense() == Array{0.5f, 1, 0});
    a.zero_grad();
    b.zero_grad();
    tg::sum(tg::minimum(a, b)).backward();
    CHECK(a.grad().dense() == Array{0.5f, 1, 0});
    CHECK(b.grad().dense() == Array{0.5f, 0, 1});
    CHECK(std::isnan(tg::maximum(Tensor({NAN}), Tensor({1.0f})).item()));
    CHECK(std::isnan(tg::minimum(Tensor({1.0f}), Tensor({NAN})).item()));

    // Broadcast, inputs apart from each other so no tie sits within eps.
    Tensor p = rnd({3, 4}, -1, 1), q = rnd({4}, -1, 1);
    for (float& v : q.value_mut())
      for (float u : p.value())
        if (std::abs(u - v) < 0.05f) v += 0.1f;
    check_grad([](const Inputs& v) { return tg::maximum(v[0], v[1]); }, {p, q});
    check_grad([](const Inputs& v) { return tg::minimum(v[1], v[0]); }, {p, q});
    check_core_parity("maximum", [](Inputs& v, const J&) { return tg::maximum(v[0], v[1]); }, 1e-5);
    check_core_parity("minimum", [](Inputs& v, const J&) { return tg::minimum(v[0], v[1]); }, 1e-5);
    CHECK_THROWS_WITH_AS(tg::maximum(tg::zeros({2}), tg::zeros({3})),
                         "maximum: shapes [2] and [3] cannot be broadcast together", std::invalid_argument);
    CHECK_THROWS_AS(tg::minimum(tg::zeros({2}), tg::zeros({3})), std::invalid_argument);
  }

  TEST_CASE("layer_norm: values on paper, gradcheck, PyTorch parity") {
    Tensor x({{1, 2, 3}, {2, 2, 2}});
    Array y = tg::layer_norm(x, {3}, std::nullopt, std::nullopt, 1e-5f).value();
    // mean 2, biased variance 2/3: (x - 2) / sqrt(2/3 + eps); a constant row gives 0
    const float s = 1.0f / std::sqrt(2.0f / 3.0f + 1e-5f);
    CHECK_ALLCLOSE(y, Array({{-s, 0, s}, {0, 0, 0}}), 1e-6, 1e-6);
    check_grad([](const Inputs& v) { return tg::layer_norm(v[0], {4}, v[1], v[2]); },
               {rnd({3, 4}, -2, 2), rnd({4}), rnd({4})});
    check_grad([](const Inputs& v) { return tg::layer_norm(v[0], {2, 3}, v[1], std::nullopt, 1e-3f); },
               {rnd({2, 2, 3}, -2, 2), rnd({2, 3})});
    check_grad([](const Inputs& v) { return tg::layer_norm(v[0], {5}, std::nullopt, v[1]); },
               {rnd({2, 5}, -2, 2), rnd({5})});
    check_core_parity("layer_norm_last", [](Inputs& v, const J&) { return tg::layer_norm(v[0], {5}, v[1], v[2]); }, 1e-5);
    check_core_parity("layer_norm_last2", [](Inputs& v, const J&) { return tg::layer_norm(v[0], {3, 4}, v[1], v[2], 1e-3f); }, 1e-5);
    check_core_parity("layer_norm_plain", [](Inputs& v, const J&) { return tg::layer_norm(v[0], {6}, std::nullopt, std::nullopt); }, 1e-5);

    Tensor w = tg::ones({3});
    CHECK_THROWS_WITH_AS(tg::layer_norm(x, {2}, std::nullopt, std::nullopt),
                         "layer_norm: input [2, 3] does not end with normalized_shape [2]", std::invalid_argument);
    CHECK_THROWS_AS(tg::layer_norm(x, {1, 2, 3}, std::nullopt, std::nullopt), std::invalid_argument);
    CHECK_THROWS_WITH_AS(tg::layer_norm(x, {3}, tg::ones({2}), std::nullopt),
                         "layer_norm: weight [2] for normalized_shape [3]", std::invalid_argument);
    CHECK_THROWS_WITH_AS(tg::layer_norm(x, {3}, w, tg::ones({3, 1})),
                         "layer_norm: bias [3, 1] for normalized_shape [3]", std::invalid_argument);
    CHECK_THROWS_AS(tg::layer_norm(x, {3}, w, w, -1.0f), std::invalid_argument);
  }

  TEST_CASE("dropout: inverted scaling as PyTorch's, a mask from the generator") {
    const J& c = tg::test::core_case("dropout");
    const float p = c.at("p").get<float>();
    Tensor x(tg::test::to_array(c.at("input")), true);
    const Array torch_out = tg::test::to_array(c.at("out"));
    tg::Generator g(3);
    Tensor y = tg::dropout(x, p, true, g);
    // Each element is 0 or x / (1 - p); where PyTorch kept it too, the values agree.
    std::size_t both = 0, zeros = 0;
    for (std::size_t i = 0; i < x.numel(); ++i) {
      const float v = y.value().data()[i], t = torch_out.data()[i];
      if (v == 0) {
        ++zeros;
        continue;
      }
      CHECK(v == doctest::Approx(x.value().data()[i] / (1 - p)).epsilon(1e-6));
      if (t != 0) {
        ++both;
        CHECK(v == doctest::Approx(t).epsilon(1e-6));
      }
    }
    CHECK(both > 300);  // about 0.7 * 0.7 * 1000 positions kept by both
    // The gradient uses the same mask: d y / d x = y / x.
    tg::sum(y).backward();
    for (std::size_t i = 0; i < x.numel(); ++i)
      CHECK(x.grad().dense().data()[i] == (y.value().data()[i] == 0 ? 0.0f : 1.0f / (1.0f - p)));

    // The same generator state gives the same mask; eval or p = 0 return the input itself.
    tg::Generator g1(5), g2(5);
    CHECK(tg::dropout(x, 0.5f, true, g1).value() == tg::dropout(x, 0.5f, true, g2).value());
    CHECK(tg::dropout(x, 0.5f, false, g1).is_same(x));
    CHECK(tg::dropout(x, 0.0f, true, g1).is_same(x));
    CHECK(tg::dropout(x, 1.0f, true, g1).value() == xt::zeros<float>(x.shape()));
    check_grad(
        [](const Inputs& v) {
          tg::Generator fixed(11);  // the same mask at every evaluation
          return tg::dropout(v[0], 0.4f, true, fixed);
        },
        {rnd({4, 5})});

    const std::string before = g1.state();
    CHECK_THROWS_WITH_AS(tg::dropout(x, 1.5f, true, g1), doctest::Contains("dropout: probability has to be between 0 and 1, but got 1.5"),
                         std::invalid_argument);
    CHECK_THROWS_AS(tg::dropout(x, -0.1f, true, g1), std::invalid_argument);
    CHECK(g1.state() == before);
  }

  TEST_CASE("dropout zeroes a fraction p") {
    tg::Generator g(21);
    for (float p : {0.1f, 0.5f, 0.9f}) {
      Tensor y = tg::dropout(tg::ones({200, 500}), p, true, g);
      double zeros = 0;
      for (float v : y.value()) zeros += v == 0;
      // 100,000 draws: one standard deviation of the fraction is at most 0.0016.
      CHECK(std::abs(zeros / 1e5 - p) < 0.01);
    }
  }

  TEST_CASE("multinomial: frequencies follow the weights; zero weights never come up") {
    tg::Generator g(8);
    Tensor probs({0.1f, 0.0f, 0.6f, 0.3f});
    const int n = 20000;
    Indices s = tg::multinomial(probs, n, true, g);
    CHECK(s.shape()[0] == static_cast<std::size_t>(n));
    std::map<int64_t, int> count;
    for (int64_t v : s) ++count[v];
    CHECK(count[1] == 0);
    // Pearson's chi-square over the 3 possible categories (2 degrees of freedom):
    // 18.4 is its 99.99% quantile.
    double chi2 = 0;
    for (auto [k, pk] : {std::pair{0, 0.1}, std::pair{2, 0.6}, std::pair{3, 0.3}}) {
      const double expected = pk * n;
      chi2 += (count[k] - expected) * (count[k] - expected) / expected;
    }
    CHECK(chi2 < 18.4);

    // Weights need not sum to 1: 4x the weights (exact in float) draw the same ids.
    tg::Generator g1(1), g2(1);
    CHECK(tg::multinomial(probs, 50, true, g1) == tg::multinomial(probs * 4.0f, 50, true, g2));
  }

  TEST_CASE("multinomial: rows, sampling without replacement") {
    tg::Generator g(9);
    Tensor probs({{0.0f, 0.0f, 1.0f}, {0.5f, 0.5f, 0.0f}});
    Indices s = tg::multinomial(probs, 6, true, g);
    CHECK(tg::Shape(s.shape().begin(), s.shape().end()) == tg::Shape{2, 6});
    for (std::size_t j = 0; j < 6; ++j) {
      CHECK(s(0, j) == 2);
      CHECK(s(1, j) < 2);
    }
    // Without replacement, drawing every category gives each once.
    Indices all = tg::multinomial(Tensor({0.1f, 0.2f, 0.3f, 0.4f}), 4, g);
    std::vector<int64_t> sorted(all.begin(), all.end());
    std::sort(sorted.begin(), sorted.end());
    CHECK(sorted == std::vector<int64_t>{0, 1, 2, 3});
    // The first draw follows the weights; the second never repeats it.
    std::map<int64_t, int> first;
    const int n = 10000;
    for (int i = 0; i < n; ++i) {
      Indices two = tg::multinomial(Tensor({1.0f, 2.0f, 3.0f, 4.0f}), 2, false, g);
      ++first[two(0)];
      CHECK(two(0) != two(1));
    }
    double chi2 = 0;
    for (int k = 0; k < 4; ++k) {
      const double expected = n * (k + 1) / 10.0;
      chi2 += (first[k] - expected) * (first[k] - expected) / expected;
    }
    CHECK(chi2 < 21.1);  // 99.99% quantile, 3 degrees of freedom
  }

  TEST_CASE("multinomial: bad weights throw before anything is drawn") {
    tg::Generator g(10);
    const std::string before = g.state();
    Tensor ok({0.5f, 0.5f});
    CHECK_THROWS_WITH_AS(tg::multinomial(Tensor({0.5f, -0.1f}), 1, g),
                         doctest::Contains("multinomial: probs of shape [2] holds -0.1"), std::invalid_argument);
    CHECK_THROWS_AS(tg::multinomial(Tensor({0.5f, NAN}), 1, g), std::invalid_argument);
    CHECK_THROWS_AS(tg::multinomial(Tensor({{0.5f, INFINITY}}), 1, g), std::invalid_argument);
    CHECK_THROWS_WITH_AS(tg::multinomial(Tensor({{1.0f, 1.0f}, {0.0f, 0.0f}}), 1, true, g),
                         "multinomial: row 1 of probs [2, 2] sums to 0", std::invalid_argument);
    CHECK_THROWS_WITH_AS(tg::multinomial(ok, 3, g),
                         "multinomial: cannot draw 3 samples without replacement from 2 categories",
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(tg::multinomial(Tensor({0.5f, 0.0f}), 2, g),
                         "multinomial: row 0 has 1 non-zero weights, too few for 2 samples without replacement",
                         std::invalid_argument);
    CHECK_THROWS_AS(tg::multinomial(ok, 0, true, g), std::invalid_argument);
    CHECK_THROWS_AS(tg::multinomial(tg::ones({1, 1, 2}), 1, g), std::invalid_argument);
    CHECK(g.state() == before);
    CHECK_NOTHROW(tg::multinomial(ok, 3, true, g));  // with replacement, more samples than categories
  }
}
