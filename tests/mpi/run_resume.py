#!/usr/bin/env python3
"""bow_classifier --distributed: a run stopped after epoch 1 resumes from rank 0's
checkpoint on another world size and ends where a run that never stopped ends.

run_resume.py MPIRUN -- BOW_CLASSIFIER: 3 epochs on 2 processes, against 1 epoch
on 2 processes (--save), then 2 more on 3 processes (--load), and against 3
epochs on one process without MPI; batch 36 (it splits over 1, 2 and 3). Every
epoch's train and test loss must agree within 1e-4 and the accuracy within 0.3
points (on this data they agree to the printed digits).

run_resume.py --shard-table MPIRUN -- BOW_CLASSIFIER: the same with the table's
rows split across the processes (--shard-table): the checkpoint rank 0 writes
holds the whole table and the optimizer's state for all of it, which 3
processes split again, and one process without MPI also resumes from it.
"""
import os
import subprocess
import sys
import tempfile

split = sys.argv.index("--")
shard = sys.argv[1] == "--shard-table"
mpirun, bow = sys.argv[1 + shard:split], sys.argv[split + 1]
common = ["--mode", "embedding", "--batch", "36", "--threads", "1"]
distributed = ["--distributed"] + (["--shard-table"] if shard else [])


def epochs(command):
    run = subprocess.run(command, capture_output=True, text=True, timeout=100)
    if run.returncode != 0:
        sys.exit(f"FAIL: {' '.join(command)} ended with status {run.returncode}:\n{run.stdout}{run.stderr}")
    rows = {}
    for line in run.stdout.splitlines():
        f = line.split()
        if len(f) >= 6 and f[0] == "embedding" and f[1].isdigit():
            rows[int(f[1])] = (float(f[2]), float(f[3]), float(f[4]))  # train_loss, test_loss, accuracy
    return rows


with tempfile.TemporaryDirectory() as tmp:
    ckpt = os.path.join(tmp, "bow.ckpt")
    straight = epochs(mpirun + ["-np", "2", bow, "--epochs", "3"] + distributed + common)
    first = epochs(mpirun + ["-np", "2", bow, "--epochs", "1", "--save", ckpt] + distributed + common)
    rest = epochs(mpirun + ["-np", "3", bow, "--epochs", "2", "--load", ckpt] + distributed + common)
    alone = epochs([bow, "--epochs", "3"] + common)
    alone_rest = epochs([bow, "--epochs", "2", "--load", ckpt] + common)
resumed, resumed_alone = {**first, **rest}, {**first, **alone_rest}
print("epoch: straight on 2 | 1 on 2, then 2 on 3 | one process without MPI | 1 on 2, then 2 on one",
      "(train_loss, test_loss, accuracy)", "--shard-table" if shard else "")
for e in (1, 2, 3):
    print(e, straight.get(e), resumed.get(e), alone.get(e), resumed_alone.get(e))
for name, run in (("resumed", resumed), ("one process", alone), ("resumed on one process", resumed_alone)):
    for e in (1, 2, 3):
        a, b = straight.get(e), run.get(e)
        if a is None or b is None:
            sys.exit(f"FAIL: epoch {e} missing from a run")
        if abs(a[0] - b[0]) > 1e-4 or abs(a[1] - b[1]) > 1e-4 or abs(a[2] - b[2]) > 0.003:
            sys.exit(f"FAIL: epoch {e}: {name} {b} differs from straight {a}")
print("ok: the same epochs on 2 processes, resumed on 3, on one, and resumed on one")
