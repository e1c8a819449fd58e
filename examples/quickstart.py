"""simfuse from Python: a fused-vs-baseline DLRM projection, one collective and one fused operator.

Run from the repository root:  .venv/bin/python examples/quickstart.py
"""

from pathlib import Path

import simfuse

ROOT = Path(__file__).resolve().parents[1]

system = simfuse.load_topology(ROOT / "topologies" / "h200_nvl8_ib_ndr.yaml")   # calibration applied once
dlrm = simfuse.load_workload(ROOT / "models" / "dlrm_synthetic.yaml")

# one training iteration at 2 and 16 nodes, both modes; knobs as keyword arguments (same keys as --set)
for nodes in (2, 16):
    df = simfuse.run(dlrm, system, nodes=nodes, slice_wgs=2)
    print(df[["nodes", "gpus", "mode", "iteration_time_s", "exposed_comm_time_s", "speedup"]].to_string(index=False))

# a 64 MiB all-reduce on 16 nodes with the tuner's algorithm
print(simfuse.collective(system, 16, "all_reduce", 64 * 2**20)[["algorithm", "time_s", "busbw_gbyte_per_s"]])

# the fused GEMV + AllReduce of a tensor-parallel decode step on one node
print(simfuse.op("gemv_all_reduce", system, nodes=1, n=8192, k=28672, tokens=4)[
    ["op", "baseline_time_s", "fused_time_s", "speedup", "baseline_algorithm"]])
