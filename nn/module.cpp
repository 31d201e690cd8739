// Module: parameters, submodules, state dicts, train/eval, clone.
#include "module.hpp"

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <set>
#include <stdexcept>
#include <typeinfo>

#include "../io/safetensors.hpp"

namespace tg::nn {

void Module::check_new_name(const std::string& name) const {
  if (name.empty() || name.find('.') != std::string::npos)
    throw std::invalid_argument("Module: name '" + name + "' must be non-empty and contain no '.'");
  for (const auto& [n, t] : parameters_)
    if (n == name) throw std::invalid_argument("Module: a parameter '" + name + "' already exists");
  for (const auto& [n, t] : buffers_)
    if (n == name) throw std::invalid_argument("Module: a buffer '" + name + "' already exists");
  for (const auto& [n, m] : children_)
    if (n == name) throw std::invalid_argument("Module: a submodule '" + name + "' already exists");
}

Tensor Module::register_parameter(const std::string& name, Tensor t, bool requires_grad) {
  check_new_name(name);
  t.set_requires_grad(requires_grad);
  if (t.name().empty()) t.set_name(name);
  parameters_.emplace_back(name, t);
  return t;
}

Tensor Module::register_buffer(const std::string& name, Tensor t) {
  check_new_name(name);
  t.set_requires_grad(false);
  if (t.name().empty()) t.set_name(name);
  buffers_.emplace_back(name, t);
  return t;
}

std::string Module::type_name() const {
  const char* mangled = typeid(*this).name();
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> name(abi::__cxa_demangle(mangled, nullptr, nullptr, &status),
                                                   &std::free);
  return status == 0 ? name.get() : mangled;
}

// The path from this module down to `target` ("" for this module itself,
// "b.c" for a grandchild), or nothing when target is not in this tree.
std::optional<std::string> Module::path_to(const Module* target) const {
  if (this == target) return "";
  for (const auto& [name, child] : children_)
    if (std::optional<std::string> below = child->path_to(target))
      return below->empty() ? name : name + "." + *below;
  return std::nullopt;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  check_new_name(name);
  if (!module) throw std::invalid_argument("Module: submodule '" + name + "' is null");
  // The module's tree has no cycle (every registration checks this), so the search ends.
  if (const std::optional<std::string> path = module->path_to(this))
    throw std::invalid_argument(
        path->empty() ? "Module: a " + type_name() + " cannot be registered inside itself (as '" + name + "')"
                      : "Module: registering a " + module->type_name() + " as '" + name + "' inside a " +
                            type_name() + " would make a cycle: the " + module->type_name() + " holds that " +
                            type_name() + " (as '" + *path + "')");
  // Parameters carry their path for listings and errors ("fc1.weight"); a
  // name the user set (one that is not the path inside the child) stays.
  for (auto& [path, t] : module->all_named_state())
    if (t.name() == path) t.set_name(name + "." + path);
  children_.emplace_back(name, std::move(module));
}

Tensor Module::forward(const Tensor&) const {
  throw std::logic_error("Module::forward: this module does not override Tensor forward(const Tensor&) const; "
                         "a module of your own defines it, others have forward()s for their own inputs");
}

std::shared_ptr<Module> Module::clone() const {
  throw std::logic_error("Module::clone: this module does not override clone(); a module of your own returns "
                         "copy_into(std::make_shared<YourModule>(...)) from it");
}

std::vector<std::pair<std::string, Tensor>> Module::all_named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out = parameters_;
  for (const auto& [prefix, child] : children_)
    for (auto& [name, t] : child->all_named_parameters()) out.emplace_back(prefix + "." + name, t);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::all_named_buffers() const {
  std::vector<std::pair<std::string, Tensor>> out = buffers_;
  for (const auto& [prefix, child] : children_)
    for (auto& [name, t] : child->all_named_buffers()) out.emplace_back(prefix + "." + name, t);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::all_named_state() const {
  std::vector<std::pair<std::string, Tensor>> out = all_named_parameters();
  for (auto& named : all_named_buffers()) out.push_back(std::move(named));
  return out;
}

// Each tensor once, under its first name.
static std::vector<std::pair<std::string, Tensor>> first_names(std::vector<std::pair<std::string, Tensor>> all) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& named : all) {  // not [name, t]: clang 14 cannot capture a binding
    const Tensor& t = named.second;
    const bool seen = std::any_of(out.begin(), out.end(), [&](const auto& p) { return p.second.is_same(t); });
    if (!seen) out.push_back(std::move(named));
  }
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  return first_names(all_named_parameters());
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  return first_names(all_named_buffers());
}

std::vector<Tensor> Module::buffers() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_buffers()) out.push_back(t);
  return out;
}

void Module::check_clone_class(const Module& copy) const {
  if (typeid(copy) != typeid(*this))
    throw std::logic_error("clone: this " + type_name() + "'s clone() makes a " + copy.type_name() +
                           " (a subclass that does not override clone() inherits its base's): give " +
                           type_name() + " a clone() of its own, returning copy_into(std::make_shared<" +
                           type_name() + ">(...))");
}

// Two names that name one tensor in `a` and two in `b`, or the other way
// round (`tied_in_a` says which), for clone()'s message.
struct TieDifference {
  std::string first, second;
  bool tied_in_a;
};
static std::optional<TieDifference> tie_difference(const std::vector<std::pair<std::string, Tensor>>& a,
                                                   const std::vector<std::pair<std::string, Tensor>>& b) {
  const std::map<std::string, Tensor> in_b(b.begin(), b.end());
  for (std::size_t i = 0; i < a.size(); ++i)
    for (std::size_t j = i + 1; j < a.size(); ++j) {
      const bool tied_a = a[i].second.is_same(a[j].second);
      if (tied_a != in_b.at(a[i].first).is_same(in_b.at(a[j].first)))
        return TieDifference{a[i].first, a[j].first, tied_a};
    }
  return std::nullopt;
}

void Module::copy_state_to(Module& fresh) const {
  check_clone_class(fresh);
  fresh.load_state_dict(state_dict());  // checks that the names and shapes match
  // A tensor registered twice is one tensor in the copy too, as deepcopy keeps it.
  if (const auto d = tie_difference(all_named_parameters(), fresh.all_named_parameters()))
    throw std::logic_error("clone: in this " + type_name() + ", '" + d->first + "' and '" + d->second +
                           "' are " + (d->tied_in_a ? "one tensor" : "two tensors") +
                           ", but in the copy its clone() built " + (d->tied_in_a ? "two" : "one") +
                           ": build the copy with the same modules and tensors registered twice");
  std::map<std::string, bool> wants_grad;
  for (const auto& [name, t] : all_named_parameters()) wants_grad[name] = t.requires_grad();
  for (auto& [name, t] : fresh.all_named_parameters()) t.set_requires_grad(wants_grad.at(name));
  fresh.train(is_training());
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

void Module::zero_grad() {
  for (Tensor& t : parameters()) t.zero_grad();
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

StateDict Module::state_dict() const {
  StateDict out;
  for (const auto& [name, t] : all_named_state()) out.emplace(name, t.value());
  return out;
}

// "a, b, c" for an error message.
static std::string join(const std::vector<std::string>& items) {
  std::string s;
  for (const std::string& x : items) s += (s.empty() ? "" : ", ") + x;
  return s;
}

void Module::check_state_dict(const StateDict& state, bool strict) const {
  const auto params = all_named_state();
  std::set<std::string> known;
  std::vector<std::string> missing, unexpected, wrong_shape;
  for (const auto& [name, t] : params) {
    known.insert(name);
    auto it = state.find(name);
    if (it == state.end()) {
      missing.push_back(name);
      continue;
    }
    const Shape got(it->second.shape().begin(), it->second.shape().end());
    if (got != t.shape())
      wrong_shape.push_back(name + " (expected " + shape_str(t.shape()) + ", got " + shape_str(got) + ")");
  }
  for (const auto& [name, value] : state)
    if (!known.count(name)) unexpected.push_back(name);
  if (!strict) {
    missing.clear();
    unexpected.clear();
  }
  if (!missing.empty() || !unexpected.empty() || !wrong_shape.empty()) {
    std::string msg = "load_state_dict: the state does not fit the module";
    if (!missing.empty()) msg += "; missing: " + join(missing);
    if (!unexpected.empty()) msg += "; unexpected: " + join(unexpected);
    if (!wrong_shape.empty()) msg += "; wrong shape: " + join(wrong_shape);
    throw std::invalid_argument(msg);
  }
}

void Module::load_state_dict(const StateDict& state, bool strict) {
  check_state_dict(state, strict);
  // Everything fits: only now touch the parameters and buffers.
  auto params = all_named_state();
  NoGradGuard no_grad;
  for (auto& [name, t] : params)
    if (auto it = state.find(name); it != state.end()) t.copy_(it->second);
}

void Module::save(const std::string& path) const {
  save_safetensors(path, state_dict());
}

void Module::load(const std::string& path) {
  load_state_dict(load_safetensors(path));
}

}  // namespace tg::nn
