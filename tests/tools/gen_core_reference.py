#!/usr/bin/python3
"""Writes tests/data/core_reference.json: forward values and gradients of core ops
computed by PyTorch, for tests/test_ops.cpp to compare against.

Run with Debian's python3-torch:  /usr/bin/python3 tests/tools/gen_core_reference.py
Inputs are drawn here and stored in the file, so the C++ side uses the same numbers.
"""
import json
import os

import torch

torch.manual_seed(1234)


def arr(t):
    t = t.detach().to(torch.float32)
    return {"shape": list(t.shape), "data": t.reshape(-1).tolist()}


def iarr(t):
    return {"shape": list(t.shape), "data": t.reshape(-1).tolist()}


def case(fn, *inputs):
    """Runs fn on copies of inputs that require grad; the loss is sum(out * w)."""
    xs = [x.clone().requires_grad_(True) for x in inputs]
    out = fn(*xs)
    w = torch.randn(out.shape)
    (out * w).sum().backward()
    return {"inputs": [arr(x) for x in xs], "w": arr(w), "out": arr(out),
            "grads": [arr(x.grad) for x in xs]}


ref = {}
logits = torch.randn(5, 7) * 3
# A row with huge logits: log_softmax must not overflow.
logits_big = torch.tensor([[1000.0, 0.0, -1000.0], [50.0, 51.0, 52.0]])
target = torch.tensor([0, 3, 6, 2, 3])

ref["log_softmax_dim1"] = case(lambda x: torch.log_softmax(x, 1), logits)
ref["log_softmax_dim0"] = case(lambda x: torch.log_softmax(x, 0), logits)
ref["log_softmax_big"] = case(lambda x: torch.log_softmax(x, 1), logits_big)
ref["softmax_dim1"] = case(lambda x: torch.softmax(x, 1), logits)
for red in ["mean", "sum", "none"]:
    c = case(lambda x: torch.nn.functional.cross_entropy(x, target, reduction=red), logits)
    c["target"] = iarr(target)
    ref["cross_entropy_" + red] = c
ref["matmul_2d"] = case(torch.matmul, torch.randn(4, 6), torch.randn(6, 3))
ref["matmul_3d"] = case(torch.matmul, torch.randn(2, 4, 6), torch.randn(6, 3))
ref["linear_bias"] = case(torch.nn.functional.linear, torch.randn(4, 6), torch.randn(3, 6), torch.randn(3))
ref["mse_loss"] = case(torch.nn.functional.mse_loss, torch.randn(3, 4), torch.randn(3, 4))

path = os.path.join(os.path.dirname(__file__), "..", "data", "core_reference.json")
with open(path, "w") as f:
    json.dump({"generator": "tests/tools/gen_core_reference.py", "torch": torch.__version__, "cases": ref}, f)
print("wrote", os.path.normpath(path))
