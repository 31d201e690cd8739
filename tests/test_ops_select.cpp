// Ops that pick, join and compare: max (values and indices), argmax, cat,
// stack, narrow, flatten, gather, where, comparisons, and the Indices helpers.
// Values on paper, gradients against finite differences (gradcheck), and
// against PyTorch (tests/data/core_reference.json).
#include <doctest/doctest.h>

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

tg::Generator gen(77);

Tensor rnd(const tg::Shape& shape) {
  Tensor t = tg::randn(shape, gen, true);
  return t;
}

// A column of ids, [n, 1] (a braced {{1}, {0}} is ambiguous to xtensor).
Indices col(const std::vector<int64_t>& v) {
  return tg::indices(v, {v.size(), 1});
}

Indices fixed_index(const J& c, std::size_t i = 0) {
  return tg::test::to_int_array(c.at("fixed")[i]);
}

}  // namespace

TEST_SUITE("core.ops.select") {
  TEST_CASE("max along a dim gives values and indices; the first of a tie gets the gradient") {
    Tensor a({{1, 5, 5}, {7, 2, 7}}, true);
    auto [values, indices] = tg::max(a, 1);
    CHECK(values.value() == Array{5, 7});
    CHECK(indices == Indices{1, 0});
    tg::sum(values).backward();
    CHECK(a.grad().dense() == Array{{0, 1, 0}, {1, 0, 0}});
    CHECK(tg::max(a, 0, true).indices == Indices{{1, 0, 1}});
    CHECK(tg::max(a, -1, true).values.shape() == tg::Shape{2, 1});
  }

  TEST_CASE("max over all elements: ties share the gradient evenly, as PyTorch") {
    Tensor a({{1, 3, 3}, {3, 0, 2}}, true);
    Tensor m = tg::max(a);
    CHECK(m.shape() == tg::Shape{});
    CHECK(m.item() == 3);
    m.backward();
    CHECK_ALLCLOSE(a.grad().dense(), Array({{0, 1 / 3.0f, 1 / 3.0f}, {1 / 3.0f, 0, 0}}));
    Tensor n({1.0f, NAN, 2.0f});
    CHECK(std::isnan(tg::max(n).item()));
    CHECK(std::isnan(tg::max(n, 0).values.item()));
    CHECK(tg::max(n, 0).indices() == 1);
    CHECK_THROWS_WITH_AS(tg::max(tg::zeros({0, 2})), "max: tensor of shape [0, 2] is empty",
                         std::invalid_argument);
  }

  TEST_CASE("argmax: the first maximum, over all elements or along a dim") {
    Tensor a({{1, 5, 5}, {7, 7, 1}});
    CHECK(tg::argmax(a) == Indices(3));  // flattened position of the first 7
    CHECK(tg::argmax(a).dimension() == 0);
    CHECK(tg::argmax(a, 1) == Indices{1, 0});
    CHECK(tg::argmax(a, 1, true) == col({1, 0}));
    CHECK(tg::argmax(a, 0) == Indices{1, 1, 0});
    CHECK(tg::argmax(Tensor({2.0f, NAN, 3.0f, NAN})) == Indices(1));  // NaN wins, as in PyTorch
    CHECK_THROWS_WITH_AS(tg::argmax(a, 2), doctest::Contains("argmax: dim 2"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(tg::argmax(tg::zeros({0})), "argmax: tensor of shape [0] is empty",
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(tg::argmax(tg::zeros({2, 0}), 1), doctest::Contains("argmax: dim 1 of shape [2, 0]"),
                         std::invalid_argument);
  }

  TEST_CASE("PyTorch parity: max, argmax (with ties)") {
    check_core_parity("max_all_ties", [](Inputs& x, const J&) { return tg::max(x[0]); });
    for (auto [name, dim, keep] : {std::tuple{"max_dim1_ties", 1, false}, std::tuple{"max_dim0_keepdim", 0, true}}) {
      check_core_parity(name, [dim = dim, keep = keep](Inputs& x, const J& c) {
        auto r = tg::max(x[0], dim, keep);
        CHECK(r.indices == tg::test::to_int_array(c.at("extra")[0]));
        return r.values;
      });
    }
    const J& c = tg::test::core_case("argmax");
    Tensor in(tg::test::to_array(c.at("input")));
    CHECK(tg::argmax(in) == tg::test::to_int_array(c.at("all")));
    CHECK(tg::argmax(in, 1) == tg::test::to_int_array(c.at("dim1")));
    CHECK(tg::argmax(in, 0, true) == tg::test::to_int_array(c.at("dim0_keepdim")));
  }

  TEST_CASE("cat and stack: values, gradients, PyTorch parity") {
    Tensor a({{1, 2}, {3, 4}}), b({{5, 6}});
    CHECK(tg::cat({a, b}).value() == Array{{1, 2}, {3, 4}, {5, 6}});
    CHECK(tg::cat({a, tg::transpose(b)}, 1).value() == Array{{1, 2, 5}, {3, 4, 6}});
    CHECK(tg::stack({a, a}).shape() == tg::Shape{2, 2, 2});
    CHECK(tg::stack({a, a}, 2).value() == Array{{{1, 1}, {2, 2}}, {{3, 3}, {4, 4}}});
    CHECK(tg::cat({a}).value() == a.value());

    check_grad([](const Inputs& x) { return tg::cat({x[0], x[1], x[0]}, 1); }, {rnd({2, 3, 2}), rnd({2, 1, 2})});
    check_grad([](const Inputs& x) { return tg::stack({x[0], x[1]}, 1); }, {rnd({3, 2}), rnd({3, 2})});

    check_core_parity("cat_dim0", [](Inputs& x, const J&) { return tg::cat(x, 0); });
    check_core_parity("cat_dim1", [](Inputs& x, const J&) { return tg::cat(x, -1); });
    check_core_parity("cat_dim_mid", [](Inputs& x, const J&) { return tg::cat(x, 1); });
    check_core_parity("stack_dim0", [](Inputs& x, const J&) { return tg::stack(x); });
    check_core_parity("stack_dim_last", [](Inputs& x, const J&) { return tg::stack(x, -1); });

    // Only the inputs that require grad get one.
    Tensor c = tg::ones({2}, true), d = tg::ones({3});
    tg::sum(tg::cat({d, c})).backward();
    CHECK(c.grad().dense() == Array{1, 1});
    CHECK(d.grad().empty());

    // Every tensor is an input of stack's one tape entry. A shape change to one
    // that needs a gradient is refused at backward(); one that needs none, and
    // whose values stack's backward does not read, changes nothing (as in PyTorch).
    Tensor e = tg::ones({2}, true), f = tg::ones({2});
    Tensor s = tg::stack({e, f});
    CHECK(s.creator()->op == "stack");
    e.value_mut() = xt::ones<float>({3});
    CHECK_THROWS_WITH_AS(tg::sum(s).backward(std::nullopt, true), doctest::Contains("input 0 of op 'stack'"),
                         std::logic_error);
    CHECK(e.grad().empty());
    e.value_mut() = xt::ones<float>({2});
    f.value_mut() = xt::ones<float>({3});
    tg::sum(s).backward();
    CHECK(e.grad().dense() == Array{1, 1});

    CHECK_THROWS_WITH_AS(tg::cat({}), "cat: expected a non-empty list of tensors", std::invalid_argument);
    CHECK_THROWS_WITH_AS(tg::cat({a, tg::zeros({2, 3})}),
                         "cat: tensor 1 has shape [2, 3], tensor 0 has [2, 2]; they must match except in dim 0",
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(tg::cat({a, tg::zeros({4})}), doctest::Contains("cat: tensor 1 has shape [4]"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(tg::cat({a, b}, 2), doctest::Contains("cat: dim 2"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(tg::stack({a, b}), doctest::Contains("stack: tensor 1 has shape [1, 2]"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(tg::stack({a}, 3), doctest::Contains("stack: dim 3"), std::invalid_argument);
  }

  TEST_CASE("narrow and flatten") {
    Tensor a({{1, 2, 3}, {4, 5, 6}});
    CHECK(tg::narrow(a, 1, 1, 2).value() == Array{{2, 3}, {5, 6}});
    CHECK(tg::narrow(a, 0, -1, 1).value() == Array{{4, 5, 6}});
    CHECK(tg::narrow(a, 1, 3, 0).shape() == tg::Shape{2, 0});
    check_grad([](const Inputs& x) { return tg::narrow(x[0], 1, 1, 2); }, {rnd({2, 4, 3})});
    check_core_parity("narrow", [](Inputs& x, const J&) { return tg::narrow(x[0], 1, 1, 3); });
    CHECK_THROWS_WITH_AS(tg::narrow(a, 1, 2, 2), "narrow: start 2 and length 2 do not fit dim 1 of shape [2, 3]",
                         std::out_of_range);
    CHECK_THROWS_AS(tg::narrow(a, 0, -3, 1), std::out_of_range);
    CHECK_THROWS_AS(tg::narrow(a, 0, 0, -1), std::out_of_range);

    Tensor b = rnd({2, 3, 4});
    CHECK(tg::flatten(b).shape() == tg::Shape{24});
    CHECK(tg::flatten(b, 1).shape() == tg::Shape{2, 12});
    CHECK(tg::flatten(b, 0, 1).shape() == tg::Shape{6, 4});
    CHECK(tg::flatten(Tensor(Array(2.0f))).shape() == tg::Shape{1});
    CHECK(tg::flatten(Tensor(Array(2.0f)), -1, 0).shape() == tg::Shape{1});
    // a 0-d tensor has the dims of a 1-d one (PyTorch raises IndexError for others)
    CHECK_THROWS_WITH_AS(tg::flatten(Tensor(Array(2.0f)), 1),
                         "flatten: dim 1 out of range for a 0-d tensor (its dims are 0 and -1)", std::invalid_argument);
    CHECK_THROWS_WITH_AS(tg::flatten(Tensor(Array(2.0f)), 0, -2),
                         doctest::Contains("flatten: dim -2 out of range for a 0-d tensor"), std::invalid_argument);
    check_core_parity("flatten", [](Inputs& x, const J&) { return tg::flatten(x[0], 1); });
    CHECK_THROWS_WITH_AS(tg::flatten(b, 2, 1), doctest::Contains("flatten: start_dim 2 comes after end_dim 1"),
                         std::invalid_argument);
  }

  TEST_CASE("gather: values, gradients with repeats, PyTorch parity") {
    Tensor a({{1, 2, 3}, {4, 5, 6}});
    CHECK(tg::gather(a, 1, Indices{{2, 0}, {1, 1}}).value() == Array{{3, 1}, {5, 5}});
    CHECK(tg::gather(a, 0, Indices{{1, 0, 1}}).value() == Array{{4, 2, 6}});
    // log-probabilities of the targets: the cross-entropy pick
    CHECK(tg::gather(a, 1, col({2, 0})).value() == tg::tensor({3, 4}, {2, 1}).value());
    check_grad([](const Inputs& x) { return tg::gather(x[0], 1, Indices{{2, 2, 0}, {1, 1, 1}}); },
               {rnd({2, 4})});
    check_grad([](const Inputs& x) { return tg::gather(x[0], 0, tg::indices({1, 0}, {1, 2, 1})); }, {rnd({2, 2, 3})});
    for (const char* name : {"gather_dim0", "gather_dim1", "gather_3d"}) {
      const int64_t dim = std::string(name) == "gather_dim0" ? 0 : std::string(name) == "gather_dim1" ? 1 : 2;
      check_core_parity(name, [dim](Inputs& x, const J& c) { return tg::gather(x[0], dim, fixed_index(c)); });
    }
    CHECK_THROWS_WITH_AS(tg::gather(a, 1, col({3, 0})), "gather: index 3 out of range for size 3",
                         std::out_of_range);
    CHECK_THROWS_AS(tg::gather(a, 1, col({-1, 0})), std::out_of_range);
    CHECK_THROWS_WITH_AS(tg::gather(a, 1, Indices{0, 1}),
                         "gather: index of shape [2] does not fit input [2, 3] (same number of dims, none larger "
                         "except dim 1)",
                         std::invalid_argument);
    CHECK_THROWS_AS(tg::gather(a, 1, col({0, 0, 0})), std::invalid_argument);
    CHECK_THROWS_AS(tg::gather(a, 2, tg::indices({0}, {1, 1})), std::invalid_argument);
  }

  TEST_CASE("comparisons give 0/1 masks; where picks by a mask") {
    Tensor a({{1, 5}, {3, -2}}), b({3, 3});
    CHECK(tg::gt(a, b).value() == Array{{0, 1}, {0, 0}});
    CHECK(tg::ge(a, b).value() == Array{{0, 1}, {1, 0}});
    CHECK(tg::lt(a, b).value() == Array{{1, 0}, {0, 1}});
    CHECK(tg::le(a, 3.0f).value() == Array{{1, 0}, {1, 1}});
    CHECK(tg::eq(a, 3.0f).value() == Array{{0, 0}, {1, 0}});
    CHECK(tg::ne(a, b).value() == Array{{1, 1}, {0, 1}});
    CHECK(tg::gt(Tensor({NAN}), 0.0f).value() == Array{0});
    CHECK_FALSE(tg::gt(Tensor({1.0f}, true), 0.0f).requires_grad());
    CHECK_THROWS_WITH_AS(tg::gt(a, tg::zeros({3})), doctest::Contains("gt: shapes [2, 2] and [3]"),
                         std::invalid_argument);

    // leaky relu written with where
    Tensor x({-2.0f, 0.5f, 3.0f}, true);
    Tensor y = tg::where(tg::gt(x, 0.0f), x, x * 0.1f);
    CHECK_ALLCLOSE(y.value(), Array({-0.2f, 0.5f, 3.0f}));
    tg::sum(y).backward();
    CHECK_ALLCLOSE(x.grad().dense(), Array({0.1f, 1.0f, 1.0f}));

    Tensor cond = tg::tensor({1, 0}, {2, 1});  // broadcast over columns
    check_grad([cond](const Inputs& v) { return tg::where(cond, v[0], v[1]); }, {rnd({2, 3}), rnd({3})});
    CHECK(tg::where(Tensor({{1.0f, 0.0f}, {0.0f, 1.0f}}), Tensor(Array(1.0f)), Tensor(Array(0.0f))).value() ==
          Array{{1, 0}, {0, 1}});  // the condition alone sets the shape
    check_core_parity("where", [](Inputs& x, const J& c) {
      return tg::where(Tensor(tg::test::to_array(c.at("fixed")[0])), x[0], x[1]);
    });
    CHECK_THROWS_WITH_AS(tg::where(tg::zeros({2}), tg::zeros({3}), tg::zeros({3})),
                         "where: shapes [2] and [3] cannot be broadcast together", std::invalid_argument);
  }

  TEST_CASE("Indices: pick by positions and slice a range, without xtensor") {
    Indices labels = tg::indices({4, 8, 15, 16, 23, 42});
    Indices batch = tg::indices({5, 0, 0});
    CHECK(tg::index_select(labels, 0, batch) == Indices{42, 4, 4});
    CHECK(tg::narrow(labels, 0, 2, 3) == Indices{15, 16, 23});
    CHECK(tg::narrow(labels, 0, -2, 2) == Indices{23, 42});
    Indices grid = tg::indices({1, 2, 3, 4, 5, 6}, {3, 2});
    CHECK(tg::index_select(grid, 0, tg::indices({2, 0})) == Indices{{5, 6}, {1, 2}});
    CHECK(tg::narrow(grid, 1, 1, 1) == col({2, 4, 6}));
    CHECK_THROWS_WITH_AS(tg::index_select(labels, 0, tg::indices({6})), "index_select: index 6 out of range for size 6",
                         std::out_of_range);
    CHECK_THROWS_AS(tg::index_select(labels, 0, grid), std::invalid_argument);
    CHECK_THROWS_WITH_AS(tg::narrow(labels, 0, 4, 3), "narrow: start 4 and length 3 do not fit dim 0 of shape [6]",
                         std::out_of_range);
  }

  TEST_CASE("a bad input records nothing") {
    Tensor a = tg::ones({2, 3}, true);
    const std::size_t before = tg::Tape::current().live_count();
    CHECK_THROWS(tg::cat({a, tg::ones({3, 3}, true)}, 1));
    CHECK_THROWS(tg::gather(a, 1, col({5, 0})));
    CHECK_THROWS(tg::narrow(a, 0, 1, 5));
    CHECK_THROWS(tg::where(tg::ones({4}), a, a));
    CHECK(tg::Tape::current().live_count() == before);
    CHECK(a.value() == xt::ones<float>({2, 3}));
  }
}
