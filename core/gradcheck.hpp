// gradcheck: compares the gradients backward() computes with central finite
// differences, like torch.autograd.gradcheck, but in float32.
//
// The checked scalar is L = sum(fn(inputs) * w) with fixed random weights w, so
// every output element counts with its own weight (a plain sum would hide a
// gradient that is wrong in a way that sums to zero). For each input element x:
//   numeric  = (L(x + eps) - L(x - eps)) / (2 eps)     (L summed in double)
//   analytic = what backward() put in the input's gradient
//   pass if |analytic - numeric| <= atol + rtol * |numeric|
// float32 rounding makes the numeric value noisy by about 1e-7 * |L| / eps, so
// the defaults are a wide step and loose tolerances: they pass every correct
// gradient in the test suite and still catch a gradient that is off by a few
// percent (tests/test_gradcheck.cpp checks both). Keep inputs away from kinks
// (relu at 0, ties in max) by more than eps.
#pragma once

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "tensor.hpp"

namespace tg {

struct GradcheckOptions {
  float eps = 5e-3f;
  double atol = 2e-3;
  double rtol = 1e-2;
  unsigned seed = 0;              // for the projection weights w
  bool throw_on_failure = false;  // throw GradcheckError instead of returning a failed report
};

struct GradcheckReport {
  bool ok = true;
  std::string op;            // the op that produced fn's output
  double max_abs_error = 0;  // over all checked elements
  double max_rel_error = 0;
  // The worst element: which input, where in it, and both values.
  std::size_t input = 0;
  std::string where;  // e.g. "[1, 2]"
  double analytic = 0, numeric = 0;
  std::size_t checked = 0;  // elements compared

  std::string str() const;
};

struct GradcheckError : std::runtime_error {
  GradcheckReport report;
  explicit GradcheckError(GradcheckReport r) : std::runtime_error(r.str()), report(std::move(r)) {}
};

using GradcheckFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Checks the gradient of fn with respect to every input that requires grad.
// Inputs must be leaves; their values and gradients are restored afterwards.
GradcheckReport gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& options = {});

}  // namespace tg
