"""Benchmark: a DLRM projection with input uncertainty (issue target: 64 draws at 128 nodes in at most 60 s on
2 cores), and the cost guard's estimate beside the measured time.

Usage:
    python experiments/bench/bench_uncertainty.py [--nodes 128] [--draws 64] [--workers 2]
        [--topologies h100_nvl8_ib_ndr,h200_nvl8_ib_ndr] [--sensitivity rank,oat] [--out CSV]

Each row: the model, topology, node count, draws, sensitivity method, the number of simulations, wall time,
the guard's estimate, the peak memory of the process tree (parent + workers, an upper bound), the machine and the
date.  Appends to --out (default experiments/results/bench_uncertainty.csv).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import resource
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from simfuse.fused.knobs import parse_execution  # noqa: E402
from simfuse.guard import estimate_workload  # noqa: E402
from simfuse.spec import load_workload  # noqa: E402
from simfuse.system import System  # noqa: E402
from simfuse.workloads.run import scaled_spec, simulate_workload  # noqa: E402


def _rss_mib() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return (me + kids) / 1024  # Linux: KiB


def one(model: Path, topo: Path, nodes: int, draws: int, sensitivity: str, workers: int, gb: int) -> dict:
    spec, system = load_workload(model), System.load(topo)
    ex = parse_execution({"uncertainty": "inputs", "uncertainty_draws": draws, "sensitivity": sensitivity,
                          "global_batch": gb})
    g = system.gpus_per_node
    est = estimate_workload(scaled_spec(spec, nodes, g, ex), system.nominal, nodes, g, "auto", ex, workers)
    t0 = time.perf_counter()
    res = simulate_workload(spec, system, nodes, execution=ex, workers=workers)
    wall = time.perf_counter() - t0
    an = res["fused"].input_analysis
    return {"model": spec.name, "topology": system.name, "nodes": nodes, "global_batch": gb, "draws": draws,
            "sensitivity": sensitivity, "inputs": len(an.inputs), "interval_runs": len(an.draws) + len(an.oat),
            "workers": workers, "wall_s": round(wall, 2), "guard_estimate_s": round(est.seconds, 2),
            "speedup": res["baseline"].iteration_time_s / res["fused"].iteration_time_s,
            "speedup_p10": res["fused"].speedup_interval["p10"], "speedup_p90": res["fused"].speedup_interval["p90"],
            "peak_rss_mib_upper": round(_rss_mib(), 1), "machine": f"{platform.machine()} {os.cpu_count()} cores",
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def check_args(args) -> None:
    """Every argument checked before any point runs (a SpecError naming it)."""
    from simfuse.arguments import check_out_writable, check_setting, check_workers
    from simfuse.checks import check_nodes
    from simfuse.spec import load_topology

    check_nodes(args.nodes)
    for key, flag, value in (("uncertainty_draws", "--draws", args.draws),
                             ("global_batch", "--global-batch", args.global_batch),
                             *(("sensitivity", "--sensitivity", s) for s in args.sensitivity.split(","))):
        check_setting(key, value, flag)
    check_workers(args.workers)
    load_workload(args.model)
    for topo in args.topologies.split(","):
        load_topology(ROOT / "topologies" / f"{topo}.yaml")
    check_out_writable(args.out, is_dir=False)


def main(argv=None) -> int:
    from simfuse.arguments import script_main

    return script_main(_main, argv, "bench_uncertainty.py")


def _main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=str(ROOT / "models/dlrm_dcnv2_mlperf.yaml"))
    p.add_argument("--topologies", default="h100_nvl8_ib_ndr,h200_nvl8_ib_ndr")
    p.add_argument("--nodes", type=int, default=128)
    p.add_argument("--draws", type=int, default=64)
    p.add_argument("--global-batch", type=int, default=131072)
    p.add_argument("--sensitivity", default="rank,oat")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--out", default=str(ROOT / "experiments/results/bench_uncertainty.csv"))
    args = p.parse_args(argv)
    check_args(args)
    rows = []
    for topo in args.topologies.split(","):
        for sens in args.sensitivity.split(","):
            r = one(Path(args.model), ROOT / "topologies" / f"{topo}.yaml", args.nodes, args.draws, sens,
                    args.workers, args.global_batch)
            print(r, flush=True)
            rows.append(r)
    out = Path(args.out)
    df = pd.DataFrame(rows)
    if out.exists():
        df = pd.concat([pd.read_csv(out), df], ignore_index=True)
    from simfuse.results.io import atomic_write_df

    atomic_write_df(df, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
