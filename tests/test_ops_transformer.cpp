// The ops a transformer needs: batched and broadcast matmul, transpose and
// permute, softmax and log_softmax along any dim, masked_fill, tril, triu and
// gelu. Values and gradients against PyTorch 1.13
// (tests/data/transformer_reference.json, from tests/tools/gen_transformer_reference.py),
// gradients against finite differences, and the error each one gives for a
// wrong shape or dim.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <limits>

#include <tapegrad/tapegrad.hpp>

#include "../core/kernels/fast_math.hpp"
#include "helpers.hpp"

using tg::Array;
using tg::Tensor;
using Inputs = std::vector<Tensor>;
using tg::test::check_grad;

namespace {

tg::Generator gen(4242);

Tensor rnd(const tg::Shape& shape, float scale = 1.0f) {
  Tensor t = tg::randn(shape, gen, true);
  for (float& x : t.value_mut()) x *= scale;
  return t;
}

// fn on the case's inputs (and its fixed ones: masks) against PyTorch's output
// and the gradients of sum(out * w), within the suite's tolerance (rtol 1e-5,
// atol 1e-6; check_core_parity's).
void check_parity(const std::string& name, const std::function<Tensor(const Inputs&, const Inputs&)>& fn) {
  CAPTURE(name);
  const nlohmann::json& c = tg::test::reference_case("transformer_reference", name);
  Inputs in, fixed;
  for (const auto& j : c.at("inputs")) in.push_back(Tensor(tg::test::to_array(j), true));
  for (const auto& j : c.at("fixed")) fixed.push_back(Tensor(tg::test::to_array(j)));
  Tensor out = fn(in, fixed);
  CHECK_ALLCLOSE(out.value(), tg::test::to_array(c.at("out")), 1e-5, 1e-6);
  out.backward(tg::test::to_array(c.at("w")));
  for (std::size_t i = 0; i < in.size(); ++i)
    CHECK_ALLCLOSE(in[i].grad_dense(), tg::test::to_array(c.at("grads")[i]), 1e-5, 1e-6);
}

constexpr float inf = std::numeric_limits<float>::infinity();

}  // namespace

TEST_SUITE("core.transformer_ops") {
  TEST_CASE("PyTorch parity: matmul of batches, broadcast batch dims, a matrix times a batch") {
    auto mm = [](const Inputs& x, const Inputs&) { return tg::matmul(x[0], x[1]); };
    for (const char* name :
         {"matmul_batched", "matmul_broadcast_batch", "matmul_matrix_times_batch", "matmul_batch_of_one"})
      check_parity(name, mm);
    check_parity("matmul_scores", [](const Inputs& x, const Inputs&) {
      return tg::matmul(x[0], tg::transpose(x[1], -2, -1));
    });
    // The shapes torch.matmul gives.
    CHECK(tg::matmul(tg::zeros({2, 1, 3, 4}), tg::zeros({5, 4, 6})).shape() == tg::Shape{2, 5, 3, 6});
    CHECK(tg::matmul(tg::zeros({3, 4}), tg::zeros({2, 4, 5})).shape() == tg::Shape{2, 3, 5});
    CHECK(tg::matmul(tg::zeros({7, 2, 3, 4}), tg::zeros({4, 5})).shape() == tg::Shape{7, 2, 3, 5});
  }

  TEST_CASE("PyTorch parity: transpose of any two dims, permute, and heads split and merged") {
    check_parity("transpose_0_2", [](const Inputs& x, const Inputs&) { return tg::transpose(x[0], 0, 2); });
    check_parity("transpose_last_two",
                 [](const Inputs& x, const Inputs&) { return tg::transpose(x[0], -2, -1); });
    check_parity("permute_heads", [](const Inputs& x, const Inputs&) {
      return tg::permute(tg::reshape(x[0], {2, 3, 2, 4}), {0, 2, 1, 3});
    });
    check_parity("permute_3d", [](const Inputs& x, const Inputs&) { return tg::permute(x[0], {2, 0, 1}); });
    check_parity("permute_back_and_merge", [](const Inputs& x, const Inputs&) {
      return tg::reshape(tg::permute(x[0], {0, 2, 1, 3}), {2, 3, 8});
    });
  }

  TEST_CASE("PyTorch parity: softmax and log_softmax along the first, a middle and the last dim") {
    check_parity("softmax_dim0", [](const Inputs& x, const Inputs&) { return tg::softmax(x[0], 0); });
    check_parity("softmax_middle", [](const Inputs& x, const Inputs&) { return tg::softmax(x[0], 1); });
    check_parity("log_softmax_middle",
                 [](const Inputs& x, const Inputs&) { return tg::log_softmax(x[0], -2); });
    check_parity("softmax_last_4d", [](const Inputs& x, const Inputs&) { return tg::softmax(x[0], -1); });
    check_parity("log_softmax_first_3d",
                 [](const Inputs& x, const Inputs&) { return tg::log_softmax(x[0], 0); });
  }

  TEST_CASE("PyTorch parity: masked_fill, and the causal softmax of attention") {
    check_parity("masked_fill",
                 [](const Inputs& x, const Inputs& m) { return tg::masked_fill(x[0], m[0], -1.5f); });
    check_parity("masked_fill_broadcast",
                 [](const Inputs& x, const Inputs& m) { return tg::masked_fill(x[0], m[0], 2.0f); });
    check_parity("causal_softmax", [](const Inputs& x, const Inputs& m) {
      return tg::softmax(tg::masked_fill(x[0], m[0], -inf), -1);
    });
  }

  TEST_CASE("PyTorch parity: tril and triu on, above and below the diagonal") {
    for (int k : {0, 1, -1, 2}) {
      check_parity("tril_" + std::to_string(k),
                   [k](const Inputs& x, const Inputs&) { return tg::tril(x[0], k); });
      check_parity("triu_" + std::to_string(k),
                   [k](const Inputs& x, const Inputs&) { return tg::triu(x[0], k); });
    }
    check_parity("tril_tall", [](const Inputs& x, const Inputs&) { return tg::tril(x[0], -1); });
    check_parity("triu_tall", [](const Inputs& x, const Inputs&) { return tg::triu(x[0], -1); });
    CHECK(tg::tril(tg::ones({2, 3})).value() == Array{{1, 0, 0}, {1, 1, 0}});
    CHECK(tg::triu(tg::ones({2, 3}), 1).value() == Array{{0, 1, 1}, {0, 0, 1}});
  }

  TEST_CASE("PyTorch parity: gelu, erf and tanh forms, over a wide range and near 0") {
    auto exact = [](const Inputs& x, const Inputs&) { return tg::gelu(x[0]); };
    auto tanh_form = [](const Inputs& x, const Inputs&) { return tg::gelu(x[0], "tanh"); };
    check_parity("gelu_none", exact);
    check_parity("gelu_tanh", tanh_form);
    check_parity("gelu_none_small", exact);
    check_parity("gelu_tanh_small", tanh_form);
  }

  TEST_CASE("gradcheck: every new op, on shapes a transformer uses") {
    check_grad([](const Inputs& x) { return tg::matmul(x[0], x[1]); }, {rnd({2, 3, 4}), rnd({2, 4, 2})});
    check_grad([](const Inputs& x) { return tg::matmul(x[0], x[1]); }, {rnd({2, 1, 2, 3}), rnd({3, 3, 2})});
    check_grad([](const Inputs& x) { return tg::matmul(x[0], x[1]); }, {rnd({2, 3}), rnd({2, 3, 4})});
    check_grad([](const Inputs& x) { return tg::transpose(x[0], 0, -1); }, {rnd({2, 3, 4})});
    check_grad([](const Inputs& x) { return tg::permute(x[0], {1, 3, 0, 2}); }, {rnd({2, 3, 2, 2})});
    for (int dim : {0, 1, 2}) {
      CAPTURE(dim);
      check_grad([dim](const Inputs& x) { return tg::softmax(x[0], dim); }, {rnd({2, 3, 4})});
      check_grad([dim](const Inputs& x) { return tg::log_softmax(x[0], dim); }, {rnd({2, 3, 4})});
    }
    const Tensor future = tg::triu(tg::ones({3, 3}), 1);
    check_grad([future](const Inputs& x) { return tg::softmax(tg::masked_fill(x[0], future, -inf), -1); },
               {rnd({2, 3, 3})});
    check_grad([future](const Inputs& x) { return tg::masked_fill(x[0], future, 0.5f); }, {rnd({3})});
    check_grad([](const Inputs& x) { return tg::tril(x[0], 1); }, {rnd({2, 3, 4})});
    check_grad([](const Inputs& x) { return tg::triu(x[0], -1); }, {rnd({4, 3})});
    check_grad([](const Inputs& x) { return tg::gelu(x[0]); }, {rnd({3, 5}, 2.0f)});
    check_grad([](const Inputs& x) { return tg::gelu(x[0], "tanh"); }, {rnd({3, 5}, 2.0f)});
    // A causal self-attention of one head, written out.
    check_grad(
        [future](const Inputs& x) {
          Tensor scores = tg::matmul(x[0], tg::transpose(x[1], -2, -1)) * 0.5f;
          return tg::matmul(tg::softmax(tg::masked_fill(scores, future, -inf), -1), x[2]);
        },
        {rnd({2, 3, 4}), rnd({2, 3, 4}), rnd({2, 3, 4})});
  }

  TEST_CASE("masked_fill: a mask of the trailing dims, one that broadcasts elsewhere, and a NaN mask value") {
    // [3, 1] is not a block of the trailing dims of [2, 3, 4]: xtensor broadcasts it.
    Tensor a = rnd({2, 3, 4});
    Tensor column = tg::tensor({1.0f, 0.0f, 1.0f}, {3, 1});
    Tensor filled = tg::masked_fill(a, column, 7.0f);
    CHECK_ALLCLOSE(filled.value(), tg::where(column, tg::full({2, 3, 4}, 7.0f), a).value(), 0, 0);
    // A mask value other than 0 fills, NaN too (as where's condition).
    Tensor odd({std::nanf(""), 0.0f, -2.0f});
    CHECK(tg::masked_fill(tg::zeros({3}), odd, 1.0f).value() == Array{1, 0, 1});
    // The gradient of a broadcast input sums over the dims it was repeated along.
    Tensor row = rnd({4});
    tg::sum(tg::masked_fill(row, tg::tril(tg::ones({3, 4})), 0.0f)).backward();
    // tril's rows fill columns 0, 0..1 and 0..2: column j stays open in j of the 3 rows.
    CHECK(row.grad_dense() == Array{0, 1, 2, 3});
  }

  TEST_CASE("softmax over -inf: 0 where masked, NaN for a row of nothing but -inf (as PyTorch)") {
    Tensor x({{-inf, 0.0f, -inf}, {-inf, -inf, -inf}});
    Array y = tg::softmax(x, 1).value();
    CHECK(y(0, 0) == 0.0f);
    CHECK(y(0, 1) == 1.0f);
    CHECK(std::isnan(y(1, 0)));
    CHECK(tg::log_softmax(x, 1).value()(0, 0) == -inf);
  }

  TEST_CASE("matmul over an empty batch: an empty output, zero gradients for a broadcast input") {
    Tensor a = tg::ones({1, 2, 3}, true), b = tg::ones({0, 3, 4}, true);
    Tensor y = tg::matmul(a, b);
    CHECK(y.shape() == tg::Shape{0, 2, 4});
    tg::sum(y).backward();
    CHECK(a.grad_dense() == xt::zeros<float>({1, 2, 3}));
    CHECK(b.grad_dense().size() == 0);
  }

  TEST_CASE("permute and transpose of 0-d, 1-d and empty tensors") {
    CHECK(tg::permute(Tensor(Array(3.0f)), {}).item() == 3.0f);
    CHECK(tg::permute(Tensor({1, 2, 3}), {-1}).value() == Array{1, 2, 3});
    CHECK(tg::transpose(tg::zeros({0, 2}), 0, 1).shape() == tg::Shape{2, 0});
  }

  TEST_CASE("shape and dim errors name the op, the shapes and the dim") {
    const Tensor m = tg::zeros({2, 3}), v = tg::zeros({3}), b = tg::zeros({2, 3, 4});
    auto says = [](auto&& f, std::vector<std::string> parts) {
      try {
        f();
        FAIL("no exception");
      } catch (const std::invalid_argument& e) {
        for (const std::string& p : parts)
          CHECK_MESSAGE(std::string(e.what()).find(p) != std::string::npos, e.what(), " lacks ", p);
      }
    };
    says([&] { tg::matmul(v, m); }, {"matmul", "[3]", "[2, 3]", "2 or more dims"});
    says(
        [&] {
          tg::matmul(b, tg::zeros({2, 3, 4}));
        },
        {"matmul", "[2, 3, 4]", "inner dimensions differ (4 vs 3)"});
    says(
        [&] {
          tg::matmul(b, tg::zeros({3, 4, 5}));
        },
        {"matmul", "[2, 3, 4]", "[3, 4, 5]", "batch dims [2] and [3] cannot be broadcast"});
    says([&] { tg::transpose(b, 0, 3); }, {"transpose", "dim 3", "[2, 3, 4]"});
    says([&] { tg::transpose(b, -4, 0); }, {"transpose", "dim -4", "[2, 3, 4]"});
    says([&] { tg::permute(b, {0, 1}); }, {"permute", "[0, 1]", "[2, 3, 4]", "each of its 3 dims"});
    says([&] { tg::permute(b, {0, 2, -1}); }, {"permute", "[0, 2, -1]", "[2, 3, 4]", "dim 2 twice"});
    says([&] { tg::permute(b, {0, 1, 3}); }, {"permute", "dim 3", "[2, 3, 4]"});
    says([&] { tg::softmax(b, 3); }, {"softmax", "dim 3", "[2, 3, 4]"});
    says([&] { tg::log_softmax(m, -3); }, {"log_softmax", "dim -3", "[2, 3]"});
    says([&] { tg::masked_fill(b, tg::zeros({2, 4}), 0.0f); }, {"masked_fill", "[2, 3, 4]", "[2, 4]"});
    says([&] { tg::tril(v); }, {"tril", "[3]", "2 or more dims"});
    says([&] { tg::triu(Tensor(Array(1.0f)), 1); }, {"triu", "[]", "2 or more dims"});
    says([&] { tg::gelu(m, "fast"); }, {"gelu", "\"fast\"", "\"none\" or \"tanh\""});
    says([&] { tg::reshape(b, {2, 5, -1}); }, {"reshape", "[2, 3, 4]"});
  }

  TEST_CASE("gelu's fast erf and tanh hold to the plain formulas of std::erf and std::tanh") {
    // y = x Phi(x) and y = 0.5 x (1 + tanh(..)) computed the plain way, in double.
    Tensor x = tg::arange(-6.0, 6.0, 0.001);
    const Array exact = tg::gelu(x).value(), tanh_form = tg::gelu(x, "tanh").value();
    double worst_exact = 0, worst_tanh = 0;
    for (std::size_t i = 0; i < x.numel(); ++i) {
      const double v = x.value()(i);
      const double want_exact = v * 0.5 * (1.0 + std::erf(v / std::sqrt(2.0)));
      const double want_tanh =
          0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
      worst_exact = std::max(worst_exact, std::abs(exact(i) - want_exact));
      worst_tanh = std::max(worst_tanh, std::abs(tanh_form(i) - want_tanh));
    }
    CHECK(worst_exact < 3e-6);  // |x| <= 6 times erf's 6e-7, plus rounding
    CHECK(worst_tanh < 3e-6);
  }

  TEST_CASE("core/kernels/fast_math.hpp: exp within 2 ulp of std::exp, erf and tanh within 6e-7 and 2e-7") {
    using tg::detail::erf_fast, tg::detail::exp_fast, tg::detail::tanh_fast;
    auto ulps = [](float a, float b) {
      return std::abs(std::bit_cast<int32_t>(a) - std::bit_cast<int32_t>(b));
    };
    int worst_ulp = 0;
    double worst_erf = 0, worst_tanh = 0;
    for (double v = -87.0; v <= 88.0; v += 1e-3)
      worst_ulp = std::max(worst_ulp, ulps(exp_fast(float(v)), std::exp(float(v))));
    for (double v = -8.0; v <= 8.0; v += 1e-4) {
      const float f = static_cast<float>(v);
      worst_erf = std::max(worst_erf, std::abs(double(erf_fast(f)) - std::erf(double(f))));
      worst_tanh = std::max(worst_tanh, std::abs(double(tanh_fast(f)) - std::tanh(double(f))));
    }
    CHECK(worst_ulp <= 2);
    CHECK(worst_erf < 6e-7);
    CHECK(worst_tanh < 2e-7);
    // The edges: subnormals, 0, inf and NaN as std::exp gives them.
    for (float v : {-87.5f, -95.0f, -103.0f, -103.9f}) CHECK(std::abs(exp_fast(v) - std::exp(v)) <= 2e-45f);
    CHECK(exp_fast(-104.5f) == 0.0f);
    CHECK(exp_fast(-inf) == 0.0f);
    CHECK(exp_fast(88.7f) == doctest::Approx(std::exp(88.7f)).epsilon(1e-6));
    CHECK(exp_fast(89.0f) == inf);
    CHECK(exp_fast(inf) == inf);
    CHECK(std::isnan(exp_fast(std::nanf(""))));
    CHECK(erf_fast(inf) == 1.0f);
    CHECK(erf_fast(-inf) == -1.0f);
    CHECK(std::isnan(erf_fast(std::nanf(""))));
    CHECK(tanh_fast(inf) == 1.0f);
    CHECK(tanh_fast(-inf) == -1.0f);
    CHECK(std::isnan(tanh_fast(std::nanf(""))));
  }
}
