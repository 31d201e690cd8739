// Optimizer: the base of SGD and Adam.
//
// An optimizer holds handles to the parameters it updates (copies of the Tensor
// handles, so it sees the same values and gradient slots as the model) and keeps
// its per-parameter state in vectors parallel to them: state_[i] belongs to
// params_[i].
//
// Parameter groups, as in PyTorch: each group has its own learning rate and
// weight decay; the other options (betas, momentum, ...) are the optimizer's.
//
//   tg::optim::Adam opt({{.params = model.emb->parameters(), .lr = 0.1},
//                        {.params = model.fc->parameters(), .weight_decay = 1e-4}},
//                       {.lr = 1e-3});   // a group without its own lr uses 1e-3
//   opt.set_lr(0.01);                    // every group; set_lr(g, lr) for one
//
// A plain list of parameters is one group with the options' lr and weight_decay.
// Schedulers (optim/scheduler.hpp) change the groups' learning rates between steps.
//
// One training step:
//
//   optimizer.zero_grad();   // every gradient slot becomes empty
//   loss.backward();         // fills the slots (dense arrays or SparseRows)
//   optimizer.step();        // updates the values in place
//
// step() skips a parameter whose gradient slot is empty, as PyTorch skips a
// parameter whose .grad is None. Before updating anything it checks every
// gradient against its parameter, so a bad gradient throws and leaves all values
// and all optimizer state as they were.
//
// Rows. A parameter of shape [n0, n1, ...] is updated as n0 rows of n1*n2*...
// values; a 0-d or 1-d parameter is a single row. A dense gradient covers every
// row; a SparseRows gradient (from an Embedding, say) covers only its listed rows,
// and the optimizers touch nothing else. Dense and sparse gradients go through the
// same per-row code, which is why a sparse gradient listing every row gives
// exactly the dense result.
//
// State, as PyTorch's optimizer.state_dict(): state_dict() returns what the
// optimizer has accumulated (momentum buffers, Adam's moments, step counts) and
// its hyper-parameters; load_state_dict() puts them back, so that training
// resumes exactly where it stopped. Each optimizer declares its per-parameter
// state once, as a list of fields; optim/state.hpp turns that list into saving,
// loading and checking, and says how a safetensors file holds it.
//
// A parameter must keep its shape while an optimizer holds state for it: after
// its value is replaced by one of another shape, step() (for that parameter),
// state_dict() and loading a state made for the old shape throw
// std::invalid_argument naming the parameter and both shapes, and change
// nothing. PyTorch raises a size-mismatch error in step() too (but writes
// some state before it does, and its state_dict() does not check).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <xtensor/xtensor.hpp>

#include "../core/grad.hpp"
#include "../core/tensor.hpp"
#include "../io/safetensors.hpp"

namespace tg::optim {

// One group of parameters and the options it overrides (PyTorch: one dict in
// the list passed to the optimizer). After construction, param_groups() returns
// every group with lr and weight_decay set.
struct ParamGroup {
  std::vector<Tensor> params = {};
  std::optional<double> lr = {};            // unset: the optimizer's options.lr
  std::optional<double> weight_decay = {};  // unset: the optimizer's options.weight_decay
};

// An optimizer's state as a safetensors file holds it (the format is described
// in optim/state.hpp): the file's arrays (a tg::StateDict, name -> array)
// and its strings.
struct StateDict {
  tg::StateDict tensors = {};
  Metadata metadata = {};
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // One update of every parameter that has a gradient.
  virtual void step() = 0;

  // Empties every gradient slot (PyTorch's zero_grad(set_to_none=True)): a
  // parameter that gets no gradient before the next step() is then skipped.
  void zero_grad();

  // Every parameter, group after group.
  const std::vector<Tensor>& parameters() const { return params_; }

  // --- learning rates and groups
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  double lr(std::size_t group = 0) const;
  // Sets the learning rate of every group, or of one. Throws std::invalid_argument
  // for lr < 0 or a group out of range.
  void set_lr(double lr);
  void set_lr(std::size_t group, double lr);
  // The learning rate a scheduler started from (PyTorch's group["initial_lr"]):
  // unset until a scheduler is attached. Schedulers set it.
  std::optional<double> initial_lr(std::size_t group) const;
  void set_initial_lr(std::size_t group, double lr);

  // --- state (optim/state.hpp says what it holds)
  StateDict state_dict() const;
  // Checks all of `state` first: a different optimizer type, other groups, a
  // tensor of the wrong shape, a missing or unknown entry, or an invalid value
  // throws std::invalid_argument listing the problem, and nothing changes. As in
  // PyTorch, the saved hyper-parameters (each group's lr and weight_decay, the
  // optimizer's other options) replace the ones given to the constructor.
  void load_state_dict(const StateDict& state);
  // The checks of load_state_dict alone; returns the function that then loads
  // the state and cannot fail. A caller loading several things (a checkpoint)
  // checks them all before it loads any.
  std::function<void()> prepare_load_state_dict(const StateDict& state);
  // state_dict() to / from a safetensors file. load() also throws
  // SafetensorsError for a file that cannot be read; the message of an
  // invalid_argument names the file.
  void save(const std::string& path) const;
  void load(const std::string& path);

  // Bytes held by the optimizer's state arrays and flags.
  virtual std::size_t state_bytes() const = 0;

  const std::string& name() const { return name_; }  // "SGD", "Adam", "AdamW"

 protected:
  // Throws std::invalid_argument, naming `name` and the parameter's position,
  // for a parameter given twice, a non-leaf, or one that does not require grad,
  // and for a group's lr or weight_decay < 0. Groups without their own lr or
  // weight_decay get `lr` and `weight_decay`.
  Optimizer(std::vector<ParamGroup> groups, std::string name, double lr, double weight_decay);
  static std::vector<ParamGroup> one_group(std::vector<Tensor> params);

  // Throws std::invalid_argument unless every non-empty gradient fits its
  // parameter, and that parameter its state. step() calls it before touching anything.
  void check_step() const;

  // What a derived optimizer adds to state_dict(): "options" and its per-parameter entries.
  virtual void save_state(StateDict& out) const = 0;
  // Checks the "options" and per-parameter entries of `state` (all of them; the
  // base has checked "type" and "param_groups") and returns a function that
  // installs them, which must not throw. Throws std::invalid_argument otherwise.
  virtual std::function<void()> prepare_load(const StateDict& state) = 0;
  // Throws std::invalid_argument, naming `op`, unless parameter i's state (if
  // any) was made for the shape the parameter has now.
  virtual void check_state(std::size_t i, const std::string& op) const = 0;

  // "parameter 2 (fc.weight)", or "parameter 2" for a tensor without a name.
  std::string describe(std::size_t i) const;
  [[noreturn]] void fail_load(const std::string& reason) const;

  std::vector<Tensor> params_;                     // every group's parameters, in order
  std::vector<ParamGroup> groups_;                 // lr and weight_decay always set
  std::vector<std::size_t> group_of_;              // group_of_[i]: the group of params_[i]
  std::vector<std::optional<double>> initial_lr_;  // per group
  std::string name_;                               // "SGD", "Adam", "AdamW": used in error messages

  friend struct StateFormat;  // optim/state.hpp: how the state entries are saved and loaded
};

}  // namespace tg::optim
