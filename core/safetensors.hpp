// Moved to io/safetensors.hpp; this forwarding header keeps `#include <tapegrad/core/safetensors.hpp>` working.
#pragma once

#include "../io/safetensors.hpp"
