// Making tensors from plain C++ data (tensor, indices, arange) and printing
// them: the printed form is compared with what PyTorch prints for the same
// values (tests/data/core_reference.json, keys "print" and "print_sparse").
#include <doctest/doctest.h>

#include <sstream>
#include <type_traits>

#include <tapegrad/tapegrad.hpp>

#include "helpers.hpp"

using tg::Array;
using tg::Indices;
using tg::Tensor;

namespace {

template <class T>
std::string printed(const T& x) {
  std::ostringstream s;
  s << x;
  return s.str();
}

// Whether `std::cout << x` compiles for an x of type T.
template <class T>
concept Printable = requires(std::ostream& os, const T& x) {
  os << x;
};

}  // namespace

// A namespace with an operator<< of its own hides the global ones from
// unqualified lookup; Tensor and Indices must still print here (found by ADL).
namespace elsewhere {
struct Unrelated {};
[[maybe_unused]] std::ostream& operator<<(std::ostream& os, Unrelated) {
  return os << "unrelated";
}
std::string print_both(const Tensor& t, const Indices& i) {
  std::ostringstream s;
  s << t << " " << i;
  return s.str();
}
std::string print_array(const Array& a, const tg::Grad& g) {
  std::ostringstream s;
  s << a << " " << g;
  return s.str();
}
}  // namespace elsewhere

TEST_SUITE("core.factories") {
  TEST_CASE("tensor() copies a vector or a pointer into the given shape") {
    std::vector<float> v = {1, 2, 3, 4, 5, 6};
    Tensor t = tg::tensor(v, {2, 3});
    v[0] = 100;  // the tensor holds a copy
    CHECK(t.value() == Array{{1, 2, 3}, {4, 5, 6}});
    CHECK_FALSE(t.requires_grad());
    CHECK(tg::tensor(v, {3, 2}, true).requires_grad());
    CHECK(tg::tensor({7.0f, 8.0f}).shape() == tg::Shape{2});
    CHECK(tg::tensor({}).shape() == tg::Shape{0});
    CHECK(tg::tensor({2.5f}, {}).value() == Array(2.5f));  // 0-d

    const float raw[] = {1, 2, 3, 4};
    Tensor p = tg::tensor(raw, {2, 2}, true);
    CHECK(p.value() == Array{{1, 2}, {3, 4}});
    CHECK(p.requires_grad());
    CHECK(p.value().data() != raw);

    CHECK_THROWS_WITH_AS(tg::tensor(v, {4, 2}), "tensor: 6 values do not fit shape [4, 2] (8 elements)",
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(tg::tensor(static_cast<const float*>(nullptr), {2}),
                         "tensor: null pointer for shape [2]", std::invalid_argument);
    CHECK_NOTHROW(tg::tensor(static_cast<const float*>(nullptr), {0, 3}));
  }

  TEST_CASE("indices() copies a vector or a pointer") {
    std::vector<int64_t> labels = {3, 0, 2, 2};
    Indices y = tg::indices(labels);
    labels[0] = 9;
    CHECK(y == Indices{3, 0, 2, 2});
    CHECK(tg::indices({1, 2, 3, 4, 5, 6}, {3, 2}) == Indices{{1, 2}, {3, 4}, {5, 6}});
    const int64_t raw[] = {5, 6};
    CHECK(tg::indices(raw, {2, 1}) == tg::indices({5, 6}, {2, 1}));
    CHECK_THROWS_WITH_AS(tg::indices({1, 2, 3}, {2}), "indices: 3 values do not fit shape [2] (2 elements)",
                         std::invalid_argument);
    CHECK_THROWS_AS(tg::indices(static_cast<const int64_t*>(nullptr), {1}), std::invalid_argument);
  }

  TEST_CASE("arange: integers give Indices, floats give a Tensor, as in PyTorch") {
    static_assert(std::is_same_v<decltype(tg::arange(5)), Indices>);
    static_assert(std::is_same_v<decltype(tg::arange(int64_t{2}, 9)), Indices>);
    static_assert(std::is_same_v<decltype(tg::arange(5.0)), Tensor>);
    static_assert(std::is_same_v<decltype(tg::arange(0, 1.0, 0.25)), Tensor>);
    CHECK(tg::arange(5) == Indices{0, 1, 2, 3, 4});
    CHECK(tg::arange(2, 11, 3) == Indices{2, 5, 8});
    CHECK(tg::arange(0).size() == 0);
    CHECK(tg::arange(0.0f, 1.0f, 0.25f).value() == Array{0, 0.25f, 0.5f, 0.75f});
    CHECK(tg::arange(3.0).value() == Array{0, 1, 2});

    const auto& c = tg::test::reference("core_reference").at("cases");
    const auto& f = c.at("arange_float");
    CHECK_ALLCLOSE(tg::arange(f.at("start").get<double>(), f.at("end").get<double>(), f.at("step").get<double>())
                       .value(),
                   tg::test::to_array(f.at("out")), 0, 0);
    const auto& i = c.at("arange_int");
    CHECK(tg::arange(i.at("start").get<int64_t>(), i.at("end").get<int64_t>(), i.at("step").get<int64_t>()) ==
          tg::test::to_int_array(i.at("out")));

    CHECK_THROWS_WITH_AS(tg::arange(0, 5, 0), "arange: step must be nonzero", std::invalid_argument);
    CHECK_THROWS_WITH_AS(tg::arange(5, 0), doctest::Contains("arange: step 1"), std::invalid_argument);
    CHECK_THROWS_AS(tg::arange(0.0, 1.0, -0.5), std::invalid_argument);
    CHECK_THROWS_WITH_AS(tg::arange(0.0, 1e30), doctest::Contains("elements are too many"), std::invalid_argument);
    CHECK_THROWS_AS(tg::arange(0.0, INFINITY), std::invalid_argument);
  }
}

TEST_SUITE("core.print") {
  TEST_CASE("Tensor and Indices print as PyTorch does, plus the shape") {
    const auto& cases = tg::test::reference("core_reference").at("print");
    REQUIRE(cases.size() > 10);
    for (const auto& c : cases) {
      const tg::Shape shape = c.at("shape").get<tg::Shape>();
      const std::string expected = c.at("expected").get<std::string>();
      CAPTURE(expected);
      std::string got;
      if (c.at("integer").get<bool>()) {
        std::vector<int64_t> v;
        for (const auto& s : c.at("data")) v.push_back(std::stoll(s.get<std::string>()));
        got = printed(tg::indices(v, shape));
      } else {
        std::vector<float> v;  // "nan", "inf", "-0.0" and plain numbers
        for (const auto& s : c.at("data")) v.push_back(static_cast<float>(std::stod(s.get<std::string>())));
        got = printed(tg::tensor(v, shape, c.at("requires_grad").get<bool>()));
      }
      CHECK(got == expected);
    }
  }

  TEST_CASE("an op's output names the op; a detached copy does not") {
    Tensor a = tg::tensor({1, 2}, {2}, true);
    Tensor b = a * 2.0f;
    CHECK(printed(b) == "tensor([2., 4.], shape=[2], grad_fn=<mul_scalar>)");
    CHECK(printed(b.detach()) == "tensor([2., 4.], shape=[2])");
    tg::NoGradGuard no_grad;
    CHECK(printed(a * 2.0f) == "tensor([2., 4.], shape=[2])");
  }

  TEST_CASE("printing works from any namespace") {
    CHECK(elsewhere::print_both(Tensor({0.5f}), Indices{1, 2}) ==
          "tensor([0.5000], shape=[1]) tensor([1, 2], shape=[2])");
    const Array a{0.5f, -1.25f};
    CHECK(elsewhere::print_array(a, tg::Grad(a)) == printed(Tensor(a)) + " " + printed(Tensor(a)));
  }

  TEST_CASE("an Array prints its float values as a Tensor of them does, never as integers") {
    Tensor t({3.0f, -0.5f, 5.5f}, true);
    tg::sum(t * t).backward();  // grad 2t = [6, -1, 11]
    CHECK(printed(t.value()) == printed(t.detach()));
    CHECK(printed(t.value()).find("-0.5000") != std::string::npos);
    CHECK(printed(t.grad_dense()) == printed(Tensor(t.grad_dense())));
    // Any expression or fixed-rank array of floats is evaluated and printed the same way.
    CHECK(printed(t.value() * 0.5f) == printed(Tensor(Array(t.value() * 0.5f))));
    const xt::xtensor<float, 2> m = {{0.25f, 1.5f}, {2.0f, -3.0f}};
    CHECK(printed(m) == printed(Tensor(Array(m))));
    // Integer arrays and expressions print as Indices.
    const xt::xarray<int> small{1, -2};
    CHECK(printed(small) == printed(Indices{1, -2}));
    CHECK(printed(Indices{4, 5} + int64_t{1}) == printed(Indices{5, 6}));
  }

  TEST_CASE("a gradient slot prints its dense Array, its SparseRows, or None before backward()") {
    Tensor t({3.0f, -0.5f}, true);
    CHECK(printed(t.grad()) == "None");  // print(t.grad) in Python
    tg::sum(t * t).backward();
    CHECK(printed(t.grad()) == printed(Tensor(t.grad().dense())));
    CHECK(printed(t.grad()).find("-1.") != std::string::npos);

    tg::nn::Embedding emb(5, 3, {.sparse = true});
    tg::sum(emb(Indices{1, 3, 1})).backward();
    REQUIRE(emb.weight.grad().is_sparse());
    CHECK(printed(emb.weight.grad()) == printed(emb.weight.grad().sparse()));
  }

  TEST_CASE("SparseRows print as PyTorch prints the same sparse tensor") {
    const auto& cases = tg::test::reference("core_reference").at("print_sparse");
    REQUIRE(cases.size() >= 3);
    for (const auto& c : cases) {
      const std::string expected = c.at("expected").get<std::string>();
      CAPTURE(expected);
      const Array values = tg::test::to_array(c.at("values"));
      tg::SparseRows s{c.at("rows").get<std::vector<int64_t>>(), values, c.at("num_rows").get<std::size_t>()};
      CHECK(printed(s) == expected);
      CHECK(printed(tg::Grad(s)) == expected);
    }
  }

  TEST_CASE("what a user may stream prints values; what would print wrong does not compile") {
    static_assert(Printable<Tensor> && Printable<Array> && Printable<Indices> && Printable<tg::Grad> &&
                  Printable<tg::SparseRows> && Printable<xt::xtensor<float, 2>>);
    // A Shape has no printer of its own (tg::shape_str(shape) gives "[2, 3]"), and
    // a bool array is neither floats nor indices: neither converts to one that prints.
    static_assert(!Printable<tg::Shape> && !Printable<tg::Dims> && !Printable<xt::xarray<bool>>);
    static_assert(!Printable<tg::Generator> && !Printable<tg::nn::Linear>);
    CHECK(tg::shape_str(Tensor(Array{{1.0f, 2.0f}}).shape()) == "[1, 2]");
  }
}
