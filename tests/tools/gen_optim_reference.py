#!/usr/bin/python3
"""Writes tests/data/optim_reference.json: parameter values after each of 5
PyTorch optimizer steps, for fixed initial values and fixed gradients.

Run with Debian's python3-torch (PyTorch 1.13):
    /usr/bin/python3 tests/tools/gen_optim_reference.py

Layout (arrays are {"shape": [...], "data": [...]}, row-major):
  dense.<case>:  {"optimizer", "options",
                  "params":   [weight [3, 4], bias [4]],
                  "grads":    5 steps x [weight grad, bias grad or null (no gradient)],
                  "expected": 5 steps x [weight, bias] after that step}
  sparse.<case>: {"optimizer", "options",
                  "param":    [8, 3],
                  "grads":    5 steps x {"rows": sorted unique, "values": [len(rows), 3]},
                  "expected": 5 steps x param after that step}
"""
import json
import os
import re

import torch

STEPS = 5
SCALES = [1.0, 3.0, 0.5, 0.2, 1.0]  # gradient size per step; shrinking v exercises amsgrad


def array(t):
    # 9 significant digits round-trip a float32 exactly.
    return {"shape": list(t.shape), "data": [float(f"{x:.9g}") for x in t.flatten().tolist()]}


def dense_case(gen, optimizer, options, missing_bias_grad_at=None):
    weight = torch.randn(3, 4, generator=gen).requires_grad_()
    bias = torch.randn(4, generator=gen).requires_grad_()
    case = {"optimizer": optimizer, "options": options,
            "params": [array(weight), array(bias)], "grads": [], "expected": []}
    kwargs = dict(options)
    if "betas" in kwargs:
        kwargs["betas"] = tuple(kwargs["betas"])
    opt = getattr(torch.optim, optimizer)([weight, bias], **kwargs)
    for step in range(STEPS):
        gw = torch.randn(3, 4, generator=gen) * SCALES[step]
        gb = torch.randn(4, generator=gen) * SCALES[step]
        weight.grad = gw.clone()
        bias.grad = None if step == missing_bias_grad_at else gb.clone()
        opt.step()
        case["grads"].append([array(gw), None if bias.grad is None else array(gb)])
        case["expected"].append([array(weight.detach()), array(bias.detach())])
    return case


# Rows listed per step for an [8, 3] parameter: 3 repeats across steps, 1, 5, 6
# come back after a gap, and 2, 4, 7 are never listed.
SPARSE_ROWS = [[1, 3], [3, 5, 6], [0, 1], [3], [1, 5, 6]]


def sparse_case(gen, optimizer, options):
    param = torch.randn(8, 3, generator=gen).requires_grad_()
    case = {"optimizer": optimizer, "options": options,
            "param": array(param), "grads": [], "expected": []}
    opt = getattr(torch.optim, optimizer)([param], **options)
    for step, rows in enumerate(SPARSE_ROWS):
        values = torch.randn(len(rows), 3, generator=gen) * SCALES[step]
        param.grad = torch.sparse_coo_tensor([rows], values, (8, 3)).coalesce()
        opt.step()
        case["grads"].append({"rows": rows, "values": array(values)})
        case["expected"].append(array(param.detach()))
    return case


def main():
    gen = torch.Generator().manual_seed(1234)
    dense = {
        "sgd_plain": dense_case(gen, "SGD", {"lr": 0.1}),
        "sgd_momentum": dense_case(gen, "SGD", {"lr": 0.1, "momentum": 0.9}),
        "sgd_momentum_dampening": dense_case(gen, "SGD", {"lr": 0.1, "momentum": 0.9, "dampening": 0.3}),
        "sgd_nesterov": dense_case(gen, "SGD", {"lr": 0.1, "momentum": 0.9, "nesterov": True}),
        "sgd_weight_decay": dense_case(gen, "SGD", {"lr": 0.1, "weight_decay": 0.1}),
        "sgd_momentum_weight_decay": dense_case(gen, "SGD", {"lr": 0.1, "momentum": 0.9, "weight_decay": 0.1}),
        "sgd_momentum_missing_grad": dense_case(gen, "SGD", {"lr": 0.1, "momentum": 0.9},
                                                missing_bias_grad_at=2),
        "adam": dense_case(gen, "Adam", {"lr": 0.01}),
        "adam_weight_decay": dense_case(gen, "Adam", {"lr": 0.01, "weight_decay": 0.1}),
        "adamw": dense_case(gen, "AdamW", {"lr": 0.01, "weight_decay": 0.1}),
        "adam_amsgrad": dense_case(gen, "Adam", {"lr": 0.01, "betas": [0.8, 0.99], "amsgrad": True}),
        "adam_missing_grad": dense_case(gen, "Adam", {"lr": 0.01}, missing_bias_grad_at=2),
    }
    sparse = {
        "sparse_adam": sparse_case(gen, "SparseAdam", {"lr": 0.05}),
        "sparse_sgd": sparse_case(gen, "SGD", {"lr": 0.1}),
    }
    out = {"torch_version": torch.__version__, "dense": dense, "sparse": sparse}
    path = os.path.join(os.path.dirname(__file__), "..", "data", "optim_reference.json")
    text = json.dumps(out, indent=1)
    # One line per list of numbers, so the file stays readable and diffs stay small.
    text = re.sub(r"\[[-0-9.e,\s]*\]", lambda m: " ".join(m.group(0).split()), text)
    with open(path, "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
