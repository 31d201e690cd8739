// Tensor handles, factories, in-place writes, and the gradient slot's rules.
#include <doctest/doctest.h>

#include <stdexcept>

#include <tapegrad/tapegrad.hpp>

#include "helpers.hpp"

using tg::Array;
using tg::Tensor;

TEST_SUITE("core") {
  TEST_CASE("a Tensor is a shallow handle: copies share values and gradient") {
    Tensor a({1.0f, 2.0f, 3.0f}, true);
    Tensor b = a;
    CHECK(b.is_same(a));
    b.value_mut()(0) = 10.0f;           // raw write through one handle ...
    CHECK(a.value()(0) == 10.0f);  // ... is seen through the other
    b.accumulate_grad(Array{1.0f, 1.0f, 1.0f});
    CHECK(a.grad().is_dense());
    CHECK_ALLCLOSE(a.grad().dense(), Array({1.0f, 1.0f, 1.0f}));

    Tensor c = a.detach();  // an independent leaf with copied values
    CHECK_FALSE(c.is_same(a));
    CHECK_FALSE(c.requires_grad());
    c.value_mut()(1) = -1.0f;
    CHECK(a.value()(1) == 2.0f);
  }

  TEST_CASE("construction from nested lists and factories") {
    Tensor m({{1.0f, 2.0f, 3.0f}, {4.0f, 5.0f, 6.0f}});
    CHECK(m.shape() == tg::Shape{2, 3});
    CHECK(m.numel() == 6);
    CHECK(m.value()(1, 2) == 6.0f);
    CHECK(Tensor({{{1.0f, 2.0f}, {3.0f, 4.0f}}}).shape() == tg::Shape{1, 2, 2});

    CHECK(tg::zeros({2, 2}).value() == xt::zeros<float>({2, 2}));
    CHECK(tg::ones({3}).value() == xt::ones<float>({3}));
    CHECK(tg::full({2}, 7.5f).value() == Array({7.5f, 7.5f}));
    CHECK(tg::zeros({2}, true).requires_grad());

    tg::Generator g1(42), g2(42), g3(43);
    Tensor r1 = tg::randn({100}, g1), r2 = tg::randn({100}, g2), r3 = tg::randn({100}, g3);
    CHECK(r1.value() == r2.value());  // same seed, same numbers
    CHECK_FALSE(r1.value() == r3.value());
    double mean = xt::mean(r1.value())(), sd = xt::stddev(r1.value())();
    CHECK(std::abs(mean) < 0.3);
    CHECK(sd == doctest::Approx(1.0).epsilon(0.3));
    Tensor u = tg::rand({1000}, g1);
    CHECK(xt::amin(u.value())() >= 0.0f);
    CHECK(xt::amax(u.value())() < 1.0f);

    tg::manual_seed(7);
    Array a = tg::randn({5}, tg::default_generator()).value();
    tg::manual_seed(7);
    CHECK(tg::randn({5}, tg::default_generator()).value() == a);
  }

  TEST_CASE("item and its error") {
    CHECK(Tensor({3.5f}).item() == 3.5f);
    CHECK_THROWS_WITH_AS(Tensor({1.0f, 2.0f}).item(), doctest::Contains("[2]"), std::invalid_argument);
  }

  TEST_CASE("copy_ overwrites in place only under NoGradGuard when grad is required") {
    Tensor w({1.0f, 2.0f}, true);
    CHECK_THROWS_WITH_AS(w.copy_(Array{5.0f, 6.0f}), doctest::Contains("NoGradGuard"), std::logic_error);
    CHECK(w.value() == Array({1.0f, 2.0f}));  // unchanged
    {
      tg::NoGradGuard no_grad;
      CHECK_THROWS_WITH_AS(w.copy_(Array{1.0f, 2.0f, 3.0f}), doctest::Contains("[3]"), std::invalid_argument);
      w.copy_(Array{5.0f, 6.0f});
    }
    CHECK(w.value() == Array({5.0f, 6.0f}));
    Tensor plain({0.0f});
    plain.copy_(Array{9.0f});  // no grad required: allowed anywhere
    CHECK(plain.item() == 9.0f);
  }

  TEST_CASE("NoGradGuard nests and restores") {
    CHECK(tg::is_grad_enabled());
    {
      tg::NoGradGuard a;
      CHECK_FALSE(tg::is_grad_enabled());
      {
        tg::NoGradGuard b;
        CHECK_FALSE(tg::is_grad_enabled());
      }
      CHECK_FALSE(tg::is_grad_enabled());
    }
    CHECK(tg::is_grad_enabled());
    try {  // an exception unwinding past the guard restores it too
      tg::NoGradGuard c;
      throw std::runtime_error("out");
    } catch (const std::runtime_error&) {
    }
    CHECK(tg::is_grad_enabled());
  }

  TEST_CASE("ScopedSetting, every guard's pattern: sets, restores in reverse order, runs `then` after each change") {
    static int setting = 0, changes = 0;
    auto count = [] { ++changes; };
    {
      tg::ScopedSetting<int> a(setting, 1, +count);
      CHECK(setting == 1);
      {
        tg::ScopedSetting<int> b(setting, 2, +count);
        CHECK(setting == 2);
      }
      CHECK(setting == 1);
    }
    CHECK(setting == 0);
    CHECK(changes == 4);
  }
}

TEST_SUITE("core.grad") {
  using tg::Grad;
  using tg::SparseRows;

  SparseRows rows_of(std::vector<int64_t> rows, Array values, std::size_t n) {
    SparseRows s;
    s.rows = std::move(rows);
    s.values = values;
    s.num_rows = n;
    s.check("test");
    return s;
  }

  TEST_CASE("SparseRows holds only its rows: bytes and the dense array it stands for") {
    SparseRows s = rows_of({1, 3, 5}, Array{{2, 2}, {4, 4}, {4, 4}}, 8);
    CHECK(s.nbytes() == 3 * sizeof(int64_t) + 6 * sizeof(float));  // unique rows x cols
    Array d = s.to_dense();
    CHECK(d.shape()[0] == 8);
    CHECK(d(5, 1) == 4.0f);
    CHECK(d(0, 0) == 0.0f);
  }

  TEST_CASE("check rejects unsorted, repeated or out-of-range rows") {
    SparseRows s;
    s.num_rows = 4;
    s.values = xt::zeros<float>({2, 3});
    s.rows = {2, 1};
    CHECK_THROWS_AS(s.check("t"), std::invalid_argument);
    s.rows = {1, 1};
    CHECK_THROWS_AS(s.check("t"), std::invalid_argument);
    s.rows = {1, 4};
    CHECK_THROWS_AS(s.check("t"), std::out_of_range);
    s.rows = {0, 3};
    CHECK_NOTHROW(s.check("t"));
  }

  TEST_CASE("Grad::add, the previous name of Grad::accumulate, still adds") {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    const tg::Shape shape{3, 2};
    Grad old_name, new_name;
    for (Grad* g : {&old_name, &new_name}) *g = Grad(Array{{1, 1}, {2, 2}, {3, 3}});
    old_name.add(rows_of({1}, Array{{10, 20}}, 3), shape);
    new_name.accumulate(rows_of({1}, Array{{10, 20}}, 3), shape);
#pragma GCC diagnostic pop
    CHECK(old_name.dense() == Array{{1, 1}, {12, 22}, {3, 3}});
    CHECK(new_name.dense() == old_name.dense());
  }

  TEST_CASE("sparse + sparse stays sparse and coalesced") {
    const tg::Shape shape{6, 2};
    Grad g;
    CHECK(g.empty());
    g.accumulate(rows_of({1, 4}, Array{{1, 1}, {2, 2}}, 6), shape);
    CHECK(g.is_sparse());
    g.accumulate(rows_of({0, 4, 5}, Array{{10, 10}, {20, 20}, {30, 30}}, 6), shape);
    REQUIRE(g.is_sparse());
    CHECK(g.sparse().rows == std::vector<int64_t>{0, 1, 4, 5});
    CHECK(g.sparse().values == xt::xtensor<float, 2>{{10, 10}, {1, 1}, {22, 22}, {30, 30}});
    CHECK_NOTHROW(g.sparse().check("merged"));
    CHECK(g.nbytes() == 4 * sizeof(int64_t) + 8 * sizeof(float));
  }

  TEST_CASE("dense + sparse and sparse + dense become dense") {
    const tg::Shape shape{3, 2};
    Array base = Array{{1, 1}, {1, 1}, {1, 1}};
    SparseRows s = rows_of({2}, Array{{5, 6}}, 3);
    Array expected = Array{{1, 1}, {1, 1}, {6, 7}};

    Grad a;
    a.accumulate(base, shape);
    a.accumulate(s, shape);
    REQUIRE(a.is_dense());
    CHECK(a.dense() == expected);

    Grad b;
    b.accumulate(s, shape);
    b.accumulate(base, shape);
    REQUIRE(b.is_dense());
    CHECK(b.dense() == expected);
    CHECK(b.to_dense(shape) == expected);
  }

  TEST_CASE("accumulation refuses a held gradient of another shape than the tensor now has") {
    Grad g;
    g.accumulate(Array{1.0f, 2.0f}, tg::Shape{2});
    // The tensor became [3] in place: adding would broadcast the stale [2] or throw from xtensor.
    CHECK_THROWS_WITH_AS(g.accumulate(Array{1.0f, 1.0f, 1.0f}, tg::Shape{3}),
                         doctest::Contains("the gradient held has shape [2] but the tensor now has shape [3]"),
                         std::invalid_argument);
    CHECK(g.dense() == Array({1.0f, 2.0f}));
    CHECK_THROWS_AS(g.accumulate(rows_of({0}, xt::ones<float>({1, 1}), 3), tg::Shape{3, 1}), std::invalid_argument);
    CHECK(g.dense() == Array({1.0f, 2.0f}));
  }

  TEST_CASE("rows of zero columns: merge, densify and add touch no element") {
    // Runs under UBSan in ./scripts/test --sanitize: &values(i, 0) on a [n, 0]
    // array bound a reference to an element that does not exist.
    const tg::Shape shape{3, 0};
    const Array none = xt::zeros<float>({1, 0});
    auto shape_of = [](const Array& a) { return tg::Shape(a.shape().begin(), a.shape().end()); };
    SparseRows c = rows_of({0, 2}, xt::zeros<float>({2, 0}), 3);
    CHECK(shape_of(c.to_dense()) == shape);
    Grad sparse;
    sparse.accumulate(rows_of({1}, none, 3), shape);
    sparse.accumulate(rows_of({2}, none, 3), shape);  // sparse + sparse: a merge
    REQUIRE(sparse.is_sparse());
    CHECK(sparse.sparse().rows == std::vector<int64_t>{1, 2});
    Grad dense;
    dense.accumulate(Array(xt::zeros<float>(shape)), shape);
    dense.accumulate(rows_of({1}, none, 3), shape);  // dense + sparse
    CHECK(shape_of(dense.dense()) == shape);
  }

  TEST_CASE("accumulation checks shapes and names both") {
    Grad g;
    CHECK_THROWS_WITH_AS(g.accumulate(Array{1, 2, 3}, tg::Shape{2}), doctest::Contains("[3]"),
                         std::invalid_argument);
    CHECK(g.empty());
    CHECK_THROWS_WITH_AS(g.accumulate(rows_of({0}, Array{{1, 2, 3}}, 4), tg::Shape{4, 2}),
                         doctest::Contains("[4, 2]"), std::invalid_argument);
    CHECK(g.empty());
    SparseRows bad;  // an out-of-range row must not be written anywhere
    bad.rows = {7};
    bad.values = xt::ones<float>({1, 2});
    bad.num_rows = 4;
    g.accumulate(Array(xt::zeros<float>({4, 2})), tg::Shape{4, 2});
    CHECK_THROWS_AS(g.accumulate(bad, tg::Shape{4, 2}), std::out_of_range);
    bad.rows = {2};
    bad.values = xt::ones<float>({1, 2});
    CHECK_NOTHROW(g.accumulate(bad, tg::Shape{4, 2}));
    CHECK(g.dense()(2, 1) == 1.0f);
    g.clear();
    CHECK(g.to_dense({2, 2}) == xt::zeros<float>({2, 2}));
    CHECK_THROWS_AS(g.dense(), std::logic_error);
    CHECK_THROWS_AS(g.sparse(), std::logic_error);
  }
}
