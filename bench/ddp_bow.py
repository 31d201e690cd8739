#!/usr/bin/python3
"""ddp_bow: bow_classifier's embedding step (--mode embedding, Adam, batch 32, dim 64)
under PyTorch's DistributedDataParallel with the gloo backend, on N processes of
this machine, for the side-by-side table of docs/distributed.md.

  /usr/bin/python3 bench/ddp_bow.py --np 2 [--epochs 1] [--batch 32] [--dim 64]

The job: examples/data/spam_sample.tsv, tokens as tapegrad's tokenizer makes them
(runs of ASCII letters and digits, lower-cased, at most 32 bytes), a vocabulary of
the words in at least 2 training documents, multi-hot documents, a seeded 80/20
split (not tapegrad's stratified one: the vocabulary differs by a few words).
Model: EmbeddingBag(V, D, sum, sparse=True) -> tanh -> Linear(D, 2); SparseAdam
for the table and Adam for the head (PyTorch needs two), lr 0.01. Each process
takes batch / N documents (DistributedSampler, drop_last=False) on one thread.

Printed per world size: the median step time (forward, backward with DDP's
all-reduce, the optimizers' step) and the epoch's time on rank 0; bytes per step
of each rank's payload (dense: the head's gradients, which gloo all-reduces;
sparse: the rows gloo's sparse all-reduce gathers from every rank: its own
row ids (8 bytes) and rows (D x 4) sent, the others' received), and the bytes
that crossed the loopback interface during the epoch (/proc/net/dev: TCP/IP
headers included, and anything else on this machine that used loopback).
"""
import argparse
import os
import random
import re
import socket
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data.distributed import DistributedSampler

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load(path):
    texts, labels = [], []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            label, _, text = line.rstrip("\n").partition("\t")
            labels.append(1 if label == "spam" else 0)
            texts.append([t.lower() for t in re.findall(r"[A-Za-z0-9]+", text) if len(t) <= 32])
    return texts, labels


def corpus(path, seed=0):
    texts, labels = load(path)
    order = list(range(len(texts)))
    random.Random(seed).shuffle(order)
    n_test = (len(order) + 4) // 5
    test, train = order[:n_test], order[n_test:]
    df = {}
    for i in train:
        for w in set(texts[i]):
            df[w] = df.get(w, 0) + 1
    vocab = {w: k for k, w in enumerate(sorted(w for w, c in df.items() if c >= 2))}
    docs = [sorted({vocab[w] for w in t if w in vocab}) for t in texts]
    return docs, labels, train, test, len(vocab)


def loopback_bytes():
    with open("/proc/net/dev") as f:
        for line in f:
            if line.strip().startswith("lo:"):
                fields = line.split(":")[1].split()
                return int(fields[8])  # bytes transmitted (each one is also received once)
    return 0


def batch_of(docs, labels, ids):
    flat, offsets = [], []
    for i in ids:
        offsets.append(len(flat))
        flat.extend(docs[i])
    return torch.tensor(flat, dtype=torch.long), torch.tensor(offsets, dtype=torch.long), torch.tensor(
        [labels[i] for i in ids])


def worker(rank, world, port, args, results):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    docs, labels, train, test, vocab = corpus(args.data)
    torch.manual_seed(0)
    bag = nn.EmbeddingBag(vocab, args.dim, mode="sum", sparse=True)
    nn.init.uniform_(bag.weight, -vocab ** -0.5, vocab ** -0.5)
    model = nn.ModuleDict({"bag": bag, "head": nn.Linear(args.dim, 2)})

    class Net(nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, flat, offsets):
            return self.m["head"](torch.tanh(self.m["bag"](flat, offsets)))

    net = nn.parallel.DistributedDataParallel(Net(model))
    sparse_opt = torch.optim.SparseAdam(list(bag.parameters()), lr=args.lr)
    dense_opt = torch.optim.Adam(list(model["head"].parameters()), lr=args.lr)
    sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=0)
    local = args.batch // world
    step_ms, sent, received, dense = [], 0, 0, 0
    steps = 0
    plans = []  # per epoch: this rank's batches, and every rank's unique rows per batch (counted before timing)
    for epoch in range(args.epochs):
        shares = []
        for r in range(world):
            s = DistributedSampler(train, num_replicas=world, rank=r, shuffle=True, seed=0)
            s.set_epoch(epoch)
            shares.append([train[i] for i in s])
        batches = [(shares[rank][b:b + local], [len({w for i in share[b:b + local] for w in docs[i]}) for share in shares])
                   for b in range(0, len(shares[rank]), local)]
        plans.append(batches)
    dist.barrier()
    lo0, t0 = loopback_bytes(), time.perf_counter()
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for ids, rows in plans[epoch]:
            sent += rows[rank] * (8 + 4 * args.dim)
            received += sum(rows[r] for r in range(world) if r != rank) * (8 + 4 * args.dim)
            dense += sum(p.numel() for p in model["head"].parameters()) * 4
            flat, offsets, y = batch_of(docs, labels, ids)
            start = time.perf_counter()
            loss = F.cross_entropy(net(flat, offsets), y)
            sparse_opt.zero_grad()
            dense_opt.zero_grad()
            loss.backward()
            sparse_opt.step()
            dense_opt.step()
            step_ms.append(1000 * (time.perf_counter() - start))
            steps += 1
    dist.barrier()
    seconds, lo = time.perf_counter() - t0, loopback_bytes() - lo0
    with torch.no_grad():
        flat, offsets, y = batch_of(docs, labels, test)
        accuracy = (net.module(flat, offsets).argmax(1) == y).float().mean().item()
    if rank == 0:
        results.put(dict(world=world, vocab=vocab, steps=steps, ms=statistics.median(step_ms), seconds=seconds,
                         dense=dense / steps, sparse=(sent + received) / steps, lo=lo / steps / world,
                         accuracy=accuracy))
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--np", type=int, nargs="+", default=[1, 2], help="world sizes to run (default 1 2)")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--data", default=os.path.join(ROOT, "examples/data/spam_sample.tsv"))
    args = p.parse_args()
    ctx = mp.get_context("spawn")
    print(f"{'processes':>9} {'vocab':>6} {'steps':>5} {'ms/step':>8} {'epoch_s':>8} {'dense_B':>8} "
          f"{'sparse_B':>9} {'loopback_B':>10} {'accuracy':>8}")
    for world in args.np:
        results = ctx.Queue()
        mp.start_processes(worker, args=(world, free_port(), args, results), nprocs=world, join=True,
                           start_method="spawn")
        r = results.get()
        print(f"{r['world']:>9} {r['vocab']:>6} {r['steps']:>5} {r['ms']:>8.3f} {r['seconds']:>8.3f} "
              f"{r['dense']:>8.0f} {r['sparse']:>9.0f} {r['lo']:>10.0f} {r['accuracy']:>8.4f}")
    print("(per rank and step; sparse_B: rows sent + received, as gloo's sparse all-reduce gathers them)")


if __name__ == "__main__":
    main()
