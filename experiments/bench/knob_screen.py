"""Where the fused knob grid matters: the gain of its second point (``slice_wgs`` 8: one put per 8 workgroups)
over its first (``slice_wgs`` 1), against how busy the first point kept the GPU-initiated post queues.

A planned DLRM run tunes the fused knobs over :data:`simfuse.workloads.dlrm_candidates.TUNE_GRID`: each point is
a whole fused simulation.  Batching puts saves post-queue time only, so the run simulates the rest of the grid
only where the first point's post queues were busy for at least
:data:`~simfuse.workloads.dlrm_candidates.KNOB_SCREEN_POST_SHARE` of the iteration
(``DLRMExtras.put_post_share``).  This script measures that rule: every point simulates the fused mode of a
model at a node count with the planner's fused plan, at both grid points, with
``gpu_initiated.put_post_us`` set to each value asked for (the topology's own when none), and writes::

    model, nodes, put_post_us, slice1_iteration_s, slice8_iteration_s, gain_rel, put_post_share, fused_waves,
    screen_skips, missed_gain_rel, wall_s

``gain_rel = slice1 / slice8 - 1`` (> 0: slice 8 is faster); ``missed_gain_rel`` is the gain the screen gives
up (``gain_rel`` where the screen skips and it is positive, else 0).  A DLRM model at a node count its batch does
not split over runs at the smallest whole batch per GPU that reaches its global batch (as ``bench_targets.py``)::

    python experiments/bench/knob_screen.py [--models a.yaml,...] [--nodes 1,2,8] [--post-us 0.005,0.1]
        [--topology T] [--workers 2] [--out CSV]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import math
import os
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_planner import _commit  # noqa: E402  (the commit a row was measured at)

TOPOLOGY = ROOT / "topologies/h100_nvl8_ib_ndr.yaml"
MODELS = ("dlrm_dcnv2_mlperf", "dlrm_dcnv2_mlperf_16n", "dlrm_dcnv2_mlperf_hugectr")
NODES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
POST_US = (0.005, 0.02, 0.1)


def _point(model: str, topology: str, nodes: int, post_us: float | None) -> dict:
    from simfuse.fused.knobs import ExecutionSpec, FusedKnobs
    from simfuse.spec import load_workload
    from simfuse.spec.workload import DLRMSettings
    from simfuse.system import System
    from simfuse.workloads.dlrm import simulate_dlrm
    from simfuse.workloads.dlrm_candidates import KNOB_SCREEN_POST_SHARE
    from simfuse.workloads.planner import plan_tables
    from simfuse.workloads.run import scaled_spec

    system = System.load(topology)
    if post_us is not None:  # the file's topology with that post cost (its calibration profile kept)
        topo = system.nominal
        system = system.with_nominal(topo.replace(gpu_initiated=dataclasses.replace(topo.gpu_initiated,
                                                                                    put_post_s=post_us * 1e-6)))
    g = system.gpus_per_node
    spec = load_workload(model)
    settings = ()
    if spec.global_batch % (nodes * g):
        settings = (DLRMSettings(batch_per_gpu=max(1, math.ceil(spec.global_batch / (nodes * g)))),)
    spec = scaled_spec(spec, nodes, g, ExecutionSpec(settings=settings))
    t0 = time.perf_counter()
    plan = plan_tables(spec, system, nodes, g, "fused")
    r1, r8 = (simulate_dlrm(spec, system, nodes, gpus_per_node=g, mode="fused", knobs=FusedKnobs(slice_wgs=s),
                            plan=plan) for s in (1, 8))
    gain = r1.iteration_time_s / r8.iteration_time_s - 1.0
    skips = r1.extras.put_post_share < KNOB_SCREEN_POST_SHARE
    return {"model": Path(model).stem, "nodes": nodes,
            "put_post_us": round(system.topology.gpu_initiated.put_post_s * 1e6, 9),
            "slice1_iteration_s": r1.iteration_time_s, "slice8_iteration_s": r8.iteration_time_s,
            "gain_rel": gain, "put_post_share": r1.extras.put_post_share, "fused_waves": r1.extras.fused_waves,
            "screen_skips": skips, "missed_gain_rel": max(gain, 0.0) if skips else 0.0,
            "wall_s": round(time.perf_counter() - t0, 3), "error": ""}


def _safe_point(args) -> dict:
    from simfuse.errors import SimfuseError

    model, topology, nodes, post_us = args
    try:
        return _point(model, topology, nodes, post_us)
    except SimfuseError as exc:  # a point the model refuses (e.g. a batch that cannot split)
        return {"model": Path(model).stem, "nodes": nodes, "put_post_us": post_us,
                "error": str(exc).splitlines()[0]}


def _model_path(name: str) -> str:
    p = Path(name)
    return str(p if p.suffix == ".yaml" else ROOT / "models" / f"{name}.yaml")


def check_args(a) -> tuple[list[str], list[int], list]:
    """Every argument checked before any point runs (a SpecError naming it)."""
    from simfuse.arguments import check_out_writable, check_workers
    from simfuse.errors import SpecError
    from simfuse.spec import DLRMSpec, load_topology, load_workload
    from simfuse.spec.topology import MAX_LATENCY_US
    from simfuse.sweeps import parse_nodes

    nodes = parse_nodes(a.nodes)
    check_workers(a.workers)
    load_topology(a.topology)
    models = [_model_path(m) for m in a.models.split(",")]
    for m in models:
        if not isinstance(load_workload(m), DLRMSpec):
            raise SpecError("--models", "models", f"{m} is not a DLRM model (the knob grid is DLRM's)")
    posts: list = []
    for text in a.post_us.split(","):
        if text.strip() == "topology":
            posts.append(None)
            continue
        try:
            v = float(text)
        except ValueError:
            raise SpecError("--post-us", "post_us", f"{text!r} is not a number (us) or 'topology'") from None
        if not (math.isfinite(v) and 0 <= v <= MAX_LATENCY_US):
            raise SpecError("--post-us", "post_us", f"{text!r} must be a number in 0..{MAX_LATENCY_US:g} (us), as "
                            "the topology's gpu_initiated.put_post_us")
        posts.append(v)
    check_out_writable(a.out, is_dir=False)
    return models, nodes, posts


def main(argv=None) -> int:
    from simfuse.arguments import script_main

    return script_main(_main, argv, "knob_screen.py")


def _main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated model names or files")
    ap.add_argument("--nodes", default=",".join(map(str, NODES)))
    ap.add_argument("--post-us", default=",".join(map(str, POST_US)),
                    help="gpu_initiated.put_post_us values (comma-separated; 'topology': the file's own)")
    ap.add_argument("--topology", default=str(TOPOLOGY))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "experiments/results/knob_screen.csv"))
    a = ap.parse_args(argv)
    models, nodes, posts = check_args(a)
    machine = f"{platform.node() or 'vm'} ({platform.machine()}, {os.cpu_count()} cpus, Python {platform.python_version()})"
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    tasks = [(m, a.topology, n, p) for m in models for n in nodes for p in posts]
    if a.workers > 1:
        with ProcessPoolExecutor(a.workers) as pool:
            rows = list(pool.map(_safe_point, tasks))
    else:
        rows = [_safe_point(t) for t in tasks]
    for r in rows:
        print(f"{r['model']} {r['nodes']} post {r['put_post_us']}: "
              + (r["error"] or f"gain {r['gain_rel']:+.2e} share {r['put_post_share']:.3f}"), file=sys.stderr)
    df = pd.DataFrame(rows)
    df["topology"], df["machine"], df["date"], df["commit"] = Path(a.topology).stem, machine, stamp, _commit()
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    df.to_csv(tmp, index=False)
    tmp.replace(out)
    ok = df[df["error"] == ""]
    if len(ok):
        print(f"{int(ok['screen_skips'].sum())} of {len(ok)} points skip the grid; largest gain given up "
              f"{ok['missed_gain_rel'].max():.2e}; largest gain where it runs "
              f"{ok.loc[~ok['screen_skips'].astype(bool), 'gain_rel'].max() if (~ok['screen_skips'].astype(bool)).any() else float('nan'):.2e}; wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
