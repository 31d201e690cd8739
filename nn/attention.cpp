// Causal self-attention and the transformer block.
#include "attention.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "../core/ops.hpp"

namespace tg::nn {

static void check_sizes(const char* module, std::size_t embed_dim, std::size_t num_heads, float dropout) {
  if (num_heads == 0 || embed_dim % num_heads != 0)
    throw std::invalid_argument(std::string(module) + ": embed_dim " + std::to_string(embed_dim) +
                                " must split into num_heads " + std::to_string(num_heads) + " equal heads");
  if (!(dropout >= 0.0f && dropout < 1.0f))
    throw std::invalid_argument(std::string(module) + ": dropout must be in [0, 1); got " +
                                std::to_string(dropout));
}

CausalSelfAttention::CausalSelfAttention(std::size_t embed_dim, std::size_t num_heads, float dropout,
                                         Generator& gen)
    : num_heads_(num_heads), dropout_(dropout), gen_(gen) {
  check_sizes("CausalSelfAttention", embed_dim, num_heads, dropout);
  query = register_module("query", Linear(embed_dim, embed_dim, true, gen));
  key = register_module("key", Linear(embed_dim, embed_dim, true, gen));
  value = register_module("value", Linear(embed_dim, embed_dim, true, gen));
  proj = register_module("proj", Linear(embed_dim, embed_dim, true, gen));
}

std::shared_ptr<Module> CausalSelfAttention::clone() const {
  Generator scratch;  // draws the fresh weights, which copy_into overwrites; gen_ is left as it is
  auto fresh = std::make_shared<CausalSelfAttention>(embed_dim(), num_heads_, dropout_, scratch);
  fresh->gen_ = gen_;  // the same dropout generator, as Dropout::clone
  return copy_into(fresh);
}

Tensor CausalSelfAttention::forward(const Tensor& x) const {
  const int64_t C = static_cast<int64_t>(embed_dim()), H = static_cast<int64_t>(num_heads_), d = C / H;
  if (x.dim() != 3 || x.size(2) != C)
    throw std::invalid_argument("CausalSelfAttention: input must be [B, T, " + std::to_string(C) +
                                "]; got shape " + shape_str(x.shape()));
  const int64_t B = x.size(0), T = x.size(1);
  Generator gen = gen_;  // a handle: draws move gen_ too

  // Each position's query, key and value, every head's side by side, split into
  // the heads: [B, T, C] -> [B, T, H, d] -> [B, H, T, d].
  auto heads = [&](const Linear& layer) {
    return tg::permute(tg::reshape(layer(x), {B, T, H, d}), {0, 2, 1, 3});
  };
  Tensor q = heads(*query), k = heads(*key), v = heads(*value);

  // How well query t matches key s, per head: [B, H, T, d] x [B, H, d, T] -> [B, H, T, T].
  Tensor scores = tg::matmul(q, tg::transpose(k, -2, -1)) * (1.0f / std::sqrt(static_cast<float>(d)));
  // Causal: t may not look at s > t. Those scores become -inf, so softmax gives them weight 0.
  const Tensor future = tg::triu(tg::ones({T, T}), 1);  // 1 above the diagonal
  scores = tg::masked_fill(scores, future, -std::numeric_limits<float>::infinity());
  Tensor weights = tg::dropout(tg::softmax(scores, -1), dropout_, is_training(), gen);

  // Each position's weighted sum of values, per head: [B, H, T, T] x [B, H, T, d] -> [B, H, T, d];
  // then the heads side by side again: [B, T, H, d] -> [B, T, C].
  Tensor y = tg::reshape(tg::permute(tg::matmul(weights, v), {0, 2, 1, 3}), {B, T, C});
  return tg::dropout((*proj)(y), dropout_, is_training(), gen);
}

TransformerBlock::TransformerBlock(std::size_t embed_dim, std::size_t num_heads, float dropout,
                                   Generator& gen)
    : gen_(gen) {
  check_sizes("TransformerBlock", embed_dim, num_heads, dropout);
  ln1 = register_module("ln1", LayerNorm(embed_dim));
  attn = register_module("attn", CausalSelfAttention(embed_dim, num_heads, dropout, gen));
  ln2 = register_module("ln2", LayerNorm(embed_dim));
  fc1 = register_module("fc1", Linear(embed_dim, 4 * embed_dim, true, gen));
  fc2 = register_module("fc2", Linear(4 * embed_dim, embed_dim, true, gen));
}

std::shared_ptr<Module> TransformerBlock::clone() const {
  Generator scratch;  // as in CausalSelfAttention::clone
  auto fresh =
      std::make_shared<TransformerBlock>(attn->embed_dim(), attn->num_heads(), attn->dropout(), scratch);
  fresh->gen_ = gen_;
  fresh->attn->gen_ = attn->gen_;
  return copy_into(fresh);
}

Tensor TransformerBlock::forward(const Tensor& x) const {
  Generator gen = gen_;
  // Each part reads a normalised copy of the stream and adds its result to it (a residual).
  Tensor h = x + (*attn)((*ln1)(x));
  Tensor mlp = (*fc2)(tg::gelu((*fc1)((*ln2)(h))));  // position by position
  return h + tg::dropout(mlp, attn->dropout(), is_training(), gen);
}

}  // namespace tg::nn
