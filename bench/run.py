#!/usr/bin/env python3
"""Runs the step benchmarks of tapegrad, PyTorch and libtorch side by side, each
cell's floor (what this machine's memory bandwidth and sgemm throughput allow),
the end-to-end job against fastText, the micro-benchmarks, prints one table and
writes bench/RESULTS.md.

Called by ./scripts/bench (which builds first); standard library only, so any
python3 runs it. PyTorch runs under --python (Debian's /usr/bin/python3).

Every (corpus, path, optimizer) case runs the three systems one after another,
each in its own process (peak RSS is that process's ru_maxrss), in an order that
rotates from case to case, so that a burst of load on the machine does not always
hit the same system. Ratios compare runs made seconds apart.
"""
import argparse
import datetime
import json
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import threading
import time

SYSTEMS = ["tapegrad", "pytorch", "libtorch"]
# libtorch again with its gradients reset to undefined instead of zeroed by
# optimizer.zero_grad(): run for the SGD cells, where that choice matters most.
RESET = "libtorch-reset"
ALL_SYSTEMS = SYSTEMS + [RESET]
CASES = [("embedding", "sgd"), ("embedding", "adam"), ("linear", "sgd"), ("linear", "adam")]
SCALING_VOCABS = [1_000, 10_000, 100_000, 1_000_000]
# The real corpus (SpamAssassin) at two vocabulary cut-offs: every word, and the
# words in at least two documents (bow_classifier's default). These are the
# main rows; the synthetic ones are the vocabulary scaling.
REAL_MIN_DF = [1, 2]
REAL = [f"spamassassin-df{d}" for d in REAL_MIN_DF]
DIM, BATCH, FLOAT = 64, 32, 4
# The process's CPU time per step (all threads): on a shared machine it leaves out
# the time spent waiting for a core. Wall time is kept in RESULTS.json.
METRIC = "cpu_ms_per_step"
# TAPEGRAD_NUM_THREADS: the examples otherwise take every core (examples/flags.hpp).
ENV_ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                  "TAPEGRAD_NUM_THREADS": "1"}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def run_measured(cmd, timeout):
    """Runs cmd; returns (exit status, stdout, stderr, peak RSS in kB from wait4)."""
    env = dict(os.environ, **ENV_ONE_THREAD)
    with open(os.devnull, "rb") as devnull:
        p = subprocess.Popen(cmd, stdin=devnull, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    deadline = time.monotonic() + timeout
    out, err = [], []
    # Read both pipes without deadlocking; they are small.
    readers = [threading.Thread(target=lambda f=f, acc=acc: acc.append(f.read())) for f, acc in
               ((p.stdout, out), (p.stderr, err))]
    for r in readers:
        r.start()
    while True:
        pid, status, usage = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            p.kill()
            pid, status, usage = os.wait4(p.pid, 0)
            err.append(f"\nkilled after {timeout} s")
            break
        time.sleep(0.02)
    for r in readers:
        r.join()
    p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, "".join(out), "".join(err), usage.ru_maxrss


# ------------------------------------------------------------------- corpora

def export(args, name, options):
    path = os.path.join(args.data, name + ".ids")
    cmd = [os.path.join(args.build, "bench", "export_ids")] + options + [path]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"export_ids failed: {' '.join(cmd)}\n{r.stderr}")
    stats = json.loads(r.stdout.strip().splitlines()[-1])
    stats.update(name=name, path=path, source=" ".join(options))
    return stats


def make_corpora(args):
    os.makedirs(args.data, exist_ok=True)
    corpora = []
    for v in SCALING_VOCABS:
        corpora.append(export(args, f"synthetic-{v}", ["--synthetic", "--vocab", str(v), "--docs", "4096",
                                                       "--tokens", "160", "--seed", "0"]))
    if args.tsv:
        for d in REAL_MIN_DF:
            corpora.append(export(args, f"spamassassin-df{d}", ["--tsv", args.tsv, "--min-df", str(d), "--seed", "0"]))
    return corpora


def is_real(corpus):
    return not corpus["name"].startswith("synthetic")


def ordered_corpora(corpora):
    """The real corpus first (the main rows), then the synthetic ones by V."""
    return [c for c in corpora if is_real(c)] + sorted((c for c in corpora if not is_real(c)), key=lambda c: c["vocab"])


# --------------------------------------------------------------------- runs

def command(args, system, corpus, model, optim, counts):
    opts = ["--ids", corpus["path"], "--model", model, "--optim", optim] + counts
    if system == "tapegrad":
        return [os.path.join(args.build, "bench", "step_tapegrad")] + opts
    if system == "libtorch":
        return [os.path.join(args.build, "bench", "step_libtorch")] + opts
    if system == RESET:
        return [os.path.join(args.build, "bench", "step_libtorch")] + opts + ["--zero-grad", "none"]
    return [args.python, os.path.join(args.source, "bench", "step_pytorch.py")] + opts


def counts_for(args, system, corpus, model, optim):
    # At V = 1M a linear step multiplies [32, 1M] by [1M, 64] twice and updates a
    # 64M-float weight, and libtorch's embedding + Adam (dense gradient, dense Adam)
    # updates 3 x 64M floats: a second or so per step here, so few steps, K = 1.
    heavy = model == "linear" or (system == "libtorch" and optim == "adam")
    if heavy and corpus["vocab"] >= 1_000_000:
        return ["--warmup", "2", "--repeats", "3", "--target-ms", "0"]
    if args.quick:
        return ["--warmup", "4", "--repeats", "3", "--target-ms", "100"]
    return ["--warmup", "8", "--repeats", "5", "--target-ms", "300"]


def available_peers(args):
    peers = {"tapegrad": None}
    r = subprocess.run([args.python, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
    peers["pytorch"] = None if r.returncode == 0 else f"{args.python} cannot import torch (python3-torch)"
    lt = os.path.join(args.build, "bench", "step_libtorch")
    peers["libtorch"] = None if os.path.exists(lt) else "step_libtorch was not built (libtorch-dev not found)"
    return peers


def run_steps(args, corpora, peers):
    plan = []
    rotation = 0
    for corpus in ordered_corpora(corpora):
        for model, optim in CASES:
            systems = SYSTEMS[rotation % 3:] + SYSTEMS[:rotation % 3]
            if optim == "sgd":
                systems = systems + [RESET]
            rotation += 1
            for _ in range(args.rounds):
                for system in systems:
                    if peers[system if system != RESET else "libtorch"] is None:
                        plan.append((corpus, model, optim, system))
    results = []
    for i, (corpus, model, optim, system) in enumerate(plan, 1):
        cmd = command(args, system, corpus, model, optim, counts_for(args, system, corpus, model, optim))
        status, out, err, rss = run_measured(cmd, args.timeout)
        line = next((l for l in out.splitlines() if l.startswith("RESULT ")), None)
        label = f"[{i}/{len(plan)}] {corpus['name']:<18} {model:<9} {optim:<4} {system:<8}"
        if status != 0 or line is None:
            log(f"{label} FAILED ({status}): {err.strip()[-400:]}")
            results.append(dict(corpus=corpus["name"], model=model, optim=optim, system=system, failed=err.strip()[-400:]))
            continue
        r = json.loads(line[len("RESULT "):])
        r.update(corpus=corpus["name"], system=system, rss_maxrss_kb=rss, corpus_bytes=os.path.getsize(corpus["path"]),
                 command=" ".join(shlex.quote(c) for c in cmd))
        log(f"{label} {r[METRIC]:9.3f} ms/step CPU, {r['ms_per_step']:9.3f} wall (K={r['steps_per_repeat']}), "
            f"peak RSS {rss / 1024:.0f} MB")
        results.append(r)
    return results


def merge_rounds(results):
    """One entry per (corpus, model, optim, system): the median over rounds."""
    groups = {}
    for r in results:
        if "failed" in r:
            continue
        groups.setdefault((r["corpus"], r["model"], r["optim"], r["system"]), []).append(r)
    merged = {}
    for key, rs in groups.items():
        best = sorted(rs, key=lambda r: r[METRIC])[len(rs) // 2]
        merged[key] = best
    return merged


# -------------------------------------------------------------------- floor

FLOOR_SIZES_MB = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]


def gemm_shapes(vocab):
    """The two GEMMs of a linear step, as floor's M,N,K,TA,TB (row-major, see core/kernels/matmul.cpp, linear):
    forward [B, V] x [D, V]^T -> [B, D], and backward dW = g^T x: [B, D]^T x [B, V] -> [D, V]."""
    return [(BATCH, DIM, vocab, 0, 1), (DIM, vocab, BATCH, 1, 0)]


def run_floor(args, corpora):
    """Memory bandwidth by working-set size and sgemm throughput (peak, and at each linear GEMM's shape)."""
    exe = os.path.join(args.build, "bench", "floor")
    cmd = [exe, "--sizes", ",".join(map(str, FLOOR_SIZES_MB)), "--seconds", "0.2" if args.quick else "0.5"]
    for c in corpora:
        for g in gemm_shapes(c["vocab"]):
            cmd += ["--gemm", ",".join(map(str, g))]
    log("floor: " + " ".join(cmd[1:3]) + " ...")
    status, out, err, _ = run_measured(cmd, args.timeout)
    if status != 0:
        raise SystemExit(f"floor failed: {err.strip()[-400:]}")
    f = json.loads(out.strip().splitlines()[-1])
    f["command"] = " ".join(shlex.quote(x) for x in cmd)
    return f


def best_floor(a, b):
    """Entry by entry, the better of two floor runs (made before and after the cells): the
    machine's best is what a floor needs, and a burst of load only ever makes it look slower."""
    out = dict(a)
    out["bandwidth"] = [max(x, y, key=lambda e: e["bytes_per_s"]) for x, y in zip(a["bandwidth"], b["bandwidth"])]
    out["sgemm"] = [max(x, y, key=lambda e: e["flop_per_s"]) for x, y in zip(a["sgemm"], b["sgemm"])]
    return out


def bandwidth_for(floor, working_set):
    """The triad's bandwidth over the smallest measured working set at least this large."""
    for b in floor["bandwidth"]:
        if b["mb"] * 2**20 >= working_set:
            return b
    return floor["bandwidth"][-1]


def sgemm_rate(floor, shape):
    m, n, k, ta, tb = shape
    for g in floor["sgemm"]:
        if (g["m"], g["n"], g["k"], g["ta"], g["tb"]) == (m, n, k, ta, tb):
            return g["flop_per_s"]
    return None


def cell_floor(corpus, model, optim, floor):
    """The bytes and FLOPs one step of tapegrad's algorithm must move and do, and the time this
    machine needs for them at best: per phase max(bytes / bandwidth, FLOPs / peak sgemm), summed.

    embedding: the batch's U distinct rows (D floats each) are gathered once, their gradient rows
    written once, and the optimizer reads the gradient and reads and writes the rows of the table
    (SGD) and of Adam's two moments (lazy Adam): 5 U D floats with SGD, 9 U D with Adam. Repeated
    ids within a batch are counted once (they are cache hits), the [B, D] activations not at all.
    linear: the dense batch [B, V] is written, read by both GEMMs (with W [D, V], and writing dW),
    and the optimizer reads dW and reads and writes W (and Adam's moments): no multiplication by
    zero can be skipped, as a dense GEMM does them all.
    The bandwidth is the triad's over a working set as large as the arrays the step touches."""
    v, u = corpus["vocab"], corpus["rows_per_batch"]
    row = DIM * FLOAT
    table = v * row
    opt_arrays = 3 if optim == "sgd" else 7  # arrays read or written per updated row (grad read included)
    if model == "embedding":
        working_set = table * (3 if optim == "adam" else 1)
        phases = [("gather", u * row, 0), ("gradient rows", u * row, 0), ("optimizer", opt_arrays * u * row, 0)]
    else:
        x = BATCH * v * FLOAT
        flops = 2 * BATCH * v * DIM
        working_set = x + 2 * table + (2 * table if optim == "adam" else 0)
        phases = [("batch", x, 0), ("forward GEMM", x + table, flops), ("backward GEMM", x + table, flops),
                  ("optimizer", opt_arrays * table, 0)]
    bw = bandwidth_for(floor, working_set)
    peak = sgemm_rate(floor, (1024, 1024, 1024, 0, 0))
    ms = sum(max(b / bw["bytes_per_s"], f / peak) for _, b, f in phases) * 1e3
    out = dict(bytes=sum(b for _, b, _ in phases), flops=sum(f for _, _, f in phases), working_set=working_set,
               bandwidth=bw["bytes_per_s"], bandwidth_at_mb=bw["mb"], peak_flops=peak, floor_ms=ms)
    if model == "linear":  # what OpenBLAS itself takes for the step's two GEMMs, at their shapes
        rates = [sgemm_rate(floor, g) for g in gemm_shapes(v)]
        if all(rates):
            out["blas_gemm_ms"] = sum(2 * BATCH * v * DIM / r for r in rates) * 1e3
    return out


def floor_table(corpora, merged, floor):
    head = ["corpus", "path", "optimizer", "MB moved", "GFLOP", "working set MB", "GB/s (triad at MB)",
            "floor ms", "OpenBLAS GEMMs ms", "tapegrad ms", "tapegrad / floor", "libtorch / floor"]
    rows, floors = [], {}
    for c in ordered_corpora(corpora):
        for model, optim in CASES:
            tg = merged.get((c["name"], model, optim, "tapegrad"))
            lt = merged.get((c["name"], model, optim, "libtorch"))
            f = cell_floor(c, model, optim, floor)
            floors[(c["name"], model, optim)] = f
            rows.append([c["name"], model, optim, f"{f['bytes'] / 1e6:.2f}", f"{f['flops'] / 1e9:.3f}",
                         f"{f['working_set'] / 2**20:.0f}",
                         f"{f['bandwidth'] / 1e9:.1f} ({f['bandwidth_at_mb']:g})", f"{f['floor_ms']:.3f}",
                         f"{f['blas_gemm_ms']:.3f}" if "blas_gemm_ms" in f else "—",
                         fmt_ms(tg), "—" if tg is None else f"{tg[METRIC] / f['floor_ms']:.1f}x",
                         "—" if lt is None else f"{lt[METRIC] / f['floor_ms']:.1f}x"])
    return head, rows, floors


# ---------------------------------------------------------------------- jobs
#
# The job a user compares: train on the training documents, label the test
# documents. bow_classifier against fastText's supervised classifier, on the same
# split and the same tokens (export_split), one thread each, whole processes.

FASTTEXT_SETTINGS = [
    ("defaults", []),
    ("-lr 0.5", ["-lr", "0.5"]),
    ("-lr 1.0 -epoch 25 -wordNgrams 2", ["-lr", "1.0", "-epoch", "25", "-wordNgrams", "2"]),
]


def run_timed(cmd, timeout):
    """Runs cmd; returns (exit status, stdout, stderr, wall s, CPU s of the process and its children)."""
    env = dict(os.environ, **ENV_ONE_THREAD)
    t = time.monotonic()
    with open(os.devnull, "rb") as devnull:
        p = subprocess.Popen(cmd, stdin=devnull, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        err += f"\nkilled after {timeout} s"
    wall = time.monotonic() - t
    # communicate() has reaped the child: its CPU time is in RUSAGE_CHILDREN, read as a difference
    # around each run by the caller (see run_jobs).
    return p.returncode, out, err, wall


def children_cpu():
    r = os.times()
    return r.children_user + r.children_system


def run_jobs(args):
    if not args.tsv:
        return None, "no real corpus (--tsv)"
    fasttext = shutil.which("fasttext")
    split_dir = os.path.join(args.data, "split")
    os.makedirs(split_dir, exist_ok=True)
    r = subprocess.run([os.path.join(args.build, "bench", "export_split"), "--tsv", args.tsv, split_dir],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"export_split failed: {r.stderr}")
    split = json.loads(r.stdout.strip().splitlines()[-1])
    with open(os.path.join(split_dir, "test.tsv")) as f:
        truth = [line.split("\t", 1)[0] for line in f]
    path = lambda name: os.path.join(split_dir, name)
    bow = os.path.join(args.build, "examples", "bow_classifier")
    jobs = [dict(system="bow_classifier", setting="defaults (--mode embedding)",
                 commands=[[bow, "--data", path("train.tsv"), "--test", path("test.tsv"), "--mode", "embedding"]])]
    if fasttext:
        for name, extra in FASTTEXT_SETTINGS:
            model = path("fasttext-" + re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_"))
            jobs.append(dict(system="fastText", setting=name, commands=[
                [fasttext, "supervised", "-input", path("train.ft"), "-output", model, "-thread", "1"] + extra,
                [fasttext, "predict", model + ".bin", path("test.ft")]]))
    note = None if fasttext else "fasttext not found (Debian package fasttext)"
    runs = {i: [] for i in range(len(jobs))}
    for round_ in range(args.rounds):
        for k in range(len(jobs)):
            i = (k + round_) % len(jobs)  # rotate the order from round to round
            job = jobs[i]
            wall = cpu = 0.0
            outputs = []
            for cmd in job["commands"]:
                before = children_cpu()
                status, out, err, w = run_timed(cmd, args.timeout * 2)
                cpu += children_cpu() - before
                wall += w
                if status != 0:
                    raise SystemExit(f"job failed: {' '.join(cmd)}\n{err[-600:]}")
                outputs.append(out)
            if job["system"] == "bow_classifier":
                last = [l.split() for l in outputs[0].splitlines() if l.startswith("embedding ")][-1]
                correct = round(float(last[4]) * len(truth))
                vocab = re.search(r"vocabulary (\d+)", outputs[0]).group(1)
                job["model"] = f"V {int(vocab):,}"
            else:
                predicted = [l.strip().replace("__label__", "") for l in outputs[-1].splitlines()]
                if len(predicted) != len(truth):
                    raise SystemExit(f"fasttext predict gave {len(predicted)} labels for {len(truth)} documents")
                correct = sum(p == t for p, t in zip(predicted, truth))
            runs[i].append(dict(wall_s=wall, cpu_s=cpu, correct=correct))
            log(f"job {job['system']} {job['setting']}: {wall:.2f} s wall, {cpu:.2f} s CPU, "
                f"accuracy {correct / len(truth):.4f}")
    for i, job in enumerate(jobs):
        rs = runs[i]
        job.update(wall_s=statistics.median(r["wall_s"] for r in rs), cpu_s=statistics.median(r["cpu_s"] for r in rs),
                   walls=[r["wall_s"] for r in rs], cpus=[r["cpu_s"] for r in rs], correct=rs[0]["correct"],
                   accuracy=rs[0]["correct"] / len(truth), same_every_round=len({r["correct"] for r in rs}) == 1,
                   command=" && ".join(" ".join(shlex.quote(x) for x in c) for c in job["commands"]))
    return dict(jobs=jobs, split=split, test_docs=len(truth)), note


def jobs_table(jobs):
    bow = jobs["jobs"][0]
    head = ["system", "setting", "test accuracy", "correct", "wall s (median)", "CPU s (median)",
            "bow_classifier / this, wall", "bow_classifier / this, CPU"]
    rows = [[j["system"], j["setting"], f"{j['accuracy']:.4f}", f"{j['correct']} / {jobs['test_docs']}",
             f"{j['wall_s']:.2f}", f"{j['cpu_s']:.2f}", f"{bow['wall_s'] / j['wall_s']:.2f}x",
             f"{bow['cpu_s'] / j['cpu_s']:.2f}x"] for j in jobs["jobs"]]
    return head, rows


# -------------------------------------------------------------------- micro

def run_micro(args):
    exe = os.path.join(args.build, "bench", "micro_tapegrad")
    if not os.path.exists(exe):
        return None, "micro_tapegrad was not built (libbenchmark-dev not found)"
    out = os.path.join(args.data, "micro.json")
    cmd = [exe, f"--benchmark_out={out}", "--benchmark_out_format=json", "--benchmark_repetitions=3",
           "--benchmark_report_aggregates_only=true", f"--benchmark_min_time={0.05 if args.quick else 0.1}"]
    log("micro-benchmarks: " + " ".join(cmd[1:]))
    status, _, err, _ = run_measured(cmd, args.timeout * 2)
    if status != 0:
        return None, f"micro_tapegrad failed: {err.strip()[-300:]}"
    with open(out) as f:
        data = json.load(f)
    rows = []
    for b in data["benchmarks"]:
        if b.get("aggregate_name") != "median":
            continue
        unit = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}[b.get("time_unit", "ns")]
        rows.append(dict(name=b["run_name"], us=b["real_time"] * unit, cpu_us=b["cpu_time"] * unit,
                         label=b.get("label", ""),
                         counters={k: v for k, v in b.items() if k in ("items_per_second", "bytes_per_second")}))
    return rows, None


# ------------------------------------------------------------------- report

def machine(args):
    cpu = sh("lscpu | sed -n 's/^Model name: *//p'") or platform.processor()
    caches = sh("lscpu | grep -E '^L[123]' | sed 's/  */ /g' | paste -sd ';'")
    mem = sh("free -g | awk '/^Mem:/ {print $2}'")
    return {
        "cpu": cpu,
        "cores": str(os.cpu_count()),
        "caches": caches.replace(";", ", "),
        "memory": f"{mem} GB" if mem else "?",
        "kernel": platform.release(),
        "os": sh(". /etc/os-release && echo $PRETTY_NAME"),
        "compiler": sh("c++ --version | head -1"),
        "openblas": sh("pkg-config --modversion openblas"),
        "pytorch": sh(f"{shlex.quote(args.python)} -c 'import torch, sys; print(torch.__version__, \"on Python\", sys.version.split()[0])' 2>/dev/null") or "unavailable",
        "libtorch": sh("dpkg-query -W -f='${Version}' libtorch-dev 2>/dev/null") or "unavailable",
        "google benchmark": sh("dpkg-query -W -f='${Version}' libbenchmark-dev 2>/dev/null") or "unavailable",
        "load average": " ".join(f"{x:.1f}" for x in os.getloadavg()),
    }


def fmt_ms(r):
    if r is None:
        return "—"
    ms = r[METRIC]
    return f"{ms:.3f}" if ms < 10 else f"{ms:.1f}"


def fmt_ratio(a, b):
    if a is None or b is None:
        return "—"
    return f"{a[METRIC] / b[METRIC]:.2f}x"


def fmt_mb(r):
    return "—" if r is None else f"{r['rss_maxrss_kb'] / 1024:.0f}"


def main_table(corpora, merged):
    head = ["V", "path", "optimizer", "tapegrad ms", "PyTorch ms", "libtorch ms", "tg/PyTorch", "tg/libtorch",
            "libtorch, grads reset ms", "tg/that", "RSS MB tg", "RSS MB py", "RSS MB lt"]
    rows = []
    for c in ordered_corpora(corpora):
        for model, optim in CASES:
            tg, py, lt = (merged.get((c["name"], model, optim, s)) for s in SYSTEMS)
            if tg is None and py is None and lt is None:
                continue
            v = f"{c['vocab']:,}" + (f" (spam, min-df {c['name'][len('spamassassin-df'):]})" if is_real(c) else "")
            opt = optim if model == "linear" or optim == "sgd" else "adam (lazy / SparseAdam / dense)"
            reset = merged.get((c["name"], model, optim, RESET))
            rows.append([v, model, opt, fmt_ms(tg), fmt_ms(py), fmt_ms(lt), fmt_ratio(tg, py), fmt_ratio(tg, lt),
                         fmt_ms(reset), fmt_ratio(tg, reset), fmt_mb(tg), fmt_mb(py), fmt_mb(lt)])
    return head, rows


def render(head, rows):
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    line = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(head), sep] + [line(r) for r in rows])


def targets(corpora, merged, floors, jobs):
    """(description, measured, goal, met) for each target; the real corpus is the main row."""
    g = lambda corpus, model, optim, system: merged.get((corpus, model, optim, system))
    real = [c["name"] for c in ordered_corpora(corpora) if is_real(c)]
    out = []

    def ratio(desc, a, b, goal, reading=False):
        if a is None or b is None:
            out.append((desc, "not measured", "(for reading the above)" if reading else f"<= {goal}x", None))
        else:
            x = a[METRIC] / b[METRIC]
            out.append((desc, f"{x:.2f}x ({a[METRIC]:.3f} / {b[METRIC]:.3f} ms)",
                        "(for reading the above)" if reading else f"<= {goal}x", None if reading else x <= goal))

    for c in real:
        ratio(f"{c}: embedding + SGD, tapegrad / libtorch", g(c, "embedding", "sgd", "tapegrad"),
              g(c, "embedding", "sgd", "libtorch"), 0.5)
        ratio(f"{c}: embedding + SGD, tapegrad / libtorch with its gradients reset instead of zeroed",
              g(c, "embedding", "sgd", "tapegrad"), g(c, "embedding", "sgd", RESET), 0.5, reading=True)
        tg, f = g(c, "embedding", "sgd", "tapegrad"), floors.get((c, "embedding", "sgd"))
        if tg is None or f is None:
            out.append((f"{c}: embedding + SGD, tapegrad / floor", "not measured", "<= 2x", None))
        else:
            x = tg[METRIC] / f["floor_ms"]
            out.append((f"{c}: embedding + SGD, tapegrad / floor", f"{x:.2f}x ({tg[METRIC]:.3f} / {f['floor_ms']:.3f} ms)",
                        "<= 2x", x <= 2))
    for c in ordered_corpora(corpora):
        ratio(f"{c['name']}: linear + SGD, tapegrad / libtorch", g(c["name"], "linear", "sgd", "tapegrad"),
              g(c["name"], "linear", "sgd", "libtorch"), 1.0)
        ratio(f"{c['name']}: linear + SGD, tapegrad / libtorch with its gradients reset",
              g(c["name"], "linear", "sgd", "tapegrad"), g(c["name"], "linear", "sgd", RESET), 1.0, reading=True)
    for c in real:
        ratio(f"{c}: embedding + Adam, tapegrad (lazy) / PyTorch SparseAdam", g(c, "embedding", "adam", "tapegrad"),
              g(c, "embedding", "adam", "pytorch"), 0.15)
        ratio(f"{c}: linear + Adam, tapegrad / libtorch", g(c, "linear", "adam", "tapegrad"),
              g(c, "linear", "adam", "libtorch"), 1.0)
    if jobs:
        bow = jobs["jobs"][0]
        for ft in jobs["jobs"][1:]:
            if ft["setting"] == "defaults":
                continue
            out.append((f"end to end: bow_classifier accuracy - fastText ({ft['setting']}) accuracy",
                        f"{bow['accuracy'] - ft['accuracy']:+.4f} ({bow['correct']} vs {ft['correct']} correct)",
                        ">= 0", bow["correct"] >= ft["correct"]))
            x = bow["wall_s"] / ft["wall_s"]
            out.append((f"end to end: bow_classifier wall time / fastText ({ft['setting']})",
                        f"{x:.2f}x ({bow['wall_s']:.2f} / {ft['wall_s']:.2f} s)", "<= 0.5x", x <= 0.5))
    for optim in ("sgd", "adam"):
        ratio(f"embedding + {optim}, tapegrad step at V = 1M / at V = 10k",
              g("synthetic-1000000", "embedding", optim, "tapegrad"),
              g("synthetic-10000", "embedding", optim, "tapegrad"), 1.5)
    for corpus in ("synthetic-100000", "synthetic-1000000"):
        for optim in ("sgd", "adam"):
            r = g(corpus, "embedding", optim, "tapegrad")
            desc = f"embedding + {optim} at V = {corpus.split('-')[1]}, tapegrad peak RSS / (parameters + state)"
            if r is None:
                out.append((desc, "not measured", "<= 1.2x", None))
                continue
            need = r["param_bytes"] + r["state_bytes"]
            x = r["rss_maxrss_kb"] * 1024 / need
            out.append((desc, f"{x:.2f}x ({r['rss_maxrss_kb'] / 1024:.1f} MB / {need / 2**20:.1f} MB)", "<= 1.2x",
                        x <= 1.2))
            # The same without what the process holds before any model exists:
            # its libraries (RSS at start) and the corpus (the ids file, read whole).
            grown = r["rss_maxrss_kb"] * 1024 - r["rss_start_kb"] * 1024 - r["corpus_bytes"]
            y = grown / need
            out.append((desc + ", above the process's baseline and corpus",
                        f"{y:.2f}x ({grown / 2**20:.1f} MB / {need / 2**20:.1f} MB)", "(for reading the above)", None))
    return out


def loss_check(merged):
    """Largest warm-up loss difference between tapegrad and each peer, per case."""
    rows = []
    for (corpus, model, optim, system), r in sorted(merged.items()):
        if system != "tapegrad":
            continue
        cells = [corpus, model, optim]
        for peer in ("pytorch", "libtorch"):
            p = merged.get((corpus, model, optim, peer))
            if p is None:
                cells.append("—")
                continue
            # Warm-up lengths may differ (heavy cases warm up less): compare the common steps.
            n = min(len(r["losses"]), len(p["losses"]))
            d = max(abs(a - b) for a, b in zip(r["losses"][:n], p["losses"][:n]))
            cells.append(f"{d:.1e} ({n} steps)")
        rows.append(cells)
    return ["corpus", "path", "optimizer", "vs PyTorch", "vs libtorch"], rows


def phases_table(merged):
    head = ["corpus", "path", "optimizer", "system", "batch", "forward", "zero_grad+backward", "optimizer step",
            "total (wall)", "total (CPU)"]
    rows = []
    for (corpus, model, optim, system), r in sorted(merged.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2],
                                                                                   ALL_SYSTEMS.index(kv[0][3]))):
        p = r["phases_ms"]
        rows.append([corpus, model, optim, system] + [f"{p[k]:.3f}" for k in ("batch", "forward", "backward", "step")]
                    + [f"{r['ms_per_step']:.3f}", f"{r[METRIC]:.3f}"])
    return head, rows


def write_results(args, corpora, merged, results, peers, micro, micro_note, mach, elapsed, floor, jobs, jobs_note):
    head, rows = main_table(corpora, merged)
    fh, fr, floors = floor_table(corpora, merged, floor)
    t = targets(corpora, merged, floors, jobs)
    lines = ["# Benchmarks: tapegrad, PyTorch, libtorch and fastText, side by side", "",
             (f"Produced by `{args.command}` on {datetime.date.today().isoformat()} in {elapsed / 60:.1f} minutes."
              if not args.reuse else
              f"Step cells, jobs and micro-benchmarks by `{args.reused_command}`; the floor measured again by "
              f"`{args.command}` on {datetime.date.today().isoformat()}, from that run's RESULTS.json."),
             "Regenerate with the same command; everything below is written by `bench/run.py`.", "",
             "## Machine", ""]
    lines += [f"- {k}: {v}" for k, v in mach.items()]
    lines += ["", "Every system runs on one thread (TAPEGRAD_NUM_THREADS=1, OPENBLAS_NUM_THREADS=1, OMP_NUM_THREADS=1, "
              "`torch.set_num_threads(1)`, `at::set_num_threads(1)`). The machine is shared and its load varies, "
              "so absolute times are noisy: read the ratios, which compare runs made seconds apart.", ""]
    missing = [f"- {s}: {why}" for s, why in peers.items() if why]
    if missing:
        lines += ["Skipped:", ""] + missing + [""]
    lines += ["## What is measured", "",
              "One training step of the bag-of-words classifier (`examples/bow_classifier`), the same work in "
              "each system: batch build (token ids -> the model's input), forward, cross-entropy, "
              "zero_grad + backward, optimizer step. Dim 64, batch 32, 2 classes.", "",
              "- **zero_grad** is each library's own call: tapegrad's `optimizer.zero_grad()` empties the gradient "
              "slots; PyTorch 1.13's `optimizer.zero_grad()` and libtorch 1.13's `optimizer->zero_grad()` zero the "
              "gradients in place (1.13 has no set_to_none in C++, and it is not the Python default). The SGD cells "
              "also run libtorch with its gradients reset to undefined instead (`step_libtorch --zero-grad none`, "
              "PyTorch's set_to_none), in the columns \"libtorch, grads reset\": the faster of the two there.",
              "- **embedding**: ids -> EmbeddingBag(V, 64, sum) -> tanh -> Linear(64, 2). tapegrad and PyTorch use "
              "sparse gradients; so does libtorch with SGD.",
              "- **Which cells compare different algorithms**: only embedding + Adam. tapegrad's Adam is lazy on the "
              "embedding's rows (it updates the rows in the batch), as PyTorch's SparseAdam (for the embedding, plus "
              "Adam for the head): the same algorithm, up to where eps enters (optim/adam.hpp). libtorch has no "
              "SparseAdam, so its cell uses a dense [V, 64] gradient and dense Adam over all V rows every step: a "
              "different algorithm (rows not in the batch keep moving) with far more work, and a different loss curve. "
              "Every other cell is the same algorithm in all three systems (their losses agree, table \"Same work\").",
              "- **linear**: ids -> dense multi-hot rows [32, V] -> Linear(V, 64, no bias) -> tanh -> Linear(64, 2); "
              "dense gradients; one SGD or Adam.",
              "- SGD lr 0.1, Adam lr 0.01 (bow_classifier's defaults). All systems start from the same weights "
              "(a formula of each element's position) and read the same batches from one ids file written by "
              "`export_ids`, so their losses must agree (table \"Same work\").",
              "- Timing: 8 warm-up steps, then 5 timed runs of K steps (K set from the warm-up speed, about 0.3 s a "
              "run); ms/step is the median run, in CPU time of the process (all its threads): the machine is shared, "
              "and CPU time leaves out the waits for a core that inflate wall time. Wall times are in the phase table "
              "and in RESULTS.json. Cells that take about a second a step (linear at V = 1M, libtorch's dense Adam at "
              "V = 1M) warm up 2 steps and time 3 runs of 1 step.",
              "- Peak RSS is the process's `ru_maxrss` (one process per cell), so it includes the interpreter or "
              "libraries each system loads (PyTorch's and libtorch's are large) and the corpus.", "",
              "Corpora (tokens per batch are the same for every synthetic V):", ""]
    ch = ["corpus", "V", "documents", "ids per document", "distinct rows per batch", "made by"]
    cr = [[c["name"], f"{c['vocab']:,}", c["docs"], f"{c['ids_per_doc']:.1f}", f"{c['rows_per_batch']:.0f}",
           f"`export_ids {c['source']}`"] for c in corpora]
    lines += [render(ch, cr), "",
              "The real corpora are the SpamAssassin public corpus (`./scripts/fetch-spamassassin`), tokenized and "
              "numbered as bow_classifier does (over all documents: these files time steps, they train nothing "
              "that is tested); min-df 2 is bow_classifier's default cut-off.", "",
              "## Results (ms per step, lower is better)", "", render(head, rows), "",
              "Ratios are tapegrad's time over the peer's: below 1 means tapegrad is faster. "
              "The real corpus is the main row; the synthetic rows are the vocabulary scaling.", "",
              "## Targets", ""]
    th = ["target", "measured", "goal", "met"]
    tr = [[d, m, goal, "—" if ok is None else ("yes" if ok else "**no**")] for d, m, goal, ok in t]
    peak = sgemm_rate(floor, (1024, 1024, 1024, 0, 0))
    lines += [render(th, tr), "", "## The floor", "",
              "What this machine allows at best for each cell, on one thread: the bytes tapegrad's step must move "
              "divided by the memory bandwidth, and its GEMM FLOPs divided by the sgemm throughput, per phase "
              "(max of the two), summed. `bench/floor` measures both: a STREAM-like triad (best of its runs) over "
              "working sets from 1 MB to 1 GB, and OpenBLAS's cblas_sgemm (best of its runs) at 1024 x 1024 x 1024 "
              "(the peak) and at each linear GEMM's own shape, once before the cells and once after, keeping the better "
              "of the two for each entry. What a step must move (see `cell_floor` in "
              "bench/run.py): embedding + SGD 5 U D floats (gather U distinct rows, write U gradient rows, read the "
              "gradient and read and write the U table rows), embedding + Adam 9 U D (the two moments too); linear: "
              "the dense [32, V] batch written and read by both GEMMs, W read, dW written, and the optimizer's "
              "passes over W (and the moments). Small arrays (the [32, 64] activations, the head) are left out. "
              "The bandwidth is the triad's over the smallest measured working set at least as large as the arrays "
              "the step touches (the table, its state, the batch), so a cell whose arrays fit in a cache gets that "
              "cache's bandwidth. \"OpenBLAS GEMMs ms\" is what OpenBLAS itself takes for the linear step's two "
              "GEMMs at their shapes: the part of the step no caller of OpenBLAS can go below.", "",
              f"Measured: sgemm peak {peak / 1e9:.1f} GFLOP/s; triad bandwidth " +
              ", ".join(f"{b['bytes_per_s'] / 1e9:.1f} GB/s at {b['mb']:g} MB" for b in floor["bandwidth"]) +
              f" (`{floor['command'].split(' --gemm')[0]} ...`).", "",
              render(fh, fr), ""]
    lines += ["## End to end: bow_classifier against fastText", ""]
    if jobs:
        jh, jr = jobs_table(jobs)
        sp = jobs["split"]
        lines += ["The job a user compares: train a spam classifier on the training emails and label the test "
                  "emails, as whole processes, one thread each (`-thread 1`; TAPEGRAD_NUM_THREADS=1 "
                  "OPENBLAS_NUM_THREADS=1). "
                  f"`export_split` writes bow_classifier's own split of the corpus ({sp['train_docs']} training and "
                  f"{sp['test_docs']} test documents, stratified, seed 0) with each text replaced by bow_classifier's "
                  "tokens joined by spaces, in two formats, so both tools see the same documents and the same "
                  "tokens. bow_classifier reads them with `--data train.tsv --test test.tsv`; fastText with "
                  "`supervised` then `predict` (two processes, whose times are added). Accuracy is counted from "
                  "each tool's own predictions; wall and CPU times are medians over "
                  f"{args.rounds} interleaved rounds (the accuracies are the same every round: "
                  f"{'yes' if all(j['same_every_round'] for j in jobs['jobs']) else 'no'}).", "",
                  render(jh, jr), "",
                  "The models differ:", "",
                  f"- **bow_classifier** (defaults, `--mode embedding`): a vocabulary of the tokens found in at least "
                  f"2 training documents ({jobs['jobs'][0].get('model', '')}), others dropped; each email is the "
                  "*set* of its tokens (binary bag); EmbeddingBag(V, 64, sum) -> tanh -> Linear(64, 2), "
                  "cross-entropy, Adam (lr 0.01, lazy on the embedding), batches of 32, 3 epochs; it evaluates the "
                  "test set after every epoch (all three count in its time) and prints the metrics.",
                  "- **fastText** `supervised`: every token of the training file (minCount 1) plus an end-of-line "
                  "token, *with repeats*; the mean of 100-dim word vectors -> Linear(100, 2) -> softmax, no "
                  "hidden non-linearity; plain SGD on one example at a time with a learning rate that decays "
                  "linearly to 0; 5 epochs and lr 0.1 by default. It writes model.bin and a text file of every "
                  "word vector (model.vec), and `predict` loads model.bin again. `-wordNgrams 2` adds word "
                  "bigrams, hashed into 2M extra rows. The two settings besides the defaults: `-lr 0.5` (a "
                  "larger step), and the setting fastText's own text-classification tutorial arrives at "
                  "(`-lr 1.0 -epoch 25 -wordNgrams 2`). Both were fixed before these runs; no search over fastText's "
                  "settings was made against this test set.", "",
                  "Commands (one round):", "", "```"] + [j["command"] for j in jobs["jobs"]] + ["```", ""]
    else:
        lines += [f"Not run: {jobs_note}", ""]
    lines += ["## Same work", "",
              "Largest difference of the warm-up losses (same weights, same batches). SGD and linear + Adam must agree "
              "to float rounding; embedding + Adam differs slightly from SparseAdam (eps is applied after the bias "
              "correction, see optim/adam.hpp) and a lot from libtorch's dense Adam.", ""]
    lh, lr_ = loss_check(merged)
    lines += [render(lh, lr_), "", "## Where the time goes (ms per step)", ""]
    ph, pr = phases_table(merged)
    lines += ["Wall time, averaged over the timed steps; zero_grad is counted with backward.", "",
              render(ph, pr), ""]
    lines += ["## Micro-benchmarks (tapegrad, Google Benchmark, median of 3)", "",
              "Inputs shaped like the step's: 32 documents of 160 distinct Zipf ids, dim 64; the argument is V. "
              "ForwardBackward minus Forward is the backward pass. (Debian's libbenchmark is a debug build; "
              "that only affects the harness around the timed loop.)", ""]
    if micro:
        mh = ["benchmark", "CPU time (us)", "wall time (us)", "note"]
        mr = [[m["name"], f"{m['cpu_us']:.1f}", f"{m['us']:.1f}", m["label"]] for m in micro]
        lines += [render(mh, mr), ""]
    else:
        lines += [f"Not run: {micro_note}", ""]
    failed = [r for r in results if "failed" in r]
    if failed:
        lines += ["## Failed runs", ""] + [f"- {r['corpus']} {r['model']} {r['optim']} {r['system']}: "
                                            f"`{r['failed'][-200:]}`" for r in failed] + [""]
    lines += ["## Commands", "", "Each cell's command, for rerunning one by hand "
              "(with OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1):", "", "```"]
    lines += [r["command"] for r in merged.values()] + ["```", ""]
    with open(args.out, "w") as f:
        f.write("\n".join(lines))
    with open(os.path.splitext(args.out)[0] + ".json", "w") as f:
        json.dump(dict(machine=mach, command=args.command, elapsed_s=elapsed, corpora=corpora, results=results,
                       micro=micro, floor=floor,
                       floors={" ".join(k): v for k, v in floors.items()}, jobs=jobs), f, indent=1)
    return head, rows, t


def reuse(args, start):
    """The report from an earlier run's results, with the floor measured again now."""
    with open(args.reuse) as f:
        old = json.load(f)
    corpora, results, jobs = old["corpora"], old["results"], old["jobs"]
    mach = old["machine"]
    mach["load average"] += " (cells); " + " ".join(f"{x:.1f}" for x in os.getloadavg()) + " (floor)"
    floor = best_floor(run_floor(args, corpora), run_floor(args, corpora))
    peers = {s: None for s in SYSTEMS}
    head, rows, t = write_results(args, corpora, merge_rounds(results), results, peers, old["micro"],
                                  None if old["micro"] else "not run", mach, old.get("elapsed_s", 0), floor,
                                  jobs, None if jobs else "not run")
    print(render(head, rows))
    for desc, measured, goal, ok in t:
        print(f"{'MET ' if ok else 'MISS' if ok is not None else '----'}  {desc}: {measured} (goal {goal})")
    print(f"\nwrote {args.out} ({(time.monotonic() - start) / 60:.1f} min)")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", required=True, help="meson build directory configured with -Dbench=true")
    p.add_argument("--source", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    p.add_argument("--data", default=None, help="where the ids files go (default: BUILD/bench-data)")
    p.add_argument("--tsv", default=None, help="also run on this label<TAB>text corpus (e.g. SpamAssassin)")
    p.add_argument("--python", default="/usr/bin/python3", help="the interpreter that has torch")
    p.add_argument("--rounds", type=int, default=1, help="runs of each cell (the median is kept)")
    p.add_argument("--quick", action="store_true", help="fewer steps, for trying things out")
    p.add_argument("--no-micro", action="store_true")
    p.add_argument("--no-jobs", action="store_true", help="skip the end-to-end jobs (bow_classifier, fastText)")
    p.add_argument("--jobs-only", action="store_true",
                   help="run only the end-to-end jobs (needs --tsv) and print their table; RESULTS.md is not written")
    p.add_argument("--reuse", default=None, metavar="RESULTS.json",
                   help="take the step cells, jobs and micro-benchmarks from this earlier run's RESULTS.json, "
                        "measure only the floor again, and write the report")
    p.add_argument("--reused-command", default="./scripts/bench --rounds 3",
                   help="with --reuse: the command that made the reused results (for the report)")
    p.add_argument("--only", default=None, help="run only the corpora whose name contains this (e.g. spamassassin)")
    p.add_argument("--timeout", type=int, default=300, help="seconds per process")
    p.add_argument("--out", default=None, help="default: SOURCE/bench/RESULTS.md")
    p.add_argument("--command", default="bench/run.py", help="the command to record in RESULTS.md")
    args = p.parse_args()
    args.data = args.data or os.path.join(args.build, "bench-data")
    args.out = args.out or os.path.join(args.source, "bench", "RESULTS.md")
    start = time.monotonic()

    if args.reuse:
        return reuse(args, start)
    if args.jobs_only:
        jobs, note = run_jobs(args)
        if note:
            raise SystemExit(f"bench: end-to-end jobs: {note}")
        print(render(*jobs_table(jobs)))
        return
    mach = machine(args)
    peers = available_peers(args)
    for s, why in peers.items():
        if why:
            log(f"bench: skipping {s}: {why}")
    corpora = make_corpora(args)
    if args.only:
        corpora = [c for c in corpora if args.only in c["name"]]
    floor_before = run_floor(args, corpora)
    jobs, jobs_note = (None, "--no-jobs") if args.no_jobs else run_jobs(args)
    if jobs_note:
        log(f"bench: end-to-end jobs: {jobs_note}")
    results = run_steps(args, corpora, peers)
    merged = merge_rounds(results)
    floor = best_floor(floor_before, run_floor(args, corpora))
    micro, micro_note = (None, "--no-micro") if args.no_micro else run_micro(args)
    if micro_note:
        log(f"bench: micro-benchmarks skipped: {micro_note}")
    mach["load average"] += " (start) / " + " ".join(f"{x:.1f}" for x in os.getloadavg()) + " (end)"
    head, rows, t = write_results(args, corpora, merged, results, peers, micro, micro_note, mach,
                                  time.monotonic() - start, floor, jobs, jobs_note)

    print(render(head, rows))
    print()
    for desc, measured, goal, ok in t:
        print(f"{'MET ' if ok else 'MISS' if ok is not None else '----'}  {desc}: {measured} (goal {goal})")
    print(f"\nwrote {args.out} ({(time.monotonic() - start) / 60:.1f} min)")


if __name__ == "__main__":
    main()
