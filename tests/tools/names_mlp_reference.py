#!/usr/bin/python3
"""The model of examples/names_mlp.cpp in PyTorch, for its reference dev loss.

    /usr/bin/python3 tests/tools/names_mlp_reference.py [--data examples/data/names.txt]
        [--epochs 10] [--dim 10] [--hidden 200] [--batch 32] [--lr 0.01] [--seed 0]

With its defaults, the data, split and hyper-parameters of names_mlp (whose
dim, hidden, batch and lr are constants at the top of examples/names_mlp.cpp;
--data, --epochs and --seed are flags of both): a name a line, the first 90%
of the lines train and the last 10% dev; a 3-character context ('.' = 0 pads
the start, a-z = 1..26; '.' also ends a name) -> Embedding(27, dim) -> flatten
-> Linear(3 dim, hidden) -> tanh -> Linear(hidden, 27) -> cross-entropy; Adam,
batches of `batch` shuffled each epoch, the learning rate following
CosineAnnealingLR over the epochs. Prints, per epoch, the mean
cross-entropy over all train and all dev examples. The random numbers (the
initial weights, the shuffles) are PyTorch's, not tapegrad's: the two runs
differ by that noise only.
"""

import argparse

import torch
from torch import nn

from reference import read_names, split_names

CONTEXT = 3


def build(names):
    xs, ys = [], []
    for name in names:
        context = [0] * CONTEXT
        for ch in name + ".":
            ix = 0 if ch == "." else ord(ch) - ord("a") + 1
            xs.append(context)
            ys.append(ix)
            context = context[1:] + [ix]
    return torch.tensor(xs), torch.tensor(ys)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", default="examples/data/names.txt")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--dim", type=int, default=10)
    p.add_argument("--hidden", type=int, default=200)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    train, dev = split_names(read_names(args.data))
    x_train, y_train = build(train)
    x_dev, y_dev = build(dev)
    print(f"data: {args.data}: {len(train) + len(dev)} names ({len(train)} train, {len(dev)} dev), "
          f"{len(x_train)} train and {len(x_dev)} dev examples")

    model = nn.Sequential(nn.Embedding(27, args.dim), nn.Flatten(), nn.Linear(CONTEXT * args.dim, args.hidden),
                          nn.Tanh(), nn.Linear(args.hidden, 27))
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.epochs)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x_train, y_train),
                                         batch_size=args.batch, shuffle=True)
    print(f"{'epoch':>5} {'lr':>9} {'train_loss':>10} {'dev_loss':>9}")
    for epoch in range(1, args.epochs + 1):
        lr = opt.param_groups[0]["lr"]
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        sched.step()
        with torch.no_grad():
            train_loss = nn.functional.cross_entropy(model(x_train), y_train).item()
            dev_loss = nn.functional.cross_entropy(model(x_dev), y_dev).item()
        print(f"{epoch:5d} {lr:9.6f} {train_loss:10.4f} {dev_loss:9.4f}")


if __name__ == "__main__":
    main()
