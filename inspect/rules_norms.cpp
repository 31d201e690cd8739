// Worked rules of layer_norm and batch_norm.
#include <algorithm>
#include <cmath>

#include "rules_common.hpp"

namespace tg::debug::rules {

// ------------------------------------------------ layer_norm, batch_norm
//
// y = w · x̂ + b with x̂ = (x - mean) / sigma over each group of x (layer_norm:
// the last dims; batch_norm: a channel). Which of weight and bias an op was
// given, and sigma (eps included), are read back from the values: sigma by
// least squares over the group. batch_norm in eval mode (running statistics)
// is y = slope · x + c per channel, and x's gradient grad · slope.

namespace {

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

}  // namespace

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

}  // namespace tg::debug::rules
