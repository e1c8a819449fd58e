"""Benchmark: wall time of ``simulate_llm`` (one training step, baseline and fused) for the Llama-3 8B and 70B
configurations at several node counts.

Usage: python experiments/bench/bench_llm.py [--nodes 1,8,128,1024] [--models models/llm_tp_dp.yaml,...]
       [--out experiments/results/bench_llm.csv]
Target (2-core machine): one mode of the step at 1,024 nodes in <= 10 s.  Each point runs in a fresh process
(no tuner memo or import carried over); the CSV records the machine and the date.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODELS = f"{ROOT / 'models/llm_tp_dp.yaml'},{ROOT / 'models/llm_tp_dp_70b.yaml'}"


def one(model: str, nodes: int, topology: str) -> list[dict]:
    sys.path.insert(0, str(ROOT))
    from simfuse.fused.knobs import ExecutionSpec
    from simfuse.spec import load_workload
    from simfuse.system import System
    from simfuse.workloads.llm import simulate_llm

    spec = load_workload(model)
    system = System.load(topology)
    rows = []
    for mode in ("baseline", "fused"):
        t0 = time.perf_counter()
        res = simulate_llm(spec, system, nodes, execution=ExecutionSpec(mode=mode))[mode]
        wall = time.perf_counter() - t0
        rows.append({"model": spec.name, "nodes": nodes, "gpus": nodes * system.gpus_per_node, "tp": spec.tp,
                     "dp": nodes * system.gpus_per_node // spec.tp, "mode": mode, "wall_s": wall,
                     "events": res.events, "sim_mode": res.sim_mode, "step_time_s": res.iteration_time_s,
                     "compute_time_s": res.compute_time_s, "exposed_comm_time_s": res.exposed_comm_time_s,
                     "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})
    return rows


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.node()} ({cpu}, {len(os.sched_getaffinity(0))} cores, Python {platform.python_version()})"


def check_args(args) -> list[int]:
    """Every argument checked before any point runs (a SpecError naming it); returns the node counts."""
    sys.path.insert(0, str(ROOT))
    from simfuse.arguments import check_out_writable
    from simfuse.spec import load_topology, load_workload
    from simfuse.sweeps import parse_nodes

    nodes = parse_nodes(args.nodes)
    for model in args.models.split(","):
        load_workload(model)
    load_topology(args.topology)
    check_out_writable(args.out, is_dir=False)
    return nodes


def main(argv=None) -> int:
    from simfuse.arguments import script_main

    return script_main(_main, argv, "bench_llm.py")


def _main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", default="1,8,128,1024")
    p.add_argument("--models", default=MODELS, help="comma-separated model files")
    p.add_argument("--topology", default=str(ROOT / "topologies/h200_nvl8_ib_ndr.yaml"))
    p.add_argument("--out", default=str(ROOT / "experiments/results/bench_llm.csv"))
    p.add_argument("--one", nargs=2, metavar=("MODEL", "NODES"), default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one is not None:
        print(json.dumps(one(args.one[0], int(args.one[1]), args.topology)))
        return 0
    import pandas as pd

    node_list = check_args(args)
    rows = []
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    host = machine()
    for model in args.models.split(","):
        for n in node_list:
            r = subprocess.run([sys.executable, __file__, "--one", model, str(n), "--topology", args.topology],
                               capture_output=True, text=True, check=True)
            for row in json.loads(r.stdout.strip().splitlines()[-1]):
                row.update(machine=host, date=stamp)
                rows.append(row)
                print(f"{row['model']:>18s} {row['nodes']:5d} nodes ({row['gpus']} GPUs) {row['mode']:8s}: wall "
                      f"{row['wall_s']:6.2f} s, events {row['events']}, step {row['step_time_s'] * 1e3:.1f} ms "
                      f"(exposed comm {row['exposed_comm_time_s'] * 1e3:.1f} ms)", flush=True)
    from simfuse.results.io import atomic_write_df

    atomic_write_df(pd.DataFrame(rows), Path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
