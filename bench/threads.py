#!/usr/bin/env python3
"""Training on 1 thread and on more, side by side in one run, on the real corpus.

    bench/threads.py --build build [--tsv examples/data/spamassassin.tsv] [--threads 1,2] [--rounds 5]

BUILD is configured with -Dbench=true. Three parts, each alternating the thread
counts within every round so that they see the same machine load:

  steps   bench/step_tapegrad --threads N (and bench/step_libtorch, where built)
          for each model and optimizer on the corpus' ids (min-df 2): wall ms per
          step (the median over rounds of each run's median), the speed-up over
          the first count, peak RSS;
  epochs  examples/bow_classifier --mode embedding|linear --threads N on
          bench/export_split's split: the time of an epoch (the sum of its steps'
          times, from --metrics) and the test accuracy;
  jobs    the whole bow_classifier --mode embedding process against
          `fasttext supervised -lr 0.5 -thread N` + `fasttext predict`, where
          fasttext is installed (Debian package fasttext): wall s and accuracy;
  programs  the user programs that split each batch with nn::data_parallel:
          names_gpt --bench-steps 40 --threads N (the median step), and the whole
          digits_mlp and names_mlp processes on their bundled data (wall s).

OPENBLAS_NUM_THREADS is removed from the environment, so that OpenBLAS follows
tg::set_num_threads. Prints markdown tables (docs/benchmarks.md#threads shows a run).
"""
import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

CASES = [("embedding", "sgd"), ("embedding", "adam"), ("linear", "sgd"), ("linear", "adam")]


def run(cmd, timeout=900):
    """(stdout, wall s) of cmd, which must succeed."""
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "TAPEGRAD_NUM_THREADS")}
    start = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env,
                         text=True)
    out, err = p.communicate(timeout=timeout)
    wall = time.monotonic() - start
    if p.returncode != 0:
        sys.exit(f"threads.py: {' '.join(cmd)} failed ({p.returncode}):\n{err[-800:]}")
    return out, wall


def peak_rss_mb(cmd):
    """Peak RSS of one run of cmd, from GNU time (/usr/bin/time -f %M), or None."""
    if not os.path.exists("/usr/bin/time"):
        return None
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "TAPEGRAD_NUM_THREADS")}
    r = subprocess.run(["/usr/bin/time", "-f", "RSS_KB %M"] + cmd, capture_output=True, text=True, env=env)
    line = [l for l in r.stderr.splitlines() if l.startswith("RSS_KB ")]
    return int(line[-1].split()[1]) / 1024 if line else None


def ratio(base, x):
    return f"{base / x:.2f}x" if x > 0 else "-"


def steps_part(args, ids, threads):
    systems = [("tapegrad", os.path.join(args.build, "bench", "step_tapegrad"))]
    libtorch = os.path.join(args.build, "bench", "step_libtorch")
    if os.path.exists(libtorch):
        systems.append(("libtorch", libtorch))
    rows = []
    for model, optim in CASES:
        for system, exe in systems:
            times = {n: [] for n in threads}
            for r in range(args.rounds):
                for n in (threads if r % 2 == 0 else threads[::-1]):
                    cmd = [exe, "--ids", ids, "--model", model, "--optim", optim, "--threads", str(n),
                           "--warmup", "8", "--repeats", "5", "--target-ms", "300"]
                    out, _ = run(cmd)
                    result = json.loads(next(l for l in out.splitlines() if l.startswith("RESULT "))[7:])
                    times[n].append(result["ms_per_step"])
            rss = {n: peak_rss_mb([exe, "--ids", ids, "--model", model, "--optim", optim, "--threads", str(n),
                                   "--warmup", "2", "--repeats", "1", "--target-ms", "0"]) for n in threads}
            med = {n: statistics.median(times[n]) for n in threads}
            rows.append([f"{model} + {optim}", system] +
                        [f"{med[n]:.3f}" for n in threads] +
                        [ratio(med[threads[0]], med[n]) for n in threads[1:]] +
                        [" / ".join(f"{rss[n]:.0f}" if rss[n] else "-" for n in threads)])
            print(f"steps: {rows[-1]}", file=sys.stderr)
    head = ["step", "system"] + [f"ms/step, {n} thr" for n in threads] + \
           [f"{n} thr speed-up" for n in threads[1:]] + ["peak RSS MB (" + " / ".join(map(str, threads)) + ")"]
    return head, rows


def epoch_times(metrics_path):
    """{epoch: seconds} from a bow_classifier --metrics CSV (the sum of its steps' ms)."""
    per = {}
    with open(metrics_path) as f:
        for row in csv.DictReader(f):
            if row["kind"] == "step":
                per[int(row["epoch"])] = per.get(int(row["epoch"]), 0.0) + float(row["ms"]) / 1000
    return per


def accuracy(out, mode):
    return float([l.split() for l in out.splitlines() if l.startswith(mode + " ")][-1][4])


def epochs_part(args, split_dir, threads, tmp):
    bow = os.path.join(args.build, "examples", "bow_classifier")
    rows = []
    for mode in ("embedding", "linear"):
        epoch_s = {n: [] for n in threads}
        acc = {}
        for r in range(args.rounds):
            for n in (threads if r % 2 == 0 else threads[::-1]):
                metrics = os.path.join(tmp, f"metrics-{mode}-{n}.csv")
                out, _ = run([bow, "--data", os.path.join(split_dir, "train.tsv"), "--test",
                              os.path.join(split_dir, "test.tsv"), "--mode", mode, "--threads", str(n),
                              "--metrics", metrics])
                epoch_s[n] += list(epoch_times(metrics).values())
                acc[n] = accuracy(out, mode)
        med = {n: statistics.median(epoch_s[n]) for n in threads}
        rows.append([mode] + [f"{med[n]:.3f}" for n in threads] + [ratio(med[threads[0]], med[n]) for n in threads[1:]] +
                    [" / ".join(f"{acc[n]:.4f}" for n in threads)])
        print(f"epochs: {rows[-1]}", file=sys.stderr)
    head = ["bow_classifier --mode"] + [f"s/epoch, {n} thr" for n in threads] + \
           [f"{n} thr speed-up" for n in threads[1:]] + ["test accuracy (" + " / ".join(map(str, threads)) + ")"]
    return head, rows


def jobs_part(args, split_dir, threads, tmp):
    bow = os.path.join(args.build, "examples", "bow_classifier")
    fasttext = shutil.which("fasttext")
    path = lambda name: os.path.join(split_dir, name)
    with open(path("test.tsv")) as f:
        truth = [line.split("\t", 1)[0] for line in f]
    jobs = []
    for n in threads:
        jobs.append((f"bow_classifier --mode embedding --threads {n}", "bow", n))
        if fasttext:
            jobs.append((f"fasttext supervised -lr 0.5 -thread {n}", "fasttext", n))
    walls = {j[0]: [] for j in jobs}
    acc = {}
    for r in range(args.rounds):
        for name, kind, n in (jobs if r % 2 == 0 else jobs[::-1]):
            if kind == "bow":
                out, wall = run([bow, "--data", path("train.tsv"), "--test", path("test.tsv"), "--mode", "embedding",
                                 "--threads", str(n)])
                acc[name] = accuracy(out, "embedding")
            else:
                model = os.path.join(tmp, f"fasttext-{n}")
                _, w1 = run([fasttext, "supervised", "-input", path("train.ft"), "-output", model, "-lr", "0.5",
                             "-thread", str(n), "-verbose", "0"])
                out, w2 = run([fasttext, "predict", model + ".bin", path("test.ft")])
                wall = w1 + w2
                predicted = [l.strip().replace("__label__", "") for l in out.splitlines()]
                acc[name] = sum(p == t for p, t in zip(predicted, truth)) / len(truth)
            walls[name].append(wall)
    rows = [[name, f"{statistics.median(walls[name]):.2f}", f"{acc[name]:.4f}"] for name, _, _ in jobs]
    for row in rows:
        print(f"jobs: {row}", file=sys.stderr)
    return ["whole process (train + test)", "wall s (median)", "test accuracy"], rows


def programs_part(args, threads):
    exe = lambda name: os.path.join(args.build, "examples", name)
    cells = [("names_gpt step, ms", [exe("names_gpt"), "--bench-steps", "40"]),
             ("digits_mlp process, s", [exe("digits_mlp")]),
             ("names_mlp process, s", [exe("names_mlp")])]
    rows = []
    for name, cmd in cells:
        times = {n: [] for n in threads}
        for r in range(args.rounds):
            for n in (threads if r % 2 == 0 else threads[::-1]):
                out, wall = run(cmd + ["--threads", str(n)])
                step = [l.split()[1] for l in out.splitlines() if l.startswith("step_ms:")]
                times[n].append(float(step[0]) if step else wall)
        med = {n: statistics.median(times[n]) for n in threads}
        rss = {n: peak_rss_mb(cmd + ["--threads", str(n)]) for n in threads}
        rows.append([name] + [f"{med[n]:.3f}" for n in threads] + [ratio(med[threads[0]], med[n]) for n in threads[1:]] +
                    [" / ".join(f"{rss[n]:.0f}" if rss[n] else "-" for n in threads)])
        print(f"programs: {rows[-1]}", file=sys.stderr)
    head = ["program (nn::data_parallel)"] + [f"{n} thr" for n in threads] + \
           [f"{n} thr speed-up" for n in threads[1:]] + ["peak RSS MB (" + " / ".join(map(str, threads)) + ")"]
    return head, rows


def table(head, rows):
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", required=True)
    p.add_argument("--tsv", default=os.path.join(root, "examples", "data", "spamassassin.tsv"))
    p.add_argument("--threads", default="1,2", help="thread counts, the first is the baseline")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--skip", default="", help="parts to leave out: steps,epochs,jobs,programs")
    args = p.parse_args()
    threads = [int(n) for n in args.threads.split(",")]
    skip = set(filter(None, args.skip.split(",")))
    with tempfile.TemporaryDirectory(prefix="tapegrad-threads-") as tmp:
        ids = os.path.join(tmp, "corpus.ids")
        subprocess.run([os.path.join(args.build, "bench", "export_ids"), "--tsv", args.tsv, "--min-df", "2", "--seed",
                        "0", ids], check=True, capture_output=True)
        split_dir = os.path.join(tmp, "split")
        os.makedirs(split_dir)
        subprocess.run([os.path.join(args.build, "bench", "export_split"), "--tsv", args.tsv, split_dir], check=True,
                       capture_output=True)
        print(f"bench/threads.py --threads {args.threads} --rounds {args.rounds} on {os.path.basename(args.tsv)}, "
              f"{os.cpu_count()} cores\n")
        if "steps" not in skip:
            print(table(*steps_part(args, ids, threads)) + "\n")
        if "epochs" not in skip:
            print(table(*epochs_part(args, split_dir, threads, tmp)) + "\n")
        if "jobs" not in skip:
            print(table(*jobs_part(args, split_dir, threads, tmp)) + "\n")
        if "programs" not in skip:
            print(table(*programs_part(args, threads)))


if __name__ == "__main__":
    main()
