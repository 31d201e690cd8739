// tapegrad: everything in one include.
#pragma once

#include "core/debug.hpp"
#include "core/grad.hpp"
#include "core/gradcheck.hpp"
#include "core/ops.hpp"
#include "core/tape.hpp"
#include "core/tensor.hpp"
#include "nn/clip_grad.hpp"
#include "nn/embedding.hpp"
#include "nn/init.hpp"
#include "nn/linear.hpp"
#include "nn/loss.hpp"
#include "nn/module.hpp"
#include "nn/safetensors.hpp"
#include "optim/adam.hpp"
#include "optim/optimizer.hpp"
#include "optim/sgd.hpp"
