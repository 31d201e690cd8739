// The ops behind the layers a first program reaches for: softplus, log_sigmoid, logsumexp, the binary
// cross-entropies, batch_norm.
#include "../ops_nn.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <xtensor/xbroadcast.hpp>

#include "../check.hpp"
#include "../tape.hpp"

namespace tg {

namespace {

// A loss's per-element values reduced as asked: the mean and sum in double.
Array reduced(Array per_element, Reduction r) {
  if (r == Reduction::none) return per_element;
  double sum = 0;
  for (float v : per_element) sum += v;
  if (r == Reduction::mean) sum /= static_cast<double>(per_element.size());
  return Array(static_cast<float>(sum));
}

// The gradient reaching element i of a loss's per-element values.
float grad_at(const Array& g, std::size_t i, Reduction r, std::size_t n) {
  if (r == Reduction::none) return g.data()[i];
  return r == Reduction::mean ? g() / static_cast<float>(n) : g();
}

// An optional weight broadcast to the input's shape (ones when absent); throws
// unless it broadcasts to exactly that shape.
Array expanded(const char* op, const char* what, const std::optional<Tensor>& w, const Shape& shape) {
  if (!w) return xt::ones<float>(shape);
  bool fits = w->dim() <= shape.size();
  for (std::size_t i = 0; fits && i < w->dim(); ++i) {  // aligned from the right: 1 or the input's size
    const std::size_t d = w->shape()[w->dim() - 1 - i];
    fits = d == 1 || d == shape[shape.size() - 1 - i];
  }
  if (!fits)
    throw std::invalid_argument(
        message(op, ": ", what, " ", w->shape(), " does not broadcast to the input's shape ", shape));
  return xt::broadcast(w->value(), shape);
}

// log(sigmoid(v)) = min(v, 0) - log(1 + exp(-|v|)): finite for every finite v,
// -inf at -inf.
float log_sigmoid_of(float v) {
  return std::min(v, 0.0f) - std::log1p(std::exp(-std::abs(v)));
}

}  // namespace

// ------------------------------------------------------ smooth activations

Tensor softplus(const Tensor& x, float beta, float threshold) {
  Array y = empty_array("softplus", x.shape());
  const float* a = x.value().data();
  for (std::size_t i = 0; i < y.size(); ++i)
    y.data()[i] = a[i] * beta > threshold ? a[i] : std::log1p(std::exp(a[i] * beta)) / beta;
  return record("softplus", std::move(y), {x}, [beta, threshold](const Array& g, const Node& n, Grads& d) {
    const float* a = n.input(0).data();
    Array gx = empty_array("softplus", n.input_shape(0));
    for (std::size_t i = 0; i < gx.size(); ++i) {  // sigmoid(beta x) = z / (z + 1)
      const float z = std::exp(a[i] * beta);
      gx.data()[i] = a[i] * beta > threshold ? g.data()[i] : g.data()[i] * z / (z + 1.0f);
    }
    d[0] = std::move(gx);
  });
}

Tensor log_sigmoid(const Tensor& x) {
  Array y = empty_array("log_sigmoid", x.shape());
  const float* a = x.value().data();
  for (std::size_t i = 0; i < y.size(); ++i)
    y.data()[i] = log_sigmoid_of(a[i]);  // exp(-|x|) <= 1: no overflow
  return record("log_sigmoid", std::move(y), {x}, [](const Array& g, const Node& n, Grads& d) {
    const float* a = n.input(0).data();
    Array gx = empty_array("log_sigmoid", n.input_shape(0));
    for (std::size_t i = 0; i < gx.size(); ++i) {  // 1 - sigmoid(x), from z = exp(-|x|)
      const float z = std::exp(-std::abs(a[i]));
      gx.data()[i] = g.data()[i] * (a[i] < 0.0f ? 1.0f - z / (1.0f + z) : z / (1.0f + z));
    }
    d[0] = std::move(gx);
  });
}

// ------------------------------------------------------------- logsumexp

Tensor logsumexp(const Tensor& x, int64_t dim, bool keepdim) {
  const Shape s = x.shape();
  const std::size_t ax = normalize_dim("logsumexp", dim, s);
  std::size_t outer = 1, n = s[ax], inner = 1;  // x as [outer, n, inner]
  for (std::size_t i = 0; i < ax; ++i) outer *= s[i];
  for (std::size_t i = ax + 1; i < s.size(); ++i) inner *= s[i];
  Shape out_shape = s;
  if (keepdim)
    out_shape[ax] = 1;
  else
    out_shape.erase(out_shape.begin() + static_cast<std::ptrdiff_t>(ax));
  Array y = empty_array("logsumexp", out_shape);
  const float* a = x.value().data();
  for (std::size_t o = 0; o < outer; ++o)
    for (std::size_t i = 0; i < inner; ++i) {
      auto at = [&](std::size_t j) { return a[(o * n + j) * inner + i]; };  // element j of this column
      float m = -std::numeric_limits<float>::infinity();
      for (std::size_t j = 0; j < n; ++j) m = std::isnan(at(j)) || at(j) > m ? at(j) : m;
      if (std::isinf(m)) m = 0.0f;  // all -inf (or none), or an inf: shifting by it would give inf - inf
      double sum = 0;
      for (std::size_t j = 0; j < n; ++j) sum += std::exp(at(j) - m);
      y.data()[o * inner + i] = static_cast<float>(std::log(sum) + m);
    }
  return record("logsumexp", std::move(y), {x},
                [outer, n, inner](const Array& g, const Node& node, Grads& d) {
                  // d/dx_j = exp(x_j - logsumexp(x)): the softmax
                  const float *a = node.input(0).data(), *lse = node.output_value().data();
                  Array gx = empty_array("logsumexp", node.input_shape(0));
                  for (std::size_t o = 0; o < outer; ++o)
                    for (std::size_t j = 0; j < n; ++j)
                      for (std::size_t i = 0; i < inner; ++i) {
                        const std::size_t at = (o * n + j) * inner + i, r = o * inner + i;
                        gx.data()[at] = g.data()[r] * std::exp(a[at] - lse[r]);
                      }
                  d[0] = std::move(gx);
                });
}

// ------------------------------------------------------------ binary losses

Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const std::optional<Tensor>& weight,
                            Reduction r) {
  const char* op = "binary_cross_entropy";
  const Shape s = input.shape();
  if (target.shape() != s)
    throw std::invalid_argument(
        message(op, ": target ", target.shape(), " and input ", s, " must have the same shape"));
  const Array w = expanded(op, "weight", weight, s);
  const float *x = input.value().data(), *t = target.value().data();
  for (std::size_t i = 0; i < input.numel(); ++i)
    check(x[i] >= 0.0f && x[i] <= 1.0f, op, ": all elements of input should be between 0 and 1; input ", s,
          " holds ", x[i], " at flat index ", i);
  // -(t log(x) + (1 - t) log(1 - x)), each log clamped at -100 (PyTorch's order of operations)
  Array loss = empty_array(op, s);
  for (std::size_t i = 0; i < loss.size(); ++i)
    loss.data()[i] =
        (t[i] - 1.0f) * std::max(std::log1p(-x[i]), -100.0f) - t[i] * std::max(std::log(x[i]), -100.0f);
  Array per_element = loss * w;
  std::vector<Tensor> inputs{input, target};
  if (weight) inputs.push_back(*weight);
  const std::size_t count = loss.size();
  return record(
      op, reduced(std::move(per_element), r), std::move(inputs),
      [r, count, w = std::move(w), loss = std::move(loss)](const Array& g, const Node& n, Grads& d) {
        const float *x = n.input(0).data(), *t = n.input(1).data();
        Array gx = empty_array("binary_cross_entropy", n.input_shape(0)),
              gt = empty_array("binary_cross_entropy", n.input_shape(0));
        Array gw = empty_array("binary_cross_entropy", n.input_shape(0));
        for (std::size_t i = 0; i < count; ++i) {
          const float gi = grad_at(g, i, r, count);
          // d/dx = (x - t) / (x (1 - x)), the denominator at least 1e-12; d/dt = -logit(x)
          gx.data()[i] = gi * w.data()[i] * (x[i] - t[i]) / std::max((1.0f - x[i]) * x[i], 1e-12f);
          gt.data()[i] = -gi * w.data()[i] * std::log(x[i] / (1.0f - x[i]));
          gw.data()[i] = gi * loss.data()[i];
        }
        d[0] = std::move(gx);
        d[1] = std::move(gt);
        if (d.size() == 3) d[2] = std::move(gw);  // summed to weight's shape by the engine
      });
}

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const std::optional<Tensor>& weight,
                                        const std::optional<Tensor>& pos_weight, Reduction r) {
  const char* op = "binary_cross_entropy_with_logits";
  const Shape s = input.shape();
  if (target.shape() != s)
    throw std::invalid_argument(
        message(op, ": target ", target.shape(), " and input ", s, " must have the same shape"));
  const Array w = expanded(op, "weight", weight, s);
  const std::optional<Array> pw =
      pos_weight ? std::optional<Array>(expanded(op, "pos_weight", pos_weight, s)) : std::nullopt;
  const float *x = input.value().data(), *t = target.value().data();
  // With m = max(-x, 0): log(1 + exp(-x)) = log(exp(-m) + exp(-x - m)) + m, no exp above 1
  // (PyTorch's formula and order of operations, so its NaN at x = -inf too).
  Array loss = empty_array(op, s);
  for (std::size_t i = 0; i < loss.size(); ++i) {
    const float m = std::max(-x[i], 0.0f);
    const float log_term = std::log(std::exp(-m) + std::exp(-x[i] - m));
    if (pw) {
      const float lw = (pw->data()[i] - 1.0f) * t[i] + 1.0f;
      loss.data()[i] = (1.0f - t[i]) * x[i] + lw * (log_term + m);
    } else {
      loss.data()[i] = ((1.0f - t[i]) * x[i] + m) + log_term;
    }
  }
  Array per_element = loss * w;
  std::vector<Tensor> inputs{input, target};
  if (weight) inputs.push_back(*weight);
  if (pos_weight) inputs.push_back(*pos_weight);
  const std::size_t count = loss.size();
  const bool has_w = weight.has_value();
  return record(op, reduced(std::move(per_element), r), std::move(inputs),
                [r, count, has_w, w = std::move(w), pw, loss = std::move(loss)](const Array& g, const Node& n,
                                                                                Grads& d) {
                  const float *x = n.input(0).data(), *t = n.input(1).data();
                  const auto& shape = n.input_shape(0);
                  Array gx = empty_array("binary_cross_entropy_with_logits", shape),
                        gt = empty_array("binary_cross_entropy_with_logits", shape),
                        gw = empty_array("binary_cross_entropy_with_logits", shape),
                        gpw = empty_array("binary_cross_entropy_with_logits", shape);
                  for (std::size_t i = 0; i < count; ++i) {
                    const float gi = grad_at(g, i, r, count) * w.data()[i],
                                sig = 1.0f / (1.0f + std::exp(-x[i]));
                    if (pw) {  // with p = pos_weight t: d/dx = (p + 1 - t) sigmoid(x) - p
                      const float p = pw->data()[i] * t[i];
                      gx.data()[i] = gi * ((p + 1.0f - t[i]) * sig - p);
                      // d/dt = log_sigmoid(-x) - pos_weight log_sigmoid(x); d/dpos_weight = -t log_sigmoid(x)
                      gt.data()[i] = gi * (log_sigmoid_of(-x[i]) - pw->data()[i] * log_sigmoid_of(x[i]));
                      gpw.data()[i] = -gi * t[i] * log_sigmoid_of(x[i]);
                    } else {
                      gx.data()[i] = gi * (sig - t[i]);
                      gt.data()[i] = -gi * x[i];
                    }
                    gw.data()[i] = grad_at(g, i, r, count) * loss.data()[i];
                  }
                  d[0] = std::move(gx);
                  d[1] = std::move(gt);
                  if (has_w)
                    d[2] = std::move(gw);  // weight and pos_weight: summed to their shapes by the engine
                  if (pw) d[has_w ? 3 : 2] = std::move(gpw);
                });
}

// --------------------------------------------------------- batch norm

namespace {
// nn::data_parallel runs a model's shards on several threads at once: their
// updates of one BatchNorm's running statistics take turns.
std::mutex running_stats_mutex;
}  // namespace

Tensor batch_norm(const Tensor& input, const std::optional<Tensor>& running_mean,
                  const std::optional<Tensor>& running_var, const std::optional<Tensor>& weight,
                  const std::optional<Tensor>& bias, bool training, float momentum, float eps) {
  const char* op = "batch_norm";
  const Shape s = input.shape();
  check(s.size() >= 2, op, ": input must be [N, C, ...] (2 or more dims); got ", s);
  const std::size_t c = s[1], inner = input.numel() / std::max<std::size_t>(s[0] * c, 1),
                    count = s[0] * inner;
  for (const auto& [what, t] :
       {std::pair{"running_mean", running_mean}, std::pair{"running_var", running_var},
        std::pair{"weight", weight}, std::pair{"bias", bias}})
    if (t && t->shape() != Shape{c})
      throw std::invalid_argument(message(op, ": ", what, " ", t->shape(), " for input ", s, " (expected [",
                                          c, "], one per channel)"));
  check(running_mean.has_value() == running_var.has_value(), op,
        ": give both running_mean and running_var, or neither");
  if (!training && !running_mean)
    throw std::invalid_argument(message(op, ": running_mean and running_var are needed when not training"));
  if (training && count <= 1)
    throw std::invalid_argument(
        message(op, ": expected more than 1 value per channel when training; got input ", s));
  check(eps >= 0.0f, op, ": eps must be >= 0; got ", eps);
  if (training && running_mean && (running_mean->requires_grad() || running_var->requires_grad()))
    throw std::invalid_argument(
        message(op, ": the running statistics are updated in place and must not require grad"));

  // Each channel's mean and 1/std, from the batch or from the running statistics.
  std::vector<float> mean(c), rstd(c), unbiased_var(c);
  const float* x = input.value().data();
  for (std::size_t ch = 0; ch < c; ++ch) {
    if (!training) {
      mean[ch] = running_mean->value().data()[ch];
      rstd[ch] = 1.0f / std::sqrt(running_var->value().data()[ch] + eps);
      continue;
    }
    double sum = 0, sq = 0;
    for (std::size_t b = 0; b < s[0]; ++b)
      for (std::size_t i = 0; i < inner; ++i) sum += x[(b * c + ch) * inner + i];
    const double mu = sum / static_cast<double>(count);
    for (std::size_t b = 0; b < s[0]; ++b)
      for (std::size_t i = 0; i < inner; ++i)
        sq += (x[(b * c + ch) * inner + i] - mu) * (x[(b * c + ch) * inner + i] - mu);
    mean[ch] = static_cast<float>(mu);
    rstd[ch] = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(count) + eps));  // biased variance
    unbiased_var[ch] = static_cast<float>(sq / static_cast<double>(count - 1));
  }
  if (training && running_mean) {
    std::lock_guard<std::mutex> lock(running_stats_mutex);
    Tensor rm = *running_mean, rv = *running_var;  // handles: the same tensors
    float *m = rm.value_mut().data(), *v = rv.value_mut().data();
    for (std::size_t ch = 0; ch < c; ++ch) {
      m[ch] = (1.0f - momentum) * m[ch] + momentum * mean[ch];
      v[ch] = (1.0f - momentum) * v[ch] + momentum * unbiased_var[ch];
    }
  }
  Array y = empty_array(op, s);
  for (std::size_t b = 0; b < s[0]; ++b)
    for (std::size_t ch = 0; ch < c; ++ch)
      for (std::size_t i = 0; i < inner; ++i) {
        const std::size_t at = (b * c + ch) * inner + i;
        float v = (x[at] - mean[ch]) * rstd[ch];
        if (weight) v *= weight->value().data()[ch];
        if (bias) v += bias->value().data()[ch];
        y.data()[at] = v;
      }

  std::vector<Tensor> inputs{input};
  if (weight) inputs.push_back(*weight);
  if (bias) inputs.push_back(*bias);
  const bool has_w = weight.has_value(), has_b = bias.has_value();
  return record(op, std::move(y), std::move(inputs),
                [batch = s[0], c, inner, count, training, has_w, has_b, mean = std::move(mean),
                 rstd = std::move(rstd)](const Array& g, const Node& node, Grads& d) {
                  // With xhat = (x - mean) rstd and dxhat = g weight, per channel:
                  //   training: dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat))  (the batch's
                  //             statistics depend on x too)
                  //   eval:     dx = rstd dxhat
                  //   dweight = sum(g xhat), dbias = sum(g)
                  const float* x = node.input(0).data();
                  const float* w = has_w ? node.input(1).data() : nullptr;
                  Array gx = empty_array("batch_norm", node.input_shape(0));
                  Array gw = empty_array("batch_norm", Shape{c}), gb = empty_array("batch_norm", Shape{c});
                  for (std::size_t ch = 0; ch < c; ++ch) {
                    double sum_g = 0, sum_gx = 0;  // sum(g), sum(g xhat)
                    for (std::size_t b = 0; b < batch; ++b)
                      for (std::size_t i = 0; i < inner; ++i) {
                        const std::size_t at = (b * c + ch) * inner + i;
                        sum_g += g.data()[at];
                        sum_gx += g.data()[at] * ((x[at] - mean[ch]) * rstd[ch]);
                      }
                    const float scale = w ? w[ch] : 1.0f;
                    const double mean_d = training ? scale * sum_g / static_cast<double>(count) : 0.0;
                    const double mean_dx = training ? scale * sum_gx / static_cast<double>(count) : 0.0;
                    for (std::size_t b = 0; b < batch; ++b)
                      for (std::size_t i = 0; i < inner; ++i) {
                        const std::size_t at = (b * c + ch) * inner + i;
                        const float xhat = (x[at] - mean[ch]) * rstd[ch];
                        gx.data()[at] =
                            rstd[ch] * static_cast<float>(g.data()[at] * scale - mean_d - xhat * mean_dx);
                      }
                    gw.data()[ch] = static_cast<float>(sum_gx);
                    gb.data()[ch] = static_cast<float>(sum_g);
                  }
                  d[0] = std::move(gx);
                  if (has_w) d[1] = std::move(gw);
                  if (has_b) d[has_w ? 2 : 1] = std::move(gb);
                });
}

}  // namespace tg
