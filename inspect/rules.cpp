// The local rule of every op's backward, in one table keyed by the op's name, and each rule worked out with a
// step's numbers.
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
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <numeric>
#include <optional>

#include "debug.hpp"

namespace tg::debug {

namespace {

// ------------------------------------------------------------ formatting

// 6 significant digits, as the trace prints them (%g: 0.5, -2.30432), but
// with the trailing zeros that are digits of the number (0.125010 for
// 0.1250104, where %g's 0.12501 would read as exact).
std::string num(double x) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%g", x == 0 ? 0.0 : x);
  if (!std::isfinite(x) || static_cast<float>(std::strtod(buf, nullptr)) == static_cast<float>(x)) return buf;
  std::snprintf(buf, sizeof buf, "%#.6g", x);
  return buf;
}
// A number inside an expression: negative ones in parentheses, 2 · (-0.5).
std::string par(double x) {
  const std::string s = num(x);
  return x < 0 ? "(" + s + ")" : s;
}

std::vector<std::size_t> unravel(std::size_t k, const Array::shape_type& shape) {
  std::vector<std::size_t> idx(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] ? k % shape[d] : 0;
    k = shape[d] ? k / shape[d] : 0;
  }
  return idx;
}
std::size_t ravel(const std::vector<std::size_t>& idx, const Array::shape_type& shape) {
  std::size_t k = 0;
  for (std::size_t d = 0; d < shape.size(); ++d) k = k * shape[d] + idx[d];
  return k;
}
std::string index_str(const std::vector<std::size_t>& idx) {
  std::string s = "[";
  for (std::size_t d = 0; d < idx.size(); ++d) s += (d ? ", " : "") + std::to_string(idx[d]);
  return s + "]";
}

// The flat index in `in` (broadcast against `out`) that output element j reads.
std::size_t source_of(std::size_t j, const Array::shape_type& out, const Array::shape_type& in) {
  const std::vector<std::size_t> o = unravel(j, out);
  std::vector<std::size_t> i(in.size());
  for (std::size_t d = 0; d < in.size(); ++d) i[d] = in[d] == 1 ? 0 : o[o.size() - in.size() + d];
  return ravel(i, in);
}

// One term of a sum: its text with numbers (`text`), the same with its local
// factor evaluated (`mid`, empty when there is nothing to evaluate), its value.
struct Term {
  std::string text, mid;
  double value = 0;
};

// What a rule sees of one backward step.
struct Ctx {
  const Node& n;
  const Array& g;  // the gradient that reached the output
  const Array& x(std::size_t i) const { return n.input(i); }
  const Array& y() const { return n.output_value(); }
  double gv(std::size_t j) const { return g.data()[j]; }
};

// An element's terms added up: "t1 + t2 = v", or "t = mid = v" for one term.
Worked sum_of(std::vector<Term> terms, std::size_t max_shown = 4) {
  Worked w;
  double total = 0;
  for (const Term& t : terms) total += t.value;
  if (terms.empty()) {
    w.text = "0 (no output element depends on it)";
  } else if (terms.size() == 1) {
    w.text = terms[0].text;
    if (!terms[0].mid.empty() && terms[0].mid != terms[0].text) w.text += " = " + terms[0].mid;
  } else {
    for (std::size_t t = 0; t < terms.size() && t < max_shown; ++t) {
      const std::string& text = terms[t].text;
      if (t == 0)
        w.text = text;
      else
        w.text += text[0] == '-' ? " - " + text.substr(1) : " + " + text;  // a + -2 · 3 reads a - 2 · 3
    }
    if (terms.size() > max_shown) w.text += " + ... (" + std::to_string(terms.size()) + " terms)";
  }
  if (terms.size() != 1 || w.text != num(total)) w.text += " = " + num(total);
  w.value = {total};
  return w;
}

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

// g times a factor written out: "g · text" = "g · value".
Term times(double g, const std::string& text, double factor, bool evaluate = true) {
  return {num(g) + " · " + text, evaluate ? num(g) + " · " + par(factor) : "", g * factor};
}
Term just(double g) {
  return {num(g), "", g};
}

// A scalar an op was given (mul_scalar's s) read back from its values: y / x at
// an element where x is not 0. Empty when every x is 0.
std::optional<double> ratio(const Array& num_of, const Array& den_of) {
  for (std::size_t k = 0; k < den_of.size(); ++k)
    if (den_of.data()[k] != 0 && std::isfinite(den_of.data()[k]) && std::isfinite(num_of.data()[k]))
      return static_cast<double>(num_of.data()[k]) / den_of.data()[k];
  return std::nullopt;
}

double sigmoid(double x) {
  return 1 / (1 + std::exp(-x));
}

// -------------------------------------------------- reductions along one dim

// Element r along dim ax of the column that reduced output element j reads.
std::size_t column_at(const Array::shape_type& in, std::size_t ax, std::size_t j, std::size_t r) {
  std::size_t inner = 1;
  for (std::size_t d = ax + 1; d < in.size(); ++d) inner *= in[d];
  return (j / inner) * in[ax] * inner + r * inner + j % inner;
}

// The dim `in` was reduced along to give `out` (keepdim or not), picked among
// those the shapes allow by recomputing the output with `reduce`.
std::optional<std::size_t> reduced_dim(const Ctx& c,
                                       const std::function<double(const std::vector<double>&)>& reduce) {
  const auto& in = c.n.input_shape(0);
  const auto& out = c.n.output_shape;
  for (std::size_t ax = 0; ax < in.size(); ++ax) {
    std::vector<std::size_t> keep(in.begin(), in.end()), drop;
    keep[ax] = 1;
    for (std::size_t d = 0; d < in.size(); ++d)
      if (d != ax) drop.push_back(in[d]);
    const bool fits = std::equal(out.begin(), out.end(), keep.begin(), keep.end()) ||
                      std::equal(out.begin(), out.end(), drop.begin(), drop.end());
    if (!fits) continue;
    bool same = true;
    const std::size_t n = in[ax];
    for (std::size_t j = 0; same && j < c.y().size(); ++j) {
      std::vector<double> column;
      for (std::size_t r = 0; r < n; ++r) column.push_back(c.x(0).data()[column_at(in, ax, j, r)]);
      const double want = c.y().data()[j], got = reduce(column);
      same = std::fabs(got - want) <= 1e-4 * (1 + std::fabs(want)) || (std::isnan(got) && std::isnan(want));
    }
    if (same) return ax;
  }
  return std::nullopt;
}

double total(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0);
}
double average(const std::vector<double>& v) {
  return total(v) / static_cast<double>(v.size());
}

// Input element k of a reduction along ax: its column r and output element j.
std::pair<std::size_t, std::size_t> column_of(const Array::shape_type& in, std::size_t ax, std::size_t k) {
  std::size_t inner = 1;
  for (std::size_t d = ax + 1; d < in.size(); ++d) inner *= in[d];
  const std::size_t r = (k / inner) % in[ax];
  return {r, (k / inner / in[ax]) * inner + k % inner};
}

// ------------------------------------------------------------ the table

using Plug = std::function<std::optional<Worked>(const Ctx&, std::size_t input, std::size_t k)>;

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

// a lookup: row r of input 0 gets the sum of the output rows whose id is r.
std::optional<Worked> rows_hit(const Ctx& c, std::size_t, std::size_t r) {
  const Indices& ids = c.n.ids;
  if (ids.dimension() == 0 || ids.size() == 0) return std::nullopt;  // not a lookup (a 0-d array: no ids)
  const std::size_t cols = c.g.size() / ids.size();
  Worked w;
  w.value.assign(cols, 0.0);
  std::vector<std::string> parts;
  std::string sum_text;
  for (std::size_t p = 0; p < ids.size(); ++p) {
    if (ids.data()[p] != static_cast<int64_t>(r)) continue;
    std::string row = "[";
    for (std::size_t d = 0; d < cols; ++d) {
      w.value[d] += c.g.data()[p * cols + d];
      if (d < 4) row += (d ? ", " : "") + num(c.g.data()[p * cols + d]);
    }
    row += cols > 4 ? ", ...]" : "]";
    sum_text += (sum_text.empty() ? "" : " + ") + std::string("grad row ") + std::to_string(p);
    parts.push_back(row);
  }
  if (parts.empty()) return std::nullopt;
  std::string values, result = "[";
  for (std::size_t q = 0; q < parts.size(); ++q) values += (q ? " + " : "") + parts[q];
  for (std::size_t d = 0; d < cols && d < 4; ++d) result += (d ? ", " : "") + num(w.value[d]);
  result += cols > 4 ? ", ...]" : "]";
  w.text = sum_text + " = " + values + (parts.size() > 1 ? " = " + result : "");
  return w;
}

// y = a @ b over the last two dims, batch dims broadcast.
std::optional<Worked> matmul_at(const Ctx& c, std::size_t i, std::size_t k) {
  const auto &as = c.n.input_shape(0), &bs = c.n.input_shape(1), &os = c.n.output_shape;
  if (as.size() < 2 || bs.size() < 2) return std::nullopt;
  const auto& mine = c.n.input_shape(i);
  const std::vector<std::size_t> me = unravel(k, mine);
  std::vector<Term> terms;
  for (std::size_t j = 0; j < c.g.size(); ++j) {
    std::vector<std::size_t> o = unravel(j, os);
    const std::size_t row = o[o.size() - 2], col = o[o.size() - 1];
    auto batch_in = [&](const Array::shape_type& s, std::size_t r, std::size_t q) {
      std::vector<std::size_t> idx(s.size());
      for (std::size_t d = 0; d + 2 < s.size(); ++d) idx[d] = s[d] == 1 ? 0 : o[o.size() - s.size() + d];
      idx[s.size() - 2] = r;
      idx[s.size() - 1] = q;
      return idx;
    };
    // a[.., row, l] b[.., l, col]: input 0's element k is (row, l), input 1's is (l, col)
    const std::size_t l = i == 0 ? me.back() : me[me.size() - 2];
    const std::vector<std::size_t> ai = batch_in(as, row, l), bi = batch_in(bs, l, col);
    if ((i == 0 ? ai : bi) != me) continue;
    const double other = i == 0 ? c.x(1).data()[ravel(bi, bs)] : c.x(0).data()[ravel(ai, as)];
    terms.push_back({num(c.gv(j)) + " · " + par(other), "", c.gv(j) * other});
  }
  return sum_of(std::move(terms));
}

// y[r, o] = sum_l x[r, l] w[o, l] + b[o].
std::optional<Worked> linear_at(const Ctx& c, std::size_t i, std::size_t k) {
  const Array &x = c.x(0), &w = c.x(1);
  const std::size_t outs = w.shape()[0], ins = w.shape()[1], rows = x.size() / ins;
  std::vector<Term> terms;
  if (i == 0) {  // x[r, l] += sum_o grad[r, o] w[o, l]
    const std::size_t r = k / ins, l = k % ins;
    for (std::size_t o = 0; o < outs; ++o)
      terms.push_back({num(c.gv(r * outs + o)) + " · " + par(w(o, l)), "", c.gv(r * outs + o) * w(o, l)});
  } else if (i == 1) {  // w[o, l] += sum_r grad[r, o] x[r, l]
    const std::size_t o = k / ins, l = k % ins;
    for (std::size_t r = 0; r < rows; ++r) {
      const double xv = x.data()[r * ins + l];
      terms.push_back({num(c.gv(r * outs + o)) + " · " + par(xv), "", c.gv(r * outs + o) * xv});
    }
  } else {  // b[o] += sum_r grad[r, o]
    for (std::size_t r = 0; r < rows; ++r) terms.push_back(just(c.gv(r * outs + k)));
  }
  return sum_of(std::move(terms));
}

// Sum, mean or max along a dim (or over everything, to a single value).
std::optional<Worked> reduce_at(const Ctx& c, std::size_t k, const std::string& op) {
  const auto& in = c.n.input_shape(0);
  const Array& x = c.x(0);
  if (c.n.output_shape.empty() || c.y().size() == 1) {  // every element reduced
    const double g = c.gv(0), n = static_cast<double>(x.size());
    if (op == "sum") return sum_of({{"grad", "", g}});
    if (op == "mean") return sum_of({{num(g) + " / " + num(n), "", g / n}});
    const double m = c.y().data()[0];
    std::size_t ties = 0;
    for (float v : x) ties += v == m;
    const bool hit = x.data()[k] == m;
    const std::string text = num(g) + " · [" + num(x.data()[k]) + " = max " + num(m) + "]" +
                             (ties > 1 ? " / " + std::to_string(ties) + " ties" : "");
    return sum_of({{text, "", hit ? g / static_cast<double>(ties) : 0.0}});
  }
  const auto reduce =
      op == "sum"    ? total
      : op == "mean" ? average
                     : [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); };
  const std::optional<std::size_t> ax = reduced_dim(c, reduce);
  if (!ax) return std::nullopt;
  const auto [r, j] = column_of(in, *ax, k);
  const double g = c.gv(j), n = static_cast<double>(in[*ax]);
  if (op == "sum") return sum_of({{"grad" + index_str(unravel(j, c.n.output_shape)), "", g}});
  if (op == "mean") return sum_of({{num(g) + " / " + num(n), "", g / n}});
  std::size_t first = 0;  // the first maximum along the dim takes it
  for (std::size_t q = 1; q < in[*ax]; ++q)
    if (x.data()[column_at(in, *ax, j, q)] > x.data()[column_at(in, *ax, j, first)]) first = q;
  return sum_of({{num(g) + " · [" + std::to_string(r) + " = argmax " + std::to_string(first) + "]", "",
                  r == first ? g : 0.0}});
}

// softmax and log_softmax along the dim whose rows sum to 1.
std::optional<Worked> softmax_at(const Ctx& c, std::size_t k, bool log) {
  const auto& in = c.n.input_shape(0);
  const Array& y = c.y();
  for (std::size_t ax = 0; ax < in.size(); ++ax) {
    bool rows_sum_to_1 = true;
    const std::size_t n = in[ax], cols = y.size() / std::max<std::size_t>(n, 1);
    for (std::size_t j = 0; rows_sum_to_1 && j < cols; ++j) {
      double s = 0;
      for (std::size_t r = 0; r < n; ++r)
        s += log ? std::exp(y.data()[column_at(in, ax, j, r)]) : y.data()[column_at(in, ax, j, r)];
      rows_sum_to_1 = std::fabs(s - 1) < 1e-4;
    }
    if (!rows_sum_to_1) continue;
    const auto [r, j] = column_of(in, ax, k);
    double s = 0;  // softmax: sum of grad · y along the row; log_softmax: sum of grad
    for (std::size_t q = 0; q < n; ++q) {
      const std::size_t at = column_at(in, ax, j, q);
      s += log ? c.gv(at) : c.gv(at) * y.data()[at];
    }
    const double g = c.gv(k), yk = y.data()[k];
    if (log)
      return sum_of({{num(g) + " - exp(" + num(yk) + ") · " + par(s),
                      num(g) + " - " + par(std::exp(yk)) + " · " + par(s), g - std::exp(yk) * s}});
    return sum_of({{num(yk) + " · (" + num(g) + " - " + par(s) + ")", "", yk * (g - s)}});
  }
  return std::nullopt;
}

// mse_loss(x, t): reduction read back from the output (none keeps x's shape).
std::optional<Worked> mse_at(const Ctx& c, std::size_t i, std::size_t k) {
  const Array &x = c.x(0), &t = c.x(1);
  double sq = 0;
  for (std::size_t q = 0; q < x.size(); ++q) sq += (x.data()[q] - t.data()[q]) * (x.data()[q] - t.data()[q]);
  const bool none = c.y().size() == x.size() && !c.n.output_shape.empty();
  const double y = c.y().data()[0];
  const bool mean = !none && std::fabs(y - sq / x.size()) <= 1e-4 * (1 + std::fabs(y));
  const double n = mean ? static_cast<double>(x.size()) : 1.0, g = c.gv(none ? k : 0);
  const double diff = static_cast<double>(x.data()[k]) - t.data()[k];
  std::string text = std::string(i == 0 ? "" : "-") + "2 · " + par(g) + " · (" + num(x.data()[k]) + " - " +
                     par(t.data()[k]) + ")" + (mean ? " / " + num(n) : "");
  return sum_of({{text, "", (i == 0 ? 2 : -2) * g * diff / n}});
}

// nll_loss(log_probs [N, C], target): -grad (/ N for the mean) at each row's target.
std::optional<Worked> nll_at(const Ctx& c, std::size_t k) {
  const Indices& target = c.n.ids;
  if (target.dimension() != 1) return std::nullopt;
  const Array& lp = c.x(0);
  const std::size_t rows = target.size(), classes = lp.size() / std::max<std::size_t>(rows, 1);
  if (rows == 0) return std::nullopt;
  const std::size_t r = k / classes, cls = k % classes;
  const bool none = c.y().size() == rows && !c.n.output_shape.empty();
  double picked = 0;
  for (std::size_t q = 0; q < rows; ++q) picked -= lp.data()[q * classes + target(q)];
  const double y = c.y().data()[0];
  const bool mean = !none && std::fabs(y - picked / rows) <= 1e-4 * (1 + std::fabs(y));
  const double g = c.gv(none ? r : 0), n = mean ? static_cast<double>(rows) : 1.0;
  if (target(r) != static_cast<int64_t>(cls))
    return sum_of(
        {{"0 (row " + std::to_string(r) + "'s target is class " + std::to_string(target(r)) + ")", "", 0.0}});
  return sum_of({{"-" + par(g) + (mean ? " / " + num(n) : ""), "", -g / n}});
}

// ------------------------------------------------------ moves and picks
//
// Ops that move values without arithmetic: each input element lands at one
// output position (or none), found from the shapes and checked against the
// values, and gets the gradient there.

using Index = std::vector<std::size_t>;

// The output position of input i's element k, or nothing (narrow: outside the
// slice). `where` maps an input index to an output index; it is tried for
// each way the shapes allow, and the first whose output matches every value is used.
using Where = std::function<std::optional<Index>(const Index& in, std::size_t input)>;

bool moves_values(const Ctx& c, const Where& where) {
  const auto& out = c.n.output_shape;
  for (std::size_t i = 0; i < c.n.inputs.size(); ++i) {
    const auto& in = c.n.input_shape(i);
    for (std::size_t k = 0; k < c.x(i).size(); ++k) {
      const std::optional<Index> o = where(unravel(k, in), i);
      if (o && c.y().data()[ravel(*o, out)] != c.x(i).data()[k] &&
          !(std::isnan(c.y().data()[ravel(*o, out)]) && std::isnan(c.x(i).data()[k])))
        return false;
    }
  }
  return true;
}

std::optional<Worked> moved(const Ctx& c, std::size_t i, std::size_t k, const std::vector<Where>& ways) {
  for (const Where& where : ways) {
    if (!moves_values(c, where)) continue;
    const std::optional<Index> o = where(unravel(k, c.n.input_shape(i)), i);
    if (!o) return sum_of({{"0 (not in the output)", "", 0.0}});
    return sum_of({{"grad" + index_str(*o), "", c.gv(ravel(*o, c.n.output_shape))}});
  }
  return std::nullopt;
}

std::optional<Worked> permute_at(const Ctx& c, std::size_t i, std::size_t k) {
  const auto &in = c.n.input_shape(0), &out = c.n.output_shape;
  Index perm(in.size());
  std::iota(perm.begin(), perm.end(), 0);
  std::vector<Where> ways;  // output dim d is input dim perm[d]
  do {
    bool fits = out.size() == in.size();
    for (std::size_t d = 0; fits && d < out.size(); ++d) fits = out[d] == in[perm[d]];
    if (fits)
      ways.push_back([perm](const Index& x, std::size_t) {
        Index o(x.size());
        for (std::size_t d = 0; d < x.size(); ++d) o[d] = x[perm[d]];
        return std::optional<Index>(o);
      });
  } while (std::next_permutation(perm.begin(), perm.end()));
  return moved(c, i, k, ways);
}

std::optional<Worked> narrow_at(const Ctx& c, std::size_t i, std::size_t k) {
  const auto &in = c.n.input_shape(0), &out = c.n.output_shape;
  std::vector<Where> ways;
  for (std::size_t ax = 0; ax < in.size() && out.size() == in.size(); ++ax)
    for (std::size_t start = 0; out[ax] <= in[ax] && start + out[ax] <= in[ax]; ++start)
      ways.push_back([ax, start, len = out[ax]](const Index& x, std::size_t) -> std::optional<Index> {
        if (x[ax] < start || x[ax] >= start + len) return std::nullopt;
        Index o = x;
        o[ax] -= start;
        return o;
      });
  return moved(c, i, k, ways);
}

std::optional<Worked> join_at(const Ctx& c, std::size_t i, std::size_t k, bool stack) {
  const auto& out = c.n.output_shape;
  std::vector<Where> ways;
  for (std::size_t ax = 0; ax < out.size(); ++ax) {
    std::vector<std::size_t> offset;  // cat: where each input starts along ax
    std::size_t at = 0;
    for (std::size_t q = 0; q < c.n.inputs.size(); ++q) {
      offset.push_back(at);
      at += stack ? 1 : (ax < c.n.input_shape(q).size() ? c.n.input_shape(q)[ax] : 0);
    }
    if (at != out[ax]) continue;
    ways.push_back([ax, offset, stack](const Index& x, std::size_t q) {
      Index o = x;
      if (stack)
        o.insert(o.begin() + static_cast<std::ptrdiff_t>(ax), q);
      else
        o[ax] += offset[q];
      return std::optional<Index>(o);
    });
  }
  return moved(c, i, k, ways);
}

// gather(x, dim, index): out[j] = x[j with index[j] along dim]; element k of x
// gets the gradient of every output position that picked it.
std::optional<Worked> gather_at(const Ctx& c, std::size_t k) {
  const Indices& ids = c.n.ids;
  const auto &in = c.n.input_shape(0), &out = c.n.output_shape;
  if (ids.dimension() != out.size() || ids.size() != c.y().size()) return std::nullopt;
  for (std::size_t ax = 0; ax < in.size(); ++ax) {
    auto picked = [&](std::size_t j) {
      Index o = unravel(j, out);
      o[ax] = static_cast<std::size_t>(ids.data()[j]);
      return o;
    };
    bool same = true;
    for (std::size_t j = 0; same && j < c.y().size(); ++j) {
      const Index o = picked(j);
      bool inside = true;
      for (std::size_t d = 0; d < o.size(); ++d) inside = inside && o[d] < in[d];
      same = inside && c.x(0).data()[ravel(o, in)] == c.y().data()[j];
    }
    if (!same) continue;
    std::vector<Term> terms;
    for (std::size_t j = 0; j < c.y().size(); ++j)
      if (ravel(picked(j), in) == k) terms.push_back({"grad" + index_str(unravel(j, out)), "", c.gv(j)});
    return sum_of(std::move(terms));
  }
  return std::nullopt;
}

// binary_cross_entropy(_with_logits)(x, t, weight, pos_weight): the mean or sum
// read back from the output, and which of weight and pos_weight a third input
// is (with_logits) from the loss it gives. weight and pos_weight broadcast to x.
std::optional<Worked> bce_at(const Ctx& c, std::size_t i, std::size_t k, bool logits) {
  const std::size_t slots = c.n.inputs.size();
  std::vector<std::pair<int, int>> readings;  // input slots of (weight, pos_weight)
  if (slots == 2) readings = {{-1, -1}};
  if (slots == 3)
    readings = logits ? std::vector<std::pair<int, int>>{{2, -1}, {-1, 2}}
                      : std::vector<std::pair<int, int>>{{2, -1}};
  if (slots == 4 && logits) readings = {{2, 3}};
  const Array &x = c.x(0), &t = c.x(1);
  const auto& xs = c.n.input_shape(0);
  const std::size_t count = x.size();
  auto softplus_neg = [](double v) { return std::max(-v, 0.0) + std::log1p(std::exp(-std::fabs(v))); };
  for (const auto& [wi, pi] : readings) {
    auto value_of = [&](int slot, std::size_t j) {
      return slot < 0 ? 1.0 : static_cast<double>(c.x(slot).data()[source_of(j, xs, c.n.input_shape(slot))]);
    };
    auto loss = [&](std::size_t j) {  // the element's loss, before weight
      const double xv = x.data()[j], tv = t.data()[j];
      if (!logits)
        return -(tv * std::max(std::log(xv), -100.0) + (1 - tv) * std::max(std::log1p(-xv), -100.0));
      const double lw = pi < 0 ? 1.0 : (value_of(pi, j) - 1) * tv + 1;
      return (1 - tv) * xv + lw * softplus_neg(xv);
    };
    const bool none = c.y().size() == count && !c.n.output_shape.empty();
    double total = 0;
    bool same = true;
    for (std::size_t j = 0; j < count; ++j) {
      const double l = value_of(wi, j) * loss(j);
      total += l;
      if (none) same = same && std::fabs(l - c.y().data()[j]) <= 1e-4 * (1 + std::fabs(l));
    }
    const double y = c.y().data()[0];
    const bool mean = !none && std::fabs(y - total / count) <= 1e-4 * (1 + std::fabs(y));
    if (!same || (!none && !mean && std::fabs(y - total) > 1e-4 * (1 + std::fabs(y)))) continue;
    const double n = mean ? static_cast<double>(count) : 1.0;
    const std::string over = mean ? " / " + num(n) : "";
    auto g_at = [&](std::size_t j) { return c.gv(none ? j : 0); };
    auto w_text = [&](std::size_t j) { return wi < 0 ? std::string() : " · " + par(value_of(wi, j)); };
    if (static_cast<int>(i) == wi || static_cast<int>(i) == pi) {  // summed over the elements it weighs
      std::vector<Term> terms;
      for (std::size_t j = 0; j < count; ++j) {
        if (source_of(j, xs, c.n.input_shape(i)) != k) continue;
        const double g = g_at(j);
        if (static_cast<int>(i) == wi) {
          terms.push_back({num(g) + " · " + par(loss(j)) + over, "", g * loss(j) / n});
        } else {  // -grad · w · t · log_sigmoid(x)
          const double tv = t.data()[j], ls = -softplus_neg(x.data()[j]);
          terms.push_back({"-" + par(g) + w_text(j) + " · " + par(tv) + " · " + par(ls) + over, "",
                           -g * value_of(wi, j) * tv * ls / n});
        }
      }
      return sum_of(std::move(terms));
    }
    const double g = g_at(k), w = value_of(wi, k), xv = x.data()[k], tv = t.data()[k];
    const std::string gw = num(g) + w_text(k);
    if (logits && pi >= 0) {
      const double p = value_of(pi, k), ls = -softplus_neg(xv);
      if (i == 0)  // (p t + 1 - t) sigmoid(x) - p t
        return sum_of({{gw + " · ((" + num(p) + " · " + par(tv) + " + 1 - " + par(tv) + ") · sigmoid(" +
                            num(xv) + ") - " + par(p) + " · " + par(tv) + ")" + over,
                        "", g * w * ((p * tv + 1 - tv) * sigmoid(xv) - p * tv) / n}});
      return sum_of(
          {{"-" + par(g) + w_text(k) + " · (" + num(xv) + " + (" + num(p) + " - 1) · " + par(ls) + ")" + over,
            "", -g * w * (xv + (p - 1) * ls) / n}});
    }
    if (logits) {
      if (i == 0)
        return sum_of({{gw + " · (sigmoid(" + num(xv) + ") - " + par(tv) + ")" + over,
                        gw + " · (" + num(sigmoid(xv)) + " - " + par(tv) + ")" + over,
                        g * w * (sigmoid(xv) - tv) / n}});
      return sum_of({{"-" + par(g) + w_text(k) + " · " + par(xv) + over, "", -g * w * xv / n}});
    }
    if (i == 0)
      return sum_of(
          {{gw + " · (" + num(xv) + " - " + par(tv) + ") / (" + num(xv) + " · (1 - " + num(xv) + "))" + over,
            "", g * w * (xv - tv) / std::max((1 - xv) * xv, 1e-12) / n}});
    return sum_of({{"-" + par(g) + w_text(k) + " · log(" + num(xv) + " / (1 - " + num(xv) + "))" + over, "",
                    -g * w * std::log(xv / (1 - xv)) / n}});
  }
  return std::nullopt;
}

// ------------------------------------------- windows: convolutions, pools, unfold
//
// The sizes of a window op (kernel, stride, padding, dilation, ceil_mode) are
// not on the tape: they are read back. Each spatial dim's candidates that give
// the output's length are tried, the usual ones first (stride 1 or the
// kernel, no padding, no dilation), and the first that recomputes the output's
// values at up to 32 places is used.

// One spatial dim: output o's tap t < k reads input o s - p + t d.
struct Axis {
  std::size_t in = 1, out = 1, k = 1, s = 1, p = 0, d = 1;
  int cost = 0;  // how unusual: tried in order of it
  // The input place output o's tap t reads, or -1 in the padding.
  int64_t at(std::size_t o, std::size_t t) const {
    const int64_t v = static_cast<int64_t>(o * s + t * d) - static_cast<int64_t>(p);
    return v >= 0 && v < static_cast<int64_t>(in) ? v : -1;
  }
  // The (output, tap) pairs that read input place i.
  std::vector<std::pair<std::size_t, std::size_t>> readers(std::size_t i) const {
    std::vector<std::pair<std::size_t, std::size_t>> r;
    for (std::size_t o = 0; o < out; ++o) {
      const int64_t v = static_cast<int64_t>(i + p) - static_cast<int64_t>(o * s);
      if (v >= 0 && v % static_cast<int64_t>(d) == 0 && static_cast<std::size_t>(v) / d < k)
        r.emplace_back(o, static_cast<std::size_t>(v) / d);
    }
    return r;
  }
};

constexpr std::size_t most_padding = 4, most_dilation = 4;

void by_cost(std::vector<Axis>& v) {
  std::stable_sort(v.begin(), v.end(), [](const Axis& a, const Axis& b) { return a.cost < b.cost; });
}

// A convolution's (or unfold's) dim for kernel k; out 0: any length.
std::vector<Axis> conv_axes(std::size_t in, std::size_t k, std::size_t out) {
  std::vector<Axis> v;
  for (std::size_t d = 1; d <= (k > 1 ? most_dilation : 1); ++d)
    for (std::size_t p = 0; p <= std::min(most_padding, d * (k - 1)); ++p) {
      const std::size_t span = d * (k - 1) + 1;
      if (span > in + 2 * p) continue;
      for (std::size_t s = 1; s <= in + 2 * p; ++s) {
        const std::size_t o = (in + 2 * p - span) / s + 1;
        if (!out || o == out) v.push_back({in, o, k, s, p, d, static_cast<int>((s - 1) + p + 2 * (d - 1))});
        if (o == 1) break;  // a larger stride: the same single window
      }
    }
  by_cost(v);
  return v;
}

// A pool's dim (PyTorch's output length, with ceil_mode's last partial window).
std::vector<Axis> pool_axes(std::size_t in, std::size_t out, bool dilated) {
  auto length = [](int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil) {
    const int64_t span = in + 2 * p - d * (k - 1) - 1 + (ceil ? s - 1 : 0);
    int64_t o = (span >= 0 ? span / s : -((-span + s - 1) / s)) + 1;
    if (ceil && (o - 1) * s >= in + p) --o;
    return o;
  };
  std::vector<Axis> v;
  const auto n = static_cast<int64_t>(in);
  for (int64_t k = 1; k <= n + 2 * static_cast<int64_t>(most_padding); ++k)
    for (int64_t d = 1; d <= (dilated && k > 1 ? static_cast<int64_t>(most_dilation) : 1); ++d)
      for (int64_t p = 0; p <= std::min<int64_t>(most_padding, k / 2); ++p)
        for (int64_t s = 1; s <= std::max(k, n); ++s)
          for (bool ceil : {false, true}) {
            const int64_t o = length(n, k, s, p, d, ceil);
            if (o != static_cast<int64_t>(out)) continue;
            if (ceil && length(n, k, s, p, d, false) == o) continue;  // the same windows
            v.push_back({in, out, static_cast<std::size_t>(k), static_cast<std::size_t>(s),
                         static_cast<std::size_t>(p), static_cast<std::size_t>(d),
                         static_cast<int>((s != k) + p + 2 * (d - 1) + ceil)});
          }
  by_cost(v);
  return v;
}

// The first (h, w) pair, in order of cost, that fits; nothing after `tries`.
std::optional<std::pair<Axis, Axis>> first_fit(const std::vector<Axis>& hs, const std::vector<Axis>& ws,
                                               const std::function<bool(const Axis&, const Axis&)>& fits,
                                               std::size_t tries = 4096) {
  if (hs.empty() || ws.empty()) return std::nullopt;
  const int top = hs.back().cost + ws.back().cost;
  auto less = [](const Axis& a, int c) { return a.cost < c; };
  for (int level = 0; level <= top; ++level)
    for (const Axis& h : hs) {
      if (h.cost > level) break;
      for (auto it = std::lower_bound(ws.begin(), ws.end(), level - h.cost, less);
           it != ws.end() && it->cost == level - h.cost; ++it) {
        if (tries-- == 0) return std::nullopt;
        if (fits(h, *it)) return std::pair{h, *it};
      }
    }
  return std::nullopt;
}

// Up to 32 places spread over [0, size), the first and the last among them.
std::vector<std::size_t> spread(std::size_t size) {
  std::vector<std::size_t> at;
  const std::size_t n = std::min<std::size_t>(size, 32);
  for (std::size_t q = 0; q < n; ++q) at.push_back(n == 1 ? 0 : q * (size - 1) / (n - 1));
  return at;
}

bool same_value(double a, double b) {
  return a == b || (std::isnan(a) && std::isnan(b));
}

// An input [N, C, H, W] (or [C, H, W]; 1-d: [N, C, L], [C, L] with H = 1).
struct Planes {
  bool batched = false;
  std::size_t n = 1, c = 1, h = 1, w = 1;
};
std::optional<Planes> planes_of(const Array::shape_type& s, std::size_t spatial) {
  if (s.size() != spatial + 1 && s.size() != spatial + 2) return std::nullopt;
  const bool b = s.size() == spatial + 2;
  return Planes{b, b ? s[0] : 1, s[b ? 1 : 0], spatial == 2 ? s[s.size() - 2] : 1, s.back()};
}
std::size_t spatial_of(const std::string& op) {
  return op.find("2d") != std::string::npos || op == "unfold" ? 2 : 1;
}

// Output position (n, ch, y, x) as the output's own index, for the text.
std::string out_index(const Planes& pl, std::size_t spatial, std::size_t n, std::size_t ch, std::size_t y,
                      std::size_t x) {
  std::vector<std::size_t> idx;
  if (pl.batched) idx.push_back(n);
  idx.push_back(ch);
  if (spatial == 2) idx.push_back(y);
  idx.push_back(x);
  return index_str(idx);
}

// "in its 2 windows" and the like, for a pool's text.
std::string windows_count(std::size_t n) {
  return n == 1 ? "its 1 window" : "its " + std::to_string(n) + " windows";
}

// ----- max pools: the gradient of each window goes to its first maximum.

std::optional<Worked> max_pool_at(const Ctx& c, std::size_t k) {
  const std::size_t sp = spatial_of(c.n.op);
  const auto in = planes_of(c.n.input_shape(0), sp), out = planes_of(c.n.output_shape, sp);
  if (!in || !out) return std::nullopt;
  const float* X = c.x(0).data();
  const float* Y = c.y().data();
  // The place in its plane that window (oy, ox) of plane pl picks (-1: padding only).
  auto winner = [&](const Axis& h, const Axis& w, std::size_t pl, std::size_t oy, std::size_t ox) {
    int64_t won = -1;
    float best = -std::numeric_limits<float>::infinity();
    for (std::size_t th = 0; th < h.k; ++th)
      for (std::size_t tw = 0; tw < w.k; ++tw) {
        const int64_t i = h.at(oy, th), j = w.at(ox, tw);
        if (i < 0 || j < 0) continue;
        const float v =
            X[pl * in->h * in->w + static_cast<std::size_t>(i) * in->w + static_cast<std::size_t>(j)];
        if (won < 0 || v > best || std::isnan(v)) {
          best = v;
          won = i * static_cast<int64_t>(in->w) + j;
        }
      }
    return std::pair{won, best};
  };
  const std::vector<Axis> hs = sp == 2 ? pool_axes(in->h, out->h, true) : std::vector<Axis>{Axis{}};
  const auto fit = first_fit(hs, pool_axes(in->w, out->w, true), [&](const Axis& h, const Axis& w) {
    for (std::size_t j : spread(c.y().size())) {
      const std::size_t pl = j / (out->h * out->w), oy = j / out->w % out->h, ox = j % out->w;
      if (!same_value(Y[j], winner(h, w, pl, oy, ox).second)) return false;
    }
    return true;
  });
  if (!fit) return std::nullopt;
  const auto& [h, w] = *fit;
  const std::size_t pl = k / (in->h * in->w), i = k / in->w % in->h, j = k % in->w;
  std::vector<Term> terms;
  std::size_t windows = 0;
  for (const auto& [oy, th] : h.readers(i))
    for (const auto& [ox, tw] : w.readers(j)) {
      ++windows;
      if (winner(h, w, pl, oy, ox).first != static_cast<int64_t>(i * in->w + j)) continue;
      const std::size_t at = (pl * out->h + oy) * out->w + ox;
      terms.push_back({"grad" + out_index(*out, sp, pl / in->c, pl % in->c, oy, ox), "", c.gv(at)});
    }
  if (terms.empty()) return sum_of({{"0 (in " + windows_count(windows) + ", the max of none)", "", 0.0}});
  Worked wk = sum_of(terms);
  wk.text =
      (terms.size() == windows
           ? std::string("the max of ") + (windows == 1 ? "its window" : "all " + windows_count(windows))
           : "the max in " + std::to_string(terms.size()) + " of " + windows_count(windows)) +
      ": " + wk.text;
  return wk;
}

// ----- average pools: each window's gradient, divided by its size, to every element of it.

// The inputs output o averages along one dim, and what it divides by.
struct Span {
  std::size_t first, end, count;
};
std::vector<Span> avg_spans(const Axis& a, bool count_pad) {
  std::vector<Span> v;
  for (std::size_t o = 0; o < a.out; ++o) {
    const int64_t start = static_cast<int64_t>(o * a.s) - static_cast<int64_t>(a.p);
    const int64_t end_padded = std::min(start + static_cast<int64_t>(a.k), static_cast<int64_t>(a.in + a.p));
    const auto first = static_cast<std::size_t>(std::max<int64_t>(start, 0));
    const auto end = static_cast<std::size_t>(std::min(end_padded, static_cast<int64_t>(a.in)));
    v.push_back({first, end, count_pad ? static_cast<std::size_t>(end_padded - start) : end - first});
  }
  return v;
}
std::vector<Span> adaptive_spans(std::size_t in, std::size_t out) {
  std::vector<Span> v;
  for (std::size_t o = 0; o < out; ++o) {
    const std::size_t first = o * in / out, end = ((o + 1) * in + out - 1) / out;
    v.push_back({first, end, end - first});
  }
  return v;
}

std::optional<Worked> avg_pool_at(const Ctx& c, std::size_t k) {
  const std::size_t sp = spatial_of(c.n.op);
  const auto in = planes_of(c.n.input_shape(0), sp), out = planes_of(c.n.output_shape, sp);
  if (!in || !out) return std::nullopt;
  const float* X = c.x(0).data();
  const float* Y = c.y().data();
  // The window's sum over rows x cols of plane pl.
  auto window_sum = [&](std::size_t pl, const Span& r, const Span& q) {
    double s = 0;
    for (std::size_t i = r.first; i < r.end; ++i)
      for (std::size_t j = q.first; j < q.end; ++j) s += X[(pl * in->h + i) * in->w + j];
    return s;
  };
  std::vector<Span> rows, cols;
  std::optional<double> divisor;
  auto averages = [&](const std::vector<Span>& r, const std::vector<Span>& q, std::optional<double> div) {
    for (std::size_t j : spread(c.y().size())) {
      const std::size_t pl = j / (out->h * out->w), oy = j / out->w % out->h, ox = j % out->w;
      const double want = window_sum(pl, r[oy], q[ox]) /
                          (div ? *div : static_cast<double>(r[oy].count) * static_cast<double>(q[ox].count));
      if (!(std::fabs(want - Y[j]) <= 1e-5 * (1 + std::fabs(want))) && !same_value(want, Y[j])) return false;
    }
    rows = r, cols = q, divisor = div;
    return true;
  };
  if (c.n.op.find("adaptive") == 0) {
    if (!averages(adaptive_spans(in->h, out->h), adaptive_spans(in->w, out->w), std::nullopt))
      return std::nullopt;
  } else {
    const std::vector<Axis> hs = sp == 2 ? pool_axes(in->h, out->h, false) : std::vector<Axis>{Axis{}};
    const auto fit = first_fit(hs, pool_axes(in->w, out->w, false), [&](const Axis& h, const Axis& w) {
      for (bool count_pad : {true, false})
        if (averages(avg_spans(h, count_pad), avg_spans(w, count_pad), std::nullopt)) return true;
      if (sp != 2) return false;  // divisor_override, read back at the first window that is not 0
      const auto r = avg_spans(h, true), q = avg_spans(w, true);
      for (std::size_t j = 0; j < c.y().size(); ++j)
        if (Y[j] != 0 && std::isfinite(Y[j])) {
          const std::size_t pl = j / (out->h * out->w), oy = j / out->w % out->h, ox = j % out->w;
          const double div = std::round(window_sum(pl, r[oy], q[ox]) / Y[j]);
          return div >= 1 && averages(r, q, div);
        }
      return false;
    });
    if (!fit) return std::nullopt;
  }
  const std::size_t pl = k / (in->h * in->w), i = k / in->w % in->h, j = k % in->w;
  std::vector<Term> terms;
  for (std::size_t oy = 0; oy < rows.size(); ++oy)
    for (std::size_t ox = 0; ox < cols.size(); ++ox) {
      if (i < rows[oy].first || i >= rows[oy].end || j < cols[ox].first || j >= cols[ox].end) continue;
      const double n = divisor ? *divisor : static_cast<double>(rows[oy].count * cols[ox].count);
      const double g = c.gv((pl * out->h + oy) * out->w + ox);
      terms.push_back({num(g) + " / " + num(n), "", g / n});
    }
  const std::size_t windows = terms.size();
  Worked wk = sum_of(std::move(terms));
  if (windows) wk.text = "grad / window size over " + windows_count(windows) + ": " + wk.text;
  return wk;
}

// ----- unfold: each element gets the gradient of every patch entry that copied it.

// unfold's dims: the kernel from the rows (C kh kw), the grid from the columns (oh ow).
std::optional<std::pair<Axis, Axis>> unfold_axes(const Ctx& c, const Planes& in) {
  const auto& os = c.n.output_shape;
  if (os.size() != (in.batched ? 3u : 2u) || os[os.size() - 2] % in.c) return std::nullopt;
  const std::size_t kk = os[os.size() - 2] / in.c, cols = os.back(), rows = os[os.size() - 2];
  const float* X = c.x(0).data();
  const float* Y = c.y().data();
  std::vector<std::size_t> kernels;  // kh, the squarest first
  for (std::size_t kh = 1; kh <= kk; ++kh)
    if (kk % kh == 0) kernels.push_back(kh);
  std::stable_sort(kernels.begin(), kernels.end(), [kk](std::size_t a, std::size_t b) {
    auto gap = [kk](std::size_t kh) { return std::max(kh, kk / kh) - std::min(kh, kk / kh); };
    return gap(a) < gap(b);
  });
  for (std::size_t kh : kernels) {
    const std::size_t kw = kk / kh;
    const auto fit =
        first_fit(conv_axes(in.h, kh, 0), conv_axes(in.w, kw, 0), [&](const Axis& h, const Axis& w) {
          if (h.out * w.out != cols) return false;
          for (std::size_t at : spread(c.y().size())) {
            const std::size_t n = at / (rows * cols), r = at / cols % rows, l = at % cols;
            const std::size_t ch = r / kk, th = r % kk / kw, tw = r % kw;
            const int64_t i = h.at(l / w.out, th), j = w.at(l % w.out, tw);
            const double want = i < 0 || j < 0
                                    ? 0.0
                                    : X[((n * in.c + ch) * in.h + static_cast<std::size_t>(i)) * in.w +
                                        static_cast<std::size_t>(j)];
            if (!same_value(want, Y[at])) return false;
          }
          return true;
        });
    if (fit) return fit;
  }
  return std::nullopt;
}

std::optional<Worked> unfold_at(const Ctx& c, std::size_t k) {
  const auto in = planes_of(c.n.input_shape(0), 2);
  if (!in) return std::nullopt;
  const auto fit = unfold_axes(c, *in);
  if (!fit) return std::nullopt;
  const auto& [h, w] = *fit;
  const std::size_t n = k / (in->c * in->h * in->w), ch = k / (in->h * in->w) % in->c, i = k / in->w % in->h,
                    j = k % in->w, rows = in->c * h.k * w.k, cols = h.out * w.out;
  std::vector<Term> terms;
  for (const auto& [oy, th] : h.readers(i))
    for (const auto& [ox, tw] : w.readers(j)) {
      const std::size_t r = (ch * h.k + th) * w.k + tw, l = oy * w.out + ox;
      std::vector<std::size_t> idx{r, l};
      if (in->batched) idx.insert(idx.begin(), n);
      terms.push_back({"grad" + index_str(idx), "", c.gv((n * rows + r) * cols + l)});
    }
  return sum_of(std::move(terms));
}

// ----- conv1d, conv2d: y[n, o] = bias[o] + sum over its group's channels and the kernel of weight · x.

std::optional<Worked> conv_at(const Ctx& c, std::size_t i, std::size_t k) {
  const std::size_t sp = spatial_of(c.n.op);
  const auto in = planes_of(c.n.input_shape(0), sp), out = planes_of(c.n.output_shape, sp);
  const auto& ws = c.n.input_shape(1);
  if (!in || !out || ws.size() != sp + 2 || ws[1] == 0 || in->c % ws[1]) return std::nullopt;
  const std::size_t cg = ws[1], groups = in->c / cg, oc = ws[0], og = oc / std::max<std::size_t>(groups, 1);
  const std::size_t kh = sp == 2 ? ws[2] : 1, kw = ws.back();
  const float *X = c.x(0).data(), *W = c.x(1).data(), *B = c.n.inputs.size() > 2 ? c.x(2).data() : nullptr;
  auto x_at = [&](std::size_t n, std::size_t ch, std::size_t y, std::size_t x) {
    return static_cast<double>(X[((n * in->c + ch) * in->h + y) * in->w + x]);
  };
  auto w_at = [&](std::size_t o, std::size_t cl, std::size_t th, std::size_t tw) {
    return static_cast<double>(W[((o * cg + cl) * kh + th) * kw + tw]);
  };
  const std::vector<Axis> hs = sp == 2 ? conv_axes(in->h, kh, out->h) : std::vector<Axis>{Axis{}};
  const auto fit = first_fit(hs, conv_axes(in->w, kw, out->w), [&](const Axis& h, const Axis& w) {
    for (std::size_t at : spread(c.y().size())) {
      const std::size_t n = at / (oc * out->h * out->w), o = at / (out->h * out->w) % oc,
                        oy = at / out->w % out->h, ox = at % out->w;
      double s = B ? B[o] : 0.0, scale = std::fabs(s);
      for (std::size_t cl = 0; cl < cg; ++cl)
        for (std::size_t th = 0; th < kh; ++th)
          for (std::size_t tw = 0; tw < kw; ++tw) {
            const int64_t y = h.at(oy, th), x = w.at(ox, tw);
            if (y < 0 || x < 0) continue;
            const double t = w_at(o, cl, th, tw) * x_at(n, o / og * cg + cl, static_cast<std::size_t>(y),
                                                        static_cast<std::size_t>(x));
            s += t;
            scale += std::fabs(t);
          }
      if (!(std::fabs(s - c.y().data()[at]) <= 1e-4 * scale + 1e-6)) return false;
    }
    return true;
  });
  if (!fit) return std::nullopt;
  const auto& [h, w] = *fit;
  auto g_at = [&](std::size_t n, std::size_t o, std::size_t oy, std::size_t ox) {
    return c.gv(((n * oc + o) * out->h + oy) * out->w + ox);
  };
  std::vector<Term> terms;
  std::string what;
  if (i == 0) {  // x[n, ch, y, x] += grad[n, o, oy, ox] · weight[o, ch in its group, th, tw]
    const std::size_t n = k / (in->c * in->h * in->w), ch = k / (in->h * in->w) % in->c,
                      y = k / in->w % in->h, x = k % in->w;
    for (std::size_t o = ch / cg * og; o < (ch / cg + 1) * og; ++o)
      for (const auto& [oy, th] : h.readers(y))
        for (const auto& [ox, tw] : w.readers(x)) {
          const double g = g_at(n, o, oy, ox), wv = w_at(o, ch % cg, th, tw);
          terms.push_back({num(g) + " · " + par(wv), "", g * wv});
        }
    what = "grad · weight over the outputs that read it";
  } else if (i == 1) {  // weight[o, cl, th, tw] += grad[n, o, oy, ox] · x[n, its channel, y, x]
    const std::size_t o = k / (cg * kh * kw), cl = k / (kh * kw) % cg, th = k / kw % kh, tw = k % kw;
    for (std::size_t n = 0; n < in->n; ++n)
      for (std::size_t oy = 0; oy < h.out; ++oy)
        for (std::size_t ox = 0; ox < w.out; ++ox) {
          const int64_t y = h.at(oy, th), x = w.at(ox, tw);
          if (y < 0 || x < 0) continue;
          const double g = g_at(n, o, oy, ox), xv = x_at(n, o / og * cg + cl, static_cast<std::size_t>(y),
                                                         static_cast<std::size_t>(x));
          terms.push_back({num(g) + " · " + par(xv), "", g * xv});
        }
    what = "grad · x over the windows this tap saw";
  } else {  // bias[o] += every grad of channel o
    for (std::size_t n = 0; n < in->n; ++n)
      for (std::size_t oy = 0; oy < h.out; ++oy)
        for (std::size_t ox = 0; ox < w.out; ++ox) terms.push_back(just(g_at(n, k, oy, ox)));
    what = "grad over its output channel";
  }
  const std::size_t count = terms.size();
  Worked wk = sum_of(std::move(terms));
  if (count > 1) wk.text = what + " (" + std::to_string(count) + "): " + wk.text;
  return wk;
}

// ------------------------------------------------ layer_norm, batch_norm
//
// y = w · x̂ + b with x̂ = (x - mean) / sigma over each group of x (layer_norm:
// the last dims; batch_norm: a channel). Which of weight and bias an op was
// given, and sigma (eps included), are read back from the values: sigma by
// least squares over the group. batch_norm in eval mode (running statistics)
// is y = slope · x + c per channel, and x's gradient grad · slope.

struct Norm {
  std::vector<std::vector<std::size_t>> groups;  // x's flat indices, group by group
  std::vector<std::size_t> group_of;             // x's flat index -> its group
  std::vector<std::size_t> param_of;             // x's flat index -> its element of weight and bias
  int w = -1, b = -1;                            // the input slots of weight and bias
  bool batch = true;                             // statistics of the group (else: running statistics)
  std::vector<double> mean, rstd, slope;         // per group
  double gamma(const Ctx& c, std::size_t at) const { return w < 0 ? 1.0 : c.x(w).data()[param_of[at]]; }
  double beta(const Ctx& c, std::size_t at) const { return b < 0 ? 0.0 : c.x(b).data()[param_of[at]]; }
  double xhat(const Ctx& c, std::size_t at) const {
    if (batch) return (c.x(0).data()[at] - mean[group_of[at]]) * rstd[group_of[at]];
    return (c.y().data()[at] - beta(c, at)) / gamma(c, at);
  }
};

// Fits the groups (set in `nm`) with each reading of the inputs after x.
bool fit_norm(const Ctx& c, Norm& nm, bool eval_allowed) {
  const std::size_t slots = c.n.inputs.size();
  std::vector<std::pair<int, int>> readings;  // (weight, bias)
  if (slots == 1) readings = {{-1, -1}};
  if (slots == 2) readings = {{1, -1}, {-1, 1}};
  if (slots == 3) readings = {{1, 2}};
  const float *X = c.x(0).data(), *Y = c.y().data();
  for (bool batch : {true, false}) {
    if (!batch && !eval_allowed) break;
    for (const auto& [wi, bi] : readings) {
      nm.w = wi, nm.b = bi, nm.batch = batch;
      nm.mean.assign(nm.groups.size(), 0.0), nm.rstd.assign(nm.groups.size(), 0.0);
      nm.slope.assign(nm.groups.size(), 0.0);
      bool fits = true;
      for (std::size_t q = 0; fits && q < nm.groups.size(); ++q) {
        const auto& grp = nm.groups[q];
        double mx = 0, my = 0, num_ = 0, den = 0, top = 0;
        for (std::size_t at : grp) mx += X[at], my += Y[at], top = std::max(top, std::fabs(double(Y[at])));
        mx /= static_cast<double>(grp.size()), my /= static_cast<double>(grp.size());
        if (batch) {  // y - b = w · rstd · (x - mean)
          for (std::size_t at : grp) {
            const double u = nm.gamma(c, at) * (X[at] - mx);
            num_ += (Y[at] - nm.beta(c, at)) * u, den += u * u;
          }
          const double r = den > 0 ? num_ / den : 0.0;
          for (std::size_t at : grp)
            fits = fits &&
                   std::fabs(nm.gamma(c, at) * (X[at] - mx) * r + nm.beta(c, at) - Y[at]) <= 1e-4 * (1 + top);
          nm.mean[q] = mx, nm.rstd[q] = r, nm.slope[q] = 0;
        } else {  // y = slope · x + c
          for (std::size_t at : grp) num_ += (X[at] - mx) * (Y[at] - my), den += (X[at] - mx) * (X[at] - mx);
          const double a = den > 0 ? num_ / den : 0.0;
          for (std::size_t at : grp)
            fits = fits && std::fabs(my + a * (X[at] - mx) - Y[at]) <= 1e-4 * (1 + top);
          nm.slope[q] = a;
        }
      }
      if (fits) return true;
    }
  }
  return false;
}

std::optional<Norm> layer_norm_groups(const Ctx& c) {
  const auto& xs = c.n.input_shape(0);
  const std::size_t size = c.x(0).size();
  std::vector<std::size_t> sizes;  // the group size: weight's or bias's, else each run of last dims
  if (c.n.inputs.size() > 1) {
    sizes.push_back(c.x(1).size());
  } else {
    std::size_t n = 1;
    for (std::size_t d = xs.size(); d-- > 0;) sizes.push_back(n *= xs[d]);
  }
  for (std::size_t n : sizes) {
    if (n == 0 || size % n) continue;
    Norm nm;
    nm.groups.resize(size / n);
    for (std::size_t at = 0; at < size; ++at) {
      nm.groups[at / n].push_back(at);
      nm.group_of.push_back(at / n);
      nm.param_of.push_back(at % n);
    }
    if (fit_norm(c, nm, false)) return nm;
  }
  return std::nullopt;
}

std::optional<Norm> batch_norm_groups(const Ctx& c) {
  const auto& xs = c.n.input_shape(0);
  if (xs.size() < 2 || xs[1] == 0) return std::nullopt;
  const std::size_t size = c.x(0).size(), ch = xs[1], inner = size / std::max<std::size_t>(xs[0] * ch, 1);
  Norm nm;
  nm.groups.resize(ch);
  for (std::size_t at = 0; at < size; ++at) {
    const std::size_t q = at / inner % ch;
    nm.groups[q].push_back(at);
    nm.group_of.push_back(q);
    nm.param_of.push_back(q);
  }
  if (!fit_norm(c, nm, true)) return std::nullopt;
  return nm;
}

std::optional<Worked> norm_at(const Ctx& c, std::size_t i, std::size_t k, bool layer) {
  const std::optional<Norm> fit = layer ? layer_norm_groups(c) : batch_norm_groups(c);
  if (!fit) return std::nullopt;
  const Norm& nm = *fit;
  const std::string group = layer ? "row" : "channel";
  if (static_cast<int>(i) == nm.w || static_cast<int>(i) == nm.b) {  // sums over the elements it scales
    std::vector<Term> terms;
    for (std::size_t at = 0; at < nm.param_of.size(); ++at) {
      if (nm.param_of[at] != k) continue;
      const double g = c.gv(at);
      if (static_cast<int>(i) == nm.b) {
        terms.push_back(just(g));
      } else {
        if (!nm.batch && nm.gamma(c, at) == 0) return std::nullopt;  // x̂ cannot be read back
        terms.push_back({num(g) + " · " + par(nm.xhat(c, at)), "", g * nm.xhat(c, at)});
      }
    }
    return sum_of(std::move(terms));
  }
  if (i != 0) return std::nullopt;
  const std::size_t q = nm.group_of[k];
  const double g = c.gv(k), gw = nm.gamma(c, k);
  if (!nm.batch) {
    const double a = nm.slope[q];
    return sum_of(
        {{"w / sigma = " + num(a) + " (running statistics): " + num(g) + " · " + par(a), "", g * a}});
  }
  double m1 = 0, m2 = 0;  // mean(grad · w), mean(grad · w · x̂) over the group
  for (std::size_t at : nm.groups[q]) {
    m1 += c.gv(at) * nm.gamma(c, at);
    m2 += c.gv(at) * nm.gamma(c, at) * nm.xhat(c, at);
  }
  m1 /= static_cast<double>(nm.groups[q].size()), m2 /= static_cast<double>(nm.groups[q].size());
  const double xh = nm.xhat(c, k), sigma = 1 / nm.rstd[q];
  const std::string gws = nm.w < 0 ? "grad" : "grad · w";
  Worked wk;
  wk.value = {nm.rstd[q] * (g * gw - m1 - xh * m2)};
  wk.text = "over its " + group + " of " + std::to_string(nm.groups[q].size()) + ": mean(" + gws +
            ") = " + num(m1) + ", mean(" + gws + " · x̂) = " + num(m2) + ", sigma = " + num(sigma) + "; (" +
            num(g) + (nm.w < 0 ? "" : " · " + par(gw)) + " - " + par(m1) + " - " + par(xh) + " · " + par(m2) +
            ") / " + num(sigma) + " = " + num(wk.value[0]);
  return wk;
}

// ------------------------------------------------ embedding_bag, embedding_dot

// Up to 4 of a row's values: [0.5, -1, 2, ...].
std::string row_str(const double* v, std::size_t n) {
  std::string s = "[";
  for (std::size_t d = 0; d < n && d < 4; ++d) s += (d ? ", " : "") + num(v[d]);
  return s + (n > 4 ? ", ...]" : "]");
}

// A row's terms added up: "text1 + text2 = values1 + values2 = total".
Worked rows_sum(const std::vector<std::string>& texts, const std::vector<std::string>& values,
                std::vector<double> total) {
  Worked w;
  std::string t, v;
  for (std::size_t q = 0; q < texts.size(); ++q) {
    t += (q ? " + " : "") + texts[q];
    v += (q ? " + " : "") + values[q];
  }
  w.text = t + " = " + v;
  if (texts.size() > 1 || values[0].find(' ') != std::string::npos)
    w.text += " = " + row_str(total.data(), total.size());
  w.value = std::move(total);
  return w;
}

// embedding_bag: the mode (sum, mean, max) read back from the bags' values.
std::optional<Worked> embedding_bag_at(const Ctx& c, std::size_t i, std::size_t k) {
  const Indices& ids = c.n.ids;
  const std::vector<int64_t>& bags = c.n.bags;
  const Array& W = c.x(0);
  if (ids.size() != bags.size() || W.dimension() != 2) return std::nullopt;
  const std::size_t dim = W.shape()[1], nb = c.y().size() / std::max<std::size_t>(dim, 1);
  const bool weighted = c.n.inputs.size() > 1;
  std::vector<std::size_t> count(nb, 0);
  for (int64_t b : bags)
    if (b >= 0) ++count[static_cast<std::size_t>(b)];
  auto row = [&](std::size_t e) { return W.data() + ids.data()[e] * static_cast<int64_t>(dim); };
  // Each mode's bags recomputed; the first that gives the output is the op's.
  std::string mode;
  std::vector<std::size_t> argmax;  // max: the entry that won bag b's column d
  for (const char* m : {"sum", "mean", "max"}) {
    if (weighted && m != std::string("sum")) break;
    std::vector<double> out(nb * dim, 0.0);
    std::vector<std::size_t> arg(nb * dim, ids.size());
    for (std::size_t e = 0; e < ids.size(); ++e) {
      if (bags[e] < 0) continue;
      const auto b = static_cast<std::size_t>(bags[e]);
      for (std::size_t d = 0; d < dim; ++d) {
        const double v = row(e)[d];
        if (m[1] == 'a') {  // max: the first maximum
          if (arg[b * dim + d] == ids.size() || v > out[b * dim + d])
            out[b * dim + d] = v, arg[b * dim + d] = e;
        } else {
          out[b * dim + d] += v * (weighted ? c.x(1).data()[e] : m[0] == 'm' ? 1.0 / count[b] : 1.0);
        }
      }
    }
    bool same = true;
    for (std::size_t q = 0; same && q < out.size(); ++q)
      same = std::fabs(out[q] - c.y().data()[q]) <= 1e-4 * (1 + std::fabs(out[q]));
    if (same) {
      mode = m, argmax = std::move(arg);
      break;
    }
  }
  if (mode.empty()) return std::nullopt;
  auto grad_row = [&](std::size_t b) { return c.g.data() + b * dim; };
  if (i == 1) {  // per_sample_weights[e] += the row it looked up · its bag's grad
    if (bags[k] < 0) return sum_of({{"0 (padding)", "", 0.0}});
    const auto b = static_cast<std::size_t>(bags[k]);
    std::vector<Term> terms;
    for (std::size_t d = 0; d < dim; ++d)
      terms.push_back({num(row(k)[d]) + " · " + par(grad_row(b)[d]), "", row(k)[d] * grad_row(b)[d]});
    Worked wk = sum_of(std::move(terms));
    wk.text = "row " + std::to_string(ids.data()[k]) + " · grad bag " + std::to_string(b) + ": " + wk.text;
    return wk;
  }
  std::vector<std::string> texts, values;
  std::vector<double> total(dim, 0.0);
  for (std::size_t e = 0; e < ids.size(); ++e) {
    if (ids.data()[e] != static_cast<int64_t>(k) || bags[e] < 0) continue;
    const auto b = static_cast<std::size_t>(bags[e]);
    std::vector<double> part(dim);
    std::string text = "grad bag " + std::to_string(b), value;
    if (mode == "max") {
      for (std::size_t d = 0; d < dim; ++d) part[d] = argmax[b * dim + d] == e ? grad_row(b)[d] : 0.0;
      text += " where entry " + std::to_string(e) + " is the max";
      value = row_str(part.data(), dim);
    } else {
      const double f = weighted ? c.x(1).data()[e] : mode == "mean" ? 1.0 / count[b] : 1.0;
      for (std::size_t d = 0; d < dim; ++d) part[d] = grad_row(b)[d] * f;
      std::vector<double> g(grad_row(b), grad_row(b) + dim);
      value = row_str(g.data(), dim);
      if (weighted) text += " · w" + std::to_string(e), value += " · " + par(f);
      if (mode == "mean") text += " / " + std::to_string(count[b]), value += " / " + std::to_string(count[b]);
    }
    for (std::size_t d = 0; d < dim; ++d) total[d] += part[d];
    texts.push_back(text);
    values.push_back(value);
  }
  if (texts.empty()) return std::nullopt;
  return rows_sum(texts, values, std::move(total));
}

// embedding_dot(h [P, dim], ids [P, C]): y[p, q] = h[p] · weight[ids[p, q]].
std::optional<Worked> embedding_dot_at(const Ctx& c, std::size_t i, std::size_t k) {
  const Indices& ids = c.n.ids;
  const Array &W = c.x(0), &H = c.x(1);
  if (ids.dimension() != 2 || W.dimension() != 2 || H.dimension() != 2) return std::nullopt;
  const std::size_t rows = ids.shape()[0], cols = ids.shape()[1], dim = W.shape()[1];
  if (i == 1) {  // h[p, d] += sum_q grad[p, q] · weight[ids[p, q], d]
    const std::size_t p = k / dim, d = k % dim;
    std::vector<Term> terms;
    for (std::size_t q = 0; q < cols; ++q) {
      const double g = c.gv(p * cols + q), w = W.data()[ids(p, q) * static_cast<int64_t>(dim) + d];
      terms.push_back({num(g) + " · " + par(w), "", g * w});
    }
    return sum_of(std::move(terms));
  }
  std::vector<std::string> texts, values;  // weight row k += grad[p, q] · h[p] where ids[p, q] = k
  std::vector<double> total(dim, 0.0);
  for (std::size_t p = 0; p < rows; ++p)
    for (std::size_t q = 0; q < cols; ++q) {
      if (ids(p, q) != static_cast<int64_t>(k)) continue;
      const double g = c.gv(p * cols + q);
      std::vector<double> h(H.data() + p * dim, H.data() + (p + 1) * dim);
      for (std::size_t d = 0; d < dim; ++d) total[d] += g * h[d];
      texts.push_back("grad" + index_str({p, q}) + " · h row " + std::to_string(p));
      values.push_back(num(g) + " · " + row_str(h.data(), dim));
    }
  if (texts.empty()) return std::nullopt;
  return rows_sum(texts, values, std::move(total));
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

std::vector<std::string> ops_with_rules() {
  std::vector<std::string> ops;
  for (const auto& [op, e] : table()) ops.push_back(op);
  return ops;
}

bool rule_has_numbers(const std::string& op) {
  const Entry* e = entry(op);
  return e && e->plug;
}

std::optional<RuleInput> rule_input(const std::string& op, std::size_t i) {
  const Entry* e = entry(op);
  if (!e) return std::nullopt;
  return e->inputs[std::min(i, e->inputs.size() - 1)];
}

}  // namespace tg::debug

namespace tg {

std::string local_rule(const std::string& op) {
  using namespace debug;
  const Entry* e = entry(op);
  if (!e) return "";
  std::string s;
  for (const RuleInput& in : e->inputs) s += (s.empty() ? "" : " | ") + in.name + ".grad += " + in.formula;
  return s;
}

}  // namespace tg

namespace tg::debug {

std::vector<Worked> worked(const Node& node, const Array& grad_output, const Grads& grads, std::size_t i,
                           std::size_t max_elements) {
  const Entry* e = entry(node.op);
  if (!e || !e->plug || i >= grads.size() || grads[i].empty() || !node.needs_grad(i)) return {};
  const Ctx c{node, grad_output};
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
    w->at = by_rows ? name + " row " + std::to_string(k) : name + index_str(unravel(k, shape));
    out.push_back(std::move(*w));
  }
  return out;
}

}  // namespace tg::debug
