// NaN, +-inf, +-0, tiny and huge inputs: every elementwise op and reduction,
// the smooth activations and the binary losses give PyTorch's forward values
// and gradients (tests/data/special_values_reference.json, from
// tests/tools/gen_special_values_reference.py). A NaN that PyTorch shows
// must show here too: hiding one (relu(NaN) = 0, say) hides a training bug.
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <sstream>
#include <string>

#include <doctest/doctest.h>

#include "helpers.hpp"
#include <tapegrad/tapegrad.hpp>

using tg::Array;
using tg::Tensor;

namespace {

Array special_array(const nlohmann::json& j) {
  tg::Shape shape = j.at("shape").get<tg::Shape>();
  Array a = xt::empty<float>(shape);
  std::size_t i = 0;
  for (const auto& v : j.at("data")) a.data()[i++] = std::strtof(v.get<std::string>().c_str(), nullptr);
  return a;
}

// The same value: both NaN, equal (infinities and zeros included), or finite
// and within float32 rounding of each other.
bool same_value(float got, float want) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
  if (std::isinf(want) || std::isinf(got)) return got == want;
  return std::abs(got - want) <= 1e-6f * std::max(1.0f, std::abs(want)) ||
         std::abs(got - want) <= 2e-7f * std::abs(want);
}

// "" when equal, else the first difference with its inputs.
std::string difference(const Array& got, const Array& want, const std::vector<Array>& inputs) {
  if (got.shape() != want.shape()) return "shape " + tg::shape_str(got.shape()) + " vs " + tg::shape_str(want.shape());
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!same_value(got.data()[i], want.data()[i])) {
      std::ostringstream s;
      s << "element " << i << ": got " << got.data()[i] << ", PyTorch " << want.data()[i] << " (inputs";
      for (const Array& in : inputs) s << ' ' << in.data()[std::min(i, in.size() - 1)];
      s << ')';
      return s.str();
    }
  return "";
}

using Op = std::function<Tensor(std::vector<Tensor>&)>;

// Runs op on the case's inputs, seeds backward with ones, compares with PyTorch.
void check_case(const std::string& name, const Op& op) {
  const nlohmann::json& c = tg::test::reference_case("special_values_reference", name);
  std::vector<Tensor> inputs;
  std::vector<Array> values;
  for (const auto& in : c.at("inputs")) {
    values.push_back(special_array(in));
    inputs.emplace_back(values.back(), true);
  }
  Tensor out = op(inputs);
  out.backward(Array(xt::ones<float>(out.shape())));
  CAPTURE(name);
  CHECK_MESSAGE(difference(out.value(), special_array(c.at("out")), values) == "", "forward: ",
                difference(out.value(), special_array(c.at("out")), values));
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Array want = special_array(c.at("grads").at(i));
    CHECK_MESSAGE(difference(inputs[i].grad_dense(), want, values) == "", "gradient of input ", i, ": ",
                  difference(inputs[i].grad_dense(), want, values));
  }
}

}  // namespace

TEST_SUITE("core") {
  TEST_CASE("elementwise ops at NaN, inf, zeros, tiny and huge values: PyTorch's values and gradients") {
    const std::map<std::string, Op> unary = {
        {"neg", [](auto& x) { return -x[0]; }},
        {"exp", [](auto& x) { return tg::exp(x[0]); }},
        {"log", [](auto& x) { return tg::log(x[0]); }},
        {"tanh", [](auto& x) { return tg::tanh(x[0]); }},
        {"sigmoid", [](auto& x) { return tg::sigmoid(x[0]); }},
        {"relu", [](auto& x) { return tg::relu(x[0]); }},
        {"abs", [](auto& x) { return tg::abs(x[0]); }},
        {"sqrt", [](auto& x) { return tg::sqrt(x[0]); }},
        {"pow_2", [](auto& x) { return tg::pow(x[0], 2.0f); }},
        {"pow_half", [](auto& x) { return tg::pow(x[0], 0.5f); }},
        {"pow_neg1", [](auto& x) { return tg::pow(x[0], -1.0f); }},
        {"pow_0", [](auto& x) { return tg::pow(x[0], 0.0f); }},
        {"pow_3", [](auto& x) { return tg::pow(x[0], 3.0f); }},
        {"add_scalar", [](auto& x) { return x[0] + 1.5f; }},
        {"mul_scalar", [](auto& x) { return x[0] * 2.0f; }},
        {"div_scalar", [](auto& x) { return x[0] / 2.0f; }},
        {"div_tiny_scalar", [](auto& x) { return x[0] / 1e-39f; }},
        {"rdiv_scalar", [](auto& x) { return 2.0f / x[0]; }},
        {"rsub_scalar", [](auto& x) { return 1.0f - x[0]; }},
        {"clamp", [](auto& x) { return tg::clamp(x[0], -1.0f, 1.0f); }},
        {"clamp_min", [](auto& x) { return tg::clamp(x[0], 0.0f, std::nullopt); }},
        {"add", [](auto& x) { return x[0] + x[1]; }},
        {"sub", [](auto& x) { return x[0] - x[1]; }},
        {"mul", [](auto& x) { return x[0] * x[1]; }},
        {"div", [](auto& x) { return x[0] / x[1]; }},
        {"maximum", [](auto& x) { return tg::maximum(x[0], x[1]); }},
        {"minimum", [](auto& x) { return tg::minimum(x[0], x[1]); }},
    };
    for (const auto& [name, op] : unary) check_case(name, op);
  }

  TEST_CASE("reductions, softmax, losses and layer_norm with a NaN or inf inside: PyTorch's values and gradients") {
    check_case("sum_dim1", [](auto& x) { return tg::sum(x[0], 1); });
    check_case("mean_dim1", [](auto& x) { return tg::mean(x[0], 1); });
    check_case("max_dim1", [](auto& x) { return tg::max(x[0], 1).values; });
    check_case("softmax_dim1", [](auto& x) { return tg::softmax(x[0], 1); });
    check_case("log_softmax_dim1", [](auto& x) { return tg::log_softmax(x[0], 1); });
    // relu's input is the list of special values, each once.
    const nlohmann::json& specials =
        tg::test::reference_case("special_values_reference", "relu").at("inputs")[0];
    for (std::size_t i = 0; i < specials.at("data").size(); ++i) {
      const std::string k = std::to_string(i);
      check_case("sum_all_" + k, [](auto& x) { return tg::sum(x[0]); });
      check_case("mean_all_" + k, [](auto& x) { return tg::mean(x[0]); });
      check_case("max_all_" + k, [](auto& x) { return tg::max(x[0]); });
      check_case("mse_" + k, [](auto& x) { return tg::mse_loss(x[0], x[1]); });
      check_case("cross_entropy_" + k, [](auto& x) { return tg::cross_entropy(x[0], tg::indices({1})); });
      const float v = special_array(specials).data()[i];
      if (std::isfinite(v) && std::abs(v) > 1e38f) continue;  // the one documented difference, below
      check_case("layer_norm_" + k, [](auto& x) { return tg::layer_norm(x[0], {3}, std::nullopt, std::nullopt); });
    }
  }

  TEST_CASE("softplus, log_sigmoid, logsumexp and the binary cross-entropies at NaN, inf, 0 and huge values") {
    check_case("softplus", [](auto& x) { return tg::softplus(x[0]); });
    check_case("softplus_beta2_threshold5", [](auto& x) { return tg::softplus(x[0], 2.0f, 5.0f); });
    check_case("log_sigmoid", [](auto& x) { return tg::log_sigmoid(x[0]); });
    check_case("logsumexp_dim1", [](auto& x) { return tg::logsumexp(x[0], 1); });
    for (const std::string t : {"0", "1", "half"}) {
      check_case("bce_with_logits_t" + t, [](auto& x) {
        return tg::binary_cross_entropy_with_logits(x[0], x[1], std::nullopt, std::nullopt, tg::Reduction::none);
      });
      check_case("bce_with_logits_pos_weight_t" + t, [](auto& x) {
        return tg::binary_cross_entropy_with_logits(x[0], x[1], std::nullopt, Tensor(Array(3.0f)),
                                                    tg::Reduction::none);
      });
      check_case("bce_t" + t,
                 [](auto& x) { return tg::binary_cross_entropy(x[0], x[1], std::nullopt, tg::Reduction::none); });
    }
  }

  TEST_CASE("layer_norm of a row with a huge value normalises it, where PyTorch's float32 variance overflows") {
    // PyTorch 1.13 gives NaN for layer_norm([3e38, 1, -2]) (the case layer_norm_11 of
    // the reference file): its float32 variance overflows to inf. Its statistics are in
    // double here, so the row normalises like any other: (x - mean) / std of a row whose
    // huge value dominates is about [sqrt(2), -1/sqrt(2), -1/sqrt(2)].
    for (const float big : {3e38f, -3e38f}) {
      Tensor x(Array{{big, 1.0f, -2.0f}}, true);
      Tensor y = tg::layer_norm(x, {3}, std::nullopt, std::nullopt);
      const float s = big > 0 ? 1.0f : -1.0f;
      CHECK(y.value()(0, 0) == doctest::Approx(s * std::sqrt(2.0f)));
      CHECK(y.value()(0, 1) == doctest::Approx(-s / std::sqrt(2.0f)));
      tg::sum(y * Tensor(Array{{1.0f, 2.0f, 3.0f}})).backward();
      for (float g : x.grad().dense()) CHECK(std::isfinite(g));
    }
  }
}
