// Causal self-attention and the transformer block of a GPT, written out op by
// op from core ops (matmul, permute, masked_fill, softmax, gelu, layer_norm).
//
//   tg::nn::TransformerBlock block(64, 4, 0.1f, gen);   // embed_dim C = 64, 4 heads of 16
//   tg::Tensor y = block(x);                             // x [B, T, 64] -> y [B, T, 64]
//
// CausalSelfAttention: each position t of a sequence mixes in the values of
// positions s <= t, weighted by how well its query matches their keys:
//
//   q, k, v = query(x), key(x), value(x), split into H heads  each [B, H, T, d = C / H]
//   scores  = q k^T / sqrt(d), -inf where s > t               [B, H, T, T]
//   y       = softmax(scores) v, heads side by side, then proj [B, T, C]
//
// TransformerBlock (GPT-2's pre-LayerNorm block):
//
//   x = x + attn(ln1(x))
//   x = x + fc2(gelu(fc1(ln2(x))))     fc1: C -> 4C, fc2: 4C -> C
//
// Dropout (probability `dropout`, while training) hits the attention weights,
// the attention's output and the MLP's output, as in nanoGPT; its masks are
// drawn from the generator given to the constructor (a handle: the module
// shares its state), which also draws the initial weights. The layers start as
// PyTorch's do (Linear: uniform in +-1/sqrt(in), LayerNorm: ones and zeros).
//
// Parameter names, as a PyTorch module with the same members gives them:
//   attn.query.weight [C, C]  attn.query.bias  attn.key.*  attn.value.*  attn.proj.*
//   ln1.weight ln1.bias  ln2.weight ln2.bias  fc1.weight [4C, C] fc1.bias  fc2.weight [C, 4C] fc2.bias
// (examples/names_gpt.cpp builds a GPT of these blocks;
// tests/tools/names_gpt_reference.py is the same in PyTorch.)
#pragma once

#include <cstddef>
#include <memory>

#include "../core/factories.hpp"
#include "layer_norm.hpp"
#include "linear.hpp"
#include "module.hpp"

namespace tg::nn {

class TransformerBlock;

class CausalSelfAttention : public Module {
 public:
  // Throws std::invalid_argument unless num_heads > 0 divides embed_dim and
  // 0 <= dropout < 1.
  CausalSelfAttention(std::size_t embed_dim, std::size_t num_heads, float dropout = 0.0f,
                      Generator& gen = default_generator());

  Tensor forward(const Tensor& x) const override;  // [B, T, C] -> [B, T, C]
  std::shared_ptr<Module> clone() const override;

  std::size_t embed_dim() const { return proj->in_features(); }
  std::size_t num_heads() const { return num_heads_; }
  std::size_t head_dim() const { return embed_dim() / num_heads_; }
  float dropout() const { return dropout_; }

  // C -> C each: every head's query, key and value side by side (head h is
  // columns h d .. (h + 1) d - 1), and the projection of the heads' outputs.
  std::shared_ptr<Linear> query, key, value, proj;

 private:
  friend class TransformerBlock;  // its clone() hands its generator on
  std::size_t num_heads_;
  float dropout_;
  Generator gen_;  // dropout masks
};

class TransformerBlock : public Module {
 public:
  // The same checks as CausalSelfAttention.
  TransformerBlock(std::size_t embed_dim, std::size_t num_heads, float dropout = 0.0f,
                   Generator& gen = default_generator());

  Tensor forward(const Tensor& x) const override;  // [B, T, C] -> [B, T, C]
  std::shared_ptr<Module> clone() const override;

  std::shared_ptr<LayerNorm> ln1;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<LayerNorm> ln2;
  std::shared_ptr<Linear> fc1;  // C -> 4C
  std::shared_ptr<Linear> fc2;  // 4C -> C

 private:
  Generator gen_;  // dropout masks
};

}  // namespace tg::nn
