// A program that uses tapegrad as another project would: through
// `#include <tapegrad/...>`, next to its own core/tensor.hpp and nn/module.hpp
// (its own directory comes first on the include path). Built by
// tests/consumer/run against an installed tapegrad and as a meson subproject.
#include <cstdio>

#include <tapegrad/nn/linear.hpp>  // one header on its own works too
#include <tapegrad/tapegrad.hpp>

#include "core/tensor.hpp"
#include "nn/module.hpp"

int main() {
  app::Module own{"own", app::Tensor{{1.0, 2.0}}};  // the project's own types

  // data/ comes with tapegrad.hpp: words -> ids -> a bag.
  const std::vector<std::vector<std::string>> docs = {tg::data::tokenize("free money now"),
                                                      tg::data::tokenize("meeting at noon")};
  const tg::data::Vocabulary vocab = tg::data::Vocabulary::build(docs);

  // Fit y = x W^T + b, W = [[1, 2], [-1, 0.5]], b = [0.5, -1], with one Linear and SGD.
  tg::Generator gen(0);
  tg::nn::Linear fc(2, 2, true, gen);
  tg::optim::SGD sgd(fc.parameters(), {.lr = 0.1});
  tg::Tensor x = {{0, 1}, {1, 0}, {1, 1}, {2, 1}};
  tg::Tensor y = {{2.5, -0.5}, {1.5, -2}, {3.5, -1.5}, {4.5, -2.5}};
  float first = 0, last = 0;
  for (int step = 0; step < 500; ++step) {
    tg::Tensor loss = tg::mse_loss(fc(x), y);
    sgd.zero_grad();
    loss.backward();
    sgd.step();
    (step == 0 ? first : last) = loss.item();
  }
  std::printf("%s: %zu values; vocabulary %lld; loss %.4f -> %.6f\n", own.name.c_str(), own.state.values.size(),
              static_cast<long long>(vocab.size()), first, last);
  return last < 1e-4f && vocab.size() > 0 ? 0 : 1;
}
