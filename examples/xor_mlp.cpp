// A 2-layer MLP learns XOR with the core alone: tensors, ops, backward, and a
// hand-written SGD step. Run it and watch the loss fall.
#include <cstdio>

#include <tapegrad/tapegrad.hpp>

#include "flags.hpp"

int main(int argc, char** argv) {
  no_flags(argc, argv, "A 2-layer MLP learns XOR with the core alone; it prints the loss as it falls.");
  tg::Generator gen(0);
  tg::Tensor x = {{0, 0}, {0, 1}, {1, 0}, {1, 1}};
  tg::Indices y = {0, 1, 1, 0};  // XOR as two classes

  // [4, 2] x [2, 8] -> tanh -> [4, 8] x [8, 2] -> logits
  tg::Tensor w1 = tg::randn({2, 8}, gen, true), b1 = tg::zeros({8}, true);
  tg::Tensor w2 = tg::randn({8, 2}, gen, true), b2 = tg::zeros({2}, true);
  std::vector<tg::Tensor> params = {w1, b1, w2, b2};
  const float lr = 0.5f;

  for (int step = 0; step <= 300; ++step) {
    tg::Tensor h = tg::tanh(tg::matmul(x, w1) + b1);
    tg::Tensor loss = tg::cross_entropy(tg::matmul(h, w2) + b2, y);
    for (tg::Tensor& p : params) p.zero_grad();
    loss.backward();
    // An in-place write, like `p.data -= lr * p.grad` in PyTorch. Writes through
    // value_mut() are never recorded, so no NoGradGuard is needed here. Each one
    // is counted in p.version(): a graph that still needs the old values would
    // refuse to backward() rather than give a wrong gradient.
    for (tg::Tensor& p : params) p.value_mut() -= lr * p.grad().dense();
    if (step % 50 == 0) std::printf("step %3d  loss %.5f\n", step, loss.item());
  }

  // Predictions only: no backward() follows, so the guard keeps the ops off the tape.
  tg::NoGradGuard no_grad;
  tg::Tensor probs = tg::softmax(tg::matmul(tg::tanh(tg::matmul(x, w1) + b1), w2) + b2);
  for (int i = 0; i < 4; ++i)
    std::printf("xor(%g, %g) -> p(1) = %.3f\n", x.value()(i, 0), x.value()(i, 1), probs.value()(i, 1));
}
