// A character-level GPT of first names: the next model after names_mlp. Where
// names_mlp sees the 3 characters before, this one reads a whole name at once
// and, at every position, predicts the next character from all the ones before
// it (causal self-attention):
//
//   '.' e m m a  ->  tok + pos Embedding -> 2 x TransformerBlock -> LayerNorm -> Linear(64, 27)
//    e  m m a .      (the targets: each position's next character)
//
//   names_gpt [--data TXT] [--epochs N] [--seed S] [--save FILE] [--load FILE] [--stop-after K]
//             [--init-out FILE] [--bench-steps N] [--threads T]
//
// TXT holds a name a line (a-z only, at most 15 letters): the first 90% train,
// the last 10% are dev. Prints the learning rate, the training and the dev
// loss per epoch (nats per character, over the same characters as names_mlp),
// then 20 names sampled from the model. --save FILE writes a checkpoint after
// every epoch; --load FILE goes on from it; --stop-after K stops after epoch K,
// as an interrupted run would. --init-out FILE writes the initial weights (for
// tests/tools/names_gpt_reference.py --init FILE). --bench-steps N times N
// training steps on the first batch instead of training (scripts/names_gpt_steptime).
// --threads T splits each batch across T threads (nn::data_parallel; default 1,
// or TAPEGRAD_NUM_THREADS): a run repeats exactly for one T, and differs in
// rounding and dropout masks from a run on another T.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include <tapegrad/tapegrad.hpp>

#include "flags.hpp"
#include "step_time.hpp"
#include "names.hpp"

// tests/tools/names_gpt_reference.py is the same model and training in PyTorch, with these constants.
constexpr int64_t context = 16, embed = 64, heads = 4, layers = 2, vocab = 27;  // '.' and a-z
constexpr float dropout = 0.1f;
constexpr std::size_t batch_size = 32;
constexpr double max_lr = 3e-3, min_lr = 3e-4, weight_decay = 0.1, clip = 1.0;
constexpr int64_t warmup = 100;  // steps

// Token and position embeddings, added; the blocks; a last LayerNorm; a Linear
// to one logit per character at every position.
struct NamesGPT : tg::nn::Module {
  std::shared_ptr<tg::nn::Embedding> tok, pos;
  std::shared_ptr<tg::nn::Sequential> blocks;
  std::shared_ptr<tg::nn::LayerNorm> ln;
  std::shared_ptr<tg::nn::Linear> head;

  explicit NamesGPT(tg::Generator& gen) {
    // Every row of these small tables is used by most batches: dense gradients.
    tok = register_module("tok", tg::nn::Embedding(vocab, embed, {.sparse = false}, gen));
    pos = register_module("pos", tg::nn::Embedding(context, embed, {.sparse = false}, gen));
    blocks = register_module("blocks", tg::nn::Sequential());
    for (int64_t i = 0; i < layers; ++i)
      blocks->push_back(tg::nn::TransformerBlock(embed, heads, dropout, gen));
    ln = register_module("ln", tg::nn::LayerNorm(embed));
    head = register_module("head", tg::nn::Linear(embed, vocab, true, gen));
  }

  // ids [B, T] -> logits [B, T, 27]. T may be less than the context (sampling).
  tg::Tensor forward(const tg::Indices& ids) const {
    const int64_t T = static_cast<int64_t>(ids.shape()[1]);
    tg::Tensor x = tok->forward(ids) + pos->forward(tg::arange(T));  // [B, T, 64] + [T, 64]
    return (*head)((*ln)((*blocks)(x)));
  }
  std::shared_ptr<tg::nn::Module> clone() const override {
    tg::Generator scratch;  // the fresh weights are overwritten by copy_into
    return copy_into(std::make_shared<NamesGPT>(scratch));
  }
};

// Each name is one sequence, padded to the context: '.' then its letters in, its
// letters then '.' out. The padding's targets are not scored.
struct Names {
  tg::Indices x;               // [N, context]: 0 '.', then 1..26, then 0s
  std::vector<int64_t> chars;  // letters + 1 of each name: its scored positions
};
static Names encode(const std::vector<std::string>& names) {
  Names set{tg::Indices(xt::zeros<int64_t>({names.size(), static_cast<std::size_t>(context)})), {}};
  for (std::size_t i = 0; i < names.size(); ++i) {
    for (std::size_t t = 0; t < names[i].size(); ++t) set.x(i, t + 1) = names[i][t] - 'a' + 1;
    set.chars.push_back(static_cast<int64_t>(names[i].size()) + 1);
  }
  return set;
}

// The mean cross-entropy of the names `idx` of `set` over their scored positions:
// the logits of every position, then only the rows that have a target.
// The mean loss of predicting each next character of the names `idx` of `set`
// from the model's logits for them, [idx.size(), context, 27].
static tg::Tensor next_char_loss(const tg::Tensor& logits, const Names& set, const tg::Indices& idx) {
  std::vector<int64_t> rows, targets;  // row b * context + t of the flattened logits -> its next character
  for (std::size_t b = 0; b < idx.size(); ++b)
    for (int64_t t = 0; t < set.chars[idx(b)]; ++t) {
      rows.push_back(static_cast<int64_t>(b) * context + t);
      targets.push_back(t + 1 < set.chars[idx(b)] ? set.x(idx(b), t + 1) : 0);  // the next letter, or '.'
    }
  tg::Tensor flat = tg::reshape(logits, {-1, vocab});  // [B * context, 27]
  return tg::cross_entropy(tg::index_select(flat, 0, tg::indices(rows)), tg::indices(targets));
}

static tg::Tensor loss_on(const NamesGPT& model, const Names& set, const tg::Indices& idx) {
  return next_char_loss(model.forward(tg::data::take(set.x, idx)), set, idx);
}

// Linear warm-up to max_lr over `warmup` steps, then half a cosine down to min_lr at step `total`.
static double lr_at(int64_t step, int64_t total) {
  if (step < warmup) return max_lr * static_cast<double>(step + 1) / warmup;
  const double progress =
      static_cast<double>(step - warmup) / static_cast<double>(std::max<int64_t>(1, total - warmup));
  return min_lr + 0.5 * (max_lr - min_lr) * (1.0 + std::cos(M_PI * progress));
}

int main(int argc, char** argv) try {
  Flags flag(
      argc, argv, training_flags(NAMES_DEFAULT_DATA, "10", {{"--init-out", ""}, {"--bench-steps", ""}}),
      "A character-level GPT of first names: lr, train and dev loss per epoch, then 20 sampled names;\n"
      "--save/--load a checkpoint, --stop-after K, --threads T, --init-out FILE (the initial weights),\n"
      "--bench-steps N (time N steps instead of training).");
  training_threads(flag);
  const int epochs = flag.number("--epochs");
  const int last = flag.given("--stop-after") ? flag.number("--stop-after") : epochs;

  std::vector<std::string> names = read_names(flag["--data"], static_cast<std::size_t>(context - 1));
  const std::size_t n_train = train_count(names.size());
  const Names train = encode({names.begin(), names.begin() + n_train});
  const Names dev = encode({names.begin() + n_train, names.end()});
  auto count = [](const Names& s) { return std::accumulate(s.chars.begin(), s.chars.end(), 0LL); };
  std::printf("data: %s: %zu names (%zu train, %zu dev), %lld train and %lld dev characters\n",
              flag["--data"].c_str(), names.size(), n_train, names.size() - n_train, count(train),
              count(dev));

  tg::Generator gen(flag.number("--seed"));  // weights, shuffling, dropout, sampling; saved in the checkpoint
  NamesGPT model(gen);
  if (flag.given("--init-out")) model.save(flag["--init-out"]);
  tg::data::BatchSampler batches(n_train, {.batch_size = batch_size, .shuffle = true}, gen);
  tg::optim::AdamW opt(model.parameters(), {.lr = max_lr, .weight_decay = weight_decay});
  const int64_t total = static_cast<int64_t>(epochs * batches.size());

  // One training step: the learning rate of this step, forward, backward, clip, update.
  auto train_step = [&](const tg::Indices& idx, int64_t step, int64_t steps) {
    opt.set_lr(lr_at(step, steps));
    const tg::Indices x = tg::data::take(train.x, idx);
    opt.zero_grad();
    // The forward and backward passes of the batch's names split across the
    // threads (on one thread: the plain loss(model(x)).backward()).
    tg::Tensor loss = tg::nn::data_parallel(
        model.parameters(), idx.size(),
        [&](std::size_t b, std::size_t e) { return model.forward(tg::narrow(x, 0, b, e - b)); },
        [&](const tg::Tensor& logits) { return next_char_loss(logits, train, idx); }, gen);
    tg::nn::utils::clip_grad_norm_(model.parameters(), clip);
    opt.step();
    return loss.item();
  };

  if (flag.given("--bench-steps")) {  // fixed shapes: the first batch of names, over and over
    // The median wall time of a step, and the process's CPU time per step (what
    // a busy machine changes less).
    const int steps = flag.number("--bench-steps");
    const tg::Indices first = tg::arange(static_cast<int64_t>(batch_size));
    int step = 0;  // the schedule counts the warm-up steps too
    print_step_time(steps, [&] { train_step(first, step++, 10 + steps); });
    return 0;
  }

  tg::Checkpoint ckpt{.model = &model, .optimizer = &opt, .generator = &gen};
  int first = 1;
  if (flag.given("--load")) {
    tg::load_checkpoint(flag["--load"], ckpt);
    first = std::stoi(ckpt.metadata.at("epoch")) + 1;
  }

  const tg::Indices all_dev = tg::arange(static_cast<int64_t>(dev.chars.size()));
  std::printf("%5s %9s %10s %9s\n", "epoch", "lr", "train_loss", "dev_loss");
  for (int epoch = first; epoch <= last; ++epoch) {
    int64_t step = (epoch - 1) * static_cast<int64_t>(batches.size());
    double sum = 0;
    model.train();
    for (const tg::Indices& idx : batches) sum += train_step(idx, step++, total);
    model.eval();  // no dropout
    tg::NoGradGuard no_grad;
    std::printf("%5d %9.6f %10.4f %9.4f\n", epoch, opt.lr(), sum / static_cast<double>(batches.size()),
                loss_on(model, dev, all_dev).item());
    if (flag.given("--save")) {
      ckpt.metadata["epoch"] = std::to_string(epoch);
      tg::save_checkpoint(flag["--save"], ckpt);
    }
  }

  std::printf("sampled:");
  model.eval();
  tg::NoGradGuard no_grad;
  for (int i = 0; i < 20; ++i) {
    std::vector<int64_t> ids{0};
    while (ids.size() < static_cast<std::size_t>(context)) {
      tg::Tensor logits = model.forward(tg::indices(ids, {1, ids.size()}));  // [1, T, 27]
      tg::Tensor probs =
          tg::softmax(tg::narrow(tg::reshape(logits, {-1, vocab}), 0, -1, 1), 1);  // the last position
      const int64_t id = tg::multinomial(probs, 1, gen)(0, 0);
      if (id == 0) break;
      ids.push_back(id);
    }
    std::string name;
    for (std::size_t t = 1; t < ids.size(); ++t) name += static_cast<char>('a' + ids[t] - 1);
    std::printf(" %s", name.c_str());
  }
  std::printf("\n");
} catch (const std::exception& e) {
  std::fprintf(stderr, "names_gpt: %s\n", e.what());
  return 1;
}
