#!/usr/bin/python3
"""Writes tests/data/optim_shape_reference.json: what PyTorch's optimizers do when
a parameter changes shape after its optimizer state was made.

Run with Debian's python3-torch (PyTorch 1.13):
    /usr/bin/python3 tests/tools/gen_optim_shape_reference.py

Each case: a [3, 2] parameter takes one step (making its state), then its value
is replaced by one of another shape and it takes a second step with a gradient
of that shape. PyTorch raises a size-mismatch RuntimeError wherever state is
kept (momentum buffers, Adam's moments) and steps normally where it is not
(SGD without momentum).

  cases: [{"optimizer": "SGD" | "Adam" | "AdamW" | "SparseAdam", "options",
           "sparse": gradients as sparse tensors listing "rows" (else dense),
           "init": [3, 2], "grad1": [3, 2] (dense; for sparse, its "rows" are listed),
           "new_value": the replaced value, "grad2": dense, of new_value's shape,
           "rows2": the rows listed by the second sparse gradient,
           "raised": did step 2 raise, "error": PyTorch's message,
           "expected": the parameter after step 2 (when it did not raise)}]
"""
import torch

from reference import arr, write

SPARSE_ROWS1 = [0, 2]


def sparse(g, rows):
    idx = torch.tensor([rows])
    return torch.sparse_coo_tensor(idx, g[rows], g.shape).coalesce()


def run(optimizer, options, is_sparse, new_shape):
    init = torch.arange(6, dtype=torch.float32).reshape(3, 2) / 10
    w = torch.nn.Parameter(init.clone())
    opt = getattr(torch.optim, optimizer)([w], **options)
    grad1 = torch.ones(3, 2)
    w.grad = sparse(grad1, SPARSE_ROWS1) if is_sparse else grad1
    opt.step()

    n = 1
    for d in new_shape:
        n *= d
    new_value = torch.arange(n, dtype=torch.float32).reshape(new_shape) / 8 + 1
    grad2 = (torch.arange(n, dtype=torch.float32).reshape(new_shape) + 1) / 4
    rows2 = [0, new_shape[0] - 1] if new_shape[0] > 1 else [0]
    with torch.no_grad():
        w.data = new_value.clone()
    w.grad = sparse(grad2, rows2) if is_sparse else grad2.clone()
    case = {"optimizer": optimizer, "options": options, "sparse": is_sparse, "init": arr(init),
            "grad1": arr(grad1), "rows1": SPARSE_ROWS1, "new_value": arr(new_value), "grad2": arr(grad2),
            "rows2": rows2}
    try:
        opt.step()
        case.update(raised=False, expected=arr(w))
    except RuntimeError as e:
        case.update(raised=True, error=str(e))
    return case


def main():
    optimizers = [
        ("SGD", {"lr": 0.1, "momentum": 0.9}, False),
        ("SGD", {"lr": 0.1}, False),
        ("Adam", {"lr": 0.1}, False),
        ("Adam", {"lr": 0.1, "amsgrad": True}, False),
        ("AdamW", {"lr": 0.1}, False),
        ("SGD", {"lr": 0.1, "momentum": 0.9}, True),
        ("SGD", {"lr": 0.1}, True),
        ("SparseAdam", {"lr": 0.1}, True),
    ]
    # Rows added, rows removed (to one row too, which broadcasts against [3, 2]),
    # columns changed, the same number of values in another shape, and 1-d.
    shapes = [(4, 2), (2, 2), (1, 2), (3, 3), (2, 3), (6,)]
    cases = []
    for optimizer, options, is_sparse in optimizers:
        for shape in shapes:
            if is_sparse and len(shape) != 2:
                continue  # a sparse gradient is for a [rows, cols] parameter
            cases.append(run(optimizer, options, is_sparse, shape))
    write("optim_shape_reference", cases)


if __name__ == "__main__":
    main()
