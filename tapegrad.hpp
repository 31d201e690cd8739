// tapegrad: everything in one include.
#pragma once

#include "core/grad.hpp"
#include "core/gradcheck.hpp"
#include "core/ops.hpp"
#include "core/tape.hpp"
#include "core/tensor.hpp"
