#include "gradcheck.hpp"

#include <cmath>
#include <sstream>

#include "tape.hpp"

namespace tg {

std::string GradcheckReport::str() const {
  std::ostringstream s;
  s << "gradcheck " << (ok ? "passed" : "FAILED") << " for op '" << op << "': max abs error " << max_abs_error
    << ", max rel error " << max_rel_error << " over " << checked << " elements; worst at input " << input
    << where << ": analytic " << analytic << ", numeric " << numeric;
  return s.str();
}

static std::string index_str(std::size_t flat, const Shape& shape) {
  Shape idx(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return shape_str(idx);
}

GradcheckReport gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& opt) {
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (!inputs[i].is_leaf())
      throw std::invalid_argument("gradcheck: input " + std::to_string(i) + " is not a leaf");

  // Keep the inputs' gradients to put them back afterwards.
  std::vector<Grad> saved;
  for (const Tensor& t : inputs) saved.push_back(t.grad());
  std::vector<Tensor> work = inputs;  // handles: same tensors
  for (Tensor& t : work) t.zero_grad();

  GradcheckReport report;
  Tensor out = fn(work);
  if (!out.requires_grad()) {
    for (std::size_t i = 0; i < work.size(); ++i) work[i].grad_mut() = saved[i];
    throw std::invalid_argument("gradcheck: the function's output does not require grad");
  }
  report.op = out.is_leaf() ? "(leaf)" : out.creator()->op;

  Generator gen(opt.seed);
  std::uniform_real_distribution<float> dist(0.5f, 1.5f);
  Array w = xt::empty<float>(out.shape());
  for (float& x : w) x = dist(gen) * (gen() % 2 ? 1.0f : -1.0f);

  auto loss = [&] {  // L = sum(fn(inputs) * w), in double
    NoGradGuard no_grad;
    Array y = fn(work).value();
    double l = 0;
    for (std::size_t k = 0; k < y.size(); ++k) l += static_cast<double>(y.data()[k]) * w.data()[k];
    return l;
  };

  out.backward(w);
  for (std::size_t i = 0; i < work.size(); ++i) {
    Tensor& t = work[i];
    if (!t.requires_grad()) continue;
    const Array analytic = t.grad_dense();
    for (std::size_t k = 0; k < t.numel(); ++k) {
      float& x = t.data().data()[k];
      const float x0 = x;
      x = x0 + opt.eps;
      const double lp = loss();
      x = x0 - opt.eps;
      const double lm = loss();
      x = x0;
      const double num = (lp - lm) / (2.0 * opt.eps);
      const double ana = analytic.data()[k];
      const double err = std::abs(ana - num);
      const double rel = err / std::max(std::abs(num), 1e-12);
      ++report.checked;
      const bool bad = !(err <= opt.atol + opt.rtol * std::abs(num));  // NaN counts as bad
      if (bad) report.ok = false;
      // Report the element that fails worst, or else the one with the largest error.
      if (err > report.max_abs_error || std::isnan(err)) {
        report.input = i;
        report.where = index_str(k, t.shape());
        report.analytic = ana;
        report.numeric = num;
      }
      report.max_abs_error = std::max(report.max_abs_error, err);
      report.max_rel_error = std::max(report.max_rel_error, rel);
    }
  }
  for (std::size_t i = 0; i < work.size(); ++i) work[i].grad_mut() = saved[i];
  if (!report.ok && opt.throw_on_failure) throw GradcheckError(report);
  return report;
}

}  // namespace tg
