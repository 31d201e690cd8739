#!/usr/bin/python3
"""The model of examples/digits_cnn.cpp in PyTorch, for its reference test accuracy and step time.

    /usr/bin/python3 tests/tools/digits_cnn_reference.py [--data examples/data/digits.csv] [--epochs 20] [--seed 0]
        [--bench-steps N]

The same data and split (tapegrad's train_test_split: a Fisher-Yates shuffle of
the positions with std::mt19937_64 seeded with --seed, the first 20% test),
the same layers (Conv2d(1, 16, 3, padding=1) -> BatchNorm2d -> ReLU ->
MaxPool2d(2) -> Conv2d(16, 32, 3, padding=1) -> BatchNorm2d -> ReLU ->
MaxPool2d(2) -> Flatten -> Dropout(0.2) -> Linear(128, 10)), Adam (lr 2e-3)
with CosineAnnealingLR over the epochs, batches of 32 shuffled each epoch, on
one thread. The random numbers (initial weights, shuffles, dropout) are
PyTorch's: the two runs differ by that noise. Prints digits_cnn's table.

--bench-steps N times N training steps (after 10 untimed ones) on the first 32
training images and prints `step_ms: X cpu_ms: Y`: the median wall time of a
step and the CPU time per step; digits_cnn --bench-steps N does the same.
scripts/steptime runs both side by side.
"""

import argparse
import statistics
import time

import torch
from torch import nn

MASK64 = (1 << 64) - 1


class MT19937_64:
    """std::mt19937_64, for tapegrad's split."""

    def __init__(self, seed):
        self.mt = [seed & MASK64]
        for i in range(1, 312):
            prev = self.mt[-1]
            self.mt.append((6364136223846793005 * (prev ^ (prev >> 62)) + i) & MASK64)
        self.index = 312

    def __call__(self):
        if self.index >= 312:
            for i in range(312):
                y = (self.mt[i] & 0xFFFFFFFF80000000) | (self.mt[(i + 1) % 312] & 0x7FFFFFFF)
                self.mt[i] = self.mt[(i + 156) % 312] ^ (y >> 1) ^ (0xB5026F5AA96619E9 if y & 1 else 0)
            self.index = 0
        y = self.mt[self.index]
        self.index += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        y ^= y >> 43
        return y & MASK64


def uniform_below(rng, bound):
    threshold = (-bound) % bound  # 2^64 mod bound
    x = rng()
    while x < threshold:
        x = rng()
    return x % bound


def train_test_split(n, test_fraction, seed):
    """data/split.cpp's train_test_split: (train, test) positions."""
    order = list(range(n))
    rng = MT19937_64(seed)
    for i in range(n, 1, -1):
        j = uniform_below(rng, i)
        order[i - 1], order[j] = order[j], order[i - 1]
    import math
    n_test = int(math.ceil(test_fraction * n - 1e-9))
    return order[n_test:], order[:n_test]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", default="examples/data/digits.csv")
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bench-steps", type=int, default=0)
    args = p.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)

    rows = [line.split(",") for line in open(args.data).read().splitlines()[1:] if line.strip()]
    features = torch.tensor([[float(v) for v in r[:-1]] for r in rows]) / 16.0
    labels = torch.tensor([int(float(r[-1])) for r in rows])
    images = features.reshape(-1, 1, 8, 8)
    train, test = train_test_split(len(rows), 0.2, args.seed)
    train, test = torch.tensor(train), torch.tensor(test)

    model = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Dropout(0.2), nn.Linear(128, 10))
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.epochs)
    loss_fn = nn.CrossEntropyLoss()

    def train_step(batch):
        loss = loss_fn(model(images[batch]), labels[batch])
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    if args.bench_steps:
        # Fixed shapes: the first 32 training images, over and over. The median
        # wall time of a step, and the process's CPU time per step.
        batch = train[:32]
        model.train()
        for _ in range(10):
            train_step(batch)
        times = []
        cpu_start = time.process_time()
        for _ in range(args.bench_steps):
            start = time.perf_counter()
            train_step(batch)
            times.append(time.perf_counter() - start)
        cpu_ms = 1000 * (time.process_time() - cpu_start) / args.bench_steps
        print(f"step_ms: {1000 * statistics.median(times):.3f} cpu_ms: {cpu_ms:.3f}")
        return

    print("%5s %9s %10s %9s %8s %8s" % ("epoch", "lr", "train_loss", "test_loss", "accuracy", "ms/step"))
    for epoch in range(1, args.epochs + 1):
        lr = opt.param_groups[0]["lr"]
        model.train()
        total, ms, steps = 0.0, 0.0, 0
        for batch in train[torch.randperm(len(train))].split(32):
            start = time.perf_counter()
            total += train_step(batch) * len(batch)
            ms += (time.perf_counter() - start) * 1e3
            steps += 1
        sched.step()
        model.eval()
        with torch.no_grad():
            logits = model(images[test])
            test_loss = loss_fn(logits, labels[test]).item()
            accuracy = (logits.argmax(1) == labels[test]).float().mean().item()
        print("%5d %9.6f %10.4f %9.4f %8.4f %8.3f" % (epoch, lr, total / len(train), test_loss, accuracy, ms / steps))


if __name__ == "__main__":
    main()
