// Random programs on the tape, built from fuzz bytes: ops drawn from a table
// (every differentiable op of core/ops.hpp; every op of core/conv.hpp and
// core/ops_nn.hpp: conv1d/2d, unfold, max, avg and adaptive pooling 1d/2d,
// softplus, log_sigmoid, logsumexp, both binary cross-entropies, batch_norm
// while training; nn::Embedding and
// nn::EmbeddingBag; dropout gets a generator of its own, whose mask the
// reference replays) on tiny tensors, with broadcasting, a tensor used several
// times (x * x, diamonds), outputs dropped at once or later, ops under
// NoGradGuard, detach(), in-place writes (copy_, value_mut(), shape changes)
// anywhere between ops, and backward() with and without retain_graph, more
// ops after it, and another backward().
//
// Every program also runs in a reference written here: plain loops in double,
// one function per op, and a model of the tape (which steps were released,
// which tensors are alive, at which versions and shapes each op saw its
// operands). Promises checked:
//   - an op throws exactly when its shapes or indices are wrong by the rules of
//     core/ops.hpp and nn/embedding.hpp (predicted here): std::invalid_argument
//     for shapes, std::out_of_range for indices, naming the op, with its inputs
//     (values, versions) and the tape as they were;
//   - an accepted op gives the predicted shape, values that agree with the
//     reference, and tape entries exactly when grad mode is on and an input
//     requires grad, all of them in its output's graph;
//   - each in-place write bumps version() by one; a refused copy_ changes nothing;
//   - backward() throws (std::logic_error; std::invalid_argument for a seed of
//     the wrong shape) when the program made one of the mistakes of
//     docs/errors.md's table ("What a mistake throws"): a root without grad, a
//     graph released by an earlier backward(), a gradient that does not fit a
//     shape changed in place. Which values an op's backward
//     reads is not listed here: after a write to a value an op saw, backward()
//     may refuse, and then its message must name that op, tape entry, input
//     (or output), shape and versions exactly; or it may run, and then give
//     bit for bit the gradients it gives with the values the ops saw put back
//     (a backward that read the written values would give others). Whatever it
//     refuses for, no gradient changes at all;
//   - what the reference's tolerances cannot see, on a graph of the check's own:
//     masked_fill with NaN where its mask is set gives the fill value there bit
//     for bit and a gradient of exactly 0 (the seed elsewhere); gelu is within
//     6e-7 |x| of its formula in double;
//   - otherwise every leaf in the graph gains d(sum(w * root))/d(leaf), which
//     central differences on the reference give (see `smooth` for when they can
//     be trusted), and every other leaf keeps its gradient bit for bit (a leaf
//     reached only through where's condition is not in the graph in that sense:
//     no gradient flows there, as with PyTorch's bool condition);
//   - the tape holds a node for exactly the live recorded tensors of the model
//     (so dropped graphs are freed), and nothing once the program is gone.
//
// In-place writes follow PyTorch's `.data` semantics: the gradient flows
// through a written tensor to whatever made it, evaluated at the values the
// ops saw. The reference models this by treating a write as adding a constant
// to the tensor (same shape) or replacing it by a constant (new shape).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cctype>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <numbers>
#include <numeric>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <typeinfo>
#include <vector>

#include <xtensor/xadapt.hpp>

#include "core/conv.hpp"
#include "inspect/debug.hpp"
#include "core/ops.hpp"
#include "core/ops_nn.hpp"
#include "core/tape.hpp"
#include "fuzz_common.hpp"
#include "nn/embedding.hpp"

namespace {

using tg::Array;
using tg::Shape;
using tg::Tensor;
using tg::nn::EmbeddingBagMode;

// Small programs on small tensors: thousands of them a second under ASan.
constexpr std::size_t max_actions = 24, max_steps = 12, max_entries = 24, max_backwards = 3;
constexpr std::size_t max_leaf_elements = 48;  // over all leaves: central differences cost 2 runs each

// When float32 (tapegrad) and double (the reference) can be compared at all:
// values stay below `huge`, no log/div/pow is near its pole (`pole`), no relu
// input, max tie, clamp bound or moving where condition is within `margin` of
// its kink, and no layer_norm row is so narrow that float32 loses its digits.
// Outside, the program still runs and its exceptions, versions and tape are
// checked; only values and gradients are not.
constexpr double huge = 1e3, pole = 0.1, margin = 1e-3;
// Central differences in double: rounding ~ 1e-16 |L| / h, far below the
// tolerances (1e-3 and 1e-2 relative; float32 rounding is 6e-8). Truncation,
// h^2 f''' / 6, need not be: a large factor times the square of a steep
// difference (22518 * (150 - (x - 2.5)^4)^2 at x = 1) has f''' ~ 10^10. So each
// element is taken at h and 2h: their difference (3 times the truncation at h)
// must be small, and Richardson's (4 D(h) - D(2h)) / 3 removes the h^2 term.
constexpr double fd_step = 1e-6;

struct Stats {  // printed at exit when TAPEGRAD_FUZZ_STATS is set
  unsigned long programs = 0, ops = 0, refused_ops = 0, writes = 0, backwards = 0, refused_backwards = 0,
                checked_backwards = 0, steep_backwards = 0, checked_elements = 0;
  // backward()s after writes to values the ops saw (and no other mistake):
  // refused, ran, and compared with a run with those values put back
  unsigned long written_refused = 0, written_ran = 0, runs_without_writes = 0;
  std::map<std::string, unsigned long> refusals;  // why backward() refused: the model's reason, or the engine's
  ~Stats() {
    if (!std::getenv("TAPEGRAD_FUZZ_STATS")) return;
    std::fprintf(stderr,
                 "graph: %lu programs, %lu ops (%lu refused), %lu writes, %lu backward (%lu refused, %lu "
                 "checked against central differences, %lu gradient elements; %lu too steep to check)\n",
                 programs, ops, refused_ops, writes, backwards, refused_backwards, checked_backwards,
                 checked_elements, steep_backwards);
    std::fprintf(stderr,
                 "  after writes to values the ops saw: %lu refused, %lu ran; %lu compared with the values put back\n",
                 written_refused, written_ran, runs_without_writes);
    for (const auto& [why, n] : refusals) std::fprintf(stderr, "  refused: %lu %s\n", n, why.c_str());
  }
} stats;

// TAPEGRAD_FUZZ_TRACE=1 prints each action of a program: to see what a crash did.
const bool tracing = std::getenv("TAPEGRAD_FUZZ_TRACE") != nullptr;
void trace(const std::string& line) {
  if (tracing) std::fprintf(stderr, "  %s\n", line.c_str());
}

std::size_t numel(const Shape& s) {
  std::size_t n = 1;
  for (std::size_t d : s) n *= d;
  return n;
}

// Bit for bit (NaN equals itself): "unchanged" means exactly that.
bool same(const Array& a, const Array& b) {
  return a.shape() == b.shape() &&
         (a.size() == 0 || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}
bool same(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}

std::string str(const Shape& s) {
  return tg::shape_str(s);
}

// ------------------------------------------------------------ the reference

struct Val {  // a tensor in double
  Shape shape;
  std::vector<double> v;
};

Val zeros(const Shape& s) {
  return {s, std::vector<double>(numel(s), 0.0)};
}

std::string vals_str(const Val& x) {
  std::string s = str(x.shape) + " [";
  for (std::size_t i = 0; i < x.v.size(); ++i) s += (i ? ", " : "") + std::to_string(x.v[i]);
  return s + "]";
}

Val of(const Array& a) {
  Val r = zeros(Shape(a.shape().begin(), a.shape().end()));
  for (std::size_t i = 0; i < r.v.size(); ++i) r.v[i] = a.data()[i];
  return r;
}

Array to_array(const Val& x) {
  Array a = xt::empty<float>(x.shape);
  for (std::size_t i = 0; i < x.v.size(); ++i) a.data()[i] = static_cast<float>(x.v[i]);
  return a;
}

// What one evaluation of the reference met on its way.
struct Check {
  bool wild = false;              // a pole, NaN or a huge value: float and double may part
  // The infinities in the output are constants the op put there (masked_fill's
  // -inf): the same in float and double, and not moved by central differences.
  bool exact_infinities = false;
  bool kink = false;              // within `margin` of a kink: relu's 0, a tie in max, a clamp bound, ...
  std::vector<int64_t> branches;  // relu signs, max positions, clamp sides, where picks, in order
};

// NumPy's broadcasting, aligned from the right; nullopt when the shapes clash.
std::optional<Shape> broadcast(const Shape& a, const Shape& b) {
  Shape out(std::max(a.size(), b.size()));
  for (std::size_t i = 0; i < out.size(); ++i) {
    const std::size_t da = i + a.size() >= out.size() ? a[i + a.size() - out.size()] : 1;
    const std::size_t db = i + b.size() >= out.size() ? b[i + b.size() - out.size()] : 1;
    if (da != db && da != 1 && db != 1) return std::nullopt;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// Element `flat` of a tensor of shape `out` read from `in` broadcast to it.
std::size_t source(std::size_t flat, const Shape& out, const Shape& in) {
  std::size_t at = 0, stride = 1;
  for (std::size_t d = out.size(); d-- > 0;) {
    const std::size_t i = flat % out[d];
    flat /= out[d];
    if (d + in.size() < out.size()) continue;  // a dim `in` does not have
    const std::size_t n = in[d + in.size() - out.size()];
    if (n != 1) at += i * stride;
    stride *= n;
  }
  return at;
}

template <class F>
Val binary(const Val& a, const Val& b, F f) {
  Val r = zeros(*broadcast(a.shape, b.shape));
  for (std::size_t i = 0; i < r.v.size(); ++i)
    r.v[i] = f(a.v[source(i, r.shape, a.shape)], b.v[source(i, r.shape, b.shape)]);
  return r;
}

template <class F>
Val unary(const Val& a, F f) {
  Val r = a;
  for (double& x : r.v) x = f(x);
  return r;
}

// A tensor as [outer, n, inner] around axis ax: element (o, j, i) at (o * n + j) * inner + i.
struct Split {
  std::size_t outer = 1, n = 1, inner = 1;
};
Split split(const Shape& s, std::size_t ax) {
  Split r;
  for (std::size_t i = 0; i < s.size(); ++i) (i < ax ? r.outer : i == ax ? r.n : r.inner) *= s[i];
  return r;
}

Shape reduce_shape(Shape s, std::size_t ax, bool keepdim) {
  if (keepdim)
    s[ax] = 1;
  else
    s.erase(s.begin() + static_cast<std::ptrdiff_t>(ax));
  return s;
}

Val sum_axis(const Val& a, std::size_t ax, bool keepdim) {
  const Split s = split(a.shape, ax);
  Val r = zeros(reduce_shape(a.shape, ax, keepdim));
  for (std::size_t o = 0; o < s.outer; ++o)
    for (std::size_t j = 0; j < s.n; ++j)
      for (std::size_t i = 0; i < s.inner; ++i) r.v[o * s.inner + i] += a.v[(o * s.n + j) * s.inner + i];
  return r;
}

Val sum_all(const Val& a) {
  Val r = zeros({});
  for (double x : a.v) r.v[0] += x;
  return r;
}

Val scale(Val a, double s) {
  for (double& x : a.v) x *= s;
  return a;
}

// The largest of `xs` (the first on ties), noting how close the runner-up came.
std::size_t argmax(const std::vector<double>& xs, Check& c) {
  std::size_t best = 0;
  for (std::size_t j = 1; j < xs.size(); ++j)
    if (xs[j] > xs[best]) best = j;
  for (std::size_t j = 0; j < xs.size(); ++j)
    if (j != best && !(xs[best] - xs[j] >= margin)) c.kink = true;
  c.branches.push_back(static_cast<int64_t>(best));
  return best;
}

Val max_axis(const Val& a, std::size_t ax, bool keepdim, Check& c) {
  const Split s = split(a.shape, ax);
  Val r = zeros(reduce_shape(a.shape, ax, keepdim));
  std::vector<double> col(s.n);
  for (std::size_t o = 0; o < s.outer; ++o)
    for (std::size_t i = 0; i < s.inner; ++i) {
      for (std::size_t j = 0; j < s.n; ++j) col[j] = a.v[(o * s.n + j) * s.inner + i];
      r.v[o * s.inner + i] = col[argmax(col, c)];
    }
  return r;
}

Val log_softmax_axis(const Val& a, std::size_t ax) {
  const Split s = split(a.shape, ax);
  Val r = a;
  for (std::size_t o = 0; o < s.outer; ++o)
    for (std::size_t i = 0; i < s.inner; ++i) {
      auto at = [&](std::size_t j) { return (o * s.n + j) * s.inner + i; };
      double m = -INFINITY, z = 0;
      for (std::size_t j = 0; j < s.n; ++j) m = std::max(m, a.v[at(j)]);
      for (std::size_t j = 0; j < s.n; ++j) z += std::exp(a.v[at(j)] - m);
      for (std::size_t j = 0; j < s.n; ++j) r.v[at(j)] = a.v[at(j)] - m - std::log(z);
    }
  return r;
}

Val reduce(const Val& per_item, tg::Reduction r) {
  if (r == tg::Reduction::none) return per_item;
  Val s = sum_all(per_item);
  return r == tg::Reduction::sum ? s : scale(s, 1.0 / static_cast<double>(per_item.v.size()));
}

// ------------------------------------------------------------------- ops

struct Params {
  float s = 0;  // a scalar operand, or pow's exponent
  int64_t dim0 = 0, dim1 = 0;
  bool keepdim = false;
  std::vector<int64_t> shape;  // reshape's target
  std::vector<int64_t> ids;    // index_select's index, class targets, embedding ids
  Shape ids_shape;
  std::vector<int64_t> offsets;  // EmbeddingBag with offsets
  bool with_offsets = false;
  tg::Reduction reduction = tg::Reduction::mean;
  EmbeddingBagMode mode = EmbeddingBagMode::sum;
  bool include_last = false, sparse = false, with_bias = false, with_weight = false;
  std::optional<int64_t> padding;
  bool use_operator = false;  // a * 2 rather than mul(a, 2), ...
  std::optional<float> lo, hi;  // clamp's bounds
  bool cond_moves = false;      // where's condition can move under central differences
  bool nan_input = false;       // binary_cross_entropy: a NaN in its input when drawn
  int64_t start = 0, length = 0;  // narrow
  std::vector<int64_t> dims;      // permute's
  int64_t diagonal = 0;           // tril, triu
  std::string approximate;        // gelu's form
  Shape normalized;               // layer_norm's normalized_shape
  float eps = 1e-5f;
  float p = 0;  // dropout
  bool train = true;
  uint32_t seed = 0;         // of the generator dropout draws its mask from
  std::vector<double> mask;  // that mask, replayed (train, 0 < p <= 1)
  // conv2d and pooling: the window's sizes, [height, width] each; groups; pooling's options
  struct {
    std::array<int64_t, 2> kernel{1, 1}, stride{1, 1}, padding{0, 0}, dilation{1, 1};
  } win;
  int64_t groups = 1;
  bool default_stride = false, ceil_mode = false, count_include_pad = true;
};

// What an op must do with these shapes: succeed with shape `out`, or throw one
// of the flagged kinds (either one when both mistakes are present).
struct Expect {
  bool shape_error = false, index_error = false;
  Shape out;
  bool same_tensor = false;  // returns operand 0 itself (dropout when not training or p = 0)
  bool ok() const { return !shape_error && !index_error; }
};

Expect fails_shape() {
  return {true, false, {}};
}
Expect gives(Shape s) {
  return {false, false, std::move(s)};
}

class Program;
struct Call {
  std::vector<int> in;  // operands: entries of the program
  Params p;
};

using Shapes = std::vector<Shape>;
using Tensors = std::vector<Tensor>;
using Vals = std::vector<const Val*>;

struct Op {
  const char* name;             // what a refusal's message must name
  const char* node;             // the op name on the tape entry that makes the output
  void (*draw)(Program&, Call&);
  Expect (*predict)(const Shapes&, const Params&);
  Tensor (*run)(const Tensors&, const Params&);
  // `base`: the output at the point where the program ran, for parts the op
  // treats as constants (Embedding's padding row); null while computing it.
  Val (*ref)(const Vals&, const Params&, Check&, const Val* base);
  unsigned constant_operands = 0;  // bit i: operand i gets no gradient (where's condition)
  // Checks of an accepted call that the reference cannot make (run after it,
  // with grad mode on): exact values and gradients on a graph of its own.
  void (*also)(const Tensors& in, const Params&, const Tensor& out, const std::string& call) = nullptr;
};

bool dim_ok(int64_t d, std::size_t rank) {
  const int64_t r = static_cast<int64_t>(rank);
  return d >= -r && d < r;
}
std::size_t axis(int64_t d, std::size_t rank) {
  return static_cast<std::size_t>(d < 0 ? d + static_cast<int64_t>(rank) : d);
}

// ------------------------------------------------------------ the program

struct Entry {             // a tensor the program made: a leaf or an op's output
  Tensor t;                // the program's handle; empty once dropped
  std::weak_ptr<tg::TensorImpl> impl;
  bool held = true;
  int step = -1;           // the step that made it; -1 for a leaf
  bool requires_grad = false;
  bool recorded = false;   // has a tape node
  bool wild = false;       // depends on a value where float and double may part
  // values[j]: the values after j in-place writes. values[0] is where the
  // program ran (leaf values, or the reference's output for this step).
  std::vector<Val> values;
  std::vector<Array> arrays;  // the same in float32, as tapegrad held them
  bool retains = false;  // retain_grad() was called on this output
  // Leaves and outputs that retain their gradient: the gradient backward()
  // should have accumulated so far; unknown once a backward() ran where
  // differences cannot be trusted.
  bool grad_known = true;
  std::optional<Val> grad;
  std::optional<Shape> grad_shape;  // of the gradient it holds, known or not
};

// A tape entry as the engine recorded it: its op and, for each of its inputs,
// the program's entry (-1: a tensor made inside the step, e.g. cross_entropy's
// log_softmax output, which the program never holds).
struct NodeSeen {
  std::string op;
  std::vector<int> inputs;
};

struct Step {
  const Op* op;
  Call call;
  std::vector<std::size_t> in_version;  // of each operand when the op ran
  int out = -1;
  bool no_grad = false, recorded = false, released = false, kink = false;
  std::vector<int64_t> branches;  // Check::branches where the program ran
  // The tape entries the op recorded, by index; out_node makes the output.
  std::map<std::size_t, NodeSeen> nodes;
  std::size_t out_node = 0;
};

struct Perturb {  // central differences: element k of a leaf (or an output) moved by delta
  int leaf = -1;
  std::size_t k = 0;
  double delta = 0;
};

enum class Got { ok, invalid_argument, out_of_range, logic_error };

const char* got_str(Got g) {
  switch (g) {
    case Got::ok: return "no exception";
    case Got::invalid_argument: return "std::invalid_argument";
    case Got::out_of_range: return "std::out_of_range";
    case Got::logic_error: return "std::logic_error";
  }
  return "?";
}

// Runs f and says which documented exception it threw; anything else is a broken promise.
template <class F>
Got attempt(F f, std::string& what) {
  try {
    f();
    return Got::ok;
  } catch (const std::exception& e) {
    what = e.what();
    if (typeid(e) == typeid(std::invalid_argument)) return Got::invalid_argument;
    if (typeid(e) == typeid(std::out_of_range)) return Got::out_of_range;
    if (typeid(e) == typeid(std::logic_error)) return Got::logic_error;
    fuzz::broken(std::string("undocumented exception type ") + typeid(e).name() + ": " + what);
  }
}

// What backward() from a root may do (Program::forecast).
struct Forecast {
  std::string must_refuse;   // why it must throw std::logic_error; empty: it need not
  bool shape_error = false;  // a gradient does not fit a shape changed in place
  std::vector<std::string> written;  // values written since the steps whose backward runs saw them
  std::map<int, std::size_t> restore;  // entry -> the version those steps saw, where it is not the current one
  bool restorable = true;              // no entry seen at two versions
};

class Program {
 public:
  explicit Program(fuzz::Bytes& in) : in_(in) {}
  void run();

  fuzz::Bytes& in() { return in_; }
  const Shape& shape(int e) const { return entries_[e].values.back().shape; }
  int pick();                                  // an entry the program holds
  int fresh(Shape s, bool force = false);      // a new leaf of shape s (or pick() when over budget)
  int pick_or_fit(Shape s);                    // either, as the next byte says
  int fresh_mask(Shape s);                     // a new leaf of 0s and non-zeros, for where
  bool requires_grad(int e) const { return entries_[e].requires_grad; }
  bool has_nan(int e) const {  // in its values as tapegrad holds them now
    const Array& a = entries_[e].arrays.back();
    return std::any_of(a.begin(), a.end(), [](float v) { return std::isnan(v); });
  }
  Shape draw_shape();

 private:
  int leaf(Shape s, bool force, bool mask);
  void op(const Op& op);
  void write();
  void backward();
  void drop();
  void detach();
  void zero_grad();
  void retain_grad();
  void check_tape();

  const Val& value(int e, std::size_t version, const std::vector<Val>& now, const Perturb& d) const;
  std::vector<Val> eval(const Perturb& d, std::vector<std::vector<int64_t>>* branches) const;
  std::vector<int> reach(int root, bool gradient_only = false) const;
  Forecast forecast(int root) const;
  bool justified(const std::string& what, int root, const Forecast& f) const;

  fuzz::Bytes& in_;
  std::vector<Entry> entries_;
  std::vector<Step> steps_;
  std::size_t leaf_elements_ = 0, backwards_ = 0;
  mutable Val scratch_;
};

float leaf_value(uint8_t b, std::size_t k) {
  // Magnitudes 0.25 .. 2.2 of either sign, exact in float; a small offset by
  // position makes ties (max's kinks) rare.
  const float m = static_cast<float>(4 + (b & 31)) / 16.0f + 0.0078125f * static_cast<float>(k % 7);
  return b & 0x80 ? -m : m;
}

Shape Program::draw_shape() {
  const uint8_t b = in_.byte();
  Shape s(b & 3);
  for (std::size_t& d : s) {
    const uint8_t x = in_.byte();
    d = x % 16 == 15 ? 0 : 1 + x % 3;  // now and then an empty dim
  }
  return s;
}

int Program::fresh(Shape s, bool force) {
  return leaf(std::move(s), force, false);
}

int Program::fresh_mask(Shape s) {
  return leaf(std::move(s), false, true);
}

// A mask is mostly 0s and 1s, now and then another non-zero value, and seldom
// requires grad (it gets none from where; it may from other ops).
int Program::leaf(Shape s, bool force, bool mask) {
  const std::size_t n = numel(s);
  if (!force && (entries_.size() >= max_entries || leaf_elements_ + n > max_leaf_elements)) return pick();
  leaf_elements_ += n;
  const bool requires_grad = mask ? in_.byte() % 8 == 0 : in_.byte() % 8 != 0;
  Array a = xt::empty<float>(s);
  for (std::size_t k = 0; k < n; ++k) {
    const uint8_t b = in_.byte();
    a.data()[k] = !mask ? leaf_value(b, k) : !(b & 1) ? 0.0f : b & 2 ? leaf_value(b, k) : 1.0f;
  }
  Entry e;
  e.values.push_back(of(a));
  e.arrays.push_back(a);
  e.t = Tensor(std::move(a), requires_grad);
  e.impl = e.t.impl();
  e.requires_grad = requires_grad;
  trace("#" + std::to_string(entries_.size()) + " = leaf " + vals_str(e.values[0]) +
        (requires_grad ? ", requires grad" : ""));
  entries_.push_back(std::move(e));
  return static_cast<int>(entries_.size()) - 1;
}

int Program::pick() {
  std::vector<int> held;
  for (std::size_t e = 0; e < entries_.size(); ++e)
    if (entries_[e].held) held.push_back(static_cast<int>(e));
  if (held.empty()) return fresh({1 + in_.byte() % 3u}, true);
  // Counted from the newest: recent outputs are the usual operands.
  return held[held.size() - 1 - in_.byte() % held.size()];
}

int Program::pick_or_fit(Shape s) {
  return in_.byte() & 1 ? fresh(std::move(s)) : pick();
}

// ------------------------------------------------------------ the op table

// Index from a byte: mostly in [0, n), sometimes n.. or negative.
int64_t index_from(uint8_t b, std::size_t n) {
  if (b < 0xE8) return n == 0 ? 0 : b % static_cast<int64_t>(n);
  if (b < 0xF4) return static_cast<int64_t>(n) + (b & 3);
  return -1 - (b & 3);
}

bool indices_ok(const std::vector<int64_t>& ids, std::size_t n) {
  return std::all_of(ids.begin(), ids.end(),
                     [n](int64_t i) { return i >= 0 && static_cast<std::size_t>(i) < n; });
}

// A dim for a tensor of rank r: mostly valid, sometimes one past either end.
int64_t dim_from(uint8_t b, std::size_t r) {
  const int64_t n = static_cast<int64_t>(r);
  return static_cast<int64_t>(b % (2 * r + 2)) - n - 1;
}

tg::Reduction reduction_from(uint8_t b) {
  return static_cast<tg::Reduction>(b % 3);
}

float scalar_from(uint8_t b) {
  static const float s[] = {0.5f, -1.5f, 2.0f, -0.75f, 3.0f, 0.25f, -2.0f, 1.0f};
  return s[b % 8];
}

// --- elementwise, broadcasting

// A partner for a tensor of shape s that mostly broadcasts with it: trailing
// dims of s, some set to 1, maybe one more in front.
Shape partner(Shape s, uint8_t b) {
  s.erase(s.begin(), s.begin() + static_cast<std::ptrdiff_t>((b & 3) % (s.size() + 1)));
  for (std::size_t i = 0; i < s.size(); ++i)
    if ((b >> (2 + i)) & 1) s[i] = 1;
  if (b & 0x80 && s.size() < 3) s.insert(s.begin(), 2);
  return s;
}

void draw_binary(Program& pr, Call& c) {
  const int a = pr.pick();
  const uint8_t b = pr.in().byte();
  const int other = pr.pick_or_fit(partner(pr.shape(a), b));
  c.in = b & 0x40 ? std::vector<int>{other, a} : std::vector<int>{a, other};
  c.p.use_operator = b & 0x20;
}

Expect predict_broadcast(const Shapes& s, const Params&) {
  const auto out = broadcast(s[0], s[1]);
  return out ? gives(*out) : fails_shape();
}

bool near_zero(double y) {
  return !(std::abs(y) >= pole);
}

// --- unary and scalar forms

void draw_unary(Program& pr, Call& c) {
  c.in = {pr.pick()};
  const uint8_t b = pr.in().byte();
  c.p.s = scalar_from(b);
  c.p.use_operator = b & 0x10;
}

void draw_pow(Program& pr, Call& c) {
  c.in = {pr.pick()};
  static const float p[] = {2.0f, 3.0f, -1.0f, 0.5f, -0.5f, 1.5f, 1.0f, 0.0f, -2.0f};
  c.p.s = p[pr.in().byte() % 9];
}

Expect predict_same(const Shapes& s, const Params&) {
  return gives(s[0]);
}

// --- matmul and linear

void draw_matmul(Program& pr, Call& c) {
  const int a = pr.pick();
  const Shape& s = pr.shape(a);
  const std::size_t k = s.empty() ? 1 : s.back(), m = 1 + pr.in().byte() % 3u;
  // b is [k, m], or [2, k, m] / [1, k, m] for a batch of matrices beside a's.
  const uint8_t batched = pr.in().byte() % 4u;
  c.in = {a, pr.pick_or_fit(batched == 0 ? Shape{2, k, m} : batched == 1 ? Shape{1, k, m} : Shape{k, m})};
}

// Batch dims: all but the last two.
Shape batch_of(const Shape& s) {
  return Shape(s.begin(), s.end() - 2);
}

Expect predict_matmul(const Shapes& s, const Params&) {
  const Shape &a = s[0], &b = s[1];
  if (a.size() < 2 || b.size() < 2 || a.back() != b[b.size() - 2]) return fails_shape();
  const auto batch = broadcast(batch_of(a), batch_of(b));
  if (!batch) return fails_shape();
  Shape out = *batch;
  out.push_back(a[a.size() - 2]);
  out.push_back(b.back());
  return gives(out);
}

// Rows of a [.., k] tensor seen as 2-d: the product of all dims but the last.
std::size_t leading(const Shape& s) {
  return numel(Shape(s.begin(), s.end() - 1));
}

// One [n, k] x [k, m] product per matrix of the broadcast batch.
Val ref_matmul(const Vals& x, const Params&, Check&, const Val*) {
  const Val &a = *x[0], &b = *x[1];
  const std::size_t n = a.shape[a.shape.size() - 2], k = a.shape.back(), m = b.shape.back();
  const Shape batch = *broadcast(batch_of(a.shape), batch_of(b.shape));
  Shape out = batch;
  out.push_back(n);
  out.push_back(m);
  Val r = zeros(out);
  for (std::size_t t = 0; t < numel(batch); ++t) {
    const double* pa = a.v.data() + source(t, batch, batch_of(a.shape)) * n * k;
    const double* pb = b.v.data() + source(t, batch, batch_of(b.shape)) * k * m;
    double* pr = r.v.data() + t * n * m;
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < m; ++j)
        for (std::size_t l = 0; l < k; ++l) pr[i * m + j] += pa[i * k + l] * pb[l * m + j];
  }
  return r;
}

void draw_linear(Program& pr, Call& c) {
  const int x = pr.pick();
  const Shape& s = pr.shape(x);
  const std::size_t in = s.empty() ? 1 : s.back(), out = 1 + pr.in().byte() % 3u;
  const int w = pr.pick_or_fit({out, in});
  c.in = {x, w};
  c.p.with_bias = pr.in().byte() & 1;
  if (c.p.with_bias) c.in.push_back(pr.pick_or_fit({pr.shape(w).empty() ? 1 : pr.shape(w)[0]}));
}

Expect predict_linear(const Shapes& s, const Params& p) {
  const Shape &x = s[0], &w = s[1];
  if (w.size() != 2 || x.empty() || x.back() != w[1]) return fails_shape();
  if (p.with_bias && s[2] != Shape{w[0]}) return fails_shape();
  Shape out = x;
  out.back() = w[0];
  return gives(out);
}

Val ref_linear(const Vals& x, const Params& p, Check&, const Val*) {
  const Val &a = *x[0], &w = *x[1];
  const std::size_t out_f = w.shape[0], in = w.shape[1], rows = leading(a.shape);
  Shape out = a.shape;
  out.back() = out_f;
  Val r = zeros(out);
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t o = 0; o < out_f; ++o) {
      double acc = p.with_bias ? x[2]->v[o] : 0.0;
      for (std::size_t l = 0; l < in; ++l) acc += a.v[i * in + l] * w.v[o * in + l];
      r.v[i * out_f + o] = acc;
    }
  return r;
}

// --- reductions, softmax, shape

void draw_dim(Program& pr, Call& c) {
  c.in = {pr.pick()};
  const uint8_t b = pr.in().byte();
  c.p.dim0 = dim_from(b, pr.shape(c.in[0]).size());
  c.p.keepdim = b & 0x80;
}

Expect predict_reduce(const Shapes& s, const Params& p, bool needs_items) {
  if (!dim_ok(p.dim0, s[0].size())) return fails_shape();
  const std::size_t ax = axis(p.dim0, s[0].size());
  if (needs_items && s[0][ax] == 0) return fails_shape();
  return gives(reduce_shape(s[0], ax, p.keepdim));
}

void draw_reshape(Program& pr, Call& c) {
  c.in = {pr.pick()};
  const uint8_t b = pr.in().byte();
  std::size_t left = numel(pr.shape(c.in[0]));
  const std::size_t rank = b & 3;
  if (b & 0x80) {  // any sizes, often wrong
    for (std::size_t i = 0; i < rank; ++i) c.p.shape.push_back(static_cast<int64_t>(pr.in().byte() % 5) - 1);
    return;
  }
  // Sizes that fit: each a divisor of what is left, the last takes the rest.
  for (std::size_t i = 0; i + 1 < rank; ++i) {
    std::size_t d = 1 + pr.in().byte() % 4;
    while (left % d != 0) --d;
    c.p.shape.push_back(static_cast<int64_t>(d));
    left /= d;
  }
  if (rank > 0) c.p.shape.push_back(static_cast<int64_t>(left));
  if (rank > 0 && (b & 0x40)) c.p.shape[(b >> 2) % rank] = -1;
}

Expect predict_reshape(const Shapes& s, const Params& p) {
  Shape out;
  std::size_t known = 1;
  int infer = -1;
  for (std::size_t i = 0; i < p.shape.size(); ++i) {
    if (p.shape[i] == -1 && infer < 0) {
      infer = static_cast<int>(i);
      out.push_back(0);
    } else if (p.shape[i] < 0) {
      return fails_shape();
    } else {
      out.push_back(static_cast<std::size_t>(p.shape[i]));
      known *= out.back();
    }
  }
  const std::size_t n = numel(s[0]);
  if (infer >= 0) {
    if (known == 0 || n % known != 0) return fails_shape();
    out[infer] = n / known;
    known *= out[infer];
  }
  if (known != n) return fails_shape();
  return gives(out);
}

void draw_transpose(Program& pr, Call& c) {
  c.in = {pr.pick()};
  const std::size_t r = pr.shape(c.in[0]).size();
  c.p.dim0 = dim_from(pr.in().byte(), r);
  c.p.dim1 = dim_from(pr.in().byte(), r);
}

Expect predict_transpose(const Shapes& s, const Params& p) {
  const std::size_t r = s[0].size();
  if (!dim_ok(p.dim0, r) || !dim_ok(p.dim1, r)) return fails_shape();
  Shape out = s[0];
  std::swap(out[axis(p.dim0, r)], out[axis(p.dim1, r)]);
  return gives(out);
}

Val ref_transpose(const Vals& x, const Params& p, Check&, const Val*) {
  const Val& a = *x[0];
  const std::size_t r = a.shape.size(), d0 = axis(p.dim0, r), d1 = axis(p.dim1, r);
  Shape out = a.shape;
  std::swap(out[d0], out[d1]);
  Val y = zeros(out);
  std::vector<std::size_t> idx(r);
  for (std::size_t flat = 0; flat < y.v.size(); ++flat) {
    std::size_t f = flat;
    for (std::size_t d = r; d-- > 0;) {
      idx[d] = f % out[d];
      f /= out[d];
    }
    std::swap(idx[d0], idx[d1]);
    std::size_t src = 0;
    for (std::size_t d = 0; d < r; ++d) src = src * a.shape[d] + idx[d];
    y.v[flat] = a.v[src];
  }
  return y;
}

// --- indexing and losses

std::vector<int64_t> ids_from(Program& pr, std::size_t count, std::size_t n) {
  std::vector<int64_t> ids;
  for (std::size_t i = 0; i < count; ++i) ids.push_back(index_from(pr.in().byte(), n));
  return ids;
}

void draw_index_select(Program& pr, Call& c) {
  c.in = {pr.pick()};
  const Shape& s = pr.shape(c.in[0]);
  const uint8_t b = pr.in().byte();
  c.p.dim0 = b & 0x80 ? dim_from(b, s.size()) : 0;
  const std::size_t count = (b >> 2) & 3;
  c.p.ids_shape = b & 0x40 ? Shape{1, count} : Shape{count};  // a 2-d index is refused
  c.p.ids = ids_from(pr, count, s.empty() ? 0 : s[0]);
}

Expect predict_index_select(const Shapes& s, const Params& p) {
  const Shape& a = s[0];
  if (a.empty() || !dim_ok(p.dim0, a.size()) || axis(p.dim0, a.size()) != 0 || p.ids_shape.size() != 1)
    return fails_shape();
  Shape out = a;
  out[0] = p.ids.size();
  return {false, !indices_ok(p.ids, a[0]), out};
}

Val ref_index_select(const Vals& x, const Params& p, Check&, const Val*) {
  const Val& a = *x[0];
  Shape out = a.shape;
  out[0] = p.ids.size();
  Val r = zeros(out);
  const std::size_t row = a.shape[0] == 0 ? 0 : a.v.size() / a.shape[0];
  for (std::size_t i = 0; i < p.ids.size(); ++i)
    for (std::size_t c = 0; c < row; ++c) r.v[i * row + c] = a.v[p.ids[i] * row + c];
  return r;
}

void draw_class_loss(Program& pr, Call& c) {
  c.in = {pr.pick()};
  const Shape& s = pr.shape(c.in[0]);
  const uint8_t b = pr.in().byte();
  c.p.reduction = reduction_from(b);
  const std::size_t n = s.empty() ? 1 : s[0];
  const std::size_t count = b & 0x80 ? (b >> 2) & 3 : n;  // sometimes the wrong length
  c.p.ids = ids_from(pr, count, s.size() > 1 ? s[1] : 1);
  c.p.ids_shape = {count};
}

Expect predict_class_loss(const Shapes& s, const Params& p) {
  const Shape& a = s[0];
  if (a.size() != 2 || p.ids.size() != a[0]) return fails_shape();
  return {false, !indices_ok(p.ids, a[1]), p.reduction == tg::Reduction::none ? Shape{a[0]} : Shape{}};
}

Val ref_nll(const Val& logp, const Params& p) {
  const std::size_t n = logp.shape[0], c = logp.shape[1];
  Val picked = zeros({n});
  for (std::size_t i = 0; i < n; ++i) picked.v[i] = -logp.v[i * c + p.ids[i]];
  return reduce(picked, p.reduction);
}

void draw_mse(Program& pr, Call& c) {
  const int a = pr.pick();
  c.in = {a, pr.pick_or_fit(pr.shape(a))};
  c.p.reduction = reduction_from(pr.in().byte());
}

Expect predict_mse(const Shapes& s, const Params& p) {
  if (s[0] != s[1]) return fails_shape();
  // mean over no elements is refused (by mean(); PyTorch gives NaN)
  if (p.reduction == tg::Reduction::mean && numel(s[0]) == 0) return fails_shape();
  return gives(p.reduction == tg::Reduction::none ? s[0] : Shape{});
}

// --- Embedding and EmbeddingBag, with an operand as the weight

std::optional<int64_t> padding_from(Program& pr, std::size_t rows) {
  const uint8_t b = pr.in().byte();
  if (b < 0xA0) return std::nullopt;
  return static_cast<int64_t>(b % (2 * rows + 2)) - static_cast<int64_t>(rows) - 1;  // [-rows-1, rows]
}

bool padding_ok(const std::optional<int64_t>& p, std::size_t rows) {
  return !p || (*p >= -static_cast<int64_t>(rows) && *p < static_cast<int64_t>(rows));
}

std::optional<std::size_t> padding_row(const std::optional<int64_t>& p, std::size_t rows) {
  if (!p) return std::nullopt;
  return static_cast<std::size_t>(*p < 0 ? *p + static_cast<int64_t>(rows) : *p);
}

std::size_t rows_of(const Shape& w) {
  return w.empty() ? 1 : w[0];
}

void draw_embedding(Program& pr, Call& c) {
  const uint8_t b = pr.in().byte();
  c.in = {pr.pick_or_fit({1 + b % 4u, 1 + (b >> 2) % 3u})};
  const std::size_t rows = rows_of(pr.shape(c.in[0]));
  c.p.ids_shape = Shape((b >> 4) % 3);
  for (std::size_t& d : c.p.ids_shape) d = pr.in().byte() % 4;
  c.p.ids = ids_from(pr, numel(c.p.ids_shape), rows);
  c.p.padding = padding_from(pr, rows);
  c.p.sparse = b & 0x40;
}

Expect predict_embedding(const Shapes& s, const Params& p) {
  const Shape& w = s[0];
  if (!padding_ok(p.padding, rows_of(w)) || w.size() != 2) return fails_shape();
  Shape out = p.ids_shape;
  out.push_back(w[1]);
  return {false, !indices_ok(p.ids, w[0]), out};
}

tg::Indices indices(const std::vector<int64_t>& ids, const Shape& shape) {
  return tg::Indices(xt::adapt(ids, shape));
}

std::size_t dim_of(const Shape& w) {
  return w.size() > 1 ? w[1] : 1;
}

Tensor run_embedding(const Tensors& t, const Params& p) {
  tg::Generator gen(0);
  tg::nn::Embedding emb(rows_of(t[0].shape()), dim_of(t[0].shape()),
                        {.padding_idx = p.padding, .sparse = p.sparse}, gen);
  emb.weight = t[0];  // a public member, as in PyTorch: any tensor may be put there
  return emb(indices(p.ids, p.ids_shape));
}

Val ref_embedding(const Vals& x, const Params& p, Check&, const Val* base) {
  const Val& w = *x[0];
  const std::size_t dim = w.shape[1];
  const auto pad = padding_row(p.padding, w.shape[0]);
  Shape out = p.ids_shape;
  out.push_back(dim);
  Val r = zeros(out);
  for (std::size_t k = 0; k < p.ids.size(); ++k)
    for (std::size_t c = 0; c < dim; ++c)
      // The padding row is returned as stored but gets no gradient: a constant.
      r.v[k * dim + c] = base && pad == static_cast<std::size_t>(p.ids[k]) ? base->v[k * dim + c]
                                                                           : w.v[p.ids[k] * dim + c];
  return r;
}

void draw_embedding_bag(Program& pr, Call& c) {
  const uint8_t b = pr.in().byte();
  c.in = {pr.pick_or_fit({1 + b % 4u, 1 + (b >> 2) % 3u})};
  const std::size_t rows = rows_of(pr.shape(c.in[0]));
  const uint8_t f = pr.in().byte();
  c.p.mode = static_cast<EmbeddingBagMode>(f % 3);
  c.p.include_last = f & 4;
  c.p.sparse = f & 8;
  c.p.with_offsets = !(f & 16);
  if (c.p.with_offsets) {
    const std::size_t n = pr.in().byte() % 6;
    c.p.ids_shape = f & 32 ? Shape{1, n} : Shape{n};  // a 2-d input with offsets is refused
    const std::size_t count = pr.in().byte() % 4;
    int64_t at = 0;
    for (std::size_t i = 0; i < count; ++i) {
      const uint8_t o = pr.in().byte();
      at += i == 0 ? 0 : o < 0xF0 ? o % 3 : static_cast<int64_t>(o & 7) - 4;  // now and then back
      if (o == 0xFF) at = 7;
      c.p.offsets.push_back(at);
    }
  } else {
    c.p.ids_shape = {pr.in().byte() % 3u, pr.in().byte() % 3u};
  }
  c.p.ids = ids_from(pr, numel(c.p.ids_shape), rows);
  c.p.padding = padding_from(pr, rows);
  if (f & 64) c.in.push_back(pr.pick_or_fit(c.p.ids_shape));  // per_sample_weights
}

// Where each bag starts (bags + 1 entries), for an accepted call.
std::vector<std::size_t> bag_starts(const Params& p) {
  std::vector<std::size_t> starts;
  const std::size_t n = p.ids.size();
  if (!p.with_offsets) {
    for (std::size_t b = 0; b <= p.ids_shape[0]; ++b) starts.push_back(b * p.ids_shape[1]);
    return starts;
  }
  for (int64_t o : p.offsets) starts.push_back(static_cast<std::size_t>(o));
  if (!p.include_last) starts.push_back(n);
  return starts;
}

Expect predict_embedding_bag(const Shapes& s, const Params& p) {
  const Shape& w = s[0];
  Expect e;
  if (!padding_ok(p.padding, rows_of(w)) || w.size() != 2) return fails_shape();
  const std::size_t n = p.ids.size();
  if (p.with_offsets) {
    if (p.ids_shape.size() != 1) return fails_shape();
    const auto& o = p.offsets;
    if (p.include_last && o.empty()) e.shape_error = true;
    if (!o.empty() && o[0] != 0) e.shape_error = true;
    for (std::size_t b = 0; b < o.size(); ++b) {
      if (b > 0 && o[b] < o[b - 1]) e.shape_error = true;
      if (o[b] < 0 || static_cast<std::size_t>(o[b]) > n) e.index_error = true;
    }
    if (p.include_last && !o.empty() && o.back() != static_cast<int64_t>(n)) e.shape_error = true;
  }
  if (!indices_ok(p.ids, w[0])) e.index_error = true;
  if (s.size() > 1 && (p.mode != EmbeddingBagMode::sum || s[1] != p.ids_shape)) e.shape_error = true;
  if (!e.ok()) return e;
  return gives({bag_starts(p).size() - 1, w[1]});
}

Tensor run_embedding_bag(const Tensors& t, const Params& p) {
  tg::Generator gen(0);
  tg::nn::EmbeddingBag bag(rows_of(t[0].shape()), dim_of(t[0].shape()),
                           {.mode = p.mode, .include_last_offset = p.include_last, .padding_idx = p.padding,
                            .sparse = p.sparse},
                           gen);
  bag.weight = t[0];
  std::optional<Tensor> psw;
  if (t.size() > 1) psw = t[1];
  if (p.with_offsets)
    return bag(indices(p.ids, p.ids_shape), indices(p.offsets, {p.offsets.size()}), psw);
  return bag(indices(p.ids, p.ids_shape), psw);
}

Val ref_embedding_bag(const Vals& x, const Params& p, Check& c, const Val*) {
  const Val& w = *x[0];
  const std::size_t dim = w.shape[1];
  const auto pad = padding_row(p.padding, w.shape[0]);
  const std::vector<std::size_t> starts = bag_starts(p);
  Val r = zeros({starts.size() - 1, dim});
  for (std::size_t b = 0; b + 1 < starts.size(); ++b) {
    std::vector<std::size_t> members;  // entries that are not padding
    for (std::size_t k = starts[b]; k < starts[b + 1]; ++k)
      if (pad != static_cast<std::size_t>(p.ids[k])) members.push_back(k);
    for (std::size_t col = 0; col < dim; ++col) {
      auto row = [&](std::size_t k) { return w.v[p.ids[k] * dim + col]; };
      double& out = r.v[b * dim + col];
      if (p.mode == EmbeddingBagMode::max) {
        if (members.empty()) continue;
        std::vector<double> xs;
        for (std::size_t k : members) xs.push_back(row(k));
        out = xs[argmax(xs, c)];
        continue;
      }
      for (std::size_t k : members)
        out += row(k) * (p.mode == EmbeddingBagMode::mean ? 1.0 / static_cast<double>(members.size())
                         : x.size() > 1                   ? x[1]->v[k]
                                                          : 1.0);
    }
  }
  return r;
}

// --- clamp, where, dropout

void draw_clamp(Program& pr, Call& c) {
  c.in = {pr.pick()};
  // Bounds among the leaves' values, so that inputs sit exactly on them now and
  // then; min > max now and then; seldom neither (refused).
  const uint8_t b = pr.in().byte();
  const float lo = scalar_from(pr.in().byte()), hi = scalar_from(pr.in().byte());
  if (b % 8 == 0) return;
  if (b % 8 < 3 || b % 8 > 4) c.p.lo = lo;
  if (b % 8 > 2) c.p.hi = hi;
}

Expect predict_clamp(const Shapes& s, const Params& p) {
  return p.lo || p.hi ? gives(s[0]) : fails_shape();
}

Val ref_clamp(const Vals& x, const Params& p, Check& c, const Val*) {
  const double lo = p.lo ? double(*p.lo) : -INFINITY, hi = p.hi ? double(*p.hi) : INFINITY;
  return unary(*x[0], [&](double a) {
    if (lo <= hi) {  // else the output is hi everywhere: a constant, without kinks
      c.kink |= !(std::abs(a - lo) >= margin) || !(std::abs(a - hi) >= margin);
      c.branches.push_back(a < lo ? 0 : a > hi ? 2 : 1);
    }
    const double y = a < lo ? lo : a;
    return y > hi ? hi : y;
  });
}

void draw_where(Program& pr, Call& c) {
  const int a = pr.pick();
  const uint8_t b = pr.in().byte();
  const int cond = b & 1 ? pr.pick() : pr.fresh_mask(partner(pr.shape(a), pr.in().byte()));
  const int other = pr.pick_or_fit(partner(pr.shape(a), pr.in().byte()));
  c.in = b & 2 ? std::vector<int>{cond, other, a} : std::vector<int>{cond, a, other};
  c.p.cond_moves = pr.requires_grad(cond);
}

Expect predict_where(const Shapes& s, const Params&) {
  const auto ca = broadcast(s[0], s[1]);
  if (!ca) return fails_shape();
  const auto out = broadcast(*ca, s[2]);
  return out ? gives(*out) : fails_shape();
}

Val ref_where(const Vals& x, const Params& p, Check& c, const Val*) {
  Val r = zeros(*broadcast(*broadcast(x[0]->shape, x[1]->shape), x[2]->shape));
  for (std::size_t i = 0; i < r.v.size(); ++i) {
    const double cond = x[0]->v[source(i, r.shape, x[0]->shape)];
    // A condition that moves with the leaves jumps where it crosses 0.
    if (p.cond_moves) c.kink |= !(std::abs(cond) >= margin);
    c.branches.push_back(cond != 0);
    r.v[i] = cond != 0 ? x[1]->v[source(i, r.shape, x[1]->shape)] : x[2]->v[source(i, r.shape, x[2]->shape)];
  }
  return r;
}

// In training, the fuzzer gives dropout a generator of its own, seeded from a
// byte, and replays the mask: the same seed on a tensor of ones of that shape.
void draw_dropout(Program& pr, Call& c) {
  c.in = {pr.pick()};
  static const float ps[] = {0.5f, 0.25f, 0.0f, 0.9f, 1.0f, 0.1f, -0.25f, 1.5f, NAN};
  c.p.p = ps[pr.in().byte() % 9];
  c.p.train = pr.in().byte() % 4 != 0;
  c.p.seed = pr.in().byte();
  if (!c.p.train || !(c.p.p > 0 && c.p.p <= 1)) return;
  tg::Generator gen(c.p.seed);
  const Array m = tg::dropout(Tensor(Array(xt::ones<float>(pr.shape(c.in[0])))), c.p.p, true, gen).value();
  const float scale = c.p.p < 1 ? 1.0f / (1.0f - c.p.p) : 0.0f;
  for (float v : m) {
    FUZZ_EXPECT(v == 0 || v == scale, "dropout: a mask element is neither 0 nor 1 / (1 - p)");
    c.p.mask.push_back(v);
  }
}

Expect predict_dropout(const Shapes& s, const Params& p) {
  if (!(p.p >= 0 && p.p <= 1)) return fails_shape();
  Expect e = gives(s[0]);
  e.same_tensor = !p.train || p.p == 0;
  return e;
}

Tensor run_dropout(const Tensors& t, const Params& p) {
  tg::Generator gen(p.seed);
  return tg::dropout(t[0], p.p, p.train, gen);
}

Val ref_dropout(const Vals& x, const Params& p, Check&, const Val*) {
  Val r = *x[0];
  for (std::size_t i = 0; i < r.v.size(); ++i) r.v[i] *= p.mask[i];
  return r;
}

// --- cat, stack, narrow, flatten, gather

// Tensors of the first one's shape, along dim (cat: with other sizes there);
// now and then none at all, or any tensor the program holds.
void draw_join(Program& pr, Call& c, bool stack) {
  const uint8_t b = pr.in().byte();
  if ((b & 0xF0) == 0xF0) return;  // an empty list
  const int first = pr.pick();
  const Shape s0 = pr.shape(first);
  c.p.dim0 = dim_from(pr.in().byte(), s0.size() + (stack ? 1 : 0));
  c.in = {first};
  for (std::size_t i = 0; i < b % 3u; ++i) {
    Shape s = s0;
    if (!stack && dim_ok(c.p.dim0, s.size())) s[axis(c.p.dim0, s.size())] = pr.in().byte() % 3;
    c.in.push_back(pr.pick_or_fit(s));
  }
}

Expect predict_cat(const Shapes& s, const Params& p) {
  if (s.empty() || !dim_ok(p.dim0, s[0].size())) return fails_shape();
  const std::size_t ax = axis(p.dim0, s[0].size());
  Shape out = s[0];
  out[ax] = 0;
  for (const Shape& t : s) {
    if (t.size() != out.size()) return fails_shape();
    for (std::size_t d = 0; d < t.size(); ++d)
      if (d != ax && t[d] != out[d]) return fails_shape();
    out[ax] += t[ax];
  }
  return gives(out);
}

Val ref_cat(const Vals& x, const Params& p, Check&, const Val*) {
  Shapes shapes;
  for (const Val* v : x) shapes.push_back(v->shape);
  Val r = zeros(predict_cat(shapes, p).out);
  const std::size_t ax = axis(p.dim0, r.shape.size());
  const Split so = split(r.shape, ax);
  std::size_t at = 0;  // where tensor t starts along ax
  for (const Val* t : x) {
    const Split st = split(t->shape, ax);
    for (std::size_t o = 0; o < st.outer; ++o)
      for (std::size_t j = 0; j < st.n; ++j)
        for (std::size_t i = 0; i < st.inner; ++i)
          r.v[(o * so.n + at + j) * so.inner + i] = t->v[(o * st.n + j) * st.inner + i];
    at += st.n;
  }
  return r;
}

Expect predict_stack(const Shapes& s, const Params& p) {
  if (s.empty() || !dim_ok(p.dim0, s[0].size() + 1)) return fails_shape();
  for (const Shape& t : s)
    if (t != s[0]) return fails_shape();
  Shape out = s[0];
  out.insert(out.begin() + static_cast<std::ptrdiff_t>(axis(p.dim0, out.size() + 1)), s.size());
  return gives(out);
}

Val ref_stack(const Vals& x, const Params& p, Check&, const Val*) {
  Shapes shapes;
  for (const Val* v : x) shapes.push_back(v->shape);
  Val r = zeros(predict_stack(shapes, p).out);
  const Split so = split(r.shape, axis(p.dim0, r.shape.size()));
  for (std::size_t o = 0; o < so.outer; ++o)
    for (std::size_t t = 0; t < so.n; ++t)
      for (std::size_t i = 0; i < so.inner; ++i) r.v[(o * so.n + t) * so.inner + i] = x[t]->v[o * so.inner + i];
  return r;
}

void draw_narrow(Program& pr, Call& c) {
  c.in = {pr.pick()};
  const Shape s = pr.shape(c.in[0]);
  c.p.dim0 = dim_from(pr.in().byte(), s.size());
  const int64_t n = dim_ok(c.p.dim0, s.size()) ? static_cast<int64_t>(s[axis(c.p.dim0, s.size())]) : 1;
  c.p.start = static_cast<int64_t>(pr.in().byte()) % (2 * n + 3) - n - 1;  // [-n - 1, n + 1]
  const int64_t begin = c.p.start < 0 ? c.p.start + n : c.p.start;
  const uint8_t l = pr.in().byte();
  // Mostly a length that fits, now and then one too long or negative.
  c.p.length = l >= 0xF0 ? n - begin + 1 : l >= 0xE8 ? -1 : l % (std::max<int64_t>(n - begin, 0) + 1);
}

Expect predict_narrow(const Shapes& s, const Params& p) {
  if (!dim_ok(p.dim0, s[0].size())) return fails_shape();
  const std::size_t ax = axis(p.dim0, s[0].size());
  const int64_t n = static_cast<int64_t>(s[0][ax]), begin = p.start < 0 ? p.start + n : p.start;
  if (begin < 0 || begin > n || p.length < 0 || begin + p.length > n) return {false, true, {}};
  Shape out = s[0];
  out[ax] = static_cast<std::size_t>(p.length);
  return gives(out);
}

Val ref_narrow(const Vals& x, const Params& p, Check&, const Val*) {
  const Val& a = *x[0];
  const std::size_t ax = axis(p.dim0, a.shape.size());
  const int64_t n = static_cast<int64_t>(a.shape[ax]);
  const std::size_t begin = static_cast<std::size_t>(p.start < 0 ? p.start + n : p.start);
  Val r = zeros(predict_narrow({a.shape}, p).out);
  const Split s = split(a.shape, ax);
  const std::size_t len = r.shape[ax];
  for (std::size_t o = 0; o < s.outer; ++o)
    for (std::size_t j = 0; j < len; ++j)
      for (std::size_t i = 0; i < s.inner; ++i)
        r.v[(o * len + j) * s.inner + i] = a.v[(o * s.n + begin + j) * s.inner + i];
  return r;
}

void draw_flatten(Program& pr, Call& c) {
  c.in = {pr.pick()};
  const std::size_t r = std::max<std::size_t>(pr.shape(c.in[0]).size(), 1);
  const uint8_t b = pr.in().byte();
  c.p.dim0 = b & 1 ? dim_from(pr.in().byte(), r) : 0;  // else the defaults, 0 and -1
  c.p.dim1 = b & 2 ? dim_from(pr.in().byte(), r) : -1;
}

// A 0-d tensor has the dims of a 1-d one (0 and -1) and becomes [1], as in PyTorch.
Expect predict_flatten(const Shapes& s, const Params& p) {
  const Shape& a = s[0];
  const std::size_t r = std::max<std::size_t>(a.size(), 1);
  if (!dim_ok(p.dim0, r) || !dim_ok(p.dim1, r)) return fails_shape();
  if (a.empty()) return gives({1});
  const std::size_t first = axis(p.dim0, r), last = axis(p.dim1, r);
  if (first > last) return fails_shape();
  Shape out(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(first));
  out.push_back(numel(Shape(a.begin() + static_cast<std::ptrdiff_t>(first),
                            a.begin() + static_cast<std::ptrdiff_t>(last) + 1)));
  out.insert(out.end(), a.begin() + static_cast<std::ptrdiff_t>(last) + 1, a.end());
  return gives(out);
}

void draw_gather(Program& pr, Call& c) {
  c.in = {pr.pick()};
  const Shape s = pr.shape(c.in[0]);
  const uint8_t b = pr.in().byte();
  c.p.dim0 = dim_from(b, s.size());
  const bool ax_ok = dim_ok(c.p.dim0, s.size());
  const std::size_t ax = ax_ok ? axis(c.p.dim0, s.size()) : s.size();
  // An index of a's rank (now and then another), no larger than a but along
  // dim (now and then larger).
  c.p.ids_shape = Shape((b & 0xC0) == 0xC0 ? (b >> 4) & 3 : s.size());
  for (std::size_t d = 0; d < c.p.ids_shape.size(); ++d) {
    const uint8_t x = pr.in().byte();
    c.p.ids_shape[d] = d >= s.size() || d == ax ? x % 4 : x >= 0xF0 ? s[d] + 1 : x % (s[d] + 1);
  }
  c.p.ids = ids_from(pr, numel(c.p.ids_shape), ax_ok ? s[ax] : 0);
}

Expect predict_gather(const Shapes& s, const Params& p) {
  const Shape& a = s[0];
  if (!dim_ok(p.dim0, a.size()) || p.ids_shape.size() != a.size()) return fails_shape();
  const std::size_t ax = axis(p.dim0, a.size());
  for (std::size_t d = 0; d < a.size(); ++d)
    if (d != ax && p.ids_shape[d] > a[d]) return fails_shape();
  return {false, !indices_ok(p.ids, a[ax]), p.ids_shape};
}

Val ref_gather(const Vals& x, const Params& p, Check&, const Val*) {
  const Val& a = *x[0];
  const std::size_t r = a.shape.size(), ax = axis(p.dim0, r);
  Val out = zeros(p.ids_shape);
  std::vector<std::size_t> at(r);
  for (std::size_t k = 0; k < p.ids.size(); ++k) {
    std::size_t f = k;
    for (std::size_t d = r; d-- > 0;) {  // k's position in the index
      at[d] = f % p.ids_shape[d];
      f /= p.ids_shape[d];
    }
    at[ax] = static_cast<std::size_t>(p.ids[k]);
    std::size_t src = 0;
    for (std::size_t d = 0; d < r; ++d) src = src * a.shape[d] + at[d];
    out.v[k] = a.v[src];
  }
  return out;
}

// --- layer_norm, with a weight or without; a bias or not

template <bool weight>
void draw_layer_norm(Program& pr, Call& c) {
  c.in = {pr.pick()};
  const Shape s = pr.shape(c.in[0]);
  const uint8_t b = pr.in().byte();
  // normalized_shape: mostly x's last 1 .. rank dims; now and then none, more
  // dims than x has, or a size x does not have.
  std::size_t k = s.empty() ? 1 : 1 + b % s.size();
  if ((b & 0x30) == 0x30) k = b & 0x40 ? 0 : s.size() + 1;
  Shape n;
  if (k <= s.size()) {
    n.assign(s.end() - static_cast<std::ptrdiff_t>(k), s.end());
  } else {
    n = s;
    n.insert(n.begin(), 1);
  }
  if ((b & 0x88) == 0x88 && !n.empty()) n[b % n.size()] += 1;
  c.p.normalized = n;
  c.p.with_weight = weight;
  if (weight) c.in.push_back(pr.pick_or_fit(n));
  c.p.with_bias = pr.in().byte() & 1;
  if (c.p.with_bias) c.in.push_back(pr.pick_or_fit(n));
  static const float eps[] = {1e-5f, 1e-5f, 1e-5f, 0.1f, 0.1f, 0.0f, -1e-3f, NAN};
  c.p.eps = eps[pr.in().byte() % 8];
}

Expect predict_layer_norm(const Shapes& s, const Params& p) {
  const Shape &x = s[0], &n = p.normalized;
  if (n.empty() || n.size() > x.size() || !std::equal(n.begin(), n.end(), x.end() - static_cast<std::ptrdiff_t>(n.size())))
    return fails_shape();
  for (std::size_t i = 1; i < s.size(); ++i)  // weight, bias
    if (s[i] != n) return fails_shape();
  if (numel(n) == 0 || !(p.eps >= 0)) return fails_shape();
  return gives(x);
}

Tensor run_layer_norm(const Tensors& t, const Params& p) {
  std::optional<Tensor> w, b;
  if (p.with_weight) w = t[1];
  if (p.with_bias) b = t.back();
  return tg::layer_norm(t[0], p.normalized, w, b, p.eps);
}

Val ref_layer_norm(const Vals& x, const Params& p, Check& c, const Val*) {
  const Val& a = *x[0];
  const std::size_t n = numel(p.normalized), rows = a.v.size() / n;
  const Val* w = p.with_weight ? x[1] : nullptr;
  const Val* b = p.with_bias ? x.back() : nullptr;
  Val r = zeros(a.shape);
  for (std::size_t row = 0; row < rows; ++row) {
    const double* xr = a.v.data() + row * n;
    double mean = 0, var = 0, largest = 1;
    for (std::size_t i = 0; i < n; ++i) mean += xr[i];
    mean /= static_cast<double>(n);
    for (std::size_t i = 0; i < n; ++i) {
      var += (xr[i] - mean) * (xr[i] - mean);
      largest = std::max(largest, std::abs(xr[i]));
    }
    var /= static_cast<double>(n);
    const double rstd = 1 / std::sqrt(var + double(p.eps));
    // float32 inputs are off by 6e-8 |x|; the slope of the gradient is ~ rstd^2,
    // so float and double can part when |x| rstd^2 is large. A row of one
    // element is exact (x - mean is 0, and so is its gradient).
    if (n > 1) c.wild |= !(largest * rstd * rstd <= 1e3);
    for (std::size_t i = 0; i < n; ++i) {
      double y = (xr[i] - mean) * rstd;
      if (w) y *= w->v[i];
      if (b) y += b->v[i];
      r.v[row * n + i] = y;
    }
  }
  return r;
}

// --- permute, tril and triu, masked_fill, gelu

// A permutation of the input's dims, some of them written negative; now and
// then a wrong one: a dim left out or one too many, a dim named twice (maybe
// once negative), a dim out of range.
void draw_permute(Program& pr, Call& c) {
  c.in = {pr.pick()};
  const int64_t r = static_cast<int64_t>(pr.shape(c.in[0]).size());
  const uint8_t b = pr.in().byte();
  std::vector<int64_t>& dims = c.p.dims;
  dims.resize(static_cast<std::size_t>(r));
  std::iota(dims.begin(), dims.end(), 0);
  for (std::size_t i = dims.size(); i > 1; --i) std::swap(dims[i - 1], dims[pr.in().byte() % i]);
  for (std::size_t i = 0; i < dims.size(); ++i)
    if ((b >> (4 + i)) & 1) dims[i] -= r;
  switch (b % 16) {
    case 0:  // too short (for a 0-d tensor: too long)
      if (r > 0) dims.pop_back(); else dims.push_back(0);
      break;
    case 1: dims.push_back(r > 0 ? dims[0] : 0); break;  // too long
    case 2:  // a dim twice, the second time maybe written the other way
      if (r > 1) dims[1] = b & 0x80 ? (dims[0] < 0 ? dims[0] + r : dims[0] - r) : dims[0];
      break;
    case 3:  // out of range, on either side
      if (r > 0) dims[b % dims.size()] = b & 0x80 ? r : -r - 1;
      break;
  }
}

Expect predict_permute(const Shapes& s, const Params& p) {
  const std::size_t r = s[0].size();
  if (p.dims.size() != r) return fails_shape();
  std::vector<bool> named(r);
  Shape out;
  for (int64_t d : p.dims) {
    if (!dim_ok(d, r) || named[axis(d, r)]) return fails_shape();
    named[axis(d, r)] = true;
    out.push_back(s[0][axis(d, r)]);
  }
  return gives(out);
}

// out[i_0, .., i_r-1] = a[j] with j[dims[k]] = i_k.
Val ref_permute(const Vals& x, const Params& p, Check&, const Val*) {
  const Val& a = *x[0];
  const std::size_t r = a.shape.size();
  Shape out(r);
  for (std::size_t k = 0; k < r; ++k) out[k] = a.shape[axis(p.dims[k], r)];
  Val y = zeros(out);
  std::vector<std::size_t> at(r);  // where in a
  for (std::size_t flat = 0; flat < y.v.size(); ++flat) {
    std::size_t f = flat;
    for (std::size_t k = r; k-- > 0;) {
      at[axis(p.dims[k], r)] = f % out[k];
      f /= out[k];
    }
    std::size_t src = 0;
    for (std::size_t d = 0; d < r; ++d) src = src * a.shape[d] + at[d];
    y.v[flat] = a.v[src];
  }
  return y;
}

// A diagonal within the matrices' sizes (at most 3) and beyond them on either
// side; seldom one at the ends of int64_t.
void draw_triangle(Program& pr, Call& c) {
  c.in = {pr.pick()};
  const uint8_t b = pr.in().byte();
  c.p.diagonal = b >= 0xFC ? (b & 1 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min()) : static_cast<int64_t>(b % 11) - 5;
}

Expect predict_triangle(const Shapes& s, const Params&) {
  return s[0].size() < 2 ? fails_shape() : gives(s[0]);
}

// Element (i, j) of each matrix kept where j - i <= diagonal (tril) or >= diagonal (triu).
template <bool lower>
Val ref_triangle(const Vals& x, const Params& p, Check&, const Val*) {
  Val y = *x[0];
  const std::size_t rows = y.shape[y.shape.size() - 2], cols = y.shape.back();
  for (std::size_t k = 0; k < y.v.size(); ++k) {
    const int64_t i = static_cast<int64_t>(k / cols % rows), j = static_cast<int64_t>(k % cols);
    if (lower ? j - i > p.diagonal : j - i < p.diagonal) y.v[k] = 0;
  }
  return y;
}

// A shape that does not broadcast with s (s itself when all its dims are 1).
Shape clash(Shape s) {
  for (std::size_t& d : s)
    if (d != 1) {
      d = d == 0 ? 2 : d + 1;
      break;
    }
  return s;
}

// The fill value: one of the scalars, or -inf (attention's mask).
float fill_from(uint8_t b) {
  return b % 9 == 8 ? -INFINITY : scalar_from(b);
}

// A mask of 0s and 1s (now and then another non-zero) that broadcasts with a;
// now and then one that does not, or any tensor the program holds.
void draw_masked_fill(Program& pr, Call& c) {
  const int a = pr.pick();
  const uint8_t b = pr.in().byte();
  const Shape s = b % 8 == 0 ? clash(pr.shape(a)) : partner(pr.shape(a), pr.in().byte());
  const int mask = b % 8 == 1 ? pr.pick() : pr.fresh_mask(s);
  c.in = {a, mask};
  c.p.s = fill_from(pr.in().byte());
  c.p.cond_moves = pr.requires_grad(mask);  // as where's condition
}

Val ref_masked_fill(const Vals& x, const Params& p, Check& c, const Val*) {
  c.exact_infinities = true;
  return binary(*x[0], *x[1], [&](double a, double m) {
    if (p.cond_moves) c.kink |= !(std::abs(m) >= margin);
    c.branches.push_back(m != 0);
    return m != 0 ? double(p.s) : a;
  });
}

Array seed_weights(const Shape& s);

// On a graph of its own, with NaN put into a wherever the mask is set: the
// filled places hold the value bit for bit and pass no gradient, the others
// hold a's value and pass the gradient on (sums of the seed weights are exact
// in float, so the gradient must be too).
void check_masked_fill(const Tensors& t, const Params& p, const Tensor&, const std::string& call) {
  const Shape as = t[0].shape(), ms = t[1].shape(), os = *broadcast(as, ms);
  Array a = t[0].value();
  const Array& m = t[1].value();
  auto filled = [&](std::size_t i) { return m.data()[source(i, os, ms)] != 0.0f; };
  for (std::size_t i = 0; i < numel(os); ++i)
    if (filled(i)) a.data()[source(i, os, as)] = NAN;
  const Array w = seed_weights(os);
  Val want = zeros(as);
  for (std::size_t i = 0; i < numel(os); ++i)
    if (!filled(i)) want.v[source(i, os, as)] += w.data()[i];
  Tensor x(a, true);
  const Tensor y = tg::masked_fill(x, Tensor(m), p.s);
  for (std::size_t i = 0; i < numel(os); ++i) {
    const float expect = filled(i) ? p.s : a.data()[source(i, os, as)];
    FUZZ_EXPECT(std::memcmp(&y.value().data()[i], &expect, sizeof(float)) == 0,
                call + ", with NaN where the mask is set: element " + std::to_string(i) + " is " +
                    std::to_string(y.value().data()[i]) + ", expected " + std::to_string(expect));
  }
  y.backward(w);
  const Val g = of(x.grad_dense());
  for (std::size_t k = 0; k < g.v.size(); ++k)
    FUZZ_EXPECT(g.v[k] == want.v[k], call + ", with NaN where the mask is set: gradient " + vals_str(g) +
                                         ", expected " + vals_str(want));
}

// "none", "tanh", the default (no argument), or a form gelu does not know.
void draw_gelu(Program& pr, Call& c) {
  c.in = {pr.pick()};
  static const char* const forms[] = {"none", "tanh", "none", "tanh", "", "erf", "Tanh", "tanh "};
  const uint8_t b = pr.in().byte();
  c.p.approximate = forms[b % 8];
  c.p.use_operator = b & 0x80;  // gelu(a) for "none"
}

Expect predict_gelu(const Shapes& s, const Params& p) {
  return p.approximate == "none" || p.approximate == "tanh" ? gives(s[0]) : fails_shape();
}

Tensor run_gelu(const Tensors& t, const Params& p) {
  return p.use_operator && p.approximate == "none" ? tg::gelu(t[0]) : tg::gelu(t[0], p.approximate);
}

double gelu_of(double x, bool tanh_form) {
  if (tanh_form) return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
  return 0.5 * x * (1 + std::erf(x / std::numbers::sqrt2));
}

Val ref_gelu(const Vals& x, const Params& p, Check&, const Val*) {
  return unary(*x[0], [t = p.approximate == "tanh"](double a) { return gelu_of(a, t); });
}

// Values to float precision, which the reference's tolerance is far too loose
// to see: within 6e-7 |x| of the formula in double (erf_fast and tanh_fast are
// within 6e-7 and 2e-7 of erf and tanh, times x / 2, plus rounding; and a few
// of float's smallest steps for a subnormal x). NaN and infinities where the
// formula gives them.
void check_gelu(const Tensors& t, const Params& p, const Tensor& out, const std::string& call) {
  const Array &x = t[0].value(), &y = out.value();
  const double tiny = 4.0 * std::numeric_limits<float>::denorm_min();
  for (std::size_t k = 0; k < x.size(); ++k) {
    const double a = x.data()[k], got = y.data()[k], want = gelu_of(a, p.approximate == "tanh");
    FUZZ_EXPECT(std::isnan(want) ? std::isnan(got) : std::isinf(want) ? got == want
                                                     : std::abs(got - want) <= 6e-7 * std::abs(a) + tiny,
                call + ": gelu(" + std::to_string(a) + ") = " + std::to_string(got) + ", in double " +
                    std::to_string(want) + " (difference " + std::to_string(got - want) + ")");
  }
}

// --- softplus, log_sigmoid, logsumexp, binary_cross_entropy_with_logits

// beta from the scalars (negative ones too); the threshold stays PyTorch's 20,
// beyond which softplus is x itself (a jump of log1p(exp(-20)) / beta, far
// below the tolerances).
double softplus_of(double a, double beta) {
  return beta * a > 20.0 ? a : std::log1p(std::exp(beta * a)) / beta;
}

double log_sigmoid_of(double a) {
  return std::min(a, 0.0) - std::log1p(std::exp(-std::abs(a)));
}

Val ref_logsumexp(const Vals& x, const Params& p, Check& c, const Val*) {
  const Val& a = *x[0];
  const std::size_t ax = axis(p.dim0, a.shape.size());
  const Split s = split(a.shape, ax);
  c.wild |= s.n == 0;  // -inf: an empty sum
  Val r = zeros(reduce_shape(a.shape, ax, p.keepdim));
  for (std::size_t o = 0; o < s.outer; ++o)
    for (std::size_t i = 0; i < s.inner; ++i) {
      double m = -INFINITY, z = 0;
      for (std::size_t j = 0; j < s.n; ++j) m = std::max(m, a.v[(o * s.n + j) * s.inner + i]);
      for (std::size_t j = 0; j < s.n; ++j) z += std::exp(a.v[(o * s.n + j) * s.inner + i] - m);
      r.v[o * s.inner + i] = std::log(z) + m;
    }
  return r;
}

// Logits and targets of one shape (targets any real number, as PyTorch takes them).
Val ref_bce_with_logits(const Vals& x, const Params& p, Check&, const Val*) {
  return reduce(binary(*x[0], *x[1], [](double a, double t) { return (1 - t) * a - log_sigmoid_of(a); }),
                p.reduction);
}

// --- conv2d, max_pool2d, avg_pool2d on small images [N, C, H, W] (or [C, H, W]);
// now and then a stride, padding, dilation, kernel or group count that does not fit.

struct Geometry {  // an input seen as [N, C, H, W], and the window's sizes
  bool batched = true;
  std::size_t n = 0, c = 0, h = 0, w = 0;
};

std::optional<Geometry> image(const Shape& s) {
  if (s.size() != 3 && s.size() != 4) return std::nullopt;
  Geometry g;
  g.batched = s.size() == 4;
  g.n = g.batched ? s[0] : 1;
  g.c = s[g.batched];
  g.h = s[s.size() - 2];
  g.w = s.back();
  if (g.c == 0 || g.h == 0 || g.w == 0) return std::nullopt;
  return g;
}

Shape image_shape(const Geometry& g, std::size_t c, std::size_t oh, std::size_t ow) {
  return g.batched ? Shape{g.n, c, oh, ow} : Shape{c, oh, ow};
}

// Stride, padding and dilation: mostly 1, 0 and 1; now and then 2, 0 or -1.
void draw_window(Program& pr, Params& p, bool pooling) {
  static const int64_t stride[] = {1, 1, 2, 0}, padding[] = {0, 0, 1, -1}, dilation[] = {1, 1, 2, 0};
  const uint8_t q = pr.in().byte(), r = pr.in().byte();
  p.win.stride = {stride[q & 3], stride[(q >> 2) & 3]};
  p.win.padding = {padding[(q >> 4) & 3], padding[(q >> 6) & 3]};
  p.win.dilation = {dilation[r & 3], dilation[(r >> 2) & 3]};
  if (!pooling) return;
  const uint8_t k = pr.in().byte();
  p.win.kernel = {1 + k % 3, 1 + (k >> 2) % 3};
  p.default_stride = k & 0x10;  // stride = kernel
  if (p.default_stride) p.win.stride = p.win.kernel;
  p.ceil_mode = k & 0x20;
  p.count_include_pad = !(k & 0x40);
}

void draw_conv2d(Program& pr, Call& c) {
  const uint8_t b = pr.in().byte(), o = pr.in().byte();
  c.p.groups = (b & 0xC0) == 0xC0 ? 3 : 1 + (b & 1);  // 3: seldom divides anything here
  const std::size_t per_group = 1u + ((b >> 1) & 1u), groups = c.p.groups == 3 ? 1 : c.p.groups;
  Shape xs{1u + ((b >> 2) & 1u), groups * per_group, 2u + ((b >> 3) & 1u), 2u + ((b >> 4) & 1u)};
  if (b & 0x20) xs.erase(xs.begin());  // no batch dim
  c.in = {pr.pick_or_fit(xs)};
  c.in.push_back(pr.pick_or_fit({groups * (1u + (o & 1u)), per_group, 1u + ((o >> 1) & 1u), 1u + ((o >> 2) & 1u)}));
  c.p.with_bias = o & 0x08;
  if (c.p.with_bias) c.in.push_back(pr.pick_or_fit({pr.shape(c.in[1]).empty() ? 1 : pr.shape(c.in[1])[0]}));
  draw_window(pr, c.p, false);
}

// Output length of a window op along one dim, or -1 when the sizes are refused.
int64_t conv_length(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
  if (k < 1 || s < 1 || p < 0 || d < 1 || d * (k - 1) + 1 > in + 2 * p) return -1;
  return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

Expect predict_conv2d(const Shapes& s, const Params& p) {
  const std::optional<Geometry> g = image(s[0]);
  const Shape& w = s[1];
  const auto groups = static_cast<std::size_t>(p.groups);
  if (!g || w.size() != 4 || w[0] == 0 || w[0] % groups != 0 || w[1] * groups != g->c) return fails_shape();
  if (p.with_bias && s[2] != Shape{w[0]}) return fails_shape();
  const int64_t oh = conv_length(static_cast<int64_t>(g->h), static_cast<int64_t>(w[2]), p.win.stride[0], p.win.padding[0],
                                 p.win.dilation[0]);
  const int64_t ow = conv_length(static_cast<int64_t>(g->w), static_cast<int64_t>(w[3]), p.win.stride[1], p.win.padding[1],
                                 p.win.dilation[1]);
  if (oh < 0 || ow < 0) return fails_shape();
  return gives(image_shape(*g, w[0], static_cast<std::size_t>(oh), static_cast<std::size_t>(ow)));
}

Tensor run_conv2d(const Tensors& t, const Params& p) {
  return tg::conv2d(t[0], t[1], p.with_bias ? std::optional<Tensor>(t[2]) : std::nullopt,
                    {.stride = {p.win.stride[0], p.win.stride[1]},
                     .padding = {p.win.padding[0], p.win.padding[1]},
                     .dilation = {p.win.dilation[0], p.win.dilation[1]},
                     .groups = p.groups});
}

// The sum over the group's channels and the kernel, taps in the padding left out.
Val ref_conv2d(const Vals& x, const Params& p, Check&, const Val*) {
  const Val &a = *x[0], &w = *x[1];
  const Geometry g = *image(a.shape);
  const Shape out = predict_conv2d({a.shape, w.shape, p.with_bias ? x[2]->shape : Shape{}}, p).out;
  const std::size_t oc = w.shape[0], cg = w.shape[1], kh = w.shape[2], kw = w.shape[3];
  const std::size_t oh = out[out.size() - 2], ow = out.back(), og = oc / static_cast<std::size_t>(p.groups);
  Val r = zeros(out);
  for (std::size_t n = 0; n < g.n; ++n)
    for (std::size_t o = 0; o < oc; ++o)
      for (std::size_t y = 0; y < oh; ++y)
        for (std::size_t xo = 0; xo < ow; ++xo) {
          double acc = p.with_bias ? x[2]->v[o] : 0.0;
          for (std::size_t ci = 0; ci < cg; ++ci)
            for (std::size_t i = 0; i < kh; ++i)
              for (std::size_t j = 0; j < kw; ++j) {
                const int64_t iy = static_cast<int64_t>(y) * p.win.stride[0] - p.win.padding[0] + static_cast<int64_t>(i) * p.win.dilation[0];
                const int64_t ix = static_cast<int64_t>(xo) * p.win.stride[1] - p.win.padding[1] + static_cast<int64_t>(j) * p.win.dilation[1];
                if (iy < 0 || ix < 0 || iy >= static_cast<int64_t>(g.h) || ix >= static_cast<int64_t>(g.w)) continue;
                const std::size_t c = o / og * cg + ci;
                acc += a.v[((n * g.c + c) * g.h + static_cast<std::size_t>(iy)) * g.w + static_cast<std::size_t>(ix)] *
                       w.v[((o * cg + ci) * kh + i) * kw + j];
              }
          r.v[((n * oc + o) * oh + y) * ow + xo] = acc;
        }
  return r;
}

void draw_pool(Program& pr, Call& c) {
  const uint8_t b = pr.in().byte();
  Shape xs{1u + (b & 1u), 1u + ((b >> 1) & 1u), 2u + ((b >> 2) & 3u), 2u + ((b >> 4) & 1u)};
  if (b & 0x20) xs.erase(xs.begin());
  c.in = {pr.pick_or_fit(xs)};
  draw_window(pr, c.p, true);
}

// Pooling's output length (PyTorch's pooling_output_shape), or -1 when refused.
int64_t pool_length(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  if (k < 1 || s < 1 || p < 0 || d < 1 || p > k / 2) return -1;
  const int64_t span = in + 2 * p - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0);
  int64_t out = (span >= 0 ? span / s : -((-span + s - 1) / s)) + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out >= 1 ? out : -1;
}

template <bool max>
Expect predict_pool(const Shapes& s, const Params& p) {
  const std::optional<Geometry> g = image(s[0]);
  if (!g) return fails_shape();
  const int64_t d0 = max ? p.win.dilation[0] : 1, d1 = max ? p.win.dilation[1] : 1;
  const int64_t oh = pool_length(static_cast<int64_t>(g->h), p.win.kernel[0], p.win.stride[0], p.win.padding[0], d0, p.ceil_mode);
  const int64_t ow = pool_length(static_cast<int64_t>(g->w), p.win.kernel[1], p.win.stride[1], p.win.padding[1], d1, p.ceil_mode);
  if (oh < 0 || ow < 0) return fails_shape();
  return gives(image_shape(*g, g->c, static_cast<std::size_t>(oh), static_cast<std::size_t>(ow)));
}

template <bool max>
Tensor run_pool(const Tensors& t, const Params& p) {
  const std::optional<tg::Size2> stride =
      p.default_stride ? std::nullopt : std::optional<tg::Size2>(tg::Size2(p.win.stride[0], p.win.stride[1]));
  const tg::Size2 kernel(p.win.kernel[0], p.win.kernel[1]), padding(p.win.padding[0], p.win.padding[1]);
  if constexpr (max)
    return tg::max_pool2d(t[0], kernel,
                          {.stride = stride, .padding = padding, .dilation = {p.win.dilation[0], p.win.dilation[1]},
                           .ceil_mode = p.ceil_mode});
  else
    return tg::avg_pool2d(t[0], kernel,
                          {.stride = stride, .padding = padding, .ceil_mode = p.ceil_mode,
                           .count_include_pad = p.count_include_pad});
}

// Each window's max (kinks: a runner-up within `margin`; a window of padding
// alone gives -inf) or average (its size with or without the padding).
template <bool max>
Val ref_pool(const Vals& x, const Params& p, Check& c, const Val*) {
  const Val& a = *x[0];
  const Geometry g = *image(a.shape);
  const Shape out = predict_pool<max>({a.shape}, p).out;
  const std::size_t oh = out[out.size() - 2], ow = out.back();
  const int64_t d0 = max ? p.win.dilation[0] : 1, d1 = max ? p.win.dilation[1] : 1;
  Val r = zeros(out);
  for (std::size_t plane = 0; plane < g.n * g.c; ++plane)
    for (std::size_t y = 0; y < oh; ++y)
      for (std::size_t xo = 0; xo < ow; ++xo) {
        const int64_t y0 = static_cast<int64_t>(y) * p.win.stride[0] - p.win.padding[0];
        const int64_t x0 = static_cast<int64_t>(xo) * p.win.stride[1] - p.win.padding[1];
        std::vector<double> taps;
        for (int64_t i = 0; i < p.win.kernel[0]; ++i)
          for (int64_t j = 0; j < p.win.kernel[1]; ++j) {
            const int64_t iy = y0 + i * d0, ix = x0 + j * d1;
            if (iy >= 0 && ix >= 0 && iy < static_cast<int64_t>(g.h) && ix < static_cast<int64_t>(g.w))
              taps.push_back(a.v[(plane * g.h + static_cast<std::size_t>(iy)) * g.w + static_cast<std::size_t>(ix)]);
          }
        double v;
        if constexpr (max) {
          c.wild |= taps.empty();
          v = taps.empty() ? -INFINITY : taps[argmax(taps, c)];
        } else {  // the window clipped to the padded input, or to the input itself
          const int64_t hh = std::min(y0 + p.win.kernel[0], static_cast<int64_t>(g.h) + p.win.padding[0]) - y0;
          const int64_t ww = std::min(x0 + p.win.kernel[1], static_cast<int64_t>(g.w) + p.win.padding[1]) - x0;
          double sum = 0;
          for (double t : taps) sum += t;
          v = sum / static_cast<double>(p.count_include_pad ? hh * ww : static_cast<int64_t>(taps.size()));
        }
        r.v[(plane * oh + y) * ow + xo] = v;
      }
  return r;
}

// --- unfold: each window of the padded image as a column, [N, C kh kw, oh ow]
// (or [C kh kw, oh ow]); the window must fit as conv2d's does.

void draw_unfold(Program& pr, Call& c) {
  draw_pool(pr, c);  // an image, a kernel of 1..3 each way and a window that now and then does not fit
}

Expect predict_unfold(const Shapes& s, const Params& p) {
  const std::optional<Geometry> g = image(s[0]);
  if (!g) return fails_shape();
  const int64_t oh = conv_length(static_cast<int64_t>(g->h), p.win.kernel[0], p.win.stride[0], p.win.padding[0],
                                 p.win.dilation[0]);
  const int64_t ow = conv_length(static_cast<int64_t>(g->w), p.win.kernel[1], p.win.stride[1], p.win.padding[1],
                                 p.win.dilation[1]);
  if (oh < 0 || ow < 0) return fails_shape();
  const auto rows = g->c * static_cast<std::size_t>(p.win.kernel[0] * p.win.kernel[1]);
  const auto cols = static_cast<std::size_t>(oh * ow);
  return gives(g->batched ? Shape{g->n, rows, cols} : Shape{rows, cols});
}

Tensor run_unfold(const Tensors& t, const Params& p) {
  return tg::unfold(t[0], {p.win.kernel[0], p.win.kernel[1]},
                    {.dilation = {p.win.dilation[0], p.win.dilation[1]},
                     .padding = {p.win.padding[0], p.win.padding[1]},
                     .stride = {p.win.stride[0], p.win.stride[1]}});
}

// cols[n][(ch kh + i) kw + j][y ow + x] = img[n][ch][y sh + i dh - ph][x sw + j dw - pw], 0 in the padding.
Val ref_unfold(const Vals& x, const Params& p, Check&, const Val*) {
  const Val& a = *x[0];
  const Geometry g = *image(a.shape);
  const Shape out = predict_unfold({a.shape}, p).out;
  const auto kh = static_cast<std::size_t>(p.win.kernel[0]), kw = static_cast<std::size_t>(p.win.kernel[1]);
  const std::size_t rows = g.c * kh * kw, cols = out.back();
  const std::size_t ow = static_cast<std::size_t>(conv_length(static_cast<int64_t>(g.w), p.win.kernel[1],
                                                               p.win.stride[1], p.win.padding[1], p.win.dilation[1]));
  Val r = zeros(out);
  for (std::size_t n = 0; n < g.n; ++n)
    for (std::size_t row = 0; row < rows; ++row)
      for (std::size_t col = 0; col < cols; ++col) {
        const std::size_t ch = row / (kh * kw), i = row / kw % kh, j = row % kw;
        const int64_t iy = static_cast<int64_t>(col / ow) * p.win.stride[0] - p.win.padding[0] +
                           static_cast<int64_t>(i) * p.win.dilation[0];
        const int64_t ix = static_cast<int64_t>(col % ow) * p.win.stride[1] - p.win.padding[1] +
                           static_cast<int64_t>(j) * p.win.dilation[1];
        if (iy < 0 || ix < 0 || iy >= static_cast<int64_t>(g.h) || ix >= static_cast<int64_t>(g.w)) continue;
        r.v[(n * rows + row) * cols + col] =
            a.v[((n * g.c + ch) * g.h + static_cast<std::size_t>(iy)) * g.w + static_cast<std::size_t>(ix)];
      }
  return r;
}

// --- adaptive_avg_pool2d: output cell (y, x) averages rows floor(y h / oh) ..
// ceil((y + 1) h / oh) and the columns likewise; an output size may be 0 (an
// empty output) and now and then is -1 (refused).

void draw_adaptive(Program& pr, Call& c) {
  const uint8_t b = pr.in().byte();
  Shape xs{1u + (b & 1u), 1u + ((b >> 1) & 1u), 1u + ((b >> 2) & 3u), 1u + ((b >> 4) & 3u)};
  if (b & 0x40) xs.erase(xs.begin());
  c.in = {pr.pick_or_fit(xs)};
  const uint8_t o = pr.in().byte();
  c.p.win.kernel = {(o & 0x0F) == 0x0F ? -1 : (o & 3), (o & 0xF0) == 0xF0 ? -1 : ((o >> 4) & 3)};
}

Expect predict_adaptive(const Shapes& s, const Params& p) {
  const std::optional<Geometry> g = image(s[0]);
  if (!g || p.win.kernel[0] < 0 || p.win.kernel[1] < 0) return fails_shape();
  return gives(image_shape(*g, g->c, static_cast<std::size_t>(p.win.kernel[0]),
                           static_cast<std::size_t>(p.win.kernel[1])));
}

Tensor run_adaptive(const Tensors& t, const Params& p) {
  return tg::adaptive_avg_pool2d(t[0], {p.win.kernel[0], p.win.kernel[1]});
}

Val ref_adaptive(const Vals& x, const Params& p, Check&, const Val*) {
  const Val& a = *x[0];
  const Geometry g = *image(a.shape);
  const auto oh = static_cast<std::size_t>(p.win.kernel[0]), ow = static_cast<std::size_t>(p.win.kernel[1]);
  Val r = zeros(image_shape(g, g.c, oh, ow));
  for (std::size_t plane = 0; plane < g.n * g.c; ++plane)
    for (std::size_t y = 0; y < oh; ++y)
      for (std::size_t xo = 0; xo < ow; ++xo) {
        const std::size_t y0 = y * g.h / oh, y1 = ((y + 1) * g.h + oh - 1) / oh;
        const std::size_t x0 = xo * g.w / ow, x1 = ((xo + 1) * g.w + ow - 1) / ow;
        double sum = 0;
        for (std::size_t i = y0; i < y1; ++i)
          for (std::size_t j = x0; j < x1; ++j) sum += a.v[(plane * g.h + i) * g.w + j];
        r.v[(plane * oh + y) * ow + xo] = sum / static_cast<double>((y1 - y0) * (x1 - x0));
      }
  return r;
}

// --- the 1-d forms: conv1d, max_pool1d, avg_pool1d, adaptive_avg_pool1d on
// [N, C, L] (or [C, L]) are the 2-d forms on [N, C, 1, L] with windows of
// height 1. The draws keep the height's sizes at kernel 1, stride 1, padding 0,
// dilation 1; the predictions and references go through the 2-d ones.

// A 1-d op's shape as the 2-d op sees it: a height of 1 before the last dim (a
// rank the 1-d op refuses becomes one the 2-d op refuses), and back.
Shape with_height(Shape s) {
  s.insert(s.end() - (s.empty() ? 0 : 1), 1);
  return s;
}
Shape without_height(Shape s) {
  s.erase(s.end() - 2);
  return s;
}

void flat_window(Params& p) {
  p.win.kernel[0] = p.win.stride[0] = p.win.dilation[0] = 1;
  p.win.padding[0] = 0;
}

void draw_conv1d(Program& pr, Call& c) {
  const uint8_t b = pr.in().byte(), o = pr.in().byte();
  c.p.groups = (b & 0xC0) == 0xC0 ? 3 : 1 + (b & 1);
  const std::size_t per_group = 1u + ((b >> 1) & 1u), groups = c.p.groups == 3 ? 1 : c.p.groups;
  Shape xs{1u + ((b >> 2) & 1u), groups * per_group, 2u + ((b >> 3) & 3u)};
  if (b & 0x20) xs.erase(xs.begin());  // no batch dim
  c.in = {pr.pick_or_fit(xs)};
  c.in.push_back(pr.pick_or_fit({groups * (1u + (o & 1u)), per_group, 1u + ((o >> 1) & 3u) % 3u}));
  c.p.with_bias = o & 0x08;
  if (c.p.with_bias) c.in.push_back(pr.pick_or_fit({pr.shape(c.in[1]).empty() ? 1 : pr.shape(c.in[1])[0]}));
  draw_window(pr, c.p, false);
  flat_window(c.p);
}

template <Expect (*predict2d)(const Shapes&, const Params&)>
Expect predict_1d(const Shapes& s, const Params& p) {
  Shapes as2d = s;
  as2d[0] = with_height(s[0]);
  if (predict2d == predict_conv2d) as2d[1] = with_height(s[1]);  // the weight; a bias stays [out]
  Expect e = predict2d(as2d, p);
  if (e.ok()) e.out = without_height(e.out);
  return e;
}

template <Val (*ref2d)(const Vals&, const Params&, Check&, const Val*)>
Val ref_1d(const Vals& x, const Params& p, Check& c, const Val*) {
  std::vector<Val> as2d;
  for (const Val* v : x) as2d.push_back(*v);
  as2d[0].shape = with_height(as2d[0].shape);
  if (ref2d == ref_conv2d) as2d[1].shape = with_height(as2d[1].shape);
  Vals xs;
  for (const Val& v : as2d) xs.push_back(&v);
  Val r = ref2d(xs, p, c, nullptr);
  r.shape = without_height(r.shape);
  return r;
}

Tensor run_conv1d(const Tensors& t, const Params& p) {
  return tg::conv1d(t[0], t[1], p.with_bias ? std::optional<Tensor>(t[2]) : std::nullopt,
                    {.stride = p.win.stride[1], .padding = p.win.padding[1], .dilation = p.win.dilation[1],
                     .groups = p.groups});
}

void draw_pool1d(Program& pr, Call& c) {
  const uint8_t b = pr.in().byte();
  Shape xs{1u + (b & 1u), 1u + ((b >> 1) & 1u), 2u + ((b >> 2) & 3u)};
  if (b & 0x20) xs.erase(xs.begin());
  c.in = {pr.pick_or_fit(xs)};
  draw_window(pr, c.p, true);
  flat_window(c.p);
}

template <bool max>
Tensor run_pool1d(const Tensors& t, const Params& p) {
  const std::optional<int64_t> stride = p.default_stride ? std::nullopt : std::optional<int64_t>(p.win.stride[1]);
  if constexpr (max)
    return tg::max_pool1d(t[0], p.win.kernel[1],
                          {.stride = stride, .padding = p.win.padding[1], .dilation = p.win.dilation[1],
                           .ceil_mode = p.ceil_mode});
  else
    return tg::avg_pool1d(t[0], p.win.kernel[1],
                          {.stride = stride, .padding = p.win.padding[1], .ceil_mode = p.ceil_mode,
                           .count_include_pad = p.count_include_pad});
}

void draw_adaptive1d(Program& pr, Call& c) {
  const uint8_t b = pr.in().byte();
  Shape xs{1u + (b & 1u), 1u + ((b >> 1) & 1u), 1u + ((b >> 2) & 3u)};
  if (b & 0x40) xs.erase(xs.begin());
  c.in = {pr.pick_or_fit(xs)};
  const uint8_t o = pr.in().byte();
  c.p.win.kernel = {1, (o & 0x0F) == 0x0F ? -1 : (o & 3)};
}

// --- binary_cross_entropy of probabilities: sigmoid(x), so that they lie in
// [0, 1]. A NaN among them is refused (PyTorch's check; the draw sees the
// operand's values). Its value is binary_cross_entropy_with_logits's; where
// |x| > 8, 1 - sigmoid(x) in float has lost too many digits for the reference.

void draw_bce(Program& pr, Call& c) {
  draw_mse(pr, c);
  c.p.nan_input = pr.has_nan(c.in[0]);
}

Expect predict_bce(const Shapes& s, const Params& p) {
  if (s[0] != s[1] || p.nan_input) return fails_shape();
  return gives(p.reduction == tg::Reduction::none ? s[0] : Shape{});
}

Tensor run_bce(const Tensors& t, const Params& p) {
  return tg::binary_cross_entropy(tg::sigmoid(t[0]), t[1], std::nullopt, p.reduction);
}

Val ref_bce(const Vals& x, const Params& p, Check& c, const Val* base) {
  for (double a : x[0]->v) c.wild |= !(std::abs(a) <= 8.0);
  return ref_bce_with_logits(x, p, c, base);
}

// --- batch_norm while training, without running statistics: each channel
// (dim 1) normalised by its mean and biased variance over the batch and every
// dim after it, then scaled and shifted by weight[c] and bias[c] when given.

void draw_batch_norm(Program& pr, Call& c) {
  c.in = {pr.pick()};
  const Shape& s = pr.shape(c.in[0]);
  const std::size_t channels = s.size() >= 2 ? s[1] : 1;
  const uint8_t b = pr.in().byte();
  c.p.with_weight = b & 1;
  c.p.with_bias = b & 2;
  if (c.p.with_weight) c.in.push_back(pr.pick_or_fit({channels}));
  if (c.p.with_bias) c.in.push_back(pr.pick_or_fit({channels}));
  static const float eps[] = {1e-5f, 1e-5f, 1e-5f, 0.1f, 0.1f, 0.0f, -1e-3f, NAN};
  c.p.eps = eps[(b >> 2) % 8];
}

Expect predict_batch_norm(const Shapes& s, const Params& p) {
  const Shape& x = s[0];
  if (x.size() < 2) return fails_shape();
  for (std::size_t i = 1; i < s.size(); ++i)  // weight, bias
    if (s[i] != Shape{x[1]}) return fails_shape();
  const std::size_t inner = numel(x) / std::max<std::size_t>(x[0] * x[1], 1);
  if (x[0] * inner <= 1 || !(p.eps >= 0)) return fails_shape();  // one value per channel, or none
  return gives(x);
}

Tensor run_batch_norm(const Tensors& t, const Params& p) {
  std::optional<Tensor> w, b;
  if (p.with_weight) w = t[1];
  if (p.with_bias) b = t.back();
  return tg::batch_norm(t[0], std::nullopt, std::nullopt, w, b, /*training=*/true, 0.1f, p.eps);
}

Val ref_batch_norm(const Vals& x, const Params& p, Check& c, const Val*) {
  const Val& a = *x[0];
  const std::size_t batch = a.shape[0], channels = a.shape[1], inner = a.v.size() / std::max<std::size_t>(batch * channels, 1);
  const Val* w = p.with_weight ? x[1] : nullptr;
  const Val* b = p.with_bias ? x.back() : nullptr;
  Val r = zeros(a.shape);
  for (std::size_t ch = 0; ch < channels; ++ch) {
    auto at = [&](std::size_t n, std::size_t i) { return (n * channels + ch) * inner + i; };
    double mean = 0, var = 0, largest = 1;
    for (std::size_t n = 0; n < batch; ++n)
      for (std::size_t i = 0; i < inner; ++i) mean += a.v[at(n, i)];
    mean /= static_cast<double>(batch * inner);
    for (std::size_t n = 0; n < batch; ++n)
      for (std::size_t i = 0; i < inner; ++i) {
        var += (a.v[at(n, i)] - mean) * (a.v[at(n, i)] - mean);
        largest = std::max(largest, std::abs(a.v[at(n, i)]));
      }
    var /= static_cast<double>(batch * inner);
    const double rstd = 1 / std::sqrt(var + double(p.eps));
    c.wild |= !(largest * rstd * rstd <= 1e3);  // as layer_norm: float and double part where this is steep
    for (std::size_t n = 0; n < batch; ++n)
      for (std::size_t i = 0; i < inner; ++i) {
        double y = (a.v[at(n, i)] - mean) * rstd;
        if (w) y *= w->v[ch];
        if (b) y += b->v[ch];
        r.v[at(n, i)] = y;
      }
  }
  return r;
}

// --- the table. `name` is what a refusal must mention; `node` names the tape
// entry of the output (for ops made of several, the last one).

const Op ops[] = {
    {"add", "add", draw_binary, predict_broadcast,
     [](const Tensors& t, const Params& p) { return p.use_operator ? t[0] + t[1] : tg::add(t[0], t[1]); },
     [](const Vals& x, const Params&, Check&, const Val*) {
       return binary(*x[0], *x[1], [](double a, double b) { return a + b; });
     }},
    {"sub", "sub", draw_binary, predict_broadcast,
     [](const Tensors& t, const Params& p) { return p.use_operator ? t[0] - t[1] : tg::sub(t[0], t[1]); },
     [](const Vals& x, const Params&, Check&, const Val*) {
       return binary(*x[0], *x[1], [](double a, double b) { return a - b; });
     }},
    {"mul", "mul", draw_binary, predict_broadcast,
     [](const Tensors& t, const Params& p) { return p.use_operator ? t[0] * t[1] : tg::mul(t[0], t[1]); },
     [](const Vals& x, const Params&, Check&, const Val*) {
       return binary(*x[0], *x[1], [](double a, double b) { return a * b; });
     }},
    {"div", "div", draw_binary, predict_broadcast,
     [](const Tensors& t, const Params& p) { return p.use_operator ? t[0] / t[1] : tg::div(t[0], t[1]); },
     [](const Vals& x, const Params&, Check& c, const Val*) {
       for (double y : x[1]->v) c.wild |= near_zero(y);
       return binary(*x[0], *x[1], [](double a, double b) { return a / b; });
     }},
    {"add_scalar", "add_scalar", draw_unary,
     predict_same,  // a + s, s + a
     [](const Tensors& t, const Params& p) { return p.use_operator ? p.s + t[0] : tg::add(t[0], p.s); },
     [](const Vals& x, const Params& p, Check&, const Val*) {
       return unary(*x[0], [s = double(p.s)](double a) { return a + s; });
     }},
    {"sub_scalar", "add_scalar", draw_unary, predict_same,  // a - s
     [](const Tensors& t, const Params& p) { return t[0] - p.s; },
     [](const Vals& x, const Params& p, Check&, const Val*) {
       // a - s is a + (-s): exact in float too
       return unary(*x[0], [s = double(-p.s)](double a) { return a + s; });
     }},
    {"rsub_scalar", "add_scalar", draw_unary, predict_same,  // s - a
     [](const Tensors& t, const Params& p) { return p.s - t[0]; },
     [](const Vals& x, const Params& p, Check&, const Val*) {
       return unary(*x[0], [s = double(p.s)](double a) { return s - a; });
     }},
    {"mul_scalar", "mul_scalar", draw_unary, predict_same,  // a * s, s * a
     [](const Tensors& t, const Params& p) { return p.use_operator ? p.s * t[0] : tg::mul(t[0], p.s); },
     [](const Vals& x, const Params& p, Check&, const Val*) {
       return unary(*x[0], [s = double(p.s)](double a) { return a * s; });
     }},
    {"div_scalar", "div_scalar", draw_unary, predict_same,  // a / s
     [](const Tensors& t, const Params& p) { return t[0] / p.s; },
     [](const Vals& x, const Params& p, Check&, const Val*) {
       return unary(*x[0], [s = double(p.s)](double a) { return a / s; });
     }},
    {"rdiv_scalar", "mul_scalar", draw_unary, predict_same,  // s / a
     [](const Tensors& t, const Params& p) { return p.s / t[0]; },
     [](const Vals& x, const Params& p, Check& c, const Val*) {
       for (double y : x[0]->v) c.wild |= near_zero(y);
       return unary(*x[0], [s = double(p.s)](double a) { return s / a; });
     }},
    {"neg", "neg", draw_unary, predict_same,
     [](const Tensors& t, const Params& p) { return p.use_operator ? -t[0] : tg::neg(t[0]); },
     [](const Vals& x, const Params&, Check&, const Val*) { return unary(*x[0], [](double a) { return -a; }); }},
    {"pow", "pow", draw_pow, predict_same,
     [](const Tensors& t, const Params& p) { return tg::pow(t[0], p.s); },
     [](const Vals& x, const Params& p, Check& c, const Val*) {
       const double e = p.s;
       for (double a : x[0]->v) {
         if (e != std::floor(e) && !(a >= pole)) c.wild = true;  // a fractional power of a negative
         if (e < 1 && e != 0 && near_zero(a)) c.wild = true;     // a pole of x^e or of its slope
       }
       return unary(*x[0], [e](double a) { return std::pow(a, e); });
     }},
    {"exp", "exp", draw_unary, predict_same,
     [](const Tensors& t, const Params&) { return tg::exp(t[0]); },
     [](const Vals& x, const Params&, Check&, const Val*) {
       return unary(*x[0], [](double a) { return std::exp(a); });
     }},
    {"log", "log", draw_unary, predict_same,
     [](const Tensors& t, const Params&) { return tg::log(t[0]); },
     [](const Vals& x, const Params&, Check& c, const Val*) {
       for (double a : x[0]->v) c.wild |= !(a >= pole);
       return unary(*x[0], [](double a) { return std::log(a); });
     }},
    {"tanh", "tanh", draw_unary, predict_same,
     [](const Tensors& t, const Params&) { return tg::tanh(t[0]); },
     [](const Vals& x, const Params&, Check&, const Val*) {
       return unary(*x[0], [](double a) { return std::tanh(a); });
     }},
    {"sigmoid", "sigmoid", draw_unary, predict_same,
     [](const Tensors& t, const Params&) { return tg::sigmoid(t[0]); },
     [](const Vals& x, const Params&, Check&, const Val*) {
       return unary(*x[0], [](double a) { return 1.0 / (1.0 + std::exp(-a)); });
     }},
    {"relu", "relu", draw_unary, predict_same,
     [](const Tensors& t, const Params&) { return tg::relu(t[0]); },
     [](const Vals& x, const Params&, Check& c, const Val*) {
       for (double a : x[0]->v) {
         c.kink |= !(std::abs(a) >= margin);
         c.branches.push_back(a > 0);
       }
       return unary(*x[0], [](double a) { return a > 0 || std::isnan(a) ? a : 0.0; });  // NaN stays
     }},
    {"abs", "abs", draw_unary, predict_same,
     [](const Tensors& t, const Params&) { return tg::abs(t[0]); },
     [](const Vals& x, const Params&, Check& c, const Val*) {
       for (double a : x[0]->v) {
         c.kink |= !(std::abs(a) >= margin);
         c.branches.push_back(a > 0);
       }
       return unary(*x[0], [](double a) { return std::abs(a); });
     }},
    {"sqrt", "sqrt", draw_unary, predict_same,
     [](const Tensors& t, const Params&) { return tg::sqrt(t[0]); },
     [](const Vals& x, const Params&, Check& c, const Val*) {
       for (double a : x[0]->v) c.wild |= !(a >= pole);  // NaN below 0, a pole of the slope at 0
       return unary(*x[0], [](double a) { return std::sqrt(a); });
     }},
    {"maximum", "maximum", draw_binary, predict_broadcast,
     [](const Tensors& t, const Params&) { return tg::maximum(t[0], t[1]); },
     [](const Vals& x, const Params&, Check& c, const Val*) {
       return binary(*x[0], *x[1], [&c](double a, double b) {
         c.kink |= !(std::abs(a - b) >= margin);  // a tie splits the gradient
         c.branches.push_back(a > b);
         return a > b ? a : b;
       });
     }},
    {"minimum", "minimum", draw_binary, predict_broadcast,
     [](const Tensors& t, const Params&) { return tg::minimum(t[0], t[1]); },
     [](const Vals& x, const Params&, Check& c, const Val*) {
       return binary(*x[0], *x[1], [&c](double a, double b) {
         c.kink |= !(std::abs(a - b) >= margin);
         c.branches.push_back(a < b);
         return a < b ? a : b;
       });
     }},
    {"matmul", "matmul", draw_matmul, predict_matmul,
     [](const Tensors& t, const Params&) { return tg::matmul(t[0], t[1]); }, ref_matmul},
    {"linear", "linear", draw_linear, predict_linear,
     [](const Tensors& t, const Params& p) {
       return tg::linear(t[0], t[1], p.with_bias ? std::optional<Tensor>(t[2]) : std::nullopt);
     },
     ref_linear},
    {"sum", "sum", draw_unary, [](const Shapes&, const Params&) { return gives({}); },
     [](const Tensors& t, const Params&) { return tg::sum(t[0]); },
     [](const Vals& x, const Params&, Check&, const Val*) { return sum_all(*x[0]); }},
    {"sum", "sum", draw_dim,
     [](const Shapes& s, const Params& p) { return predict_reduce(s, p, false); },
     [](const Tensors& t, const Params& p) { return tg::sum(t[0], p.dim0, p.keepdim); },
     [](const Vals& x, const Params& p, Check&, const Val*) {
       return sum_axis(*x[0], axis(p.dim0, x[0]->shape.size()), p.keepdim);
     }},
    {"mean", "mean", draw_unary,
     [](const Shapes& s, const Params&) { return numel(s[0]) == 0 ? fails_shape() : gives({}); },
     [](const Tensors& t, const Params&) { return tg::mean(t[0]); },
     [](const Vals& x, const Params&, Check&, const Val*) {
       return scale(sum_all(*x[0]), 1.0 / static_cast<double>(x[0]->v.size()));
     }},
    {"mean", "mean", draw_dim,
     [](const Shapes& s, const Params& p) { return predict_reduce(s, p, true); },
     [](const Tensors& t, const Params& p) { return tg::mean(t[0], p.dim0, p.keepdim); },
     [](const Vals& x, const Params& p, Check&, const Val*) {
       const std::size_t ax = axis(p.dim0, x[0]->shape.size());
       return scale(sum_axis(*x[0], ax, p.keepdim), 1.0 / static_cast<double>(x[0]->shape[ax]));
     }},
    {"max", "max", draw_dim,
     [](const Shapes& s, const Params& p) { return predict_reduce(s, p, true); },
     [](const Tensors& t, const Params& p) { return tg::max(t[0], p.dim0, p.keepdim).values; },
     [](const Vals& x, const Params& p, Check& c, const Val*) {
       return max_axis(*x[0], axis(p.dim0, x[0]->shape.size()), p.keepdim, c);
     }},
    {"softmax", "softmax", draw_dim,
     [](const Shapes& s, const Params& p) { return dim_ok(p.dim0, s[0].size()) ? gives(s[0]) : fails_shape(); },
     [](const Tensors& t, const Params& p) { return tg::softmax(t[0], p.dim0); },
     [](const Vals& x, const Params& p, Check&, const Val*) {
       return unary(log_softmax_axis(*x[0], axis(p.dim0, x[0]->shape.size())),
                    [](double a) { return std::exp(a); });
     }},
    {"log_softmax", "log_softmax", draw_dim,
     [](const Shapes& s, const Params& p) { return dim_ok(p.dim0, s[0].size()) ? gives(s[0]) : fails_shape(); },
     [](const Tensors& t, const Params& p) { return tg::log_softmax(t[0], p.dim0); },
     [](const Vals& x, const Params& p, Check&, const Val*) {
       return log_softmax_axis(*x[0], axis(p.dim0, x[0]->shape.size()));
     }},
    {"reshape", "reshape", draw_reshape, predict_reshape,
     [](const Tensors& t, const Params& p) { return tg::reshape(t[0], p.shape); },
     [](const Vals& x, const Params& p, Check&, const Val*) {
       Val r = *x[0];
       r.shape = predict_reshape({x[0]->shape}, p).out;
       return r;
     }},
    {"transpose", "transpose", draw_transpose, predict_transpose,
     [](const Tensors& t, const Params& p) { return tg::transpose(t[0], p.dim0, p.dim1); }, ref_transpose},
    {"index_select", "index_select", draw_index_select, predict_index_select,
     [](const Tensors& t, const Params& p) { return tg::index_select(t[0], p.dim0, indices(p.ids, p.ids_shape)); },
     ref_index_select},
    {"cross_entropy", "nll_loss", draw_class_loss, predict_class_loss,
     [](const Tensors& t, const Params& p) {
       return tg::cross_entropy(t[0], indices(p.ids, p.ids_shape), p.reduction);
     },
     [](const Vals& x, const Params& p, Check&, const Val*) { return ref_nll(log_softmax_axis(*x[0], 1), p); }},
    {"nll_loss", "nll_loss", draw_class_loss, predict_class_loss,
     [](const Tensors& t, const Params& p) { return tg::nll_loss(t[0], indices(p.ids, p.ids_shape), p.reduction); },
     [](const Vals& x, const Params& p, Check&, const Val*) { return ref_nll(*x[0], p); }},
    {"mse_loss", nullptr, draw_mse, predict_mse,
     [](const Tensors& t, const Params& p) { return tg::mse_loss(t[0], t[1], p.reduction); },
     [](const Vals& x, const Params& p, Check&, const Val*) {
       return reduce(binary(*x[0], *x[1], [](double a, double b) { return (a - b) * (a - b); }), p.reduction);
     }},
    {"Embedding", "embedding", draw_embedding, predict_embedding, run_embedding,
     ref_embedding},
    {"EmbeddingBag", "embedding_bag", draw_embedding_bag, predict_embedding_bag,
     run_embedding_bag, ref_embedding_bag},
    {"clamp", "clamp", draw_clamp, predict_clamp,
     [](const Tensors& t, const Params& p) { return tg::clamp(t[0], p.lo, p.hi); }, ref_clamp},
    {"where", "where", draw_where, predict_where,
     [](const Tensors& t, const Params&) { return tg::where(t[0], t[1], t[2]); }, ref_where,
     1},  // the condition gets no gradient
    {"dropout", "dropout", draw_dropout, predict_dropout, run_dropout, ref_dropout},
    {"cat", "cat", [](Program& pr, Call& c) { draw_join(pr, c, false); }, predict_cat,
     [](const Tensors& t, const Params& p) { return tg::cat(t, p.dim0); }, ref_cat},
    {"stack", "stack", [](Program& pr, Call& c) { draw_join(pr, c, true); }, predict_stack,
     [](const Tensors& t, const Params& p) { return tg::stack(t, p.dim0); }, ref_stack},
    {"narrow", "narrow", draw_narrow, predict_narrow,
     [](const Tensors& t, const Params& p) { return tg::narrow(t[0], p.dim0, p.start, p.length); }, ref_narrow},
    {"flatten", "reshape", draw_flatten, predict_flatten,
     [](const Tensors& t, const Params& p) { return tg::flatten(t[0], p.dim0, p.dim1); },
     [](const Vals& x, const Params& p, Check&, const Val*) {
       Val r = *x[0];
       r.shape = predict_flatten({x[0]->shape}, p).out;
       return r;
     }},
    {"gather", "gather", draw_gather, predict_gather,
     [](const Tensors& t, const Params& p) { return tg::gather(t[0], p.dim0, indices(p.ids, p.ids_shape)); },
     ref_gather},
    {"layer_norm", "layer_norm", draw_layer_norm<true>, predict_layer_norm, run_layer_norm,
     ref_layer_norm},  // with a weight (and a bias or not)
    {"layer_norm", "layer_norm", draw_layer_norm<false>, predict_layer_norm, run_layer_norm,
     ref_layer_norm},  // without a weight (and a bias or not)
    {"permute", "permute", draw_permute, predict_permute,
     [](const Tensors& t, const Params& p) { return tg::permute(t[0], p.dims); }, ref_permute},
    {"tril", "tril", draw_triangle, predict_triangle,
     [](const Tensors& t, const Params& p) { return tg::tril(t[0], p.diagonal); }, ref_triangle<true>},
    {"triu", "triu", draw_triangle, predict_triangle,
     [](const Tensors& t, const Params& p) { return tg::triu(t[0], p.diagonal); }, ref_triangle<false>},
    {"masked_fill", "masked_fill", draw_masked_fill, predict_broadcast,
     [](const Tensors& t, const Params& p) { return tg::masked_fill(t[0], t[1], p.s); }, ref_masked_fill,
     2, check_masked_fill},  // the mask gets no gradient
    {"gelu", "gelu", draw_gelu, predict_gelu, run_gelu, ref_gelu, 0, check_gelu},
    {"softplus", "softplus", draw_unary, predict_same,
     [](const Tensors& t, const Params& p) { return tg::softplus(t[0], p.s); },
     [](const Vals& x, const Params& p, Check&, const Val*) {
       return unary(*x[0], [beta = double(p.s)](double a) { return softplus_of(a, beta); });
     }},
    {"log_sigmoid", "log_sigmoid", draw_unary, predict_same,
     [](const Tensors& t, const Params&) { return tg::log_sigmoid(t[0]); },
     [](const Vals& x, const Params&, Check&, const Val*) { return unary(*x[0], log_sigmoid_of); }},
    {"logsumexp", "logsumexp", draw_dim,
     [](const Shapes& s, const Params& p) { return predict_reduce(s, p, false); },
     [](const Tensors& t, const Params& p) { return tg::logsumexp(t[0], p.dim0, p.keepdim); }, ref_logsumexp},
    {"binary_cross_entropy_with_logits", "binary_cross_entropy_with_logits", draw_mse,
     [](const Shapes& s, const Params& p) {
       return s[0] == s[1] ? gives(p.reduction == tg::Reduction::none ? s[0] : Shape{}) : fails_shape();
     },
     [](const Tensors& t, const Params& p) {
       return tg::binary_cross_entropy_with_logits(t[0], t[1], std::nullopt, std::nullopt, p.reduction);
     },
     ref_bce_with_logits},
    {"conv2d", "conv2d", draw_conv2d, predict_conv2d, run_conv2d, ref_conv2d},
    {"max_pool2d", "max_pool2d", draw_pool, predict_pool<true>, run_pool<true>, ref_pool<true>},
    {"avg_pool2d", "avg_pool2d", draw_pool, predict_pool<false>, run_pool<false>, ref_pool<false>},
    {"unfold", "unfold", draw_unfold, predict_unfold, run_unfold, ref_unfold},
    {"adaptive_avg_pool2d", "adaptive_avg_pool2d", draw_adaptive, predict_adaptive, run_adaptive, ref_adaptive},
    {"conv1d", "conv1d", draw_conv1d, predict_1d<predict_conv2d>, run_conv1d, ref_1d<ref_conv2d>},
    {"max_pool1d", "max_pool1d", draw_pool1d, predict_1d<predict_pool<true>>, run_pool1d<true>,
     ref_1d<ref_pool<true>>},
    {"avg_pool1d", "avg_pool1d", draw_pool1d, predict_1d<predict_pool<false>>, run_pool1d<false>,
     ref_1d<ref_pool<false>>},
    {"adaptive_avg_pool1d", "adaptive_avg_pool1d", draw_adaptive1d, predict_1d<predict_adaptive>,
     [](const Tensors& t, const Params& p) { return tg::adaptive_avg_pool1d(t[0], p.win.kernel[1]); },
     ref_1d<ref_adaptive>},
    {"binary_cross_entropy", "binary_cross_entropy", draw_bce, predict_bce, run_bce, ref_bce},
    {"batch_norm", "batch_norm", draw_batch_norm, predict_batch_norm, run_batch_norm, ref_batch_norm},
};
constexpr std::size_t num_ops = sizeof(ops) / sizeof(ops[0]);

// ------------------------------------------------------------ the driver

bool close(double got, double want, double tol) {
  return std::abs(got - want) <= tol;  // false for NaN
}

bool finite_and_tame(const Val& x, bool infinities_ok = false) {
  return std::all_of(x.v.begin(), x.v.end(),
                     [=](double a) { return std::abs(a) <= huge || (infinities_ok && std::isinf(a)); });
}

// The values of `e` after `version` writes, with the program's leaves moved by d.
const Val& Program::value(int e, std::size_t version, const std::vector<Val>& now, const Perturb& d) const {
  const Entry& E = entries_[e];
  if (version == 0) return now[e];
  const Val& written = E.values[version];
  const bool same_shape = written.shape == E.values[0].shape;
  if (E.step >= 0 && !same_shape) return written;  // a new shape: a constant
  // Same shape: the write added a constant, so what moves v0 moves this version
  // too (for a leaf with a new shape: the element the nudge is at).
  scratch_ = written;
  if (same_shape) {
    for (std::size_t i = 0; i < scratch_.v.size(); ++i)  // (an infinity that stayed put moved by 0)
      if (now[e].v[i] != E.values[0].v[i]) scratch_.v[i] += now[e].v[i] - E.values[0].v[i];
  } else if (d.leaf == e && d.k < scratch_.v.size()) {
    scratch_.v[d.k] += d.delta;
  }
  return scratch_;
}

// Every entry's first version, recomputed from the leaves moved by d.
std::vector<Val> Program::eval(const Perturb& d, std::vector<std::vector<int64_t>>* branches) const {
  std::vector<Val> now(entries_.size());
  std::vector<Val> operands;
  for (std::size_t e = 0; e < entries_.size(); ++e) {
    const Entry& E = entries_[e];
    if (E.step < 0) {
      now[e] = E.values[0];
      if (d.leaf == static_cast<int>(e) && d.k < now[e].v.size()) now[e].v[d.k] += d.delta;
      continue;
    }
    const Step& s = steps_[E.step];
    if (s.no_grad) {  // a constant: no gradient flows through it
      now[e] = E.values[0];
      continue;
    }
    operands.clear();
    operands.reserve(s.call.in.size());
    // (the output is nudged after it is computed, below)
    for (std::size_t i = 0; i < s.call.in.size(); ++i)
      operands.push_back(value(s.call.in[i], s.in_version[i], now, d));
    Vals xs;
    for (const Val& v : operands) xs.push_back(&v);
    Check c;
    now[e] = s.op->ref(xs, s.call.p, c, &E.values[0]);
    if (d.leaf == static_cast<int>(e) && d.k < now[e].v.size()) now[e].v[d.k] += d.delta;  // retain_grad
    if (branches) (*branches)[E.step] = std::move(c.branches);
  }
  return now;
}

// The steps backward() from `root` walks: its maker, and through the inputs
// that have a maker on the tape, theirs. With gradient_only, only through the
// operands a gradient flows to (not where's condition): the steps whose
// outputs get a gradient.
std::vector<int> Program::reach(int root, bool gradient_only) const {
  std::vector<bool> seen(steps_.size());
  std::vector<int> out;
  if (entries_[root].recorded) {
    seen[entries_[root].step] = true;
    out.push_back(entries_[root].step);
  }
  for (std::size_t k = 0; k < out.size(); ++k)
    for (std::size_t i = 0; i < steps_[out[k]].call.in.size(); ++i) {
      const int e = steps_[out[k]].call.in[i];
      if (gradient_only && (steps_[out[k]].op->constant_operands >> i) & 1) continue;
      if (entries_[e].recorded && !seen[entries_[e].step]) {
        seen[entries_[e].step] = true;
        out.push_back(entries_[e].step);
      }
    }
  return out;
}

// What backward() from `root` may do, by the engine's rules (core/tape.hpp),
// found from the program alone. Two mistakes are the program's to see: a graph
// released by an earlier backward(), and a gradient that does not fit a shape
// changed in place. Which values an op's backward reads is the op's own
// business, and the model keeps no list of it: it knows the values written
// since the ops whose backward runs saw them. backward() may refuse naming one
// of those, exactly (Program::justified), or run; and then it must give the
// gradients it gives with the values those ops saw put back (Program::backward).
Forecast Program::forecast(int root) const {
  Forecast f;
  auto refuse = [&f](std::string why) {
    if (f.must_refuse.empty()) f.must_refuse = std::move(why);
  };
  for (int k : reach(root))
    if (steps_[k].released) refuse(std::string("reaches '") + steps_[k].op->name + "' released by an earlier backward()");

  // Where gradients arrive, at which shapes: the root's seed, and each operand
  // of a step whose backward runs; and the versions those steps saw.
  std::map<int, std::vector<Shape>> arrivals;
  std::map<int, std::set<std::size_t>> seen;
  arrivals[root].push_back(entries_[root].values.back().shape);
  for (int k : reach(root, true)) {
    const Step& s = steps_[k];
    for (std::size_t i = 0; i < s.call.in.size(); ++i) {
      const int e = s.call.in[i];
      const Entry& E = entries_[e];
      seen[e].insert(s.in_version[i]);
      if (E.requires_grad && !((s.op->constant_operands >> i) & 1)) arrivals[e].push_back(E.values[s.in_version[i]].shape);
      if (E.values.size() - 1 != s.in_version[i])
        f.written.push_back("input " + std::to_string(i) + " of '" + s.op->name + "'");
    }
    seen[s.out].insert(0);  // its backward may read its output, as the op made it
    if (entries_[s.out].values.size() > 1) f.written.push_back(std::string("the output of '") + s.op->name + "'");
  }
  // A gradient must fit where it arrives: one shape from all uses, the shape
  // an output was made with, and the shape a leaf (or an output that retains
  // its gradient) has now and of the gradient it holds.
  for (const auto& [e, at] : arrivals) {
    const std::vector<Shape>& shapes = at;  // a name the lambda below can capture
    const Entry& E = entries_[e];
    const Shape& now = E.values.back().shape;
    const bool keeps = E.step < 0 || E.retains;
    const std::string who = "#" + std::to_string(e) + " '" + (E.step < 0 ? "leaf" : steps_[E.step].op->name) + "'";
    std::string why;
    if (std::any_of(shapes.begin(), shapes.end(), [&](const Shape& s) { return s != shapes[0]; }))
      why = "gradients reach " + who + " at two shapes";
    else if (E.step >= 0 && shapes[0] != E.values[0].shape)
      why = "a gradient reaches " + who + " at another shape than it was made with";
    else if (keeps && shapes[0] != now)
      why = "a gradient reaches " + who + " at a shape it had before a write";
    else if (keeps && E.grad_shape && *E.grad_shape != now)
      why = who + " holds a gradient of a shape it had before a write";
    if (!why.empty()) {
      f.shape_error = true;
      refuse(why);
    }
  }
  // For the run without the writes: each written entry back at the version
  // the steps saw, unless they saw it at two (then there is no such run).
  for (const auto& [e, versions] : seen) {
    const Entry& E = entries_[e];
    const std::size_t now = E.values.size() - 1;
    if (versions.size() == 1 && *versions.begin() == now) continue;
    if (versions.size() > 1) {
      f.restorable = false;
    } else if (E.values[*versions.begin()].shape == E.values[now].shape) {
      f.restore[e] = *versions.begin();
    }
  }
  return f;
}

// The number after `key` in s.
std::optional<uint64_t> number_after(const std::string& s, const std::string& key) {
  std::size_t i = s.find(key);
  if (i == std::string::npos) return std::nullopt;
  i += key.size();
  if (i >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i]))) return std::nullopt;
  uint64_t v = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) v = v * 10 + static_cast<uint64_t>(s[i++] - '0');
  return v;
}

// The text between `key` and `end` in s.
std::string text_between(const std::string& s, const std::string& key, const std::string& end) {
  const std::size_t i = s.find(key);
  if (i == std::string::npos) return {};
  const std::size_t j = s.find(end, i + key.size());
  return j == std::string::npos ? std::string() : s.substr(i + key.size(), j - i - key.size());
}

// Whether backward()'s refusal `what` names a mistake the program made, and
// names it exactly: the released entry, or the tensor written since its op ran
// (op, tape entry, input, shape, versions), or a shape that a gradient does not fit.
bool Program::justified(const std::string& what, int root, const Forecast& f) const {
  const auto entry = number_after(what, "(tape entry ");
  const std::string op = text_between(what, "op '", "'");
  auto step_of = [&](bool running) -> const Step* {
    for (int k : reach(root, running))
      if (entry && steps_[k].nodes.count(*entry) && steps_[k].nodes.at(*entry).op == op) return &steps_[k];
    return nullptr;
  };
  if (what.find(" was already released by an earlier backward()") != std::string::npos) {
    const Step* s = step_of(false);
    return s && s->released;
  }
  const auto version = number_after(what, ": version "), expected = number_after(what, ", expected ");
  if (what.find(" was modified in place after it was used by ") != std::string::npos) {
    const Step* s = step_of(true);
    const auto input = number_after(what, "backward: input ");
    if (!s || !input || !version || !expected || *input >= s->nodes.at(*entry).inputs.size()) return false;
    const int e = s->nodes.at(*entry).inputs[*input];
    if (e < 0) return false;  // made inside the op: the program cannot have written it
    const Entry& E = entries_[e];
    const std::size_t at = std::find(s->call.in.begin(), s->call.in.end(), e) - s->call.in.begin();
    return *version == E.values.size() - 1 && *expected == s->in_version[at] && *version != *expected &&
           text_between(what, " of shape ", ", was modified") == str(E.values.back().shape);
  }
  if (what.find(" was modified in place after the op ran") != std::string::npos) {
    const Step* s = step_of(true);
    return s && s->out_node == *entry && version && expected && *version == entries_[s->out].values.size() - 1 &&
           *expected == 0 && *version != 0;
  }
  if (what.find(" had shape ") != std::string::npos || what.find(" holds a gradient of shape ") != std::string::npos)
    return f.shape_error;
  return false;
}

void Program::op(const Op& op) {
  if (steps_.size() >= max_steps || entries_.size() >= max_entries) return;
  const uint8_t f = in_.byte();
  const bool no_grad = (f & 7) == 7, discard = (f & 0x18) == 0x18;
  Call c;
  op.draw(*this, c);
  Shapes shapes;
  Tensors ts;
  bool any_grad = false;
  for (int e : c.in) {
    shapes.push_back(shape(e));
    ts.push_back(entries_[e].t);
    any_grad |= entries_[e].requires_grad;
  }
  const Expect want = op.predict(shapes, c.p);
  std::vector<Array> before;
  for (const Tensor& t : ts) before.push_back(t.value());
  const std::size_t live_before = tg::Tape::current().live_count();
  const std::size_t first_node = tg::next_node_index();

  Tensor out;
  std::string what;
  Got got;
  trace("#" + std::to_string(entries_.size()) + " = " + op.name + "(...)");
  {
    std::optional<tg::NoGradGuard> guard;
    if (no_grad) guard.emplace();
    got = attempt([&] { out = op.run(ts, c.p); }, what);
  }
  ++stats.ops;
  std::string call = std::string(op.name) + " on";
  for (std::size_t i = 0; i < shapes.size(); ++i) call += " #" + std::to_string(c.in[i]) + str(shapes[i]);
  trace("#" + std::to_string(entries_.size()) + " = " + call + (no_grad ? " (no grad)" : "") +
        (discard ? " (dropped)" : "") + ": " + got_str(got) + " " + what);
  for (std::size_t i = 0; i < c.in.size(); ++i) {
    const Entry& in = entries_[c.in[i]];
    FUZZ_EXPECT(ts[i].version() == in.values.size() - 1, call + ": an input's version changed");
    FUZZ_EXPECT(ts[i].shape() == in.values.back().shape, call + ": an input's shape changed");
  }
  if (!want.ok()) {
    ++stats.refused_ops;
    FUZZ_EXPECT((got == Got::invalid_argument && want.shape_error) || (got == Got::out_of_range && want.index_error),
                call + ": expected " + (want.shape_error ? "std::invalid_argument " : "") +
                    (want.index_error ? "std::out_of_range " : "") + "but got " + got_str(got) + " " + what);
    FUZZ_EXPECT(what.find(op.name) != std::string::npos || (std::string(op.name) == "mse_loss" && what.find("mean") != std::string::npos),
                call + ": the message does not name the op: " + what);
    FUZZ_EXPECT(tg::Tape::current().live_count() == live_before, call + ": a refused call changed the tape");
    for (std::size_t i = 0; i < c.in.size(); ++i)
      FUZZ_EXPECT(same(ts[i].value(), before[i]), call + ": a refused call changed an input");
    return;
  }
  FUZZ_EXPECT(got == Got::ok, call + ": refused a valid call: " + what);
  if (want.same_tensor) {  // nothing new to model: the program holds that tensor already
    FUZZ_EXPECT(out.impl() == ts[0].impl(), call + ": did not return its input itself");
    FUZZ_EXPECT(tg::Tape::current().live_count() == live_before, call + ": returning its input changed the tape");
    FUZZ_EXPECT(same(out.value(), before[0]), call + ": returning its input changed it");
    return;
  }
  FUZZ_EXPECT(out.shape() == want.out, call + ": output shape " + str(out.shape()) + ", expected " + str(want.out));
  const bool recorded = !no_grad && any_grad;
  FUZZ_EXPECT(out.requires_grad() == recorded && out.is_leaf() == !recorded, call + ": recorded when it should not be, or not when it should");
  if (recorded && op.node)
    FUZZ_EXPECT(out.creator()->op == op.node, call + ": its tape entry is called '" + out.creator()->op + "'");

  // The reference, where the program ran.
  Step s;
  s.op = &op;
  s.no_grad = no_grad;
  s.recorded = recorded;
  if (recorded) {
    // The entries it recorded, found from its output: every one of them (tape
    // indices first_node onwards) must belong to the output's graph.
    s.out_node = out.creator()->index;
    std::vector<std::shared_ptr<tg::Node>> todo{out.creator()};
    while (!todo.empty()) {
      const std::shared_ptr<tg::Node> n = std::move(todo.back());
      todo.pop_back();
      if (s.nodes.count(n->index)) continue;
      NodeSeen& seen = s.nodes[n->index];
      seen.op = n->op;
      for (const tg::Node::Input& in : n->inputs) {
        int e = -1;
        for (std::size_t i = 0; i < ts.size(); ++i)
          if (in.tensor.is_same(ts[i])) e = c.in[i];
        seen.inputs.push_back(e);
        if (e < 0 && in.tensor.creator()) {
          FUZZ_EXPECT(in.tensor.creator()->index >= first_node, call + ": an input of its tape entries is neither an operand nor made by the op");
          todo.push_back(in.tensor.creator());
        }
      }
    }
    FUZZ_EXPECT(s.nodes.begin()->first >= first_node && s.nodes.size() == tg::next_node_index() - first_node,
                call + ": recorded " + std::to_string(tg::next_node_index() - first_node) + " tape entries, " +
                    std::to_string(s.nodes.size()) + " of them in its output's graph");
  } else {
    FUZZ_EXPECT(tg::next_node_index() == first_node, call + ": recorded a tape entry without grad");
  }
  s.call = std::move(c);
  Vals xs;
  bool wild = false;
  for (int e : s.call.in) {
    s.in_version.push_back(entries_[e].values.size() - 1);
    xs.push_back(&entries_[e].values.back());
    wild |= entries_[e].wild;
  }
  Check chk;
  Val want_val = op.ref(xs, s.call.p, chk, nullptr);
  s.kink = chk.kink;
  s.branches = std::move(chk.branches);
  wild |= chk.wild || !finite_and_tame(want_val, chk.exact_infinities);
  if (!wild) {
    // float32 against double: relative to the output and the inputs' finite
    // scale (an add of large inputs can cancel); an infinity (masked_fill's)
    // exactly.
    double scale = 1;
    for (const Val* x : xs)
      for (double a : x->v)
        if (std::isfinite(a)) scale = std::max(scale, std::abs(a));
    const Val got_val = of(out.value());
    for (std::size_t i = 0; i < want_val.v.size(); ++i)
      FUZZ_EXPECT(std::isinf(want_val.v[i]) ? got_val.v[i] == want_val.v[i]
                                            : close(got_val.v[i], want_val.v[i], 1e-3 * (scale + std::abs(want_val.v[i]))),
                  call + ": value " + vals_str(got_val) + ", reference " + vals_str(want_val));
  }
  if (op.also) op.also(ts, s.call.p, out, call);

  trace("  tapegrad " + vals_str(of(out.value())) + ", reference " + vals_str(want_val) + (wild ? " (wild)" : ""));
  Entry e;
  e.step = static_cast<int>(steps_.size());
  e.requires_grad = e.recorded = recorded;
  e.wild = wild;
  e.values.push_back(std::move(want_val));
  e.arrays.push_back(out.value());
  e.impl = out.impl();
  if (discard)
    e.held = false;  // made and dropped at once: its graph must go too
  else
    e.t = std::move(out);
  s.out = static_cast<int>(entries_.size());
  steps_.push_back(std::move(s));
  entries_.push_back(std::move(e));
}

// An in-place write to a held tensor: copy_ (with and without NoGradGuard, of
// the right shape or not), or a write through value_mut() (a new shape, one
// element, or nothing changed at all).
void Program::write() {
  const int e = pick();
  Entry& E = entries_[e];
  Tensor& t = E.t;
  const uint8_t kind = in_.byte() % 6;
  Shape s = t.shape();
  if (kind == 3) {  // a new shape
    s = draw_shape();
    if (s == t.shape()) s.push_back(2);
  } else if (kind == 2) {
    s.push_back(1);  // copy_ from the wrong shape
  }
  Array src = xt::empty<float>(s);
  for (std::size_t k = 0; k < src.size(); ++k) src.data()[k] = leaf_value(in_.byte(), k);
  const Array before = t.value();
  const uint64_t version = t.version();
  // The result of an op that PyTorch answers with a view is a copy here, and
  // refuses every write (after copy_'s own checks of requires_grad and shape).
  static const std::set<std::string> views = {"reshape", "transpose", "permute", "flatten", "narrow"};
  const bool view = E.step >= 0 && views.count(steps_[E.step].op->name) > 0;
  const uint8_t element = in_.byte();
  std::string what;
  Got got = Got::ok;
  Got want = view ? Got::logic_error : Got::ok;
  switch (kind) {
    case 0: {
      tg::NoGradGuard guard;
      got = attempt([&] { t.copy_(src); }, what);
      break;
    }
    case 1:  // a tensor that requires grad may only be overwritten under NoGradGuard
      got = attempt([&] { t.copy_(src); }, what);
      if (t.requires_grad()) want = Got::logic_error;
      break;
    case 2: {
      tg::NoGradGuard guard;
      got = attempt([&] { t.copy_(src); }, what);
      want = Got::invalid_argument;
      break;
    }
    case 3: got = attempt([&] { t.value_mut() = src; }, what); break;
    case 4: got = attempt([&] { src = t.value_mut(); }, what); break;  // touched, not changed: still a write
    case 5:
      got = attempt([&] {
        if (t.numel() > 0) t.value_mut().data()[element % t.numel()] += 0.5f;
        src = t.value();
        if (t.numel() == 0) t.value_mut();
      }, what);
      break;
  }
  ++stats.writes;
  trace("write of kind " + std::to_string(kind) + " to #" + std::to_string(e) + ", shape " + str(s) + ": " +
        got_str(got) + " " + what);
  FUZZ_EXPECT(got == want, std::string("write of kind ") + std::to_string(kind) + ": expected " + got_str(want) +
                               ", got " + got_str(got) + " " + what);
  if (got != Got::ok) {
    FUZZ_EXPECT(what.find("copy_") != std::string::npos, "a refused write does not say so: " + what);
    if (view && want == Got::logic_error && !(kind == 1 && t.requires_grad()))
      FUZZ_EXPECT(what.find(std::string("the result of ") + steps_[E.step].op->name) != std::string::npos,
                  "a refused write into a view's copy does not name the op: " + what);
    FUZZ_EXPECT(t.version() == version && same(t.value(), before), "a refused write changed the tensor");
    return;
  }
  FUZZ_EXPECT(t.version() == version + 1, "an in-place write did not bump the version by one");
  FUZZ_EXPECT(same(t.value(), src), "an in-place write did not write");
  Val v = of(src);
  E.wild |= !finite_and_tame(v);
  E.values.push_back(std::move(v));
  E.arrays.push_back(std::move(src));
}

void Program::drop() {
  const int e = pick();
  trace("drop #" + std::to_string(e));
  Entry& E = entries_[e];
  E.t = Tensor();
  E.held = false;
}

// detach(): a new leaf with the values, which may then require grad.
void Program::detach() {
  if (entries_.size() >= max_entries) return;
  const int from = pick();
  const bool requires_grad = in_.byte() & 1;
  if (requires_grad && leaf_elements_ + entries_[from].t.numel() > max_leaf_elements) return;
  Entry e;
  e.t = entries_[from].t.detach();
  FUZZ_EXPECT(e.t.is_leaf() && !e.t.requires_grad() && same(e.t.value(), entries_[from].t.value()), "detach()");
  if (requires_grad) {
    e.t.set_requires_grad(true);
    leaf_elements_ += e.t.numel();
  }
  e.impl = e.t.impl();
  e.requires_grad = requires_grad;
  // The reference's value of the source, not the float32 one: like an output
  // made under NoGradGuard, a detached copy must equal its source exactly in
  // the reference as it does in tapegrad. Rounded to float32, mse_loss(x.detach(), x)
  // would have the gradient 2 (float(x) - x) dx in the reference (rounding
  // noise times dx, as large as 10^-2 for values near 10^3) and 0 in tapegrad.
  e.values.push_back(entries_[from].values.back());
  e.arrays.push_back(e.t.value());
  trace("#" + std::to_string(entries_.size()) + " = #" + std::to_string(from) + ".detach()" +
        (requires_grad ? ", requires grad" : ""));
  e.wild = entries_[from].wild || !finite_and_tame(e.values[0]);
  entries_.push_back(std::move(e));
}

void Program::zero_grad() {
  const int e = pick();
  trace("#" + std::to_string(e) + ".zero_grad()");
  Entry& E = entries_[e];
  E.t.zero_grad();
  FUZZ_EXPECT(E.t.grad().empty(), "zero_grad() left a gradient");
  E.grad.reset();
  E.grad_shape.reset();
  E.grad_known = true;
}

// retain_grad(): an output keeps the gradient backward() passes through it.
// Only for tensors that require grad.
void Program::retain_grad() {
  const int e = pick();
  Entry& E = entries_[e];
  std::string what;
  const Got got = attempt([&] { E.t.retain_grad(); }, what);
  trace("#" + std::to_string(e) + ".retain_grad(): " + got_str(got) + " " + what);
  FUZZ_EXPECT(got == (E.requires_grad ? Got::ok : Got::logic_error),
              std::string("retain_grad() on a tensor that ") + (E.requires_grad ? "requires" : "does not require") +
                  " grad: " + got_str(got) + " " + what);
  if (got == Got::ok && E.step >= 0) E.retains = true;
}

// A refusal without op names and numbers: "reaches 'mul' released by an earlier
// backward()" counts as "reaches released by an earlier backward()".
std::string refusal_kind(const std::string& why) {
  std::string out;
  bool quoted = false;
  for (char c : why.substr(0, why.find(" ("))) {
    if (c == '\'') quoted = !quoted;
    if (quoted || c == '\'' || std::isdigit(static_cast<unsigned char>(c)) || (c == ' ' && !out.empty() && out.back() == ' '))
      continue;
    out += c;
  }
  return out;
}

Array seed_weights(const Shape& s) {
  Array w = xt::empty<float>(s);
  for (std::size_t k = 0; k < w.size(); ++k)
    w.data()[k] = (k % 2 ? -1.0f : 1.0f) * (0.5f + 0.25f * static_cast<float>(k % 5));
  return w;
}

std::optional<Val> grad_of(const tg::Grad& g) {
  if (g.empty()) return std::nullopt;
  if (g.is_sparse()) g.sparse().check("fuzz");  // coalesced, in range
  return of(g.is_dense() ? g.dense() : g.sparse().to_dense());
}

void Program::backward() {
  if (backwards_ >= max_backwards) return;
  ++backwards_;
  const uint8_t f = in_.byte();
  const bool retain = f & 1;
  // 0: implied for a one-element root, else w; 1: implied; 15: a gradient of another shape; else w
  const int seed_kind = (f >> 1) % 16;
  // Mostly a root that requires grad (the others only test one refusal).
  int root = pick();
  if (!(f & 0x80) && !entries_[root].requires_grad)
    for (std::size_t e = entries_.size(); e-- > 0;)
      if (entries_[e].held && entries_[e].requires_grad) {
        root = static_cast<int>(e);
        break;
      }
  Entry& R = entries_[root];
  const Shape rs = R.t.shape();
  std::optional<Array> seed;  // none: a loss, backward() without a gradient
  if (seed_kind == 15) {
    Shape wrong = rs;
    wrong.push_back(2);
    seed = seed_weights(wrong);
  } else if (seed_kind > 1 || (seed_kind == 0 && numel(rs) != 1)) {
    seed = seed_weights(rs);
  }

  // What backward() must do, by docs/errors.md's table; with values written since
  // the ops saw them (and no other mistake), it may run or refuse.
  std::string why;
  Got want = Got::ok;
  Forecast fc;
  bool either = false;
  if (!R.requires_grad) {
    want = Got::logic_error;
    why = "the root does not require grad";
  } else if (seed ? tg::Shape(seed->shape().begin(), seed->shape().end()) != rs : numel(rs) != 1) {
    want = Got::invalid_argument;
    why = "a seed of the wrong shape (or none for a tensor of " + str(rs) + ")";
  } else {
    fc = forecast(root);
    if (!fc.must_refuse.empty()) {
      want = Got::logic_error;
      why = fc.must_refuse;
    } else if (!fc.written.empty()) {
      either = true;
      why = "written since the op ran: " + fc.written[0];
    }
  }
  // What backward() adds into: the leaves of the graph, and the outputs it
  // walks that retain their gradient; both only where a gradient flows (a leaf
  // reached only through where's condition gets none, as in PyTorch, where an
  // op's undefined gradient leaves .grad alone).
  std::vector<int> leaves;
  const std::vector<int> walked = reach(root);
  auto add = [&](int e) {
    if (std::find(leaves.begin(), leaves.end(), e) == leaves.end()) leaves.push_back(e);
  };
  if (R.step < 0) add(root);
  for (int k : reach(root, true)) {
    if (entries_[steps_[k].out].retains) add(steps_[k].out);
    for (std::size_t i = 0; i < steps_[k].call.in.size(); ++i) {
      const int e = steps_[k].call.in[i];
      if (!((steps_[k].op->constant_operands >> i) & 1) && entries_[e].step < 0 && entries_[e].requires_grad) add(e);
    }
  }

  // Every entry still alive, dropped or not, kept alive until the gradients are compared.
  std::vector<std::shared_ptr<tg::TensorImpl>> alive;
  for (const Entry& E : entries_) alive.push_back(E.impl.lock());
  std::vector<std::optional<Val>> grads_before;
  for (std::size_t e = 0; e < entries_.size(); ++e)
    grads_before.push_back(alive[e] ? grad_of(alive[e]->grad) : std::nullopt);
  const std::size_t live_before = tg::Tape::current().live_count();
  const std::string call = "backward() from " + std::string(R.step < 0 ? "a leaf" : steps_[R.step].op->name) +
                           " " + str(rs) + (retain ? " (retain_graph)" : "");

  // The run without the writes: the written tensors hold again the values the
  // ops saw (their versions stay), backward() runs with retain_graph, and every
  // gradient is put back. Whether backward() refuses cannot depend on values;
  // and when it runs, its gradients must not either: a backward that read a
  // written value without refusing gives other gradients with the writes.
  struct Outcome {
    Got got;
    std::string what;
    std::vector<std::optional<Val>> grads;  // of every live entry, after
  };
  std::optional<Outcome> without;
  if (either && fc.restorable) {
    std::vector<std::pair<std::shared_ptr<tg::TensorImpl>, Array>> written;  // and their values now
    for (const auto& [e, version] : fc.restore) {
      std::shared_ptr<tg::TensorImpl> impl = entries_[e].impl.lock();
      if (!impl || same(impl->value, entries_[e].arrays[version])) continue;
      written.emplace_back(impl, impl->value);
      impl->value = entries_[e].arrays[version];
    }
    if (!written.empty()) {
      std::vector<tg::Grad> grads;
      for (const auto& impl : alive) grads.push_back(impl ? impl->grad : tg::Grad());
      Outcome o;
      o.got = attempt([&] { R.t.backward(seed, true); }, o.what);
      for (std::size_t e = 0; e < alive.size(); ++e) {
        o.grads.push_back(alive[e] ? grad_of(alive[e]->grad) : std::nullopt);
        if (alive[e]) alive[e]->grad = std::move(grads[e]);
      }
      for (auto& [impl, v] : written) impl->value = std::move(v);
      trace("  with the values the ops saw: " + std::string(got_str(o.got)) + " " + o.what);
      without = std::move(o);
      ++stats.runs_without_writes;
    }
  }

  std::string what;
  trace("backward from #" + std::to_string(root) + "...");
  const Got got = attempt([&] { R.t.backward(seed, retain); }, what);
  ++stats.backwards;
  trace("backward from #" + std::to_string(root) + (retain ? " (retain_graph)" : "") + ", expected " +
        (either ? "either" : got_str(want)) + (why.empty() ? "" : " (" + why + ")") + ": " + got_str(got) + " " +
        what);
  if (either) {
    ++(got == Got::ok ? stats.written_ran : stats.written_refused);
    FUZZ_EXPECT(got == Got::ok || got == Got::logic_error,
                call + ": expected no exception or std::logic_error (" + why + "), got " + got_str(got) + " " + what);
  } else {
    FUZZ_EXPECT(got == want, call + ": expected " + got_str(want) + (why.empty() ? "" : " (" + why + ")") +
                                 ", got " + got_str(got) + " " + what);
  }
  if (got == Got::logic_error && R.requires_grad)
    FUZZ_EXPECT(justified(what, root, fc), call + ": the refusal does not name a mistake of the program exactly (" +
                                              (why.empty() ? "the model sees none" : why) + "): " + what);
  if (without) {
    FUZZ_EXPECT(got == without->got && what == without->what,
                call + ": " + got_str(got) + " " + what + ", but with the values the ops saw put back: " +
                    got_str(without->got) + " " + without->what);
    for (std::size_t e = 0; e < entries_.size() && got == Got::ok; ++e) {
      const std::optional<Val> now = alive[e] ? grad_of(alive[e]->grad) : std::nullopt;
      const std::optional<Val>& then = without->grads[e];
      FUZZ_EXPECT(now.has_value() == then.has_value() && (!now || (now->shape == then->shape && same(now->v, then->v))),
                  call + ": the gradient of #" + std::to_string(e) + " depends on values written after the ops " +
                      "saw them (" + why + "), and backward() did not refuse: " + (now ? vals_str(*now) : "none") +
                      ", with the values put back " + (then ? vals_str(*then) : "none"));
    }
  }
  // The others (all of them after a refusal) keep their gradient bit for bit.
  for (std::size_t e = 0; e < entries_.size(); ++e) {
    if (got == Got::ok && std::find(leaves.begin(), leaves.end(), static_cast<int>(e)) != leaves.end()) continue;
    const std::optional<Val> now = alive[e] ? grad_of(alive[e]->grad) : std::nullopt;
    FUZZ_EXPECT(now.has_value() == grads_before[e].has_value() &&
                    (!now || (now->shape == grads_before[e]->shape && same(now->v, grads_before[e]->v))),
                call + ": the gradient of a tensor out of the graph changed");
  }
  if (got != Got::ok) {
    ++stats.refused_backwards;
    ++stats.refusals[!either ? refusal_kind(why)
                     : what.find("after the op ran") != std::string::npos
                         ? "(the engine's) an output written since the op ran, which its backward reads"
                         : "(the engine's) an input written since the op ran, which its backward reads"];
    FUZZ_EXPECT(what.find("backward") != std::string::npos, call + ": the message does not say backward: " + what);
    FUZZ_EXPECT(tg::Tape::current().live_count() == live_before, call + ": a refused backward changed the tape");
    return;
  }
  if (!retain)
    for (int k : walked) steps_[k].released = true;

  // The gradient of L = sum(w * root) by central differences, where they can
  // be trusted: no pole, NaN or huge value, and no kink on the way.
  bool smooth = !R.wild && finite_and_tame(R.values.back());  // (masked_fill's -inf is not wild)
  for (int k : walked) smooth &= !steps_[k].kink && !entries_[steps_[k].out].wild;
  for (int e : leaves) smooth &= !entries_[e].wild;
  const Array w = seed ? *seed : Array(xt::ones<float>(rs));
  const std::size_t root_version = R.values.size() - 1;
  auto loss = [&](const Perturb& d, std::vector<std::vector<int64_t>>* branches) {
    const std::vector<Val> now = eval(d, branches);
    const Val& y = value(root, root_version, now, d);
    double l = 0;
    for (std::size_t i = 0; i < y.v.size(); ++i) l += y.v[i] * w.data()[i];
    return l;
  };
  std::vector<Val> numeric;
  double fd_gap = 0, fd_size = 1;  // the largest |D(2h) - D(h)|, and of the gradients (at least 1)
  std::vector<std::vector<int64_t>> branches(steps_.size());
  for (std::size_t i = 0; i < leaves.size() && smooth; ++i) {
    const int e = leaves[i];
    Val g = zeros(entries_[e].values[entries_[e].step < 0 ? entries_[e].values.size() - 1 : 0].shape);
    for (std::size_t k = 0; k < g.v.size() && smooth; ++k) {
      double d[2];  // central differences with steps h and 2h
      for (int j = 0; j < 2; ++j) {
        const double h = fd_step * (1 + j);
        const double lp = loss({e, k, h}, &branches);
        for (int s : walked) smooth &= branches[s] == steps_[s].branches;  // the same side of every kink
        const double lm = loss({e, k, -h}, &branches);
        for (int s : walked) smooth &= branches[s] == steps_[s].branches;
        d[j] = (lp - lm) / (2 * h);
      }
      g.v[k] = (4 * d[0] - d[1]) / 3;
      fd_gap = std::max(fd_gap, std::abs(d[1] - d[0]));
      fd_size = std::max(fd_size, std::abs(g.v[k]));
    }
    numeric.push_back(std::move(g));
  }
  // Truncation that large means the higher terms may not be small either.
  if (smooth && fd_gap > 1e-4 * fd_size) {
    smooth = false;
    ++stats.steep_backwards;
  }
  if (smooth) ++stats.checked_backwards;

  for (std::size_t i = 0; i < leaves.size(); ++i) {
    Entry& L = entries_[leaves[i]];
    if (!L.grad_shape) L.grad_shape = L.values.back().shape;
    if (!smooth) {
      L.grad_known = false;
      continue;
    }
    if (!L.grad_known) continue;
    if (!L.grad)
      L.grad = numeric[i];
    else if (L.grad->shape == numeric[i].shape)
      for (std::size_t k = 0; k < L.grad->v.size(); ++k) L.grad->v[k] += numeric[i].v[k];
    else
      L.grad_known = false;
  }
  // Compare, on the scale of the largest gradient (float32 sums can cancel).
  double scale = 1;
  for (int e : leaves)
    if (entries_[e].grad_known && entries_[e].grad)
      for (double a : entries_[e].grad->v) scale = std::max(scale, std::abs(a));
  for (int e : leaves) {
    const Entry& L = entries_[e];
    if (!L.grad_known || !L.grad || !alive[e]) continue;
    const std::optional<Val> got_grad = grad_of(alive[e]->grad);
    FUZZ_EXPECT(got_grad.has_value(), call + ": a tensor in the graph got no gradient");
    FUZZ_EXPECT(got_grad->shape == L.grad->shape,
                call + ": gradient of shape " + str(got_grad->shape) + " for a tensor of shape " + str(L.grad->shape));
    for (std::size_t k = 0; k < L.grad->v.size(); ++k) {
      ++stats.checked_elements;
      FUZZ_EXPECT(close(got_grad->v[k], L.grad->v[k], 1e-3 * scale + 1e-2 * std::abs(L.grad->v[k])),
                  call + ": gradient of #" + std::to_string(e) + " " + vals_str(*got_grad) + ", central differences " +
                      vals_str(*L.grad));
    }
  }
}

// The tape holds a node for exactly the live recorded tensors of the model: a
// tensor lives while the program holds it or a live, unreleased node has it
// as an input.
void Program::check_tape() {
  std::vector<bool> alive(entries_.size());
  for (std::size_t e = 0; e < entries_.size(); ++e) alive[e] = entries_[e].held;
  for (std::size_t k = steps_.size(); k-- > 0;) {
    const Step& s = steps_[k];
    if (alive[s.out] && s.recorded && !s.released)
      for (int e : s.call.in) alive[e] = true;
  }
  const auto live = tg::Tape::current().live_entries();
  auto same = [](const std::weak_ptr<tg::TensorImpl>& a, const std::weak_ptr<tg::TensorImpl>& b) {
    return !a.owner_before(b) && !b.owner_before(a);
  };
  bool any = false;
  for (std::size_t e = 0; e < entries_.size(); ++e) {
    const Entry& E = entries_[e];
    if (E.held) FUZZ_EXPECT(E.t.version() == E.values.size() - 1, "a version differs from the count of writes");
    if (E.step < 0) continue;
    const bool want = alive[e] && E.recorded && !steps_[E.step].released;
    any |= want;
    const bool on_tape = std::any_of(live.begin(), live.end(), [&](const auto& n) { return same(n->output, E.impl); });
    FUZZ_EXPECT(on_tape == want, std::string("the tape ") + (on_tape ? "still holds" : "lost") + " the node of a " +
                                     steps_[E.step].op->name + (alive[e] ? " output still in use" : " output nobody uses"));
  }
  FUZZ_EXPECT(any || live.empty(), "nodes left on the tape with no live graph");
}

void Program::run() {
  ++stats.programs;
  const std::size_t leaves = 1 + in_.byte() % 3;
  for (std::size_t i = 0; i < leaves; ++i) fresh(draw_shape());
  for (std::size_t a = 0; a < max_actions && !in_.empty(); ++a) {
    const uint8_t b = in_.byte();
    if (b < 150)
      op(ops[b % num_ops]);
    else if (b < 178)
      write();
    else if (b < 202)
      backward();
    else if (b < 220)
      drop();
    else if (b < 228)
      zero_grad();
    else if (b < 235)
      retain_grad();
    else
      detach();
    check_tape();
  }
  if (backwards_ == 0) {
    backward();
    check_tape();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  fuzz::Bytes in(data, size);
  {
    Program program(in);
    program.run();
  }
  FUZZ_EXPECT(tg::Tape::current().live_count() == 0, "nodes left on the tape after the program's tensors are gone");
  return 0;
}
