// An MLP that reads handwritten digits: 8x8 images of 0..16 ink levels, 10 classes
// (examples/data/digits.csv, 1,797 images; see examples/data/NOTICE).
//
//   digits_mlp [--data CSV] [--epochs N] [--seed S] [--save FILE] [--load FILE] [--stop-after K]
//              [--threads T] [--distributed]
//
// Trains N epochs (default 40) on a seeded 80/20 split and prints one row per
// epoch. --save FILE writes a checkpoint after every epoch; --load FILE goes on
// from the epoch it holds, exactly as if the run had not stopped. --stop-after K
// stops after epoch K, as an interrupted run would. --threads T splits each
// batch across T threads (nn::data_parallel; default 1, or TAPEGRAD_NUM_THREADS):
// a run repeats exactly for one T, and differs in rounding and dropout masks
// from a run on another T. --distributed, under `mpirun -np N` (a build with
// -Dmpi=enabled; docs/distributed.md), splits each batch of 32 over the N
// processes instead: each takes 32 / N images (DistributedSampler's order, by
// the seed and the epoch), the gradients are averaged (sync_gradients), and
// rank 0 prints and saves; a checkpoint resumes on any N that divides 32.
#include <cstdio>
#include <stdexcept>
#include <string>

#include <tapegrad/distributed/distributed.hpp>
#include <tapegrad/distributed/sampler.hpp>
#include <tapegrad/tapegrad.hpp>

#include "flags.hpp"

namespace dist = tg::distributed;

int main(int argc, char** argv) try {
  Flags flag(
      argc, argv, training_flags(DIGITS_DEFAULT_DATA, "40"),
      "An MLP on the 8x8 handwritten digits: one row per epoch; --save/--load a checkpoint to resume "
      "exactly,\n--stop-after K to stop after epoch K, --threads T to split each batch across T threads,\n"
      "--distributed to split it across the processes of `mpirun -np N` (docs/distributed.md).",
      {"--distributed"});
  training_threads(flag);
  const bool distributed = flag.given("--distributed");
  if (distributed) {
    if (!dist::is_available())
      throw std::invalid_argument("--distributed: this build has no MPI (configure it with -Dmpi=enabled)");
    dist::init(argc, argv);
    if (dist::rank() > 0) std::freopen("/dev/null", "w", stdout);  // rank 0 prints
  }
  const int world = dist::world_size();
  if (32 % world != 0)
    throw std::invalid_argument("--distributed: a batch of 32 does not split evenly over " + std::to_string(world) +
                                " processes");
  const int epochs = flag.number("--epochs");
  const int last = flag.given("--stop-after") ? flag.number("--stop-after") : epochs;
  const int seed = flag.number("--seed");

  // The data: features [1797, 64] scaled to [0, 1], labels [1797]; 20% held out.
  tg::data::CsvData data = tg::data::read_csv(flag["--data"], {.header = true});
  tg::Tensor images = data.features / 16.0f;
  tg::data::Split split = tg::data::train_test_split(data.size(), 0.2, seed);
  tg::Indices test = tg::indices(split.test);
  tg::Tensor test_images = tg::index_select(images, 0, test);
  tg::Indices test_labels = tg::data::take(data.labels, test);

  // Every random draw (initial weights, dropout, shuffling) comes from `gen`,
  // which the checkpoint saves: that is what makes resuming exact.
  tg::Generator gen(seed);
  tg::nn::Sequential model(tg::nn::Linear(64, 128, true, gen), tg::nn::ReLU(), tg::nn::Dropout(0.2f, gen),
                           tg::nn::Linear(128, 10, true, gen));
  tg::data::BatchSampler batches(split.train, {.batch_size = 32, .shuffle = true}, gen);
  dist::DistributedSampler shares(split.train, {.seed = static_cast<uint64_t>(seed), .num_replicas = world,
                                                .rank = dist::rank()});
  tg::optim::Adam opt(model.parameters(), {.lr = 2e-3});
  tg::optim::CosineAnnealingLR sched(opt, {.T_max = epochs});

  tg::Checkpoint ckpt{.model = &model, .optimizer = &opt, .scheduler = &sched, .generator = &gen};
  int first = 1;
  if (flag.given("--load")) {
    tg::load_checkpoint(flag["--load"], ckpt);
    first = std::stoi(ckpt.metadata.at("epoch")) + 1;
  }

  std::printf("%5s %9s %10s %9s %8s\n", "epoch", "lr", "train_loss", "test_loss", "accuracy");
  for (int epoch = first; epoch <= last; ++epoch) {
    const double lr = opt.lr();
    double total = 0;
    model.train();
    std::vector<tg::Indices> epoch_batches;  // this process's batches: all of each, or its share
    if (distributed) {
      shares.set_epoch(epoch);
      for (const std::vector<int64_t>& ids : shares.batches(32 / world)) epoch_batches.push_back(tg::indices(ids));
    } else {
      for (const tg::Indices& idx : batches) epoch_batches.push_back(idx);
    }
    for (const tg::Indices& idx : epoch_batches) {
      tg::Tensor x = tg::index_select(images, 0, idx);
      tg::Indices y = tg::data::take(data.labels, idx);
      opt.zero_grad();
      // loss(model(x)) and its backward pass, the batch's rows split across the
      // threads (on one thread: exactly that).
      tg::Tensor loss = tg::nn::data_parallel(
          model.parameters(), idx.size(),
          [&](std::size_t b, std::size_t e) { return model(tg::narrow(x, 0, b, e - b)); },
          [&](const tg::Tensor& logits) { return tg::cross_entropy(logits, y); }, gen);
      if (distributed) dist::sync_gradients(model.parameters(), static_cast<double>(idx.size()));
      opt.step();
      total += loss.item() * idx.size();
    }
    sched.step();
    double sums[2] = {total, static_cast<double>(distributed ? shares.num_samples() : batches.num_samples())};
    if (distributed) dist::all_reduce(sums);  // every rank's share of the epoch's loss

    model.eval();  // no dropout
    tg::NoGradGuard no_grad;
    tg::Tensor logits = model(test_images);
    std::printf("%5d %9.6f %10.4f %9.4f %8.4f\n", epoch, lr, sums[0] / sums[1],
                tg::cross_entropy(logits, test_labels).item(), tg::data::accuracy(logits, test_labels));
    if (flag.given("--save") && dist::rank() == 0) {
      ckpt.metadata["epoch"] = std::to_string(epoch);
      tg::save_checkpoint(flag["--save"], ckpt);
    }
  }
  dist::finalize();
} catch (const std::exception& e) {
  std::fprintf(stderr, "digits_mlp: %s%s\n",
               dist::world_size() > 1 ? ("rank " + std::to_string(dist::rank()) + ": ").c_str() : "", e.what());
  if (dist::world_size() > 1) dist::abort(1);  // the other ranks would wait for this one for ever
  dist::finalize();
  return 1;
}
