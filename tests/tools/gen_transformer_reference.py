#!/usr/bin/python3
"""Writes tests/data/transformer_reference.json: PyTorch's values and gradients of
the ops a transformer needs (batched matmul, transpose, permute, softmax and
log_softmax along any dim, masked_fill, tril, triu, gelu) and of
CausalSelfAttention, TransformerBlock and a tiny GPT (the classes of
tests/tools/names_gpt_reference.py), for tests/test_transformer.cpp.

Run with Debian's python3-torch:  /usr/bin/python3 tests/tools/gen_transformer_reference.py

Op cases: inputs drawn here and stored, the loss sum(out * w) with a stored
random w (as gen_core_reference.py). Module cases: the state dict is stored by
name and loaded by the C++ side, so the two random generators never need to
agree. Before writing, the attention of names_gpt_reference.py is checked
against PyTorch's own nn.MultiheadAttention with a causal mask.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

from names_gpt_reference import GPT, CausalSelfAttention, TransformerBlock
from reference import arr, module_case, write

torch.manual_seed(97531)


def case(fn, inputs, fixed=()):
    """fn on copies of inputs that require grad (and on `fixed` ones that do not,
    such as masks); the loss is sum(out * w)."""
    xs = [x.clone().requires_grad_(True) for x in inputs]
    out = fn(*xs, *fixed)
    w = torch.randn(out.shape)
    (out * w).sum().backward()
    return {"inputs": [arr(x) for x in xs], "fixed": [arr(f.float()) for f in fixed], "w": arr(w),
            "out": arr(out), "grads": [arr(x.grad) for x in xs]}


randn = torch.randn
ref = {}
# matmul: batches of matrices, broadcast batch dims, a matrix times a batch.
ref["matmul_batched"] = case(torch.matmul, [randn(2, 3, 4), randn(2, 4, 5)])
ref["matmul_broadcast_batch"] = case(torch.matmul, [randn(2, 1, 3, 4), randn(3, 4, 2)])
ref["matmul_matrix_times_batch"] = case(torch.matmul, [randn(3, 4), randn(2, 4, 5)])
ref["matmul_batch_of_one"] = case(torch.matmul, [randn(1, 3, 4), randn(5, 4, 2)])
ref["matmul_scores"] = case(lambda q, k: torch.matmul(q, k.transpose(-2, -1)), [randn(2, 2, 5, 3), randn(2, 2, 5, 3)])
# transpose and permute: any two dims, any order.
ref["transpose_0_2"] = case(lambda x: x.transpose(0, 2), [randn(2, 3, 4)])
ref["transpose_last_two"] = case(lambda x: x.transpose(-2, -1), [randn(2, 3, 4, 5)])
ref["permute_heads"] = case(lambda x: x.reshape(2, 3, 2, 4).permute(0, 2, 1, 3), [randn(2, 3, 8)])
ref["permute_3d"] = case(lambda x: x.permute(2, 0, 1), [randn(2, 3, 4)])
ref["permute_back_and_merge"] = case(lambda x: x.permute(0, 2, 1, 3).reshape(2, 3, 8), [randn(2, 2, 3, 4)])
# softmax and log_softmax along every kind of dim.
ref["softmax_dim0"] = case(lambda x: torch.softmax(x, 0), [randn(4, 5) * 2])
ref["softmax_middle"] = case(lambda x: torch.softmax(x, 1), [randn(2, 4, 3) * 2])
ref["log_softmax_middle"] = case(lambda x: torch.log_softmax(x, -2), [randn(2, 4, 3) * 2])
ref["softmax_last_4d"] = case(lambda x: torch.softmax(x, -1), [randn(2, 2, 3, 5) * 2])
ref["log_softmax_first_3d"] = case(lambda x: torch.log_softmax(x, 0), [randn(3, 2, 4) * 2])
# masked_fill, with a mask under the input and one that widens it; the causal softmax.
lower = torch.tril(torch.ones(3, 4))
ref["masked_fill"] = case(lambda x, m: x.masked_fill(m.bool(), -1.5), [randn(2, 3, 4)], [lower])
ref["masked_fill_broadcast"] = case(lambda x, m: x.masked_fill(m.bool(), 2.0), [randn(4)], [lower])
ref["causal_softmax"] = case(lambda x, m: torch.softmax(x.masked_fill(m.bool(), float("-inf")), -1),
                             [randn(2, 2, 4, 4)], [torch.triu(torch.ones(4, 4), 1)])
# tril and triu on and off the main diagonal, of a batch and of a wide and a tall matrix.
for name, fn in [("tril", torch.tril), ("triu", torch.triu)]:
    for k in [0, 1, -1, 2]:
        ref[f"{name}_{k}"] = case(lambda x, fn=fn, k=k: fn(x, k), [randn(2, 3, 4)])
    ref[f"{name}_tall"] = case(lambda x, fn=fn: fn(x, -1), [randn(5, 3)])
# gelu, both forms, over a wide range (with exact zeros) and near 0.
wide = torch.cat([torch.linspace(-8, 8, 33), torch.zeros(2), randn(21) * 3]).reshape(8, 7)
ref["gelu_none"] = case(F.gelu, [wide])
ref["gelu_tanh"] = case(lambda x: F.gelu(x, approximate="tanh"), [wide])
ref["gelu_none_small"] = case(F.gelu, [randn(4, 5) * 1e-3])
ref["gelu_tanh_small"] = case(lambda x: F.gelu(x, approximate="tanh"), [randn(4, 5) * 1e-3])


# ---- the attention against PyTorch's nn.MultiheadAttention: same weights, a causal mask.
def check_against_multihead(embed, heads):
    ours = CausalSelfAttention(embed, heads)
    theirs = nn.MultiheadAttention(embed, heads, batch_first=True)
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([ours.query.weight, ours.key.weight, ours.value.weight]))
        theirs.in_proj_bias.copy_(torch.cat([ours.query.bias, ours.key.bias, ours.value.bias]))
        theirs.out_proj.weight.copy_(ours.proj.weight)
        theirs.out_proj.bias.copy_(ours.proj.bias)
    x = randn(3, 6, embed)
    causal = torch.triu(torch.ones(6, 6, dtype=torch.bool), 1)
    want, _ = theirs(x, x, x, attn_mask=causal, need_weights=False)
    got = ours(x)
    assert torch.allclose(got, want, atol=1e-6), (got - want).abs().max()


check_against_multihead(16, 4)
check_against_multihead(12, 1)


# ---- modules: state dicts by name, outputs and gradients.
ref["attention"] = module_case(CausalSelfAttention(8, 2), randn(2, 5, 8))
ref["attention_one_head"] = module_case(CausalSelfAttention(6, 1), randn(3, 4, 6))
ref["block"] = module_case(TransformerBlock(8, 2), randn(2, 6, 8))
gpt = GPT(vocab=7, context=6, embed_dim=8, num_heads=2, layers=2)
ref["gpt"] = module_case(gpt, torch.randint(0, 7, (3, 5)), target=torch.randint(0, 7, (3, 5)))

write("transformer_reference", ref)
