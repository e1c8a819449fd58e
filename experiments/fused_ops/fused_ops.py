"""Fused-operator sweep: speedup of fused computation+collective over bulk-synchronous execution.

Sweeps the three fused operators (embedding-bag + All-to-All, GEMV + AllReduce, GEMM + All-to-All) over sizes
and GPU counts -- intra-node (4 and 8 GPUs of one node) and inter-node (2, 4, 8, 16 nodes of 8 GPUs) -- on one
topology, with the simulator's default knobs (``FusedKnobs()``: one workgroup per put, remote tiles first; no
tuning towards the paper).  Writes to ``--out``:

* ``fused_ops.csv``: one row per run (operator, GPU configuration, size parameters, baseline/fused times,
  speedup, time reduction, breakdown and bottleneck columns, baseline algorithm);
* ``speedup_vs_size.png``: speedup against the per-rank collective buffer, a panel per operator, a line per
  GPU configuration;
* ``timeline.png`` and ``timeline_trace.json`` (Chrome trace / Perfetto): one baseline and one fused run of
  embedding + All-to-All;
* ``summary.csv``: average / maximum time reduction per operator and regime beside the paper's numbers.

Prints the same summary.  ``--bench`` times each operator on 128 nodes x 8 GPUs (1,024 GPUs).
``--tiny`` is a seconds-long smoke configuration (tests use it).

Breakdown columns (seconds, representative rank): ``baseline_compute_s`` (kernel incl. launch latency),
``baseline_exposed_comm_s`` (collective launch + transfer after the kernel), ``fused_compute_s`` (fused kernel,
including per-put issue overhead and lost occupancy), ``fused_exposed_comm_s`` (last arrival after the fused
kernel ends).  Derived: ``comm_share`` = baseline exposed comm / baseline time (communication-boundness),
``fused_kernel_overhead_s`` = fused - baseline compute, ``hidden_comm_fraction`` = saved time / baseline
exposed comm, ``nvl_wire_s`` / ``nic_wire_s`` = bytes each rank sends over NVLink / its NIC share divided by the
link's effective bandwidth, ``comm_bottleneck`` (nic / nvlink / latency: the exposed comm is latency-bound
when the larger wire time is under half of it), ``kernel_bound`` (hbm / flops from the roofline).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from simfuse.fused.knobs import FusedKnobs  # noqa: E402
from simfuse.fused.ops import make_op  # noqa: E402
from simfuse.network import INTRA, SELF, Fabric  # noqa: E402
from simfuse.results.io import atomic_write_df  # noqa: E402
from simfuse.results.perfetto import write_chrome_trace  # noqa: E402
from simfuse.results.plots import plot_speedup_vs_size, plot_timeline  # noqa: E402
from simfuse.system import System  # noqa: E402
from simfuse.workloads.op import run_op  # noqa: E402

# The paper's reported time reductions (docs/sources.md S49; arXiv 2305.06942, SC24): (average, maximum); None = not given.
PAPER = {
    ("embedding_all_to_all", "intra4"): (0.20, 0.32),
    ("embedding_all_to_all", "intra"): (0.20, 0.32),
    ("embedding_all_to_all", "inter"): (0.31, None),
    ("gemv_all_reduce", "all"): (0.13, 0.22),
    ("gemm_all_to_all", "all"): (0.12, 0.20),
}
PAPER_NOTE = {
    ("embedding_all_to_all", "intra4"): "paper: 4 GPUs of one node",
    ("embedding_all_to_all", "intra"): "paper: 4 GPUs of one node (here 4 and 8)",
    ("embedding_all_to_all", "inter"): "multi-node",
    ("gemv_all_reduce", "all"): "regime not stated",
    ("gemm_all_to_all", "all"): "regime not stated",
}

GPU_CONFIGS = [(1, 4), (1, 8), (2, 8), (4, 8), (8, 8), (16, 8)]  # (nodes, gpus_per_node)
TINY_GPU_CONFIGS = [(1, 4), (2, 8)]

SIZE_KEYS = {
    "embedding_all_to_all": ["global_batch", "dim", "tables_per_gpu", "pooling", "rows", "dtype"],
    "gemv_all_reduce": ["n", "k", "tokens", "dtype"],
    "gemm_all_to_all": ["tokens", "hidden", "ffn", "experts_per_gpu", "top_k", "dtype"],
}


def sweep_params(tiny: bool) -> dict[str, list[dict]]:
    """Operator -> list of parameter dicts (the rest from each operator's defaults)."""
    if tiny:
        return {
            "embedding_all_to_all": [{"global_batch": 4096, "dim": 64, "tables_per_gpu": 2}],
            "gemv_all_reduce": [{"n": 4096, "k": 4096, "tokens": 1}],
            "gemm_all_to_all": [{"tokens": 512, "hidden": 4096}],
        }
    emb = [{"global_batch": b, "dim": d, "tables_per_gpu": t}
           for b in (4096, 16384, 65536) for d in (64, 128) for t in (2, 8)]
    gemv = [{"n": n, "k": k, "tokens": m}
            for (n, k) in ((4096, 4096), (8192, 8192), (28672, 8192), (8192, 28672)) for m in (1, 4, 16)]
    gemm = [{"tokens": t, "hidden": h} for t in (512, 1024, 2048, 4096, 8192) for h in (4096, 7168)]
    return {"embedding_all_to_all": emb, "gemv_all_reduce": gemv, "gemm_all_to_all": gemm}


def wire_times(op, topology, nodes: int, gpus_per_node: int) -> tuple[float, float, float, float]:
    """(intra-node bytes, inter-node bytes) that rank 0 sends, and their wire times at the effective NVLink
    bandwidth and rank 0's share of its NIC (s).  GEMV+AllReduce sends in two phases (reduce-scatter then
    all-gather), so its bytes count twice."""
    topology = getattr(topology, "topology", topology)  # a System: its resolved topology
    fabric = Fabric(topology, nodes, gpus_per_node=gpus_per_node, symmetric=True)
    dst, out = op.wg_destinations(0)
    cls = fabric.route_class(0, dst)
    intra = float(np.sum(out[cls == INTRA]))
    inter = float(np.sum(out[(cls != SELF) & (cls != INTRA)]))
    if op.collective == "all_reduce":
        intra, inter = 2 * intra, 2 * inter
    nvl_bw = topology.scale_up.effective_bw_bytes_per_s
    nics = min(topology.scale_out.nics_per_node, gpus_per_node)
    nic_bw = topology.scale_out.effective_nic_bw_bytes_per_s * nics / gpus_per_node  # one rank's NIC share
    return intra, inter, intra / nvl_bw, inter / nic_bw


def kernel_bound(op, topology) -> str:
    """``hbm`` or ``flops``: which roofline limit sets the unfused kernel's time."""
    w = op.work("compute")
    dev = getattr(topology, "topology", topology).device
    t_f = w.flops_per_wg / (dev.flops(w.dtype) * dev.flops_efficiency)
    t_b = w.bytes_per_wg / (dev.hbm_bw_bytes_per_s * dev.hbm_efficiency)
    return "flops" if t_f > t_b else "hbm"


def run_one(name: str, params: dict, nodes: int, g: int, topology, topo_name: str,
            knobs: FusedKnobs | None = None) -> dict:
    op = make_op(name, params, nodes, g)
    t0 = time.perf_counter()
    res = run_op(op, topology, nodes, knobs=knobs or FusedKnobs())
    wall = time.perf_counter() - t0
    intra_b, inter_b, nvl_s, nic_s = wire_times(op, topology, nodes, g)
    row = {"op": name, "topology": topo_name, "nodes": nodes, "gpus_per_node": g, "gpus": nodes * g,
           "regime": "intra" if nodes == 1 else "inter"}
    for k in SIZE_KEYS[name]:
        row[k] = op.params.get(k)
    row.update({
        "comm_bytes_per_rank": res.comm_bytes_per_rank,
        "baseline_time_s": res.baseline_time_s, "fused_time_s": res.fused_time_s,
        "speedup": res.speedup, "time_reduction": res.time_reduction,
        "baseline_compute_s": res.baseline_compute_s, "baseline_exposed_comm_s": res.baseline_exposed_comm_s,
        "fused_compute_s": res.fused_compute_s, "fused_exposed_comm_s": res.fused_exposed_comm_s,
        "comm_share": res.baseline_exposed_comm_s / res.baseline_time_s if res.baseline_time_s > 0 else 0.0,
        "fused_kernel_overhead_s": res.fused_compute_s - res.baseline_compute_s,
        "hidden_comm_fraction": ((res.baseline_time_s - res.fused_time_s) / res.baseline_exposed_comm_s
                                 if res.baseline_exposed_comm_s > 0 else 0.0),
        "intra_bytes_per_rank": intra_b, "inter_bytes_per_rank": inter_b,
        "nvl_wire_s": nvl_s, "nic_wire_s": nic_s,
    })
    wire = max(nvl_s, nic_s)
    if wire < 0.5 * res.baseline_exposed_comm_s:
        row["comm_bottleneck"] = "latency"
    else:
        row["comm_bottleneck"] = "nic" if nic_s >= nvl_s else "nvlink"
    row["kernel_bound"] = kernel_bound(op, topology)
    row["workgroups"] = op.work("fused").num_workgroups
    row["baseline_algorithm"] = res.params.get("baseline_algorithm")
    row["mode"] = res.mode
    row["events"] = res.events
    del wall  # wall time is not written, so that the CSV is reproducible byte for byte
    return row


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    """Average / maximum time reduction per operator and regime (intra4 = one node of 4 GPUs, intra = one
    node, inter = several nodes, all), beside the paper."""
    rows = []
    for op in dict.fromkeys(df["op"]):
        for regime in ("intra4", "intra", "inter", "all"):
            if regime == "all":
                sub = df[df["op"] == op]
            elif regime == "intra4":
                sub = df[(df["op"] == op) & (df["nodes"] == 1) & (df["gpus_per_node"] == 4)]
            else:
                sub = df[(df["op"] == op) & (df["regime"] == regime)]
            if sub.empty:
                continue
            p = PAPER.get((op, regime), (None, None))
            rows.append({
                "op": op, "regime": regime, "runs": len(sub),
                "avg_time_reduction": float(sub["time_reduction"].mean()),
                "max_time_reduction": float(sub["time_reduction"].max()),
                "min_time_reduction": float(sub["time_reduction"].min()),
                "avg_comm_share": float(sub["comm_share"].mean()),
                "paper_avg": p[0], "paper_max": p[1], "paper_note": PAPER_NOTE.get((op, regime), ""),
            })
    return pd.DataFrame(rows)


def format_summary(summ: pd.DataFrame) -> str:
    def pct(v):
        return "   -  " if v is None or (isinstance(v, float) and np.isnan(v)) else f"{100 * v:5.1f}%"

    lines = [f"{'operator':22s} {'regime':6s} {'runs':>4s} {'avg':>7s} {'max':>7s} {'min':>7s}   "
             f"{'paper avg':>9s} {'paper max':>9s}  note"]
    for r in summ.itertuples():
        lines.append(f"{r.op:22s} {r.regime:6s} {r.runs:4d} {pct(r.avg_time_reduction):>7s} "
                     f"{pct(r.max_time_reduction):>7s} {pct(r.min_time_reduction):>7s}   "
                     f"{pct(r.paper_avg):>9s} {pct(r.paper_max):>9s}  {r.paper_note}")
    return "\n".join(lines)


def timeline_runs(topology, tiny: bool):
    """One baseline and one fused run of embedding + All-to-All (full simulation, every rank, link usage)."""
    nodes, g = (2, 4) if tiny else (2, 8)
    params = {"global_batch": 4096, "dim": 64, "tables_per_gpu": 2} if tiny else {}
    op = make_op("embedding_all_to_all", params, nodes, g)
    res, sims = run_op(op, topology, nodes, mode="full", record=True, record_usage=True, return_sims=True)
    return res, [("baseline", *sims["baseline"]), ("fused", *sims["fused"])], (nodes, g)


def bench(topology, nodes: int = 128, g: int = 8) -> pd.DataFrame:
    """Wall time and simpy events of each operator (default parameters) on ``nodes`` x ``g`` GPUs."""
    rows = []
    for name in ("embedding_all_to_all", "gemv_all_reduce", "gemm_all_to_all"):
        op = make_op(name, {}, nodes, g)
        t0 = time.perf_counter()
        res = run_op(op, topology, nodes)
        wall = time.perf_counter() - t0
        rows.append({"op": name, "nodes": nodes, "gpus": nodes * g, "wall_s": wall, "events": res.events,
                     "mode": res.mode, "speedup": res.speedup, "baseline_algorithm": res.params["baseline_algorithm"]})
        print(f"  {name:22s} {nodes * g:5d} GPUs: {wall:6.2f} s wall, {res.events:7d} events, "
              f"mode {res.mode}, speedup {res.speedup:.3f}", flush=True)
    return pd.DataFrame(rows)


def check_args(args) -> None:
    """Every argument checked before any run (a SpecError naming it): ``--occupancy-loss``, the topology file and
    a writable ``--out``."""
    from simfuse.arguments import check_out_writable, check_setting
    from simfuse.spec import load_topology

    if args.occupancy_loss is not None:
        check_setting("occupancy_loss", args.occupancy_loss, "--occupancy-loss")
    load_topology(args.topology)
    check_out_writable(args.out)


def main(argv=None) -> int:
    from simfuse.arguments import script_main

    return script_main(_main, argv, "fused_ops.py")


def _main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--topology", default=str(REPO / "topologies" / "h200_nvl8_ib_ndr.yaml"))
    ap.add_argument("--out", default=str(REPO / "experiments" / "results" / "fused_ops"))
    ap.add_argument("--tiny", action="store_true", help="small smoke configuration (seconds)")
    ap.add_argument("--bench", action="store_true", help="also time each operator on 128 nodes x 8 GPUs")
    ap.add_argument("--occupancy-loss", type=float, default=None,
                    help="sensitivity check: override gpu_initiated.occupancy_loss (default: the topology's)")
    ap.add_argument("--bench-only", action="store_true", help="only run the 1,024-GPU benchmark")
    ap.add_argument("--baseline-kernel", default="same", choices=("same", "library"),
                    help="the baseline's compute kernel: the operator's own kernel unfused (default) or a "
                         "vendor-library kernel (cuBLAS's measured model where the topology has one)")
    args = ap.parse_args(argv)
    check_args(args)

    # one System: calibrated kernels *and* the calibrated fabric (the profile applied once, here)
    topology = System.load(args.topology)
    topo_name = topology.name
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    if not args.bench_only:
        t_start = time.perf_counter()
        configs = TINY_GPU_CONFIGS if args.tiny else GPU_CONFIGS
        rows = []
        plan = [(name, p, nodes, g) for name, plist in sweep_params(args.tiny).items() for p in plist
                for nodes, g in configs]
        for i, (name, p, nodes, g) in enumerate(plan, 1):
            rows.append(run_one(name, p, nodes, g, topology, topo_name,
                                FusedKnobs(occupancy_loss=args.occupancy_loss, baseline_kernel=args.baseline_kernel)))
            if i % 25 == 0 or i == len(plan):
                print(f"  [{i}/{len(plan)}] runs, {time.perf_counter() - t_start:.1f} s", flush=True)
        df = pd.DataFrame(rows)
        atomic_write_df(df, out / "fused_ops.csv")
        summ = summarize(df)
        atomic_write_df(summ, out / "summary.csv")
        plot_speedup_vs_size(df, out / "speedup_vs_size.png",
                             title=f"Fused vs bulk-synchronous ({topo_name}, default knobs)")
        res, runs, (tn, tg) = timeline_runs(topology, args.tiny)
        plot_timeline(out / "timeline.png", runs, links=["nvl_tx[0]", "nvl_rx[0]", "nic_tx[0,0]", "nic_rx[0,0]"],
                      title=f"embedding + All-to-All, {tn} nodes x {tg} GPUs, rank 0: baseline "
                            f"{res.baseline_time_s * 1e6:.0f} us, fused {res.fused_time_s * 1e6:.0f} us "
                            f"({100 * res.time_reduction:.1f}% less)")
        write_chrome_trace(out / "timeline_trace.json", runs)
        elapsed = time.perf_counter() - t_start
        print(f"\nsweep: {len(df)} runs in {elapsed:.1f} s -> {out}")
        print("\nTime reduction (1 - fused/baseline), measured vs paper:")
        print(format_summary(summ))
        print("\nMean breakdown per operator and regime (us):")
        cols = ["baseline_compute_s", "baseline_exposed_comm_s", "fused_compute_s", "fused_exposed_comm_s",
                "nvl_wire_s", "nic_wire_s"]
        br = df.groupby(["op", "regime"], sort=False)[cols].mean() * 1e6
        br["comm_share"] = df.groupby(["op", "regime"], sort=False)["comm_share"].mean()
        print(br.round(2).to_string())
        print("\nComm bottleneck counts:")
        print(df.groupby(["op", "regime", "comm_bottleneck"], sort=False).size().to_string())
        for f in ("fused_ops.csv", "summary.csv"):
            (out / f).chmod(0o644)
    if args.bench or args.bench_only:
        print("\n1,024-GPU benchmark (128 nodes x 8, default parameters):")
        b = bench(topology)
        atomic_write_df(b, out / "bench_1024.csv")
        (out / "bench_1024.csv").chmod(0o644)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
