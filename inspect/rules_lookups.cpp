// Worked rules of the ops that move or pick values: moves, gather and the lookups.
//
// permute, transpose, narrow, cat, stack, gather, index_select, embedding,
// embedding_bag, embedding_dot.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>

#include "rules_common.hpp"

namespace tg::debug::rules {

// ------------------------------------------------------ moves and picks
//
// Ops that move values without arithmetic: each input element lands at one
// output position (or none), found from the shapes and checked against the
// values, and gets the gradient there.

namespace {

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

}  // namespace

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
  if (!c.n.ids) return std::nullopt;
  const Indices& ids = *c.n.ids;
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

// ------------------------------------------------ index_select, embedding

// a lookup: row r of input 0 gets the sum of the output rows whose id is r.
std::optional<Worked> rows_hit(const Ctx& c, std::size_t, std::size_t r) {
  if (!c.n.ids || c.n.ids->size() == 0) return std::nullopt;  // not a lookup
  const Indices& ids = *c.n.ids;
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

// ------------------------------------------------ embedding_bag, embedding_dot

namespace {

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

}  // namespace

// embedding_bag: the mode (sum, mean, max) read back from the bags' values.
std::optional<Worked> embedding_bag_at(const Ctx& c, std::size_t i, std::size_t k) {
  if (!c.n.ids) return std::nullopt;
  const Indices& ids = *c.n.ids;
  const std::vector<std::size_t>& bags = c.n.bags;
  constexpr std::size_t padding = SIZE_MAX;  // a padding entry's bag
  const Array& W = c.x(0);
  if (ids.size() != bags.size() || W.dimension() != 2) return std::nullopt;
  const std::size_t dim = W.shape()[1], nb = c.y().size() / std::max<std::size_t>(dim, 1);
  const bool weighted = c.n.inputs.size() > 1;
  std::vector<std::size_t> count(nb, 0);
  for (std::size_t b : bags)
    if (b != padding) ++count[b];
  auto row = [&](std::size_t e) { return W.data() + ids.data()[e] * static_cast<int64_t>(dim); };
  // Each mode's bags recomputed; the first that gives the output is the op's.
  std::string mode;
  std::vector<std::size_t> argmax;  // max: the entry that won bag b's column d
  for (const char* m : {"sum", "mean", "max"}) {
    if (weighted && m != std::string("sum")) break;
    std::vector<double> out(nb * dim, 0.0);
    std::vector<std::size_t> arg(nb * dim, ids.size());
    for (std::size_t e = 0; e < ids.size(); ++e) {
      if (bags[e] == padding) continue;
      const std::size_t b = bags[e];
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
    if (bags[k] == padding) return sum_of({{"0 (padding)", "", 0.0}});
    const std::size_t b = bags[k];
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
    if (ids.data()[e] != static_cast<int64_t>(k) || bags[e] == padding) continue;
    const std::size_t b = bags[e];
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
  if (!c.n.ids) return std::nullopt;
  const Indices& ids = *c.n.ids;
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

}  // namespace tg::debug::rules
