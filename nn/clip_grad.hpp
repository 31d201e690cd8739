// clip_grad_norm_, as torch.nn.utils.clip_grad_norm_ (PyTorch 1.13).
#pragma once

#include <limits>
#include <vector>

#include "../core/tensor.hpp"

namespace tg::nn::utils {

// The norm of all gradients of `params` taken together, as if concatenated
// into one vector (norm_type: p > 0, or infinity for the largest |value|).
// When it exceeds max_norm, every gradient is scaled in place by
// max_norm / (total + 1e-6). Dense and SparseRows gradients mix freely (a
// SparseRows gradient is coalesced, so its values are exactly its non-zero
// rows); parameters without a gradient are skipped. Returns the total norm
// from before clipping: what PyTorch 1.13 gives for the same gradients made
// dense. With a sparse gradient PyTorch 1.13 itself differs: it leaves the
// gradient unscaled (its in-place multiply hits a detached copy) and, with
// norm_type = inf, raises (sparse tensors have no max()).
float clip_grad_norm_(const std::vector<Tensor>& params, float max_norm, float norm_type = 2.0f);

}  // namespace tg::nn::utils
