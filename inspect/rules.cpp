// The local rule of every op's backward, in one table keyed by the op's name, and each rule worked out with a
// step's numbers.
//
// A rule says what an op adds to each input's gradient, given the gradient
// `grad` that reached its output (y): tanh's is x.grad += grad · (1 - y²).
// worked() writes one element of that with the numbers of a backward step
// plugged in, computed here from the node's saved inputs and output, not taken
// from the gradient the op's closure produced: tests/test_rules.cpp holds the
// two equal for every op, so a rule cannot drift from the code.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
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
  Plug plug;                      // null: the rule is given in words only
  bool by_rows = false;           // worked per row of the input (lookups), k a row
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

// binary_cross_entropy(_with_logits)(x, t), without weights: the mean or sum
// read back from the output.
std::optional<Worked> bce_at(const Ctx& c, std::size_t i, std::size_t k, bool logits) {
  if (c.n.inputs.size() != 2) return std::nullopt;  // weight, pos_weight: in words only
  const Array &x = c.x(0), &t = c.x(1);
  auto loss = [logits](double x, double t) {
    if (logits) return std::max(x, 0.0) - x * t + std::log1p(std::exp(-std::fabs(x)));
    return -(t * std::max(std::log(x), -100.0) + (1 - t) * std::max(std::log1p(-x), -100.0));
  };
  double total = 0;
  for (std::size_t q = 0; q < x.size(); ++q) total += loss(x.data()[q], t.data()[q]);
  const bool none = c.y().size() == x.size() && !c.n.output_shape.empty();
  const double y = c.y().data()[0];
  const bool mean = !none && std::fabs(y - total / x.size()) <= 1e-4 * (1 + std::fabs(y));
  const double n = mean ? static_cast<double>(x.size()) : 1.0, g = c.gv(none ? k : 0);
  const double xv = x.data()[k], tv = t.data()[k];
  const std::string over = mean ? " / " + num(n) : "";
  if (logits) {
    if (i == 0)
      return sum_of(
          {{num(g) + " · (sigmoid(" + num(xv) + ") - " + par(tv) + ")" + over,
            num(g) + " · (" + num(sigmoid(xv)) + " - " + par(tv) + ")" + over, g * (sigmoid(xv) - tv) / n}});
    return sum_of({{"-" + par(g) + " · " + par(xv) + over, "", -g * xv / n}});
  }
  if (i == 0)
    return sum_of({{num(g) + " · (" + num(xv) + " - " + par(tv) + ") / (" + num(xv) + " · (1 - " + num(xv) +
                        "))" + over,
                    "", g * (xv - tv) / std::max((1 - xv) * xv, 1e-12) / n}});
  return sum_of({{"-" + par(g) + " · log(" + num(xv) + " / (1 - " + num(xv) + "))" + over, "",
                  -g * std::log(xv / (1 - xv)) / n}});
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
        nullptr};
    m["embedding_dot"] = {{{"weight", "rows[ids[p, c]] += grad[p, c] · h[p]"},
                           {"h", "h[p] += sum_c grad[p, c] · weight[ids[p, c]]"}},
                          nullptr};
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
         {"target", "-grad · w · x / n"},
         {"weight", "grad · the element's loss / n"},
         {"pos_weight", "-grad · w · t · log_sigmoid(x) / n"}},
        [](const Ctx& c, std::size_t i, std::size_t k) { return bce_at(c, i, k, true); }};
    m["layer_norm"] = {
        {{"x", "(w · grad - mean(w · grad) - x̂ · mean(w · grad · x̂)) / sigma   (x̂ = (x - mean) / sigma)"},
         {"weight", "sum over the rows of grad · x̂"},
         {"bias", "sum over the rows of grad"}},
        nullptr};
    m["batch_norm"] = {
        {{"x", "(w · grad - mean(w · grad) - x̂ · mean(w · grad · x̂)) / sigma, over the batch (training)"},
         {"weight", "sum over the batch of grad · x̂"},
         {"bias", "sum over the batch of grad"}},
        nullptr};
    for (const char* op : {"conv1d", "conv2d"})
      m[op] = {{{"x", "each window's elements += grad · weight (a transposed convolution)"},
                {"weight", "sum over the windows of grad · the window of x"},
                {"bias", "grad summed over batch and positions"}},
               nullptr};
    for (const char* op : {"max_pool1d", "max_pool2d"})
      m[op] = {{{"x", "grad to the maximum of each window"}}, nullptr};
    for (const char* op : {"avg_pool1d", "avg_pool2d", "adaptive_avg_pool1d", "adaptive_avg_pool2d"})
      m[op] = {{{"x", "grad / window size to every element of its window"}}, nullptr};
    m["unfold"] = {{{"x", "each element += the grad of every patch that copied it"}}, nullptr};
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
  if (e->by_rows) {
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
    w->at = e->by_rows ? name + " row " + std::to_string(k) : name + index_str(unravel(k, shape));
    out.push_back(std::move(*w));
  }
  return out;
}

}  // namespace tg::debug
