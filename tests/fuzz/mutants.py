#!/usr/bin/env python3
"""Shows that the graph fuzzer catches real bugs.

Puts one deliberate bug at a time into a copy of the library (a backward off by
5%, a term left out, a wrong operand, a missing version check, a step of the
engine left out, ...), builds the fuzz targets there, and runs the graph target
from its seeds until it reports a broken promise or SECONDS pass. Every mutant
must be found.

    tests/fuzz/mutants.py [SECONDS] [MUTANT...]     SECONDS per mutant (default 300)

The copy is the working tree (committed or not) in a temporary directory, so
the library here is never touched. Prints one line per mutant and exits
non-zero when one survived.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

# name, file, text, replacement: each text occurs exactly once.
MUTANTS = [
    ("mul: d/db uses b instead of a", "core/ops/elementwise.cpp",
     'if (n.needs_grad(1)) d[1] = kernels::map("mul", g, n.input(0), times);',
     'if (n.needs_grad(1)) d[1] = kernels::map("mul", g, n.input(1), times);'),
    ("div: d/db misses a factor 1/b", "core/ops/elementwise.cpp",
     "return -g * (x / y) / y;",
     "return -g * (x / y);"),
    ("tanh: gradient 5% too large", "core/ops/elementwise.cpp",
     "[](float g, float y) { return g * (1.0f - y * y); }",
     "[](float g, float y) { return g * (1.0f - y * y) * 1.05f; }"),
    ("softmax: backward leaves out sum(g * y)", "core/kernels/rows.cpp",
     "for (std::size_t i = 0; i < n; ++i) dx[i] = y[i] * (g[i] - s);",
     "for (std::size_t i = 0; i < n; ++i) dx[i] = y[i] * g[i];"),
    ("softmax over a dim that is not the last: backward reads the gradient's row with stride 1", "core/kernels/rows.cpp",
     "for (std::size_t j = 0; j < s.n; ++j) zr[j] = z[first + j * s.inner];",
     "for (std::size_t j = 0; j < s.n; ++j) zr[j] = z[first + j];"),
    ("linear: dx multiplies by the weight read as [in, out]", "core/ops/matmul.cpp",
     "if (n.needs_grad(0)) d[0] = kernels::matmul(g, n.input(1));",
     "if (n.needs_grad(0)) d[0] = kernels::matmul_nt(g, n.input(1), shape_of_input(n, 0));"),
    ("index_select: a repeated row overwrites instead of adding", "core/ops/shape.cpp",
     "gi.data()[index(i) * row + c] += g.data()[i * row + c];",
     "gi.data()[index(i) * row + c] = g.data()[i * row + c];"),
    ("mean over a dim divides by all elements (forward)", "core/ops/reduce.cpp",
     "const float count = static_cast<float>(a.shape()[ax]);",
     "const float count = static_cast<float>(a.numel());"),
    ("mul: d/da reads b without the version check", "core/ops/elementwise.cpp",
     'if (n.needs_grad(0)) d[0] = kernels::map("mul", g, n.input(1), times);',
     'if (n.needs_grad(0)) d[0] = kernels::map("mul", g, n.inputs[1].tensor.value(), times);'),
    ("EmbeddingBag mean: divides by the bag's length with padding", "nn/embedding.cpp",
     "coef[k] = 1.0f / static_cast<float>(count);",
     "coef[k] = 1.0f / static_cast<float>(starts[b + 1] - starts[b]);"),
    ("backward: no version check of outputs that backward reads (exp, tanh, ...)", "core/tape.cpp",
     "if (out->version != output_version)",
     "if (false)"),
    ("backward: no version check of inputs that backward reads", "core/tape.cpp",
     "if (in.tensor.version() != in.version)",
     "if (false)"),
    ("backward: a graph released by an earlier backward() is walked again", "core/tape.cpp",
     "if (n->released)",
     "if (false)"),
    ("un-broadcast: only the leading dims are summed, not the dims of size 1", "core/kernels/reduce.cpp",
     "summed[d] = d < lead || (shape[d - lead] == 1 && g.shape()[d] != 1);",
     "summed[d] = d < lead;"),
    ("div_scalar: gradient g * s instead of g / s", "core/ops/elementwise.cpp",
     "return g / s;",
     "return g * s;"),
    ("masked_fill: the gradient passes where the mask is set", "core/ops/elementwise.cpp",
     "return m != 0.0f ? 0.0f : g;",
     "return m != 0.0f ? g : g;"),
    ("gelu: the erf form's slope leaves out x * pdf", "core/kernels/elementwise.cpp",
     "dx[i] = g[i] * (cdf + x[i] * pdf);",
     "dx[i] = g[i] * cdf;"),
    ("gelu: the tanh form's constant rounded to 0.0447 (values off by ~1e-5)", "core/kernels/elementwise.cpp",
     "constexpr float kappa = 0.044715f;",
     "constexpr float kappa = 0.0447f;"),
    ("tril/triu: backward keeps the other triangle's gradient", "core/ops/elementwise.cpp",
     "zero_outside_triangle(ga.data(), ga.size(), rows, cols, diagonal, lower);",
     "zero_outside_triangle(ga.data(), ga.size(), rows, cols, diagonal, !lower);"),
    ("permute: backward reorders by the permutation, not its inverse (differs for 3 dims)", "core/ops/shape.cpp",
     "[op, inverse](const Array& g",
     "[op, inverse = perm](const Array& g"),
    ("batch_norm: the training backward leaves out the mean of the gradient", "core/ops/layers.cpp",
     "const double mean_d = training ? scale * sum_g / static_cast<double>(count) : 0.0;",
     "const double mean_d = 0.0;"),
    ("binary_cross_entropy: d/dinput 5% too large", "core/ops/layers.cpp",
     "gx.data()[i] = gi * w.data()[i] * (x[i] - t[i]) / std::max((1.0f - x[i]) * x[i], 1e-12f);",
     "gx.data()[i] = 1.05f * gi * w.data()[i] * (x[i] - t[i]) / std::max((1.0f - x[i]) * x[i], 1e-12f);"),
    ("adaptive pooling: a window ends at floor((o + 1) in / out), not its ceiling", "core/ops/conv.cpp",
     "const std::size_t first = o * in / out, end = ((o + 1) * in + out - 1) / out;",
     "const std::size_t first = o * in / out, end = std::max((o + 1) * in / out, first + 1);"),
    ("unfold: backward overwrites where windows overlap instead of adding", "core/ops/conv.cpp",
     "for (std::size_t k = 0; k < n; ++k) row[k * g.sw] += cols[xs.first + k];",
     "for (std::size_t k = 0; k < n; ++k) row[k * g.sw] = cols[xs.first + k];"),
    ("conv1d: its padding applied along the height too", "core/ops/conv.cpp",
     "as_width(o.padding, 0), as_width(o.dilation, 1), o.groups);",
     "Size2(o.padding, o.padding), as_width(o.dilation, 1), o.groups);"),
]


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def main():
    args = sys.argv[1:]
    seconds = int(args.pop(0)) if args and args[0].isdigit() else 300
    chosen = [int(a) for a in args] or range(len(MUTANTS))
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    files = run(["git", "ls-files", "-co", "--exclude-standard"], cwd=here, check=True).stdout.split()
    work = tempfile.mkdtemp(prefix="tapegrad-mutants-")
    try:
        for f in files:
            if os.path.isfile(os.path.join(here, f)):
                os.makedirs(os.path.join(work, os.path.dirname(f)), exist_ok=True)
                shutil.copy2(os.path.join(here, f), os.path.join(work, f))
        build = os.path.join(work, "build-fuzz")
        print(f"building the fuzz targets in {build} ...", flush=True)
        b = run([os.path.join(work, "tests/fuzz/build.sh"), build])
        if b.returncode:
            sys.exit(b.stdout + b.stderr)
        survived = 0
        for k in chosen:
            name, path, old, new = MUTANTS[k]
            src = os.path.join(work, path)
            original = open(src).read()
            if original.count(old) != 1:
                sys.exit(f"mutant {k} ({name}): its text is not in {path} exactly once; update tests/fuzz/mutants.py")
            open(src, "w").write(original.replace(old, new))
            try:
                b = run([os.path.join(work, "tests/fuzz/build.sh"), build])
                if b.returncode:
                    sys.exit(f"mutant {k} ({name}) does not build:\n{b.stdout}{b.stderr}")
                corpus = os.path.join(build, f"corpus-{k}")
                shutil.rmtree(corpus, ignore_errors=True)
                os.makedirs(corpus)
                start = time.time()
                r = run([os.path.join(build, "fuzz_graph"), "-entropic=0", "-max_len=512",
                         f"-max_total_time={seconds}", f"-artifact_prefix={build}/mutant-{k}-",
                         corpus, os.path.join(work, "tests/fuzz/corpus/graph")], cwd=build)
                took = time.time() - start
                found = r.returncode != 0
                survived += not found
                runs = re.findall(r"^#(\d+)", r.stderr, re.M)
                why = next((l.strip() for l in r.stderr.splitlines()
                            if "broken promise" in l or "runtime error" in l or "ERROR:" in l), "")
                print(f"[{k}] {name}: {'found' if found else 'NOT FOUND'} after {took:.0f} s"
                      f" ({runs[-1] if runs else '?'} runs)", flush=True)
                if why:
                    print(f"      {why[:300]}", flush=True)
            finally:
                open(src, "w").write(original)
        sys.exit(1 if survived else 0)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
