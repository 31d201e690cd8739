// What the worked rules share: the definitions of what rules_common.hpp declares and describes.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "rules_common.hpp"

namespace tg::debug::rules {

// ------------------------------------------------------------ formatting

std::string num(double x) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%g", x == 0 ? 0.0 : x);
  if (!std::isfinite(x) || static_cast<float>(std::strtod(buf, nullptr)) == static_cast<float>(x)) return buf;
  std::snprintf(buf, sizeof buf, "%#.6g", x);
  return buf;
}
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

std::size_t source_of(std::size_t j, const Array::shape_type& out, const Array::shape_type& in) {
  const std::vector<std::size_t> o = unravel(j, out);
  std::vector<std::size_t> i(in.size());
  for (std::size_t d = 0; d < in.size(); ++d) i[d] = in[d] == 1 ? 0 : o[o.size() - in.size() + d];
  return ravel(i, in);
}

Worked sum_of(std::vector<Term> terms, std::size_t max_shown) {
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

// ------------------------------------------------------------ elementwise terms

Term times(double g, const std::string& text, double factor, bool evaluate) {
  return {num(g) + " · " + text, evaluate ? num(g) + " · " + par(factor) : "", g * factor};
}
Term just(double g) {
  return {num(g), "", g};
}

double sigmoid(double x) {
  return 1 / (1 + std::exp(-x));
}

// -------------------------------------------------- reductions along one dim

std::size_t column_at(const Array::shape_type& in, std::size_t ax, std::size_t j, std::size_t r) {
  std::size_t inner = 1;
  for (std::size_t d = ax + 1; d < in.size(); ++d) inner *= in[d];
  return (j / inner) * in[ax] * inner + r * inner + j % inner;
}

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

std::pair<std::size_t, std::size_t> column_of(const Array::shape_type& in, std::size_t ax, std::size_t k) {
  std::size_t inner = 1;
  for (std::size_t d = ax + 1; d < in.size(); ++d) inner *= in[d];
  const std::size_t r = (k / inner) % in[ax];
  return {r, (k / inner / in[ax]) * inner + k % inner};
}

}  // namespace tg::debug::rules
