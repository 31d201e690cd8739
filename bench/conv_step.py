#!/usr/bin/python3
"""bench/conv_step.cpp in PyTorch: one forward and backward pass of
Conv2d(16, 32, 3, padding=1) on [64, 16, 28, 28], the output's gradient given,
on one thread; with oneDNN (PyTorch's default on CPU) and without it (its
im2col and GEMM path, as tapegrad's). Each line ends with `step_ms: X cpu_ms:
Y`, the median wall time of a pass and the process's CPU time per pass
(scripts/steptime reads them).

    /usr/bin/python3 bench/conv_step.py [--rounds 20]
"""
import argparse
import time

import torch
from torch import nn


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=20)
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    conv = nn.Conv2d(16, 32, 3, padding=1)
    x = torch.randn(64, 16, 28, 28, requires_grad=True)
    gy = torch.randn(64, 32, 28, 28)
    for mkldnn in [True, False]:
        torch.backends.mkldnn.enabled = mkldnn
        ms, cpu = [], 0.0
        for i in range(args.rounds + 3):
            conv.zero_grad()
            x.grad = None
            cpu_start = time.process_time()
            start = time.perf_counter()
            conv(x).backward(gy)
            if i >= 3:
                ms.append((time.perf_counter() - start) * 1e3)
                cpu += time.process_time() - cpu_start
        ms.sort()
        print("PyTorch %s conv2d forward+backward: median %.1f ms, fastest %.1f ms (%d rounds); step_ms: %.3f cpu_ms: %.3f"
              % ("(oneDNN)" if mkldnn else "(without oneDNN)", ms[len(ms) // 2], ms[0], args.rounds, ms[len(ms) // 2],
                 1000 * cpu / args.rounds))


if __name__ == "__main__":
    main()
