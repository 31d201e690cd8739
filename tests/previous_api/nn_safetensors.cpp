// A program written against tapegrad before the safetensors names moved from
// tg::nn to tg (CHANGELOG.md): the old header, the old names. It must still
// compile (each old name with a warning that names the new one) and work.
//
//   previous_api_nn_safetensors DIR    writes and reads DIR/model.safetensors
#include <cstdio>
#include <string>

#include <tapegrad/nn/safetensors.hpp>
#include <tapegrad/tapegrad.hpp>

// Saving with `using namespace` for both namespaces, as a program may have
// done: the call is not ambiguous between tg:: and tg::nn::.
static void save_both_ways(const std::string& path, const tg::nn::Module& model) {
  using namespace tg;
  using namespace tg::nn;
  save_safetensors(path, model.state_dict(), {{"epoch", "3"}});
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const std::string path = std::string(argv[1]) + "/model.safetensors";
  tg::Generator gen(0);
  tg::nn::Linear model(3, 2, true, gen);

  tg::nn::StateDict state = model.state_dict();
  tg::nn::Metadata meta = {{"epoch", "3"}};
  tg::nn::save_safetensors(path, state, meta);
  const tg::nn::StateDict back = tg::nn::load_safetensors(path);
  const tg::nn::Metadata meta_back = tg::nn::load_safetensors_metadata(path);
  tg::nn::Linear restored(3, 2, true, gen);
  restored.load_state_dict(back);
  std::printf("state dict: %zu tensors, the same weights: %s, epoch %s\n", back.size(),
              restored.weight.to_vector() == model.weight.to_vector() ? "yes" : "no",
              meta_back.at("epoch").c_str());

  save_both_ways(path, model);
  std::printf("saved again: %zu tensors\n", tg::load_safetensors(path).size());

  try {
    tg::nn::load_safetensors(path + ".missing");
  } catch (const tg::nn::SafetensorsError& e) {
    std::printf("a missing file: SafetensorsError for %s\n", e.path.c_str());
  }
}
