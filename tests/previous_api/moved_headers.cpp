// A program written against tapegrad before the inspector, the safetensors
// format and the thread count moved into rooms of their own, and before
// Grad::add became Grad::accumulate (CHANGELOG.md, "Names that moved"): it
// includes the old header paths alone, not tapegrad.hpp. It must still
// compile (Grad::add with a warning naming accumulate) and work.
//
//   previous_api_moved_headers DIR    writes and reads DIR/model.safetensors
#include <cstdio>
#include <string>

#include <tapegrad/core/debug.hpp>
#include <tapegrad/core/gradcheck.hpp>
#include <tapegrad/core/ops.hpp>
#include <tapegrad/core/parallel.hpp>
#include <tapegrad/core/safetensors.hpp>
#include <tapegrad/nn/linear.hpp>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  tg::set_num_threads(2);  // core/parallel.hpp
  std::printf("threads: %zu\n", tg::get_num_threads());

  tg::Generator gen(0);
  tg::nn::Linear model(3, 2, true, gen);
  const tg::Tensor x = tg::randn({4, 3}, gen);
  tg::Tensor loss = tg::sum(tg::tanh(model(x)));

  // core/debug.hpp: the graph in DOT names the ops it recorded.
  const std::string dot = tg::to_dot(loss);
  std::printf("to_dot names tanh: %s\n", dot.find("tanh") != std::string::npos ? "yes" : "no");
  loss.backward();

  // core/gradcheck.hpp
  const tg::GradcheckReport report = tg::gradcheck(
      [&](const std::vector<tg::Tensor>& in) { return tg::sum(tg::tanh(tg::linear(x, in[0], in[1]))); },
      {model.weight, *model.bias});
  std::printf("gradcheck: %s\n", report.ok ? "passed" : "FAILED");

  // Grad::add, the old name of Grad::accumulate: the bias's gradient added to itself.
  const tg::Array once = model.bias->grad().dense();
  tg::Grad twice = model.bias->grad();
  twice.add(tg::Grad(once), model.bias->shape());
  bool doubled = true;
  for (std::size_t i = 0; i < once.size(); ++i) doubled = doubled && twice.dense()(i) == 2 * once(i);
  std::printf("Grad::add doubled the gradient: %s\n", doubled ? "yes" : "no");

  // core/safetensors.hpp
  const std::string path = std::string(argv[1]) + "/model.safetensors";
  tg::save_safetensors(path, model.state_dict());
  tg::nn::Linear restored(3, 2, true, gen);
  restored.load_state_dict(tg::load_safetensors(path));
  std::printf("the same weights after a reload: %s\n",
              restored.weight.to_vector() == model.weight.to_vector() ? "yes" : "no");
}
