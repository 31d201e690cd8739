// Optimizer state entries: how each type of field is saved, loaded and checked.
#include "state.hpp"

#include <algorithm>
#include <charconv>

#include "rows.hpp"

namespace tg::optim {

static std::string key_of(std::size_t i, const std::string& name) {
  return "state." + std::to_string(i) + "." + name;
}

void StateFormat::save_entry(StateDict& out, std::size_t i, const std::string& name, int64_t count) {
  out.metadata[key_of(i, name)] = std::to_string(count);
}

void StateFormat::save_entry(StateDict& out, std::size_t i, const std::string& name, const Array& values) {
  out.tensors[key_of(i, name)] = values;
}

void StateFormat::save_entry(StateDict& out, std::size_t i, const std::string& name,
                             const std::vector<uint8_t>& flags) {
  Array a = xt::empty<float>({flags.size()});  // the flags as 0.0 / 1.0
  std::copy(flags.begin(), flags.end(), a.begin());
  out.tensors[key_of(i, name)] = std::move(a);
}

bool StateFormat::has_entry(const StateDict& in, std::size_t i, const std::string& name) {
  const std::string key = key_of(i, name);
  return in.metadata.count(key) > 0 || in.tensors.count(key) > 0;
}

void StateFormat::load_entry(const Optimizer& o, const StateDict& in, std::size_t i, const std::string& name,
                             int64_t& count, Read& read) {
  const std::string key = key_of(i, name);
  const auto it = in.metadata.find(key);
  if (it == in.metadata.end()) o.fail_load("missing metadata entry '" + key + "'");
  const std::string& text = it->second;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), count);
  if (ec != std::errc() || end != text.data() + text.size() || count < 1)
    o.fail_load("'" + key + "' is \"" + text + "\", not a step count >= 1");
  read.metadata.insert(key);
}

const Array& StateFormat::tensor_entry(const Optimizer& o, const StateDict& in, const std::string& key,
                                       Read& read) {
  const auto it = in.tensors.find(key);
  if (it == in.tensors.end()) o.fail_load("missing tensor '" + key + "'");
  read.tensors.insert(key);
  return it->second;
}

void StateFormat::load_entry(const Optimizer& o, const StateDict& in, std::size_t i, const std::string& name,
                             Array& values, Read& read) {
  const std::string key = key_of(i, name);
  const Array& saved = tensor_entry(o, in, key, read);
  const Shape shape = o.params_[i].shape();
  if (shape_of(saved) != shape)
    o.fail_load("tensor '" + key + "' has shape " + shape_str(saved.shape()) + " but parameter " +
                std::to_string(i) + " has shape " + shape_str(shape) +
                (o.params_[i].name().empty() ? "" : " (" + o.params_[i].name() + ")"));
  values = zero_state(shape);
  std::copy(saved.begin(), saved.end(), values.begin());
}

void StateFormat::load_entry(const Optimizer& o, const StateDict& in, std::size_t i, const std::string& name,
                             std::vector<uint8_t>& flags, Read& read) {
  const std::string key = key_of(i, name);
  const Array& saved = tensor_entry(o, in, key, read);
  const std::size_t rows = num_rows(o.params_[i].shape());
  if (shape_of(saved) != Shape{rows})
    o.fail_load("tensor '" + key + "' has shape " + shape_str(saved.shape()) + ", not [" +
                std::to_string(rows) + "]: one flag per row of " + o.describe(i));
  flags.clear();
  for (const float flag : saved) {
    if (flag != 0.0f && flag != 1.0f)
      o.fail_load("tensor '" + key + "' holds " + std::to_string(flag) + " at row " +
                  std::to_string(flags.size()) + "; its flags are 0 or 1");
    flags.push_back(static_cast<uint8_t>(flag));
  }
}

void StateFormat::check_all_read(const Optimizer& o, const StateDict& in, const Read& read) {
  const std::string of = " for " + std::to_string(o.params_.size()) + " parameters";
  for (const auto& [key, value] : in.metadata)
    if (key.rfind("state.", 0) == 0 && !read.metadata.count(key))
      o.fail_load("unexpected metadata entry '" + key + "'" + of);
  for (const auto& [key, value] : in.tensors)
    if (!read.tensors.count(key)) o.fail_load("unexpected tensor '" + key + "'" + of);
}

// A state made for one shape, a parameter that now has another: the update would
// run off the end of one of them (PyTorch: "The size of tensor a (3) must match ...").
void StateFormat::check_entry(const Optimizer& o, const std::string& op, std::size_t i,
                              const std::string& name, const Array& values) {
  const Shape shape = o.params_[i].shape();
  if (shape_of(values) != shape)
    throw std::invalid_argument(op + ": " + o.describe(i) + " has shape " + shape_str(shape) +
                                " but its state '" + name + "' has shape " + shape_str(values.shape()) +
                                ": the parameter changed shape after the optimizer made its state");
}

void StateFormat::check_entry(const Optimizer& o, const std::string& op, std::size_t i,
                              const std::string& name, const std::vector<uint8_t>& flags) {
  const Shape shape = o.params_[i].shape();
  if (flags.size() != num_rows(shape))
    throw std::invalid_argument(op + ": " + o.describe(i) + " has shape " + shape_str(shape) +
                                " but its state '" + name + "' has " + std::to_string(flags.size()) +
                                " rows");
}

}  // namespace tg::optim
