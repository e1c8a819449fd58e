"""DLRM-DCNv2 (MLPerf) with planned sharding: fused / baseline speedup, with and without the hierarchical fused push
of table-row-wise shards (knob ``twrw_fused``).

Usage:
    python experiments/scaling/dlrm_twrw_fused.py [--nodes 1,2,8,16,128] [--topologies h200_nvl8_ib_ndr,h100_nvl8_ib_ndr]
                                          [--set twrw_fused=off] [--out experiments/results/dlrm_twrw_fused.csv]
                                          [--machine "2-core VM, x86_64, Python 3.11"]

Batch: the MLPerf Training DGX H100 submissions' (models/dlrm_dcnv2_mlperf*.yaml): 55,296 global on 1 and 2 nodes
(the 1-node file), 135,168 global on 8, 16 and 128 nodes (the 8- and 16-node files' global batch, strong scaling).
One row per (topology, nodes): baseline and fused iteration (s), speedup, and whether the chosen fused plan has
shards the hierarchical push carries (``fused_plan_has_twrw``: table-row-wise or grid; ``fused_plan_has_grid``:
grid).
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from simfuse.fused.knobs import parse_execution, parse_set_pairs  # noqa: E402
from simfuse.results.io import atomic_write_df  # noqa: E402
from simfuse.spec import load_workload  # noqa: E402
from simfuse.system import System  # noqa: E402
from simfuse.workloads.planner import HIER_SHARDINGS  # noqa: E402
from simfuse.workloads.run import scaled_spec, simulate_workload  # noqa: E402

#: model file per node count (the submission batch); beyond 16 nodes the 16-node file's global batch
MODEL_BY_NODES = {1: "dlrm_dcnv2_mlperf", 2: "dlrm_dcnv2_mlperf", 8: "dlrm_dcnv2_mlperf_8n",
                  16: "dlrm_dcnv2_mlperf_16n"}


def check_args(args):
    """Every argument checked before any point runs (a SpecError naming it): the node list, the ``--set`` pairs,
    the topology files and a writable ``--out`` (a CSV file); returns the nodes and the execution spec."""
    from simfuse.arguments import check_out_writable
    from simfuse.spec import load_topology
    from simfuse.sweeps import parse_nodes

    nodes = parse_nodes(args.nodes)
    ex = parse_execution({"uncertainty": "none", **parse_set_pairs(args.set)}, source="--set")
    for topo in args.topologies.split(","):
        load_topology(ROOT / "topologies" / f"{topo}.yaml")
    check_out_writable(args.out, is_dir=False)
    return nodes, ex


def main(argv=None) -> int:
    from simfuse.arguments import script_main

    return script_main(_main, argv, "dlrm_twrw_fused.py")


def _main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", default="1,2,8,16,128")
    p.add_argument("--topologies", default="h200_nvl8_ib_ndr,h100_nvl8_ib_ndr")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--out", default=str(ROOT / "experiments/results/dlrm_twrw_fused.csv"))
    p.add_argument("--machine", default=f"{platform.machine()}, Python {platform.python_version()}")
    args = p.parse_args(argv)
    node_list, ex = check_args(args)
    rows = []
    for topo in args.topologies.split(","):
        system = System.load(ROOT / "topologies" / f"{topo}.yaml")
        for nodes in node_list:
            spec = load_workload(ROOT / "models" / f"{MODEL_BY_NODES.get(nodes, 'dlrm_dcnv2_mlperf_16n')}.yaml")
            spec = scaled_spec(spec, nodes, system.gpus_per_node, ex)
            t0 = time.perf_counter()
            res = simulate_workload(spec, system, nodes, execution=ex)
            base, fused = res["baseline"], res["fused"]
            kinds = {tp.sharding for tp in (fused.plan.tables if fused.plan else [])}
            row = {"topology": topo, "nodes": nodes, "global_batch": spec.global_batch,
                   "twrw_push": ex.knobs.twrw_push,
                   "baseline_s": base.iteration_time_s, "fused_s": fused.iteration_time_s,
                   "speedup": base.iteration_time_s / fused.iteration_time_s,
                   "fused_plan": fused.plan.candidate if fused.plan else "", "fused_plan_has_twrw": bool(kinds & set(HIER_SHARDINGS)),
                   "fused_plan_has_grid": "grid" in kinds,
                   "wall_s": round(time.perf_counter() - t0, 1), "machine": args.machine,
                   "date": datetime.date.today().isoformat()}
            rows.append(row)
            print(row, flush=True)
    atomic_write_df(pd.DataFrame(rows), Path(args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
