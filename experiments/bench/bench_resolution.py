"""What the flow model's re-sharing grid (``rate_resolution_ns``, default
:data:`simfuse.fused.knobs.RATE_RESOLUTION_NS`) costs in accuracy and buys in speed.

Every shipped model (``models/*.yaml``) at each node count runs twice through ``simfuse.api.run`` with
``uncertainty=none``: with the exact fluid model (``rate_resolution_ns=0``, rates re-shared at every flow start and
finish) and at the default resolution.  A row per (model, nodes, mode) gives both iteration times, their relative
difference, the speedups and the wall times of the two runs (both modes together, the API's ``workers``)::

    python experiments/bench/bench_resolution.py [--nodes 1,4,8,64] [--models a.yaml,...] [--workers 2] [--out CSV]

Rows go to ``experiments/results/bench_resolution.csv`` with the machine, the date and the commit; a model whose
batch does not split at a node count runs at the smallest whole batch per GPU that reaches it (as
``bench_targets.py`` does); a point the model refuses (e.g. a one-node-only model) is written with its error.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_planner import _commit  # noqa: E402  (the commit a row was measured at)

TOPOLOGY = ROOT / "topologies/h100_nvl8_ib_ndr.yaml"
NODES = (1, 4, 8, 64)


def _settings(model: str, nodes: int, g: int) -> dict:
    from simfuse.spec import DLRMSpec, load_workload

    spec = load_workload(model)
    if not isinstance(spec, DLRMSpec) or spec.global_batch % (nodes * g) == 0:
        return {}
    return {"batch_per_gpu": max(1, math.ceil(spec.global_batch / (nodes * g)))}


def _one(model: str, nodes: int, res_ns: float, workers: int) -> tuple[dict, float]:
    from simfuse import api

    g = api.load_topology(TOPOLOGY).gpus_per_node
    t0 = time.perf_counter()
    df = api.run(model, TOPOLOGY, nodes, workers=workers, force=True, uncertainty="none",
                 rate_resolution_ns=res_ns, **_settings(model, nodes, g))
    wall = time.perf_counter() - t0
    return {r["mode"]: float(r["iteration_time_s"]) for _, r in df.iterrows()}, wall


def check_args(a) -> tuple[list[str], list[int]]:
    """Every argument checked before any point runs (a SpecError naming it); returns the models and nodes."""
    from simfuse.arguments import check_out_writable, check_workers
    from simfuse.spec import load_workload
    from simfuse.sweeps import parse_nodes

    nodes = parse_nodes(a.nodes)
    check_workers(a.workers)
    models = a.models.split(",") if a.models else sorted(str(p) for p in (ROOT / "models").glob("*.yaml"))
    if a.models:
        for model in models:
            load_workload(model)
    check_out_writable(a.out, is_dir=False)
    return models, nodes


def main(argv=None) -> int:
    from simfuse.arguments import script_main

    return script_main(_main, argv, "bench_resolution.py")


def _main(argv=None) -> int:
    from simfuse.errors import SimfuseError
    from simfuse.fused.knobs import RATE_RESOLUTION_NS

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", default=",".join(map(str, NODES)))
    ap.add_argument("--models", default=None, help="comma-separated model files (default: models/*.yaml)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "experiments/results/bench_resolution.csv"))
    a = ap.parse_args(argv)
    models, nodes = check_args(a)
    machine = f"{platform.node() or 'vm'} ({platform.machine()}, {os.cpu_count()} cpus, Python {platform.python_version()})"
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    rows = []
    for model in models:
        for n in nodes:
            base = {"model": Path(model).stem, "nodes": n, "resolution_ns": RATE_RESOLUTION_NS}
            try:
                exact, wall_exact = _one(model, n, 0.0, a.workers)
                grid, wall_grid = _one(model, n, RATE_RESOLUTION_NS, a.workers)
            except SimfuseError as exc:
                rows.append({**base, "error": str(exc).splitlines()[0]})
                print(f"{base['model']} {n}: {str(exc).splitlines()[0]}", file=sys.stderr)
                continue
            sp_exact = exact["baseline"] / exact["fused"] if {"baseline", "fused"} <= exact.keys() else math.nan
            sp_grid = grid["baseline"] / grid["fused"] if {"baseline", "fused"} <= grid.keys() else math.nan
            for mode in exact:
                rows.append({**base, "mode": mode, "exact_iteration_s": exact[mode],
                             "grid_iteration_s": grid[mode],
                             "rel_diff": grid[mode] / exact[mode] - 1.0,
                             "exact_speedup": sp_exact, "grid_speedup": sp_grid,
                             "speedup_diff": sp_grid - sp_exact,
                             "exact_wall_s": round(wall_exact, 3), "grid_wall_s": round(wall_grid, 3),
                             "error": ""})
            print(f"{base['model']} {n}: speedup {sp_exact:.5f} -> {sp_grid:.5f}, wall {wall_exact:.1f} -> "
                  f"{wall_grid:.1f} s", file=sys.stderr, flush=True)
    df = pd.DataFrame(rows)
    df["machine"], df["date"], df["commit"] = machine, stamp, _commit()
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    df.to_csv(tmp, index=False)
    tmp.replace(out)
    ok = df[df["error"] == ""] if "error" in df else df
    if len(ok):
        print(f"max |iteration diff| {ok['rel_diff'].abs().max():.2e}, max |speedup diff| "
              f"{ok['speedup_diff'].abs().max():.2e} over {len(ok)} rows; wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
