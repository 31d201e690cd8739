// Learning-rate schedulers, as torch.optim.lr_scheduler (PyTorch 1.13):
// StepLR, CosineAnnealingLR and LinearLR.
//
//   tg::optim::SGD opt(model.parameters(), {.lr = 0.1, .momentum = 0.9});
//   tg::optim::StepLR sched(opt, {.step_size = 30, .gamma = 0.1});
//   for (int epoch = 0; epoch < 100; ++epoch) {
//     train_one_epoch();     // opt.step() for each batch
//     sched.step();          // then the next epoch's learning rate
//   }
//
// A scheduler changes the learning rate of each of its optimizer's param groups
// (Optimizer::set_lr). As in PyTorch:
//   - The constructor records each group's current lr as its "initial_lr" (once:
//     a second scheduler on the same optimizer finds it set) and takes the first
//     step, to epoch 0: LinearLR then multiplies the lr by start_factor, the
//     others leave it as it is.
//   - step() goes to the next epoch and computes the new lr from the group's
//     CURRENT lr (PyTorch's "chainable" form: StepLR multiplies it by gamma every
//     step_size epochs). So a change made between steps by the user (set_lr) or
//     by another scheduler carries on instead of being overwritten. Without such
//     changes the lr equals the closed form below, up to rounding.
//   - get_last_lr() is what the last step() set, one entry per group.
//   - state_dict() / load_state_dict() hold last_epoch, base_lrs, the last lrs
//     and the scheduler's own settings; loading replaces the settings too.
// Every number is a double, computed in PyTorch's order of operations, so the
// learning rates equal PyTorch's bit for bit (tests/test_optim.cpp checks 60
// steps of each scheduler against torch 1.13).
//
// Differences: no `last_epoch` constructor argument (resume with
// load_state_dict instead), no `verbose`, no `step(epoch)` (deprecated in
// PyTorch), and no SequentialLR/ChainedScheduler; settings PyTorch accepts
// but cannot use (step_size or T_max of 0, start_factor 0) or that would make
// a learning rate negative (gamma or eta_min < 0) throw here.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "../io/safetensors.hpp"
#include "optimizer.hpp"

namespace tg::optim {

// The optimizer must outlive its schedulers (they keep a pointer to it).
class LRScheduler {
 public:
  virtual ~LRScheduler() = default;

  // Goes to the next epoch and sets every group's learning rate for it. Throws
  // std::invalid_argument, changing nothing, if one would be negative (a
  // CosineAnnealingLR whose group was set below eta_min by hand can get there).
  void step();
  // The learning rates the last step() set, one per param group.
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  // The epoch the scheduler is at: 0 after construction, +1 per step().
  int64_t last_epoch() const { return last_epoch_; }
  // Each group's initial_lr, where the schedule starts from.
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  const std::string& name() const { return name_; }

  // Strings by name, as a safetensors file's metadata holds them: "type",
  // "last_epoch", "base_lrs" and "last_lr" (JSON lists), and the settings
  // ("step_size", "gamma", ...). load_state_dict checks everything (the type,
  // the number of groups, every value) before it changes anything, and throws
  // std::invalid_argument naming the problem.
  Metadata state_dict() const;
  void load_state_dict(const Metadata& state);
  // The checks of load_state_dict alone; returns the function that then loads
  // the state and cannot fail (for load_checkpoint, which checks every part first).
  std::function<void()> prepare_load_state_dict(const Metadata& state);

 protected:
  // The derived constructor checks its settings, then calls initial_step(),
  // which sets each group's initial_lr if unset, reads base_lrs, and steps to
  // epoch 0. (A bad setting thus throws before the optimizer is touched.)
  LRScheduler(Optimizer& optimizer, std::string name);
  void initial_step();

  // The learning rate of each group for last_epoch_ (just incremented), from the
  // groups' current lr: PyTorch's get_lr().
  virtual std::vector<double> get_lr() const = 0;
  // The settings as strings, and a check of saved ones that returns a function
  // installing them (it must not throw).
  virtual Metadata settings() const = 0;
  virtual std::function<void()> prepare_settings(const Metadata& state) = 0;

  // Reads an integer or a number saved by settings(); throws std::invalid_argument.
  int64_t integer_setting(const Metadata& state, const std::string& key) const;
  double number_setting(const Metadata& state, const std::string& key) const;

  Optimizer* optimizer_;
  std::string name_;
  std::vector<double> base_lrs_;
  std::vector<double> last_lr_;
  int64_t last_epoch_ = -1;
};

// Multiplies the lr by gamma every step_size epochs:
// lr = initial_lr * gamma^floor(epoch / step_size).
struct StepLROptions {
  int64_t step_size = 0;  // required, > 0
  double gamma = 0.1;     // >= 0
};

class StepLR : public LRScheduler {
 public:
  // Throws std::invalid_argument for step_size < 1 or gamma < 0.
  StepLR(Optimizer& optimizer, StepLROptions options);
  const StepLROptions& options() const { return options_; }

 protected:
  std::vector<double> get_lr() const override;
  Metadata settings() const override;
  std::function<void()> prepare_settings(const Metadata& state) override;

 private:
  StepLROptions options_;
};

// Half a cosine from initial_lr down to eta_min over T_max epochs (then back up,
// as PyTorch's schedule does when stepped past T_max):
// lr = eta_min + (initial_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2.
struct CosineAnnealingLROptions {
  int64_t T_max = 0;   // required, > 0 (PyTorch's name)
  double eta_min = 0;  // >= 0
};

class CosineAnnealingLR : public LRScheduler {
 public:
  // Throws std::invalid_argument for T_max < 1 or eta_min < 0.
  CosineAnnealingLR(Optimizer& optimizer, CosineAnnealingLROptions options);
  const CosineAnnealingLROptions& options() const { return options_; }

 protected:
  std::vector<double> get_lr() const override;
  Metadata settings() const override;
  std::function<void()> prepare_settings(const Metadata& state) override;

 private:
  CosineAnnealingLROptions options_;
};

// Moves the lr's factor linearly from start_factor to end_factor over
// total_iters epochs, then keeps end_factor:
// lr = initial_lr * (start + (end - start) * min(epoch, total_iters) / total_iters).
// Warm-up: {.start_factor = 0.1, .end_factor = 1, .total_iters = 5}.
// Linear decay: {.start_factor = 1, .end_factor = 0.01, .total_iters = epochs}.
struct LinearLROptions {
  double start_factor = 1.0 / 3;  // in (0, 1]
  double end_factor = 1.0;        // in [0, 1]
  int64_t total_iters = 5;        // > 0
};

class LinearLR : public LRScheduler {
 public:
  // Throws std::invalid_argument for factors outside the ranges above or
  // total_iters < 1.
  LinearLR(Optimizer& optimizer, LinearLROptions options = {});
  const LinearLROptions& options() const { return options_; }

 protected:
  std::vector<double> get_lr() const override;
  Metadata settings() const override;
  std::function<void()> prepare_settings(const Metadata& state) override;

 private:
  LinearLROptions options_;
};

}  // namespace tg::optim
