"""Benchmark the sharding planner alone and ``simfuse run`` with planning (both modes) at a node count.

Targets (issue 11): the planner alone <= 5 s at 1,024 nodes; ``simfuse run`` with planning, both modes, 1,024
nodes <= 10 s; 16,384 nodes <= 60 s and <= 4 GiB.  Writes ``experiments/results/bench_planner.csv`` (machine,
date and the process's peak RSS so far in every row; run one node count per process, ``--append`` to collect)::

    python experiments/bench_planner.py --nodes 1024 [--out experiments/results/bench_planner.csv] [--append]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import resource
import time
from pathlib import Path

import pandas as pd

from simfuse.fused.knobs import ExecutionSpec
from simfuse.results.io import atomic_write_df
from simfuse.spec import load_workload
from simfuse.system import System
from simfuse.workloads.planner import plan_tables
from simfuse.workloads.run import scaled_spec, simulate_workload

ROOT = Path(__file__).resolve().parents[1]


def _rss_gib() -> float:
    """Peak resident set of this process so far (GiB; Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def main(argv=None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1024)
    ap.add_argument("--model", default=str(ROOT / "models/dlrm_dcnv2_mlperf_16n.yaml"))
    ap.add_argument("--topology", default=str(ROOT / "topologies/h200_nvl8_ib_ndr.yaml"))
    ap.add_argument("--batch-per-gpu", type=int, default=1056, help="weak scaling at the 16-node MLPerf batch")
    ap.add_argument("--out", default=str(ROOT / "experiments/results/bench_planner.csv"))
    ap.add_argument("--run-nodes", type=int, default=None, help="node count of the simfuse run timing (default: "
                                                                "--nodes; 0 skips it)")
    ap.add_argument("--append", action="store_true", help="add the rows to --out instead of replacing it")
    args = ap.parse_args(argv)
    system = System.load(args.topology)
    g = system.gpus_per_node
    # the simulation itself (no prediction-interval reruns, which multiply the time by 4)
    ex = ExecutionSpec(batch_per_gpu=args.batch_per_gpu, placement="planned", sim_mode="classes", uncertainty="none")
    spec = scaled_spec(load_workload(args.model), args.nodes, g, ex)
    meta = {"machine": f"{platform.node()} ({platform.processor() or platform.machine()}, {os.cpu_count()} cpus)",
            "date": datetime.date.today().isoformat(), "nodes": args.nodes, "gpus": args.nodes * g,
            "model": spec.name, "topology": system.name, "global_batch": spec.global_batch}
    rows = []
    for mode in ("baseline", "fused"):
        t0 = time.perf_counter()
        p = plan_tables(spec, system, args.nodes, g, mode)
        rows.append({**meta, "what": f"planner_{mode}", "wall_s": time.perf_counter() - t0,
                     "target_s": 5.0, "result": p.candidate, "estimated_critical_s": p.estimated_critical_s,
                     "peak_rss_gib": _rss_gib()})
    rows.append({**meta, "what": "planner_both", "wall_s": rows[0]["wall_s"] + rows[1]["wall_s"], "target_s": 5.0})
    rn = args.nodes if args.run_nodes is None else args.run_nodes
    if rn:
        t0 = time.perf_counter()
        res = simulate_workload(load_workload(args.model), system, rn, execution=ex)
        rows.append({**meta, "nodes": rn, "gpus": rn * g, "global_batch": res["fused"].global_batch,
                     "what": "run_both_modes", "wall_s": time.perf_counter() - t0, "target_s": 60.0 if rn >= 16384 else 10.0,
                     "baseline_iteration_s": res["baseline"].iteration_time_s,
                     "fused_iteration_s": res["fused"].iteration_time_s, "rank_classes": res["fused"].classes,
                     "peak_rss_gib": _rss_gib()})
    df = pd.DataFrame(rows)
    if args.append and Path(args.out).exists():
        df = pd.concat([pd.read_csv(args.out), df], ignore_index=True)
    atomic_write_df(df, args.out)
    print(df[["what", "wall_s", "target_s"]].to_string(index=False))
    return df


if __name__ == "__main__":
    main()
