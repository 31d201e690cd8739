// gradcheck: compares the gradients backward() computes with central finite
// differences, like torch.autograd.gradcheck, but in float32.
//
// It checks the whole function fn, not only its last op. The checked scalar is
//   L = fn(inputs)                  when fn returns one element (a loss), else
//   L = sum(fn(inputs) * w)         with fixed random weights w in ±[0.5, 1.5],
// so every output element counts with its own weight (a plain sum would hide a
// gradient that is wrong in a way that sums to zero). The report says which.
// For each input element x:
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

#include "../core/factories.hpp"

namespace tg {

struct GradcheckOptions {
  float eps = 5e-3f;
  double atol = 2e-3;
  double rtol = 1e-2;
  unsigned seed = 0;              // for the projection weights w
  bool throw_on_failure = false;  // throw GradcheckError instead of returning a failed report
  std::string name = "fn";        // what the report calls the checked function
};

struct GradcheckReport {
  bool ok = true;
  std::string name;          // the checked function (GradcheckOptions::name)
  std::string op;            // the op that produced fn's output (its last op)
  std::string projection;    // how the output was made a scalar: "L = fn(inputs)" or "L = sum(...)"
  std::size_t checked = 0;   // elements compared
  std::size_t failed = 0;    // elements outside the tolerance
  double max_abs_error = 0;  // over all checked elements
  double max_rel_error = 0;
  // The worst failing element, or, when all pass, the one with the largest
  // error: which input, where in it, and both values.
  std::size_t input = 0;
  std::string where;  // e.g. "[1, 2]"
  double analytic = 0, numeric = 0;

  std::string str() const;
};

struct GradcheckError : std::runtime_error {
  GradcheckReport report;
  explicit GradcheckError(GradcheckReport r) : std::runtime_error(r.str()), report(std::move(r)) {}
};

using GradcheckFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Checks the gradient of fn with respect to every input that requires grad.
// Inputs must be leaves. Their values and gradients are as before afterwards,
// also when fn throws (the exception then goes on to the caller).
GradcheckReport gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& options = {});

}  // namespace tg
