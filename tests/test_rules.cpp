// The local rules of inspect/rules.cpp: every op that can be recorded has one, and
// each rule worked out with a step's numbers gives the gradient the op's closure produced.
#include <doctest/doctest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <tapegrad/tapegrad.hpp>

#include "helpers.hpp"

namespace {

using tg::Tensor;

// Evaluates the arithmetic a worked rule prints: numbers, + - · /, ² and ^n,
// parentheses, Iverson brackets [a > b] (also <, =, !=), and exp, log, tanh,
// sqrt, sigmoid and sign of a parenthesized argument. Returns nothing for text
// it does not read (names like grad[0, 0], gelu'(x), "max"). Alongside the value
// it returns the same expression over the numbers' absolute values with every
// minus a plus: the size the printed digits' rounding scales with.
class Arithmetic {
 public:
  static std::optional<std::pair<double, double>> eval(const std::string& text) {
    Arithmetic a{text};
    const auto v = a.expr();
    a.space();
    if (!v || a.at_ != text.size()) return std::nullopt;
    return v;
  }

 private:
  using Value = std::optional<std::pair<double, double>>;  // value, magnitude
  explicit Arithmetic(const std::string& t) : t_(t) {}
  const std::string& t_;
  std::size_t at_ = 0;

  void space() {
    while (at_ < t_.size() && t_[at_] == ' ') ++at_;
  }
  bool take(const std::string& token) {
    space();
    if (t_.compare(at_, token.size(), token) != 0) return false;
    at_ += token.size();
    return true;
  }
  Value expr() {  // terms joined by + and -
    Value v = term();
    for (bool plus; v && ((plus = take("+")) || take("-"));) {
      const Value r = term();
      if (!r) return std::nullopt;
      v = {{plus ? v->first + r->first : v->first - r->first, v->second + r->second}};
    }
    return v;
  }
  Value term() {  // factors joined by · and /
    Value v = factor();
    for (bool times; v && ((times = take("\u00b7")) || take("/"));) {
      const Value r = factor();
      if (!r || (!times && r->first == 0)) return std::nullopt;
      v = times ? Value{{v->first * r->first, v->second * r->second}}
                : Value{{v->first / r->first, v->second / std::abs(r->first)}};
    }
    return v;
  }
  Value factor() {
    if (take("-")) {
      const Value v = factor();
      return v ? Value{{-v->first, v->second}} : std::nullopt;
    }
    Value v = primary();
    if (v && take("\u00b2")) v = {{v->first * v->first, v->second * v->second}};
    if (v && take("^")) {
      const Value n = primary();
      if (!n) return std::nullopt;
      v = {{std::pow(v->first, n->first), std::pow(v->second, n->first)}};
    }
    return v;
  }
  Value primary() {
    space();
    if (take("(")) {
      const Value v = expr();
      return v && take(")") ? v : std::nullopt;
    }
    if (take("[")) {
      const Value a = expr();
      std::string op;
      for (const std::string c : {"!=", "=", ">", "<"})
        if (take(c)) {
          op = c;
          break;
        }
      const Value b = a && !op.empty() ? expr() : std::nullopt;
      if (!b || !take("]")) return std::nullopt;
      const bool holds = op == "="    ? a->first == b->first
                         : op == "!=" ? a->first != b->first
                         : op == ">"  ? a->first > b->first
                                      : a->first < b->first;
      return Value{{holds ? 1.0 : 0.0, 1.0}};
    }
    for (const auto& [name, f] : std::vector<std::pair<std::string, double (*)(double)>>{
             {"exp", [](double x) { return std::exp(x); }},
             {"log", [](double x) { return std::log(x); }},
             {"tanh", [](double x) { return std::tanh(x); }},
             {"sqrt", [](double x) { return std::sqrt(x); }},
             {"sigmoid", [](double x) { return 1 / (1 + std::exp(-x)); }},
             {"sign", [](double x) { return static_cast<double>((x > 0) - (x < 0)); }}})
      if (take(name + "(")) {
        const Value v = expr();
        if (!v || !take(")")) return std::nullopt;
        const double y = f(v->first);
        return Value{{y, std::abs(y)}};
      }
    std::size_t used = 0;
    if (at_ >= t_.size()) return std::nullopt;
    auto digit = [&](std::size_t i) {
      return i < t_.size() && std::isdigit(static_cast<unsigned char>(t_[i]));
    };
    if (!digit(at_) && !(t_[at_] == '.' && digit(at_ + 1))) return std::nullopt;
    const double x = std::stod(t_.substr(at_), &used);
    at_ += used;
    return Value{{x, std::abs(x)}};
  }
};

// Graphs that record every op there is, on small random inputs. Each returns a loss.
std::vector<std::pair<std::string, std::function<Tensor(tg::Generator&)>>> graphs() {
  auto leaf = [](tg::Generator& g, tg::Shape s) { return tg::randn(s, g, true); };
  auto pos = [](tg::Generator& g, tg::Shape s) {  // in [0.5, 1.5)
    return Tensor(tg::Array(tg::rand(s, g).value() + 0.5f), true);
  };
  auto weigh = [](const Tensor& y, tg::Generator& g) { return tg::sum(y * tg::randn(y.shape(), g)); };
  return {
      {"elementwise",
       [=](tg::Generator& g) {
         Tensor a = leaf(g, {2, 3}), b = leaf(g, {3}), p = pos(g, {2, 3});
         Tensor y = (a + b) * (a - b) / (p + 1.0f) + (-a) * 2.0f + a / 4.0f;
         y = y + tg::pow(p, 3.0f) + tg::exp(a) + tg::log(p) + tg::tanh(a) + tg::sigmoid(b) + tg::relu(a) +
             tg::abs(a) + tg::sqrt(p) + tg::clamp(a, -0.5f, 0.5f) + tg::gelu(a) + tg::gelu(a, "tanh") +
             tg::maximum(a, b) + tg::minimum(a, b) + tg::softplus(a) + tg::log_sigmoid(a);
         y = y + tg::where(tg::gt(a, 0.0f), a, b) + tg::masked_fill(a, tg::lt(a, 0.0f), 0.0f);
         tg::Generator drop(3);
         y = y + tg::dropout(a, 0.5f, true, drop);
         return weigh(y, g);
       }},
      {"triangles",
       [=](tg::Generator& g) {
         Tensor a = leaf(g, {3, 3});
         return weigh(tg::tril(a) + tg::triu(a, 1), g);
       }},
      {"products",
       [=](tg::Generator& g) {
         Tensor a = leaf(g, {2, 3}), b = leaf(g, {3, 4}), c = leaf(g, {2, 2, 3}), w = leaf(g, {4, 3}),
                bias = leaf(g, {4});
         return weigh(tg::matmul(a, b), g) + weigh(tg::matmul(c, b), g) + weigh(tg::linear(c, w, bias), g);
       }},
      {"reductions",
       [=](tg::Generator& g) {
         Tensor a = leaf(g, {3, 4});
         Tensor y = tg::sum(a) + tg::mean(a) + tg::max(a) + weigh(tg::sum(a, 1), g) +
                    weigh(tg::mean(a, 0, true), g) + weigh(tg::max(a, 1).values, g) +
                    weigh(tg::softmax(a, 1), g) + weigh(tg::log_softmax(a, 0), g) +
                    weigh(tg::logsumexp(a, 1), g);
         return y;
       }},
      {"shapes",
       [=](tg::Generator& g) {
         Tensor a = leaf(g, {2, 3, 2}), b = leaf(g, {2, 3, 2});
         Tensor y = weigh(tg::reshape(a, {3, 4}), g) + weigh(tg::flatten(a), g) +
                    weigh(tg::transpose(a, 0, 2), g) + weigh(tg::permute(a, {1, 0, 2}), g) +
                    weigh(tg::narrow(a, 1, 1, 2), g) + weigh(tg::cat({a, b}, 1), g) +
                    weigh(tg::stack({a, b}, 0), g) + weigh(tg::index_select(a, 0, tg::Indices{1, 0, 1}), g) +
                    weigh(tg::gather(a, 1, tg::Indices{{{0, 1}, {2, 2}}, {{1, 0}, {0, 2}}}), g);
         return y;
       }},
      {"losses",
       [=](tg::Generator& g) {
         Tensor x = leaf(g, {4, 3}), t = leaf(g, {4, 3});
         tg::Indices labels{0, 2, 1, 2};
         Tensor probs = tg::sigmoid(leaf(g, {4, 3}));
         Tensor targets = tg::rand({4, 3}, g);
         return tg::mse_loss(x, t) + tg::mse_loss(x, t, tg::Reduction::sum) + tg::cross_entropy(x, labels) +
                tg::nll_loss(tg::log_softmax(x, 1), labels, tg::Reduction::sum) +
                weigh(tg::nll_loss(tg::log_softmax(x, 1), labels, tg::Reduction::none), g) +
                tg::binary_cross_entropy(probs, targets) + tg::binary_cross_entropy_with_logits(x, targets) +
                weigh(tg::layer_norm(x, {3}, leaf(g, {3}), leaf(g, {3})), g);
       }},
      {"weighted losses",  // weight and pos_weight, broadcast; each reduction
       [=](tg::Generator& g) {
         Tensor x = leaf(g, {4, 3}), w = pos(g, {3}), pw = pos(g, {3}), w2 = pos(g, {4, 1});
         Tensor probs = tg::sigmoid(leaf(g, {4, 3}));
         Tensor targets = tg::rand({4, 3}, g);
         return tg::binary_cross_entropy_with_logits(x, targets, w) +
                tg::binary_cross_entropy_with_logits(x, targets, std::nullopt, pw, tg::Reduction::sum) +
                weigh(tg::binary_cross_entropy_with_logits(x, targets, w2, pw, tg::Reduction::none), g) +
                tg::binary_cross_entropy(probs, targets, w2, tg::Reduction::sum);
       }},
      {"norms",  // layer_norm with weight, bias, both or neither; batch_norm training and eval
       [=](tg::Generator& g) {
         Tensor x = leaf(g, {3, 2, 4}), x2 = leaf(g, {5, 3, 2});
         tg::nn::BatchNorm1d plain(3, {.affine = false});
         tg::nn::BatchNorm1d eval(3);
         eval.eval();
         return weigh(tg::layer_norm(x, {4}, leaf(g, {4}), std::nullopt), g) +
                weigh(tg::layer_norm(x, {2, 4}, std::nullopt, leaf(g, {2, 4})), g) +
                weigh(tg::layer_norm(x, {2, 4}, std::nullopt, std::nullopt), g) + weigh(plain(x2), g) +
                weigh(eval(x2), g) +
                weigh(tg::batch_norm(x2, std::nullopt, std::nullopt, leaf(g, {3}), std::nullopt, true), g) +
                weigh(tg::batch_norm(x2, std::nullopt, std::nullopt, std::nullopt, leaf(g, {3}), true), g);
       }},
      {"lookups",
       [=](tg::Generator& g) {
         tg::nn::Embedding emb(6, 3, {}, g);
         tg::nn::EmbeddingBag bag(6, 3, {}, g);
         Tensor h = leaf(g, {2, 3});
         return weigh(emb(tg::Indices{2, 3, 1, 3}), g) + weigh(bag(tg::Indices{{1, 2}, {2, 5}}), g) +
                weigh(emb.dot(h, tg::Indices{{0, 1}, {1, 4}}), g);
       }},
      {"bags",  // sum with per-sample weights, max, mean with a padding entry, bags from offsets
       [=](tg::Generator& g) {
         tg::nn::EmbeddingBag sum(6, 3, {.mode = tg::nn::EmbeddingBagMode::sum}, g);
         tg::nn::EmbeddingBag max(6, 3, {.mode = tg::nn::EmbeddingBagMode::max}, g);
         tg::nn::EmbeddingBag mean(6, 3, {.padding_idx = 0}, g);
         Tensor per_sample = leaf(g, {2, 3});
         return weigh(sum(tg::Indices{{1, 2, 2}, {4, 1, 5}}, per_sample), g) +
                weigh(max(tg::Indices{{1, 2, 3}, {3, 1, 4}}), g) +
                weigh(mean(tg::Indices{0, 2, 3, 2, 5}, tg::Indices{0, 3}), g);
       }},
      {"convolutions",
       [=](tg::Generator& g) {
         Tensor x1 = leaf(g, {1, 2, 6}), w1 = leaf(g, {3, 2, 3}), x2 = leaf(g, {1, 2, 5, 5}),
                w2 = leaf(g, {2, 2, 3, 3});
         tg::nn::BatchNorm1d bn(2);
         return weigh(tg::conv1d(x1, w1), g) + weigh(tg::conv2d(x2, w2), g) +
                weigh(tg::max_pool1d(x1, 2), g) + weigh(tg::max_pool2d(x2, {2, 2}), g) +
                weigh(tg::avg_pool1d(x1, 2), g) + weigh(tg::avg_pool2d(x2, {2, 2}), g) +
                weigh(tg::adaptive_avg_pool1d(x1, 2), g) + weigh(tg::adaptive_avg_pool2d(x2, {2, 2}), g) +
                weigh(tg::unfold(x2, {2, 2}), g) + weigh(bn(leaf(g, {6, 2})), g);
       }},
      {"convolutions with sizes",  // bias, stride, padding, dilation, groups; pools' options
       [=](tg::Generator& g) {
         Tensor x1 = leaf(g, {2, 4, 7}), w1 = leaf(g, {2, 2, 3}), b1 = leaf(g, {2}), x2 = leaf(g, {2, 6, 6}),
                w2 = leaf(g, {3, 2, 2, 3}), b2 = leaf(g, {3});
         return weigh(tg::conv1d(x1, w1, b1, {.stride = 2, .padding = 1, .groups = 2}), g) +
                weigh(tg::conv1d(x1, leaf(g, {3, 4, 2}), std::nullopt, {.dilation = 2}), g) +
                weigh(tg::conv2d(x2, w2, b2, {.stride = {1, 2}, .padding = {1, 0}}), g) +
                weigh(tg::max_pool1d(x1, 3, {.stride = 2, .padding = 1}), g) +
                weigh(tg::max_pool2d(x2, {2, 2}, {.stride = 1, .dilation = 2}), g) +
                weigh(tg::max_pool2d(x2, {3, 3}, {.stride = 2, .ceil_mode = true}), g) +
                weigh(tg::avg_pool1d(x1, 3, {.stride = 2, .padding = 1, .count_include_pad = false}), g) +
                weigh(tg::avg_pool2d(x2, {3, 3}, {.stride = 2, .padding = 1}), g) +
                weigh(tg::avg_pool2d(x2, {2, 2}, {.divisor_override = 3}), g) +
                weigh(tg::adaptive_avg_pool1d(x1, 3), g) + weigh(tg::adaptive_avg_pool2d(x2, {4, 5}), g) +
                weigh(tg::unfold(x2, {2, 3}, {.dilation = {2, 1}, .padding = 1, .stride = {2, 1}}), g);
       }},
  };
}

// Every op name recorded with a literal, record("name", ...), in core/ops and nn.
std::set<std::string> recorded_literals() {
  std::set<std::string> names;
  const std::regex call(R"re(record\(\s*"([a-z_0-9]+)")re");
  for (const char* dir : {"core/ops", "nn", "distributed"})
    for (const auto& f : std::filesystem::directory_iterator(tg::test::source_path(dir))) {
      if (f.path().extension() != ".cpp") continue;
      const std::string text = tg::test::read_file(f.path().string());
      for (auto it = std::sregex_iterator(text.begin(), text.end(), call); it != std::sregex_iterator(); ++it)
        names.insert((*it)[1]);
    }
  return names;
}

// The graph fuzzer's table: {"call", "recorded op", ...} (tests/fuzz/fuzz_graph.cpp).
std::set<std::string> fuzzer_ops() {
  std::set<std::string> names;
  const std::string text = tg::test::read_file(tg::test::source_path("tests/fuzz/fuzz_graph.cpp"));
  const std::regex row(R"re(\{"[A-Za-z_0-9]+", "([a-z_0-9]+)", draw_)re");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), row); it != std::sregex_iterator(); ++it)
    names.insert((*it)[1]);
  return names;
}

}  // namespace

TEST_SUITE("rules") {
  TEST_CASE("every op that can be recorded has a local rule") {
    std::set<std::string> ops = recorded_literals();
    CHECK(ops.size() > 30);
    const std::set<std::string> fuzzed = fuzzer_ops();
    CHECK(fuzzed.size() > 40);
    ops.insert(fuzzed.begin(), fuzzed.end());
    // And what the graphs below record (the ops named through a variable: conv2d, maximum, ...).
    for (const auto& [name, make] : graphs()) {
      tg::Generator g(0);
      const Tensor loss = make(g);
      for (const auto& n : tg::Tape::current().live_entries()) ops.insert(n->op);
    }
    for (const std::string& op : ops) {
      CAPTURE(op);
      CHECK(!tg::local_rule(op).empty());
    }
    MESSAGE(ops.size() << " op names, each with a rule; " << tg::debug::ops_with_rules().size() << " rules");
  }

  TEST_CASE("each rule, worked out with a step's numbers, gives the gradient the op's closure produced") {
    std::map<std::string, std::size_t> checked;    // op -> elements checked
    std::map<std::string, std::size_t> evaluated;  // op -> steps of arithmetic evaluated
    // Ops whose rule reads back what the tape does not keep (kernel, stride,
    // padding, mode, eps, which optional inputs were given): each of their steps
    // in the graphs above must be worked out.
    const std::set<std::string> read_back{"conv1d",
                                          "conv2d",
                                          "max_pool1d",
                                          "max_pool2d",
                                          "avg_pool1d",
                                          "avg_pool2d",
                                          "adaptive_avg_pool1d",
                                          "adaptive_avg_pool2d",
                                          "unfold",
                                          "layer_norm",
                                          "batch_norm",
                                          "embedding_bag",
                                          "embedding_dot",
                                          "binary_cross_entropy",
                                          "binary_cross_entropy_with_logits"};
    for (const auto& [name, make] : graphs()) {
      CAPTURE(name);
      tg::Generator g(1);
      const Tensor loss = make(g);
      tg::debug::StepObserverGuard observe(
          [&](const tg::Node& n, const tg::Array& grad, const tg::Grads& grads) {
            for (std::size_t i = 0; i < grads.size(); ++i) {
              if (grads[i].empty()) continue;
              const tg::Shape shape(n.input_shape(i).begin(), n.input_shape(i).end());
              const tg::Array share = grads[i].to_dense(shape);
              const std::vector<tg::debug::Worked> all = tg::debug::worked(n, grad, grads, i, 1 << 20);
              if (read_back.count(n.op)) {  // the op's sizes and options were read back for every input
                CAPTURE(n.op);
                CAPTURE(i);
                CHECK(!all.empty());
              }
              for (const tg::debug::Worked& w : all) {
                CAPTURE(n.op);
                CAPTURE(w.at);
                CAPTURE(w.text);
                const std::size_t cols = w.value.size();
                for (std::size_t c = 0; c < cols; ++c) {
                  const double want = share.data()[w.element * cols + c];  // a row's values, or one element
                  CHECK(w.value[c] == doctest::Approx(want).epsilon(1e-4).scale(1));
                }
                // The text ends in the value it gives, as the page and the trace print it:
                // a row as a list (its first values, when it is long).
                if (cols > 1) {
                  const std::size_t open = w.text.rfind('[');
                  REQUIRE(open != std::string::npos);
                  std::istringstream list(w.text.substr(open + 1));
                  std::size_t c = 0;
                  for (double v; c < cols && list >> v; ++c) {
                    CHECK(v == doctest::Approx(w.value[c]).epsilon(1e-5).scale(1e-6));
                    char sep = 0;
                    if (!(list >> sep) || sep != ',') {
                      ++c;
                      break;
                    }
                  }
                  CHECK(c >= std::min<std::size_t>(cols, 3));  // the list was read, not skipped
                }
                if (cols == 1) {
                  const std::size_t eq = w.text.rfind("= ");
                  const std::string tail = eq == std::string::npos ? w.text : w.text.substr(eq + 2);
                  const double value = std::stod(tail);
                  CHECK(value == doctest::Approx(w.value[0]).epsilon(1e-5).scale(1e-6));
                  // Each step of the arithmetic before it, evaluated from its printed
                  // numbers, gives that value: the numbers in the rule are the ones
                  // the value came from. (Past a label: "over its row of 3: ...; ",
                  // "... that read it (3): ".)
                  std::string steps = w.text.substr(0, eq == std::string::npos ? 0 : eq);
                  for (const std::string cut : {"; ", ": "})
                    if (const std::size_t at = steps.rfind(cut); at != std::string::npos)
                      steps = steps.substr(at + cut.size());
                  for (std::size_t from = 0; from <= steps.size();) {
                    const std::size_t to = std::min(steps.find(" = ", from), steps.size());
                    const std::string step = steps.substr(from, to - from);
                    if (const auto v = Arithmetic::eval(step)) {
                      CAPTURE(step);
                      CHECK(std::abs(v->first - value) <= 1e-4 * v->second + 1e-5 * std::abs(value) + 1e-6);
                      ++evaluated[n.op];
                    }
                    from = to + 3;
                  }
                }
                ++checked[n.op];
              }
            }
          });
      loss.backward();
    }
    // Every rule writes out numbers, and was checked at least once; sum_over_ranks
    // (distributed/, a library this binary does not link) in tests/test_distributed.cpp.
    for (const std::string& op : tg::debug::ops_with_rules()) {
      if (op == "sum_over_ranks") continue;
      CAPTURE(op);
      CHECK(tg::debug::rule_has_numbers(op));
      CHECK(checked[op] > 0);
    }
    std::size_t total = 0, steps = 0;
    for (const auto& [op, n] : checked) total += n;
    for (const auto& [op, n] : evaluated) steps += n;
    MESSAGE(checked.size() << " ops, " << total << " elements worked out and checked; " << steps
                           << " steps of arithmetic in " << evaluated.size() << " ops' rules evaluated");
    // The rules whose worked numbers are arithmetic (not a copied element or
    // row) had it evaluated.
    for (const std::string op : {"mul",
                                 "dropout",
                                 "where",
                                 "masked_fill",
                                 "pow",
                                 "exp",
                                 "log",
                                 "tanh",
                                 "sigmoid",
                                 "relu",
                                 "abs",
                                 "sqrt",
                                 "clamp",
                                 "maximum",
                                 "minimum",
                                 "softplus",
                                 "log_sigmoid",
                                 "div",
                                 "mul_scalar",
                                 "div_scalar",
                                 "tril",
                                 "triu",
                                 "matmul",
                                 "linear",
                                 "mean",
                                 "softmax",
                                 "log_softmax",
                                 "logsumexp",
                                 "mse_loss",
                                 "nll_loss",
                                 "binary_cross_entropy",
                                 "binary_cross_entropy_with_logits",
                                 "layer_norm",
                                 "batch_norm",
                                 "conv1d",
                                 "conv2d",
                                 "avg_pool1d",
                                 "avg_pool2d",
                                 "adaptive_avg_pool1d",
                                 "adaptive_avg_pool2d"}) {
      CAPTURE(op);
      CHECK(evaluated[op] > 0);
    }
  }

  TEST_CASE("backprop_by_hand's tanh step: the rule with 1 - y² for each element") {
    tg::nn::Linear fc1(2, 2), fc2(2, 1);
    {
      tg::NoGradGuard no_grad;
      fc1.weight.copy_({{0.5f, -0.4f}, {0.3f, 0.8f}});
      fc1.bias->copy_({0.1f, -0.2f});
      fc2.weight.copy_({{1.0f, -0.7f}});
      fc2.bias->copy_({0.2f});
    }
    const Tensor x = tg::Tensor({{1.0f, 2.0f}});
    const Tensor loss = tg::mse_loss(fc2(tg::tanh(fc1(x))), tg::full({1, 1}, 0.5f));
    std::ostringstream trace;
    {
      tg::TraceBackwardGuard guard(trace);
      loss.backward();
    }
    const std::string out = trace.str();
    INFO(out);
    CHECK(tg::local_rule("tanh") == "x.grad += grad · (1 - y²)   (y = tanh(x))");
    CHECK(tg::local_rule("mul") == "a.grad += grad · b | b.grad += grad · a");
    CHECK(out.find("    rule: x.grad += grad · (1 - y²)   (y = tanh(x))\n") != std::string::npos);
    CHECK(out.find("x[0, 0]: -2.30432 · (1 - (-0.197375)²) = -2.30432 · 0.961043 = -2.21455\n") !=
          std::string::npos);
    CHECK(out.find("x[0, 1]: 1.61303 · (1 - 0.935409²) = 1.61303 · 0.125010 = 0.201644\n") !=
          std::string::npos);
    // The tape listing: each entry, then its rule.
    const Tensor again = tg::tanh(fc1(x));
    std::ostringstream listing;
    tg::print_tape(listing);
    CHECK(listing.str().find(
              "] tanh([1, 2]*) -> [1, 2]\n      backward: x.grad += grad · (1 - y²)   (y = tanh(x))\n") !=
          std::string::npos);
    CHECK(listing.str().find(
              "      backward: x.grad += grad · weight | weight.grad += gradᵀ · x | bias.grad += grad summed "
              "over the rows\n") != std::string::npos);
  }

  TEST_CASE("composite calls name their ops' group; a lookup keeps its ids") {
    tg::Generator g(0);
    Tensor logits = tg::randn({2, 3}, g, true);
    const Tensor loss = tg::cross_entropy(logits, tg::Indices{2, 0});
    CHECK(loss.creator()->op == "nll_loss");
    CHECK(loss.creator()->group == "cross_entropy");
    CHECK(loss.creator()->inputs[0].tensor.creator()->group == "cross_entropy");
    CHECK(tg::describe(*loss.creator()).find("-> [] (in cross_entropy)") != std::string::npos);
    const Tensor flat = tg::flatten(logits);
    CHECK(flat.creator()->op == "reshape");
    CHECK(flat.creator()->group == "flatten");
    CHECK(tg::reshape(logits, {6}).creator()->group.empty());
    tg::nn::Embedding emb(6, 3, {}, g);
    const Tensor out = emb(tg::Indices{2, 3, 1, 3});
    REQUIRE(out.creator()->ids);
    CHECK(std::vector<int64_t>(out.creator()->ids->begin(), out.creator()->ids->end()) ==
          std::vector<int64_t>{2, 3, 1, 3});
  }
}
