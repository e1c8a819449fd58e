"""Simulated nccl-tests busbw (all-reduce, all-to-all) against published measurements (a test of the model,
never a fit).

Every published number is read from a public source (URL in the table); no simfuse parameter was set from them.
The topology's NVLink efficiency (0.8) predates this table and was set from NCCL's own statement that NVLink 4
runs at ~370 GB/s effective (the ring rows therefore check consistency, not an independent prediction); NVLS's
switch efficiency is NCCL's ``nvlsEfficiency`` (0.85, src/graph/tuning.cc), so the NVLS rows are a real test.
The all-to-all row (added 2026-12-05) is the only published multi-node ``alltoall_perf`` table of Hopper nodes at
a DLRM-like size we found (8 MiB per rank over 64 GPUs: DLRM-DCNv2's forward pooled embeddings are 7 MB per GPU
at 1,056 samples); its cluster (H800, NIC count and rate not stated) is not the topology file's, so it is weak.

Usage: ``python experiments/validation/nccl_validation.py [--out experiments/results/nccl_validation.csv] [--smoke]``
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from simfuse.collectives import run_collective  # noqa: E402
from simfuse.spec import load_topology  # noqa: E402

GiB = 2**30
NCCL1455 = "https://github.com/NVIDIA/nccl/issues/1455"
NCCLTESTS212 = "https://github.com/NVIDIA/nccl-tests/issues/212"
NCCLTESTS290 = "https://github.com/NVIDIA/nccl-tests/issues/290"
SOPERATOR428 = "https://github.com/nebius/soperator/pull/428"
NCCL1531 = "https://github.com/NVIDIA/nccl/issues/1531"

# (case, nodes, gpus_per_node, size_bytes, algorithm forced (None: tuner), published busbw GB/s, source, note[, op])
CASES = [
    *[(f"nvls_1x{g}", 1, g, 2 * GiB, "nvls", pub, NCCL1455,
       "8x H100 SXM, NCCL_ALGO=NVLS, 2-4 GiB, busbw as reported")
      for g, pub in ((2, 367.5), (3, 367.5), (4, 367.5), (5, 420.0), (6, 440.0), (7, 460.0), (8, 480.0))],
    ("ring_1x8", 1, 8, 2 * GiB, "ring", 367.5, NCCL1455, "NCCL_ALGO=RING, 365-370 GB/s for 2..8 GPUs"),
    ("default_1x8", 1, 8, 1 * GiB, None, 480.0, NCCLTESTS212,
     "NCCL default (NVLS) peak busbw ~480 GB/s (algbw ~275), per an NCCL maintainer"),
    ("ring_1x8_sjeaugey", 1, 8, 1 * GiB, "ring", 370.0, NCCLTESTS212,
     "NCCL_ALGO=RING effective NVLink ~370 GB/s, per an NCCL maintainer"),
    ("default_2x8_290", 2, 8, 1 * GiB, None, 156.0, NCCLTESTS290,
     "two-node H100 log, NCCL's default algorithm (not stated), 1 GiB row"),
    ("default_2x8_soperator", 2, 8, 1 * GiB, None, 191.0, SOPERATOR428,
     "two-node H100 (8x NDR per node), NCCL's default algorithm (not stated), 1 GiB row"),
    ("ring_2x8_vs_soperator", 2, 8, 1 * GiB, "ring", 191.0, SOPERATOR428,
     "flat ring forced in simfuse; the published run's algorithm is not stated"),
    ("tree_2x8_vs_soperator", 2, 8, 1 * GiB, "tree", 191.0, SOPERATOR428,
     "NCCL tree forced in simfuse; the published run's algorithm is not stated"),
    ("nvls_tree_2x8_vs_290", 2, 8, 1 * GiB, "nvls_tree", 156.0, NCCLTESTS290,
     "NVLSTree forced in simfuse (NCCL's usual 2-node choice on H100, nccl-tests#196); published algorithm not stated"),
    ("nvls_tree_2x8_vs_soperator", 2, 8, 1 * GiB, "nvls_tree", 191.0, SOPERATOR428,
     "NVLSTree forced in simfuse; published algorithm not stated"),
    ("alltoall_8x8_1531", 8, 8, 8 * 2**20, None, 24.44, NCCL1531,
     "8 nodes x 8 H800 (NICs not stated), alltoall_perf 8 MiB row, out-of-place (in-place 28.38 GB/s algbw); "
     "the issue reports the bandwidth unstable across sizes", "all_to_all"),
]
SMOKE = ("nvls_1x8", "default_2x8_290", "alltoall_8x8_1531")


def run(out: Path, smoke: bool = False) -> pd.DataFrame:
    topo = load_topology(ROOT / "topologies" / "h100_nvl8_ib_ndr.yaml")
    rows = []
    for case, nodes, g, size, algo, pub, url, note, *op in CASES:
        if smoke and case not in SMOKE:
            continue
        op = op[0] if op else "all_reduce"
        r = run_collective(topo, nodes, op, size, algorithm=algo, gpus_per_node=g)
        rows.append({"case": case, "topology": topo.name, "nodes": nodes, "gpus_per_node": g, "op": op,
                     "size_bytes": size, "algorithm_forced": algo or "", "algorithm": r.algorithm,
                     "protocol": r.protocol, "simulated_busbw_gbyte_per_s": round(r.busbw_gbps, 1),
                     "published_busbw_gbyte_per_s": pub, "ratio": round(r.busbw_gbps / pub, 3),
                     "source_url": url, "note": note})
    df = pd.DataFrame(rows)
    from simfuse.results.io import atomic_write_df

    atomic_write_df(df, out)
    return df


def check_out(out: str) -> None:
    """``--out`` is a CSV file in a writable place (a SpecError naming ``--out`` before any simulation)."""
    from simfuse.arguments import check_out_writable
    from simfuse.errors import SpecError

    if Path(out).is_dir():
        raise SpecError("<argument>", "--out", f"{out!r} is a directory; expected a CSV file")
    check_out_writable(out, is_dir=False)


def main(argv=None) -> int:
    from simfuse.arguments import script_main

    return script_main(_main, argv, "nccl_validation.py")


def _main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="default experiments/results/nccl_validation.csv (with --smoke: "
                    "runs/nccl_validation_smoke.csv, so a smoke run leaves the committed results alone)")
    ap.add_argument("--smoke", action="store_true", help="two rows only (CI)")
    a = ap.parse_args(argv)
    if a.out is None:
        a.out = str(ROOT / ("runs/nccl_validation_smoke.csv" if a.smoke else "experiments/results/nccl_validation.csv"))
    check_out(a.out)
    df = run(Path(a.out), a.smoke)
    print(df[["case", "algorithm", "protocol", "simulated_busbw_gbyte_per_s", "published_busbw_gbyte_per_s",
              "ratio"]].to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
