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

from reference import module_case, write

torch.manual_seed(2468)

ref = {}
# An MLP with every new layer; Dropout is in eval mode, so the identity.
ref["mlp"] = module_case(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.LayerNorm(8), nn.Tanh(), nn.Dropout(0.5),
                                       nn.Linear(8, 3), nn.Sigmoid()), torch.randn(5, 4))
# A character-level MLP language model: 3 characters of context -> next one.
ref["char_mlp"] = module_case(nn.Sequential(nn.Embedding(27, 4), nn.Flatten(), nn.Linear(12, 16), nn.Tanh(),
                                            nn.Linear(16, 27)),
                              torch.randint(0, 27, (6, 3)), target=torch.randint(0, 27, (6,)))
ref["layer_norm_2d"] = module_case(nn.Sequential(nn.LayerNorm([3, 4], eps=1e-3)), torch.randn(2, 3, 4) * 2)
ref["layer_norm_no_affine"] = module_case(nn.Sequential(nn.LayerNorm(5, elementwise_affine=False)),
                                          torch.randn(3, 5))
# Activations one by one; relu's input holds exact zeros (gradient 0 there).
ref["relu"] = module_case(nn.Sequential(nn.ReLU()), torch.randint(-2, 3, (3, 4)).float() / 2)
ref["tanh"] = module_case(nn.Sequential(nn.Tanh()), torch.randn(3, 4))
ref["sigmoid"] = module_case(nn.Sequential(nn.Sigmoid()), torch.randn(3, 4) * 3)
ref["flatten"] = module_case(nn.Sequential(nn.Flatten()), torch.randn(2, 3, 4))
ref["flatten_0_1"] = module_case(nn.Sequential(nn.Flatten(0, 1)), torch.randn(2, 3, 4))

write("modules_reference", ref)
