// Reading and writing safetensors files, the format of Hugging Face's
// `safetensors` package, so weights move between tapegrad and Python:
//
//   8 bytes   N, the header length, little-endian unsigned
//   N bytes   JSON: {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]},
//                    ..., "__metadata__": {"key": "value"}}   (metadata optional)
//   the rest  the tensors' raw little-endian bytes; offsets count from here
//
// Only float32 ("F32") tensors are supported, since that is the only dtype here.
//
// Writing is atomic: the file is written to "<path>.tmp.<pid>", checked, and
// renamed over `path`, so a failed save leaves an existing file as it was.
// Reading checks the whole header before reading any data: every error
// (truncated file, bad JSON or JSON nested deeper than 128 levels, overlapping
// or out-of-range offsets, wrong sizes, another dtype, duplicate names) throws
// SafetensorsError naming the file.
//
// nn::Module's save()/load(), the optimizers' save()/load() and checkpoints
// (optim/checkpoint.hpp) all write and read their state through these.
#pragma once

#include <map>
#include <stdexcept>
#include <string>

#include "array.hpp"

namespace tg {

// Tensor name ("fc.weight") -> values: what a file holds, and what
// nn::Module::state_dict() returns.
using StateDict = std::map<std::string, Array>;

struct SafetensorsError : std::runtime_error {
  // what(): "safetensors: <path>: <reason>"
  SafetensorsError(const std::string& path, const std::string& reason)
      : std::runtime_error("safetensors: " + path + ": " + reason), path(path) {}
  std::string path;
};

// The header's "__metadata__": strings by name.
using Metadata = std::map<std::string, std::string>;

// Throws SafetensorsError when the file cannot be written (the old file, if
// any, is kept) and std::invalid_argument for a tensor named "__metadata__".
void save_safetensors(const std::string& path, const StateDict& tensors, const Metadata& metadata = {});

StateDict load_safetensors(const std::string& path);
Metadata load_safetensors_metadata(const std::string& path);

}  // namespace tg
