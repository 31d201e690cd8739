// The consumer's own core/tensor.hpp: the same path as one of tapegrad's headers.
// tapegrad's headers must not pick this file up (nor this one theirs).
#pragma once

#include <vector>

namespace app {

struct Tensor {
  std::vector<double> values;
};

}  // namespace app
