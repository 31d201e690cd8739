#!/usr/bin/python3
"""Writes tests/data/special_values_reference.json: what PyTorch gives, forward
and gradient, for every elementwise op and reduction at NaN, +-inf, +-0, tiny
and huge values, for tests/test_special_values.cpp to compare against.

Run with Debian's python3-torch:  /usr/bin/python3 tests/tools/gen_special_values_reference.py
Numbers are stored as strings ("nan", "inf", "-inf", "1.5"), as JSON has no NaN.
Each case seeds the backward with ones: grads[i] is d(sum(out))/d(input i).
"""
import itertools

import torch
import torch.nn.functional as F

from reference import write

SPECIAL = [float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 1e-30, 1e-39,
           3e38, -3e38]


def s(t):
    return {"shape": list(t.shape), "data": [repr(float(v)) for v in t.detach().reshape(-1).tolist()]}


def case(fn, *inputs):
    xs = [torch.tensor(x, dtype=torch.float32).requires_grad_(True) for x in inputs]
    out = fn(*xs)
    out.backward(torch.ones_like(out))
    grads = [s(x.grad) if x.grad is not None else s(torch.zeros_like(x)) for x in xs]
    return {"inputs": [s(x) for x in xs], "out": s(out), "grads": grads}


cases = {}
unary = {
    "neg": lambda x: -x, "exp": torch.exp, "log": torch.log, "tanh": torch.tanh, "sigmoid": torch.sigmoid,
    "relu": torch.relu, "abs": torch.abs, "sqrt": torch.sqrt,
    "pow_2": lambda x: x ** 2, "pow_half": lambda x: x ** 0.5, "pow_neg1": lambda x: x ** -1.0,
    "pow_0": lambda x: x ** 0.0, "pow_3": lambda x: x ** 3,
    "add_scalar": lambda x: x + 1.5, "mul_scalar": lambda x: x * 2.0, "div_scalar": lambda x: x / 2.0,
    "div_tiny_scalar": lambda x: x / 1e-39, "rdiv_scalar": lambda x: 2.0 / x, "rsub_scalar": lambda x: 1.0 - x,
    "clamp": lambda x: torch.clamp(x, -1.0, 1.0), "clamp_min": lambda x: torch.clamp(x, min=0.0),
}
for name, fn in unary.items():
    cases[name] = case(fn, SPECIAL)

pairs = list(itertools.product(SPECIAL, SPECIAL))
a = [p[0] for p in pairs]
b = [p[1] for p in pairs]
binary = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
          "maximum": torch.maximum, "minimum": torch.minimum}
for name, fn in binary.items():
    cases[name] = case(fn, a, b)

# Reductions and losses over rows that hold one special value each.
rows = [[v, 1.0, -2.0] for v in SPECIAL]
cases["sum_dim1"] = case(lambda x: x.sum(1), rows)
cases["mean_dim1"] = case(lambda x: x.mean(1), rows)
cases["max_dim1"] = case(lambda x: x.max(1).values, rows)
cases["softmax_dim1"] = case(lambda x: torch.softmax(x, 1), rows)
cases["log_softmax_dim1"] = case(lambda x: torch.log_softmax(x, 1), rows)
for i, v in enumerate(SPECIAL):
    cases["sum_all_%d" % i] = case(lambda x: x.sum(), [v, 1.0, 2.0])
    cases["mean_all_%d" % i] = case(lambda x: x.mean(), [v, 1.0, 2.0])
    cases["max_all_%d" % i] = case(lambda x: x.max(), [v, 1.0, 2.0])
    cases["mse_%d" % i] = case(lambda x, t: F.mse_loss(x, t), [v, 1.0], [0.5, 0.5])
    cases["cross_entropy_%d" % i] = case(lambda x: F.cross_entropy(x, torch.tensor([1])), [[v, 1.0, -2.0]])
    cases["layer_norm_%d" % i] = case(lambda x: F.layer_norm(x, [3]), [[v, 1.0, -2.0]])

# The smooth activations and binary losses: their gradient at 0 must be 1/2
# (relu(x) + log1p(exp(-|x|)) gives 0 there). Targets 0, 1 and 1/2 for every
# special logit; probabilities: the special values inside [0, 1] (PyTorch
# refuses the others, NaN too).
cases["softplus"] = case(F.softplus, SPECIAL)
cases["softplus_beta2_threshold5"] = case(lambda x: F.softplus(x, 2.0, 5.0), SPECIAL)
cases["log_sigmoid"] = case(F.logsigmoid, SPECIAL)
cases["logsumexp_dim1"] = case(lambda x: torch.logsumexp(x, 1), rows + [[float("-inf")] * 3])
for name, t in [("0", 0.0), ("1", 1.0), ("half", 0.5)]:
    cases["bce_with_logits_t" + name] = case(
        lambda x, t: F.binary_cross_entropy_with_logits(x, t, reduction="none"), SPECIAL, [t] * len(SPECIAL))
    cases["bce_with_logits_pos_weight_t" + name] = case(
        lambda x, t: F.binary_cross_entropy_with_logits(x, t, pos_weight=torch.tensor(3.0), reduction="none"),
        SPECIAL, [t] * len(SPECIAL))
    probs = [v for v in SPECIAL if 0 <= v <= 1] + [0.99999994]
    cases["bce_t" + name] = case(lambda p, t: F.binary_cross_entropy(p, t, reduction="none"), probs, [t] * len(probs))

write("special_values_reference", cases)
