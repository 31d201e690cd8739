// tapegrad: everything in one include, `#include <tapegrad/tapegrad.hpp>`.
//
// Inside the library every include is relative to the including file, so the
// headers find each other wherever they are installed, whatever the user's own
// include path holds (a project with its own core/tensor.hpp included).
#pragma once

#include "core/array.hpp"
#include "core/conv.hpp"
#include "core/csr_batch.hpp"
#include "core/debug.hpp"        // moved to inspect/debug.hpp: forwards there
#include "core/factories.hpp"
#include "core/grad.hpp"
#include "core/gradcheck.hpp"    // moved to inspect/gradcheck.hpp: forwards there
#include "core/kernels/parallel.hpp"
#include "core/ops.hpp"
#include "core/ops_nn.hpp"
#include "core/parallel.hpp"     // moved to core/kernels/parallel.hpp: forwards there
#include "core/safetensors.hpp"  // moved to io/safetensors.hpp: forwards there
#include "core/scoped.hpp"
#include "core/sparse_rows.hpp"
#include "core/tape.hpp"
#include "core/tensor.hpp"
#include "data/batch.hpp"
#include "data/corpus.hpp"
#include "data/csv.hpp"
#include "data/file_error.hpp"
#include "data/loader.hpp"
#include "data/metrics.hpp"
#include "data/split.hpp"
#include "data/tokenizer.hpp"
#include "data/tsv.hpp"
#include "data/vocabulary.hpp"
#include "inspect/debug.hpp"
#include "inspect/gradcheck.hpp"
#include "io/safetensors.hpp"
#include "nn/attention.hpp"
#include "nn/batch_norm.hpp"
#include "nn/clip_grad.hpp"
#include "nn/conv.hpp"
#include "nn/data_parallel.hpp"
#include "nn/embedding.hpp"
#include "nn/init.hpp"
#include "nn/layer_norm.hpp"
#include "nn/layers.hpp"
#include "nn/linear.hpp"
#include "nn/loss.hpp"
#include "nn/module.hpp"
#include "nn/rnn.hpp"
#include "nn/safetensors.hpp"  // deprecated tg::nn:: names of io/safetensors.hpp's
#include "nn/sequential.hpp"
#include "optim/adam.hpp"
#include "optim/checkpoint.hpp"
#include "optim/optimizer.hpp"
#include "optim/state.hpp"
#include "optim/scheduler.hpp"
#include "optim/sgd.hpp"
