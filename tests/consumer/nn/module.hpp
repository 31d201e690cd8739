// The consumer's own nn/module.hpp: the same path as one of tapegrad's headers.
#pragma once

#include <string>

#include "../core/tensor.hpp"

namespace app {

struct Module {
  std::string name;
  Tensor state;
};

}  // namespace app
