#!/usr/bin/python3
"""Writes tests/data/modules_reference.json: PyTorch's nn.Sequential, ReLU,
Tanh, Sigmoid, Flatten, Dropout and LayerNorm on fixed inputs -- state dict
names and values, outputs, and gradients -- for tests/test_nn_layers.cpp.

Run with Debian's python3-torch:  /usr/bin/python3 tests/tools/gen_modules_reference.py
The C++ side loads the state dicts stored here (by PyTorch's names), so the
two random generators never need to agree. The loss is sum(out * w) with a
fixed random w, or the cross-entropy where a case says so. Sparse gradients
are stored densified.
"""

import torch
import torch.nn as nn

from reference import arr, iarr, write

torch.manual_seed(2468)


def randomize(module):
    """LayerNorm starts at ones and zeros; other numbers test more."""
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.LayerNorm) and m.elementwise_affine:
                m.weight.normal_(1.0, 0.5)
                m.bias.normal_(0.0, 0.5)


def run(model, x, target=None):
    """Forward in eval mode, backward of sum(out * w) or of the cross-entropy."""
    model.eval()
    randomize(model)
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
        loss = nn.functional.cross_entropy(out, target)
        c["target"] = iarr(target)
        c["loss"] = float(loss)
    loss.backward()
    c["out"] = arr(out)
    c["grads"] = [[k, arr(p.grad)] for k, p in model.named_parameters()]
    c["grad_input"] = arr(x.grad) if x.is_floating_point() else None
    return c


ref = {}
# An MLP with every new layer; Dropout is in eval mode, so the identity.
ref["mlp"] = run(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.LayerNorm(8), nn.Tanh(), nn.Dropout(0.5),
                               nn.Linear(8, 3), nn.Sigmoid()), torch.randn(5, 4))
# A character-level MLP language model: 3 characters of context -> next one.
ref["char_mlp"] = run(nn.Sequential(nn.Embedding(27, 4), nn.Flatten(), nn.Linear(12, 16), nn.Tanh(),
                                    nn.Linear(16, 27)),
                      torch.randint(0, 27, (6, 3)), target=torch.randint(0, 27, (6,)))
ref["layer_norm_2d"] = run(nn.Sequential(nn.LayerNorm([3, 4], eps=1e-3)), torch.randn(2, 3, 4) * 2)
ref["layer_norm_no_affine"] = run(nn.Sequential(nn.LayerNorm(5, elementwise_affine=False)), torch.randn(3, 5))
# Activations one by one; relu's input holds exact zeros (gradient 0 there).
ref["relu"] = run(nn.Sequential(nn.ReLU()), torch.randint(-2, 3, (3, 4)).float() / 2)
ref["tanh"] = run(nn.Sequential(nn.Tanh()), torch.randn(3, 4))
ref["sigmoid"] = run(nn.Sequential(nn.Sigmoid()), torch.randn(3, 4) * 3)
ref["flatten"] = run(nn.Sequential(nn.Flatten()), torch.randn(2, 3, 4))
ref["flatten_0_1"] = run(nn.Sequential(nn.Flatten(0, 1)), torch.randn(2, 3, 4))

write("modules_reference", ref)
