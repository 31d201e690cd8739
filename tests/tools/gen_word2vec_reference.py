#!/usr/bin/python3
"""Writes tests/data/word2vec_reference.json: the negative-sampling loss of
examples/word2vec.hpp and its gradients, computed by PyTorch, for
tests/test_word2vec.cpp.

Run with Debian's python3-torch:  /usr/bin/python3 tests/tools/gen_word2vec_reference.py

Each case has an input table, an output table, which rows make each example's
input vector, and for each example the word to predict and its negatives. The
loss of an example is -log sigmoid(<h, out[target]>) - sum_k log sigmoid(-<h, out[neg_k]>),
summed over the examples; the gradients of both tables are stored dense.
"""
import torch
import torch.nn.functional as F

from reference import arr, iarr, write

torch.manual_seed(2013)


def case(num_in, num_out, dim, bags, targets):
    w_in = torch.randn(num_in, dim, requires_grad=True)
    w_out = torch.randn(num_out, dim, requires_grad=True)
    flat = torch.tensor([r for bag in bags for r in bag])
    offsets = torch.tensor([0] + [len(b) for b in bags[:-1]]).cumsum(0)
    h = F.embedding_bag(flat, w_in, offsets, mode="mean")  # [P, dim]
    t = torch.tensor(targets)  # [P, 1 + K]
    scores = (F.embedding(t, w_out) * h.unsqueeze(1)).sum(-1)  # [P, 1 + K]
    sign = torch.ones(t.shape[1])
    sign[0] = -1
    loss = F.softplus(scores * sign).sum()
    loss.backward()
    return {
        "in": arr(w_in), "out": arr(w_out),
        "bags": bags, "targets": iarr(t),
        "scores": arr(scores), "loss": loss.item(),
        "grad_in": arr(w_in.grad), "grad_out": arr(w_out.grad),
    }


cases = {
    # skip-gram, word level: each example's input is one row; rows repeat
    # (word 3 is the center of two pairs; 2 and 5 are drawn more than once).
    "skipgram": case(7, 7, 4, [[1], [3], [3], [6]], [[2, 5, 0], [1, 2, 2], [4, 1, 6], [3, 0, 5]]),
    # bags: an input is the mean of rows (CBOW's context words, or a word's row
    # and its n-grams'), shared between examples.
    "bags": case(12, 12, 5, [[0, 7, 9], [2, 8, 9, 11], [0, 7, 9], [5]], [[3, 1, 6], [0, 4, 4], [2, 6, 1], [1, 5, 3]]),
}
write("word2vec_reference", cases)
