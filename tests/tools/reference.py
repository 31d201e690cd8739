"""What the gen_*_reference.py scripts share: arrays as JSON, and writing
tests/data/<name>.json with the torch version and the script that wrote it.

An array is stored as {"shape": [2, 3], "data": [...]} in row-major order
(tests/helpers.hpp reads it back). Sparse tensors are stored densified.
"""
import json
import os
import sys

import torch


def arr(t):
    """A float tensor (sparse ones densified) as float32 JSON."""
    t = t.detach()
    if t.is_sparse:
        t = t.to_dense()
    return {"shape": list(t.shape), "data": t.to(torch.float32).reshape(-1).tolist()}


def iarr(t):
    """An integer tensor as JSON."""
    return {"shape": list(t.shape), "data": t.reshape(-1).tolist()}


def write(name, cases, **more):
    """Writes tests/data/<name>.json: {"generator", "torch", "cases", **more}."""
    script = os.path.relpath(os.path.abspath(sys.argv[0]), os.path.join(os.path.dirname(__file__), "..", ".."))
    path = os.path.join(os.path.dirname(__file__), "..", "data", name + ".json")
    with open(path, "w") as f:
        json.dump({"generator": script, "torch": torch.__version__, "cases": cases, **more}, f)
    print("wrote", os.path.normpath(path))
