// A small CNN on the 8x8 handwritten digits (examples/data/digits.csv, as
// digits_mlp reads them): two 3x3 convolutions with batch norm and 2x2 max
// pooling, then a linear layer over the 32 channels of 2x2 that are left.
//
//   digits_cnn [--data CSV] [--epochs N] [--seed S] [--save FILE] [--load FILE] [--stop-after K]
//              [--threads T] [--bench-steps N]
//
// The flags are digits_mlp's, and so are the split, the optimizer and the
// schedule; only the model differs. --bench-steps N times N training steps on
// the first batch instead of training (scripts/steptime).
// tests/tools/digits_cnn_reference.py is the same program in PyTorch.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include <tapegrad/tapegrad.hpp>

#include "flags.hpp"
#include "step_time.hpp"

int main(int argc, char** argv) try {
  Flags flag(argc, argv, training_flags(DIGITS_DEFAULT_DATA, "20", {{"--bench-steps", ""}}),
             "A CNN on the 8x8 digits: lr, train and test loss, accuracy and ms per step per epoch;\n"
             "--save/--load a checkpoint, --stop-after K, --threads T, --bench-steps N (time N steps instead of\n"
             "training).");
  training_threads(flag);
  const int epochs = flag.number("--epochs");
  const int last = flag.given("--stop-after") ? flag.number("--stop-after") : epochs;
  const int seed = flag.number("--seed");

  // The images as [N, 1, 8, 8]: one channel of ink levels scaled to [0, 1].
  tg::data::CsvData data = tg::data::read_csv(flag["--data"], {.header = true});
  tg::Tensor images = tg::reshape(data.features / 16.0f, {-1, 1, 8, 8});
  tg::data::Split split = tg::data::train_test_split(data.size(), 0.2, seed);
  tg::Indices test = tg::indices(split.test);
  tg::Tensor test_images = tg::index_select(images, 0, test);
  tg::Indices test_labels = tg::data::take(data.labels, test);

  namespace nn = tg::nn;
  tg::Generator gen(seed);
  nn::Sequential model(nn::Conv2d(1, 16, 3, {.padding = 1}, gen), nn::BatchNorm2d(16), nn::ReLU(),
                       nn::MaxPool2d(2),                                         // [B, 16, 4, 4]
                       nn::Conv2d(16, 32, 3, {.padding = 1}, gen), nn::BatchNorm2d(32), nn::ReLU(),
                       nn::MaxPool2d(2),                                         // [B, 32, 2, 2]
                       nn::Flatten(), nn::Dropout(0.2f, gen), nn::Linear(128, 10, true, gen));
  tg::data::BatchSampler batches(split.train, {.batch_size = 32, .shuffle = true}, gen);
  tg::optim::Adam opt(model.parameters(), {.lr = 2e-3});
  tg::optim::CosineAnnealingLR sched(opt, {.T_max = epochs});

  // One training step on the images `idx`: forward, loss, backward, update; returns the loss.
  auto train_step = [&](const tg::Indices& idx) {
    tg::Tensor x = tg::index_select(images, 0, idx);
    tg::Indices y = tg::data::take(data.labels, idx);
    opt.zero_grad();
    tg::Tensor loss = tg::nn::data_parallel(
        model.parameters(), idx.size(),
        [&](std::size_t b, std::size_t e) { return model(tg::narrow(x, 0, b, e - b)); },
        [&](const tg::Tensor& logits) { return tg::cross_entropy(logits, y); }, gen);
    opt.step();
    return loss.item();
  };

  if (flag.given("--bench-steps")) {  // fixed shapes: the first batch of the training images, over and over
    // The median wall time of a step, and the process's CPU time per step.
    const int steps = flag.number("--bench-steps");
    const tg::Indices first = tg::indices(std::vector<int64_t>(split.train.begin(), split.train.begin() + 32));
    model.train();
    print_step_time(steps, [&] { train_step(first); });
    return 0;
  }

  // The checkpoint holds BatchNorm's running statistics too (buffers, in state_dict()).
  tg::Checkpoint ckpt{.model = &model, .optimizer = &opt, .scheduler = &sched, .generator = &gen};
  int first = 1;
  if (flag.given("--load")) {
    tg::load_checkpoint(flag["--load"], ckpt);
    first = std::stoi(ckpt.metadata.at("epoch")) + 1;
  }

  std::printf("%5s %9s %10s %9s %8s %8s\n", "epoch", "lr", "train_loss", "test_loss", "accuracy", "ms/step");
  for (int epoch = first; epoch <= last; ++epoch) {
    const double lr = opt.lr();
    double total = 0, ms = 0;
    model.train();  // batch statistics, dropout
    for (const tg::Indices& idx : batches) {
      const auto start = std::chrono::steady_clock::now();
      total += train_step(idx) * idx.size();
      ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    }
    sched.step();

    model.eval();  // running statistics, no dropout
    tg::NoGradGuard no_grad;
    tg::Tensor logits = model(test_images);
    std::printf("%5d %9.6f %10.4f %9.4f %8.4f %8.3f\n", epoch, lr, total / batches.num_samples(),
                tg::cross_entropy(logits, test_labels).item(), tg::data::accuracy(logits, test_labels),
                ms / static_cast<double>(batches.size()));
    if (flag.given("--save")) {
      ckpt.metadata["epoch"] = std::to_string(epoch);
      tg::save_checkpoint(flag["--save"], ckpt);
    }
  }
} catch (const std::exception& e) {
  std::fprintf(stderr, "digits_cnn: %s\n", e.what());
  return 1;
}
