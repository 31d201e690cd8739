// A character-level language model of first names with a recurrent layer: where
// names_mlp sees a window of 3 characters, a GRU reads the whole name from its
// start, one character a step, and carries what it has read in its state:
//
//   '.' e m m a  ->  Embedding(27, 16) -> GRU(16, 128) -> Linear(128, 27)
//    e  m m a .      (the targets: each position's next character)
//
//   names_gru [--data TXT] [--epochs N] [--seed S] [--save FILE] [--load FILE] [--stop-after K]
//             [--init-out FILE] [--bench-steps N] [--threads T]
//
// TXT holds a name a line (a-z only): the first 90% train, the last 10% are
// dev. Prints the learning rate, the training loss (the mean of the epoch's
// batches) and the dev loss per epoch, in nats per character over the
// characters names_mlp scores, then 20 names sampled from the model. --save
// FILE writes a checkpoint after every epoch; --load FILE goes on from it;
// --stop-after K stops after epoch K, as an interrupted run would. --init-out
// FILE writes the initial weights (for tests/tools/names_gru_reference.py
// --init FILE). --bench-steps N times N training steps on the first batch
// instead of training (scripts/steptime). --threads T splits each batch across
// T threads (nn::data_parallel; default 1, or TAPEGRAD_NUM_THREADS): a run
// repeats exactly for one T, and differs in rounding from a run on another T.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <stdexcept>
#include <string>
#include <vector>

#include <tapegrad/tapegrad.hpp>

#include "flags.hpp"
#include "step_time.hpp"
#include "names.hpp"

// tests/tools/names_gru_reference.py is the same model and training in PyTorch, with these constants.
constexpr int64_t vocab = 27, embed = 16, hidden = 128;  // '.' and a-z
constexpr std::size_t batch_size = 32;
constexpr double lr = 5e-3;  // Adam's, decayed to 0 over the epochs by CosineAnnealingLR
constexpr float clip = 1.0f;

struct NamesGRU : tg::nn::Module {
  std::shared_ptr<tg::nn::Embedding> embed_;
  std::shared_ptr<tg::nn::GRU> gru;
  std::shared_ptr<tg::nn::Linear> head;

  explicit NamesGRU(tg::Generator& gen) {
    // 27 rows, most of them looked up by every batch: a dense gradient.
    embed_ = register_module("embed", tg::nn::Embedding(vocab, embed, {.sparse = false}, gen));
    gru = register_module("gru", tg::nn::GRU(embed, hidden, {.batch_first = true}, gen));
    head = register_module("head", tg::nn::Linear(hidden, vocab, true, gen));
  }

  // ids [B, T] from the state h [1, B, H] (zeros when not given) -> logits [B, T, 27] and the last state.
  std::pair<tg::Tensor, tg::Tensor> forward(const tg::Indices& ids, const std::optional<tg::Tensor>& h = {}) const {
    auto [out, h_n] = (*gru)(embed_->forward(ids), h);  // [B, T, 128], [1, B, 128]
    return {(*head)(out), h_n};
  }
  std::shared_ptr<tg::nn::Module> clone() const override {
    tg::Generator scratch;  // the fresh weights are overwritten by copy_into
    return copy_into(std::make_shared<NamesGRU>(scratch));
  }
};

// Names as the GRU reads them: '.' then the letters in, the letters then '.'
// out, padded with '.' to the longest name of the batch. The padding's targets
// are not scored (the GRU reads left to right: padding after a name changes
// nothing before it).
struct Batch {
  tg::Indices x;                      // [B, T], T = the longest name + 1
  tg::Indices rows, targets;          // the scored rows of the flattened [B T, 27] logits, and their targets
};
static Batch batch_of(const std::vector<std::string>& names, const tg::Indices& idx) {
  std::size_t longest = 0;
  for (std::size_t b = 0; b < idx.size(); ++b) longest = std::max(longest, names[idx(b)].size());
  const std::size_t steps = longest + 1;
  std::vector<int64_t> x(idx.size() * steps, 0), rows, targets;
  for (std::size_t b = 0; b < idx.size(); ++b) {
    const std::string& name = names[idx(b)];
    for (std::size_t t = 0; t <= name.size(); ++t) {
      if (t < name.size()) x[b * steps + t + 1] = name[t] - 'a' + 1;
      rows.push_back(static_cast<int64_t>(b * steps + t));
      targets.push_back(t < name.size() ? name[t] - 'a' + 1 : 0);  // the next letter, or '.'
    }
  }
  return {tg::indices(x, {idx.size(), steps}), tg::indices(rows), tg::indices(targets)};
}

// The mean cross-entropy of the scored positions of `batch`, from its logits [B, T, 27].
static tg::Tensor next_char_loss(const tg::Tensor& logits, const Batch& batch) {
  return tg::cross_entropy(tg::index_select(tg::reshape(logits, {-1, vocab}), 0, batch.rows), batch.targets);
}

int main(int argc, char** argv) try {
  Flags flag(
      argc, argv, training_flags(NAMES_DEFAULT_DATA, "10", {{"--init-out", ""}, {"--bench-steps", ""}}),
      "A character-level GRU of first names: lr, train and dev loss per epoch, then 20 sampled names;\n"
      "--save/--load a checkpoint, --stop-after K, --threads T, --init-out FILE (the initial weights),\n"
      "--bench-steps N (time N steps instead of training).");
  training_threads(flag);
  const int epochs = flag.number("--epochs");
  const int last = flag.given("--stop-after") ? flag.number("--stop-after") : epochs;

  const std::vector<std::string> names = read_names(flag["--data"]);
  const std::size_t n_train = train_count(names.size());
  const std::vector<std::string> train(names.begin(), names.begin() + n_train), dev(names.begin() + n_train, names.end());
  const Batch all_dev = batch_of(dev, tg::arange(static_cast<int64_t>(dev.size())));
  std::printf("data: %s: %zu names (%zu train, %zu dev), %zu train and %zu dev characters\n",
              flag["--data"].c_str(), names.size(), train.size(), dev.size(),
              batch_of(train, tg::arange(static_cast<int64_t>(train.size()))).rows.size(), all_dev.rows.size());

  tg::Generator gen(flag.number("--seed"));  // weights, shuffling, sampling; saved in the checkpoint
  NamesGRU model(gen);
  if (flag.given("--init-out")) model.save(flag["--init-out"]);
  tg::data::BatchSampler batches(train.size(), {.batch_size = batch_size, .shuffle = true}, gen);
  tg::optim::Adam opt(model.parameters(), {.lr = lr});
  tg::optim::CosineAnnealingLR sched(opt, {.T_max = epochs});

  // One training step: forward, loss, backward, clip, update; returns the loss.
  auto train_step = [&](const tg::Indices& idx) {
    const Batch batch = batch_of(train, idx);
    opt.zero_grad();
    // The batch's names split across the threads (on one thread: the plain
    // loss(model(x)).backward()). Every shard has the batch's length T.
    tg::Tensor loss = tg::nn::data_parallel(
        model.parameters(), idx.size(),
        [&](std::size_t b, std::size_t e) { return model.forward(tg::narrow(batch.x, 0, b, e - b)).first; },
        [&](const tg::Tensor& logits) { return next_char_loss(logits, batch); }, gen);
    tg::nn::utils::clip_grad_norm_(model.parameters(), clip);
    opt.step();
    return loss.item();
  };

  if (flag.given("--bench-steps")) {  // fixed shapes: the first batch of names, over and over
    // The median wall time of a step, and the process's CPU time per step (what
    // a busy machine changes less).
    const int steps = flag.number("--bench-steps");
    const tg::Indices first = tg::arange(static_cast<int64_t>(batch_size));
    print_step_time(steps, [&] { train_step(first); });
    return 0;
  }

  tg::Checkpoint ckpt{.model = &model, .optimizer = &opt, .scheduler = &sched, .generator = &gen};
  int first = 1;
  if (flag.given("--load")) {
    tg::load_checkpoint(flag["--load"], ckpt);
    first = std::stoi(ckpt.metadata.at("epoch")) + 1;
  }

  std::printf("%5s %9s %10s %9s\n", "epoch", "lr", "train_loss", "dev_loss");
  for (int epoch = first; epoch <= last; ++epoch) {
    const double epoch_lr = opt.lr();
    double sum = 0;
    for (const tg::Indices& idx : batches) sum += train_step(idx);
    sched.step();
    tg::NoGradGuard no_grad;
    std::printf("%5d %9.6f %10.4f %9.4f\n", epoch, epoch_lr, sum / static_cast<double>(batches.size()),
                next_char_loss(model.forward(all_dev.x).first, all_dev).item());
    if (flag.given("--save")) {
      ckpt.metadata["epoch"] = std::to_string(epoch);
      tg::save_checkpoint(flag["--save"], ckpt);
    }
  }

  // Sampling reads one character a step and carries the GRU's state on.
  std::printf("sampled:");
  tg::NoGradGuard no_grad;
  for (int i = 0; i < 20; ++i) {
    std::string name;
    int64_t id = 0;  // '.' starts a name
    std::optional<tg::Tensor> h;
    while (name.size() < 30) {
      auto [logits, h_n] = model.forward(tg::indices({id}, {1, 1}), h);  // [1, 1, 27], [1, 1, 128]
      h = h_n;
      id = tg::multinomial(tg::softmax(tg::reshape(logits, {1, vocab}), 1), 1, gen)(0, 0);
      if (id == 0) break;
      name += static_cast<char>('a' + id - 1);
    }
    std::printf(" %s", name.c_str());
  }
  std::printf("\n");
} catch (const std::exception& e) {
  std::fprintf(stderr, "names_gru: %s\n", e.what());
  return 1;
}
