// The optimizer base: parameter groups, checks before a step, state dicts.
#include "optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "../core/kernels/table_memory.hpp"
#include "../io/read_json.hpp"
#include "rows.hpp"

namespace tg::optim {

using json = nlohmann::json;

std::vector<ParamGroup> Optimizer::one_group(std::vector<Tensor> params) {
  return {ParamGroup{std::move(params), std::nullopt, std::nullopt}};
}

Optimizer::Optimizer(std::vector<ParamGroup> groups, std::string name, double lr, double weight_decay)
    : groups_(std::move(groups)), name_(std::move(name)) {
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    ParamGroup& group = groups_[g];
    if (!group.lr) group.lr = lr;
    if (!group.weight_decay) group.weight_decay = weight_decay;
    const std::string which = name_ + ": param group " + std::to_string(g);
    if (!(*group.lr >= 0))
      throw std::invalid_argument(which + ": invalid learning rate " + std::to_string(*group.lr));
    if (!(*group.weight_decay >= 0))
      throw std::invalid_argument(which + ": invalid weight_decay " + std::to_string(*group.weight_decay));
    for (const Tensor& p : group.params) {
      params_.push_back(p);
      group_of_.push_back(g);
    }
  }
  initial_lr_.assign(groups_.size(), std::nullopt);
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const std::string which =
        name_ + ": parameter " + std::to_string(i) + " (shape " + shape_str(params_[i].shape()) + ")";
    if (!params_[i].is_leaf())
      throw std::invalid_argument(which + " is not a leaf; optimize the tensors you created");
    if (!params_[i].requires_grad()) throw std::invalid_argument(which + " does not require grad");
    for (std::size_t j = 0; j < i; ++j)
      if (params_[i].is_same(params_[j]))
        throw std::invalid_argument(which + " is the same tensor as parameter " + std::to_string(j));
  }
}

void Optimizer::zero_grad() {
  for (Tensor& p : params_) p.zero_grad();
}

// ---------------------------------------------------------------- learning rates

static void check_group(const std::string& name, std::size_t group, std::size_t count) {
  if (group >= count)
    throw std::invalid_argument(name + ": param group " + std::to_string(group) + " out of range (" +
                                std::to_string(count) + " groups)");
}

double Optimizer::lr(std::size_t group) const {
  check_group(name_ + ".lr", group, groups_.size());
  return *groups_[group].lr;
}

void Optimizer::set_lr(double lr) {
  if (!(lr >= 0)) throw std::invalid_argument(name_ + ".set_lr: invalid learning rate " + std::to_string(lr));
  for (ParamGroup& g : groups_) g.lr = lr;
}

void Optimizer::set_lr(std::size_t group, double lr) {
  check_group(name_ + ".set_lr", group, groups_.size());
  if (!(lr >= 0)) throw std::invalid_argument(name_ + ".set_lr: invalid learning rate " + std::to_string(lr));
  groups_[group].lr = lr;
}

std::optional<double> Optimizer::initial_lr(std::size_t group) const {
  check_group(name_ + ".initial_lr", group, groups_.size());
  return initial_lr_[group];
}

void Optimizer::set_initial_lr(std::size_t group, double lr) {
  check_group(name_ + ".set_initial_lr", group, groups_.size());
  if (!(lr >= 0))
    throw std::invalid_argument(name_ + ".set_initial_lr: invalid learning rate " + std::to_string(lr));
  initial_lr_[group] = lr;
}

// ---------------------------------------------------------------- state

StateDict Optimizer::state_dict() const {
  for (std::size_t i = 0; i < params_.size(); ++i) check_state(i, name_ + ".state_dict");
  StateDict out;
  out.metadata["type"] = name_;
  json groups = json::array();
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    json params = json::array();
    for (std::size_t i = 0; i < params_.size(); ++i)
      if (group_of_[i] == g) params.push_back(i);
    json group = {{"lr", *groups_[g].lr}, {"weight_decay", *groups_[g].weight_decay}, {"params", params}};
    if (initial_lr_[g]) group["initial_lr"] = *initial_lr_[g];
    groups.push_back(group);
  }
  out.metadata["param_groups"] = groups.dump();
  save_state(out);
  return out;
}

void Optimizer::fail_load(const std::string& reason) const {
  throw std::invalid_argument(name_ + ".load_state_dict: " + reason);
}

// A non-negative finite number, for an lr or a weight decay read from JSON.
static bool is_rate(const json& j) {
  return j.is_number() && j.get<double>() >= 0 && j.get<double>() < HUGE_VAL;
}

void Optimizer::load_state_dict(const StateDict& state) {
  prepare_load_state_dict(state)();
}

std::function<void()> Optimizer::prepare_load_state_dict(const StateDict& state) {
  const Metadata& meta = state.metadata;
  const auto type = meta.find("type");
  if (type == meta.end()) fail_load("no \"type\" entry: not an optimizer's state");
  if (type->second != name_) fail_load("the state is " + type->second + "'s, this optimizer is " + name_);
  for (const auto& [key, value] : meta)
    if (key != "type" && key != "options" && key != "param_groups" && key.rfind("state.", 0) != 0)
      fail_load("unexpected metadata entry '" + key + "'");

  // The groups: the same number, the same parameters in each, valid rates.
  const auto groups_text = meta.find("param_groups");
  if (groups_text == meta.end()) fail_load("no \"param_groups\" entry");
  std::string why;
  const json groups = detail::parse_json(groups_text->second, why);
  if (groups.is_discarded()) fail_load("\"param_groups\" " + why);
  if (!groups.is_array()) fail_load("\"param_groups\" is not a JSON list");
  if (groups.size() != groups_.size())
    fail_load("the state has " + std::to_string(groups.size()) + " param groups, this optimizer has " +
              std::to_string(groups_.size()));
  std::vector<ParamGroup> loaded = groups_;
  std::vector<std::optional<double>> initial;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const json& group = groups[g];
    const std::string where = "param group " + std::to_string(g);
    if (!group.is_object() || !group.contains("lr") || !group.contains("weight_decay") ||
        !group.contains("params"))
      fail_load(where + " needs \"lr\", \"weight_decay\" and \"params\"");
    json expected = json::array();
    for (std::size_t i = 0; i < params_.size(); ++i)
      if (group_of_[i] == g) expected.push_back(i);
    if (group["params"] != expected)
      fail_load(where + " holds parameters " + group["params"].dump() + " in the state but " +
                expected.dump() + " here");
    auto rate = [&](const char* name) {
      if (!is_rate(group[name])) fail_load(where + ": invalid " + name + " " + group[name].dump());
      return group[name].get<double>();
    };
    loaded[g].lr = rate("lr");
    loaded[g].weight_decay = rate("weight_decay");
    initial.push_back(group.contains("initial_lr") ? std::optional(rate("initial_lr")) : std::nullopt);
  }
  std::function<void()> install = prepare_load(state);

  // Everything was checked: the returned function changes things.
  return [this, loaded, initial, install] {
    groups_ = loaded;
    initial_lr_ = initial;
    install();
  };
}

void Optimizer::save(const std::string& path) const {
  const StateDict s = state_dict();
  save_safetensors(path, s.tensors, s.metadata);
}

void Optimizer::load(const std::string& path) {
  StateDict s{load_safetensors(path), load_safetensors_metadata(path)};
  try {
    load_state_dict(s);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(path + ": " + e.what());
  }
}

// ---------------------------------------------------------------- state entries

std::string Optimizer::describe(std::size_t i) const {
  const std::string& name = params_[i].name();
  return "parameter " + std::to_string(i) + (name.empty() ? "" : " (" + name + ")");
}

// ---------------------------------------------------------------- steps

void Optimizer::check_step() const {
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Grad& g = params_[i].grad();
    const Shape shape = params_[i].shape();
    const std::string which = name_ + ".step: " + describe(i);
    if (g.is_dense()) {
      const Shape gs(g.dense().shape().begin(), g.dense().shape().end());
      if (gs != shape)
        throw std::invalid_argument(which + " has shape " + shape_str(shape) +
                                    " but its gradient has shape " + shape_str(gs));
    } else if (g.is_sparse()) {
      const SparseRows& s = g.sparse();
      const Shape gs{s.num_rows, s.values.shape()[1]};
      if (gs != shape)
        throw std::invalid_argument(which + " has shape " + shape_str(shape) +
                                    " but its SparseRows gradient has shape " + shape_str(gs));
      s.check(which.c_str());  // rows sorted, unique, in range; one values row per row
    }
    if (!g.empty()) check_state(i, name_ + ".step");
  }
}

Array zero_state(const Shape& shape) {
  Array a = xt::empty<float>(shape);
  advise_huge_pages(a.data(), a.size());  // before the fill touches the pages
  std::fill(a.begin(), a.end(), 0.0f);
  return a;
}

std::size_t num_rows(const Shape& shape) {
  return shape.size() >= 2 ? shape[0] : 1;
}

std::size_t row_size(const Shape& shape) {
  std::size_t n = 1;
  for (std::size_t d = shape.size() >= 2 ? 1 : 0; d < shape.size(); ++d) n *= shape[d];
  return n;
}

}  // namespace tg::optim
