// Backpropagation through a network small enough to check on paper:
//
//   x [1, 2] -> Linear(2, 2) -> tanh -> Linear(2, 1) -> mse_loss against y
//
// The forward pass is read back from the tape, entry by entry with its value;
// backward() is traced step by step; the chain rule is then done by hand and
// checked against both backward() and finite differences (gradcheck).
//
//   backprop_by_hand [--dot FILE] [--html FILE]
//     --dot FILE    Graphviz text of the graph, with gradients
//     --html FILE   a page that steps through the backward pass (tg::write_html; needs graphviz)
#include <cstdio>
#include <fstream>
#include <string>

#include <xtensor/xmath.hpp>

#include <tapegrad/tapegrad.hpp>

#include "flags.hpp"

namespace {

// "[0.1, -0.2]", flattened; 6 significant digits (%g), as the backward trace
// prints them, so the same number reads the same everywhere.
std::string values(const tg::Array& a) {
  std::string s = "[";
  char buf[32];
  for (std::size_t i = 0; i < a.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s%g", i ? ", " : "", a.data()[i]);
    s += buf;
  }
  return s + "]";
}

}  // namespace

int main(int argc, char** argv) {
  const PictureFiles files = picture_files(  // "": not asked for
      argc, argv, {"--dot", "--html"},
      "Backpropagation by hand: a small net's tape, each backward step, the chain rule on paper, gradcheck\n"
      "(--dot FILE: its graph for Graphviz; --html FILE: a page that steps through the backward pass).");

  // Round numbers instead of random ones, so every value can be redone by hand.
  tg::nn::Linear fc1(2, 2), fc2(2, 1);
  {
    tg::NoGradGuard no_grad;  // copy_ into a tensor that requires grad: only under the guard, as in PyTorch
    fc1.weight.copy_({{0.5f, -0.4f}, {0.3f, 0.8f}});  // [out, in]
    fc1.bias->copy_({0.1f, -0.2f});
    fc2.weight.copy_({{1.0f, -0.7f}});
    fc2.bias->copy_({0.2f});
  }
  fc1.weight.set_name("fc1.weight");  // names show up in the tape listing and the graph
  fc1.bias->set_name("fc1.bias");
  fc2.weight.set_name("fc2.weight");
  fc2.bias->set_name("fc2.bias");
  const tg::Tensor x = tg::Tensor({{1.0f, 2.0f}}).set_name("x");
  const tg::Tensor y = tg::full({1, 1}, 0.5f).set_name("y");  // the target

  // Forward. Every op appends one entry to the tape; mse_loss is one, as in
  // PyTorch, whose backward is 2 (out - y) / n.
  tg::Tensor pre = fc1(x);                 // [1, 2] x [2, 2]^T + [2] -> [1, 2]
  tg::Tensor h = tg::tanh(pre);            // [1, 2]
  tg::Tensor out = fc2(h);                 // [1, 2] x [1, 2]^T + [1] -> [1, 1]
  tg::Tensor loss = tg::mse_loss(out, y);  // mean((out - y)^2), a scalar

  std::printf("forward, as recorded (* = requires grad):\n");
  for (const auto& node : tg::Tape::current().live_entries())
    std::printf("  %s\n      value %s\n", tg::describe(*node).c_str(),
                values(node->output.lock()->value).c_str());

  // For --html: a page that steps through the backward pass below. It runs
  // that pass itself and puts every gradient back as it was, so the backward()
  // below is unchanged. (It comes before gradcheck, which writes the
  // parameters in place: the graph could not be replayed after that.)
  if (!files.html.empty()) {
    try {
      tg::write_html(loss, files.html);
    } catch (const std::exception& e) {  // no graphviz, or the file cannot be written
      std::fprintf(stderr, "backprop_by_hand: %s\n", e.what());
      return 1;
    }
  }

  // Backward walks the same entries in reverse. Each step gets the gradient
  // of its output and adds a share into each input that requires grad.
  // retain_graph keeps the entries, and RetainAllGradsGuard every tensor's
  // gradient (h.grad(), not only the parameters'), so that --dot can draw them.
  std::printf("\nbackward, step by step:\n");
  {
    tg::TraceBackwardGuard trace;  // prints to std::cout while it lives
    tg::RetainAllGradsGuard keep;
    loss.backward(std::nullopt, /*retain_graph=*/true);
  }

  std::printf("\nparameter gradients:\n");
  for (const tg::Tensor& p : {fc1.weight, *fc1.bias, fc2.weight, *fc2.bias})
    std::printf("  %-10s %s\n", p.name().c_str(), values(p.grad().dense()).c_str());

  // The chain rule by hand, from the forward values above.
  const tg::Array d_out = 2.0f * (out.value() - y.value());      // d mean((out - y)^2) / d out
  const tg::Array d_h = d_out(0, 0) * fc2.weight.value();        // through out = h W2^T + b2
  const tg::Array d_pre = d_h * (1.0f - h.value() * h.value());  // tanh' = 1 - tanh^2
  const tg::Array d_w1 = xt::transpose(d_pre) * x.value();       // [2, 1] * [1, 2] -> [2, 2]
  const tg::Array d_w2 = d_out(0, 0) * h.value();
  std::printf("\nby hand:\n");
  std::printf("  d loss/d out  = 2 (out - y)        = %s\n", values(d_out).c_str());
  std::printf("  d loss/d h    = d_out W2           = %s\n", values(d_h).c_str());
  std::printf("  d loss/d pre  = d_h (1 - h^2)      = %s\n", values(d_pre).c_str());
  std::printf("  fc1.weight    = d_pre^T x          = %s\n", values(d_w1).c_str());
  std::printf("  fc2.weight    = d_out h            = %s\n", values(d_w2).c_str());
  const bool same =
      xt::allclose(d_w1, fc1.weight.grad().dense()) && xt::allclose(d_pre, fc1.bias->grad().dense()) &&
      xt::allclose(d_w2, fc2.weight.grad().dense()) && xt::allclose(d_out, fc2.bias->grad().dense());
  std::printf("by hand == backward(): %s\n", same ? "true" : "false");

  // Finite differences: nudge each parameter entry by +-eps, rerun the whole
  // forward pass (here spelled with core ops), compare the slope with the
  // gradient. The loss is one number, so gradcheck checks it as it is
  // (L = fn(inputs), no random projection) and its "analytic" values are the
  // gradients printed above.
  const std::vector<tg::Tensor> params = {fc1.weight, *fc1.bias, fc2.weight, *fc2.bias};
  auto forward = [&](const std::vector<tg::Tensor>& p) {
    return tg::mse_loss(tg::linear(tg::tanh(tg::linear(x, p[0], p[1])), p[2], p[3]), y);
  };
  tg::GradcheckOptions check;
  check.name = "loss";
  const tg::GradcheckReport report = tg::gradcheck(forward, params, check);
  // report.str() gives the errors to 6 digits, but in float32 a central
  // difference of a loss near 1 is only good to about 4: those digits change
  // with the CPU and BLAS kernel. What holds everywhere is printed instead.
  std::printf("\ngradcheck %s for '%s' (%s, output made by op '%s'): %zu elements checked, %zu failed\n",
              report.ok ? "passed" : "FAILED", report.name.c_str(), report.projection.c_str(), report.op.c_str(),
              report.checked, report.failed);
  std::printf("  every gradient within %g + %g |numeric| of its central difference\n", check.atol, check.rtol);

  // One of those slopes done here: fc1.weight[1, 1] nudged by +-eps, the loss
  // recomputed each way, on copies of the weights.
  const float eps = check.eps;
  auto loss_with_w11 = [&](float delta) {
    tg::NoGradGuard no_grad;
    std::vector<tg::Tensor> p = {fc1.weight.detach(), *fc1.bias, fc2.weight, *fc2.bias};
    p[0].value_mut()(1, 1) += delta;
    return static_cast<double>(forward(p).item());
  };
  const double numeric = (loss_with_w11(eps) - loss_with_w11(-eps)) / (2.0 * eps);
  std::printf("  fc1.weight[1, 1]: analytic %g (printed above), numeric %.3g (eps %g; float32 leaves ~4 digits)\n",
              fc1.weight.grad().dense()(1, 1), numeric, eps);

  if (!files.dot.empty()) {
    std::ofstream(files.dot) << tg::to_dot(loss);
    std::printf("wrote %s (render: dot -Tpng %s -o graph.png)\n", files.dot.c_str(), files.dot.c_str());
  }
  if (!files.html.empty())
    std::printf("wrote %s (open it in a browser; the arrow keys step)\n", files.html.c_str());
  return report.ok ? 0 : 1;
}
