#include "checkpoint.hpp"

#include <functional>
#include <sstream>
#include <stdexcept>
#include <vector>

#include <nlohmann/json.hpp>

#include "../core/read_json.hpp"

namespace tg {

namespace {

const char* const format_name = "tapegrad checkpoint 1";

// The entries of `from` whose names start with `prefix`, without it.
template <class Map>
Map with_prefix_removed(const Map& from, const std::string& prefix) {
  Map out;
  for (const auto& [key, value] : from)
    if (key.rfind(prefix, 0) == 0) out.emplace(key.substr(prefix.size()), value);
  return out;
}

template <class Map>
void add_with_prefix(Map& to, const Map& from, const std::string& prefix) {
  for (const auto& [key, value] : from) to.emplace(prefix + key, value);
}

}  // namespace

void save_checkpoint(const std::string& path, const Checkpoint& c) {
  StateDict tensors;
  Metadata meta{{"format", format_name}};
  nlohmann::json contents = nlohmann::json::array();
  if (c.model) {
    add_with_prefix(tensors, c.model->state_dict(), "model.");
    contents.push_back("model");
  }
  if (c.optimizer) {
    const optim::StateDict s = c.optimizer->state_dict();
    add_with_prefix(tensors, s.tensors, "optimizer.");
    add_with_prefix(meta, s.metadata, "optimizer.");
    contents.push_back("optimizer");
  }
  if (c.scheduler) {
    add_with_prefix(meta, c.scheduler->state_dict(), "scheduler.");
    contents.push_back("scheduler");
  }
  if (c.generator) {
    meta["generator"] = c.generator->state();
    contents.push_back("generator");
  }
  add_with_prefix(tensors, c.tensors, "user.");
  add_with_prefix(meta, c.metadata, "user.");
  meta["contents"] = contents.dump();
  save_safetensors(path, tensors, meta);
}

void load_checkpoint(const std::string& path, Checkpoint& c) {
  // Reading checks the file itself (SafetensorsError); what follows checks that
  // its content fits what we load it into.
  StateDict tensors = load_safetensors(path);
  const Metadata meta = load_safetensors_metadata(path);
  auto fail = [&](const std::string& reason) {
    throw std::invalid_argument("load_checkpoint: " + path + ": " + reason);
  };
  const auto format = meta.find("format");
  if (format == meta.end() || format->second != format_name)
    fail("not a tapegrad checkpoint (its metadata has no \"format\": \"" + std::string(format_name) + "\")");
  const auto contents_text = meta.find("contents");
  if (contents_text == meta.end()) fail("\"contents\" is missing");
  std::string why;
  const nlohmann::json contents = detail::parse_json(contents_text->second, why);
  if (contents.is_discarded()) fail("\"contents\" " + why);
  if (!contents.is_array()) fail("\"contents\" is not a JSON list");
  auto holds = [&](const std::string& part) {
    for (const auto& x : contents)
      if (x == part) return true;
    return false;
  };
  auto require = [&](const char* part) {
    if (!holds(part))
      fail(std::string("the checkpoint holds no ") + part + " (it holds " + contents.dump() + ")");
  };

  // Check every part that was asked for, keeping what installs it.
  std::vector<std::function<void()>> installs;
  try {
    if (c.model) {
      require("model");
      StateDict state = with_prefix_removed(tensors, "model.");
      c.model->check_state_dict(state);
      installs.push_back([model = c.model, state = std::move(state)] { model->load_state_dict(state); });
    }
    if (c.optimizer) {
      require("optimizer");
      const optim::StateDict state{with_prefix_removed(tensors, "optimizer."),
                                   with_prefix_removed(meta, "optimizer.")};
      installs.push_back(c.optimizer->prepare_load_state_dict(state));
    }
    if (c.scheduler) {
      require("scheduler");
      installs.push_back(c.scheduler->prepare_load_state_dict(with_prefix_removed(meta, "scheduler.")));
    }
    if (c.generator) {
      require("generator");
      const auto found = meta.find("generator");
      const std::string text = found == meta.end() ? "" : found->second;
      try {
        Generator().set_state(text);
      } catch (const std::invalid_argument&) {
        fail("\"generator\" is not a state this library's std::mt19937 wrote");
      }
      // Into the generator's shared state: every holder of it (a Dropout, a
      // BatchSampler) continues from there.
      installs.push_back([target = c.generator, text] { target->set_state(text); });
    }
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    if (what.rfind("load_checkpoint: ", 0) == 0) throw;
    fail(what);
  }
  Metadata user_meta = with_prefix_removed(meta, "user.");
  StateDict user_tensors = with_prefix_removed(tensors, "user.");

  // Everything fits: only now change anything.
  for (const auto& install : installs) install();
  c.metadata = std::move(user_meta);
  c.tensors = std::move(user_tensors);
}

}  // namespace tg
