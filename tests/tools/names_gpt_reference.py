#!/usr/bin/python3
"""The model and training of examples/names_gpt.cpp in PyTorch, for its reference dev loss and step time.

    /usr/bin/python3 tests/tools/names_gpt_reference.py [--data examples/data/names.txt]
        [--epochs 10] [--seed 0] [--init FILE] [--bench-steps N]

With its defaults, the data, split, model and training of names_gpt (whose
sizes and rates are constants at the top of examples/names_gpt.cpp; --data,
--epochs and --seed are flags of both): a name a line, the first 90% train and
the last 10% dev. Each name is one sequence: '.' (0) then its letters (a-z =
1..26) in, its letters then '.' out, padded to CONTEXT positions; the padding
is not scored. A GPT of LAYERS pre-LayerNorm blocks (causal self-attention with
HEADS heads, an MLP with GELU) over token and position embeddings; AdamW, the
learning rate warmed up linearly over WARMUP steps and then decayed along a
cosine to MIN_LR, gradients clipped to norm 1; batches of BATCH names shuffled
each epoch. Prints, per epoch, the learning rate of the last step, the mean
training loss of the epoch's batches and the cross-entropy over all dev
characters (nats per character, the measure names_mlp prints), then 20 sampled
names.

--init FILE starts from the weights in FILE (`names_gpt --init-out FILE`
writes the ones names_gpt starts from; same names, same shapes). Without it
the weights are PyTorch's own draws from --seed with the same scheme (PyTorch's
defaults, which tapegrad's layers copy). The batch order and dropout masks are
PyTorch's draws either way.

--bench-steps N times N training steps on one thread (after 10 untimed ones)
and prints `step_ms: X cpu_ms: Y`: the median wall time of a step and the
CPU time per step; names_gpt --bench-steps N does the same.
scripts/names_gpt_steptime runs both side by side.

CausalSelfAttention, TransformerBlock and GPT are imported by
gen_transformer_reference.py, which checks the attention against
nn.MultiheadAttention and writes the reference numbers of tests/test_transformer.cpp.
"""

import argparse
import math
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

from reference import read_names, split_names

CONTEXT, EMBED, HEADS, LAYERS, DROPOUT = 16, 64, 4, 2, 0.1
BATCH, LR, MIN_LR, WARMUP, WEIGHT_DECAY, CLIP = 32, 3e-3, 3e-4, 100, 0.1, 1.0
VOCAB = 27


class CausalSelfAttention(nn.Module):
    """nn/attention.cpp's CausalSelfAttention, line for line."""

    def __init__(self, embed_dim, num_heads, dropout=0.0):
        super().__init__()
        self.num_heads, self.dropout = num_heads, dropout
        self.query = nn.Linear(embed_dim, embed_dim)
        self.key = nn.Linear(embed_dim, embed_dim)
        self.value = nn.Linear(embed_dim, embed_dim)
        self.proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, x):
        B, T, C = x.shape
        H = self.num_heads
        d = C // H

        def heads(layer):
            return layer(x).reshape(B, T, H, d).permute(0, 2, 1, 3)

        q, k, v = heads(self.query), heads(self.key), heads(self.value)
        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
        future = torch.triu(torch.ones(T, T), 1)
        scores = scores.masked_fill(future.bool(), float("-inf"))
        weights = F.dropout(torch.softmax(scores, -1), self.dropout, self.training)
        y = torch.matmul(weights, v).permute(0, 2, 1, 3).reshape(B, T, C)
        return F.dropout(self.proj(y), self.dropout, self.training)


class TransformerBlock(nn.Module):
    """nn/attention.cpp's TransformerBlock."""

    def __init__(self, embed_dim, num_heads, dropout=0.0):
        super().__init__()
        self.dropout = dropout
        self.ln1 = nn.LayerNorm(embed_dim)
        self.attn = CausalSelfAttention(embed_dim, num_heads, dropout)
        self.ln2 = nn.LayerNorm(embed_dim)
        self.fc1 = nn.Linear(embed_dim, 4 * embed_dim)
        self.fc2 = nn.Linear(4 * embed_dim, embed_dim)

    def forward(self, x):
        h = x + self.attn(self.ln1(x))
        mlp = self.fc2(F.gelu(self.fc1(self.ln2(h))))
        return h + F.dropout(mlp, self.dropout, self.training)


class GPT(nn.Module):
    """examples/names_gpt.cpp's NamesGPT: token and position embeddings, blocks, LayerNorm, head."""

    def __init__(self, vocab, context, embed_dim, num_heads, layers, dropout=0.0):
        super().__init__()
        self.tok = nn.Embedding(vocab, embed_dim)
        self.pos = nn.Embedding(context, embed_dim)
        self.blocks = nn.Sequential(*[TransformerBlock(embed_dim, num_heads, dropout) for _ in range(layers)])
        self.ln = nn.LayerNorm(embed_dim)
        self.head = nn.Linear(embed_dim, vocab)

    def forward(self, ids):  # [B, T] -> [B, T, vocab]
        T = ids.shape[1]
        h = self.tok(ids) + self.pos(torch.arange(T))
        return self.head(self.ln(self.blocks(h)))


def encode(names):
    """x [N, CONTEXT]: '.' then the letters, padded with 0; y: the letters then '.', padded with -1."""
    x = torch.zeros(len(names), CONTEXT, dtype=torch.long)
    y = torch.full((len(names), CONTEXT), -1, dtype=torch.long)
    for i, name in enumerate(names):
        ids = [ord(c) - ord("a") + 1 for c in name]
        x[i, 1:len(ids) + 1] = torch.tensor(ids, dtype=torch.long)
        y[i, :len(ids) + 1] = torch.tensor(ids + [0], dtype=torch.long)
    return x, y


def loss_on(model, x, y):
    """Mean cross-entropy over the scored positions (y >= 0)."""
    logits = model(x).reshape(-1, VOCAB)
    keep = (y.reshape(-1) >= 0).nonzero().squeeze(1)
    return F.cross_entropy(logits.index_select(0, keep), y.reshape(-1).index_select(0, keep))


def lr_at(step, total):
    """Linear warm-up to LR over WARMUP steps, then a cosine down to MIN_LR at step `total`."""
    if step < WARMUP:
        return LR * (step + 1) / WARMUP
    progress = (step - WARMUP) / max(1, total - WARMUP)
    return MIN_LR + 0.5 * (LR - MIN_LR) * (1.0 + math.cos(math.pi * progress))


def train_step(model, opt, x, y, lr):
    for group in opt.param_groups:
        group["lr"] = lr
    loss = loss_on(model, x, y)
    opt.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), CLIP)
    opt.step()
    return loss.item()


def sample(model, gen):
    ids = [0]
    with torch.no_grad():
        while len(ids) < CONTEXT:
            probs = torch.softmax(model(torch.tensor([ids]))[0, -1], 0)
            nxt = torch.multinomial(probs, 1, generator=gen).item()
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
    x_train, y_train = encode(train)
    x_dev, y_dev = encode(dev)
    chars = lambda y: int((y >= 0).sum())
    print(f"data: {args.data}: {len(train) + len(dev)} names ({len(train)} train, {len(dev)} dev), "
          f"{chars(y_train)} train and {chars(y_dev)} dev characters")

    model = GPT(VOCAB, CONTEXT, EMBED, HEADS, LAYERS, DROPOUT)
    if args.init:
        from safetensors_np import load
        tensors, _ = load(args.init)
        model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in tensors.items()})
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)

    if args.bench_steps:
        # Fixed shapes: the first BATCH names, over and over. The median wall time
        # of a step, and the process's CPU time per step.
        x, y = x_train[:BATCH], y_train[:BATCH]
        total = 10 + args.bench_steps
        for step in range(10):
            train_step(model, opt, x, y, lr_at(step, total))
        times = []
        cpu_start = time.process_time()
        for step in range(10, total):
            start = time.perf_counter()
            train_step(model, opt, x, y, lr_at(step, total))
            times.append(time.perf_counter() - start)
        cpu_ms = 1000 * (time.process_time() - cpu_start) / args.bench_steps
        print(f"step_ms: {1000 * statistics.median(times):.3f} cpu_ms: {cpu_ms:.3f}")
        return

    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x_train, y_train), batch_size=BATCH,
                                         shuffle=True)
    total = args.epochs * len(loader)
    step = 0
    print(f"{'epoch':>5} {'lr':>9} {'train_loss':>10} {'dev_loss':>9}")
    for epoch in range(1, args.epochs + 1):
        model.train()
        losses = []
        for x, y in loader:
            lr = lr_at(step, total)
            losses.append(train_step(model, opt, x, y, lr))
            step += 1
        model.eval()
        with torch.no_grad():
            dev_loss = loss_on(model, x_dev, y_dev).item()
        print(f"{epoch:5d} {lr:9.6f} {sum(losses) / len(losses):10.4f} {dev_loss:9.4f}")
    gen = torch.Generator().manual_seed(args.seed)
    print("sampled:", " ".join(sample(model, gen) for _ in range(20)))


if __name__ == "__main__":
    main()
