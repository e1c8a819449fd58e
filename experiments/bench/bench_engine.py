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


def check_args(args) -> tuple[list[int], int, list[tuple[str, str]]]:
    """Every argument checked before any collective runs (a SpecError naming it); returns the node counts, the
    size in bytes and the (collective, algorithm) pairs."""
    from simfuse.arguments import check_out_writable
    from simfuse.collectives import REGISTRY
    from simfuse.errors import SpecError
    from simfuse.spec import load_topology
    from simfuse.sweeps import parse_nodes

    nodes = parse_nodes(args.nodes)
    size = parse_size_bytes(args.size, "<argument>", "--size")
    ops = []
    for spec in args.ops.split(","):
        op, _, alg = spec.partition(":")
        if op not in REGISTRY or alg not in REGISTRY[op]:
            raise SpecError("<argument>", "--ops", f"unknown collective:algorithm {spec!r}; expected e.g. "
                            "all_to_all:direct or all_reduce:ring")
        ops.append((op, alg))
    if args.full_upto < 0:
        raise SpecError("<argument>", "--full-upto", f"must be >= 0, got {args.full_upto}")
    load_topology(args.topology)
    check_out_writable(args.out, is_dir=False)
    return nodes, size, ops


def main(argv=None) -> int:
    from simfuse.arguments import script_main

    return script_main(_main, argv, "bench_engine.py")


def _main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--topology", default=str(ROOT / "topologies/h200_nvl8_ib_ndr.yaml"))
    p.add_argument("--nodes", default="1,16,128,1024")
    p.add_argument("--size", default="64MiB")
    p.add_argument("--ops", default="all_to_all:direct,all_to_all:hierarchical,all_reduce:ring,all_reduce:hierarchical")
    p.add_argument("--full-upto", type=int, default=2, help="also run full (non-symmetric) simulation up to N nodes")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    node_list, size, ops = check_args(args)
    topo = System.load(args.topology).topology
    rows = []
    for nodes in node_list:
        for op, alg in ops:
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
        from simfuse.results.io import atomic_write_df

        atomic_write_df(df, args.out)
    print(df.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
