// Optimizers: PyTorch reference runs (tests/data/optim_reference.json, written by
// tests/tools/gen_optim_reference.py), then the lazy sparse semantics, which have
// no PyTorch counterpart, on examples small enough to check on paper.
#include <doctest/doctest.h>

#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include <xtensor/xview.hpp>

#include "helpers.hpp"
#include "tapegrad.hpp"

using namespace tg;
using namespace tg::optim;
using tg::test::to_array;

namespace {

// Puts g in p's gradient slot, as backward() would.
void set_grad(Tensor& p, Array g) {
  p.grad_mut().clear();
  p.grad_mut().add(std::move(g), p.shape());
}
void set_grad(Tensor& p, SparseRows g) {
  p.grad_mut().clear();
  p.grad_mut().add(std::move(g), p.shape());
}

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
    CHECK_NOTHROW(Adam({}));
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

    // w's gradient is fine, b's comes after it and has the wrong shape.
    set_grad(w, Array({{1, 1}, {1, 1}}));
    set_grad(b, Array({1, 1}));
    b.grad_mut().dense_mut() = xt::ones<float>({3});
    CHECK_THROWS_WITH_AS(adam.step(), doctest::Contains("Adam.step: parameter 1"), std::invalid_argument);
    CHECK_THROWS_AS(sgd.step(), std::invalid_argument);
    CHECK_ALLCLOSE(w.value(), w_init, 0, 0);
    CHECK(adam.state_bytes() == 0);
    CHECK(sgd.state_bytes() == 0);

    // Sparse: wrong width, a 1-d parameter, unsorted rows, a row out of range.
    set_grad(w, sparse_rows({0}, Array({{1, 1}}), 2));
    w.grad_mut().sparse_mut().values = xt::ones<float>({1, 3});
    b.grad_mut().clear();
    CHECK_THROWS_AS(adam.step(), std::invalid_argument);
    set_grad(w, Array({{1, 1}, {1, 1}}));
    b.grad_mut().clear();
    b.grad_mut().add(sparse_rows({0}, xt::ones<float>({1, 1}), 1), {1, 1});  // [1, 1] ...
    CHECK_THROWS_AS(adam.step(), std::invalid_argument);                     // ... for a [2] parameter
    b.grad_mut().clear();
    set_grad(w, sparse_rows({0, 1}, Array({{1, 1}, {1, 1}}), 2));
    w.grad_mut().sparse_mut().rows = {1, 0};
    CHECK_THROWS_AS(adam.step(), std::invalid_argument);
    w.grad_mut().sparse_mut().rows = {0, 2};
    CHECK_THROWS_AS(adam.step(), std::out_of_range);
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
