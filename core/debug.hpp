// Moved to inspect/debug.hpp; this forwarding header keeps `#include <tapegrad/core/debug.hpp>` working.
#pragma once

#include "../inspect/debug.hpp"
