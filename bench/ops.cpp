// ops: every differentiable op of core/ops.hpp (and nn's Embedding and
// EmbeddingBag) timed forward + backward, one case at a time; ops_pytorch.py
// times the same cases in PyTorch, and ops.py runs the two side by side.
//
//   ops [--only TEXT,TEXT] [--cases NAME,NAME] [--sizes 64x64,1024x300,4096x1024,32x128x300]
//       [--target-ms 30] [--min-samples 5] [--threads 1] [--sum-loss] [--list]
//
// A case is one op at one size, named op@size ("add@1024x300"); --only keeps
// the cases whose name contains one of the texts, --cases those named. The
// sizes are [n, m] = [64, 64], [1024, 300] and [4096, 1024], and the 3-d
// [32, 128, 300], where a binary op's second operand broadcasts: [128, 1], or
// [300] in the _row forms (which at the 2-d sizes are a + row, row [m]). An op whose shapes are not
// elementwise gets an analogue per size (matmul [n, m] x [m, m], cross_entropy
// over n rows of m classes, cat of two halves, ...); each case prints what it
// computes, with its shapes, as `what`.
//
// Each case runs in a process of its own (a fork of this one, see run()). One
// iteration: clear the leaves' gradients (zero_grad()), run the forward, then
// backward(g), g made once before the loop (with --sum-loss, sum(y).backward():
// the op followed by a sum to a scalar loss, which adds the sum's cost); the
// output and its graph die inside the iteration. Iterations are grouped into samples of about 1 ms, and
// samples run until target_ms has passed (at least min_samples of them). A
// case's time is the median sample's time per iteration, both in the process's
// CPU time (as the step cells, harness.hpp: on a shared machine it leaves out
// the waits for a core) and in wall time; and the fastest sample's wall time,
// which the thread comparison reads (CPU time adds the threads up).
// Minor page faults per iteration (getrusage) are counted over the samples.
//
// Prints one line per case: CASE {json}.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <tapegrad/tapegrad.hpp>

#include "harness.hpp"
#include "options.hpp"

namespace {

struct Size {
  std::string name;  // "1024x300"
  tg::Shape dims;    // {1024, 300}
};

const std::vector<Size> all_sizes = {{"64x64", {64, 64}},
                                     {"1024x300", {1024, 300}},
                                     {"4096x1024", {4096, 1024}},
                                     {"32x128x300", {32, 128, 300}}};

// One case, ready to run: the leaves whose gradients each iteration clears, and
// the forward pass whose output the iteration backwards.
struct Setup {
  std::string what;  // "a + b, a [1024, 300], b [1024, 300]"
  std::vector<tg::Tensor> leaves;
  std::function<tg::Tensor()> forward;
};

// Builds an op's case at one size, or nothing where the op has none at that size.
using Maker = std::function<std::optional<Setup>(const Size&)>;

struct Case {
  std::string op;
  Maker make;
};

// ------------------------------------------------------------------ inputs

tg::Generator gen(0);  // every input's values and dropout's masks

bool is_3d(const Size& s) {
  return s.dims.size() == 3;
}
std::size_t last(const Size& s) {
  return s.dims.back();
}  // m, or 300 at 3-d
std::size_t first(const Size& s) {
  return s.dims.front();
}  // n, or 32 at 3-d

// N(0, 1) values that require grad.
tg::Tensor leaf(const tg::Shape& shape) {
  return tg::randn(shape, gen, true);
}
// Values in [0.5, 1.5) that require grad: log, sqrt and a divisor need them positive.
tg::Tensor positive_leaf(const tg::Shape& shape) {
  return tg::Tensor(tg::Array(tg::rand(shape, gen).value() + 0.5f), true);
}
// Half 0s, half 1s, in no pattern; no gradient.
tg::Tensor mask(const tg::Shape& shape) {
  return tg::gt(tg::rand(shape, gen), 0.5f);
}
// Random ids in [0, below).
tg::Indices ids(const tg::Shape& shape, std::size_t below) {
  std::mt19937 e(1);
  std::uniform_int_distribution<int64_t> pick(0, static_cast<int64_t>(below) - 1);
  tg::Indices out = xt::empty<int64_t>(shape);
  for (int64_t& i : out) i = pick(e);
  return out;
}

// The same shape with the last dim replaced: {n, m} -> {n, last}.
tg::Shape with_last(const Size& s, std::size_t last) {
  tg::Shape out = s.dims;
  out.back() = last;
  return out;
}
// The same shape with the first dim replaced.
tg::Shape with_first(const Size& s, std::size_t first) {
  tg::Shape out = s.dims;
  out.front() = first;
  return out;
}

std::string sh(const tg::Shape& shape) {
  return tg::shape_str(shape);
}

// "formula, a [..], b [..]; note": a case's `what`.
std::string describe(const std::string& formula, const std::vector<std::pair<std::string, tg::Shape>>& inputs,
                     const std::string& note = "") {
  std::string out = formula;
  for (const auto& [name, shape] : inputs) out += ", " + name + " " + sh(shape);
  return note.empty() ? out : out + "; " + note;
}

// ------------------------------------------------------------------- cases

using Unary = std::function<tg::Tensor(const tg::Tensor&)>;
using Binary = std::function<tg::Tensor(const tg::Tensor&, const tg::Tensor&)>;

// f(a), a of the size's shape.
Maker unary(std::string formula, Unary f, bool positive = false) {
  return [=](const Size& s) -> std::optional<Setup> {
    tg::Tensor a = positive ? positive_leaf(s.dims) : leaf(s.dims);
    return Setup{
        describe(formula, {{"a", s.dims}}, positive ? "a in [0.5, 1.5)" : ""), {a}, [=] { return f(a); }};
  };
}

// f(a) with a in [0.5, 1.5): log and sqrt.
Maker unary_positive(std::string formula, Unary f) {
  return unary(std::move(formula), std::move(f), true);
}

// f(a, b): b of a's shape at 2-d and [128, 1] at 3-d; with row, b is [m].
Maker binary(std::string formula, Binary f, bool row, bool positive_b) {
  return [=](const Size& s) -> std::optional<Setup> {
    const tg::Shape b_shape = row ? tg::Shape{last(s)} : is_3d(s) ? tg::Shape{s.dims[1], 1} : s.dims;
    tg::Tensor a = leaf(s.dims), b = positive_b ? positive_leaf(b_shape) : leaf(b_shape);
    return Setup{describe(formula, {{"a", s.dims}, {"b", b_shape}}, positive_b ? "b in [0.5, 1.5)" : ""),
                 {a, b},
                 [=] { return f(a, b); }};
  };
}

std::vector<Case> cases() {
  using T = const tg::Tensor&;
  std::vector<Case> out;
  struct BinaryOp {
    std::string op, formula;
    Binary f;
    bool positive_b = false;
  };
  const std::vector<BinaryOp> binary_ops = {
      {"add", "a + b", [](T a, T b) { return a + b; }},
      {"sub", "a - b", [](T a, T b) { return a - b; }},
      {"mul", "a * b", [](T a, T b) { return a * b; }},
      {"div", "a / b", [](T a, T b) { return a / b; }, true},
      {"maximum", "maximum(a, b)", [](T a, T b) { return tg::maximum(a, b); }},
      {"minimum", "minimum(a, b)", [](T a, T b) { return tg::minimum(a, b); }},
  };
  for (const BinaryOp& b : binary_ops) {
    out.push_back({b.op, binary(b.formula, b.f, false, b.positive_b)});
    out.push_back({b.op + "_row", binary(b.formula, b.f, true, b.positive_b)});
  }

  out.push_back({"neg", unary("-a", [](T a) { return -a; })});
  out.push_back({"add_scalar", unary("a + 2", [](T a) { return a + 2.0f; })});
  out.push_back({"mul_scalar", unary("a * 2", [](T a) { return a * 2.0f; })});
  out.push_back({"div_scalar", unary("a / 2", [](T a) { return a / 2.0f; })});
  out.push_back({"pow", unary("pow(a, 2)", [](T a) { return tg::pow(a, 2.0f); })});
  out.push_back({"exp", unary("exp(a)", [](T a) { return tg::exp(a); })});
  out.push_back({"log", unary_positive("log(a)", [](T a) { return tg::log(a); })});
  out.push_back({"tanh", unary("tanh(a)", [](T a) { return tg::tanh(a); })});
  out.push_back({"sigmoid", unary("sigmoid(a)", [](T a) { return tg::sigmoid(a); })});
  out.push_back({"relu", unary("relu(a)", [](T a) { return tg::relu(a); })});
  out.push_back({"abs", unary("abs(a)", [](T a) { return tg::abs(a); })});
  out.push_back({"sqrt", unary_positive("sqrt(a)", [](T a) { return tg::sqrt(a); })});
  out.push_back({"clamp", unary("clamp(a, -0.5, 0.5)", [](T a) { return tg::clamp(a, -0.5f, 0.5f); })});
  out.push_back({"gelu", unary("gelu(a)", [](T a) { return tg::gelu(a); })});
  out.push_back({"gelu_tanh", unary("gelu(a, tanh)", [](T a) { return tg::gelu(a, "tanh"); })});
  out.push_back(
      {"dropout", unary("dropout(a, 0.1, train)", [](T a) { return tg::dropout(a, 0.1f, true, gen); })});
  out.push_back({"tril", unary("tril(a)", [](T a) { return tg::tril(a); })});
  out.push_back({"triu", unary("triu(a)", [](T a) { return tg::triu(a); })});

  // where(cond, a, b): cond a 0/1 mask of a's shape, [128, 1] at 3-d.
  out.push_back({"where", [](const Size& s) -> std::optional<Setup> {
                   const tg::Shape c_shape = is_3d(s) ? tg::Shape{s.dims[1], 1} : s.dims;
                   tg::Tensor c = mask(c_shape), a = leaf(s.dims), b = leaf(s.dims);
                   return Setup{
                       describe("where(cond, a, b)", {{"cond", c_shape}, {"a", s.dims}, {"b", s.dims}}),
                       {a, b},
                       [=] { return tg::where(c, a, b); }};
                 }});
  // masked_fill(a, mask, 0): at 3-d the mask is [128, 300], as attention's [T, T] over a batch.
  out.push_back({"masked_fill", [](const Size& s) -> std::optional<Setup> {
                   const tg::Shape m_shape = is_3d(s) ? tg::Shape{s.dims[1], s.dims[2]} : s.dims;
                   tg::Tensor m = mask(m_shape), a = leaf(s.dims);
                   return Setup{describe("masked_fill(a, mask, 0)", {{"a", s.dims}, {"mask", m_shape}}),
                                {a},
                                [=] { return tg::masked_fill(a, m, 0.0f); }};
                 }});

  // Products: [.., m] x [m, m], as a layer of width m over the rows.
  out.push_back({"matmul", [](const Size& s) -> std::optional<Setup> {
                   tg::Tensor a = leaf(s.dims), b = leaf({last(s), last(s)});
                   return Setup{describe("matmul(a, b)", {{"a", s.dims}, {"b", {last(s), last(s)}}}),
                                {a, b},
                                [=] { return tg::matmul(a, b); }};
                 }});
  out.push_back({"linear", [](const Size& s) -> std::optional<Setup> {
                   tg::Tensor x = leaf(s.dims), w = leaf({last(s), last(s)}), b = leaf({last(s)});
                   return Setup{describe("linear(x, w, bias) = x w^T + bias",
                                         {{"x", s.dims}, {"w", {last(s), last(s)}}, {"bias", {last(s)}}}),
                                {x, w, b},
                                [=] { return tg::linear(x, w, b); }};
                 }});

  // Reductions: all elements, or along the last dim (the middle dim at 3-d).
  auto dim_of = [](const Size& s) -> int64_t { return is_3d(s) ? 1 : -1; };
  auto along = [](const std::string& f, const Size& s) { return f + (is_3d(s) ? "(a, 1)" : "(a, -1)"); };
  out.push_back({"sum", unary("sum(a)", [](T a) { return tg::sum(a); })});
  out.push_back({"sum_dim", [=](const Size& s) {
                   return unary(along("sum", s), [d = dim_of(s)](T a) { return tg::sum(a, d); })(s);
                 }});
  out.push_back({"mean", unary("mean(a)", [](T a) { return tg::mean(a); })});
  out.push_back({"mean_dim", [=](const Size& s) {
                   return unary(along("mean", s), [d = dim_of(s)](T a) { return tg::mean(a, d); })(s);
                 }});
  out.push_back({"max", unary("max(a)", [](T a) { return tg::max(a); })});
  out.push_back({"max_dim", [=](const Size& s) {
                   return unary(along("max", s) + ".values",
                                [d = dim_of(s)](T a) { return tg::max(a, d).values; })(s);
                 }});
  out.push_back({"softmax", unary("softmax(a, -1)", [](T a) { return tg::softmax(a, -1); })});
  out.push_back({"log_softmax", unary("log_softmax(a, -1)", [](T a) { return tg::log_softmax(a, -1); })});

  // Shape ops: copies here, views in PyTorch.
  out.push_back({"reshape", [](const Size& s) {
                   const std::vector<int64_t> to =
                       is_3d(s) ? std::vector<int64_t>{-1, static_cast<int64_t>(last(s))}
                                : std::vector<int64_t>{static_cast<int64_t>(s.dims[1]),
                                                       static_cast<int64_t>(s.dims[0])};
                   const std::string f = is_3d(s) ? "reshape(a, [-1, " + std::to_string(last(s)) + "])"
                                                  : "reshape(a, " + sh({s.dims[1], s.dims[0]}) + ")";
                   return unary(f, [to](T a) { return tg::reshape(a, to); })(s);
                 }});
  out.push_back({"transpose", [](const Size& s) {
                   const int64_t d0 = is_3d(s) ? 1 : 0, d1 = d0 + 1;
                   return unary("transpose(a, " + std::to_string(d0) + ", " + std::to_string(d1) + ")",
                                [=](T a) { return tg::transpose(a, d0, d1); })(s);
                 }});
  out.push_back(
      {"permute", [](const Size& s) {
         const std::vector<int64_t> p = is_3d(s) ? std::vector<int64_t>{1, 0, 2} : std::vector<int64_t>{1, 0};
         return unary(is_3d(s) ? "permute(a, [1, 0, 2])" : "permute(a, [1, 0])",
                      [p](T a) { return tg::permute(a, p); })(s);
       }});
  out.push_back({"flatten", [](const Size& s) {
                   return is_3d(s) ? unary("flatten(a, 0, 1)", [](T a) { return tg::flatten(a, 0, 1); })(s)
                                   : unary("flatten(a)", [](T a) { return tg::flatten(a); })(s);
                 }});
  // cat of the two halves of each row; stack of two halves of the rows.
  out.push_back({"cat", [](const Size& s) -> std::optional<Setup> {
                   const tg::Shape half = with_last(s, last(s) / 2);
                   tg::Tensor a = leaf(half), b = leaf(half);
                   return Setup{describe("cat([a, b], -1)", {{"a", half}, {"b", half}}), {a, b}, [=] {
                                  return tg::cat({a, b}, -1);
                                }};
                 }});
  out.push_back({"stack", [](const Size& s) -> std::optional<Setup> {
                   const tg::Shape half = with_first(s, first(s) / 2);
                   tg::Tensor a = leaf(half), b = leaf(half);
                   return Setup{describe("stack([a, b], 0)", {{"a", half}, {"b", half}}), {a, b}, [=] {
                                  return tg::stack({a, b}, 0);
                                }};
                 }});
  out.push_back({"narrow", [](const Size& s) {
                   const int64_t m = static_cast<int64_t>(last(s));
                   return unary("narrow(a, -1, " + std::to_string(m / 4) + ", " + std::to_string(m / 2) + ")",
                                [m](T a) { return tg::narrow(a, -1, m / 4, m / 2); })(s);
                 }});

  // Indexing: rows picked at random (repeats allowed), elements gathered along the last dim.
  out.push_back({"index_select", [](const Size& s) -> std::optional<Setup> {
                   const tg::Indices idx = ids({first(s)}, first(s));
                   tg::Tensor a = leaf(s.dims);
                   return Setup{describe("index_select(a, 0, idx)", {{"a", s.dims}, {"idx", {first(s)}}},
                                         "idx random in [0, " + std::to_string(first(s)) + ")"),
                                {a},
                                [=] { return tg::index_select(a, 0, idx); }};
                 }});
  out.push_back({"gather", [](const Size& s) -> std::optional<Setup> {
                   const tg::Indices idx = ids(s.dims, last(s));
                   tg::Tensor a = leaf(s.dims);
                   return Setup{describe("gather(a, -1, idx)", {{"a", s.dims}, {"idx", s.dims}},
                                         "idx random in [0, " + std::to_string(last(s)) + ")"),
                                {a},
                                [=] { return tg::gather(a, -1, idx); }};
                 }});

  out.push_back({"layer_norm", [](const Size& s) -> std::optional<Setup> {
                   tg::Tensor x = leaf(s.dims), w = leaf({last(s)}), b = leaf({last(s)});
                   return Setup{describe("layer_norm(x, " + sh({last(s)}) + ", w, b)",
                                         {{"x", s.dims}, {"w", {last(s)}}, {"b", {last(s)}}}),
                                {x, w, b},
                                [=, m = last(s)] { return tg::layer_norm(x, {m}, w, b); }};
                 }});

  // Losses over n rows of m classes (2-d only), mean reduction.
  out.push_back({"cross_entropy", [](const Size& s) -> std::optional<Setup> {
                   if (is_3d(s)) return std::nullopt;
                   const tg::Indices target = ids({first(s)}, last(s));
                   tg::Tensor logits = leaf(s.dims);
                   return Setup{describe("cross_entropy(logits, target)",
                                         {{"logits", s.dims}, {"target", {first(s)}}}, "mean"),
                                {logits},
                                [=] { return tg::cross_entropy(logits, target); }};
                 }});
  out.push_back({"nll_loss", [](const Size& s) -> std::optional<Setup> {
                   if (is_3d(s)) return std::nullopt;
                   const tg::Indices target = ids({first(s)}, last(s));
                   tg::Tensor log_probs = leaf(s.dims);
                   return Setup{describe("nll_loss(log_probs, target)",
                                         {{"log_probs", s.dims}, {"target", {first(s)}}}, "mean"),
                                {log_probs},
                                [=] { return tg::nll_loss(log_probs, target); }};
                 }});
  out.push_back({"mse_loss", [](const Size& s) -> std::optional<Setup> {
                   tg::Tensor a = leaf(s.dims), target = tg::randn(s.dims, gen);
                   return Setup{describe("mse_loss(a, target)", {{"a", s.dims}, {"target", s.dims}},
                                         "target without grad"),
                                {a},
                                [=] { return tg::mse_loss(a, target); }};
                 }});

  // nn: tables of n rows of width m (4096 rows of 300 at 3-d), sparse gradients
  // in both libraries (PyTorch: sparse=True).
  out.push_back(
      {"embedding", [](const Size& s) -> std::optional<Setup> {
         const std::size_t rows = is_3d(s) ? 4096 : first(s);
         const tg::Shape id_shape = is_3d(s) ? tg::Shape{s.dims[0], s.dims[1]} : tg::Shape{first(s)};
         const tg::Indices idx = ids(id_shape, rows);
         auto emb = std::make_shared<tg::nn::Embedding>(rows, last(s), tg::nn::EmbeddingOptions{}, gen);
         return Setup{
             describe("Embedding(" + std::to_string(rows) + ", " + std::to_string(last(s)) + ", sparse)(ids)",
                      {{"ids", id_shape}}),
             {emb->weight},
             [=] { return (*emb)(idx); }};
       }});
  out.push_back({"embedding_bag", [](const Size& s) -> std::optional<Setup> {
                   if (is_3d(s)) return std::nullopt;
                   const tg::Indices idx = ids({first(s), 4}, first(s));
                   tg::nn::EmbeddingBagOptions o;
                   o.mode = tg::nn::EmbeddingBagMode::sum;
                   auto bag = std::make_shared<tg::nn::EmbeddingBag>(first(s), last(s), o, gen);
                   return Setup{describe("EmbeddingBag(" + std::to_string(first(s)) + ", " +
                                             std::to_string(last(s)) + ", sum, sparse)(ids): n bags of 4 ids",
                                         {{"ids", {first(s), 4}}}),
                                {bag->weight},
                                [=] { return (*bag)(idx); }};
                 }});
  return out;
}

// ------------------------------------------------------------------ timing

struct Options {
  std::string only, cases, sizes;
  double target_ms = 30, sample_ms = 1;
  int64_t min_samples = 5, threads = 1;
  bool list = false;
  bool sum_loss = false;  // --sum-loss: sum(y).backward() instead of y.backward(g)
};

struct Timing {
  double cpu_ms = 0, wall_ms = 0;  // per iteration: the median sample's
  double wall_ms_min = 0;          // the fastest sample's: what the thread comparison reads
  int64_t iterations = 0, samples = 0;
  double minflt = 0;  // minor page faults per iteration
  tg::Shape out;      // the output's shape, which ops.py checks against PyTorch's
};

long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

Timing measure(Setup& s, const Options& o) {
  // The backward's seed: the output's shape, random values, made once.
  Timing t;
  t.out = s.forward().shape();
  const tg::Array g = tg::randn(t.out, gen).value();
  auto iteration = [&] {
    for (tg::Tensor& x : s.leaves) x.zero_grad();
    if (o.sum_loss)
      tg::sum(s.forward()).backward();
    else
      s.forward().backward(g);
  };
  // Warm-up: at least one iteration and 5 ms; it sets the iterations per sample.
  int64_t warm = 0;
  const bench::Clock::time_point start = bench::Clock::now();
  do {
    iteration();
    ++warm;
  } while (bench::ms_since(start) < 5);
  const double per_iteration = bench::ms_since(start) / static_cast<double>(warm);
  const int64_t k = std::max<int64_t>(1, std::llround(o.sample_ms / per_iteration));

  std::vector<double> cpu, wall;
  const long faults = minor_faults();
  const bench::Clock::time_point timed = bench::Clock::now();
  while (t.samples < o.min_samples || bench::ms_since(timed) < o.target_ms) {
    const bench::Clock::time_point w = bench::Clock::now();
    const double c = bench::cpu_ms();
    for (int64_t i = 0; i < k; ++i) iteration();
    cpu.push_back((bench::cpu_ms() - c) / static_cast<double>(k));
    wall.push_back(bench::ms_since(w) / static_cast<double>(k));
    t.iterations += k;
    ++t.samples;
  }
  t.minflt = static_cast<double>(minor_faults() - faults) / static_cast<double>(t.iterations);
  t.cpu_ms = bench::median(cpu);
  t.wall_ms = bench::median(wall);
  t.wall_ms_min = *std::min_element(wall.begin(), wall.end());
  return t;
}

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream s(list);
  for (std::string x; std::getline(s, x, ',');)
    if (!x.empty()) out.push_back(x);
  return out;
}

bool wanted(const std::string& name, const std::vector<std::string>& only,
            const std::vector<std::string>& named) {
  if (!named.empty() && std::find(named.begin(), named.end(), name) == named.end()) return false;
  return only.empty() || std::any_of(only.begin(), only.end(),
                                     [&](const std::string& t) { return name.find(t) != std::string::npos; });
}

std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// One case, in the child process: its CASE line, or none where the op has no case at this size.
void run_case(const Case& c, const Size& size, const Options& o) {
  tg::set_num_threads(static_cast<std::size_t>(o.threads));
  std::ostringstream line;
  line.precision(6);
  line << "CASE {\"case\": " << quoted(c.op + "@" + size.name) << ", \"op\": " << quoted(c.op)
       << ", \"size\": " << quoted(size.name) << ", \"threads\": " << o.threads;
  try {
    std::optional<Setup> setup = c.make(size);
    if (!setup) return;
    line << ", \"what\": " << quoted(setup->what);
    if (!o.list) {
      const Timing t = measure(*setup, o);
      line << ", \"cpu_ms\": " << t.cpu_ms << ", \"wall_ms\": " << t.wall_ms
           << ", \"wall_ms_min\": " << t.wall_ms_min << ", \"iterations\": " << t.iterations
           << ", \"samples\": " << t.samples << ", \"minflt_per_iter\": " << t.minflt
           << ", \"out\": " << tg::shape_str(t.out);
    }
  } catch (const std::exception& e) {  // one case failing does not stop the others
    line << ", \"error\": " << quoted(e.what());
  }
  std::printf("%s}\n", line.str().c_str());
}

// Each case runs in a child process of its own (fork), so that every case starts
// from the same state, whatever ran before it: glibc's malloc raises its mmap
// and trim thresholds to the largest blocks freed so far, which can move a
// case's page faults, and its time, by several times. The children also start
// from the same generator state, so a case gets the same inputs with any --only.
int run(const Options& o) {
  const std::vector<std::string> only = split(o.only), named = split(o.cases), size_names = split(o.sizes);
  for (const Size& size : all_sizes) {
    if (!size_names.empty() && std::find(size_names.begin(), size_names.end(), size.name) == size_names.end())
      continue;
    for (const Case& c : cases()) {
      const std::string name = c.op + "@" + size.name;
      if (!wanted(name, only, named)) continue;
      std::fflush(stdout);  // or the child would print what is buffered again
      const pid_t child = fork();
      if (child < 0) throw std::runtime_error("fork failed");
      if (child == 0) {
        run_case(c, size, o);
        std::fflush(stdout);
        _exit(0);
      }
      int status = 0;
      waitpid(child, &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        std::printf(
            "CASE {\"case\": %s, \"op\": %s, \"size\": %s, \"error\": \"the case's process died (status "
            "%d)\"}\n",
            quoted(name).c_str(), quoted(c.op).c_str(), quoted(size.name).c_str(), status);
    }
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Options o;
    const std::vector<std::string> rest = bench::read_options(argc, argv,
                                                              {{"--only", &o.only},
                                                               {"--cases", &o.cases},
                                                               {"--sizes", &o.sizes},
                                                               {"--target-ms", &o.target_ms},
                                                               {"--sample-ms", &o.sample_ms},
                                                               {"--min-samples", &o.min_samples},
                                                               {"--threads", &o.threads},
                                                               {"--sum-loss", &o.sum_loss},
                                                               {"--list", &o.list}});
    if (!rest.empty()) throw std::invalid_argument("unexpected argument '" + rest[0] + "'");
    if (o.min_samples < 1 || o.threads < 1)
      throw std::invalid_argument("--min-samples and --threads must be >= 1");
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ops: %s\n", e.what());
    return 2;
  }
}
