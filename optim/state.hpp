// Per-parameter optimizer state: declared once as a list of fields, and how a
// safetensors file holds it.
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
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "optimizer.hpp"

namespace tg::optim {

// How each type of state field is saved, loaded, checked and counted (the
// format above): parameter i's entry "state.<i>.<name>". load_entry throws
// (o.fail_load) for a missing entry or one that does not fit parameter i, and
// adds the key it read to `read`.
struct StateFormat {
  struct Read {
    std::set<std::string> metadata, tensors;
  };
  static void save_entry(StateDict& out, std::size_t i, const std::string& name, int64_t count);
  static void save_entry(StateDict& out, std::size_t i, const std::string& name, const Array& values);
  static void save_entry(StateDict& out, std::size_t i, const std::string& name,
                         const std::vector<uint8_t>& flags);
  static void load_entry(const Optimizer& o, const StateDict& in, std::size_t i, const std::string& name,
                         int64_t& count, Read& read);
  static void load_entry(const Optimizer& o, const StateDict& in, std::size_t i, const std::string& name,
                         Array& values, Read& read);
  static void load_entry(const Optimizer& o, const StateDict& in, std::size_t i, const std::string& name,
                         std::vector<uint8_t>& flags, Read& read);
  static void check_entry(const Optimizer& o, const std::string& op, std::size_t i, const std::string& name,
                          const Array& values);
  static void check_entry(const Optimizer& o, const std::string& op, std::size_t i, const std::string& name,
                          const std::vector<uint8_t>& flags);
  static void check_entry(const Optimizer&, const std::string&, std::size_t, const std::string&, int64_t) {
  }  // fits any shape
  static std::size_t bytes_of(int64_t) { return 0; }
  static std::size_t bytes_of(const Array& values) { return values.size() * sizeof(float); }
  static std::size_t bytes_of(const std::vector<uint8_t>& flags) { return flags.size(); }
  static bool has_entry(const StateDict& in, std::size_t i, const std::string& name);
  // Throws unless every per-parameter entry of `in` is in `read`.
  static void check_all_read(const Optimizer& o, const StateDict& in, const Read& read);

 private:
  // The tensor `key` of `in`, noted in `read`; throws when there is none.
  static const Array& tensor_entry(const Optimizer& o, const StateDict& in, const std::string& key,
                                   Read& read);
};

// One field of an optimizer's per-parameter state (PyTorch: a key of
// optimizer.state[p]): its name in the state dict and its member in State.
// How it is saved follows from its type (the format above):
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
                       [&](const std::string&, const auto& v) { n += StateFormat::bytes_of(v); });
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
      for_each_field(state_fields(options_), *state_[i], [&](const std::string& name, const auto& v) {
        StateFormat::check_entry(*this, op, i, name, v);
      });
  }

  void save_state(StateDict& out) const override {
    out.metadata["options"] = options_json();
    for (std::size_t i = 0; i < state_.size(); ++i)
      if (state_[i])
        for_each_field(state_fields(options_), *state_[i], [&](const std::string& name, const auto& v) {
          StateFormat::save_entry(out, i, name, v);
        });
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
    } catch (const std::exception& e) {     // a JSON error, or an invalid value
      const std::string& t = text->second;  // quoted up to 200 characters
      fail_load("\"options\" is not valid for " + name_ + ": " + e.what() + "; it is " + t.substr(0, 200) +
                (t.size() > 200 ? "..." : ""));
    }

    // Each parameter: every field, or none; its first field says which.
    const std::vector<StateField<State>> fields = state_fields(o);
    auto states = std::make_shared<std::vector<std::optional<State>>>(params_.size());
    StateFormat::Read read;
    for (std::size_t i = 0; i < params_.size(); ++i)
      if (!fields.empty() && StateFormat::has_entry(in, i, fields[0].name))
        for_each_field(fields, (*states)[i].emplace(), [&](const std::string& name, auto& v) {
          StateFormat::load_entry(*this, in, i, name, v, read);
        });
    StateFormat::check_all_read(*this, in, read);
    return [this, o, states] {
      options_ = o;
      state_ = std::move(*states);
    };
  }

  Options options_;
  std::vector<std::optional<State>> state_;  // state_[i] belongs to params_[i]; empty before its first step
};

}  // namespace tg::optim
