// gradcheck must pass correct gradients and catch wrong ones.
#include <doctest/doctest.h>

#include <tapegrad/tapegrad.hpp>

#include "helpers.hpp"

using tg::Array;
using tg::Tensor;
using Inputs = std::vector<Tensor>;

namespace {

// tanh with a backward we can break on purpose: derivative * factor, optionally
// with a wrong formula.
enum class Bug { none, scaled, sign, forgot_chain, off_by_one };

Tensor my_tanh(const Tensor& a, Bug bug, float factor = 1.0f) {
  return tg::record("my_tanh", xt::tanh(a.value()), {a},
                    [=](const Array& g, const tg::Node& n, tg::Grads& grads) {
                      const Array& y = n.output_value();
                      Array d = 1.0f - y * y;
                      switch (bug) {
                        case Bug::none:
                          grads[0] = g * d;
                          break;
                        case Bug::scaled:
                          grads[0] = g * d * factor;
                          break;
                        case Bug::sign:
                          grads[0] = -g * d;
                          break;
                        case Bug::forgot_chain:
                          grads[0] = d;
                          break;
                        case Bug::off_by_one: {
                          Array w = g * d;
                          w.data()[0] += 0.05f;  // one element slightly wrong
                          grads[0] = std::move(w);
                        }
                      }
                    });
}

}  // namespace

TEST_SUITE("core.gradcheck") {
  TEST_CASE("a correct custom op passes; the report says so") {
    tg::Generator gen(5);
    Tensor x = tg::randn({3, 4}, gen, true);
    auto r = tg::gradcheck([](const Inputs& in) { return my_tanh(in[0] * 2.0f, Bug::none); }, {x});
    CHECK_MESSAGE(r.ok, r.str());
    CHECK(r.op == "my_tanh");
    CHECK(r.checked == 12);
    CHECK(r.max_abs_error < 2e-3);
  }

  TEST_CASE("wrong backwards are caught, on many random inputs") {
    int caught = 0, trials = 0;
    for (unsigned seed = 0; seed < 20; ++seed) {
      tg::Generator gen(seed);
      for (Bug bug : {Bug::scaled, Bug::sign, Bug::forgot_chain, Bug::off_by_one}) {
        Tensor x = tg::randn({2, 3}, gen, true);
        auto r = tg::gradcheck([&](const Inputs& in) { return my_tanh(in[0], bug, 1.05f); }, {x});
        ++trials;
        caught += !r.ok;
        CHECK_MESSAGE(!r.ok, "not caught: " << r.str());
      }
    }
    CHECK(caught == trials);
  }

  TEST_CASE("a correct backward passes on many random inputs (no false alarms)") {
    for (unsigned seed = 0; seed < 20; ++seed) {
      tg::Generator gen(100 + seed);
      Tensor x = tg::randn({4, 5}, gen, true), w = tg::randn({5, 3}, gen, true);
      auto r = tg::gradcheck(
          [](const Inputs& in) { return tg::log_softmax(my_tanh(tg::matmul(in[0], in[1]), Bug::none), 1); },
          {x, w});
      CHECK_MESSAGE(r.ok, r.str());
    }
  }

  TEST_CASE("the failure report names the op, the input and the element") {
    Tensor x({{0.1f, 0.2f}, {0.3f, 0.4f}}, true);
    auto r = tg::gradcheck([](const Inputs& in) { return my_tanh(in[0], Bug::off_by_one); }, {x});
    CHECK_FALSE(r.ok);
    CHECK(r.input == 0);
    CHECK(r.where == "[0, 0]");
    CHECK(r.analytic - r.numeric == doctest::Approx(0.05).epsilon(0.05));
    const std::string s = r.str();
    CHECK(s.find("FAILED") != std::string::npos);
    CHECK(s.find("my_tanh") != std::string::npos);
    CHECK(r.failed >= 1);
  }

  TEST_CASE("throw_on_failure throws GradcheckError carrying the report") {
    Tensor x({0.5f, -0.5f}, true);
    tg::GradcheckOptions opt;
    opt.throw_on_failure = true;
    CHECK_THROWS_AS(tg::gradcheck([](const Inputs& in) { return my_tanh(in[0], Bug::sign); }, {x}, opt),
                    tg::GradcheckError);
    CHECK_NOTHROW(tg::gradcheck([](const Inputs& in) { return my_tanh(in[0], Bug::none); }, {x}, opt));
  }

  TEST_CASE("gradcheck leaves values and existing gradients as they were") {
    Tensor x({0.5f, -0.5f}, true);
    x.accumulate_grad(Array{7.0f, 8.0f});
    const Array before = x.value();
    tg::gradcheck([](const Inputs& in) { return tg::tanh(in[0]); }, {x});
    CHECK(x.value() == before);
    CHECK(x.grad().dense() == Array({7.0f, 8.0f}));
    CHECK_THROWS_AS(tg::gradcheck([](const Inputs& in) { return in[0] * 1.0f; }, {x * 2.0f}),
                    std::invalid_argument);
  }

  TEST_CASE("the report names the worst failing element and counts the failures") {
    // y = 50 x^2 (gradient 100 x) with two elements wrong: element 0 by 0.5 at a
    // gradient of ~100 (inside the relative tolerance: passes, yet the largest
    // absolute error), element 2 by 0.05 at a gradient of ~0.1 (fails).
    auto fn = [](const Inputs& in) {
      return tg::record("bent_square", 50.0f * in[0].value() * in[0].value(), {in[0]},
                        [](const Array& g, const tg::Node& n, tg::Grads& grads) {
                          Array d = g * 100.0f * n.input(0);
                          d.data()[0] += 0.5f;
                          d.data()[2] += 0.05f;
                          grads[0] = std::move(d);
                        });
    };
    Tensor x({1.0f, 0.5f, 0.001f, 0.25f}, true);
    tg::GradcheckOptions opt;
    opt.name = "bent_square_fn";
    auto r = tg::gradcheck([&](const Inputs& in) { return tg::sum(fn(in)); }, {x}, opt);
    CHECK_FALSE(r.ok);
    CHECK(r.failed == 1);
    CHECK(r.checked == 4);
    CHECK(r.where == "[2]");
    CHECK(r.analytic - r.numeric == doctest::Approx(0.05).epsilon(0.05));
    CHECK(r.max_abs_error > 0.4);  // element 0's, which passed
    const std::string s = r.str();
    CHECK(s.find("FAILED for 'bent_square_fn' (the whole function") != std::string::npos);
    CHECK(s.find("output made by op 'sum'") != std::string::npos);
    CHECK(s.find("1 failed") != std::string::npos);
    CHECK(s.find("worst failure at input 0 [2]") != std::string::npos);
  }

  TEST_CASE("a one-element output is checked as it is: analytic values are backward()'s gradients") {
    Tensor x({0.3f, -0.7f}, true);
    auto r = tg::gradcheck([](const Inputs& in) { return tg::sum(tg::tanh(in[0]) * 3.0f); }, {x});
    CHECK(r.ok);
    CHECK(r.projection == "L = fn(inputs)");
    const Array expected = 3.0f * (1.0f - xt::square(xt::tanh(x.value())));
    const std::size_t k = r.where == "[0]" ? 0 : 1;
    CHECK(r.analytic == doctest::Approx(expected(k)).epsilon(1e-6));
    auto r2 = tg::gradcheck([](const Inputs& in) { return tg::tanh(in[0]); }, {x});
    CHECK(r2.projection.find("L = sum(fn(inputs) * w)") == 0);
  }

  TEST_CASE("when fn throws, the inputs' values and gradients are restored") {
    Tensor x({0.5f, -0.5f, 2.0f}, true), y({1.0f}, true);
    x.accumulate_grad(Array{7.0f, 8.0f, 9.0f});
    const Array before = x.value();
    for (int fail_at : {0, 1, 4}) {  // the first call (before backward), and calls while nudging
      CAPTURE(fail_at);
      int calls = 0;
      auto fn = [&](const Inputs& in) {
        if (calls++ == fail_at) throw std::runtime_error("fn failed");
        return tg::sum(in[0] * in[1]);
      };
      CHECK_THROWS_WITH_AS(tg::gradcheck(fn, {x, y}), "fn failed", std::runtime_error);
      CHECK(x.value() == before);
      CHECK(x.grad().dense() == Array({7.0f, 8.0f, 9.0f}));
      CHECK(y.grad().empty());
    }
  }
}
