// A character-level language model of first names, the MLP of Bengio et al. (2003)
// that learners meet as "makemore": the 3 characters before -> Embedding(27, dim)
// -> flatten -> Linear(3 dim, hidden) -> tanh -> Linear(hidden, 27) -> the next one.
// Here the Embedding is a small dense table that learns what letters are like.
//
//   names_mlp [--data TXT] [--epochs N] [--seed S] [--save FILE] [--load FILE] [--stop-after K]
//             [--threads T]
//
// TXT holds a name a line (a-z only): the first 90% train, the last 10% are dev.
// Prints the train and dev loss per epoch, then 20 names sampled from the model.
// --save FILE writes a checkpoint after every epoch; --load FILE goes on from it;
// --stop-after K stops after epoch K, as an interrupted run would. --threads T
// splits each batch across T threads (nn::data_parallel; default 1, or
// TAPEGRAD_NUM_THREADS): a run repeats exactly for one T, and differs in
// rounding from a run on another T.
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include <tapegrad/tapegrad.hpp>

#include "flags.hpp"
#include "names.hpp"

// tests/tools/names_mlp_reference.py is the same model in PyTorch, with these defaults.
constexpr std::size_t context = 3, dim = 10, hidden = 200, batch_size = 32;
constexpr double lr = 0.01;  // Adam's, decayed to 0 over the epochs by CosineAnnealingLR

// Each character of a name (and the end, '.') is an example: the 3 characters
// before it -> it. '.' (0) also pads the start; 'a'..'z' are 1..26.
struct Examples {
  tg::Indices x, y;  // [N, 3] and [N]
};
static Examples make_examples(const std::vector<std::string>& names) {
  std::vector<int64_t> xs, ys;
  for (const std::string& name : names) {
    std::vector<int64_t> window(context, 0);
    for (char c : name + '.') {
      const int64_t id = c == '.' ? 0 : c - 'a' + 1;
      xs.insert(xs.end(), window.begin(), window.end());
      ys.push_back(id);
      window.erase(window.begin());
      window.push_back(id);
    }
  }
  return {tg::indices(xs, {ys.size(), context}), tg::indices(ys)};
}

int main(int argc, char** argv) try {
  Flags flag(
      argc, argv, training_flags(NAMES_DEFAULT_DATA, "10"),
      "A character-level MLP of first names (3 characters -> the next): train and dev loss per epoch, then\n"
      "20 sampled names; --save/--load a checkpoint, --stop-after K, --threads T.");
  training_threads(flag);
  const int epochs = flag.number("--epochs");
  const int last = flag.given("--stop-after") ? flag.number("--stop-after") : epochs;

  std::vector<std::string> names = read_names(flag["--data"]);
  const std::size_t n_train = train_count(names.size());
  Examples train = make_examples({names.begin(), names.begin() + n_train});
  Examples dev = make_examples({names.begin() + n_train, names.end()});
  std::printf("data: %s: %zu names (%zu train, %zu dev), %zu train and %zu dev examples\n",
              flag["--data"].c_str(), names.size(), n_train, names.size() - n_train, train.y.size(),
              dev.y.size());

  tg::Generator gen(flag.number("--seed"));  // weights, shuffling, sampling; saved in the checkpoint
  // 27 rows, most of them looked up by every batch: a dense gradient, and so
  // PyTorch's (dense) Adam, not the lazy row-by-row update.
  tg::nn::Sequential model(tg::nn::Embedding(27, dim, {.sparse = false}, gen), tg::nn::Flatten(),
                           tg::nn::Linear(context * dim, hidden, true, gen), tg::nn::Tanh(),
                           tg::nn::Linear(hidden, 27, true, gen));
  tg::data::BatchSampler batches(train.y.size(), {.batch_size = batch_size, .shuffle = true}, gen);
  tg::optim::Adam opt(model.parameters(), {.lr = lr});
  tg::optim::CosineAnnealingLR sched(opt, {.T_max = epochs});

  tg::Checkpoint ckpt{.model = &model, .optimizer = &opt, .scheduler = &sched, .generator = &gen};
  int first = 1;
  if (flag.given("--load")) {
    tg::load_checkpoint(flag["--load"], ckpt);
    first = std::stoi(ckpt.metadata.at("epoch")) + 1;
  }

  auto loss_on = [&](const Examples& set) {  // mean cross-entropy over the whole set, in nats
    tg::NoGradGuard no_grad;
    return tg::cross_entropy(model(set.x), set.y).item();
  };
  std::printf("%5s %9s %10s %9s\n", "epoch", "lr", "train_loss", "dev_loss");
  for (int epoch = first; epoch <= last; ++epoch) {
    const double epoch_lr = opt.lr();
    for (const tg::Indices& idx : batches) {
      const tg::Indices x = tg::data::take(train.x, idx), y = tg::data::take(train.y, idx);
      opt.zero_grad();
      // loss(model(x)) and its backward pass, the batch's rows split across the threads.
      tg::nn::data_parallel(
          model.parameters(), idx.size(),
          [&](std::size_t b, std::size_t e) { return model(tg::narrow(x, 0, b, e - b)); },
          [&](const tg::Tensor& logits) { return tg::cross_entropy(logits, y); }, gen);
      opt.step();
    }
    sched.step();
    std::printf("%5d %9.6f %10.4f %9.4f\n", epoch, epoch_lr, loss_on(train), loss_on(dev));
    if (flag.given("--save")) {
      ckpt.metadata["epoch"] = std::to_string(epoch);
      tg::save_checkpoint(flag["--save"], ckpt);
    }
  }

  std::printf("sampled:");
  tg::NoGradGuard no_grad;
  for (int i = 0; i < 20; ++i) {
    std::vector<int64_t> window(context, 0);
    std::string name;
    while (name.size() < 30) {
      tg::Tensor probs = tg::softmax(model(tg::indices(window, {1, context})), 1);  // [1, 27]
      const int64_t id = tg::multinomial(probs, 1, gen)(0, 0);
      if (id == 0) break;
      name += static_cast<char>('a' + id - 1);
      window.erase(window.begin());
      window.push_back(id);
    }
    std::printf(" %s", name.c_str());
  }
  std::printf("\n");
} catch (const std::exception& e) {
  std::fprintf(stderr, "names_mlp: %s\n", e.what());
  return 1;
}
