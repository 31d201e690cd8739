#!/usr/bin/python3
"""Writes tests/data/fasttext_subwords.json: fastText's own character n-grams and
their row numbers for a few words, for tests/test_word2vec.cpp to compare with
examples/word2vec.hpp's char_ngrams and subword_rows.

Run with Debian's python3-fasttext:  /usr/bin/python3 tests/tools/gen_fasttext_subwords.py

A model is trained for one epoch on the words themselves (minCount 1, the default
3- to 6-grams in 2,000,000 buckets), then asked for each word's subwords:
get_subwords returns the n-grams and their rows, the word's own row first; an
n-gram's row is nwords + hash % bucket. Words outside the vocabulary get only
their n-grams.
"""
import json
import os
import tempfile

import fasttext

WORDS = ["where", "the", "a", "word2vec", "subword", "naïve", "café"]
OUTSIDE = ["unseen", "zürich"]

with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "words.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write(" ".join(WORDS) + "\n")
    model = fasttext.train_unsupervised(path, model="skipgram", minCount=1, minn=3, maxn=6,
                                        bucket=2000000, dim=4, epoch=1, thread=1, verbose=0)
nwords = len(model.words)
cases = []
for w in WORDS + OUTSIDE:
    grams, rows = model.get_subwords(w)
    inside = w in WORDS
    cases.append({
        "word": w,
        "in_vocabulary": inside,
        # the n-grams, without the word itself (get_subwords lists it first)
        "ngrams": list(grams[1:] if inside else grams),
        "buckets": [int(r) - nwords for r in (rows[1:] if inside else rows)],
    })
out = os.path.join(os.path.dirname(__file__), "..", "data", "fasttext_subwords.json")
with open(out, "w", encoding="utf-8") as f:
    json.dump({"generator": "tests/tools/gen_fasttext_subwords.py", "minn": 3, "maxn": 6,
               "bucket": 2000000, "cases": cases}, f, ensure_ascii=False, indent=1)
print("wrote", os.path.normpath(out))
