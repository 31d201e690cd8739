// Worked rules of the window ops: conv1d and conv2d, the max and average pools, unfold.
#include <algorithm>
#include <cmath>
#include <limits>

#include "rules_common.hpp"

namespace tg::debug::rules {

// ------------------------------------------- windows: convolutions, pools, unfold
//
// The sizes of a window op (kernel, stride, padding, dilation, ceil_mode) are
// not on the tape: they are read back. Each spatial dim's candidates that give
// the output's length are tried, the usual ones first (stride 1 or the
// kernel, no padding, no dilation), and the first that recomputes the output's
// values at up to 32 places is used.

namespace {

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

}  // namespace

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

namespace {

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

}  // namespace

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

namespace {

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

}  // namespace

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

}  // namespace tg::debug::rules
