// Worked rules of matmul, linear, the reductions, the softmax family and the losses.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "rules_common.hpp"

namespace tg::debug::rules {

namespace {

double total(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0);
}
double average(const std::vector<double>& v) {
  return total(v) / static_cast<double>(v.size());
}

}  // namespace

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
  if (!c.n.ids || c.n.ids->dimension() != 1) return std::nullopt;
  const Indices& target = *c.n.ids;
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
  for (const auto& reading : readings) {
    const int wi = reading.first, pi = reading.second;  // named, not bound: lambdas capture them
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

}  // namespace tg::debug::rules
