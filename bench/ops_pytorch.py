#!/usr/bin/env python3
"""ops_pytorch: the cases of bench/ops.cpp in PyTorch, timed the same way (run with /usr/bin/python3).

    /usr/bin/python3 bench/ops_pytorch.py [--only TEXT,TEXT] [--cases NAME,NAME] [--sizes 64x64,...]
                                          [--target-ms 30] [--min-samples 5] [--sum-loss] [--list]

Each case builds the same shapes as its twin in ops.cpp (which says in `what` what
every case computes); the values differ (torch.randn, not tapegrad's generator), the
work does not. One iteration: the leaves' gradients set to None (PyTorch's
zero_grad(set_to_none=True)), the forward, y.backward(g) with g made once before the
loop; the output and its graph die when the iteration returns. Each case runs in
a process of its own (a fork of this one). Samples of about
1 ms, the median sample's time per iteration, in process CPU time and wall time, as
ops.cpp. One thread (torch.set_num_threads(1)). Prints one line per case: CASE {json}.
"""
import argparse
import gc
import json
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn.functional as F

SIZES = {"64x64": (64, 64), "1024x300": (1024, 300), "4096x1024": (4096, 1024), "32x128x300": (32, 128, 300)}


# ------------------------------------------------------------------ inputs

def leaf(*shape):
    return torch.randn(*shape, requires_grad=True)


def positive_leaf(*shape):  # values in [0.5, 1.5): log, sqrt and a divisor need them positive
    return (torch.rand(*shape) + 0.5).requires_grad_()


def mask(*shape):  # half True, half False, in no pattern
    return torch.rand(*shape) > 0.5


def ids(shape, below):
    return torch.randint(0, below, shape)


def is_3d(dims):
    return len(dims) == 3


# ------------------------------------------------------------------- cases
#
# A maker takes the size's dims and returns (leaves, forward), or None where the op
# has no case at that size.

def unary(f, positive=False):
    def make(dims):
        a = positive_leaf(*dims) if positive else leaf(*dims)
        return [a], lambda: f(a)
    return make


def binary(f, row, positive_b=False):
    """f(a, b): b of a's shape at 2-d and [128, 1] at 3-d; with row, b is [m]."""
    def make(dims):
        b_shape = (dims[-1],) if row else (dims[1], 1) if is_3d(dims) else dims
        a = leaf(*dims)
        b = positive_leaf(*b_shape) if positive_b else leaf(*b_shape)
        return [a, b], lambda: f(a, b)
    return make


def reduce_dim(dims):  # the last dim, the middle one at 3-d
    return 1 if is_3d(dims) else -1


def make_where(dims):
    c, a, b = mask(*((dims[1], 1) if is_3d(dims) else dims)), leaf(*dims), leaf(*dims)
    return [a, b], lambda: torch.where(c, a, b)


def make_masked_fill(dims):
    m, a = mask(*((dims[1], dims[2]) if is_3d(dims) else dims)), leaf(*dims)
    return [a], lambda: a.masked_fill(m, 0.0)


def make_matmul(dims):
    a, b = leaf(*dims), leaf(dims[-1], dims[-1])
    return [a, b], lambda: torch.matmul(a, b)


def make_linear(dims):
    x, w, b = leaf(*dims), leaf(dims[-1], dims[-1]), leaf(dims[-1])
    return [x, w, b], lambda: F.linear(x, w, b)


def make_reshape(dims):
    to = (-1, dims[-1]) if is_3d(dims) else (dims[1], dims[0])
    return unary(lambda a: a.reshape(to))(dims)


def make_transpose(dims):
    d0 = 1 if is_3d(dims) else 0
    return unary(lambda a: a.transpose(d0, d0 + 1))(dims)


def make_permute(dims):
    p = (1, 0, 2) if is_3d(dims) else (1, 0)
    return unary(lambda a: a.permute(p))(dims)


def make_flatten(dims):
    return unary(lambda a: a.flatten(0, 1) if is_3d(dims) else a.flatten())(dims)


def make_cat(dims):  # the two halves of each row
    half = dims[:-1] + (dims[-1] // 2,)
    a, b = leaf(*half), leaf(*half)
    return [a, b], lambda: torch.cat([a, b], -1)


def make_stack(dims):  # two halves of the rows
    half = (dims[0] // 2,) + dims[1:]
    a, b = leaf(*half), leaf(*half)
    return [a, b], lambda: torch.stack([a, b], 0)


def make_narrow(dims):
    m = dims[-1]
    return unary(lambda a: a.narrow(-1, m // 4, m // 2))(dims)


def make_index_select(dims):
    idx, a = ids((dims[0],), dims[0]), leaf(*dims)
    return [a], lambda: torch.index_select(a, 0, idx)


def make_gather(dims):
    idx, a = ids(dims, dims[-1]), leaf(*dims)
    return [a], lambda: torch.gather(a, -1, idx)


def make_layer_norm(dims):
    x, w, b = leaf(*dims), leaf(dims[-1]), leaf(dims[-1])
    return [x, w, b], lambda: F.layer_norm(x, (dims[-1],), w, b)


def make_cross_entropy(dims):
    if is_3d(dims):
        return None
    target, logits = ids((dims[0],), dims[1]), leaf(*dims)
    return [logits], lambda: F.cross_entropy(logits, target)


def make_nll_loss(dims):
    if is_3d(dims):
        return None
    target, log_probs = ids((dims[0],), dims[1]), leaf(*dims)
    return [log_probs], lambda: F.nll_loss(log_probs, target)


def make_mse_loss(dims):
    a, target = leaf(*dims), torch.randn(*dims)
    return [a], lambda: F.mse_loss(a, target)


def make_embedding(dims):
    rows = 4096 if is_3d(dims) else dims[0]
    idx = ids((dims[0], dims[1]) if is_3d(dims) else (dims[0],), rows)
    emb = torch.nn.Embedding(rows, dims[-1], sparse=True)
    return [emb.weight], lambda: emb(idx)


def make_embedding_bag(dims):
    if is_3d(dims):
        return None
    idx = ids((dims[0], 4), dims[0])
    bag = torch.nn.EmbeddingBag(dims[0], dims[1], mode="sum", sparse=True)
    return [bag.weight], lambda: bag(idx)


def cases():
    out = []
    for op, f, positive_b in [("add", lambda a, b: a + b, False), ("sub", lambda a, b: a - b, False),
                              ("mul", lambda a, b: a * b, False), ("div", lambda a, b: a / b, True),
                              ("maximum", torch.maximum, False), ("minimum", torch.minimum, False)]:
        out.append((op, binary(f, False, positive_b)))
        out.append((op + "_row", binary(f, True, positive_b)))
    out += [
        ("neg", unary(lambda a: -a)),
        ("add_scalar", unary(lambda a: a + 2.0)),
        ("mul_scalar", unary(lambda a: a * 2.0)),
        ("div_scalar", unary(lambda a: a / 2.0)),
        ("pow", unary(lambda a: torch.pow(a, 2.0))),
        ("exp", unary(torch.exp)),
        ("log", unary(torch.log, positive=True)),
        ("tanh", unary(torch.tanh)),
        ("sigmoid", unary(torch.sigmoid)),
        ("relu", unary(torch.relu)),
        ("abs", unary(torch.abs)),
        ("sqrt", unary(torch.sqrt, positive=True)),
        ("clamp", unary(lambda a: torch.clamp(a, -0.5, 0.5))),
        ("gelu", unary(F.gelu)),
        ("gelu_tanh", unary(lambda a: F.gelu(a, approximate="tanh"))),
        ("dropout", unary(lambda a: F.dropout(a, 0.1, training=True))),
        ("tril", unary(torch.tril)),
        ("triu", unary(torch.triu)),
        ("where", make_where),
        ("masked_fill", make_masked_fill),
        ("matmul", make_matmul),
        ("linear", make_linear),
        ("sum", unary(torch.sum)),
        ("sum_dim", lambda dims: unary(lambda a: torch.sum(a, reduce_dim(dims)))(dims)),
        ("mean", unary(torch.mean)),
        ("mean_dim", lambda dims: unary(lambda a: torch.mean(a, reduce_dim(dims)))(dims)),
        ("max", unary(torch.max)),
        ("max_dim", lambda dims: unary(lambda a: torch.max(a, reduce_dim(dims)).values)(dims)),
        ("softmax", unary(lambda a: torch.softmax(a, -1))),
        ("log_softmax", unary(lambda a: torch.log_softmax(a, -1))),
        ("reshape", make_reshape),
        ("transpose", make_transpose),
        ("permute", make_permute),
        ("flatten", make_flatten),
        ("cat", make_cat),
        ("stack", make_stack),
        ("narrow", make_narrow),
        ("index_select", make_index_select),
        ("gather", make_gather),
        ("layer_norm", make_layer_norm),
        ("cross_entropy", make_cross_entropy),
        ("nll_loss", make_nll_loss),
        ("mse_loss", make_mse_loss),
        ("embedding", make_embedding),
        ("embedding_bag", make_embedding_bag),
    ]
    return out


# ------------------------------------------------------------------ timing

def measure(leaves, forward, args):
    """(cpu ms, wall ms) per iteration of the median sample, the fastest sample's wall ms, iterations, samples,
    minor faults per iteration, the output's shape."""
    out = list(forward().shape)
    g = torch.randn(out)  # the backward's seed, made once

    def iteration():
        for x in leaves:
            x.grad = None
        if args.sum_loss:
            forward().sum().backward()
        else:
            forward().backward(g)

    warm, start = 0, time.perf_counter()
    while True:  # at least one iteration and 5 ms; it sets the iterations per sample
        iteration()
        warm += 1
        if (time.perf_counter() - start) * 1e3 >= 5:
            break
    per_iteration = (time.perf_counter() - start) * 1e3 / warm
    k = max(1, round(args.sample_ms / per_iteration))

    cpu, wall, iterations = [], [], 0
    gc.disable()  # as timeit does: a collection would land in one case's samples
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    timed = time.perf_counter()
    while len(cpu) < args.min_samples or (time.perf_counter() - timed) * 1e3 < args.target_ms:
        w, c = time.perf_counter(), time.process_time()
        for _ in range(k):
            iteration()
        cpu.append((time.process_time() - c) * 1e3 / k)
        wall.append((time.perf_counter() - w) * 1e3 / k)
        iterations += k
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    gc.enable()
    return statistics.median(cpu), statistics.median(wall), min(wall), iterations, len(cpu), faults / iterations, out


def run_case(name, op, size, make, args):
    """One case, in the child process: its CASE line, or none where the op has no case at this size."""
    line = {"case": name, "op": op, "size": size, "threads": 1}
    try:
        setup = make(SIZES[size])
        if setup is None:
            return
        if not args.list:
            cpu, wall, wall_min, iterations, samples, minflt, out = measure(*setup, args)
            line.update(cpu_ms=cpu, wall_ms=wall, wall_ms_min=wall_min, iterations=iterations, samples=samples,
                        minflt_per_iter=minflt, out=out)
    except Exception as e:  # one case failing does not stop the others
        line["error"] = f"{type(e).__name__}: {e}"
    print("CASE " + json.dumps(line), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", default="", help="the cases whose name (op@size) contains one of these, comma-separated")
    p.add_argument("--cases", default="", help="only the cases of these names (op@size), comma-separated")
    p.add_argument("--sizes", default="", help="comma-separated, of " + ", ".join(SIZES))
    p.add_argument("--target-ms", type=float, default=30)
    p.add_argument("--sample-ms", type=float, default=1)
    p.add_argument("--min-samples", type=int, default=5)
    p.add_argument("--sum-loss", action="store_true", help="sum(y).backward() instead of y.backward(g)")
    p.add_argument("--list", action="store_true", help="the case names, not timed")
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    only = [t for t in args.only.split(",") if t]
    named = [t for t in args.cases.split(",") if t]
    sizes = [s for s in args.sizes.split(",") if s] or list(SIZES)
    for size in sizes:
        for op, make in cases():
            name = f"{op}@{size}"
            if (only and not any(t in name for t in only)) or (named and name not in named):
                continue
            # A process of its own for each case, as ops.cpp does: the same allocator
            # state and the same random inputs whatever ran before.
            sys.stdout.flush()
            child = os.fork()
            if child == 0:
                try:
                    run_case(name, op, size, make, args)
                finally:
                    sys.stdout.flush()
                    os._exit(0)
            _, status = os.waitpid(child, 0)
            if status != 0:
                print("CASE " + json.dumps({"case": name, "op": op, "size": size,
                                            "error": f"the case's process died (status {status})"}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
