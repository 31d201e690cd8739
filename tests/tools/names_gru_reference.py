#!/usr/bin/python3
"""The model and training of examples/names_gru.cpp in PyTorch, for its reference dev loss and step time.

    /usr/bin/python3 tests/tools/names_gru_reference.py [--data examples/data/names.txt]
        [--epochs 10] [--seed 0] [--init FILE] [--bench-steps N]

With its defaults, the data, split, model and training of names_gru (whose
sizes and rates are constants at the top of examples/names_gru.cpp; --data,
--epochs and --seed are flags of both): a name a line, the first 90% train and
the last 10% dev. Each name is one sequence: '.' (0) then its letters (a-z =
1..26) in, its letters then '.' out; a batch is padded with '.' to its longest
name, and the padding is not scored. Embedding(27, EMBED) -> GRU(EMBED, HIDDEN,
batch_first) -> Linear(HIDDEN, 27); Adam (lr LR) with CosineAnnealingLR over
the epochs, gradients clipped to norm CLIP; batches of BATCH names shuffled each
epoch. Prints, per epoch, the learning rate, the mean training loss of the
epoch's batches and the cross-entropy over all dev characters (nats per
character, the measure names_mlp prints), then 20 sampled names.

--init FILE starts from the weights in FILE (`names_gru --init-out FILE`
writes the ones names_gru starts from; same names, same shapes). Without it
the weights are PyTorch's own draws from --seed with the same scheme (PyTorch's
defaults, which tapegrad's layers copy). The batch order is PyTorch's draws
either way.

--bench-steps N times N training steps on one thread (after 10 untimed ones)
on the first BATCH names and prints `step_ms: X cpu_ms: Y`: the median wall
time of a step and the CPU time per step; names_gru --bench-steps N does the
same. scripts/steptime runs both side by side.
"""

import argparse
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

from reference import read_names, split_names

VOCAB, EMBED, HIDDEN = 27, 16, 128
BATCH, LR, CLIP = 32, 5e-3, 1.0


class NamesGRU(nn.Module):
    """examples/names_gru.cpp's NamesGRU."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, EMBED)
        self.gru = nn.GRU(EMBED, HIDDEN, batch_first=True)
        self.head = nn.Linear(HIDDEN, VOCAB)

    def forward(self, ids, h=None):  # [B, T] -> [B, T, VOCAB], [1, B, HIDDEN]
        out, h_n = self.gru(self.embed(ids), h)
        return self.head(out), h_n


def batch_of(names):
    """x [B, T] ('.' then the letters, padded with '.'), y [B, T] (the letters then '.', padded with -1)."""
    steps = max(len(n) for n in names) + 1
    x = torch.zeros(len(names), steps, dtype=torch.long)
    y = torch.full((len(names), steps), -1, dtype=torch.long)
    for i, name in enumerate(names):
        ids = [ord(c) - ord("a") + 1 for c in name]
        x[i, 1:len(ids) + 1] = torch.tensor(ids, dtype=torch.long)
        y[i, :len(ids) + 1] = torch.tensor(ids + [0], dtype=torch.long)
    return x, y


def loss_on(model, x, y):
    """Mean cross-entropy over the scored positions (y >= 0)."""
    return F.cross_entropy(model(x)[0].reshape(-1, VOCAB), y.reshape(-1), ignore_index=-1)


def train_step(model, opt, x, y):
    loss = loss_on(model, x, y)
    opt.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), CLIP)
    opt.step()
    return loss.item()


def sample(model, gen):
    ids, h = [0], None
    with torch.no_grad():
        while len(ids) <= 30:
            logits, h = model(torch.tensor([[ids[-1]]]), h)
            nxt = torch.multinomial(torch.softmax(logits[0, 0], 0), 1, generator=gen).item()
            if nxt == 0:
                break
            ids.append(nxt)
    return "".join(chr(ord("a") + i - 1) for i in ids[1:])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", default="examples/data/names.txt")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--init", default="")
    p.add_argument("--bench-steps", type=int, default=0)
    args = p.parse_args()

    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    train, dev = split_names(read_names(args.data))
    x_dev, y_dev = batch_of(dev)
    print(f"data: {args.data}: {len(train) + len(dev)} names ({len(train)} train, {len(dev)} dev), "
          f"{sum(len(n) + 1 for n in train)} train and {sum(len(n) + 1 for n in dev)} dev characters")

    model = NamesGRU()
    if args.init:
        from safetensors_np import load
        tensors, _ = load(args.init)
        model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in tensors.items()})
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.epochs)

    if args.bench_steps:
        # Fixed shapes: the first BATCH names, over and over. The median wall time
        # of a step, and the process's CPU time per step.
        x, y = batch_of(train[:BATCH])
        for _ in range(10):
            train_step(model, opt, x, y)
        times = []
        cpu_start = time.process_time()
        for _ in range(args.bench_steps):
            start = time.perf_counter()
            train_step(model, opt, x, y)
            times.append(time.perf_counter() - start)
        cpu_ms = 1000 * (time.process_time() - cpu_start) / args.bench_steps
        print(f"step_ms: {1000 * statistics.median(times):.3f} cpu_ms: {cpu_ms:.3f}")
        return

    print(f"{'epoch':>5} {'lr':>9} {'train_loss':>10} {'dev_loss':>9}")
    for epoch in range(1, args.epochs + 1):
        lr = opt.param_groups[0]["lr"]
        losses = []
        for batch in torch.randperm(len(train)).split(BATCH):
            x, y = batch_of([train[i] for i in batch.tolist()])
            losses.append(train_step(model, opt, x, y))
        sched.step()
        with torch.no_grad():
            dev_loss = loss_on(model, x_dev, y_dev).item()
        print(f"{epoch:5d} {lr:9.6f} {sum(losses) / len(losses):10.4f} {dev_loss:9.4f}")
    gen = torch.Generator().manual_seed(args.seed)
    print("sampled:", " ".join(sample(model, gen) for _ in range(20)))


if __name__ == "__main__":
    main()
