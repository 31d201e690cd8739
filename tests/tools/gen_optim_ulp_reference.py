#!/usr/bin/python3
"""Writes tests/data/optim_ulp_reference.json: PyTorch 1.13's parameter values,
float32 for float32, after each optimizer step on inputs that tests/test_optim.cpp
builds from the same formula, so the test can count in ulps how far our
updates are from PyTorch's (docs/nn-and-optim.md, "optim: one optimizer for
dense and row-sparse parameters", states the result).

Run with Debian's python3-torch (PyTorch 1.13), on the kind of machine the
numbers describe (PyTorch picks its CPU kernels at run time: AVX2 here):
    /usr/bin/python3 tests/tools/gen_optim_ulp_reference.py

Inputs: element i of input number `seed` is
    ((fmix32(i + 65536 * seed) mod 2^20) - 2^19) / 2^19,
with fmix32 MurmurHash3's 32-bit finalizer: a multiple of 2^-19 in [-1, 1),
exact in float32, computed the same way in C++ (`formula` in tests/test_optim.cpp).

Layout:
  dense.<case>:  {"optimizer", "options", "size", "param_seed", "grad_seeds",
                  "grad_scale", "expected": steps x [size] float32 values}
      param = formula(param_seed); gradient at step s = grad_scale * formula(grad_seeds[s])
  sparse_adam:   {"options", "shape", "param_seed", "grad_seed", "grad_scale", "steps",
                  "expected_last": [rows * cols] after the last step}
      at step s (0-based) the gradient lists the rows r with (r + s) % 3 != 0, their
      values grad_scale * formula(grad_seed + s) taken row-major over the listed rows.
"""
import torch

from reference import f32_values, write_indented

torch.set_num_threads(1)


def fmix32(h):
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    return h ^ (h >> 16)


def formula(seed, n):
    return torch.tensor([((fmix32((i + 65536 * seed) & 0xFFFFFFFF) & 0xFFFFF) - (1 << 19)) / (1 << 19)
                         for i in range(n)], dtype=torch.float32)


SIZE = 259  # 32 AVX2 vectors and a tail of 3
STEPS = 5


def dense_case(optimizer, options, case_index, grad_scale=1.0):
    param_seed = 100 * case_index
    grad_seeds = [param_seed + 1 + s for s in range(STEPS)]
    p = formula(param_seed, SIZE).requires_grad_()
    opt = getattr(torch.optim, optimizer)([p], **options)
    expected = []
    for seed in grad_seeds:
        p.grad = formula(seed, SIZE) * grad_scale
        opt.step()
        expected.append(f32_values(p.detach()))
    return {"optimizer": optimizer, "options": options, "size": SIZE, "param_seed": param_seed,
            "grad_seeds": grad_seeds, "grad_scale": grad_scale, "expected": expected}


def sparse_adam_case(rows=64, cols=8, steps=20, lr=0.05, grad_scale=1e-3):
    param_seed, grad_seed = 9000, 9001
    p = formula(param_seed, rows * cols).reshape(rows, cols).requires_grad_()
    opt = torch.optim.SparseAdam([p], lr=lr)
    for s in range(steps):
        listed = [r for r in range(rows) if (r + s) % 3 != 0]
        vals = (formula(grad_seed + s, len(listed) * cols) * grad_scale).reshape(len(listed), cols)
        p.grad = torch.sparse_coo_tensor([listed], vals, (rows, cols)).coalesce()
        opt.step()
    return {"options": {"lr": lr}, "shape": [rows, cols], "param_seed": param_seed, "grad_seed": grad_seed,
            "grad_scale": grad_scale, "steps": steps, "expected_last": f32_values(p.detach())}


def main():
    cases = [
        ("sgd", "SGD", {"lr": 0.1}),
        ("sgd_momentum", "SGD", {"lr": 0.1, "momentum": 0.9}),
        ("sgd_nesterov", "SGD", {"lr": 0.1, "momentum": 0.9, "nesterov": True}),
        ("sgd_weight_decay", "SGD", {"lr": 0.1, "weight_decay": 0.01}),
        ("adam", "Adam", {"lr": 0.01}),
        ("adam_weight_decay", "Adam", {"lr": 0.01, "weight_decay": 0.01}),
        ("adamw", "AdamW", {"lr": 0.01, "weight_decay": 0.01}),
        ("adam_amsgrad", "Adam", {"lr": 0.01, "amsgrad": True}),
    ]
    dense = {name: dense_case(opt, options, i + 1) for i, (name, opt, options) in enumerate(cases)}
    out = {"torch_version": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability()
           if hasattr(torch.backends, "cpu") and hasattr(torch.backends.cpu, "get_cpu_capability") else
           next((l.split(":")[1].strip() for l in torch.__config__.show().split("\n")
                 if "CPU capability usage" in l), "unknown"),
           "dense": dense, "sparse_adam": sparse_adam_case()}
    write_indented("optim_ulp_reference", out)


if __name__ == "__main__":
    main()
