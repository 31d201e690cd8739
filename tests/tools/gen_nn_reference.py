#!/usr/bin/python3
"""Writes tests/data/nn_reference.json: outputs and gradients of PyTorch's
nn.Linear, nn.Embedding, nn.EmbeddingBag and clip_grad_norm_, for
tests/test_nn.cpp to compare against.

Run with Debian's python3-torch:  /usr/bin/python3 tests/tools/gen_nn_reference.py
Every layer gets fixed weights drawn here and stored in the file, so the C++
side loads the same numbers (the two random generators never need to agree).
The loss is sum(out * w) with a fixed random w. Sparse gradients are stored
densified (.to_dense()).
"""
import math

import torch
import torch.nn.functional as F

from reference import arr, iarr, write

torch.manual_seed(4321)


def backward_with_weights(out):
    w = torch.randn(out.shape)
    (out * w).sum().backward()
    return w


def linear_case(x, out_features, bias=True):
    layer = torch.nn.Linear(x.shape[-1], out_features, bias=bias)
    x = x.clone().requires_grad_(True)
    c = {"weight": arr(layer.weight), "bias": arr(layer.bias) if bias else None, "input": arr(x)}
    out = layer(x)
    c["w"] = arr(backward_with_weights(out))
    c["out"] = arr(out)
    c["grad_weight"] = arr(layer.weight.grad)
    c["grad_bias"] = arr(layer.bias.grad) if bias else None
    c["grad_input"] = arr(x.grad)
    return c


def embedding_case(indices, num=6, dim=4, padding_idx=None, max_norm=None, norm_type=2.0, scale=1.0):
    weight = torch.randn(num, dim) * scale
    c = {"weight": arr(weight), "input": iarr(indices), "padding_idx": padding_idx,
         "max_norm": max_norm, "norm_type": norm_type}
    layer = torch.nn.Embedding.from_pretrained(weight.clone(), freeze=False, padding_idx=padding_idx,
                                               max_norm=max_norm, norm_type=norm_type, sparse=True)
    out = layer(indices)
    c["w"] = arr(backward_with_weights(out))
    c["out"] = arr(out)
    c["grad_weight"] = arr(layer.weight.grad)
    c["weight_after"] = arr(layer.weight)  # max_norm rescales rows in place
    return c


def bag_case(indices, offsets=None, mode="mean", include_last_offset=False, padding_idx=None,
             psw=False, max_norm=None, num=6, dim=3, scale=1.0):
    weight = torch.randn(num, dim) * scale
    psw_t = torch.rand(indices.shape).add_(0.5).requires_grad_(True) if psw else None
    c = {"weight": arr(weight), "input": iarr(indices),
         "offsets": iarr(offsets) if offsets is not None else None, "mode": mode,
         "include_last_offset": include_last_offset, "padding_idx": padding_idx,
         "per_sample_weights": arr(psw_t) if psw else None, "max_norm": max_norm}
    layer = torch.nn.EmbeddingBag.from_pretrained(
        weight.clone(), freeze=False, mode=mode, include_last_offset=include_last_offset,
        padding_idx=padding_idx, max_norm=max_norm, sparse=(mode != "max"))
    out = layer(indices, offsets, per_sample_weights=psw_t)
    c["w"] = arr(backward_with_weights(out))
    c["out"] = arr(out)
    c["grad_weight"] = arr(layer.weight.grad)
    c["grad_per_sample_weights"] = arr(psw_t.grad) if psw else None
    c["weight_after"] = arr(layer.weight)
    return c


def clip_case(max_norm, norm_type):
    """A sparse Embedding gradient and a dense Linear one, clipped together."""
    emb_weight, lin_weight, lin_bias = torch.randn(6, 3), torch.randn(2, 3), torch.randn(2)
    indices, x = torch.tensor([1, 4, 1, 0]), torch.randn(5, 3)
    emb = torch.nn.Embedding.from_pretrained(emb_weight.clone(), freeze=False, sparse=True)
    lin = torch.nn.Linear(3, 2)
    with torch.no_grad():
        lin.weight.copy_(lin_weight)
        lin.bias.copy_(lin_bias)
    w_emb, w_lin = torch.randn(4, 3), torch.randn(5, 2)
    ((emb(indices) * w_emb).sum() + (lin(x) * w_lin).sum()).backward()
    # Clip the densified gradient: PyTorch 1.13's clip_grad_norm_ has no max()
    # for sparse tensors, and its in-place scaling of a sparse gradient is lost
    # (it scales a detached alias). The dense gradient gives the intended result.
    if math.isinf(norm_type):  # docs/nn-and-optim.md: inf raises on a sparse gradient
        sparse_grads = [p.grad.clone() for p in (emb.weight, lin.weight, lin.bias)]
        try:
            torch.nn.utils.clip_grad_norm_([emb.weight, lin.weight, lin.bias], max_norm, norm_type)
            raise AssertionError("clip_grad_norm_(inf) accepted a sparse gradient")
        except NotImplementedError:
            pass
        for p, g in zip((emb.weight, lin.weight, lin.bias), sparse_grads):
            p.grad = g
    emb.weight.grad = emb.weight.grad.to_dense()
    params = [emb.weight, lin.weight, lin.bias]
    total = torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type)
    return {"emb_weight": arr(emb_weight), "lin_weight": arr(lin_weight), "lin_bias": arr(lin_bias),
            "input": iarr(indices), "x": arr(x), "w_emb": arr(w_emb), "w_lin": arr(w_lin),
            "max_norm": max_norm, "norm_type": "inf" if math.isinf(norm_type) else norm_type,
            "total_norm": float(total), "grads": [arr(p.grad) for p in params]}


T = torch.tensor
ref = {}
ref["linear_2d"] = linear_case(torch.randn(5, 4), 3)
ref["linear_3d"] = linear_case(torch.randn(2, 3, 4), 3)
ref["linear_no_bias"] = linear_case(torch.randn(5, 4), 3, bias=False)

ref["embedding_duplicates"] = embedding_case(T([1, 3, 1, 0, 3, 3]))
ref["embedding_2d"] = embedding_case(T([[0, 2, 2], [5, 1, 0]]))
ref["embedding_padding"] = embedding_case(T([[2, 1, 2], [4, 2, 0]]), padding_idx=2)
ref["embedding_padding_negative"] = embedding_case(T([5, 1, 5, 3]), padding_idx=-1)
ref["embedding_max_norm"] = embedding_case(T([0, 2, 0, 3, 5]), max_norm=1.5, scale=1.5)
ref["embedding_max_norm_l1"] = embedding_case(T([[4, 1], [1, 2]]), max_norm=2.0, norm_type=1.0, scale=1.5)

# Bags over 7 entries: [1, 2] [] [4, 4, 0] [3, 1] -- an empty bag and repeats.
idx, off = T([1, 2, 4, 4, 0, 3, 1]), T([0, 2, 2, 5])
for mode in ["sum", "mean", "max"]:
    ref["bag_" + mode] = bag_case(idx, off, mode)
    # include_last_offset: the same bags, plus the end of the last one
    ref["bag_%s_last_offset" % mode] = bag_case(idx, T([0, 2, 2, 5, 7]), mode, include_last_offset=True)
    # entries with padding_idx 4 are left out; the bag [4] becomes empty
    ref["bag_%s_padding" % mode] = bag_case(T([4, 1, 4, 4, 2, 0, 4]), T([0, 3, 4]), mode, padding_idx=4)
    ref["bag_%s_2d" % mode] = bag_case(T([[1, 2, 1], [0, 5, 3]]), None, mode)
ref["bag_sum_weights"] = bag_case(idx, off, "sum", psw=True)
ref["bag_sum_weights_padding"] = bag_case(T([4, 1, 4, 4, 2, 0, 4]), T([0, 3, 4]), "sum", padding_idx=4, psw=True)
ref["bag_sum_weights_2d"] = bag_case(T([[1, 2, 1], [0, 5, 3]]), None, "sum", psw=True)
ref["bag_mean_max_norm"] = bag_case(idx, off, "mean", max_norm=1.0, scale=1.5)

clips = [clip_case(1.0, 2.0), clip_case(2.0, 1.0), clip_case(0.5, math.inf), clip_case(1000.0, 2.0)]

write("nn_reference", ref, clip_grad_norm=clips)
