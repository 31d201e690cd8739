// Checkpoints: everything a training run needs to go on exactly where it
// stopped, in one safetensors file, saved by one call and loaded by one call.
//
//   tg::Checkpoint ckpt{.model = &model, .optimizer = &opt, .scheduler = &sched, .generator = &gen};
//   if (resume) {
//     tg::load_checkpoint("run.ckpt", ckpt);            // values, moments, lr, shuffling: all back
//     first_epoch = std::stoi(ckpt.metadata.at("epoch")) + 1;
//   }
//   for (int epoch = first_epoch; ...) {
//     ... train one epoch ...
//     ckpt.metadata["epoch"] = std::to_string(epoch);
//     tg::save_checkpoint("run.ckpt", ckpt);
//   }
//
// PyTorch writes the same with torch.save({"model": model.state_dict(),
// "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
// "rng": gen.get_state(), "epoch": epoch}, path) and the matching loads.
//
// A part left null is not saved (save) or not loaded (load). Resuming is exact:
// "3 epochs" and "2 epochs, save, load in a new process, 1 epoch" give the same
// parameters bit for bit, as long as every random draw of the run (shuffling,
// dropout) comes from the saved generator (tests/test_checkpoint.cpp).
//
// The file is safetensors (io/safetensors.hpp), so Python can read it:
//   tensors   "model.<name>"        the model's state_dict()
//             "optimizer.<name>"    the optimizer's tensors (optim/state.hpp)
//             "user.<name>"         Checkpoint::tensors
//   metadata  "format"              "tapegrad checkpoint 1"
//             "contents"            which parts the file holds, as a JSON list
//             "optimizer.<key>"     the optimizer's metadata (type, groups, step counts)
//             "scheduler.<key>"     the scheduler's state_dict()
//             "generator"           the generator's state, as std::mt19937 writes it
//                                   with operator<< (624 words and a position, in decimal)
//             "user.<key>"          Checkpoint::metadata
// Saving is atomic (a failed save leaves the previous file whole).
//
// Checkpoint, save_checkpoint and load_checkpoint are top-level names (tg::, not
// tg::optim::), like torch.save: a checkpoint holds a model (nn), an optimizer
// and a scheduler (optim) and a generator (core), so it belongs to none of them.
#pragma once

#include <string>

#include "../core/factories.hpp"
#include "../io/safetensors.hpp"
#include "../nn/module.hpp"  // nn::Module, the model a checkpoint saves and loads
#include "optimizer.hpp"
#include "scheduler.hpp"

namespace tg {

struct Checkpoint {
  nn::Module* model = nullptr;
  optim::Optimizer* optimizer = nullptr;
  optim::LRScheduler* scheduler = nullptr;
  Generator* generator = nullptr;
  // Your own entries: strings (the epoch, a config) and float arrays (statistics
  // of the data, say). Saved as given; load_checkpoint replaces both with the file's.
  Metadata metadata = {};
  StateDict tensors = {};
};

// Writes the parts that are not null, and metadata and tensors. Throws
// SafetensorsError when the file cannot be written.
void save_checkpoint(const std::string& path, const Checkpoint& checkpoint);

// Loads the file's parts into the non-null parts of `checkpoint`, and replaces
// its metadata and tensors with the file's. Everything is checked before
// anything changes: a file that is not a checkpoint, lacks a part that was
// asked for, or holds a part that does not fit (another model, optimizer type
// or number of groups, a wrong shape, a bad generator state) throws, naming the
// file, and leaves the model, optimizer, scheduler, generator and `checkpoint`
// as they were. Parts in the file that were not asked for are ignored. Throws
// SafetensorsError for an unreadable or corrupt file, std::invalid_argument
// for one whose content does not fit.
void load_checkpoint(const std::string& path, Checkpoint& checkpoint);

}  // namespace tg
