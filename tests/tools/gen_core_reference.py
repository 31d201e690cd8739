#!/usr/bin/python3
"""Writes tests/data/core_reference.json: forward values and gradients of core ops
computed by PyTorch, for tests/test_ops.cpp to compare against.

Run with Debian's python3-torch:  /usr/bin/python3 tests/tools/gen_core_reference.py
Inputs are drawn here and stored in the file, so the C++ side uses the same numbers.
"""

import re

import torch

from reference import arr, iarr, write

torch.manual_seed(1234)


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


# ---- ops added later. Their draws come after the ones above, so the cases
# above keep their numbers.


def case_with(fn, inputs, fixed=()):
    """Like case(), with `fixed` inputs that take no gradient (masks, indices),
    and an fn that may return (out, extra tensors)."""
    xs = [x.clone().requires_grad_(True) for x in inputs]
    res = fn(*xs, *fixed)
    out, extra = (res[0], res[1:]) if isinstance(res, tuple) else (res, ())
    w = torch.randn(out.shape)
    (out * w).sum().backward()
    c = {"inputs": [arr(x) for x in xs], "w": arr(w), "out": arr(out),
         "grads": [arr(x.grad) for x in xs]}
    c["fixed"] = [iarr(f) if not f.is_floating_point() else arr(f) for f in fixed]
    c["extra"] = [iarr(e) for e in extra]
    return c


# Values on a grid of quarters, so ties and exact zeros and bounds occur.
def quarters(*shape):
    return torch.randint(-4, 5, shape).float() / 4


ref["abs"] = case(torch.abs, quarters(3, 5))  # holds zeros: gradient 0 there
ref["sqrt"] = case(torch.sqrt, torch.rand(3, 4) + 0.1)
ref["clamp"] = case(lambda x: torch.clamp(x, -0.5, 0.5), quarters(4, 5))  # values at the bounds
ref["clamp_min"] = case(lambda x: torch.clamp(x, min=0.25), quarters(4, 5))
ref["clamp_max"] = case(lambda x: torch.clamp(x, max=-0.25), quarters(4, 5))
ref["maximum"] = case(torch.maximum, quarters(3, 4), quarters(4))  # ties, broadcast
ref["minimum"] = case(torch.minimum, quarters(3, 4), quarters(3, 1))
ref["where"] = case_with(lambda a, b, c: torch.where(c > 0, a, b), [torch.randn(3, 4), torch.randn(4)],
                         [torch.randint(0, 2, (3, 1)).float()])
ref["max_all_ties"] = case(torch.max, torch.tensor([[1.0, 3.0, -2.0], [3.0, 0.5, 3.0]]))
ref["max_dim1_ties"] = case_with(lambda x: tuple(torch.max(x, 1)), [quarters(4, 5)])
ref["max_dim0_keepdim"] = case_with(lambda x: tuple(torch.max(x, 0, keepdim=True)), [quarters(3, 2, 4)])
ties = quarters(4, 6)
ref["argmax"] = {"input": arr(ties), "all": iarr(torch.argmax(ties)), "dim1": iarr(torch.argmax(ties, 1)),
                 "dim0_keepdim": iarr(torch.argmax(ties, 0, keepdim=True))}
ref["cat_dim0"] = case(lambda a, b, c: torch.cat([a, b, c], 0), torch.randn(2, 3), torch.randn(1, 3),
                       torch.randn(4, 3))
ref["cat_dim1"] = case(lambda a, b: torch.cat([a, b], -1), torch.randn(2, 3, 2), torch.randn(2, 3, 5))
ref["cat_dim_mid"] = case(lambda a, b: torch.cat([a, b], 1), torch.randn(2, 1, 3), torch.randn(2, 4, 3))
ref["stack_dim0"] = case(lambda a, b, c: torch.stack([a, b, c]), torch.randn(2, 3), torch.randn(2, 3),
                         torch.randn(2, 3))
ref["stack_dim_last"] = case(lambda a, b: torch.stack([a, b], -1), torch.randn(2, 3), torch.randn(2, 3))
ref["gather_dim0"] = case_with(lambda x, i: torch.gather(x, 0, i), [torch.randn(3, 4)],
                               [torch.tensor([[2, 0, 2, 1], [0, 0, 1, 2]])])
ref["gather_dim1"] = case_with(lambda x, i: torch.gather(x, 1, i), [torch.randn(3, 5)],
                               [torch.tensor([[4, 4], [0, 1], [3, 3]])])
ref["gather_3d"] = case_with(lambda x, i: torch.gather(x, 2, i), [torch.randn(2, 3, 4)],
                             [torch.randint(0, 4, (2, 2, 6))])
ref["narrow"] = case(lambda x: torch.narrow(x, 1, 1, 3), torch.randn(2, 5, 2))
ref["flatten"] = case(lambda x: torch.flatten(x, 1), torch.randn(2, 3, 4))
ref["layer_norm_last"] = case(lambda x, w, b: torch.nn.functional.layer_norm(x, (5,), w, b),
                              torch.randn(3, 5) * 2 + 1, torch.randn(5), torch.randn(5))
ref["layer_norm_last2"] = case(lambda x, w, b: torch.nn.functional.layer_norm(x, (3, 4), w, b, eps=1e-3),
                               torch.randn(2, 3, 4), torch.randn(3, 4), torch.randn(3, 4))
ref["layer_norm_plain"] = case(lambda x: torch.nn.functional.layer_norm(x, (6,)), torch.randn(4, 6) * 3)

# dropout: PyTorch's own mask. The C++ side draws its own and compares the
# values where both kept an element (the 1 / (1 - p) scaling).
x = torch.randn(20, 50)
torch.manual_seed(7)
ref["dropout"] = {"p": 0.3, "input": arr(x), "out": arr(torch.nn.functional.dropout(x, 0.3, True))}
ref["arange_float"] = {"start": -1.0, "end": 1.0, "step": 0.3, "out": arr(torch.arange(-1.0, 1.0, 0.3))}
ref["arange_int"] = {"start": 3, "end": -8, "step": -3, "out": iarr(torch.arange(3, -8, -3))}


# ---- printing: what PyTorch's repr shows, with the suffixes tapegrad adds
# (shape first, then requires_grad), laid out by PyTorch's own suffix code.
from torch._tensor_str import _add_suffixes, _tensor_str


def printed(t, requires_grad=False):
    suffixes = ["shape=[" + ", ".join(str(d) for d in t.shape) + "]"]
    if requires_grad:
        suffixes.append("requires_grad=True")
    return _add_suffixes("tensor(" + _tensor_str(t, len("tensor(")), suffixes, len("tensor("), False)


def print_case(t, requires_grad=False):
    data = [str(v) for v in t.reshape(-1).tolist()]  # str: keeps nan, inf and -0.0
    return {"shape": list(t.shape), "data": data, "integer": not t.is_floating_point(),
            "requires_grad": requires_grad, "expected": printed(t, requires_grad)}


F = torch.tensor
prints = [
    print_case(F([[1.5, 2.0], [3.0, 4.0]]), True),
    print_case(F([[1.0, 2.0], [3.0, 40.0]])),
    print_case(F([1e-5, 1.0, 1e5])),
    print_case(F([1.0, 1e9])),
    print_case(F([2e-5, 3e-5])),
    print_case(F([float("nan"), float("inf"), -float("inf"), -0.0, 1.25])),
    print_case(F([float("nan"), 2.0])),
    print_case(torch.zeros(2, 3)),
    print_case(F(3.25)),
    print_case(torch.zeros(0, 3)),
    print_case(torch.randn(2, 3, 4)),
    print_case(torch.randn(30) * 10),
    print_case(torch.randn(8) * 100, True),
    print_case(torch.randn(40, 50)),
    print_case(torch.arange(2000.0)),
    print_case(torch.randn(11, 10, 12)),
    print_case(-torch.rand(3, 3), True),
    print_case(F([3, 0, 12])),
    print_case(F([[1, 2], [3, -40]])),
    print_case(torch.arange(1500)),
    print_case(F(7)),
]



# ---- printing a sparse gradient (SparseRows): PyTorch's repr of the same
# coalesced sparse tensor (row ids as indices [1, nnz]), with tapegrad's names
# for its size and layout.
def sparse_print_case(rows, values, num_rows):
    t = torch.sparse_coo_tensor(torch.tensor([rows], dtype=torch.long).reshape(1, -1), values,
                                (num_rows, values.shape[1])).coalesce()
    text = re.sub(r"size=\((\d+), (\d+)\)", r"shape=[\1, \2]", repr(t))
    return {"rows": rows, "values": arr(values), "num_rows": num_rows,
            "expected": text.replace("layout=torch.sparse_coo", "layout=sparse_rows")}


sparse_prints = [
    sparse_print_case([1, 3], F([[2.0, 2.0, 2.0], [1.0, 1.0, 1.0]]), 5),
    sparse_print_case([], torch.zeros(0, 3), 5),
    sparse_print_case([0, 7, 9], torch.randn(3, 4) * 1000, 10),
    sparse_print_case(list(range(0, 800, 2)), torch.randn(400, 3), 800),
]

write("core_reference", ref, print=prints, print_sparse=sparse_prints)
