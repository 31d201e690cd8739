// What a user program touches around the engine: reading values, sizes that do
// not fit in memory, sums over millions of values, the default generator, and
// requires_grad switched on after a forward pass.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <thread>

#include <tapegrad/tapegrad.hpp>

#include "helpers.hpp"

using tg::Array;
using tg::Tensor;

TEST_SUITE("core") {
  TEST_CASE("values read back without xtensor: to_vector, item({i, j}), size(dim)") {
    Tensor t = tg::tensor({1, 2, 3, 4, 5, 6}, {2, 3});
    CHECK(t.to_vector() == std::vector<float>{1, 2, 3, 4, 5, 6});
    CHECK(t.item({0, 0}) == 1);
    CHECK(t.item({1, 2}) == 6);
    CHECK(t.item({-1, -3}) == 4);  // negative indices count from the end, as PyTorch's t[-1, -3]
    CHECK(t.size(0) == 2);
    CHECK(t.size(-1) == 3);
    CHECK_THROWS_WITH_AS(t.item({2, 0}), "item: index 2 is out of range for a dim of size 2", std::out_of_range);
    CHECK_THROWS_WITH_AS(t.item({0}), "item: 1 indices for a tensor of shape [2, 3]", std::out_of_range);
    CHECK_THROWS_AS(t.size(2), std::out_of_range);
    CHECK(Tensor(Array(7.0f)).item({}) == 7);  // a 0-d tensor takes no index
  }

  TEST_CASE("shapes take int64_t and size_t dims alike; a negative dim throws") {
    const int64_t n = 2;
    const std::size_t m = 3;
    CHECK(tg::zeros({n, m}).shape() == tg::Shape{2, 3});
    CHECK(tg::indices(std::vector<int64_t>(6, 1), {n, m}).shape() == std::vector<std::size_t>{2, 3});
    CHECK(tg::full({m}, 0.5f).to_vector() == std::vector<float>{0.5f, 0.5f, 0.5f});
    CHECK_THROWS_WITH_AS(tg::zeros({n, -1}), "shape: negative dimension -1", std::invalid_argument);
  }

  TEST_CASE("a size whose element count overflows throws instead of wrapping around") {
    CHECK_THROWS_WITH_AS(tg::zeros({std::size_t(1) << 62, 4}),
                         "full: shape [4611686018427387904, 4] has more elements than memory can address",
                         std::length_error);
    CHECK_THROWS_AS(tg::randn({std::size_t(1) << 40, std::size_t(1) << 40}, tg::default_generator()),
                    std::length_error);
    CHECK_THROWS_WITH_AS(tg::nn::Embedding(std::size_t(1) << 61, 16),
                         doctest::Contains("Embedding: shape [2305843009213693952, 16]"), std::length_error);
    CHECK_THROWS_WITH_AS(tg::nn::Linear(std::size_t(1) << 40, std::size_t(1) << 40),
                         doctest::Contains("Linear: shape"), std::length_error);
  }

  // AddressSanitizer's allocator stops the program on a request this large
  // (allocation-size-too-big) where the plain one throws std::bad_alloc.
  TEST_CASE("an allocation that fails says which op and how many bytes" *
            doctest::skip(tg::test::address_sanitizer)) {
    // 2^46 floats (256 TiB): a count that fits, an allocation that cannot.
    try {
      tg::nn::Embedding(std::size_t(1) << 40, 64);
      FAIL("expected an allocation failure");
    } catch (const std::bad_alloc& e) {
      CHECK(std::string(e.what()) == "Embedding: cannot allocate 281474976710656 bytes for shape [1099511627776, 64]");
    }
  }

  TEST_CASE("sums over ten million values stay accurate: mean, mse_loss, a broadcast (bias) gradient") {
    const std::size_t n = 10'000'000;
    // In float32 a running sum of 1e7 values of 0.1 drifts to 0.1088 * 1e7.
    CHECK(tg::mean(tg::full({n}, 0.1f)).item() == doctest::Approx(0.1).epsilon(1e-6));
    CHECK(tg::sum(tg::full({n}, 0.1f)).item() == doctest::Approx(1e6).epsilon(1e-6));
    Tensor zero = tg::zeros({n});
    CHECK(tg::mse_loss(tg::full({n}, 0.3f), zero).item() == doctest::Approx(0.09).epsilon(1e-6));
    CHECK(tg::sum(tg::full({n, 2}, 0.1f), 0).to_vector()[1] == doctest::Approx(1e6).epsilon(1e-6));
    // d mean(x W^T + b) / db = 1 per output: the engine sums the [n, 1] gradient over n rows.
    tg::nn::Linear fc(1, 1);
    Tensor loss = tg::mean(fc(tg::full({n, 1}, 1.0f)));
    loss.backward();
    CHECK(fc.bias->grad().dense()(0) == doctest::Approx(1.0).epsilon(1e-6));
    // The weight's gradient is a matrix product (BLAS sgemm, float32 running sums),
    // as in PyTorch, which gives 1.00015 here too (OpenBLAS, one thread).
    CHECK(fc.weight.grad().dense()(0, 0) == doctest::Approx(1.0).epsilon(1e-3));
  }

  TEST_CASE("one default generator for the whole program, as PyTorch's") {
    tg::manual_seed(3);
    const std::vector<float> main_draw = tg::randn({4}, tg::default_generator()).to_vector();
    tg::manual_seed(3);
    std::vector<float> on_thread;
    std::thread([&] { on_thread = tg::randn({4}, tg::default_generator()).to_vector(); }).join();
    CHECK(on_thread == main_draw);  // the same generator, continued from the seed set on the main thread

    // Two threads building modules from it get different weights, none lost or repeated.
    tg::manual_seed(5);
    std::vector<float> a, b;
    std::thread ta([&] { a = tg::nn::Linear(64, 64).weight.to_vector(); });
    std::thread tb([&] { b = tg::nn::Linear(64, 64).weight.to_vector(); });
    ta.join();
    tb.join();
    CHECK(a != b);
    tg::manual_seed(5);
    const std::vector<float> first = tg::nn::Linear(64, 64).weight.to_vector();
    const std::vector<float> second = tg::nn::Linear(64, 64).weight.to_vector();
    CHECK(((a == first && b == second) || (a == second && b == first)));
  }

  TEST_CASE("a Generator is a handle: copies share the state, clone() copies it") {
    tg::Generator g(7);
    tg::Generator shared = g;
    tg::Generator copy = g.clone();
    const auto x = g();
    CHECK(shared() != x);  // shared continued after g's draw
    CHECK(copy() == x);    // the clone replays it
    CHECK(shared.is_same(g));
    CHECK_FALSE(copy.is_same(g));
    const std::string state = g.state();
    tg::Generator other;
    other.set_state(state);
    CHECK(other() == g());
    CHECK_THROWS_AS(other.set_state("not a state"), std::invalid_argument);
  }

  TEST_CASE("a Dropout built with a generator that goes out of scope keeps drawing from its state") {
    auto make = [] {
      tg::Generator local(1);
      return tg::nn::Sequential(tg::nn::Linear(4, 4, true, local), tg::nn::Dropout(0.5f, local));
    };
    tg::nn::Sequential model = make();  // `local` is gone; the Dropout shares its state
    Tensor y = model(tg::ones({2, 4}));
    CHECK(y.shape() == tg::Shape{2, 4});
  }

  TEST_CASE("requires_grad switched on after a forward pass: no gradient from the graph recorded before") {
    Tensor w({1.0f, 2.0f});  // no grad yet
    Tensor v({3.0f, 4.0f}, true);
    Tensor loss = tg::sum(w * v);  // recorded: v requires grad
    w.set_requires_grad(true);
    loss.backward();
    CHECK(w.grad().empty());  // PyTorch: None, the graph did not record w
    CHECK(v.grad().dense() == Array({1.0f, 2.0f}));
    // ... and switched off before backward: that leaf gets none either.
    Tensor u({1.0f}, true);
    Tensor l2 = tg::sum(u * 3.0f);
    u.set_requires_grad(false);
    l2.backward();
    CHECK(u.grad().empty());
  }
}

TEST_SUITE("core") {
  TEST_CASE("a write into reshape's or transpose's result is refused: a copy here, a view in PyTorch") {
    tg::Tensor w = tg::tensor({1, 2, 3, 4, 5, 6}, {2, 3});
    const std::vector<std::pair<std::string, tg::Tensor>> results = {
        {"reshape", tg::reshape(w, {6})},
        {"transpose", tg::transpose(w)},
        {"permute", tg::permute(w, {1, 0})},
        {"flatten", tg::flatten(w)},
        {"narrow", tg::narrow(w, 1, 0, 2)},
    };
    for (auto [op, r] : results) {
      CAPTURE(op);
      const uint64_t version = r.version();
      const std::string expected = "the result of " + op + ", a copy in tapegrad (a view in PyTorch)";
      CHECK_THROWS_WITH_AS(r.value_mut(), doctest::Contains(expected.c_str()), std::logic_error);
      CHECK_THROWS_WITH_AS(r.copy_(tg::Array(xt::zeros<float>(r.shape()))), doctest::Contains("detach()"),
                           std::logic_error);
      CHECK(r.version() == version);  // nothing was written
      // detach() is an independent copy that takes writes; w stays as it was.
      tg::Tensor own = r.detach();
      own.value_mut().fill(0.0f);
      CHECK(own.to_vector() == std::vector<float>(r.numel(), 0.0f));
    }
    CHECK(w.to_vector() == std::vector<float>{1, 2, 3, 4, 5, 6});
    // The input itself takes writes, and other ops' results too.
    CHECK_NOTHROW(w.value_mut()(0, 0) = 9.0f);
    tg::Tensor doubled = w * 2.0f;
    CHECK_NOTHROW(doubled.value_mut().fill(1.0f));
    // Gradients flow through them as through PyTorch's views.
    tg::Tensor x = tg::tensor({1, 2, 3, 4, 5, 6}, {2, 3}, true);
    tg::sum(tg::reshape(tg::transpose(x), {3, 2}) * tg::tensor({1, 2, 3, 4, 5, 6}, {3, 2})).backward();
    CHECK(x.grad_dense() == tg::Array{{1, 3, 5}, {2, 4, 6}});
  }
}
