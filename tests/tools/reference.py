"""What the scripts of tests/tools/ share: arrays as JSON, writing
tests/data/<name>.json, one module's outputs and gradients as a case, and the
names data of the names_* examples split as they split it.

An array is stored as {"shape": [2, 3], "data": [...]} in row-major order
(tests/helpers.hpp reads it back). Sparse tensors are stored densified.
"""
import json
import os
import re
import sys

import torch
import torch.nn.functional as F
from torch import nn


def arr(t):
    """A float tensor (sparse ones densified) as float32 JSON."""
    t = t.detach()
    if t.is_sparse:
        t = t.to_dense()
    return {"shape": list(t.shape), "data": t.to(torch.float32).reshape(-1).tolist()}


def iarr(t):
    """An integer tensor as JSON."""
    return {"shape": list(t.shape), "data": t.reshape(-1).tolist()}


def f32_values(t):
    """A float32 tensor's values, flattened, each with 9 significant digits:
    the shortest text that always reads back to the same float32."""
    return [float(f"{x:.9g}") for x in t.flatten().tolist()]


def data_path(name):
    return os.path.join(os.path.dirname(__file__), "..", "data", name + ".json")


def write(name, cases, **more):
    """Writes tests/data/<name>.json: {"generator", "torch", "cases", **more}."""
    script = os.path.relpath(os.path.abspath(sys.argv[0]), os.path.join(os.path.dirname(__file__), "..", ".."))
    path = data_path(name)
    with open(path, "w") as f:
        json.dump({"generator": script, "torch": torch.__version__, "cases": cases, **more}, f)
    print("wrote", os.path.normpath(path))


def write_indented(name, out, join_rows=False):
    """Writes `out` to tests/data/<name>.json indented, each list of numbers on
    one line (with join_rows, a list of such lists too), so that the file
    stays readable and its diffs small."""
    text = json.dumps(out, indent=1)
    text = re.sub(r"\[[-0-9.e,\s]*\]", lambda m: " ".join(m.group(0).split()), text)
    if join_rows:
        text = re.sub(r"\[\s*(\[[-0-9.e, ]*\],?\s*)+\]", lambda m: " ".join(m.group(0).split()), text)
    path = data_path(name)
    with open(path, "w") as f:
        f.write(text + "\n")
    print("wrote", os.path.normpath(path))


def randomize_layer_norms(module):
    """LayerNorm starts at ones and zeros; other numbers test more."""
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.LayerNorm) and m.elementwise_affine:
                m.weight.normal_(1.0, 0.5)
                m.bias.normal_(0.0, 0.5)


def module_case(model, x, target=None):
    """A module in eval mode (no dropout), its LayerNorms randomized: its state
    dict by name, the input, the output, and the gradients (of the parameters
    by name, and of a float input) of sum(out * w) for a random w, or of the
    cross-entropy of `target` over every position."""
    model.eval()
    randomize_layer_norms(model)
    if x.is_floating_point():
        x = x.clone().requires_grad_(True)
    c = {"state_dict": [[k, arr(v)] for k, v in model.state_dict().items()],
         "input": arr(x) if x.is_floating_point() else iarr(x)}
    out = model(x)
    if target is None:
        w = torch.randn(out.shape)
        loss = (out * w).sum()
        c["w"] = arr(w)
    else:
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), target.reshape(-1))
        c["target"] = iarr(target)
        c["loss"] = float(loss)
    loss.backward()
    c["out"] = arr(out)
    c["grads"] = [[k, arr(p.grad)] for k, p in model.named_parameters()]
    c["grad_input"] = arr(x.grad) if x.is_floating_point() else None
    return c


def read_names(path):
    """A name a line; blank lines skipped."""
    with open(path, encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip()]


def split_names(names):
    """The first 90% of the names train, the rest dev, as names_mlp and names_gpt split them."""
    n_train = len(names) * 9 // 10
    return names[:n_train], names[n_train:]
