#!/usr/bin/env python3
"""A rank that throws stops the whole run, with its message, and nothing hangs.

run_throw.py MPIRUN [MPIRUN FLAGS...] -- TEST_MPI: runs `MPIRUN ... -np 2 TEST_MPI
--throw-at 3` (rank 1 throws at its 3rd step while rank 0 waits in
sync_gradients) and checks that it ends within 60 s, with a non-zero status and
rank 1's message on the output.
"""
import subprocess
import sys
import time

split = sys.argv.index("--")
command = sys.argv[1:split] + ["-np", "2", sys.argv[split + 1], "--throw-at", "3"]
start = time.monotonic()
try:
    run = subprocess.run(command, capture_output=True, text=True, timeout=60)
except subprocess.TimeoutExpired:
    sys.exit("FAIL: the run hung: still going after 60 s: " + " ".join(command))
seconds = time.monotonic() - start
output = run.stdout + run.stderr
print(output)
print(f"status {run.returncode} after {seconds:.1f} s")
if run.returncode == 0:
    sys.exit("FAIL: a rank threw but the run ended with status 0")
if "test_mpi: rank 1: a deliberate failure at step 3; stopping all 2 ranks" not in output:
    sys.exit("FAIL: rank 1's message is not in the output")
# mpirun adds "MPI_ABORT was invoked on rank 1 ..." most of the time, but not
# always (its help message can be lost while the job is torn down): not checked.
print("ok: the run stopped with rank 1's error")
