"""Benchmark: simulator wall time and events per second for bulk collectives at 1..1,024 nodes.

Usage: python experiments/bench/bench_engine.py [--nodes 1,16,128,1024] [--size 64MiB] [--out FILE.csv]
Targets (2-core CI machine): 128 nodes (1,024 GPUs) all-to-all of 64 MiB per GPU < 2 s; 1,024 nodes < 10 s.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from simfuse.collectives import run_collective  # noqa: E402
from simfuse.system import System  # noqa: E402
from simfuse.units import parse_size_bytes  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--topology", default=str(ROOT / "topologies/h200_nvl8_ib_ndr.yaml"))
    p.add_argument("--nodes", default="1,16,128,1024")
    p.add_argument("--size", default="64MiB")
    p.add_argument("--ops", default="all_to_all:direct,all_to_all:hierarchical,all_reduce:ring,all_reduce:hierarchical")
    p.add_argument("--full-upto", type=int, default=2, help="also run full (non-symmetric) simulation up to N nodes")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    topo = System.load(args.topology).topology
    size = parse_size_bytes(args.size)
    rows = []
    for nodes in [int(x) for x in args.nodes.split(",")]:
        for spec in args.ops.split(","):
            op, alg = spec.split(":")
            modes = ["auto"] + (["full"] if nodes <= args.full_upto else [])
            for mode in modes:
                t0 = time.perf_counter()
                r = run_collective(topo, nodes, op, size, algorithm=alg, mode=mode)
                wall = time.perf_counter() - t0
                rows.append({"nodes": nodes, "gpus": r.ranks, "op": op, "algorithm": alg, "mode": r.mode,
                             "sim_time_us": r.time_s * 1e6, "busbw_gbps": r.busbw_gbps, "events": r.events,
                             "wall_s": wall, "events_per_s": r.events / wall if wall > 0 else float("nan")})
                print(f"{nodes:5d} nodes {op:11s} {alg:12s} {r.mode:9s} sim {r.time_s*1e6:10.1f} us  "
                      f"wall {wall:7.3f} s  events {r.events:8d}", flush=True)
    df = pd.DataFrame(rows)
    if args.out:
        df.to_csv(args.out, index=False)
    print(df.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
