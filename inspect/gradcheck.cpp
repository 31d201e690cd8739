// gradcheck: backward() against central finite differences.
#include "gradcheck.hpp"

#include <cmath>
#include <limits>
#include <sstream>

#include "../core/tape.hpp"

namespace tg {

std::string GradcheckReport::str() const {
  std::ostringstream s;
  s << "gradcheck " << (ok ? "passed" : "FAILED") << " for '" << name << "' (the whole function; "
    << projection << ", output made by op '" << op << "'): " << checked << " elements checked, " << failed
    << " failed; max abs error " << max_abs_error << ", max rel error " << max_rel_error << "; "
    << (ok ? "largest error" : "worst failure") << " at input " << input << " " << where << ": analytic "
    << analytic << ", numeric " << numeric;
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

namespace {
// Puts the inputs back as they were however gradcheck ends, a throwing fn included:
// the element being nudged gets its value back, every input its old gradient.
struct RestoreInputs {
  std::vector<Tensor>& inputs;
  std::vector<Grad> grads;
  float* nudged = nullptr;
  float original = 0;

  explicit RestoreInputs(std::vector<Tensor>& in) : inputs(in) {
    for (const Tensor& t : inputs) grads.push_back(t.grad());
  }
  ~RestoreInputs() {
    if (nudged) *nudged = original;
    for (std::size_t i = 0; i < inputs.size(); ++i) inputs[i].grad_mut() = std::move(grads[i]);
  }
};
}  // namespace

GradcheckReport gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& opt) {
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (!inputs[i].is_leaf())
      throw std::invalid_argument("gradcheck: input " + std::to_string(i) + " is not a leaf");

  std::vector<Tensor> work = inputs;  // handles: the same tensors
  RestoreInputs restore(work);
  for (Tensor& t : work) t.zero_grad();

  GradcheckReport report;
  report.name = opt.name;
  Tensor out = fn(work);
  if (!out.requires_grad())
    throw std::invalid_argument("gradcheck: the output of '" + opt.name + "' does not require grad");
  report.op = out.is_leaf() ? "(leaf)" : out.creator()->op;

  // The projection weights w: 1 for a one-element output, so that the analytic
  // values are the gradients backward() gives for that output.
  Array w = xt::ones<float>(out.shape());
  if (out.numel() == 1) {
    report.projection = "L = fn(inputs)";
  } else {
    Generator gen(opt.seed);
    std::uniform_real_distribution<float> dist(0.5f, 1.5f);
    for (float& x : w) x = dist(gen) * (gen() % 2 ? 1.0f : -1.0f);
    report.projection =
        "L = sum(fn(inputs) * w), w random in ±[0.5, 1.5] (seed " + std::to_string(opt.seed) + ")";
  }

  auto loss = [&] {  // L in double
    NoGradGuard no_grad;
    Array y = fn(work).value();
    double l = 0;
    for (std::size_t k = 0; k < y.size(); ++k) l += static_cast<double>(y.data()[k]) * w.data()[k];
    return l;
  };

  out.backward(w);
  double worst = -1;  // how far the reported element is past its tolerance (error / tolerance)
  for (std::size_t i = 0; i < work.size(); ++i) {
    Tensor& t = work[i];
    if (!t.requires_grad()) continue;
    const Array analytic = t.grad_dense();
    float* x = t.value_mut().data();
    for (std::size_t k = 0; k < t.numel(); ++k) {
      restore.nudged = x + k;
      restore.original = x[k];
      x[k] = restore.original + opt.eps;
      const double lp = loss();
      x[k] = restore.original - opt.eps;
      const double lm = loss();
      x[k] = restore.original;
      restore.nudged = nullptr;

      const double num = (lp - lm) / (2.0 * opt.eps);
      const double ana = analytic.data()[k];
      const double err = std::abs(ana - num);
      const double tol = opt.atol + opt.rtol * std::abs(num);
      const double excess = std::isnan(err) ? std::numeric_limits<double>::infinity() : err / tol;
      const bool bad = !(err <= tol);  // NaN counts as bad
      ++report.checked;
      report.failed += bad;
      // Once an element fails, only failing elements are reported.
      if (excess > worst && (bad || report.failed == 0)) {
        worst = excess;
        report.input = i;
        report.where = index_str(k, t.shape());
        report.analytic = ana;
        report.numeric = num;
      }
      report.max_abs_error = std::max(report.max_abs_error, err);
      report.max_rel_error = std::max(report.max_rel_error, err / std::max(std::abs(num), 1e-12));
    }
  }
  report.ok = report.failed == 0;
  if (!report.ok && opt.throw_on_failure) throw GradcheckError(report);
  return report;
}

}  // namespace tg
