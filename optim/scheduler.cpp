#include "scheduler.hpp"

#include <charconv>
#include <cmath>
#include <numbers>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "../core/read_json.hpp"

namespace tg::optim {

using json = nlohmann::json;

static std::string number_text(double x) {
  return json(x).dump();  // the shortest text that reads back to the same double
}

LRScheduler::LRScheduler(Optimizer& optimizer, std::string name)
    : optimizer_(&optimizer), name_(std::move(name)) {}

void LRScheduler::initial_step() {
  for (std::size_t g = 0; g < optimizer_->param_groups().size(); ++g) {
    if (!optimizer_->initial_lr(g)) optimizer_->set_initial_lr(g, optimizer_->lr(g));
    base_lrs_.push_back(*optimizer_->initial_lr(g));
  }
  step();
}

void LRScheduler::step() {
  ++last_epoch_;
  const std::vector<double> lrs = get_lr();
  // Only a group's lr set below eta_min by hand can lead a schedule below 0.
  for (std::size_t g = 0; g < lrs.size(); ++g)
    if (!(lrs[g] >= 0) || !std::isfinite(lrs[g])) {
      --last_epoch_;
      throw std::invalid_argument(name_ + ".step: the schedule gives param group " + std::to_string(g) +
                                  " a learning rate of " + number_text(lrs[g]) + " (its lr is now " +
                                  number_text(optimizer_->lr(g)) + ")");
    }
  for (std::size_t g = 0; g < lrs.size(); ++g) optimizer_->set_lr(g, lrs[g]);
  last_lr_ = lrs;
}

// ---------------------------------------------------------------- state

static std::string list_text(const std::vector<double>& xs) {
  return json(xs).dump();
}

Metadata LRScheduler::state_dict() const {
  Metadata out = settings();
  out["type"] = name_;
  out["last_epoch"] = std::to_string(last_epoch_);
  out["base_lrs"] = list_text(base_lrs_);
  out["last_lr"] = list_text(last_lr_);
  return out;
}

// Throws std::invalid_argument "<name>.load_state_dict: <reason>".
[[noreturn]] static void fail(const std::string& name, const std::string& reason) {
  throw std::invalid_argument(name + ".load_state_dict: " + reason);
}

static const std::string& entry(const Metadata& state, const std::string& key, const std::string& name) {
  const auto it = state.find(key);
  if (it == state.end()) fail(name, "no \"" + key + "\" entry");
  return it->second;
}

int64_t LRScheduler::integer_setting(const Metadata& state, const std::string& key) const {
  const std::string& text = entry(state, key, name_);
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size())
    fail(name_, "\"" + key + "\" is \"" + text + "\", not an integer");
  return value;
}

double LRScheduler::number_setting(const Metadata& state, const std::string& key) const {
  const std::string& text = entry(state, key, name_);
  std::string why;
  const json j = detail::parse_json(text, why);
  if (!j.is_number()) fail(name_, "\"" + key + "\" is \"" + detail::json_excerpt(text) + "\", not a number");
  return j.get<double>();
}

// A JSON list of `count` learning rates (finite, >= 0).
static std::vector<double> lr_list(const Metadata& state, const std::string& key, std::size_t count,
                                   const std::string& name) {
  const std::string& text = entry(state, key, name);
  std::string why;
  const json j = detail::parse_json(text, why);
  if (j.is_discarded()) fail(name, "\"" + key + "\" " + why);
  if (!j.is_array()) fail(name, "\"" + key + "\" is not a JSON list: " + detail::json_excerpt(text));
  if (j.size() != count)
    fail(name, "\"" + key + "\" has " + std::to_string(j.size()) + " entries for an optimizer with " +
                   std::to_string(count) + " param groups");
  std::vector<double> out;
  for (const json& x : j) {
    if (!x.is_number() || !(x.get<double>() >= 0) || !std::isfinite(x.get<double>()))
      fail(name, "\"" + key + "\" holds " + x.dump() + ", not a learning rate");
    out.push_back(x.get<double>());
  }
  return out;
}

void LRScheduler::load_state_dict(const Metadata& state) {
  prepare_load_state_dict(state)();
}

std::function<void()> LRScheduler::prepare_load_state_dict(const Metadata& state) {
  const std::string& type = entry(state, "type", name_);
  if (type != name_) fail(name_, "the state is " + type + "'s, this scheduler is " + name_);
  const Metadata own = settings();
  for (const auto& [key, value] : state)
    if (key != "type" && key != "last_epoch" && key != "base_lrs" && key != "last_lr" && !own.count(key))
      fail(name_, "unexpected entry '" + key + "'");
  const int64_t last_epoch = integer_setting(state, "last_epoch");
  if (last_epoch < 0) fail(name_, "last_epoch " + std::to_string(last_epoch) + " < 0");
  const std::size_t groups = optimizer_->param_groups().size();
  std::vector<double> base_lrs = lr_list(state, "base_lrs", groups, name_);
  std::vector<double> last_lr = lr_list(state, "last_lr", groups, name_);
  std::function<void()> install = prepare_settings(state);

  // Everything was checked: the returned function changes things.
  return [this, last_epoch, base_lrs, last_lr, install] {
    last_epoch_ = last_epoch;
    base_lrs_ = base_lrs;
    last_lr_ = last_lr;
    install();
  };
}

// ---------------------------------------------------------------- StepLR

static void check(const StepLROptions& o, const std::string& where) {
  if (o.step_size < 1)
    throw std::invalid_argument(where + ": step_size must be >= 1; got " + std::to_string(o.step_size));
  if (!(o.gamma >= 0) || !std::isfinite(o.gamma))
    throw std::invalid_argument(where + ": gamma must be >= 0; got " + number_text(o.gamma));
}

StepLR::StepLR(Optimizer& optimizer, StepLROptions options)
    : LRScheduler(optimizer, "StepLR"), options_(options) {
  check(options_, "StepLR");
  initial_step();
}

std::vector<double> StepLR::get_lr() const {
  std::vector<double> out;
  for (std::size_t g = 0; g < base_lrs_.size(); ++g) {
    const double lr = optimizer_->lr(g);
    out.push_back(last_epoch_ == 0 || last_epoch_ % options_.step_size != 0 ? lr : lr * options_.gamma);
  }
  return out;
}

Metadata StepLR::settings() const {
  return {{"step_size", std::to_string(options_.step_size)}, {"gamma", number_text(options_.gamma)}};
}

std::function<void()> StepLR::prepare_settings(const Metadata& state) {
  const StepLROptions o{integer_setting(state, "step_size"), number_setting(state, "gamma")};
  check(o, "StepLR.load_state_dict");
  return [this, o] { options_ = o; };
}

// ---------------------------------------------------------------- CosineAnnealingLR

static void check(const CosineAnnealingLROptions& o, const std::string& where) {
  if (o.T_max < 1)
    throw std::invalid_argument(where + ": T_max must be >= 1; got " + std::to_string(o.T_max));
  if (!(o.eta_min >= 0) || !std::isfinite(o.eta_min))
    throw std::invalid_argument(where + ": eta_min must be >= 0; got " + number_text(o.eta_min));
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, CosineAnnealingLROptions options)
    : LRScheduler(optimizer, "CosineAnnealingLR"), options_(options) {
  check(options_, "CosineAnnealingLR");
  initial_step();
}

// Python's a % b for b > 0: never negative.
static int64_t python_mod(int64_t a, int64_t b) {
  const int64_t r = a % b;
  return r < 0 ? r + b : r;
}

std::vector<double> CosineAnnealingLR::get_lr() const {
  // PyTorch 1.13's recurrence, term for term: it moves the current lr by the
  // ratio of consecutive closed-form values, except at the epochs after each
  // minimum, where that ratio would divide by zero and a fixed increment is added.
  const double pi = std::numbers::pi, eta_min = options_.eta_min;
  const double T_max = static_cast<double>(options_.T_max), epoch = static_cast<double>(last_epoch_);
  std::vector<double> out;
  for (std::size_t g = 0; g < base_lrs_.size(); ++g) {
    const double lr = optimizer_->lr(g), base_lr = base_lrs_[g];
    if (last_epoch_ == 0)
      out.push_back(lr);
    else if (python_mod(last_epoch_ - 1 - options_.T_max, 2 * options_.T_max) == 0)
      out.push_back(lr + (base_lr - eta_min) * (1 - std::cos(pi / T_max)) / 2);
    else
      out.push_back((1 + std::cos(pi * epoch / T_max)) / (1 + std::cos(pi * (epoch - 1) / T_max)) *
                        (lr - eta_min) +
                    eta_min);
  }
  return out;
}

Metadata CosineAnnealingLR::settings() const {
  return {{"T_max", std::to_string(options_.T_max)}, {"eta_min", number_text(options_.eta_min)}};
}

std::function<void()> CosineAnnealingLR::prepare_settings(const Metadata& state) {
  const CosineAnnealingLROptions o{integer_setting(state, "T_max"), number_setting(state, "eta_min")};
  check(o, "CosineAnnealingLR.load_state_dict");
  return [this, o] { options_ = o; };
}

// ---------------------------------------------------------------- LinearLR

static void check(const LinearLROptions& o, const std::string& where) {
  if (!(o.start_factor > 0 && o.start_factor <= 1))
    throw std::invalid_argument(where + ": start_factor must be in (0, 1]; got " +
                                number_text(o.start_factor));
  if (!(o.end_factor >= 0 && o.end_factor <= 1))
    throw std::invalid_argument(where + ": end_factor must be in [0, 1]; got " + number_text(o.end_factor));
  if (o.total_iters < 1)
    throw std::invalid_argument(where + ": total_iters must be >= 1; got " + std::to_string(o.total_iters));
}

LinearLR::LinearLR(Optimizer& optimizer, LinearLROptions options)
    : LRScheduler(optimizer, "LinearLR"), options_(options) {
  check(options_, "LinearLR");
  initial_step();
}

std::vector<double> LinearLR::get_lr() const {
  const double start = options_.start_factor, end = options_.end_factor;
  const double total = static_cast<double>(options_.total_iters);
  std::vector<double> out;
  for (std::size_t g = 0; g < base_lrs_.size(); ++g) {
    const double lr = optimizer_->lr(g);
    if (last_epoch_ == 0)
      out.push_back(lr * start);
    else if (last_epoch_ > options_.total_iters)
      out.push_back(lr);
    else  // the ratio of this epoch's factor to the last one's, as PyTorch writes it
      out.push_back(
          lr * (1. + (end - start) / (total * start + static_cast<double>(last_epoch_ - 1) * (end - start))));
  }
  return out;
}

Metadata LinearLR::settings() const {
  return {{"start_factor", number_text(options_.start_factor)},
          {"end_factor", number_text(options_.end_factor)},
          {"total_iters", std::to_string(options_.total_iters)}};
}

std::function<void()> LinearLR::prepare_settings(const Metadata& state) {
  const LinearLROptions o{number_setting(state, "start_factor"), number_setting(state, "end_factor"),
                          integer_setting(state, "total_iters")};
  check(o, "LinearLR.load_state_dict");
  return [this, o] { options_ = o; };
}

}  // namespace tg::optim
