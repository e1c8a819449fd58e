"""Benchmark: wall time, events and peak memory of `simfuse run` for DLRM-DCNv2 (both modes).

Usage: python experiments/bench/bench_dlrm.py [--nodes 128,1024]
Targets (2-core machine): both modes <= 5 s at every node count from 1 to 1,024, peak memory < 4 GiB.  Each node count runs in
a fresh process so that the peak resident memory is that run's.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def one(nodes: int, model: str, topology: str, uncertainty: str = "none") -> dict:
    sys.path.insert(0, str(ROOT))
    from simfuse.spec import load_workload
    from simfuse.system import System
    from simfuse.workloads.run import simulate_workload

    t0 = time.perf_counter()
    spec = load_workload(model)
    system = System.load(topology)
    topo = system.topology
    from simfuse.fused.knobs import parse_execution

    res = simulate_workload(spec, system, nodes, execution=parse_execution({"uncertainty": uncertainty}))
    wall = time.perf_counter() - t0
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"nodes": nodes, "gpus": nodes * topo.scale_up.gpus_per_node, "wall_s": wall,
            "events": sum(r.events for r in res.values()), "peak_rss_mib": peak_kib / 1024,
            "speedup": res["baseline"].iteration_time_s / res["fused"].iteration_time_s,
            "rank_classes": res["fused"].classes, "uncertainty": uncertainty}


def check_args(args) -> list[int]:
    """Every argument checked before any point runs (a SpecError naming it); returns the node counts."""
    from simfuse.arguments import check_out_writable
    from simfuse.spec import load_topology, load_workload
    from simfuse.sweeps import parse_nodes

    nodes = parse_nodes(args.nodes)
    load_workload(args.model)
    load_topology(args.topology)
    check_out_writable(args.out, is_dir=False)
    return nodes


def main(argv=None) -> int:
    from simfuse.arguments import script_main

    return script_main(_main, argv, "bench_dlrm.py")


def _main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", default="1,2,4,8,16,32,64,128,256,512,1024")
    p.add_argument("--model", default=str(ROOT / "models/dlrm_dcnv2_tablewise.yaml"))
    p.add_argument("--topology", default=str(ROOT / "topologies/h200_nvl8_ib_ndr.yaml"))
    p.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--out", default=None, help="also write the table as CSV (with machine and date)")
    p.add_argument("--uncertainty", default="none", choices=("none", "bound", "mc"),
                   help="none (default): the simulation itself; bound: with the p10/p50/p90 runs (4x)")
    args = p.parse_args(argv)
    if args.one is not None:
        print(json.dumps(one(args.one, args.model, args.topology, args.uncertainty)))
        return 0
    rows = []
    for n in check_args(args):
        r = subprocess.run([sys.executable, __file__, "--one", str(n), "--model", args.model, "--topology",
                            args.topology, "--uncertainty", args.uncertainty], capture_output=True, text=True,
                           check=True)
        row = json.loads(r.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(f"{row['nodes']:5d} nodes ({row['gpus']} GPUs): wall {row['wall_s']:.2f} s, events {row['events']}, "
              f"peak RSS {row['peak_rss_mib']:.0f} MiB, rank classes {row['rank_classes']}, "
              f"speedup {row['speedup']:.3f}", flush=True)
    if args.out:
        import datetime
        import os
        import platform

        import pandas as pd

        from simfuse.results.io import atomic_write_df

        df = pd.DataFrame(rows)
        df["machine"] = f"{platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()}"
        df["date"] = datetime.date.today().isoformat()
        atomic_write_df(df, Path(args.out))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
