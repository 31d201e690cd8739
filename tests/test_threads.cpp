// Threads: the rule in core/tape.hpp, as a user meets it. This binary is also
// built with ThreadSanitizer by .ci/run (build-tsan/), which fails on any race.
#include <doctest/doctest.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include <xtensor/xview.hpp>

#include <tapegrad/tapegrad.hpp>

#include "helpers.hpp"

using tg::Array;
using tg::Tensor;

namespace {

// A one-shot gate: wait() blocks until open().
struct Gate {
  std::mutex m;
  std::condition_variable cv;
  bool is_open = false;
  void open() {
    std::lock_guard<std::mutex> lock(m);
    is_open = true;
    cv.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [&] { return is_open; });
  }
};

// y = x, whose backward says it has started and then waits at a gate: it holds
// a backward() call in the middle of a graph for as long as a test needs.
Tensor paused_identity(const Tensor& x, Gate& started, Gate& resume) {
  return tg::record("paused_identity", x.value(), {x},
                    [&started, &resume](const Array& g, const tg::Node&, tg::Grads& d) {
                      started.open();
                      resume.wait();
                      d[0] = g;
                    });
}

}  // namespace

TEST_SUITE("threads") {
  TEST_CASE("a graph recorded on one thread is backwarded on another") {
    Tensor w({0.5f, -1.0f}, true);
    // Thread B records h = tanh(3w); the main thread uses h and calls backward().
    Tensor h = std::async(std::launch::async, [&] { return tg::tanh(w * 3.0f); }).get();
    tg::sum(h * 2.0f).backward();
    REQUIRE(w.grad().is_dense());
    const Array t = xt::tanh(3.0f * w.value());
    CHECK_ALLCLOSE(w.grad().dense(), Array(6.0f * (1.0f - t * t)), 1e-6);
  }

  TEST_CASE("a graph started on one thread and finished on another backwards on a third") {
    Tensor w({2.0f}, true);
    Tensor a = std::async(std::launch::async, [&] { return w * w; }).get();      // w^2
    Tensor b = std::async(std::launch::async, [&] { return a * w + a; }).get();  // w^3 + w^2
    std::async(std::launch::async, [&] { tg::sum(b).backward(); }).get();        // 3w^2 + 2w
    CHECK(w.grad().dense()(0) == 16.0f);
  }

  TEST_CASE("two threads backward their own graphs into one parameter: the gradients add up") {
    Tensor w = tg::ones({64}, true);
    constexpr int steps = 500;
    auto train = [&](float k) {
      for (int i = 0; i < steps; ++i) {
        Tensor loss = tg::sum(tg::relu(w) * k + w);  // w = 1: d/dw = k + 1 per element
        loss.backward();
      }
    };
    std::thread a(train, 1.0f), b(train, 2.0f);
    a.join();
    b.join();
    // Each step adds small integers: exact in float32, so any lost update shows.
    const float expected = steps * (1.0f + 1.0f) + steps * (1.0f + 2.0f);
    REQUIRE(w.grad().is_dense());
    CHECK(xt::all(xt::equal(w.grad().dense(), expected)));
  }

  TEST_CASE("two threads backward into one embedding's sparse gradient: the rows add up") {
    tg::nn::Embedding emb(10, 4);
    auto train = [&](int64_t first) {
      for (int i = 0; i < 200; ++i) tg::sum(emb(tg::Indices{first, first + 1, 9})).backward();
    };
    std::thread a(train, 0), b(train, 4);
    a.join();
    b.join();
    REQUIRE(emb.weight.grad().is_sparse());
    const tg::SparseRows& g = emb.weight.grad().sparse();
    CHECK(g.rows == std::vector<int64_t>{0, 1, 4, 5, 9});
    CHECK(xt::all(xt::equal(xt::view(g.values, xt::range(0, 4)), 200.0f)));
    CHECK(xt::all(xt::equal(xt::view(g.values, 4), 400.0f)));  // row 9: both threads
  }

  TEST_CASE(
      "a backward() reaching an op that another thread's backward() is walking throws; nothing changes") {
    Tensor w({1.0f, 2.0f}, true);
    Gate started, resume;
    Tensor h = paused_identity(w * 2.0f, started, resume);  // shared by both losses
    Tensor loss_a = tg::sum(h * 3.0f), loss_b = tg::sum(h * 5.0f);
    std::thread a([&] { loss_a.backward(std::nullopt, /*retain_graph=*/true); });
    started.wait();  // thread a is inside paused_identity's backward now
    CHECK_THROWS_WITH_AS(loss_b.backward(),
                         doctest::Contains("is being walked by a backward() on another thread"),
                         std::logic_error);
    CHECK(w.grad().empty());  // the failed call added nothing
    resume.open();
    a.join();
    CHECK(w.grad().dense() == Array({6.0f, 6.0f}));
    loss_b.backward();  // once a is done, the shared part can be walked again
    CHECK(w.grad().dense() == Array({16.0f, 16.0f}));
  }

  TEST_CASE("grad mode and the tape listing are per thread") {
    Tensor w({1.0f}, true);
    tg::NoGradGuard no_grad;  // this thread only
    const std::size_t before = tg::Tape::current().live_count();
    auto [recorded, listed] = std::async(std::launch::async, [&] {
                                Tensor y = w * 2.0f;
                                return std::make_pair(y.requires_grad(), tg::Tape::current().live_count());
                              }).get();
    CHECK(recorded);
    CHECK(listed == 1);
    CHECK_FALSE((w * 2.0f).requires_grad());
    CHECK(tg::Tape::current().live_count() == before);
  }

  TEST_CASE("a graph whose last tensor dies on another thread is freed there") {
    Tensor w({1.0f}, true);
    std::weak_ptr<tg::Node> first;
    Tensor total = tg::zeros({1});
    for (int i = 0; i < 1000; ++i) {
      total = total + w;
      if (i == 0) first = total.creator();
    }
    std::thread([t = std::move(total)]() mutable { t = Tensor(); }).join();
    CHECK(first.expired());
  }
}
