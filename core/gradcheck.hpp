// Moved to inspect/gradcheck.hpp; this forwarding header keeps `#include <tapegrad/core/gradcheck.hpp>` working.
#pragma once

#include "../inspect/gradcheck.hpp"
