#!/usr/bin/python3
"""step_pytorch: the training step of step_tapegrad in PyTorch (Python), timed the
same way: same options, initial weights, batches, warm-up and timing loop as
bench/harness.hpp, and the same RESULT line.

  embedding: ids -> (ids, offsets) -> EmbeddingBag(V, D, sum, sparse) -> tanh -> Linear(D, C)
  linear:    ids -> dense 0/1 rows [B, V] -> Linear(V, D, no bias) -> tanh -> Linear(D, C)

Optimizers: SGD over every parameter; for embedding + Adam, SparseAdam for the
embedding's sparse gradient and Adam for the head (PyTorch needs two); for
linear + Adam, one Adam. Gradients are cleared with optimizer.zero_grad(), the
call a PyTorch program makes (in 1.13 it zeroes them in place: set_to_none=False);
--zero-grad none passes set_to_none=True instead.

Run it with Debian's interpreter (/usr/bin/python3), which has python3-torch.
"""
import argparse
import json
import math
import time

import numpy as np
import torch
import torch.nn.functional as F

MAGIC = b"TGIDS01\n"
SALT_TABLE, SALT_HEAD_WEIGHT, SALT_HEAD_BIAS = 0, 1000000007, 2000000011


def read_corpus(path):
    with open(path, "rb") as f:
        if f.read(8) != MAGIC:
            raise SystemExit(f"{path}: not an ids file")
        vocab, classes, docs, n = np.frombuffer(f.read(32), dtype="<i8")
        offsets = np.frombuffer(f.read(8 * (docs + 1)), dtype="<i8")
        labels = np.frombuffer(f.read(4 * docs), dtype="<i4")
        ids = np.frombuffer(f.read(4 * n), dtype="<i4")
    return int(vocab), int(classes), offsets, labels, ids


def init_values(index, salt, bound):
    """harness.hpp's init_value for an array of element positions (uint64)."""
    h = ((index + np.uint64(salt)) * np.uint64(2654435761)) & np.uint64(0xFFFFFFFF)
    return ((2.0 * (h.astype(np.float64) / 4294967296.0) - 1.0) * bound).astype(np.float32)


def fill_table(weight, vocab, dim, transposed):
    """weight [V, D] (EmbeddingBag) or [D, V] (Linear) = the same table, in chunks of rows."""
    bound = 1.0 / math.sqrt(vocab)
    chunk = max(1, (1 << 20) // dim)
    for v0 in range(0, vocab, chunk):
        v1 = min(vocab, v0 + chunk)
        index = np.arange(v0 * dim, v1 * dim, dtype=np.uint64)
        block = torch.from_numpy(init_values(index, SALT_TABLE, bound).reshape(v1 - v0, dim))
        if transposed:
            weight[:, v0:v1] = block.t()
        else:
            weight[v0:v1] = block


def fill_head(head, classes, dim):
    bound = 1.0 / math.sqrt(dim)
    head.weight.copy_(torch.from_numpy(
        init_values(np.arange(classes * dim, dtype=np.uint64), SALT_HEAD_WEIGHT, bound).reshape(classes, dim)))
    head.bias.copy_(torch.from_numpy(init_values(np.arange(classes, dtype=np.uint64), SALT_HEAD_BIAS, bound)))


def status_kb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def measure(a, step):
    """harness.hpp's measure(): warm-up losses, K from the warm-up speed, wall and CPU ms per step."""
    phases = dict(batch=0.0, forward=0.0, backward=0.0, step=0.0)
    ignored = dict(phases)
    losses, warm_ms, s = [], [], 0
    for s in range(a.warmup):
        t = time.perf_counter()
        losses.append(step(s, ignored))
        warm_ms.append((time.perf_counter() - t) * 1e3)
    late = sorted(warm_ms[len(warm_ms) // 2:])
    per_step = max(late[len(late) // 2], 1e-3)
    k = min(max(round(a.target_ms / per_step), 1), a.max_steps)
    s = a.warmup
    ms_repeats, cpu_ms_repeats = [], []
    for _ in range(a.repeats):
        t, cpu = time.perf_counter(), time.process_time()
        for _ in range(k):
            step(s, phases)
            s += 1
        cpu_ms_repeats.append((time.process_time() - cpu) * 1e3 / k)
        ms_repeats.append((time.perf_counter() - t) * 1e3 / k)
    n = a.repeats * k
    return losses, ms_repeats, cpu_ms_repeats, k, {key: v / n for key, v in phases.items()}


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ids", required=True)
    p.add_argument("--model", choices=["embedding", "linear"], default="embedding")
    p.add_argument("--optim", choices=["sgd", "adam"], default="sgd")
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--warmup", type=int, default=8)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--max-steps", type=int, default=200)
    p.add_argument("--target-ms", type=float, default=300)
    p.add_argument("--lr", type=float, default=-1)
    p.add_argument("--zero-grad", choices=["idiomatic", "none"], default="idiomatic")
    a = p.parse_args()
    if a.lr < 0:
        a.lr = 0.1 if a.optim == "sgd" else 0.01
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)

    rss_start = status_kb("VmRSS")
    vocab, classes, offsets, labels, ids = read_corpus(a.ids)
    dim, batch = a.dim, a.batch
    batches = len(labels) // batch
    if batches < 1:
        raise SystemExit(f"{a.ids}: fewer documents than one batch")

    embedding = a.model == "embedding"
    with torch.no_grad():
        if embedding:
            first = torch.nn.EmbeddingBag(vocab, dim, mode="sum", sparse=True)
            fill_table(first.weight, vocab, dim, transposed=False)
        else:
            first = torch.nn.Linear(vocab, dim, bias=False)
            fill_table(first.weight, vocab, dim, transposed=True)
        head = torch.nn.Linear(dim, classes)
        fill_head(head, classes, dim)
    params = list(first.parameters()) + list(head.parameters())
    param_bytes = sum(t.numel() * t.element_size() for t in params)
    if a.optim == "sgd":
        opts = [torch.optim.SGD(params, lr=a.lr)]
    elif embedding:
        opts = [torch.optim.SparseAdam(list(first.parameters()), lr=a.lr),
                torch.optim.Adam(list(head.parameters()), lr=a.lr)]
    else:
        opts = [torch.optim.Adam(params, lr=a.lr)]
    rss_model = status_kb("VmRSS")

    def step(s, ph):
        t0 = time.perf_counter()
        b = s % batches
        lo, hi = offsets[b * batch], offsets[(b + 1) * batch]
        y = torch.from_numpy(labels[b * batch:(b + 1) * batch].astype(np.int64))
        if embedding:
            x = torch.from_numpy(ids[lo:hi].astype(np.int64))
            starts = torch.from_numpy(offsets[b * batch:(b + 1) * batch] - lo)
            t1 = time.perf_counter()
            hidden = first(x, starts)
        else:
            counts = np.diff(offsets[b * batch:(b + 1) * batch + 1])
            rows = torch.from_numpy(np.repeat(np.arange(batch, dtype=np.int64), counts))
            cols = torch.from_numpy(ids[lo:hi].astype(np.int64))
            x = torch.zeros(batch, vocab)  # [B, V]
            x[rows, cols] = 1.0
            t1 = time.perf_counter()
            hidden = first(x)
        loss = F.cross_entropy(head(torch.tanh(hidden)), y)
        t2 = time.perf_counter()
        for o in opts:
            o.zero_grad(set_to_none=a.zero_grad == "none")
        loss.backward()
        t3 = time.perf_counter()
        for o in opts:
            o.step()
        t4 = time.perf_counter()
        ph["batch"] += (t1 - t0) * 1e3
        ph["forward"] += (t2 - t1) * 1e3
        ph["backward"] += (t3 - t2) * 1e3
        ph["step"] += (t4 - t3) * 1e3
        return loss.item()

    losses, ms_repeats, cpu_ms_repeats, k, phases = measure(a, step)
    state_bytes = sum(t.numel() * t.element_size() for o in opts for st in o.state.values()
                      for t in st.values() if torch.is_tensor(t) and t.dim() > 0)
    print("RESULT " + json.dumps(dict(
        system="pytorch", version=torch.__version__, model=a.model, optim=a.optim, vocab=vocab, dim=dim,
        batch=batch, warmup=a.warmup, repeats=a.repeats, steps_per_repeat=k,
        ms_per_step=median(ms_repeats), cpu_ms_per_step=median(cpu_ms_repeats), ms_repeats=ms_repeats,
        cpu_ms_repeats=cpu_ms_repeats, phases_ms=phases, losses=losses, param_bytes=param_bytes,
        state_bytes=state_bytes, rss_start_kb=rss_start, rss_model_kb=rss_model,
        rss_peak_kb=status_kb("VmHWM"))), flush=True)


if __name__ == "__main__":
    main()
