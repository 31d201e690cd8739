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
                    [=](const Array& g, const Array& y, std::vector<Tensor>& in) {
                      Array d = 1.0f - y * y;
                      switch (bug) {
                        case Bug::none:
                          in[0].accumulate_grad(Array(g * d));
                          break;
                        case Bug::scaled:
                          in[0].accumulate_grad(Array(g * d * factor));
                          break;
                        case Bug::sign:
                          in[0].accumulate_grad(Array(-g * d));
                          break;
                        case Bug::forgot_chain:
                          in[0].accumulate_grad(Array(d));
                          break;
                        case Bug::off_by_one: {
                          Array w = g * d;
                          w.data()[0] += 0.05f;  // one element slightly wrong
                          in[0].accumulate_grad(std::move(w));
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
}
