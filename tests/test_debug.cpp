// Tape listing, backward trace, Graphviz output, anomaly mode.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "helpers.hpp"
#include "tapegrad.hpp"

using tg::Array;
using tg::Tensor;

TEST_SUITE("core.debug") {
  TEST_CASE("print_tape lists live entries in order with shapes and names") {
    Tensor w = Tensor({{1, 2}, {3, 4}, {5, 6}}, true).set_name("w");
    Tensor x({{1, 0, -1}});
    Tensor y = tg::tanh(tg::matmul(x, w));
    std::ostringstream s;
    tg::print_tape(s);
    const std::string out = s.str();
    const auto mm = out.find("matmul([1, 3], w [3, 2]*) -> [1, 2]");
    const auto th = out.find("tanh([1, 2]*) -> [1, 2]");
    CHECK(mm != std::string::npos);
    CHECK(th != std::string::npos);
    CHECK(mm < th);
    CHECK(tg::describe(*y.creator()).find("] tanh(") != std::string::npos);
  }

  TEST_CASE("TraceBackwardGuard prints every step with the gradients that flowed") {
    Tensor x = Tensor({2.0f}, true).set_name("x");
    Tensor y = x * x;  // dy/dx = 2x = 4
    std::ostringstream s;
    {
      tg::TraceBackwardGuard trace(s);
      tg::sum(y * 3.0f).backward();
    }
    const std::string out = s.str();
    INFO(out);
    // Walked in reverse: sum first, then mul_scalar, then mul.
    const auto p_sum = out.find("] sum("), p_scale = out.find("] mul_scalar("), p_mul = out.find("] mul(");
    REQUIRE(p_sum != std::string::npos);
    REQUIRE(p_scale != std::string::npos);
    REQUIRE(p_mul != std::string::npos);
    CHECK(p_sum < p_scale);
    CHECK(p_scale < p_mul);
    CHECK(out.find("grad of output: [3]") != std::string::npos);
    // x is both inputs of mul: each use passes 3 * x = 6, and both land in x's one slot.
    CHECK(out.find("input 0 x [1]* (leaf) += [12]") != std::string::npos);
    CHECK(out.find("input 1 x [1]*: same tensor as input 0") != std::string::npos);
    CHECK(x.grad().dense()(0) == 12.0f);
    std::ostringstream quiet;  // the guard is gone: nothing more is printed there
    tg::sum(x * 2.0f).backward();
    CHECK(s.str() == out);
  }

  TEST_CASE("to_dot draws the graph from the root back to the leaves") {
    Tensor a = Tensor({1.0f, 2.0f}, true).set_name("a");
    Tensor b = Tensor({3.0f, 4.0f}, true).set_name("b");
    Tensor loss = tg::sum(a * b + a);
    loss.backward(std::nullopt, true);
    const std::string dot = tg::to_dot(loss);
    INFO(dot);
    CHECK(dot.rfind("digraph tape {", 0) == 0);
    // 5 tensors: a, b, a*b, (+), sum; a is one node although used twice.
    std::size_t nodes = 0, edges = 0;
    std::istringstream lines(dot);
    for (std::string l; std::getline(lines, l);) {
      nodes += l.find("[label=") != std::string::npos;
      edges += l.find(" -> ") != std::string::npos;
    }
    CHECK(nodes == 5);
    CHECK(edges == 5);  // a->mul, b->mul, mul->add, a->add, add->sum
    CHECK(dot.find("label=\"a\\n[2]\\nvalue [1, 2]\\ngrad [4, 5]\"") != std::string::npos);
    CHECK(dot.find("sum [") != std::string::npos);

    if (std::system("command -v dot >/dev/null 2>&1") == 0) {  // graphviz installed: it must parse
      const std::string path = "tapegrad_test_graph.dot";
      std::ofstream(path) << dot;
      CHECK(std::system(("dot -Tsvg " + path + " -o /dev/null").c_str()) == 0);
      std::remove(path.c_str());
    } else {
      MESSAGE("graphviz not installed: to_dot output not parsed by dot");
    }
  }

  TEST_CASE("RetainAllGradsGuard: to_dot draws the gradient at every node, a sparse one by its rows") {
    tg::nn::Embedding emb(6, 2);
    emb.weight.set_name("emb.weight");
    Tensor w = Tensor({2.0f, -1.0f}, true).set_name("w");
    Tensor looked = emb(tg::Indices{3, 1, 3});  // [3, 2]
    Tensor loss = tg::sum(looked * w);          // d loss/d looked = w in every row
    {
      tg::RetainAllGradsGuard keep;
      loss.backward(std::nullopt, /*retain_graph=*/true);
    }
    REQUIRE(looked.grad().is_dense());
    CHECK(looked.grad().dense() == Array{{2, -1}, {2, -1}, {2, -1}});
    CHECK(loss.grad().dense() == Array(1.0f));
    const std::string dot = tg::to_dot(loss);
    INFO(dot);
    CHECK(dot.find("\\ngrad sparse rows {1, 3}") != std::string::npos);     // emb.weight
    CHECK(dot.find("\\ngrad [2, -1, 2, -1, 2, -1]") != std::string::npos);  // the lookup's output
    CHECK(dot.find("\\ngrad [1, 1, 1, 1, 1, 1]") != std::string::npos);     // looked * w
    CHECK(dot.find("sum [") != std::string::npos);
    CHECK(dot.find("\\ngrad [1]") != std::string::npos);  // the loss

    // Without the guard, an intermediate tensor keeps no gradient (as in PyTorch).
    Tensor again = emb(tg::Indices{0});
    tg::sum(again).backward();
    CHECK(again.grad().empty());
    CHECK(tg::to_dot(again).find("\\ngrad") == std::string::npos);
  }

  TEST_CASE("anomaly mode: log(0) in a forward pass is caught and named") {
    Tensor x({1.0f, 0.0f}, true);
    {
      tg::DetectAnomalyGuard anomaly;
      CHECK_THROWS_WITH_AS(tg::log(x), doctest::Contains("op 'log' (tape entry"), tg::AnomalyError);
      CHECK_NOTHROW(tg::log(x + 1.0f));
    }
    // Off again: the -inf goes through silently, as without the guard.
    CHECK(std::isinf(tg::log(x).value()(1)));
  }

  TEST_CASE("anomaly mode: a NaN/Inf born in backward names the forward op that recorded it") {
    Tensor x({4.0f, 0.0f}, true);
    tg::DetectAnomalyGuard anomaly;
    Tensor y = tg::sum(tg::pow(x, 0.5f));  // forward is finite: sqrt(0) = 0
    CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("backward of op 'pow'"), tg::AnomalyError);
  }

  TEST_CASE("anomaly mode: a NaN loss in a training step") {
    const float inf = std::numeric_limits<float>::infinity();
    Tensor logits({{inf, 0.0f}}, true);  // e.g. weights that blew up
    tg::DetectAnomalyGuard anomaly;
    // log_softmax subtracts the max: inf - inf = NaN.
    CHECK_THROWS_WITH_AS(tg::cross_entropy(logits, tg::Indices{0}), doctest::Contains("op 'log_softmax'"),
                         tg::AnomalyError);
  }
}
