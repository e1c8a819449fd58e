"""Measure bf16 torch.matmul at the DLRM MLP shapes over small batch sizes (M) on the GPU.

Output: experiments/results/gemm_small_m_h200.csv (m, n, k, median_us, tflops, device, torch, date).  The dense
kernel helpers (simfuse/workloads/dense.py) take their small-M efficiency curve from this table.  CUDA graphs
over 4 input sets, medians of 50 replays (the method facts.md's re-measurement used)."""

from __future__ import annotations

import datetime
import os
import sys

import torch

M = [64, 128, 256, 528, 1056, 2112, 4224, 6912, 16384]
# (n, k) of DLRM-DCNv2's layers (facts.md): bottom 13-512-256-128, DCN low rank 512 over 3456 features, top
NK = [(512, 16), (256, 512), (128, 256), (512, 3456), (3456, 512), (1024, 3456), (1024, 1024), (512, 1024),
      (256, 512)]


def bench(m, n, k, reps=50):
    xs = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
    w = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    outs = [None] * 4
    for i in range(4):
        outs[i] = xs[i] @ w
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(4):
            outs[i] = xs[i] @ w
    g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        g.replay()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e) * 1e3 / 4)
    ts.sort()
    return ts[len(ts) // 2]


def main(out):
    rows = ["m,n,k,median_us,tflops,device,torch,date"]
    dev = torch.cuda.get_device_name()
    date = datetime.date.today().isoformat()
    for n, k in NK:
        for m in M:
            us = bench(m, n, k)
            rows.append(f"{m},{n},{k},{us:.3f},{2.0 * m * n * k / us / 1e6:.2f},{dev},{torch.__version__},{date}")
            print(rows[-1], flush=True)
    with open(out, "w") as fh:
        fh.write("\n".join(rows) + "\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.environ.get("OUT", "."), "gemm_small_m_h200.csv"))
