// The tape: what gets recorded, how backward() walks and releases it, and that
// memory stays bounded.
#include <doctest/doctest.h>

#include <tapegrad/tapegrad.hpp>

#include "helpers.hpp"

using tg::Array;
using tg::Tensor;

namespace {
std::size_t live() {
  return tg::Tape::current().live_count();
}
}  // namespace

TEST_SUITE("core.tape") {
  TEST_CASE("a value used twice (diamond) gets both contributions") {
    Tensor x({2.0f}, true);
    Tensor a = x * 3.0f, b = x * x;  // y = 3x + x^2, dy/dx = 3 + 2x = 7
    Tensor y = a + b;
    y.backward();
    CHECK(x.grad().dense()(0) == doctest::Approx(7.0));
  }

  TEST_CASE("a non-leaf reused by several ops") {
    Tensor x({1.0f, -2.0f}, true);
    Tensor h = tg::tanh(x);  // reused three times
    Tensor y = tg::sum(h * h + h * 2.0f + tg::exp(h));
    y.backward();
    Array t = xt::tanh(x.value());
    Array expected = (2.0f * t + 2.0f + xt::exp(t)) * (1.0f - t * t);
    CHECK_ALLCLOSE(x.grad().dense(), expected, 1e-5);
  }

  TEST_CASE("gradients accumulate over backward calls until zero_grad") {
    Tensor w({1.0f, 2.0f}, true);
    tg::sum(w * 3.0f).backward();
    tg::sum(w * 3.0f).backward();
    CHECK(w.grad().dense() == Array({6.0f, 6.0f}));
    w.zero_grad();
    CHECK(w.grad().empty());
    tg::sum(w * w).backward();
    CHECK(w.grad().dense() == Array({2.0f, 4.0f}));
  }

  TEST_CASE("only ops with an input that requires grad are recorded") {
    const std::size_t before = live();
    Tensor a({1.0f}), b({2.0f});
    Tensor c = a + b;
    CHECK(c.is_leaf());
    CHECK_FALSE(c.requires_grad());
    CHECK(live() == before);
    Tensor w({1.0f}, true);
    Tensor d = a * w;
    CHECK_FALSE(d.is_leaf());
    CHECK(d.requires_grad());
    CHECK(d.creator()->op == "mul");
    CHECK(live() == before + 1);
  }

  TEST_CASE("NoGradGuard: nothing is recorded") {
    Tensor w({1.0f, 2.0f}, true);
    const std::size_t before = live();
    {
      tg::NoGradGuard no_grad;
      Tensor y = tg::sum(tg::tanh(w) * 2.0f);
      CHECK_FALSE(y.requires_grad());
      CHECK(y.is_leaf());
      CHECK(live() == before);
      CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("does not require grad"), std::logic_error);
    }
    CHECK(w.grad().empty());
  }

  TEST_CASE("retain_grad keeps a non-leaf's gradient; others keep none") {
    Tensor x({1.0f, 2.0f}, true);
    Tensor h = x * 2.0f, k = h * 1.0f;
    h.retain_grad();
    tg::sum(k * k).backward();
    CHECK(h.grad().dense() == Array({4.0f, 8.0f}));  // d/dh sum(h^2) = 2h
    CHECK(k.grad().empty());
    CHECK(x.grad().dense() == Array({8.0f, 16.0f}));
  }

  TEST_CASE("backward releases the graph; a second backward is a clear error") {
    Tensor x({3.0f}, true);
    Tensor y = x * x;
    y.backward();
    CHECK(y.creator()->released);
    CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("mul' (tape entry"), std::logic_error);
    CHECK(x.grad().dense()(0) == 6.0f);  // unchanged by the failed call
  }

  TEST_CASE("a second backward reaching a released part fails before touching anything") {
    Tensor x({3.0f}, true), w({2.0f}, true);
    Tensor h = x * x;  // shared part
    Tensor y1 = h * 1.0f;
    y1.backward();      // releases h's entry too
    Tensor y2 = h * w;  // new op on top of a released graph
    CHECK_THROWS_WITH_AS(y2.backward(), doctest::Contains("already released"), std::logic_error);
    CHECK(w.grad().empty());  // the new entry did not run either
    CHECK(x.grad().dense()(0) == 6.0f);
  }

  TEST_CASE("retain_graph = true allows a second backward, and gradients add up") {
    Tensor x({3.0f}, true);
    Tensor y = x * x;
    y.backward(std::nullopt, true);
    CHECK_FALSE(y.creator()->released);
    y.backward();
    CHECK(x.grad().dense()(0) == 12.0f);
  }

  TEST_CASE("backward argument errors") {
    Tensor w({1.0f, 2.0f}, true);
    Tensor y = w * 2.0f;
    CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("shape [2]: pass backward(gradient)"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(y.backward(Array{1.0f}),
                         doctest::Contains("gradient of shape [1] for a tensor of shape [2]"),
                         std::invalid_argument);
    CHECK_THROWS_AS(Tensor({1.0f}).backward(), std::logic_error);
    y.backward(Array{1.0f, 10.0f});  // an explicit seed works on a non-scalar
    CHECK(w.grad().dense() == Array({2.0f, 20.0f}));
    CHECK_THROWS_AS(y.set_requires_grad(false), std::logic_error);
  }

  TEST_CASE("backward from a leaf seeds its own gradient") {
    Tensor w({5.0f}, true);
    w.backward();
    CHECK(w.grad().dense()(0) == 1.0f);
  }

  TEST_CASE("liveness: nothing stays recorded after backward") {
    const std::size_t before = live();
    Tensor w = tg::ones({4, 3}, true), b = tg::zeros({3}, true);
    for (int step = 0; step < 5; ++step) {
      Tensor x = tg::full({2, 4}, 0.5f);
      Tensor loss = tg::cross_entropy(tg::tanh(tg::matmul(x, w) + b), tg::Indices{0, 2});
      CHECK(live() > before);
      loss.backward();
      CHECK(live() == before);
    }
  }

  TEST_CASE("liveness: forward passes without backward free their entries") {
    Tensor w = tg::ones({4, 3}, true);
    std::weak_ptr<tg::Node> first;
    const std::size_t before = live();
    for (int i = 0; i < 10000; ++i) {  // e.g. evaluation without NoGradGuard
      Tensor out = tg::sum(tg::tanh(tg::matmul(tg::full({2, 4}, 0.1f), w)));
      if (i == 0) first = out.creator();
    }
    CHECK(first.expired());  // the graph died with its output
    CHECK(live() == before);
    // The tape's own slot list is pruned as it grows: bounded, not 30000 entries.
    CHECK(tg::Tape::current().slots() < 200);
  }

  TEST_CASE("liveness: a kept output keeps exactly its graph alive") {
    Tensor w = tg::ones({2}, true);
    const std::size_t before = live();
    std::vector<Tensor> kept;
    for (int i = 0; i < 3; ++i) kept.push_back(tg::sum(w * 2.0f));  // 2 entries each
    CHECK(live() == before + 6);
    kept.clear();
    CHECK(live() == before);
  }

  TEST_CASE("the tape lists entries in recording order") {
    Tensor w({1.0f}, true);
    Tensor y = tg::exp(w * 2.0f);
    auto entries = tg::Tape::current().live_entries();
    REQUIRE(entries.size() >= 2);
    auto last = entries.back(), prev = entries[entries.size() - 2];
    CHECK(last->op == "exp");
    CHECK(prev->op == "mul_scalar");
    CHECK(prev->index < last->index);
    CHECK(last->inputs.size() == 1);
    CHECK(last->inputs[0].tensor.creator() == prev);
  }

  // ------------------------------------------------------- deep graphs

  // One chain of 10^6 ops serves both checks, as the suite also runs under
  // AddressSanitizer, where building it is the slow part.
  TEST_CASE("the accumulated-loss loop: 10^6 ops are backwarded, then dropped, in constant stack") {
    const std::size_t before = live();
    Tensor w({1.5f}, true);
    std::weak_ptr<tg::Node> first, last;
    const std::size_t start = tg::Tape::next_index();
    {
      Tensor total = tg::zeros({1});
      for (int i = 0; i < 500000; ++i) {  // two ops a step: mul_scalar, add
        total = total + w * 2.0f;
        if (i == 0) first = total.creator();
      }
      CHECK(tg::Tape::next_index() - start == 1000000);
      CHECK(total.item() == 1.5e6f);  // sums of multiples of 3 stay exact in float32
      // Walks all 10^6 nodes, and keeps them (retain_graph) for the drop below.
      total.backward(std::nullopt, /*retain_graph=*/true);
      CHECK(w.grad().dense()(0) == 1e6f);  // 500,000 twos, exact in float32
      last = total.creator();
    }  // the chain is freed here, in a loop: nested destructors would overflow the stack
    CHECK(first.expired());
    CHECK(last.expired());
    CHECK(live() == before);
  }

  TEST_CASE("a deep graph dropped without backward(), and one released by backward()") {
    Tensor w({1.0f}, true);
    std::weak_ptr<tg::Node> first;
    {
      Tensor total = tg::zeros({1});
      for (int i = 0; i < 100000; ++i) total = total + w;
      first = total.creator();
    }
    CHECK(first.expired());
    Tensor total = tg::zeros({1});
    for (int i = 0; i < 100000; ++i) total = total + w;
    total.backward();  // releases every node, then frees them flat
    CHECK(w.grad().dense()(0) == 1e5f);
  }

  TEST_CASE("a deep chain of tensors used twice (x * x) is freed too") {
    Tensor w({1.0f}, true);
    std::weak_ptr<tg::Node> first;
    {
      Tensor x = w * 1.0f;
      first = x.creator();
      for (int i = 0; i < 100000; ++i) x = x * x;  // each node holds its input twice
    }
    CHECK(first.expired());
  }

  // -------------------------------------------- in-place writes (versions)

  TEST_CASE("each in-place write bumps the version") {
    Tensor w({1.0f, 2.0f}, true);
    CHECK(w.version() == 0);
    w.value_mut()(0) = 3.0f;
    CHECK(w.version() == 1);
    {
      tg::NoGradGuard no_grad;
      w.copy_(Array{4.0f, 5.0f});
    }
    CHECK(w.version() == 2);
    Tensor y = w * 2.0f;
    CHECK(y.version() == 0);  // a new tensor starts at 0
    (void)w.value();          // reading does not count
    CHECK(w.version() == 2);
  }

  TEST_CASE("a write between forward and backward to a value backward reads throws, naming the op") {
    for (const bool through_copy : {false, true}) {
      CAPTURE(through_copy);
      Tensor w({10.0f}, true);
      w.set_name("w");
      Tensor y = w * w;  // dy/dw = 2w = 20: mul keeps w's values for backward
      if (through_copy) {
        tg::NoGradGuard no_grad;
        w.copy_(Array{100.0f});
      } else {
        w.value_mut()(0) = 100.0f;
      }
      const std::string entry = std::to_string(y.creator()->index);
      const std::string expected = "input 1 of op 'mul' (tape entry " + entry +
                                   "), 'w' of shape [1], was modified in place after it was used by op 'mul' "
                                   "(tape entry " +
                                   entry + "): version 1, expected 0";
      CHECK_THROWS_WITH_AS(tg::sum(y).backward(), doctest::Contains(expected.c_str()), std::logic_error);
      CHECK(w.grad().empty());  // nothing was added: leaves get their gradients after every closure ran
      CHECK_FALSE(y.creator()->released);
    }
  }

  TEST_CASE("the check covers ops deep in the graph, and leaves intermediate gradients clean") {
    Tensor w({1.0f, 2.0f}, true), v({3.0f, 4.0f}, true);
    Tensor h = tg::tanh(w * v);  // mul reads w and v
    h.retain_grad();
    Tensor loss = tg::sum(h * 2.0f + v);
    v.value_mut()(1) = 0.0f;
    CHECK_THROWS_WITH_AS(loss.backward(), doctest::Contains("op 'mul'"), std::logic_error);
    CHECK(w.grad().empty());
    CHECK(v.grad().empty());
    CHECK(h.grad().empty());
  }

  TEST_CASE("an op whose backward does not read the written value still backwards, as in PyTorch") {
    Tensor w({1.0f, 2.0f}, true);
    Tensor y = tg::sum(w + 1.0f);  // add_scalar and sum read no values
    w.value_mut()(0) = 7.0f;
    y.backward();
    CHECK(w.grad().dense() == Array({1.0f, 1.0f}));
  }

  TEST_CASE("a write to an output that backward reads (exp, tanh, softmax) throws") {
    Tensor w({0.5f, -0.5f}, true);
    Tensor y = tg::exp(w);  // d exp(w) = exp(w): the closure reads y
    y.value_mut()(0) = 0.0f;
    const std::string expected = "the output of op 'exp' (tape entry " + std::to_string(y.creator()->index) +
                                 ") was modified in place after the op ran: version 1, expected 0";
    CHECK_THROWS_WITH_AS(tg::sum(y).backward(), doctest::Contains(expected.c_str()), std::logic_error);
    CHECK(w.grad().empty());
  }

  TEST_CASE("a shape change through value_mut() between forward and backward throws") {
    Tensor w({1.0f, 2.0f}, true);
    Tensor y = tg::sum(w);  // sum reads no values, only the shape
    w.value_mut() = Array{1.0f, 2.0f, 3.0f};
    CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("had shape [2] when the op ran"), std::logic_error);
    CHECK(w.grad().empty());
    Tensor v({1.0f, 2.0f}, true);
    Tensor out = v * 2.0f;  // the root's own shape changes
    out.value_mut() = Array{1.0f, 2.0f, 3.0f};
    CHECK_THROWS_WITH_AS(out.backward(Array{1.0f, 1.0f, 1.0f}),
                         doctest::Contains("the output of op 'mul_scalar'"), std::logic_error);
    CHECK(v.grad().empty());
  }

  TEST_CASE("a shape change of an op's output between forward and backward throws") {
    using doctest::Contains;
    Tensor w({1.0f, 2.0f}, true);
    Tensor y = w + 1.0f;  // add_scalar reads no values, only the gradient of y
    y.value_mut() = Array{1.0f, 2.0f, 3.0f};
    const std::string expected = "the output of op 'add_scalar' (tape entry " +
                                 std::to_string(y.creator()->index) +
                                 ") had shape [2] when the op ran; an in-place write changed it to [3]";
    CHECK_THROWS_WITH_AS(y.backward(Array{1.0f, 1.0f, 1.0f}), Contains(expected.c_str()), std::logic_error);
    CHECK(w.grad().empty());

    // The same through a later op that used the new shape: its own check passes,
    // add_scalar's would have got a [2, 2] gradient for w [2].
    Tensor h = w + 1.0f;
    h.value_mut() = Array{{1.0f, 2.0f}, {3.0f, 4.0f}};
    Tensor loss = tg::sum(h * 2.0f);
    CHECK_THROWS_WITH_AS(loss.backward(), Contains("an in-place write changed it to [2, 2]"), std::logic_error);
    CHECK(w.grad().empty());
  }

  TEST_CASE("a leaf whose shape changed after a backward() holds a stale gradient: backward() refuses it") {
    using doctest::Contains;
    Tensor w({1.0f, 2.0f}, true);
    tg::sum(w * 3.0f).backward();
    w.value_mut() = Array{1.0f, 2.0f, 3.0f};  // a new shape; the gradient held is still [2]
    Tensor loss = tg::sum(w * 3.0f);
    CHECK_THROWS_WITH_AS(loss.backward(),
                         Contains("holds a gradient of shape [2] from before an in-place write changed its shape; "
                                  "call zero_grad() first"),
                         std::logic_error);
    CHECK_THROWS_WITH_AS(w.backward(Array{1.0f, 1.0f, 1.0f}), Contains("the leaf backward() was called on"),
                         std::logic_error);
    CHECK(w.grad().dense() == Array({3.0f, 3.0f}));  // untouched
    w.zero_grad();
    loss.backward();
    CHECK(w.grad().dense() == Array({3.0f, 3.0f, 3.0f}));
  }

  TEST_CASE("a write between two backward() calls of a retained graph fails the second") {
    Tensor w({3.0f}, true);
    Tensor y = w * w;
    y.backward(std::nullopt, true);
    CHECK(w.grad().dense()(0) == 6.0f);
    w.value_mut()(0) = 4.0f;
    CHECK_THROWS_AS(y.backward(), std::logic_error);
    CHECK(w.grad().dense()(0) == 6.0f);
  }

  TEST_CASE("an optimizer step between forward and backward throws where a backward reads the weight") {
    tg::nn::Linear fc(3, 2), head(2, 1);
    tg::optim::SGD sgd(fc.parameters(), {.lr = 0.1});
    const Tensor x = tg::ones({4, 3});
    // head's input needs a gradient, so head's backward reads head.weight; fc's
    // input x needs none, so fc's backward reads only x (dW = g^T x), as in PyTorch.
    Tensor loss = tg::sum(head(fc(x)));
    fc.weight.accumulate_grad(Array(xt::ones<float>({2, 3})));
    sgd.step();  // writes fc.weight in place: fc's own backward does not read it
    loss.backward();
    CHECK(fc.weight.grad().dense()(1, 2) == doctest::Approx(1 + 4 * head.weight.value()(0, 1)));  // 1: added above
    loss = tg::sum(head(fc(x)));
    {
      tg::NoGradGuard no_grad;
      head.weight.value_mut() *= 2.0f;
    }
    CHECK_THROWS_WITH_AS(loss.backward(), doctest::Contains("input 1 of op 'linear'"), std::logic_error);
    for (int step = 0; step < 3; ++step) {  // zero_grad, forward, backward, step
      sgd.zero_grad();
      Tensor l = tg::sum(fc(x) * fc(x));
      CHECK_NOTHROW(l.backward());
      sgd.step();
    }
  }

  TEST_CASE("load_state_dict and max_norm renormalisation count as in-place writes") {
    tg::nn::Linear fc(2, 2);
    Tensor loss = tg::sum(fc(tg::ones({1, 2}, true)));  // the input needs a gradient: backward reads the weight
    const tg::StateDict state = fc.state_dict();
    fc.load_state_dict(state);  // same values, but written in place
    CHECK_THROWS_WITH_AS(loss.backward(), doctest::Contains("op 'linear'"), std::logic_error);

    tg::nn::Embedding emb(4, 3, {.max_norm = 0.1f});
    Tensor used = tg::sum(emb.weight * emb.weight);  // mul reads the whole table
    Tensor looked_up = emb(tg::Indices{1, 2});       // renormalises rows 1 and 2 in place first
    CHECK_THROWS_WITH_AS(used.backward(), doctest::Contains("op 'mul'"), std::logic_error);
    CHECK_NOTHROW(tg::sum(looked_up).backward());  // the lookup's own backward reads no values
  }
}
