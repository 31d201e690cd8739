// The local rule of every op's backward, in one table keyed by the op's name.
//
// A rule says what an op adds to each input's gradient, given the gradient
// `grad` that reached its output (y): tanh's is x.grad += grad · (1 - y²).
// worked() writes one element of that with the numbers of a backward step
// plugged in, computed here from the node's saved inputs and output, not taken
// from the gradient the op's closure produced: tests/test_rules.cpp holds the
// two equal for every op, so a rule cannot drift from the code. What the tape
// does not keep (a convolution's stride and padding, a pool's kernel, a norm's
// eps, the reduction of a loss) is read back from the values, each reading
// checked against the op's output.
//
// This file holds the table, the elementwise rules and the public functions;
// the other rules are worked out in the files of their op family
// (rules_math.cpp, rules_lookups.cpp, rules_windows.cpp, rules_norms.cpp),
// with what they share in rules_common.hpp.
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>

#include "rules_common.hpp"

namespace tg::debug::rules {

namespace {

// ------------------------------------------------------------ elementwise rules
//
// y[j] = f(a[j], b[j], ...) with broadcasting: input i's element k gets
// sum over the output elements j that read it of term(j).

using TermAt = std::function<std::optional<Term>(const Ctx&, std::size_t j, std::size_t i)>;

std::optional<Worked> elementwise(const Ctx& c, std::size_t i, std::size_t k, const TermAt& term) {
  const auto& out = c.n.output_shape;
  const auto& in = c.n.input_shape(i);
  std::vector<Term> terms;
  const std::size_t size = c.g.size();
  for (std::size_t j = 0; j < size; ++j) {
    if (source_of(j, out, in) != k) continue;
    std::optional<Term> t = term(c, j, i);
    if (!t) return std::nullopt;
    terms.push_back(std::move(*t));
  }
  return sum_of(std::move(terms));
}

// The value input i holds at output element j (broadcast).
double at(const Ctx& c, std::size_t i, std::size_t j) {
  return c.x(i).data()[source_of(j, c.n.output_shape, c.n.input_shape(i))];
}

// A scalar an op was given (mul_scalar's s) read back from its values: y / x at
// an element where x is not 0. Empty when every x is 0.
std::optional<double> ratio(const Array& num_of, const Array& den_of) {
  for (std::size_t k = 0; k < den_of.size(); ++k)
    if (den_of.data()[k] != 0 && std::isfinite(den_of.data()[k]) && std::isfinite(num_of.data()[k]))
      return static_cast<double>(num_of.data()[k]) / den_of.data()[k];
  return std::nullopt;
}

// ------------------------------------------------------------ the table

struct Entry {
  std::vector<RuleInput> inputs;  // one per input slot; the last repeats for any further ones
  Plug plug;
  bool by_rows = false;  // input 0 worked per row (lookups), k a row
};

Plug unary(std::function<std::optional<Term>(const Ctx&, std::size_t j)> f) {
  return [f](const Ctx& c, std::size_t i, std::size_t k) {
    return elementwise(c, i, k, [f](const Ctx& c, std::size_t j, std::size_t) { return f(c, j); });
  };
}
Plug binary(TermAt f) {
  return [f](const Ctx& c, std::size_t i, std::size_t k) { return elementwise(c, i, k, f); };
}

const std::map<std::string, Entry>& table() {
  static const std::map<std::string, Entry> t = [] {
    std::map<std::string, Entry> m;
    // ----- elementwise, inputs broadcast (a broadcast input sums its terms)
    m["add"] = {{{"a", "grad"}, {"b", "grad"}}, binary([](const Ctx& c, std::size_t j, std::size_t) {
                  return std::optional<Term>(just(c.gv(j)));
                })};
    m["sub"] = {{{"a", "grad"}, {"b", "-grad"}}, binary([](const Ctx& c, std::size_t j, std::size_t i) {
                  return std::optional<Term>(i == 0 ? just(c.gv(j)) : Term{"-" + par(c.gv(j)), "", -c.gv(j)});
                })};
    m["mul"] = {{{"a", "grad · b"}, {"b", "grad · a"}},
                binary([](const Ctx& c, std::size_t j, std::size_t i) {
                  const double other = at(c, 1 - i, j);
                  return std::optional<Term>({num(c.gv(j)) + " · " + par(other), "", c.gv(j) * other});
                })};
    m["div"] = {{{"a", "grad / b"}, {"b", "-grad · a / b²"}},
                binary([](const Ctx& c, std::size_t j, std::size_t i) {
                  const double a = at(c, 0, j), b = at(c, 1, j), g = c.gv(j);
                  if (i == 0) return std::optional<Term>({num(g) + " / " + par(b), "", g / b});
                  return std::optional<Term>(
                      {"-" + par(g) + " · " + par(a) + " / " + par(b) + "²", "", -g * (a / b) / b});
                })};
    m["neg"] = {{{"x", "-grad"}}, unary([](const Ctx& c, std::size_t j) {
                  return std::optional<Term>({"-" + par(c.gv(j)), "", -c.gv(j)});
                })};
    m["add_scalar"] = {{{"x", "grad"}},
                       unary([](const Ctx& c, std::size_t j) { return std::optional<Term>(just(c.gv(j))); })};
    m["mul_scalar"] = {{{"x", "grad · s"}}, unary([](const Ctx& c, std::size_t j) -> std::optional<Term> {
                         const auto s = ratio(c.y(), c.x(0));  // s = y / x
                         if (!s) return std::nullopt;
                         return Term{num(c.gv(j)) + " · " + par(*s), "", c.gv(j) * *s};
                       })};
    m["div_scalar"] = {{{"x", "grad / s"}}, unary([](const Ctx& c, std::size_t j) -> std::optional<Term> {
                         const auto s = ratio(c.x(0), c.y());  // s = x / y
                         if (!s) return std::nullopt;
                         return Term{num(c.gv(j)) + " / " + par(*s), "", c.gv(j) / *s};
                       })};
    m["pow"] = {
        {{"x", "grad · p · x^(p - 1)"}}, unary([](const Ctx& c, std::size_t j) -> std::optional<Term> {
          // p read back from the values: log y / log x where x > 0 and x != 1
          std::optional<double> p;
          double best = 0;
          for (std::size_t q = 0; q < c.x(0).size(); ++q) {
            const double x = c.x(0).data()[q], y = c.y().data()[q];
            if (x > 0 && y > 0 && std::isfinite(x) && std::isfinite(y) && std::fabs(std::log(x)) > best) {
              best = std::fabs(std::log(x));
              p = std::log(y) / std::log(x);
            }
          }
          if (!p || best < 0.1) return std::nullopt;
          const double rounded = std::round(*p * 1000) / 1000, x = c.x(0).data()[j];
          return times(c.gv(j), num(rounded) + " · " + par(x) + "^" + par(rounded - 1),
                       rounded * std::pow(x, rounded - 1));
        })};
    m["exp"] = {{{"x", "grad · y   (y = exp(x))"}}, unary([](const Ctx& c, std::size_t j) {
                  return std::optional<Term>(times(c.gv(j), par(c.y().data()[j]), c.y().data()[j], false));
                })};
    m["log"] = {{{"x", "grad / x"}}, unary([](const Ctx& c, std::size_t j) {
                  const double x = c.x(0).data()[j];
                  return std::optional<Term>({num(c.gv(j)) + " / " + par(x), "", c.gv(j) / x});
                })};
    m["tanh"] = {{{"x", "grad · (1 - y²)   (y = tanh(x))"}}, unary([](const Ctx& c, std::size_t j) {
                   const double y = c.y().data()[j];
                   return std::optional<Term>(times(c.gv(j), "(1 - " + par(y) + "²)", 1 - y * y));
                 })};
    m["sigmoid"] = {
        {{"x", "grad · y · (1 - y)   (y = sigmoid(x))"}}, unary([](const Ctx& c, std::size_t j) {
          const double y = c.y().data()[j];
          return std::optional<Term>(times(c.gv(j), num(y) + " · (1 - " + num(y) + ")", y * (1 - y)));
        })};
    m["relu"] = {{{"x", "grad · [x > 0]"}}, unary([](const Ctx& c, std::size_t j) {
                   const double x = c.x(0).data()[j];
                   return std::optional<Term>(times(c.gv(j), "[" + num(x) + " > 0]", x <= 0 ? 0.0 : 1.0));
                 })};
    m["abs"] = {{{"x", "grad · sign(x)"}}, unary([](const Ctx& c, std::size_t j) {
                  const double x = c.x(0).data()[j];
                  return std::optional<Term>(times(c.gv(j), "sign(" + num(x) + ")",
                                                   x > 0   ? 1.0
                                                   : x < 0 ? -1.0
                                                           : 0.0));
                })};
    m["sqrt"] = {
        {{"x", "grad / (2 · y)   (y = sqrt(x))"}}, unary([](const Ctx& c, std::size_t j) {
          const double y = c.y().data()[j];
          return std::optional<Term>({num(c.gv(j)) + " / (2 · " + num(y) + ")", "", c.gv(j) / (2 * y)});
        })};
    m["clamp"] = {
        {{"x", "grad · [lo <= x <= hi], i.e. [y = x]"}}, unary([](const Ctx& c, std::size_t j) {
          const double x = c.x(0).data()[j], y = c.y().data()[j];
          return std::optional<Term>(times(c.gv(j), "[" + num(y) + " = " + num(x) + "]", x == y ? 1.0 : 0.0));
        })};
    m["gelu"] = {{{"x", "grad · gelu'(x) = grad · (Phi(x) + x · phi(x))   (the tanh form: its derivative)"}},
                 unary([](const Ctx& c, std::size_t j) -> std::optional<Term> {
                   const double x = c.x(0).data()[j], y = c.y().data()[j];
                   const double cdf = 0.5 * (1 + std::erf(x / std::sqrt(2.0))),
                                pdf = std::exp(-x * x / 2) / std::sqrt(2 * M_PI);
                   const double k = std::sqrt(2 / M_PI), u = k * (x + 0.044715 * x * x * x), t = std::tanh(u);
                   const bool tanh_form = std::fabs(0.5 * x * (1 + t) - y) < std::fabs(x * cdf - y);
                   const double d =
                       tanh_form ? 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x)
                                 : cdf + x * pdf;
                   return times(c.gv(j), "gelu'(" + num(x) + ")", d);
                 })};
    m["softplus"] = {{{"x", "grad · sigmoid(beta · x)   (grad where beta · x > threshold)"}},
                     unary([](const Ctx& c, std::size_t j) -> std::optional<Term> {
                       const double x = c.x(0).data()[j], y = c.y().data()[j];
                       if (std::fabs(std::log1p(std::exp(x)) - y) > 1e-4 * (1 + std::fabs(y)) && x <= 20)
                         return std::nullopt;  // beta other than 1: not read back
                       return times(c.gv(j), "sigmoid(" + num(x) + ")", x > 20 ? 1.0 : sigmoid(x));
                     })};
    m["log_sigmoid"] = {
        {{"x", "grad · (1 - sigmoid(x))"}}, unary([](const Ctx& c, std::size_t j) {
          const double x = c.x(0).data()[j];
          return std::optional<Term>(times(c.gv(j), "(1 - sigmoid(" + num(x) + "))", sigmoid(-x)));
        })};
    m["dropout"] = {{{"x", "grad · mask / (1 - p)   (mask / (1 - p) = y / x)"}},
                    unary([](const Ctx& c, std::size_t j) -> std::optional<Term> {
                      const double x = c.x(0).data()[j], y = c.y().data()[j];
                      if (x == 0 || !std::isfinite(x)) return std::nullopt;
                      return times(c.gv(j), "(" + num(y) + " / " + par(x) + ")", y / x);
                    })};
    for (const char* op : {"maximum", "minimum"}) {
      const bool max = op[1] == 'a';
      m[op] = {{{"a", max ? "grad · [a > b]   (half at a tie)" : "grad · [a < b]   (half at a tie)"},
                {"b", max ? "grad · [b > a]   (half at a tie)" : "grad · [b < a]   (half at a tie)"}},
               binary([max](const Ctx& c, std::size_t j, std::size_t i) -> std::optional<Term> {
                 const double me = at(c, i, j), other = at(c, 1 - i, j);
                 if (std::isnan(me) || std::isnan(other)) return std::nullopt;
                 const bool wins = max ? me > other : me < other;
                 const std::string cmp = num(me) + (max ? " > " : " < ") + num(other);
                 if (me == other) return times(c.gv(j), "1/2 (a tie)", 0.5);
                 return times(c.gv(j), "[" + cmp + "]", wins ? 1.0 : 0.0);
               })};
    }
    m["where"] = {{{"condition", "none (not differentiable)"},
                   {"a", "grad · [condition != 0]"},
                   {"b", "grad · [condition = 0]"}},
                  binary([](const Ctx& c, std::size_t j, std::size_t i) -> std::optional<Term> {
                    const double cond = at(c, 0, j);
                    if (i == 0) return std::nullopt;
                    const bool pass = i == 1 ? cond != 0 : cond == 0;
                    return times(c.gv(j), "[" + num(cond) + (i == 1 ? " != 0]" : " = 0]"), pass ? 1.0 : 0.0);
                  })};
    m["masked_fill"] = {{{"a", "grad · [mask = 0]"}, {"mask", "none (not differentiable)"}},
                        binary([](const Ctx& c, std::size_t j, std::size_t i) -> std::optional<Term> {
                          if (i != 0) return std::nullopt;
                          const double mask = at(c, 1, j);
                          return times(c.gv(j), "[" + num(mask) + " = 0]", mask == 0 ? 1.0 : 0.0);
                        })};
    for (const char* op : {"tril", "triu"})
      m[op] = {
          {{"x", std::string("grad, 0 outside the ") + (op[3] == 'l' ? "lower" : "upper") + " triangle"}},
          unary([](const Ctx& c, std::size_t j) -> std::optional<Term> {
            const double x = c.x(0).data()[j], y = c.y().data()[j];
            if (x == 0) return std::nullopt;  // kept or not: the values cannot tell
            return times(c.gv(j), "[" + num(y) + " = " + num(x) + "]", x == y ? 1.0 : 0.0);
          })};
    // ----- products
    m["matmul"] = {{{"a", "grad · bᵀ"}, {"b", "aᵀ · grad"}}, matmul_at};
    m["linear"] = {{{"x", "grad · weight"}, {"weight", "gradᵀ · x"}, {"bias", "grad summed over the rows"}},
                   linear_at};
    // ----- reductions and the softmax family
    for (const char* op : {"sum", "mean", "max"})
      m[op] = {
          {{"x", op == std::string("sum") ? "grad, copied to every element that was summed"
                 : op == std::string("mean")
                     ? "grad / n, copied to each of the n elements averaged"
                     : "grad to the maximum (all: shared at a tie; along a dim: the first)"}},
          [op = std::string(op)](const Ctx& c, std::size_t, std::size_t k) { return reduce_at(c, k, op); }};
    m["softmax"] = {{{"x", "y · (grad - sum(grad · y))   (sums along the softmax's dim)"}},
                    [](const Ctx& c, std::size_t, std::size_t k) { return softmax_at(c, k, false); }};
    m["log_softmax"] = {{{"x", "grad - exp(y) · sum(grad)   (exp(y) = softmax(x); sum along the dim)"}},
                        [](const Ctx& c, std::size_t, std::size_t k) { return softmax_at(c, k, true); }};
    m["logsumexp"] = {
        {{"x", "grad · exp(x - y)   (= grad · softmax(x))"}},
        [](const Ctx& c, std::size_t, std::size_t k) -> std::optional<Worked> {
          const auto ax = reduced_dim(c, [](const std::vector<double>& v) {
            const double m = *std::max_element(v.begin(), v.end());
            double s = 0;
            for (double e : v) s += std::exp(e - m);
            return m + std::log(s);
          });
          if (!ax) return std::nullopt;
          const std::size_t j = column_of(c.n.input_shape(0), *ax, k).second;
          const double x = c.x(0).data()[k], y = c.y().data()[j];
          return sum_of({times(c.gv(j), "exp(" + num(x) + " - " + par(y) + ")", std::exp(x - y))});
        }};
    // ----- shapes and lookups
    m["reshape"] = {{{"x", "grad, reshaped back to x's shape"}},
                    [](const Ctx& c, std::size_t, std::size_t k) {  // the same flat position
                      return std::optional<Worked>(
                          sum_of({{"grad" + index_str(unravel(k, c.n.output_shape)), "", c.gv(k)}}));
                    }};
    // tg::distributed::sum_over_ranks (distributed/shard.hpp): each rank's part of the sum gets the
    // gradient that reached the sum, which every rank computed from the same values.
    m["sum_over_ranks"] = {{{"x", "grad   (the sum over the ranks adds x once)"}},
                           [](const Ctx& c, std::size_t, std::size_t k) {
                             return std::optional<Worked>(
                                 sum_of({{"grad" + index_str(unravel(k, c.n.output_shape)), "", c.gv(k)}}));
                           }};
    for (const char* op : {"transpose", "permute"})
      m[op] = {{{"x", "grad with its dims put back in x's order"}}, permute_at};
    m["narrow"] = {{{"x", "grad in the slice that was taken, 0 elsewhere"}}, narrow_at};
    m["cat"] = {{{"x", "its own slice of grad along the dim (each input x)"}},
                [](const Ctx& c, std::size_t i, std::size_t k) { return join_at(c, i, k, false); }};
    m["stack"] = {{{"x", "its own slice of grad along the new dim (each input x)"}},
                  [](const Ctx& c, std::size_t i, std::size_t k) { return join_at(c, i, k, true); }};
    m["index_select"] = {
        {{"x", "grad row k into row index[k], for each k (a row picked twice gets both)"}}, rows_hit, true};
    m["embedding"] = {
        {{"weight",
          "grad row k into row ids[k], for each k: rows[ids] += grad (a row looked up twice gets both)"}},
        rows_hit,
        true};
    m["gather"] = {
        {{"x", "grad[j] into the element index[j] picked along the dim, for each j (scatter-add)"}},
        [](const Ctx& c, std::size_t, std::size_t k) { return gather_at(c, k); }};
    m["embedding_bag"] = {
        {{"weight", "rows[ids] += grad of their bag (times the entry's weight; / bag size for mean)"},
         {"per_sample_weights", "grad of the bag · the row looked up"}},
        embedding_bag_at,
        true};
    m["embedding_dot"] = {{{"weight", "rows[ids[p, c]] += grad[p, c] · h[p]"},
                           {"h", "h[p] += sum_c grad[p, c] · weight[ids[p, c]]"}},
                          embedding_dot_at,
                          true};
    // ----- losses and normalisation
    m["mse_loss"] = {{{"input", "2 · grad · (input - target) / n   (no / n for sum)"},
                      {"target", "-2 · grad · (input - target) / n"}},
                     mse_at};
    m["nll_loss"] = {{{"log_probs", "-grad / N at each row's target class, 0 elsewhere   (no / N for sum)"}},
                     [](const Ctx& c, std::size_t, std::size_t k) { return nll_at(c, k); }};
    m["binary_cross_entropy"] = {
        {{"input", "grad · w · (x - t) / (x · (1 - x)) / n"},
         {"target", "-grad · w · log(x / (1 - x)) / n"},
         {"weight", "grad · the element's loss / n"}},
        [](const Ctx& c, std::size_t i, std::size_t k) { return bce_at(c, i, k, false); }};
    m["binary_cross_entropy_with_logits"] = {
        {{"input", "grad · w · (sigmoid(x) - t) / n   (pos_weight p: ((p t + 1 - t) sigmoid(x) - p t))"},
         {"target", "-grad · w · x / n   (pos_weight p: -grad · w · (x + (p - 1) · log_sigmoid(x)) / n)"},
         {"weight", "grad · the element's loss / n"},
         {"pos_weight", "-grad · w · t · log_sigmoid(x) / n"}},
        [](const Ctx& c, std::size_t i, std::size_t k) { return bce_at(c, i, k, true); }};
    m["layer_norm"] = {
        {{"x", "(w · grad - mean(w · grad) - x̂ · mean(w · grad · x̂)) / sigma   (x̂ = (x - mean) / sigma)"},
         {"weight", "sum over the rows of grad · x̂"},
         {"bias", "sum over the rows of grad"}},
        [](const Ctx& c, std::size_t i, std::size_t k) { return norm_at(c, i, k, true); }};
    m["batch_norm"] = {
        {{"x", "(w · grad - mean(w · grad) - x̂ · mean(w · grad · x̂)) / sigma, over the batch (training)"},
         {"weight", "sum over the batch of grad · x̂"},
         {"bias", "sum over the batch of grad"}},
        [](const Ctx& c, std::size_t i, std::size_t k) { return norm_at(c, i, k, false); }};
    for (const char* op : {"conv1d", "conv2d"})
      m[op] = {{{"x", "each window's elements += grad · weight (a transposed convolution)"},
                {"weight", "sum over the windows of grad · the window of x"},
                {"bias", "grad summed over batch and positions"}},
               conv_at};
    for (const char* op : {"max_pool1d", "max_pool2d"})
      m[op] = {{{"x", "grad to the maximum of each window"}},
               [](const Ctx& c, std::size_t, std::size_t k) { return max_pool_at(c, k); }};
    for (const char* op : {"avg_pool1d", "avg_pool2d", "adaptive_avg_pool1d", "adaptive_avg_pool2d"})
      m[op] = {{{"x", "grad / window size to every element of its window"}},
               [](const Ctx& c, std::size_t, std::size_t k) { return avg_pool_at(c, k); }};
    m["unfold"] = {{{"x", "each element += the grad of every patch that copied it"}},
                   [](const Ctx& c, std::size_t, std::size_t k) { return unfold_at(c, k); }};
    return m;
  }();
  return t;
}

const Entry* entry(const std::string& op) {
  const auto it = table().find(op);
  return it == table().end() ? nullptr : &it->second;
}

}  // namespace

}  // namespace tg::debug::rules

namespace tg::debug {

std::vector<std::string> ops_with_rules() {
  std::vector<std::string> ops;
  for (const auto& [op, e] : rules::table()) ops.push_back(op);
  return ops;
}

bool rule_has_numbers(const std::string& op) {
  const rules::Entry* e = rules::entry(op);
  return e && e->plug;
}

std::optional<RuleInput> rule_input(const std::string& op, std::size_t i) {
  const rules::Entry* e = rules::entry(op);
  if (!e) return std::nullopt;
  return e->inputs[std::min(i, e->inputs.size() - 1)];
}

}  // namespace tg::debug

namespace tg {

std::string local_rule(const std::string& op) {
  using namespace debug;
  const rules::Entry* e = rules::entry(op);
  if (!e) return "";
  std::string s;
  for (const RuleInput& in : e->inputs) s += (s.empty() ? "" : " | ") + in.name + ".grad += " + in.formula;
  return s;
}

}  // namespace tg

namespace tg::debug {

std::vector<Worked> worked(const Node& node, const Array& grad_output, const Grads& grads, std::size_t i,
                           std::size_t max_elements) {
  const rules::Entry* e = rules::entry(node.op);
  if (!e || !e->plug || i >= grads.size() || grads[i].empty() || !node.needs_grad(i)) return {};
  const rules::Ctx c{node, grad_output};
  const std::string name = e->inputs[std::min(i, e->inputs.size() - 1)].name;
  // Which elements: all of a small input; else the one with the largest share
  // (a lookup: the rows it hit, by row).
  std::vector<std::size_t> picks;
  const auto& shape = node.input_shape(i);
  const bool by_rows = e->by_rows && i == 0;
  if (by_rows) {
    if (!grads[i].is_sparse()) {
      const Array& d = grads[i].dense();
      const std::size_t cols = shape.empty() || shape[0] == 0 ? 0 : d.size() / shape[0];
      for (std::size_t r = 0; r < shape[0] && picks.size() < max_elements; ++r)
        if (std::any_of(d.data() + r * cols, d.data() + (r + 1) * cols, [](float v) { return v != 0; }))
          picks.push_back(r);
    } else {
      for (int64_t r : grads[i].sparse().rows)
        if (picks.size() < max_elements) picks.push_back(static_cast<std::size_t>(r));
    }
  } else {
    const Array share = grads[i].to_dense(Shape(shape.begin(), shape.end()));
    if (share.size() <= max_elements) {
      picks.resize(share.size());
      std::iota(picks.begin(), picks.end(), 0);
    } else {
      std::size_t best = 0;
      for (std::size_t k = 1; k < share.size(); ++k)
        if (std::fabs(share.data()[k]) > std::fabs(share.data()[best])) best = k;
      picks.push_back(best);
    }
  }
  std::vector<Worked> out;
  for (std::size_t k : picks) {
    std::optional<Worked> w;
    try {
      w = e->plug(c, i, k);
    } catch (const std::exception&) {  // an input written in place since: the engine says so elsewhere
      return {};
    }
    if (!w) continue;
    w->input = i;
    w->element = k;
    w->at = by_rows ? name + " row " + std::to_string(k) : name + rules::index_str(rules::unravel(k, shape));
    out.push_back(std::move(*w));
  }
  return out;
}

}  // namespace tg::debug
