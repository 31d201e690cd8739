// Optimizers: PyTorch reference runs (tests/data/optim_reference.json, written by
// tests/tools/gen_optim_reference.py), then the lazy sparse semantics, which have
// no PyTorch counterpart, on examples small enough to check on paper.
#include <doctest/doctest.h>

#include <bit>
#include <climits>
#include <cstdint>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <xtensor/xview.hpp>

#include <tapegrad/tapegrad.hpp>

#include "helpers.hpp"

using namespace tg;
using namespace tg::optim;
using tg::test::check_same_state;
using tg::test::make_optimizer;
using tg::test::set_grad;
using tg::test::TempDir;
using tg::test::to_array;

namespace {

SparseRows sparse_rows(std::vector<int64_t> rows, xt::xtensor<float, 2> values, std::size_t num_rows) {
  return SparseRows{std::move(rows), std::move(values), num_rows};
}

// The rows of a dense [rows, cols] gradient as a SparseRows listing every row.
SparseRows all_rows(const Array& g) {
  std::vector<int64_t> rows(g.shape()[0]);
  for (std::size_t r = 0; r < rows.size(); ++r) rows[r] = static_cast<int64_t>(r);
  return sparse_rows(rows, g, g.shape()[0]);
}

// dense.<name>: params [weight, bias], 5 steps of gradients (null: no gradient
// that step), and PyTorch's values after each step.
template <class Opt, class Options>
void check_dense_case(const std::string& name, Options options) {
  const nlohmann::json& c = tg::test::reference("optim_reference").at("dense").at(name);
  std::vector<Tensor> params;
  for (const auto& p : c.at("params")) params.emplace_back(to_array(p), true);
  Opt opt(params, options);
  for (std::size_t step = 0; step < c.at("grads").size(); ++step) {
    INFO(name << ", step " << step + 1);
    opt.zero_grad();
    for (std::size_t i = 0; i < params.size(); ++i)
      if (!c["grads"][step][i].is_null()) set_grad(params[i], to_array(c["grads"][step][i]));
    opt.step();
    for (std::size_t i = 0; i < params.size(); ++i)
      CHECK_ALLCLOSE(params[i].value(), to_array(c["expected"][step][i]), 1e-5);
  }
}

// sparse.<name>: one [8, 3] param, 5 steps of (rows, values), PyTorch's values.
template <class Opt, class Options>
void check_sparse_case(const std::string& name, Options options) {
  const nlohmann::json& c = tg::test::reference("optim_reference").at("sparse").at(name);
  Tensor param(to_array(c.at("param")), true);
  Opt opt({param}, options);
  for (std::size_t step = 0; step < c.at("grads").size(); ++step) {
    INFO(name << ", step " << step + 1);
    const nlohmann::json& g = c["grads"][step];
    set_grad(param, sparse_rows(g.at("rows").get<std::vector<int64_t>>(), to_array(g.at("values")),
                                param.shape()[0]));
    opt.step();
    CHECK_ALLCLOSE(param.value(), to_array(c["expected"][step]), 1e-5);
  }
}

// Runs the same gradients through two copies of `init`: one gets them dense, the
// other as SparseRows listing every row. Both must end bit-identical.
template <class Opt, class Options>
void check_sparse_all_rows_equals_dense(Options options) {
  Generator gen(7);
  Array init = randn({5, 3}, gen).value();
  Tensor dense(init, true), sparse(init, true);
  Opt dense_opt({dense}, options), sparse_opt({sparse}, options);
  for (int step = 0; step < 4; ++step) {
    Array g = randn({5, 3}, gen).value();
    set_grad(dense, g);
    set_grad(sparse, all_rows(g));
    dense_opt.step();
    sparse_opt.step();
    CHECK_ALLCLOSE(sparse.value(), dense.value(), 0, 0);
  }
  CHECK(sparse_opt.state_bytes() == dense_opt.state_bytes());
}

// tests/tools/gen_optim_ulp_reference.py's inputs: element i of input `seed` is a
// multiple of 2^-19 in [-1, 1) from MurmurHash3's finalizer, times `scale` (in float).
uint32_t fmix32(uint32_t h) {
  h ^= h >> 16;
  h *= 0x85EBCA6Bu;
  h ^= h >> 13;
  h *= 0xC2B2AE35u;
  return h ^ (h >> 16);
}
Array formula(int64_t seed, std::size_t n, float scale = 1.0f) {
  Array a = xt::empty<float>(Shape{n});
  for (std::size_t i = 0; i < n; ++i) {
    const int32_t bits = static_cast<int32_t>(fmix32(static_cast<uint32_t>(i + 65536 * seed)) & 0xFFFFFu);
    a(i) = static_cast<float>(bits - (1 << 19)) / static_cast<float>(1 << 19) * scale;
  }
  return a;
}

// How many float32 values lie between a and b (0: the same bits).
int64_t ulps(float a, float b) {
  auto ordered = [](float x) {
    const int32_t i = std::bit_cast<int32_t>(x);
    return i < 0 ? static_cast<int64_t>(INT32_MIN) - i : static_cast<int64_t>(i);
  };
  return std::abs(ordered(a) - ordered(b));
}

}  // namespace

TEST_SUITE("optim") {
  // ---------------------------------------------------------------- vs PyTorch

  TEST_CASE("SGD matches torch.optim.SGD on dense gradients") {
    check_dense_case<SGD>("sgd_plain", SGDOptions{.lr = 0.1});
    check_dense_case<SGD>("sgd_momentum", SGDOptions{.lr = 0.1, .momentum = 0.9});
    check_dense_case<SGD>("sgd_momentum_dampening", SGDOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.3});
    check_dense_case<SGD>("sgd_nesterov", SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true});
    check_dense_case<SGD>("sgd_weight_decay", SGDOptions{.lr = 0.1, .weight_decay = 0.1});
    check_dense_case<SGD>("sgd_momentum_weight_decay",
                          SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.1});
    // The bias has no gradient at step 3: skipped, its buffer not decayed.
    check_dense_case<SGD>("sgd_momentum_missing_grad", SGDOptions{.lr = 0.1, .momentum = 0.9});
  }

  TEST_CASE("Adam and AdamW match torch.optim.Adam and AdamW on dense gradients") {
    check_dense_case<Adam>("adam", AdamOptions{.lr = 0.01});
    check_dense_case<Adam>("adam_weight_decay", AdamOptions{.lr = 0.01, .weight_decay = 0.1});
    check_dense_case<AdamW>("adamw", AdamWOptions{.lr = 0.01, .weight_decay = 0.1});
    check_dense_case<Adam>("adam_amsgrad", AdamOptions{.lr = 0.01, .betas = {0.8, 0.99}, .amsgrad = true});
    // The bias has no gradient at step 3, so its own step count lags by one.
    check_dense_case<Adam>("adam_missing_grad", AdamOptions{.lr = 0.01});
  }

  TEST_CASE("dense updates against PyTorch 1.13's, ulp by ulp") {
    // PyTorch's AVX2 kernels fuse p + (-lr) * g into one multiply-add (one
    // rounding); we round the product and the sum separately. docs/nn-and-optim.md
    // ("optim: one optimizer for dense and row-sparse parameters") quotes what
    // this prints: ./build/tests/test_optim -tc='*ulp by ulp*'
    const nlohmann::json& ref = tg::test::reference("optim_ulp_reference");
    for (const auto& [name, c] : ref.at("dense").items()) {
      const std::size_t n = c.at("size");
      Tensor p(formula(c.at("param_seed"), n), true);
      auto opt = make_optimizer(c, {p});
      std::vector<std::size_t> same;   // per step: elements with PyTorch's bits
      std::vector<int64_t> most_ulps;  // per step: the largest difference in ulps of the value
      double largest = 0;              // over all steps: the largest |difference|
      for (std::size_t step = 0; step < c.at("grad_seeds").size(); ++step) {
        set_grad(p, formula(c["grad_seeds"][step], n, c.at("grad_scale").get<float>()));
        opt->step();
        const std::vector<float> torch = c["expected"][step];
        same.push_back(0);
        most_ulps.push_back(0);
        for (std::size_t i = 0; i < n; ++i) {
          const int64_t d = ulps(p.value()(i), torch[i]);
          same.back() += d == 0;
          most_ulps.back() = std::max(most_ulps.back(), d);
          largest = std::max(largest, std::abs(static_cast<double>(p.value()(i)) - torch[i]));
        }
      }
      const double eps = std::numeric_limits<float>::epsilon();  // 2^-23, one ulp of 1.0f
      MESSAGE(name << ": identical after step 1: " << same.front() << "/" << n << " (the others within "
                   << most_ulps.front() << " ulp); after step " << same.size() << ": " << same.back() << "/"
                   << n << "; largest difference " << largest / eps << " ulp of 1.0");
      // What docs/nn-and-optim.md says of these runs.
      if (c.at("optimizer") != "SGD") {
        CHECK(same.front() == n);         // Adam: PyTorch's bits after the first step
        CHECK(same.back() >= 0.945 * n);  // and on 95% or more after the fifth
      } else {
        CHECK(same.front() >= 0.83 * n);
        CHECK(same.back() >= 0.62 * n);
      }
      CHECK(largest <= 2 * eps);
    }
  }

  TEST_CASE("lazy Adam against torch.optim.SparseAdam with gradients of about 1e-3: how far eps moves it") {
    // SparseAdam adds eps before the bias correction (optim/adam.hpp): where a
    // gradient is not much larger than eps / sqrt(1 - beta2^t), its steps are
    // shorter than Adam's. docs/nn-and-optim.md (its optim section, "Sparse
    // gradients") quotes what this prints:
    // ./build/tests/test_optim -tc='*SparseAdam with gradients*'
    const nlohmann::json& c = tg::test::reference("optim_ulp_reference").at("sparse_adam");
    const std::size_t rows = c.at("shape")[0], cols = c.at("shape")[1];
    Tensor p(xt::eval(xt::reshape_view(formula(c.at("param_seed"), rows * cols), {rows, cols})), true);
    Adam adam({p}, {.lr = c.at("options").at("lr")});
    const int steps = c.at("steps");
    for (int s = 0; s < steps; ++s) {
      std::vector<int64_t> listed;
      for (std::size_t r = 0; r < rows; ++r)
        if ((r + s) % 3 != 0) listed.push_back(static_cast<int64_t>(r));
      Array v = formula(c.at("grad_seed").get<int64_t>() + s, listed.size() * cols,
                        c.at("grad_scale").get<float>());
      set_grad(p, sparse_rows(listed, xt::eval(xt::reshape_view(v, {listed.size(), cols})), rows));
      adam.step();
    }
    const std::vector<float> torch = c.at("expected_last");
    double largest = 0, total = 0;
    for (std::size_t i = 0; i < torch.size(); ++i) {
      const double d = std::abs(static_cast<double>(p.value().data()[i]) - torch[i]);
      largest = std::max(largest, d);
      total += d;
    }
    MESSAGE("after " << steps << " steps of lr " << c.at("options").at("lr").get<double>()
                     << " with gradients uniform in +-" << c.at("grad_scale").get<double>()
                     << ": largest difference from SparseAdam " << largest << ", mean "
                     << total / torch.size());
    CHECK(largest == doctest::Approx(8.1e-3).epsilon(0.01));  // docs/nn-and-optim.md's figures
    CHECK(total / torch.size() == doctest::Approx(9.8e-5).epsilon(0.01));
  }

  TEST_CASE("sparse gradients match torch.optim.SparseAdam and sparse SGD") {
    check_sparse_case<Adam>("sparse_adam", AdamOptions{.lr = 0.05});
    check_sparse_case<SGD>("sparse_sgd", SGDOptions{.lr = 0.1});
  }

  // ------------------------------------------------------- lazy sparse updates

  TEST_CASE("SGD with momentum and weight decay updates sparse rows lazily") {
    // lr, momentum, dampening, weight_decay = 0.5 keep every number exact.
    Tensor p({{1, 2}, {3, 4}, {5, 6}, {7, 8}}, true);
    SGD sgd({p}, {.lr = 0.5, .momentum = 0.5, .dampening = 0.5, .weight_decay = 0.5});
    const Array ones = xt::ones<float>({1, 2}), ones2 = xt::ones<float>({2, 2});

    // Row 1, first time: g = 1 + 0.5 * [3, 4] = [2.5, 3] = buf; p = [3, 4] - 0.5 * buf.
    set_grad(p, sparse_rows({1}, ones, 4));
    sgd.step();
    CHECK_ALLCLOSE(p.value(), Array({{1, 2}, {1.75, 2.5}, {5, 6}, {7, 8}}), 0, 0);

    // Row 1 again: g = [1.875, 2.25], buf = 0.5 * [2.5, 3] + 0.5 * g = [2.1875, 2.625].
    // Row 3, first time (no dampening): g = buf = [4.5, 5].
    set_grad(p, sparse_rows({1, 3}, ones2, 4));
    sgd.step();
    CHECK_ALLCLOSE(p.value(), Array({{1, 2}, {0.65625, 1.1875}, {5, 6}, {4.75, 5.5}}), 0, 0);

    // Only row 3: g = [3.375, 3.75], buf = [3.9375, 4.375]. Row 1 has a non-zero
    // buffer but is not listed, so it stays put; rows 0 and 2 never move.
    set_grad(p, sparse_rows({3}, ones, 4));
    sgd.step();
    CHECK_ALLCLOSE(p.value(), Array({{1, 2}, {0.65625, 1.1875}, {5, 6}, {2.78125, 3.3125}}), 0, 0);
  }

  TEST_CASE("a sparse gradient listing every row gives exactly the dense result") {
    check_sparse_all_rows_equals_dense<SGD>(SGDOptions{.lr = 0.1});
    check_sparse_all_rows_equals_dense<SGD>(SGDOptions{.lr = 0.1, .momentum = 0.9});
    check_sparse_all_rows_equals_dense<SGD>(
        SGDOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.3, .weight_decay = 0.1});
    check_sparse_all_rows_equals_dense<SGD>(
        SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.1, .nesterov = true});
    check_sparse_all_rows_equals_dense<Adam>(AdamOptions{.lr = 0.01});
    check_sparse_all_rows_equals_dense<Adam>(AdamOptions{.lr = 0.01, .weight_decay = 0.1});
    check_sparse_all_rows_equals_dense<Adam>(
        AdamOptions{.lr = 0.01, .betas = {0.8, 0.99}, .weight_decay = 0.1, .amsgrad = true});
    check_sparse_all_rows_equals_dense<AdamW>(AdamWOptions{.lr = 0.01});
    check_sparse_all_rows_equals_dense<AdamW>(AdamWOptions{.lr = 0.01, .weight_decay = 0.1, .amsgrad = true});
  }

  TEST_CASE("dense Adam keeps moving a row that left the batch, lazy sparse Adam does not") {
    // pytorch#18404: row 1 gets a gradient at step 1 only.
    Tensor dense({{1, 1}, {1, 1}}, true), sparse({{1, 1}, {1, 1}}, true);
    Adam dense_adam({dense}, {.lr = 0.1}), sparse_adam({sparse}, {.lr = 0.1});
    set_grad(dense, Array({{1, 1}, {1, 1}}));
    set_grad(sparse, Array({{1, 1}, {1, 1}}));
    dense_adam.step();
    sparse_adam.step();
    const Array row1_after_step1 = xt::view(dense.value(), 1);

    for (int step = 2; step <= 3; ++step) {
      set_grad(dense, Array({{1, 1}, {0, 0}}));                // row 1: gradient 0, m != 0
      set_grad(sparse, sparse_rows({0}, Array({{1, 1}}), 2));  // row 1: not listed
      dense_adam.step();
      sparse_adam.step();
    }
    Array dense_row1 = xt::view(dense.value(), 1), sparse_row1 = xt::view(sparse.value(), 1);
    Array dense_row0 = xt::view(dense.value(), 0), sparse_row0 = xt::view(sparse.value(), 0);
    // Dense: moved on by 0.067 at step 2 and 0.052 at step 3 with gradient 0.
    CHECK(dense_row1(0) < row1_after_step1(0) - 0.1f);
    CHECK_ALLCLOSE(sparse_row1, row1_after_step1, 0, 0);
    CHECK_ALLCLOSE(sparse_row0, dense_row0, 0, 0);  // the listed row: same update either way
  }

  TEST_CASE("an empty sparse gradient is a no-op and does not count a step") {
    const Array init{{1, 2}, {3, 4}, {5, 6}};
    const SparseRows g1 = sparse_rows({0, 2}, Array({{0.5, -1}, {2, 0.25}}), 3);
    const SparseRows g2 = sparse_rows({1, 2}, Array({{-1, 1}, {0.5, 0.5}}), 3);
    const SparseRows empty = sparse_rows({}, xt::zeros<float>({0, 2}), 3);

    Tensor fresh(init, true);
    Adam fresh_adam({fresh});
    set_grad(fresh, empty);
    fresh_adam.step();
    CHECK_ALLCLOSE(fresh.value(), init, 0, 0);
    CHECK(fresh_adam.state_bytes() == 0);  // nothing allocated either

    Tensor a(init, true), b(init, true);
    Adam with_empty({a}), without({b});
    for (const SparseRows* g : {&g1, &empty, &g2}) {
      set_grad(a, *g);
      with_empty.step();
    }
    for (const SparseRows* g : {&g1, &g2}) {
      set_grad(b, *g);
      without.step();
    }
    CHECK_ALLCLOSE(a.value(), b.value(), 0, 0);  // same step counts, same bias correction

    Tensor c(init, true);
    SGD sgd({c}, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.1});
    set_grad(c, g1);
    sgd.step();
    const Array after_g1 = c.value();
    set_grad(c, empty);
    sgd.step();
    CHECK_ALLCLOSE(c.value(), after_g1, 0, 0);
  }

  // ------------------------------------------------------ bookkeeping, errors

  TEST_CASE("a parameter without a gradient is skipped; zero_grad empties every slot") {
    Tensor w({{1, 2}, {3, 4}}, true), b({1, 2}, true);
    Adam adam({w, b}, {.lr = 0.1});
    set_grad(w, Array({{1, 1}, {1, 1}}));
    adam.step();
    CHECK_ALLCLOSE(b.value(), Array({1, 2}), 0, 0);
    CHECK(adam.state_bytes() == 2 * 4 * sizeof(float));  // m and v of w only

    set_grad(b, Array({1, 1}));
    adam.zero_grad();
    CHECK(w.grad().empty());
    CHECK(b.grad().empty());
    const Array w_before = w.value();
    adam.step();
    CHECK_ALLCLOSE(w.value(), w_before, 0, 0);
  }

  TEST_CASE("Adam's vectorized update gives the bits of the formula, element by element") {
    // The step may run an AVX2 build of its loop; neither that nor any other
    // rewrite (a fused multiply-add, a reciprocal) may change a bit.
    Generator gen(5);
    const std::size_t rows = 7, cols = 37;  // not a multiple of 8: the loop's tail too
    for (const bool decoupled : {false, true})
      for (const bool amsgrad : {false, true})
        for (const double wd : {0.0, 0.05}) {
          CAPTURE(decoupled);
          CAPTURE(amsgrad);
          CAPTURE(wd);
          Tensor w(randn({rows, cols}, gen).value(), true);
          Adam adam({w}, {.lr = 0.01,
                          .betas = {0.8, 0.95},
                          .eps = 1e-6,
                          .weight_decay = wd,
                          .amsgrad = amsgrad,
                          .decoupled_weight_decay = decoupled});
          std::vector<float> p(w.value().begin(), w.value().end()), m(p.size(), 0), v(p.size(), 0),
              vmax(p.size(), 0);
          std::size_t mismatches = 0;
          for (int t = 1; t <= 4; ++t) {
            const Array g = randn({rows, cols}, gen).value();
            set_grad(w, g);
            adam.step();
            const float b1 = 0.8f, b2 = 0.95f;
            const float one_minus_b1 = static_cast<float>(1 - 0.8),
                        one_minus_b2 = static_cast<float>(1 - 0.95);
            const float step_size = static_cast<float>(0.01 / (1 - std::pow(0.8, t)));
            const float bc2 = static_cast<float>(std::sqrt(1 - std::pow(0.95, t)));
            const float decay = static_cast<float>(1 - 0.01 * wd);
            for (std::size_t i = 0; i < p.size(); ++i) {
              float gi = g.data()[i];
              if (decoupled || wd == 0)
                p[i] *= decay;
              else
                gi += static_cast<float>(wd) * p[i];
              m[i] = b1 * m[i] + one_minus_b1 * gi;
              v[i] = b2 * v[i] + one_minus_b2 * gi * gi;
              const float used = amsgrad ? (vmax[i] = std::max(vmax[i], v[i])) : v[i];
              const float denom = std::sqrt(used) / bc2 + 1e-6f;
              p[i] -= step_size * m[i] / denom;
              mismatches += p[i] != w.value().data()[i];
            }
          }
          CHECK(mismatches == 0);
        }
  }

  TEST_CASE("SGD's vectorized row update gives the bits of p -= lr * g, dense and sparse") {
    // The plain step's row loop may run as an AVX2 build; it must not change a bit.
    Generator gen(6);
    const std::size_t rows = 9, cols = 37;  // not a multiple of 8: the loop's tail too
    for (const bool sparse : {false, true}) {
      CAPTURE(sparse);
      Tensor w(randn({rows, cols}, gen).value(), true);
      SGD sgd({w}, {.lr = 0.3});
      std::vector<float> p(w.value().begin(), w.value().end());
      std::size_t mismatches = 0;
      for (int t = 0; t < 3; ++t) {
        const Array g = randn({rows, cols}, gen).value();
        const std::vector<int64_t> picked{0, 3, 4, 8};  // sparse: these rows only
        if (sparse) {
          xt::xtensor<float, 2> values = xt::empty<float>({picked.size(), cols});
          for (std::size_t i = 0; i < picked.size(); ++i)
            std::copy_n(g.data() + picked[i] * cols, cols, values.data() + i * cols);
          set_grad(w, sparse_rows(picked, std::move(values), rows));
        } else {
          set_grad(w, g);
        }
        sgd.step();
        for (std::size_t r = 0; r < rows; ++r) {
          if (sparse && std::find(picked.begin(), picked.end(), static_cast<int64_t>(r)) == picked.end()) continue;
          for (std::size_t c = 0; c < cols; ++c) p[r * cols + c] -= 0.3f * g.data()[r * cols + c];
        }
        for (std::size_t i = 0; i < p.size(); ++i) mismatches += p[i] != w.value().data()[i];
      }
      CHECK(mismatches == 0);
    }
  }

  TEST_CASE("without weight decay an infinite parameter stays infinite, as in PyTorch") {
    // PyTorch adds weight_decay * p only when weight_decay != 0: 0 * inf would be NaN.
    const float inf = std::numeric_limits<float>::infinity();
    for (const bool sparse : {false, true}) {
      CAPTURE(sparse);
      Tensor a({{inf, 1}, {2, 3}}, true), b({{inf, 1}, {2, 3}}, true);
      Tensor c({{inf, 1}, {2, 3}}, true), d({{inf, 1}, {2, 3}}, true);
      SGD sgd({a}, {.lr = 0.1});
      Adam adam({b}, {.lr = 0.1});
      SGD momentum({c}, {.lr = 0.1, .momentum = 0.9});
      SGD nesterov({d}, {.lr = 0.1, .momentum = 0.9, .nesterov = true});
      const Array g({{0.5f, 0.5f}, {0.5f, 0.5f}});
      for (int step = 0; step < 2; ++step) {  // the second step goes through the momentum buffer
        for (Tensor* p : {&a, &b, &c, &d}) {
          p->zero_grad();
          if (sparse)
            set_grad(*p, all_rows(g));
          else
            set_grad(*p, g);
        }
        sgd.step();
        adam.step();
        momentum.step();
        nesterov.step();
      }
      for (Tensor* p : {&a, &b, &c, &d}) CHECK(p->value()(0, 0) == inf);
      CHECK(a.value()(0, 1) == doctest::Approx(0.9f));
      CHECK(b.value()(0, 1) == doctest::Approx(0.8f));  // Adam moves by lr while g is constant
      CHECK(c.value()(0, 1) == doctest::Approx(1 - 0.1 * 0.5 * (1 + 1.9)));  // buf 0.5, then 0.95
      CHECK(d.value()(0, 1) == doctest::Approx(1 - 0.1 * 0.5 * (1.9 + 2.71)));
    }
  }

  TEST_CASE("state_bytes counts what the options need") {
    Tensor p = zeros({10, 4}, true);
    SGD plain({p}, {.lr = 0.1}), momentum({p}, {.lr = 0.1, .momentum = 0.9});
    Adam adam({p}), amsgrad({p}, {.amsgrad = true});
    set_grad(p, Array(xt::ones<float>({10, 4})));
    for (Optimizer* opt : std::vector<Optimizer*>{&plain, &momentum, &adam, &amsgrad}) opt->step();
    CHECK(plain.state_bytes() == 0);
    CHECK(momentum.state_bytes() == 40 * sizeof(float) + 10);  // buffer + one flag per row
    CHECK(adam.state_bytes() == 2 * 40 * sizeof(float));
    CHECK(amsgrad.state_bytes() == 3 * 40 * sizeof(float));
  }

  TEST_CASE("AdamW is Adam with decoupled weight decay and PyTorch's defaults") {
    Tensor p({1, 2}, true);
    AdamW adamw({p});
    CHECK(adamw.options().decoupled_weight_decay);
    CHECK(adamw.options().weight_decay == 1e-2);
    CHECK(adamw.options().lr == 1e-3);
    CHECK(Adam({p}).options().weight_decay == 0);
    CHECK_THROWS_WITH_AS(AdamW({p}, {.eps = -1}), doctest::Contains("AdamW"), std::invalid_argument);
  }

  TEST_CASE("bad parameter lists are rejected, naming the optimizer and the position") {
    Tensor a({1, 2}, true), b({3, 4}, true), frozen({5, 6});
    Tensor computed = a * 2.f;
    CHECK_THROWS_WITH_AS(SGD({a, b, a}, {.lr = 0.1}), doctest::Contains("SGD: parameter 2"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(Adam({a, frozen}), doctest::Contains("Adam: parameter 1"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(Adam({b, computed}), doctest::Contains("not a leaf"), std::invalid_argument);
    CHECK_NOTHROW(Adam({a, b}));
    CHECK_NOTHROW(Adam(std::vector<Tensor>{}));
  }

  TEST_CASE("bad hyper-parameters are rejected, as in PyTorch") {
    Tensor p({1, 2}, true);
    CHECK_THROWS_AS(SGD({p}, {}), std::invalid_argument);  // lr is required
    CHECK_THROWS_AS(SGD({p}, {.lr = -0.1}), std::invalid_argument);
    CHECK_THROWS_AS(SGD({p}, {.lr = 0.1, .momentum = -0.9}), std::invalid_argument);
    CHECK_THROWS_AS(SGD({p}, {.lr = 0.1, .weight_decay = -1}), std::invalid_argument);
    CHECK_THROWS_AS(SGD({p}, {.lr = 0.1, .nesterov = true}), std::invalid_argument);
    CHECK_THROWS_AS(SGD({p}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = true}),
                    std::invalid_argument);
    CHECK_NOTHROW(SGD({p}, {.lr = 0}));
    CHECK_THROWS_AS(Adam({p}, {.lr = -1e-3}), std::invalid_argument);
    CHECK_THROWS_AS(Adam({p}, {.betas = {1.0, 0.999}}), std::invalid_argument);
    CHECK_THROWS_AS(Adam({p}, {.betas = {0.9, -0.1}}), std::invalid_argument);
    CHECK_THROWS_AS(Adam({p}, {.eps = -1e-8}), std::invalid_argument);
    CHECK_THROWS_AS(Adam({p}, {.weight_decay = -0.1}), std::invalid_argument);
    CHECK_NOTHROW(Adam({p}, {.betas = {0, 0}, .eps = 0}));
  }

  TEST_CASE("a gradient that does not fit its parameter throws before anything is updated") {
    Tensor w({{1, 2}, {3, 4}}, true), b({1, 2}, true);
    const Array w_init = w.value(), b_init = b.value();
    Adam adam({w, b}, {.lr = 0.1});
    SGD sgd({w, b}, {.lr = 0.1, .momentum = 0.9});

    // w's gradient is fine; b's comes after it and no longer fits: b changed shape.
    set_grad(w, Array({{1, 1}, {1, 1}}));
    set_grad(b, Array({1, 1}));
    b.value_mut() = Array({1, 2, 3});
    CHECK_THROWS_WITH_AS(adam.step(), doctest::Contains("Adam.step: parameter 1"), std::invalid_argument);
    CHECK_THROWS_AS(sgd.step(), std::invalid_argument);
    CHECK_ALLCLOSE(w.value(), w_init, 0, 0);
    CHECK(adam.state_bytes() == 0);
    CHECK(sgd.state_bytes() == 0);
    b.value_mut() = b_init;

    // Sparse: a gradient of the wrong width for w, and one for a 1-d parameter.
    set_grad(w, sparse_rows({0}, Array({{1, 1}}), 2));
    b.grad_mut().clear();
    w.value_mut() = Array({{1, 2, 0}, {3, 4, 0}});
    CHECK_THROWS_AS(adam.step(), std::invalid_argument);
    w.value_mut() = w_init;
    set_grad(w, Array({{1, 1}, {1, 1}}));
    b.grad_mut().clear();
    b.grad_mut().accumulate(sparse_rows({0}, xt::ones<float>({1, 1}), 1), tg::Shape{1, 1});  // [1, 1] ...
    CHECK_THROWS_AS(adam.step(), std::invalid_argument);                     // ... for a [2] parameter
    b.grad_mut().clear();
    // Unsorted rows, or a row out of range, never become a gradient at all.
    CHECK_THROWS_AS(Grad(sparse_rows({1, 0}, Array({{1, 1}, {1, 1}}), 2)), std::invalid_argument);
    CHECK_THROWS_AS(Grad(sparse_rows({0, 2}, Array({{1, 1}, {1, 1}}), 2)), std::out_of_range);
    CHECK_ALLCLOSE(w.value(), w_init, 0, 0);
    CHECK_ALLCLOSE(b.value(), b_init, 0, 0);
    CHECK(adam.state_bytes() == 0);

    // With the gradients fixed, the step is the first one: nothing was counted.
    Tensor w2(w_init, true);
    Adam fresh({w2}, {.lr = 0.1});
    set_grad(w, Array({{1, 1}, {1, 1}}));
    set_grad(w2, Array({{1, 1}, {1, 1}}));
    adam.step();
    fresh.step();
    CHECK_ALLCLOSE(w.value(), w2.value(), 0, 0);
  }

}  // TEST_SUITE

// ============================================================ training-loop machinery:
// param groups, schedulers and state_dict, against torch 1.13 (the groups,
// schedules, scheduled and state sections of optim_reference.json).

namespace {

const nlohmann::json& ref(const char* section) {
  return tg::test::reference("optim_reference").at(section);
}

std::unique_ptr<LRScheduler> make_scheduler(const nlohmann::json& spec, Optimizer& opt) {
  const std::string name = spec.at(0);
  const nlohmann::json& k = spec.at(1);
  if (name == "StepLR")
    return std::make_unique<StepLR>(opt, StepLROptions{k.at("step_size"), k.value("gamma", 0.1)});
  if (name == "CosineAnnealingLR")
    return std::make_unique<CosineAnnealingLR>(
        opt, CosineAnnealingLROptions{k.at("T_max"), k.value("eta_min", 0.0)});
  REQUIRE(name == "LinearLR");
  return std::make_unique<LinearLR>(
      opt, LinearLROptions{k.value("start_factor", 1.0 / 3), k.value("end_factor", 1.0),
                           k.value("total_iters", int64_t{5})});
}

std::vector<Tensor> params_of(const nlohmann::json& c) {
  std::vector<Tensor> params;
  if (c.contains("param")) params.emplace_back(to_array(c["param"]), true);
  if (c.contains("params"))
    for (const auto& p : c["params"]) params.emplace_back(to_array(p), true);
  return params;
}

// Puts step `step`'s gradients of case c (dense lists or one sparse entry) into the slots.
void set_case_grads(const nlohmann::json& c, std::size_t step, std::vector<Tensor>& params) {
  const nlohmann::json& g = c.at("grads").at(step);
  if (g.is_object()) {
    set_grad(params[0], sparse_rows(g.at("rows").get<std::vector<int64_t>>(), to_array(g.at("values")),
                                    params[0].shape()[0]));
    return;
  }
  for (std::size_t i = 0; i < params.size(); ++i) set_grad(params[i], to_array(g[i]));
}

// SGD keeps one flag per row: a parameter of 2 or more dims has shape[0] rows, others one.
std::size_t rows_of(const Tensor& p) {
  return p.dim() >= 2 ? p.shape()[0] : 1;
}

std::vector<double> lrs_of(const Optimizer& opt) {
  std::vector<double> out;
  for (std::size_t g = 0; g < opt.param_groups().size(); ++g) out.push_back(opt.lr(g));
  return out;
}

}  // namespace

TEST_SUITE("optim") {
  TEST_CASE("param groups with their own lr and weight_decay match torch.optim") {
    for (const auto& [name, c] : ref("groups").items()) {
      std::vector<Tensor> params = params_of(c);
      std::unique_ptr<Optimizer> opt = make_optimizer(c, params);
      for (std::size_t step = 0; step < c.at("grads").size(); ++step) {
        INFO(name << ", step " << step + 1);
        set_case_grads(c, step, params);
        opt->step();
        for (std::size_t i = 0; i < params.size(); ++i)
          CHECK_ALLCLOSE(params[i].value(), to_array(c["expected"][step][i]), 1e-5);
        CHECK(lrs_of(*opt) == c["lrs"][step].get<std::vector<double>>());  // defaults filled in
      }
    }
  }

  TEST_CASE("StepLR, CosineAnnealingLR and LinearLR give torch 1.13's learning rates bit for bit") {
    for (const auto& [name, c] : ref("schedules").items()) {
      CAPTURE(name);
      const std::vector<double> initial = c.at("groups_lr");
      Tensor a = zeros({2}, true), b = zeros({3}, true);
      SGD opt({{.params = {a}, .lr = initial[0]}, {.params = {b}, .lr = initial[1]}}, {.lr = 1.0});
      std::vector<std::unique_ptr<LRScheduler>> scheds;
      for (const auto& spec : c.at("schedulers")) scheds.push_back(make_scheduler(spec, opt));
      const auto& lrs = c.at("lrs");
      CHECK(scheds.back()->get_last_lr() == lrs[0].get<std::vector<double>>());
      for (int64_t step = 1; step <= c.at("steps").get<int64_t>(); ++step) {
        CAPTURE(step);
        opt.step();
        for (auto& s : scheds) s->step();
        const std::vector<double> expected = lrs[step];
        CHECK(scheds.back()->get_last_lr() == expected);  // exact: same double operations, same order
        CHECK(lrs_of(opt) == expected);
        CHECK(scheds.back()->last_epoch() == step);
        if (!c["set_lr"].is_null() && c["set_lr"][0] == step) {  // a change the schedule must carry on from
          const std::size_t g = c["set_lr"][1];
          opt.set_lr(g, opt.lr(g) * c["set_lr"][2].get<double>());
        }
      }
    }
  }

  TEST_CASE("a scheduler stepping after each optimizer step: the parameters match PyTorch's") {
    for (const auto& [name, c] : ref("scheduled").items()) {
      std::vector<Tensor> params = params_of(c);
      std::unique_ptr<Optimizer> opt = make_optimizer(c, params);
      std::unique_ptr<LRScheduler> sched = make_scheduler(c.at("scheduler"), *opt);
      for (std::size_t step = 0; step < c.at("grads").size(); ++step) {
        INFO(name << ", step " << step + 1);
        set_case_grads(c, step, params);
        opt->step();
        sched->step();
        for (std::size_t i = 0; i < params.size(); ++i)
          CHECK_ALLCLOSE(params[i].value(), to_array(c["expected"][step][i]), 1e-5);
        CHECK(lrs_of(*opt) == c["lrs"][step].get<std::vector<double>>());
      }
    }
  }

  TEST_CASE("state_dict after 3 steps holds PyTorch's state; loaded into a new optimizer, steps 4-5 match") {
    TempDir dir;
    for (const auto& [name, c] : ref("state").items()) {
      CAPTURE(name);
      const std::size_t save_after = c.at("save_after"), steps = c.at("grads").size();
      std::vector<Tensor> params = params_of(c);
      std::unique_ptr<Optimizer> opt = make_optimizer(c, params);
      for (std::size_t step = 0; step < save_after; ++step) {
        set_case_grads(c, step, params);
        opt->step();
      }
      // The state, entry by entry, against torch's optimizer.state_dict().
      const optim::StateDict state = opt->state_dict();
      CHECK(state.metadata.at("type") == (c["optimizer"] == "SparseAdam" ? "Adam" : c["optimizer"]));
      std::size_t compared = 0;
      for (std::size_t i = 0; i < params.size(); ++i) {
        const nlohmann::json& expected = c.at("state").at(i);
        const std::string prefix = "state." + std::to_string(i) + ".";
        if (c["optimizer"] == "SGD") {
          CHECK(!state.metadata.count(prefix + "step"));  // SGD counts no steps, in PyTorch neither
          CHECK(state.tensors.at(prefix + "row_seen") == Array(xt::ones<float>({rows_of(params[i])})));
        } else {
          CHECK(state.metadata.at(prefix + "step") == std::to_string(expected.at("step").get<int64_t>()));
        }
        for (const auto& [key, value] : expected.items()) {
          if (key == "step") continue;
          INFO(prefix << key);
          CHECK_ALLCLOSE(state.tensors.at(prefix + key), to_array(value), 1e-5, 1e-8);
          ++compared;
        }
      }
      CHECK(compared >= params.size());

      // Through a file, into an optimizer over fresh copies of the parameters.
      const std::string path = dir.file(name + ".safetensors");
      opt->save(path);
      std::vector<Tensor> fresh;
      for (const Tensor& p : params) fresh.emplace_back(p.value(), true);
      std::unique_ptr<Optimizer> resumed = make_optimizer(c, fresh);
      resumed->load(path);
      for (std::size_t step = save_after; step < steps; ++step) {
        set_case_grads(c, step, params);
        set_case_grads(c, step, fresh);
        opt->step();
        resumed->step();
      }
      for (std::size_t i = 0; i < params.size(); ++i) {
        // SparseAdam places eps differently (adam.hpp): a few 1e-6 apart.
        CHECK_ALLCLOSE(fresh[i].value(), to_array(c["expected"][i]),
                       c["optimizer"] == "SparseAdam" ? 1e-4 : 1e-5);
        CHECK_ALLCLOSE(fresh[i].value(), params[i].value(), 0, 0);  // the same run as without the round trip
      }
    }
  }
}

namespace {

// Two Adam optimizers on two parameters, two steps taken with the same gradients.
struct AdamPair {
  Tensor w{Array{{1, 2, 3}, {4, 5, 6}}, true}, b{Array{0.5, -0.5}, true};
  Tensor w2{w.value(), true}, b2{b.value(), true};
  Adam adam{{{.params = {w}, .lr = 0.1}, {.params = {b}}}, {.lr = 0.01, .amsgrad = true}};
  Adam control{{{.params = {w2}, .lr = 0.1}, {.params = {b2}}}, {.lr = 0.01, .amsgrad = true}};
  AdamPair() {
    for (int i = 0; i < 2; ++i) step();
  }
  void step() {
    for (Tensor* p : {&w, &w2}) set_grad(*p, Array{{1, -1, 0.5}, {0.25, 2, -3}});
    for (Tensor* p : {&b, &b2}) set_grad(*p, Array{0.1, -0.2});
    adam.step();
    control.step();
  }
  // Nothing tells the two apart: state, values, and the values after one more step.
  void check_intact() {
    check_same_state(adam, control);
    CHECK(w.value() == w2.value());
    step();
    CHECK(w.value() == w2.value());
    CHECK(b.value() == b2.value());
  }
};

}  // namespace

TEST_SUITE("optim") {
  TEST_CASE("param groups: defaults filled in, lr and set_lr per group or for all") {
    Tensor a = zeros({2}, true), b = zeros({3}, true), c = zeros({1}, true);
    SGD sgd({{.params = {a, b}, .lr = 0.5}, {.params = {c}, .weight_decay = 0.1}},
            {.lr = 0.1, .momentum = 0.9});
    REQUIRE(sgd.param_groups().size() == 2);
    CHECK(sgd.parameters().size() == 3);
    CHECK(sgd.parameters()[2].is_same(c));
    CHECK(*sgd.param_groups()[0].lr == 0.5);
    CHECK(*sgd.param_groups()[0].weight_decay == 0);  // the options' default
    CHECK(*sgd.param_groups()[1].lr == 0.1);
    CHECK(*sgd.param_groups()[1].weight_decay == 0.1);
    sgd.set_lr(1, 0.25);
    CHECK(sgd.lr(0) == 0.5);
    CHECK(sgd.lr(1) == 0.25);
    sgd.set_lr(0.125);
    CHECK(sgd.lr(0) == 0.125);
    CHECK(sgd.lr(1) == 0.125);
    CHECK_THROWS_WITH_AS(sgd.set_lr(2, 0.1),
                         doctest::Contains("SGD.set_lr: param group 2 out of range (2 groups)"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(sgd.set_lr(-1.0), doctest::Contains("SGD.set_lr: invalid learning rate"),
                         std::invalid_argument);
    CHECK(sgd.lr(1) == 0.125);
    CHECK_THROWS_WITH_AS(Adam({{.params = {a}, .lr = -1.0}}),
                         doctest::Contains("Adam: param group 0: invalid learning rate"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(Adam({{.params = {a}}, {.params = {b, a}}}),
                         doctest::Contains("Adam: parameter 2 (shape [2]) is the same tensor as parameter 0"),
                         std::invalid_argument);

    // The step uses each group's lr: one SGD step with gradient 1 moves each by its lr.
    set_grad(a, Array{1, 1});
    set_grad(c, Array{1});
    SGD plain({{.params = {a}, .lr = 0.5}, {.params = {c}, .lr = 0.25}}, {.lr = 0.1});
    plain.step();
    CHECK(a.value() == Array{-0.5, -0.5});
    CHECK(c.value() == Array{-0.25});
  }

  TEST_CASE("load_state_dict replaces the hyper-parameters with the saved ones, as in PyTorch") {
    Tensor p({{1, 2}, {3, 4}}, true), q(p.value(), true);
    Adam saved({p}, {.lr = 0.5, .betas = {0.8, 0.9}, .eps = 1e-6, .weight_decay = 0.1, .amsgrad = true});
    set_grad(p, Array{{1, 1}, {1, 1}});
    saved.step();
    Adam loaded({q}, {.lr = 0.01});
    loaded.load_state_dict(saved.state_dict());
    CHECK(loaded.lr() == 0.5);
    CHECK(*loaded.param_groups()[0].weight_decay == 0.1);
    CHECK(loaded.options().betas == std::pair<double, double>{0.8, 0.9});
    CHECK(loaded.options().eps == 1e-6);
    CHECK(loaded.options().amsgrad);
    check_same_state(saved, loaded);

    SGD sgd({p}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.5});
    set_grad(p, Array{{1, 1}, {1, 1}});
    sgd.step();
    SGD other({q}, {.lr = 1});
    other.load_state_dict(sgd.state_dict());
    CHECK(other.options().momentum == 0.9);
    CHECK(other.options().dampening == 0.5);
    check_same_state(sgd, other);
  }

  TEST_CASE("a sparse run's state: step counts, lazily reached rows and AdamW's decay survive a round trip") {
    // SGD's row flags: rows 1 and 3 were listed, so their buffers start from g next time; row 0's from 0.
    Tensor p({{1, 2}, {3, 4}, {5, 6}, {7, 8}}, true), q(p.value(), true);
    SGD a({p}, {.lr = 0.5, .momentum = 0.5, .weight_decay = 0.5}),
        b({q}, {.lr = 0.5, .momentum = 0.5, .weight_decay = 0.5});
    set_grad(p, sparse_rows({1, 3}, xt::ones<float>({2, 2}), 4));
    a.step();
    const optim::StateDict s = a.state_dict();
    CHECK(s.tensors.at("state.0.row_seen") == Array{0, 1, 0, 1});
    b.load_state_dict(s);
    q.value_mut() = p.value();
    for (const auto& rows : std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}, {1}}) {
      set_grad(p, sparse_rows(rows, xt::ones<float>({rows.size(), std::size_t{2}}), 4));
      set_grad(q, sparse_rows(rows, xt::ones<float>({rows.size(), std::size_t{2}}), 4));
      a.step();
      b.step();
      CHECK(p.value() == q.value());
    }
    // Adam: each parameter's own step count (bias correction) carries over.
    Tensor e = zeros({5, 2}, true), f = zeros({2}, true), e2 = zeros({5, 2}, true), f2 = zeros({2}, true);
    AdamW x({e, f}, {.lr = 0.1, .weight_decay = 0.5}), y({e2, f2}, {.lr = 0.1, .weight_decay = 0.5});
    set_grad(e, sparse_rows({4}, Array{{1, 2}}, 5));
    x.step();
    set_grad(f, Array{1, 1});
    x.step();
    CHECK(x.state_dict().metadata.at("state.0.step") == "2");
    CHECK(x.state_dict().metadata.at("state.1.step") == "1");
    y.load_state_dict(x.state_dict());
    e2.value_mut() = e.value();
    f2.value_mut() = f.value();
    for (Tensor* t : {&e, &e2}) set_grad(*t, sparse_rows({0, 4}, Array{{1, 1}, {-1, 3}}, 5));
    for (Tensor* t : {&f, &f2}) set_grad(*t, Array{0.5, 2});
    x.step();
    y.step();
    CHECK(e.value() == e2.value());
    CHECK(f.value() == f2.value());
  }

  TEST_CASE("load_state_dict refuses a state that does not fit, naming the problem, and changes nothing") {
    AdamPair pair;
    const optim::StateDict good = pair.adam.state_dict();
    REQUIRE(good.tensors.count("state.0.max_exp_avg_sq"));
    auto expect = [&](const optim::StateDict& bad, const std::string& fragment) {
      CAPTURE(fragment);
      CHECK_THROWS_WITH_AS(pair.adam.load_state_dict(bad), doctest::Contains(fragment.c_str()),
                           std::invalid_argument);
    };
    auto with_meta = [&](const std::string& key, const std::string& value) {
      optim::StateDict s = good;
      s.metadata[key] = value;
      return s;
    };
    auto without_tensor = [&](const std::string& key) {
      optim::StateDict s = good;
      s.tensors.erase(key);
      return s;
    };
    optim::StateDict wrong_shape = good, unknown = good, beyond = good;
    wrong_shape.tensors["state.0.exp_avg"] = xt::zeros<float>({3, 2});
    unknown.tensors["state.0.momentum_buffer"] = xt::zeros<float>({2, 3});
    beyond.tensors["state.7.exp_avg"] = xt::zeros<float>({2});

    Tensor t = zeros({2, 3}, true);
    SGD sgd({t}, {.lr = 0.1, .momentum = 0.9});
    set_grad(t, Array(xt::ones<float>({2, 3})));
    sgd.step();
    expect(sgd.state_dict(), "Adam.load_state_dict: the state is SGD's, this optimizer is Adam");
    expect(with_meta("type", "AdamW"), "the state is AdamW's");
    expect(with_meta("param_groups", R"([{"lr": 0.1, "weight_decay": 0, "params": [0, 1]}])"),
           "the state has 1 param groups, this optimizer has 2");
    expect(
        with_meta(
            "param_groups",
            R"([{"lr": 0.1, "weight_decay": 0, "params": [0, 1]}, {"lr": 0.1, "weight_decay": 0, "params": []}])"),
        "param group 0 holds parameters [0,1] in the state but [0] here");
    expect(
        with_meta(
            "param_groups",
            R"([{"lr": -0.1, "weight_decay": 0, "params": [0]}, {"lr": 0.1, "weight_decay": 0, "params": [1]}])"),
        "param group 0: invalid lr -0.1");
    expect(with_meta("param_groups", "not json"), "\"param_groups\" is not valid JSON");
    expect(
        with_meta("options",
                  R"({"betas": [0.9, 1.5], "eps": 1e-8, "amsgrad": true, "decoupled_weight_decay": false})"),
        "invalid beta parameter at index 1");
    expect(with_meta("options", R"({"betas": [0.9, 0.999]})"), "\"options\" is not");
    expect(with_meta("state.0.step", "two"), "'state.0.step' is \"two\", not a step count >= 1");
    expect(with_meta("state.0.step", "0"), "not a step count >= 1");
    expect(with_meta("state.0.lr", "1"), "unexpected metadata entry 'state.0.lr'");
    expect(with_meta("momentum", "1"), "unexpected metadata entry 'momentum'");
    expect(wrong_shape, "tensor 'state.0.exp_avg' has shape [3, 2] but parameter 0 has shape [2, 3]");
    expect(without_tensor("state.1.exp_avg_sq"), "missing tensor 'state.1.exp_avg_sq'");
    expect(without_tensor("state.1.max_exp_avg_sq"), "missing tensor 'state.1.max_exp_avg_sq'");
    expect(unknown, "unexpected tensor 'state.0.momentum_buffer'");
    expect(beyond, "unexpected tensor 'state.7.exp_avg' for 2 parameters");
    {
      optim::StateDict no_step = good;
      no_step.metadata.erase("state.1.step");
      expect(no_step, "unexpected tensor 'state.1.exp_avg'");
    }
    // SGD's row flags must be 0 or 1, and there must be one per row.
    optim::StateDict flags = sgd.state_dict();
    flags.tensors["state.0.row_seen"] = Array{1, 0.5};
    CHECK_THROWS_WITH_AS(sgd.load_state_dict(flags),
                         doctest::Contains("'state.0.row_seen' holds 0.500000 at row 1"),
                         std::invalid_argument);
    flags.tensors["state.0.row_seen"] = Array{1, 1, 1};
    CHECK_THROWS_WITH_AS(sgd.load_state_dict(flags), doctest::Contains("has shape [3], not [2]"),
                         std::invalid_argument);
    pair.check_intact();

    // From a file: a state that does not fit names the file too.
    TempDir dir;
    sgd.save(dir.file("sgd.safetensors"));
    CHECK_THROWS_WITH_AS(pair.adam.load(dir.file("sgd.safetensors")),
                         doctest::Contains((dir.file("sgd.safetensors") + ": Adam.load_state_dict").c_str()),
                         std::invalid_argument);
    CHECK_THROWS_AS(pair.adam.load(dir.file("missing.safetensors")), tg::SafetensorsError);
    pair.check_intact();
  }

  TEST_CASE("a scheduler's state_dict: a new scheduler picks up the schedule exactly") {
    for (int kind = 0; kind < 3; ++kind) {
      CAPTURE(kind);
      auto make = [&](Optimizer& opt) -> std::unique_ptr<LRScheduler> {
        if (kind == 0) return std::make_unique<StepLR>(opt, StepLROptions{.step_size = 3, .gamma = 0.5});
        if (kind == 1)
          return std::make_unique<CosineAnnealingLR>(opt,
                                                     CosineAnnealingLROptions{.T_max = 7, .eta_min = 0.01});
        return std::make_unique<LinearLR>(opt, LinearLROptions{.start_factor = 0.1, .total_iters = 6});
      };
      Tensor a = zeros({2}, true), b = zeros({2}, true);
      SGD opt({{.params = {a}, .lr = 0.2}, {.params = {b}}}, {.lr = 0.05});
      std::unique_ptr<LRScheduler> sched = make(opt);
      for (int i = 0; i < 4; ++i) sched->step();
      const tg::Metadata state = sched->state_dict();
      const optim::StateDict opt_state = opt.state_dict();
      CHECK(state.at("last_epoch") == "4");

      Tensor c = zeros({2}, true), d = zeros({2}, true);
      SGD opt2({{.params = {c}, .lr = 0.2}, {.params = {d}}}, {.lr = 0.05});
      std::unique_ptr<LRScheduler> sched2 = make(opt2);
      opt2.load_state_dict(opt_state);  // the current lrs and initial_lr
      sched2->load_state_dict(state);   // the epoch
      CHECK(sched2->last_epoch() == 4);
      CHECK(sched2->get_last_lr() == sched->get_last_lr());
      for (int i = 0; i < 12; ++i) {
        sched->step();
        sched2->step();
        CHECK(lrs_of(opt2) == lrs_of(opt));
      }
    }
  }

  TEST_CASE("schedulers refuse bad settings before touching the optimizer, and states that do not fit") {
    Tensor a = zeros({2}, true);
    SGD opt({a}, {.lr = 0.1});
    CHECK_THROWS_WITH_AS(StepLR(opt, {}), doctest::Contains("StepLR: step_size must be >= 1; got 0"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(CosineAnnealingLR(opt, {.T_max = -2}),
                         doctest::Contains("CosineAnnealingLR: T_max must be >= 1"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(LinearLR(opt, {.start_factor = 0}),
                         doctest::Contains("LinearLR: start_factor must be in (0, 1]; got 0"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(LinearLR(opt, {.start_factor = 1.5}), doctest::Contains("start_factor"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(LinearLR(opt, {.end_factor = -0.5}),
                         doctest::Contains("end_factor must be in [0, 1]"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(LinearLR(opt, {.total_iters = 0}), doctest::Contains("total_iters must be >= 1"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(StepLR(opt, {.step_size = 2, .gamma = -0.5}),
                         doctest::Contains("StepLR: gamma must be >= 0; got -0.5"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(CosineAnnealingLR(opt, {.T_max = 2, .eta_min = -1}),
                         doctest::Contains("CosineAnnealingLR: eta_min must be >= 0"), std::invalid_argument);
    CHECK(!opt.initial_lr(0));  // untouched
    CHECK(opt.lr() == 0.1);
    {
      // A group set below eta_min by hand: on the rising half of the cosine the
      // chained rule would go below 0. The step is refused as a whole.
      Tensor b = zeros({2}, true);
      SGD other({b}, {.lr = 0.1});
      CosineAnnealingLR cosine(other, {.T_max = 4, .eta_min = 0.05});
      for (int i = 0; i < 5; ++i) cosine.step();
      other.set_lr(0.0);
      CHECK_THROWS_WITH_AS(
          cosine.step(),
          doctest::Contains("CosineAnnealingLR.step: the schedule gives param group 0 a learning rate of -"),
          std::invalid_argument);
      CHECK(cosine.last_epoch() == 5);
      CHECK(other.lr() == 0.0);
    }

    StepLR sched(opt, {.step_size = 2});
    sched.step();
    const tg::Metadata good = sched.state_dict();
    auto expect = [&](const std::string& key, const std::string& value, const std::string& fragment) {
      tg::Metadata bad = good;
      bad[key] = value;
      CAPTURE(fragment);
      CHECK_THROWS_WITH_AS(sched.load_state_dict(bad), doctest::Contains(fragment.c_str()),
                           std::invalid_argument);
    };
    expect("type", "LinearLR", "StepLR.load_state_dict: the state is LinearLR's, this scheduler is StepLR");
    expect("base_lrs", "[0.1, 0.1]", "\"base_lrs\" has 2 entries for an optimizer with 1 param groups");
    expect("last_lr", "[-1]", "\"last_lr\" holds -1, not a learning rate");
    expect("last_epoch", "-3", "last_epoch -3 < 0");
    expect("last_epoch", "x", "\"last_epoch\" is \"x\", not an integer");
    expect("step_size", "0", "step_size must be >= 1; got 0");
    expect("gamma", "fast", "\"gamma\" is \"fast\", not a number");
    expect("T_max", "3", "unexpected entry 'T_max'");
    CHECK(sched.state_dict() == good);
    CosineAnnealingLR cosine(opt, {.T_max = 3});
    CHECK_THROWS_WITH_AS(cosine.load_state_dict(good), doctest::Contains("the state is StepLR's"),
                         std::invalid_argument);
  }
}
