// The safetensors names under tg::nn, where they were until they moved to
// core/safetensors.hpp and the tg namespace (see CHANGELOG.md): programs
// written before the move still compile, and each use of an old name warns
// with the new one. They will be removed in a later release.
//
//   tg::nn::StateDict state = model.state_dict();   // warning: use tg::StateDict
//   tg::StateDict state = model.state_dict();       // the name to write now
#pragma once

#include <string>

#include "../core/safetensors.hpp"

namespace tg::nn {

using StateDict [[deprecated("use tg::StateDict")]] = tg::StateDict;
using Metadata [[deprecated("use tg::Metadata")]] = tg::Metadata;
using SafetensorsError [[deprecated("use tg::SafetensorsError")]] = tg::SafetensorsError;

// The functions are templates only so that, where tg's own are visible too
// (`using namespace tg; using namespace tg::nn;`), a call picks tg's (a
// function beats a template that is as good a match) instead of being ambiguous.
template <class = void>
[[deprecated("use tg::save_safetensors")]] void save_safetensors(const std::string& path,
                                                                 const tg::StateDict& tensors,
                                                                 const tg::Metadata& metadata = {}) {
  tg::save_safetensors(path, tensors, metadata);
}
template <class = void>
[[deprecated("use tg::load_safetensors")]] tg::StateDict load_safetensors(const std::string& path) {
  return tg::load_safetensors(path);
}
template <class = void>
[[deprecated("use tg::load_safetensors_metadata")]] tg::Metadata load_safetensors_metadata(
    const std::string& path) {
  return tg::load_safetensors_metadata(path);
}

}  // namespace tg::nn
