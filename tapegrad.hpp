// tapegrad: everything in one include, `#include <tapegrad/tapegrad.hpp>`.
//
// Inside the library every include is relative to the including file, so the
// headers find each other wherever they are installed, whatever the user's own
// include path holds (a project with its own core/tensor.hpp included).
#pragma once

#include "core/debug.hpp"
#include "core/grad.hpp"
#include "core/gradcheck.hpp"
#include "core/ops.hpp"
#include "core/table_memory.hpp"
#include "core/tape.hpp"
#include "core/tensor.hpp"
#include "data/batch.hpp"
#include "data/csv.hpp"
#include "data/file_error.hpp"
#include "data/loader.hpp"
#include "data/metrics.hpp"
#include "data/split.hpp"
#include "data/tokenizer.hpp"
#include "data/tsv.hpp"
#include "data/vocabulary.hpp"
#include "nn/clip_grad.hpp"
#include "nn/embedding.hpp"
#include "nn/init.hpp"
#include "nn/layer_norm.hpp"
#include "nn/layers.hpp"
#include "nn/linear.hpp"
#include "nn/loss.hpp"
#include "nn/module.hpp"
#include "nn/safetensors.hpp"
#include "nn/sequential.hpp"
#include "optim/adam.hpp"
#include "optim/checkpoint.hpp"
#include "optim/optimizer.hpp"
#include "optim/scheduler.hpp"
#include "optim/sgd.hpp"
