// The kernel layer under the ops (core/kernels/): every fast loop against a
// plain loop that says what it computes. Elementwise results must have the
// same bits (each element is the same operations in the same order); sums are
// in double, so they are held to the double sum rounded to float, within one
// float step.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include <tapegrad/tapegrad.hpp>

#include "../core/kernels/elementwise.hpp"
#include "../core/kernels/fast_math.hpp"
#include "../core/kernels/loop.hpp"
#include "../core/kernels/radix_sort.hpp"
#include "../core/kernels/reduce.hpp"
#include "helpers.hpp"

using tg::Array;
using tg::Shape;
using tg::Tensor;
using tg::test::same_bits;

namespace {

// Values that are not round: 0.1 steps would hide a wrong order of adds.
Array values(const Shape& shape, unsigned seed) {
  tg::Generator gen(seed);
  return tg::randn(tg::Dims(shape), gen).value();
}

// The element of x (shape xs) that output position `out` (in shape os) reads
// under broadcasting: x's dims aligned to the right, a dim of 1 read at 0.
std::size_t source(std::size_t out, const Shape& os, const Shape& xs) {
  std::size_t offset = 0, step = 1;
  for (std::size_t k = 0; k < os.size(); ++k) {
    const std::size_t d = os.size() - 1 - k;
    const std::size_t coord = out % os[d];
    out /= os[d];
    if (k < xs.size()) {
      const std::size_t xd = xs.size() - 1 - k;
      if (xs[xd] != 1) offset += coord * step;
      step *= xs[xd];
    }
  }
  return offset;
}

std::size_t count(const Shape& s) {
  std::size_t n = 1;
  for (std::size_t d : s) n *= d;
  return n;
}

// Shapes that broadcast in every way the loop plans for: equal, a row, a
// column, a scalar (0-d and [1]), leading dims missing, a middle dim of 1, a
// dim of 1 on both sides, empty ones, and a long run that splits across threads.
const std::vector<std::pair<Shape, Shape>> broadcast_pairs = {
    {{5, 7}, {5, 7}},
    {{5, 7}, {7}},
    {{5, 7}, {5, 1}},
    {{5, 7}, {}},
    {{}, {5, 7}},
    {{5, 7}, {1}},
    {{2, 3, 4}, {3, 1}},
    {{2, 1, 4}, {3, 1}},
    {{4, 1, 3, 1}, {5, 1, 2}},
    {{1, 6}, {6, 1}},
    {{0, 3}, {3}},
    {{2, 0, 3}, {1, 3}},
    {{}, {}},
    {{1, 1}, {1}},
    {{300, 257}, {257}},
    {{70000}, {70000}},
    {{3, 40000}, {3, 1}},
};

}  // namespace

TEST_SUITE("core") {
  TEST_CASE("kernels::map: two inputs broadcast as a plain loop does, bit for bit") {
    for (const auto& [xs, ys] : broadcast_pairs) {
      CAPTURE(tg::shape_str(xs));
      CAPTURE(tg::shape_str(ys));
      const Array x = values(xs, 1), y = values(ys, 2);
      auto f = [](float a, float b) { return a * b - a / (b + 3.0f); };
      const Array z = tg::kernels::map("test", x, y, f);
      const Shape zs = tg::broadcast_shapes("test", xs, ys);
      REQUIRE(tg::shape_of(z) == zs);
      bool same = true;
      for (std::size_t i = 0; i < count(zs); ++i) {
        const float want = f(x.data()[source(i, zs, xs)], y.data()[source(i, zs, ys)]);
        same = same && std::bit_cast<uint32_t>(z.data()[i]) == std::bit_cast<uint32_t>(want);
      }
      CHECK(same);
    }
  }

  TEST_CASE("kernels::map: three inputs, one input, and expand, against plain loops") {
    const std::vector<std::array<Shape, 3>> triples = {
        {Shape{4, 5}, Shape{4, 5}, Shape{4, 5}}, {Shape{4, 5}, Shape{5}, Shape{4, 1}},
        {Shape{}, Shape{2, 3}, Shape{1}},        {Shape{2, 1, 3}, Shape{4, 1}, Shape{3}},
        {Shape{0, 2}, Shape{2}, Shape{}},
    };
    for (const auto& [as, bs, cs] : triples) {
      CAPTURE(tg::shape_str(as));
      const Array a = values(as, 3), b = values(bs, 4), c = values(cs, 5);
      auto f = [](float p, float q, float r) { return p > 0.0f ? q : r; };
      const Array w = tg::kernels::map("test", a, b, c, f);
      const Shape ws = tg::broadcast_shapes("test", tg::broadcast_shapes("test", as, bs), cs);
      REQUIRE(tg::shape_of(w) == ws);
      for (std::size_t i = 0; i < count(ws); ++i)
        CHECK(w.data()[i] ==
              f(a.data()[source(i, ws, as)], b.data()[source(i, ws, bs)], c.data()[source(i, ws, cs)]));
      const Array e = tg::kernels::expand("test", c, ws);
      REQUIRE(tg::shape_of(e) == ws);
      for (std::size_t i = 0; i < count(ws); ++i) CHECK(e.data()[i] == c.data()[source(i, ws, cs)]);
    }
    const Array x = values({3, 4}, 6);
    const Array y = tg::kernels::map("test", x, [](float v) { return v * v + 1.0f; });
    for (std::size_t i = 0; i < x.size(); ++i) CHECK(y.data()[i] == x.data()[i] * x.data()[i] + 1.0f);
  }

  TEST_CASE("kernels: sums within one float step of the exact sum, for every length and grouping of dims") {
    // The exact sum, in long double from a plain loop, rounded to float: a
    // double sum rounded to float can differ from it by at most one step.
    auto near = [](float got, long double exact) {
      const float want = static_cast<float>(exact);
      return got == want || std::nextafter(got, want) == want;
    };
    for (std::size_t n : {0, 1, 15, 16, 17, 255, 1000, 65536, 65537, 200003}) {
      CAPTURE(n);
      const Array x = values({n}, 7);
      long double exact = 0;
      for (float v : x) exact += v;
      CHECK(near(static_cast<float>(tg::kernels::sum(x.data(), n)), exact));
    }
    // sum_over and sum_to_shape against a plain loop over the same groupings.
    const Shape s = {3, 4, 5, 6};
    const Array x = values(s, 8);
    const std::vector<std::vector<std::size_t>> axis_sets = {{0},          {3},    {1, 2}, {0, 2},
                                                             {0, 1, 2, 3}, {1, 3}, {}};
    for (const auto& axes : axis_sets) {
      CAPTURE(axes.size());
      for (bool keepdim : {false, true}) {
        const Array r = tg::kernels::sum_over("test", x, axes, keepdim);
        Shape kept;
        std::vector<long double> exact(1, 0);
        Shape out_full = s;  // s with the summed dims as 1
        for (std::size_t a : axes) out_full[a] = 1;
        exact.assign(count(out_full), 0);
        for (std::size_t i = 0; i < x.size(); ++i) exact[source(i, s, out_full)] += x.data()[i];
        REQUIRE(r.size() == exact.size());
        for (std::size_t i = 0; i < exact.size(); ++i) CHECK(near(r.data()[i], exact[i]));
        Shape want = keepdim ? out_full : Shape{};
        if (!keepdim)
          for (std::size_t d = 0; d < s.size(); ++d)
            if (std::find(axes.begin(), axes.end(), d) == axes.end()) want.push_back(s[d]);
        CHECK(tg::shape_of(r) == want);
      }
    }
    // Un-broadcast: every shape an input of this gradient could have had.
    for (const Shape& to :
         {Shape{6}, Shape{5, 1}, Shape{1, 4, 1, 6}, Shape{3, 1, 5, 1}, Shape{}, Shape{4, 5, 6}}) {
      CAPTURE(tg::shape_str(to));
      const Array r = tg::kernels::sum_to_shape(x, to);
      REQUIRE(tg::shape_of(r) == to);
      Shape padded(s.size() - to.size(), 1);
      padded.insert(padded.end(), to.begin(), to.end());
      std::vector<long double> exact(count(to), 0);
      for (std::size_t i = 0; i < x.size(); ++i) exact[source(i, s, padded)] += x.data()[i];
      for (std::size_t i = 0; i < exact.size(); ++i) CHECK(near(r.data()[i], exact[i]));
    }
    CHECK(same_bits(tg::kernels::sum_to_shape(x, s), x));  // nothing to sum: the values as they are
  }

  TEST_CASE("core/kernels/fast_math.hpp: log and tanh within 2 ulp of the C library, over the whole float range") {
    auto ulps = [](float a, float b) {
      if (a == b) return int64_t{0};  // also -0 == 0
      return std::abs(int64_t{std::bit_cast<int32_t>(a)} - int64_t{std::bit_cast<int32_t>(b)});
    };
    int64_t worst_log = 0, worst_tanh = 0;
    // Every 613th bit pattern of the positive floats, subnormals included (and their negatives for tanh).
    for (uint32_t bits = 1; bits < 0x7f800000u; bits += 613) {
      const float v = std::bit_cast<float>(bits);
      worst_log = std::max(worst_log, ulps(tg::detail::log_fast(v), std::log(v)));
      worst_tanh = std::max(worst_tanh, ulps(tg::detail::tanh_fast(v), std::tanh(v)));
      worst_tanh = std::max(worst_tanh, ulps(tg::detail::tanh_fast(-v), std::tanh(-v)));
    }
    CHECK(worst_log <= 2);
    CHECK(worst_tanh <= 2);
    const float inf = std::numeric_limits<float>::infinity();
    CHECK(tg::detail::log_fast(0.0f) == -inf);
    CHECK(tg::detail::log_fast(-0.0f) == -inf);
    CHECK(tg::detail::log_fast(inf) == inf);
    CHECK(std::isnan(tg::detail::log_fast(-1.0f)));
    CHECK(std::isnan(tg::detail::log_fast(-inf)));
    CHECK(std::isnan(tg::detail::log_fast(std::nanf(""))));
    CHECK(tg::detail::log_fast(1.0f) == 0.0f);
    CHECK(tg::detail::tanh_fast(1e-30f) == 1e-30f);  // not 1 - 2/(e^0 + 1) = 0
    CHECK(tg::detail::tanh_fast(0.0f) == 0.0f);
  }

  TEST_CASE("layer_norm's weight and bias gradients: each column of g * xhat and of g added in double, row by row") {
    // A plain loop over the rows, with xhat as layer_norm without weight and
    // bias computes it: the same bits (kernels::layer_norm_param_grads sums
    // 256 columns at a time, in the same order per column).
    for (const Shape& shape : {Shape{37, 300}, Shape{4, 9, 513}, Shape{1, 5}, Shape{0, 7}, Shape{3}}) {
      CAPTURE(tg::shape_str(shape));
      const std::size_t n = shape.back(), rows = count(shape) / n;
      const Array xv = values(shape, 11), gv = values(shape, 12);
      const Array xhat = tg::layer_norm(Tensor(xv), {n}, std::nullopt, std::nullopt, 1e-5f).value();
      Tensor x(xv, true), w(values({n}, 13), true), b(values({n}, 14), true);
      tg::layer_norm(x, {n}, w, b, 1e-5f).backward(gv);
      std::vector<double> dw(n, 0.0), db(n, 0.0);
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t i = 0; i < n; ++i) {
          dw[i] += static_cast<double>(gv.data()[r * n + i] * xhat.data()[r * n + i]);
          db[i] += static_cast<double>(gv.data()[r * n + i]);
        }
      Array want_w = xt::zeros<float>({n}), want_b = xt::zeros<float>({n});
      for (std::size_t i = 0; i < n; ++i) {
        want_w(i) = static_cast<float>(dw[i]);
        want_b(i) = static_cast<float>(db[i]);
      }
      CHECK(same_bits(w.grad().dense(), want_w));
      CHECK(same_bits(b.grad().dense(), want_b));
    }
  }

  TEST_CASE("kernels::lane_max passes over NaN; lane_sum and lane_dot add every element once") {
    std::vector<float> x(37);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 11) - 5.0f;
    x[20] = 9.5f;
    CHECK(tg::kernels::lane_max(x.data(), x.size()) == 9.5f);
    x[3] = std::nanf("");
    CHECK(tg::kernels::lane_max(x.data(), x.size()) == 9.5f);
    CHECK(tg::kernels::lane_max(x.data(), 0) == -std::numeric_limits<float>::infinity());
    std::vector<float> ones(37, 1.0f), twos(37, 2.0f);
    CHECK(tg::kernels::lane_sum(ones.data(), 37) == 37.0);
    CHECK(tg::kernels::lane_dot(ones.data(), twos.data(), 37) == 74.0);
  }

  TEST_CASE("kernels::Odometer visits every coordinate row-major, carrying each offset by its steps") {
    // A [2, 3, 4] walk carrying the offset into a contiguous array and into one
    // broadcast along dim 1 (step 0), against three nested loops.
    const tg::Shape shape{2, 3, 4};
    tg::kernels::Odometer<2> o{shape, {tg::kernels::row_major_strides(shape), {4, 0, 1}}};
    std::vector<std::array<std::size_t, 2>> seen;
    do seen.push_back(o.at);
    while (o.next());
    std::vector<std::array<std::size_t, 2>> expected;
    for (std::size_t i = 0; i < 2; ++i)
      for (std::size_t j = 0; j < 3; ++j)
        for (std::size_t k = 0; k < 4; ++k) expected.push_back({i * 12 + j * 4 + k, i * 4 + k});
    CHECK(seen == expected);
    CHECK(o.at == std::array<std::size_t, 2>{0, 0});  // back at the start after the last
    tg::kernels::Odometer<1> none{{}, {{}}};              // 0-d: one coordinate
    CHECK_FALSE(none.next());
    CHECK(tg::kernels::row_major_strides({5, 1, 3}) == std::vector<std::size_t>{3, 3, 1});
  }

  TEST_CASE("permute and transpose: tiled copies equal a plain loop, tiles' edges included") {
    struct Case {
      Shape shape;
      std::vector<int64_t> dims;
    };
    for (const Case& c : {Case{{67, 130}, {1, 0}}, Case{{3, 65, 70}, {0, 2, 1}}, Case{{5, 6, 7}, {2, 0, 1}},
                          Case{{4, 130, 2}, {2, 1, 0}}, Case{{2, 3, 1}, {2, 0, 1}}, Case{{9, 1}, {1, 0}}}) {
      CAPTURE(tg::shape_str(c.shape));
      const Tensor x(values(c.shape, 9));
      const Tensor y = tg::permute(x, c.dims);
      const Shape ys = y.shape();
      std::vector<std::size_t> in_stride(c.shape.size(), 1);
      for (std::size_t d = c.shape.size() - 1; d-- > 0;) in_stride[d] = in_stride[d + 1] * c.shape[d + 1];
      bool same = true;
      for (std::size_t i = 0; i < y.numel(); ++i) {
        std::size_t rest = i, from = 0;
        for (std::size_t d = ys.size(); d-- > 0;) {
          from += rest % ys[d] * in_stride[static_cast<std::size_t>(c.dims[d])];
          rest /= ys[d];
        }
        same = same && y.value().data()[i] == x.value().data()[from];
      }
      CHECK(same);
    }
  }

  TEST_CASE("batched matmul with empty matrices: zeros forward, empty gradients, no reads out of range") {
    struct Case {
      Shape a, b, out;
    };
    for (const Case& c : {Case{{3, 3, 0, 0}, {3, 3, 0, 0}, {3, 3, 0, 0}}, Case{{3, 1, 2, 0}, {3, 3, 0, 4}, {3, 3, 2, 4}},
                          Case{{2, 3, 0}, {2, 0, 4}, {2, 3, 4}}, Case{{0, 2, 3}, {3, 4}, {0, 2, 4}}}) {
      CAPTURE(tg::shape_str(c.a));
      CAPTURE(tg::shape_str(c.b));
      Tensor a(values(c.a, 10), true), b(values(c.b, 11), true);
      Tensor y = tg::matmul(a, b);
      REQUIRE(y.shape() == c.out);
      for (float v : y.to_vector()) CHECK(v == 0.0f);  // a sum of no products
      tg::sum(y).backward();
      CHECK(a.grad_dense().shape() == a.value().shape());
      CHECK(b.grad_dense().shape() == b.value().shape());
      for (float v : a.grad_dense()) CHECK(v == 0.0f);
    }
  }
  TEST_CASE("kernels::radix_sort orders by key as std::stable_sort does, equal keys in their order") {
    // Items are (key, position): stability shows in the positions of equal keys.
    using Item = std::pair<uint64_t, std::size_t>;
    std::mt19937_64 rng(7);
    for (uint64_t max_key : {uint64_t{0}, uint64_t{1}, uint64_t{255}, uint64_t{256}, uint64_t{2047},
                             uint64_t{70000}, uint64_t{1} << 40, ~uint64_t{0}}) {
      for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{300}, std::size_t{5000}}) {
        CAPTURE(max_key);
        CAPTURE(n);
        std::vector<Item> items(n);
        for (std::size_t i = 0; i < n; ++i) {
          // Half the keys from a few values, so that many are equal.
          const uint64_t k = (i % 2 == 0) ? rng() % 5 : rng();
          items[i] = {max_key == ~uint64_t{0} ? k : k % (max_key + 1), i};
        }
        std::vector<Item> expected = items;
        std::stable_sort(expected.begin(), expected.end(),
                         [](const Item& a, const Item& b) { return a.first < b.first; });
        std::vector<Item> by8 = items, by11 = items, scratch;
        tg::kernels::radix_sort<8>(by8, scratch, max_key, [](const Item& it) { return it.first; });
        tg::kernels::radix_sort<11>(by11, scratch, max_key, [](const Item& it) { return it.first; });
        CHECK(by8 == expected);
        CHECK(by11 == expected);
      }
    }
  }
}
