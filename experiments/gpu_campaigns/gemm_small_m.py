"""Measure bf16 torch.matmul at the DLRM MLP shapes over small batch sizes (M) on the GPU, and fit the
small-M efficiency curve (``device.gemm_efficiency``) of the topology from the table.

Measure (on the GPU): ``python experiments/gpu_campaigns/gemm_small_m.py [OUT.csv]`` ->
experiments/results/gemm_small_m_h200.csv (m, n, k, median_us, tflops, device, torch, date).  CUDA graphs over 4
input sets, medians of 50 replays (the method the re-measurement of docs/sources.md S10 used); ``median_us`` is one call's share
of a replay, so it holds the kernel and its per-call floor (in-graph launch, prologue, epilogue).

Fit (anywhere): ``python experiments/gpu_campaigns/gemm_small_m.py --fit [CSV] [--topology T]`` prints the
``gemm_efficiency`` block for T's device (default the shipped H200 topology) and its errors.  Model
(simfuse.costs.analytic.gemm_curve_time_s), with L the in-graph launch latency of T's device
(``device.graph_launch_latency_us``: the table is measured in CUDA graphs, so L is what each call's share holds
besides the kernel; a run charges its own launch latency, eager or graph, on top of the kernel):

    time = L + max(floor - L, overhead + roofline(M, N, K) / eff(M))

``floor``, ``overhead`` (one number each: the per-call floor and the fixed kernel time beside the work) and
``eff(M)`` (one per measured M) minimise the squared log error of the per-call times over all shapes (grid
search: deterministic).  The error reported is leave-shape-out: each (N, K) family is
predicted by a curve fitted without it, next to the in-sample error and to the cost model without the curve."""

from __future__ import annotations

import argparse
import csv
import datetime
import math
import os
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]

M = [64, 128, 256, 528, 1056, 2112, 4224, 6912, 16384]
# (n, k) of DLRM-DCNv2's layers (docs/sources.md S52): bottom 13-512-256-128, DCN low rank 512 over 3456 features, top
NK = [(512, 16), (256, 512), (128, 256), (512, 3456), (3456, 512), (1024, 3456), (1024, 1024), (512, 1024),
      (256, 512)]


def bench(m, n, k, reps=50):
    """Median microseconds per ``x @ w`` (bf16) over 4 input sets, CUDA graph replays, after 0.3 s of launches
    (an idle H200 sits at 345 MHz until its clocks ramp up; the first table, measured without this, read the
    smallest calls up to 1.3x slower)."""
    import torch

    from simfuse.kernels.timing import graph_bench

    xs = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
    w = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    outs = [None] * 4

    def run():
        for i in range(4):
            outs[i] = xs[i] @ w
    return graph_bench(run, reps=reps, per_call=4, warm_s=0.3).median_s * 1e6


def measure(out):
    import torch

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


# ------------------------------------------------------------------------------------------------------ fit
FLOOR_GRID_US = np.arange(0.0, 6.0001, 0.01)
OVERHEAD_GRID_US = np.arange(0.0, 5.0001, 0.1)
EFF_GRID = np.exp(np.linspace(math.log(1e-3), 0.0, 1401))  # 1e-3 .. 1, log-spaced


def read_table(path):
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    return [(int(r["m"]), int(r["n"]), int(r["k"]), float(r["median_us"]) * 1e-6) for r in rows]


def rooflines_s(rows, device, dtype="bf16"):
    peak = device.flops(dtype) * device.flops_efficiency
    hbm = device.hbm_bw_bytes_per_s * device.hbm_efficiency
    eb = 2 if dtype in ("bf16", "fp16") else 4
    return np.array([max(2.0 * m * n * k / peak, (m * k + k * n + m * n) * eb / hbm) for m, n, k, _ in rows])


def fit_curve(rows, roof_s, launch_s):
    """(floor_s incl. launch, overhead_s, {M: eff}) minimising the squared log error of the per-call times."""
    t = np.array([r[3] for r in rows])
    ms = np.array([r[0] for r in rows])
    best = (math.inf, 0.0, 0.0, {})
    for ov in OVERHEAD_GRID_US * 1e-6:
        for fb in FLOOR_GRID_US * 1e-6:
            sse, effs = 0.0, {}
            for m in sorted(set(ms.tolist())):
                sel = ms == m
                # predicted total per (eff candidate, row): L + max(fb, overhead + roof / eff)
                pred = launch_s + np.maximum(fb, ov + roof_s[sel][None, :] / EFF_GRID[:, None])
                err = np.sum(np.log(pred / t[sel][None, :]) ** 2, axis=1)
                i = int(np.argmin(err))
                sse += float(err[i])
                effs[m] = float(EFF_GRID[i])
                if sse >= best[0]:
                    break
            if sse < best[0] - 1e-15:
                best = (sse, fb + launch_s, ov, effs)
    return best[1], best[2], best[3]


def predict(rows, roof_s, launch_s, floor_s, overhead_s, effs):
    from simfuse.spec import GemmEfficiencySpec

    curve = GemmEfficiencySpec("fit", floor_s, tuple(sorted(effs.items())), "bf16", overhead_s)
    return np.array([launch_s + max(floor_s - launch_s, overhead_s + r / curve.efficiency(m))
                     for (m, *_), r in zip(rows, roof_s, strict=True)])


def model_times_s(rows, system):
    """Per-call time (launch + waves) the simulator charges for each row's GEMM on ``system``."""
    from simfuse.workloads.dense import gemm_work

    c = system.cost
    out = []
    for m, n, k, _ in rows:
        w = gemm_work("g", m, n, k, "bf16")
        s = c.slots(w)
        full, rest = divmod(w.num_workgroups, s)
        body = full * c.workgroup_time_s(w, s) + (c.workgroup_time_s(w, rest) if rest else 0.0)
        out.append(c.launch_latency_s(w) + body)
    return np.array(out)


def rel_rms(pred, t):
    rel = pred / t - 1.0
    return float(np.sqrt(np.mean(rel ** 2))), float(np.max(np.abs(rel)))


def fit_main(args):
    from simfuse.spec import load_topology
    from simfuse.system import System

    rows = read_table(args.csv)
    topo = load_topology(args.topology)
    system = System.from_topology(topo)
    device = system.topology.device
    launch_s = device.graph_launch_s  # the table's calls are CUDA-graph replays
    roof = rooflines_s(rows, device)
    t = np.array([r[3] for r in rows])
    floor_s, overhead_s, effs = fit_curve(rows, roof, launch_s)
    effs = {m: min(1.0, e) for m, e in effs.items()}
    ins = rel_rms(predict(rows, roof, launch_s, floor_s, overhead_s, effs), t)
    families = sorted({(n, k) for _, n, k, _ in rows})
    held = np.empty(len(rows))
    for fam in families:
        tr = [i for i, r in enumerate(rows) if (r[1], r[2]) != fam]
        te = [i for i, r in enumerate(rows) if (r[1], r[2]) == fam]
        f_s, o_s, e = fit_curve([rows[i] for i in tr], roof[tr], launch_s)
        held[te] = predict([rows[i] for i in te], roof[te], launch_s, f_s, o_s,
                           {m: min(1.0, v) for m, v in e.items()})
    cv = rel_rms(held, t)
    bare = System.from_topology(topo.replace(device=_without_curve(topo.device))).with_launch("graph")
    before = rel_rms(model_times_s(rows, bare), t)
    after = rel_rms(model_times_s(rows, System.from_topology(topo.replace(
        device=_with_curve(topo.device, floor_s, overhead_s, effs, args.csv))).with_launch("graph")), t)
    print(f"# {args.csv}: {len(rows)} calls, {len(families)} (N, K) families; in-graph launch latency "
          f"{launch_s * 1e6:.3f} us ({args.topology})")
    print(f"# relative error rms / max: cost model without the curve {before[0]:.3f} / {before[1]:.3f}; "
          f"curve in-sample {ins[0]:.3f} / {ins[1]:.3f}; leave-shape-out {cv[0]:.3f} / {cv[1]:.3f}; "
          f"simulator with the curve {after[0]:.3f} / {after[1]:.3f}")
    print("gemm_efficiency:")
    print(f"  source: {os.path.relpath(args.csv, ROOT)} (experiments/gpu_campaigns/gemm_small_m.py --fit)")
    print("  dtype: bf16")
    print(f"  floor_us: {floor_s * 1e6:.3f}")
    print(f"  overhead_us: {overhead_s * 1e6:.2f}")
    print("  points: [" + ", ".join(f"[{m}, {e:.3g}]" for m, e in sorted(effs.items())) + "]")


def _without_curve(device):
    from dataclasses import replace

    return replace(device, gemm_efficiency=None)


def _with_curve(device, floor_s, overhead_s, effs, source):
    from dataclasses import replace

    from simfuse.spec import GemmEfficiencySpec

    return replace(device, gemm_efficiency=GemmEfficiencySpec(str(source), floor_s, tuple(sorted(effs.items())),
                                                                     "bf16", overhead_s))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", nargs="?", default=None, help="output table (measure) or input table (--fit)")
    ap.add_argument("--fit", action="store_true", help="fit the curve from the table instead of measuring")
    ap.add_argument("--topology", default=str(ROOT / "topologies" / "h200_nvl8_ib_ndr.yaml"))
    args = ap.parse_args(argv)
    if args.fit:
        args.csv = args.csv or str(ROOT / "experiments" / "results" / "gemm_small_m_h200.csv")
        fit_main(args)
    else:
        measure(args.csv or os.path.join(os.environ.get("OUT", "."), "gemm_small_m_h200.csv"))


if __name__ == "__main__":
    main()
