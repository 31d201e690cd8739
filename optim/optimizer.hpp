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
// optimizer has accumulated (momentum buffers, Adam's moments, step counts, which
// rows a sparse gradient has reached) and its hyper-parameters; load_state_dict()
// puts them back, so that training resumes exactly where it stopped. Each
// optimizer declares its per-parameter state once, as a list of fields
// (OptimizerWithState below); saving, loading and checking come from that list.
// The state is held the way a safetensors file holds it (save() and load() write
// and read one):
//
//   tensors   "state.<i>.<name>"  parameter i's float arrays, in its shape:
//                                 Adam: exp_avg, exp_avg_sq, max_exp_avg_sq (amsgrad)
//                                 SGD:  momentum_buffer, and row_seen (below)
//   metadata  "type"              "Adam", "AdamW" or "SGD"
//             "options"           the optimizer-wide options as JSON: {"betas": [0.9, 0.999], ...}
//             "param_groups"      one JSON object per group: {"lr": 0.001, "weight_decay": 0,
//                                 "params": [0, 1]} and "initial_lr" once a scheduler set it
//             "state.<i>.step"    parameter i's step count (Adam), a decimal integer
//
// safetensors holds float32 arrays and string metadata, so non-float state is
// encoded: integers (step counts) as decimal text, exact for any count; SGD's one
// flag per row (has row r's momentum buffer been written yet?) as a float32 array
// [rows] of 0 and 1 named "state.<i>.row_seen"; doubles (lr, betas, ...) as JSON
// numbers, which read back to the same double. A parameter that has not taken a
// step has no entries. The index i counts parameters over all groups in order,
// as in PyTorch.
//
// A parameter must keep its shape while an optimizer holds state for it: after
// its value is replaced by one of another shape, step() (for that parameter),
// state_dict() and loading a state made for the old shape throw
// std::invalid_argument naming the parameter and both shapes, and change
// nothing. PyTorch raises a size-mismatch error in step() too (but writes
// some state before it does, and its state_dict() does not check).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <xtensor/xtensor.hpp>

#include "../core/grad.hpp"
#include "../core/parallel.hpp"
#include "../core/safetensors.hpp"
#include "../core/table_memory.hpp"
#include "../core/tensor.hpp"

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
// at the top of this file): the file's arrays (a tg::StateDict, name -> array)
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

  // --- state (see the top of this file)
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

  // How each type of state field is saved, loaded, checked and counted (the
  // format at the top of this file): parameter i's entry "state.<i>.<name>".
  // load_entry throws (fail_load) for a missing entry or one that does not fit
  // parameter i, and adds the key it read to `read`.
  struct Read {
    std::set<std::string> metadata, tensors;
  };
  void save_entry(StateDict& out, std::size_t i, const std::string& name, int64_t count) const;
  void save_entry(StateDict& out, std::size_t i, const std::string& name, const Array& values) const;
  void save_entry(StateDict& out, std::size_t i, const std::string& name,
                  const std::vector<uint8_t>& flags) const;
  void load_entry(const StateDict& in, std::size_t i, const std::string& name, int64_t& count,
                  Read& read) const;
  void load_entry(const StateDict& in, std::size_t i, const std::string& name, Array& values,
                  Read& read) const;
  void load_entry(const StateDict& in, std::size_t i, const std::string& name, std::vector<uint8_t>& flags,
                  Read& read) const;
  void check_entry(const std::string& op, std::size_t i, const std::string& name, const Array& values) const;
  void check_entry(const std::string& op, std::size_t i, const std::string& name,
                   const std::vector<uint8_t>& flags) const;
  void check_entry(const std::string&, std::size_t, const std::string&, int64_t) const {}  // fits any shape
  static std::size_t bytes_of(int64_t) { return 0; }
  static std::size_t bytes_of(const Array& values) { return values.size() * sizeof(float); }
  static std::size_t bytes_of(const std::vector<uint8_t>& flags) { return flags.size(); }
  bool has_entry(const StateDict& in, std::size_t i, const std::string& name) const;
  const Array& tensor_entry(const StateDict& in, const std::string& key, Read& read) const;
  // Throws unless every per-parameter entry of `in` is in `read`.
  void check_all_read(const StateDict& in, const Read& read) const;

  // A state array of zeros in `shape` (momentum, moments). A sparse gradient
  // updates it at scattered rows, so it asks for 2 MB pages (advise_huge_pages).
  static Array zero_state(const Shape& shape);

  // The row view described at the top of this file.
  static std::size_t num_rows(const Shape& shape);
  static std::size_t row_size(const Shape& shape);

  // Calls update(r, g) for every row r the gradient covers; g points at that
  // row's `cols` gradient values. The gradient has passed check_step(). Rows
  // are independent (a sparse gradient's rows are unique), so they are split
  // across threads (core/parallel.hpp): update may run on several rows at once.
  // `touched` are the [rows, cols] arrays the update reads and writes (values,
  // moments; null entries are skipped). A sparse gradient's rows are scattered
  // over a table that can be far larger than the caches, so their rows in these
  // arrays are requested a few rows before their update.
  template <std::size_t N, class Update>
  static void for_each_row(const Grad& grad, std::size_t rows, std::size_t cols,
                           const std::array<float*, N>& touched, Update update) {
    const std::size_t grain = grain_for(1, cols);  // rows per chunk
    if (grad.is_dense()) {
      const float* g = grad.dense().data();
      parallel_for(rows, grain, [&](std::size_t lo, std::size_t hi) {
        for (std::size_t r = lo; r < hi; ++r) update(r, g + r * cols);
      });
    } else if (grad.is_sparse()) {
      const SparseRows& s = grad.sparse();
      parallel_for(s.rows.size(), grain, [&](std::size_t lo, std::size_t hi) {
        constexpr std::size_t ahead = 4;
        for (std::size_t i = lo; i < hi; ++i) {
          if (i + ahead < hi) {
            const std::size_t next = static_cast<std::size_t>(s.rows[i + ahead]);
            for (const float* a : touched)
              if (a != nullptr) prefetch_row(a + next * cols, cols);
          }
          update(static_cast<std::size_t>(s.rows[i]), s.values.data() + i * cols);
        }
      });
    }
  }

  std::vector<Tensor> params_;                     // every group's parameters, in order
  std::vector<ParamGroup> groups_;                 // lr and weight_decay always set
  std::vector<std::size_t> group_of_;              // group_of_[i]: the group of params_[i]
  std::vector<std::optional<double>> initial_lr_;  // per group
  std::string name_;                               // "SGD", "Adam", "AdamW": used in error messages
};

// One field of an optimizer's per-parameter state (PyTorch: a key of
// optimizer.state[p]): its name in the state dict and its member in State.
// How it is saved follows from its type (the format at the top of this file):
//   int64_t               a count >= 1, as metadata in decimal (Adam's step)
//   Array                 in the parameter's shape, as a tensor (moments, momentum)
//   std::vector<uint8_t>  one flag (0 or 1) per row, as a float32 tensor [rows]
template <class State>
struct StateField {
  std::string name;
  std::variant<int64_t State::*, Array State::*, std::vector<uint8_t> State::*> member;
};

// An optimizer whose options are an Options struct and whose state is one
// State per parameter, its fields declared once, as a list:
//
//   {{"step", &AdamState::step}, {"exp_avg", &AdamState::exp_avg}, ...}
//
// state_dict(), load_state_dict(), state_bytes() and the shape checks before
// step() all come from that list; an optimizer writes it, its options' JSON
// and step().
template <class Options, class State>
class OptimizerWithState : public Optimizer {
 public:
  // The options given to the constructor, or loaded (load_state_dict() replaces
  // them); each group's lr and weight_decay are in param_groups().
  const Options& options() const { return options_; }

  std::size_t state_bytes() const override {
    std::size_t n = 0;
    for (const std::optional<State>& s : state_)
      if (s)
        for_each_field(state_fields(options_), *s,
                       [&](const std::string&, const auto& v) { n += bytes_of(v); });
    return n;
  }

 protected:
  OptimizerWithState(std::vector<ParamGroup> groups, std::string name, const Options& options)
      : Optimizer(std::move(groups), std::move(name), options.lr, options.weight_decay),
        options_(options),
        state_(params_.size()) {}

  // The state's fields under `options` (amsgrad adds one).
  virtual std::vector<StateField<State>> state_fields(const Options& options) const = 0;
  // The options as the "options" JSON, and back: options_from_json throws for
  // text that does not parse, lacks an option or holds an invalid value.
  virtual std::string options_json() const = 0;
  virtual Options options_from_json(const std::string& text) const = 0;

  // Calls f(name, value) for each field of `state` (const or not).
  template <class S, class F>
  static void for_each_field(const std::vector<StateField<State>>& fields, S& state, F f) {
    for (const StateField<State>& field : fields)
      std::visit([&](auto member) { f(field.name, state.*member); }, field.member);
  }

  void check_state(std::size_t i, const std::string& op) const override {
    if (state_[i])
      for_each_field(state_fields(options_), *state_[i],
                     [&](const std::string& name, const auto& v) { check_entry(op, i, name, v); });
  }

  void save_state(StateDict& out) const override {
    out.metadata["options"] = options_json();
    for (std::size_t i = 0; i < state_.size(); ++i)
      if (state_[i])
        for_each_field(state_fields(options_), *state_[i],
                       [&](const std::string& name, const auto& v) { save_entry(out, i, name, v); });
  }

  std::function<void()> prepare_load(const StateDict& in) override {
    // The options: the saved ones replace ours, as in PyTorch.
    const auto text = in.metadata.find("options");
    if (text == in.metadata.end()) fail_load("no \"options\" entry");
    Options o;
    try {
      o = options_from_json(text->second);
    } catch (const std::bad_alloc&) {
      throw;
    } catch (const std::exception& e) {  // a JSON error, or an invalid value
      const std::string& t = text->second;  // quoted up to 200 characters
      fail_load("\"options\" is not valid for " + name_ + ": " + e.what() + "; it is " + t.substr(0, 200) +
                (t.size() > 200 ? "..." : ""));
    }

    // Each parameter: every field, or none; its first field says which.
    const std::vector<StateField<State>> fields = state_fields(o);
    auto states = std::make_shared<std::vector<std::optional<State>>>(params_.size());
    Read read;
    for (std::size_t i = 0; i < params_.size(); ++i)
      if (!fields.empty() && has_entry(in, i, fields[0].name))
        for_each_field(fields, (*states)[i].emplace(),
                       [&](const std::string& name, auto& v) { load_entry(in, i, name, v, read); });
    check_all_read(in, read);
    return [this, o, states] {
      options_ = o;
      state_ = std::move(*states);
    };
  }

  Options options_;
  std::vector<std::optional<State>> state_;  // state_[i] belongs to params_[i]; empty before its first step
};

}  // namespace tg::optim
