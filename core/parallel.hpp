// Moved to core/kernels/parallel.hpp; this forwarding header keeps `#include <tapegrad/core/parallel.hpp>` working.
#pragma once

#include "kernels/parallel.hpp"
