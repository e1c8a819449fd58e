"""Benchmark the sharding planner alone and ``simfuse run`` with planning (both modes), one fresh process a point.

Targets (issue 11, the 2-core machine): the planner alone (both modes) <= 5 s at 1,024 nodes; ``simfuse run``
with planning, both modes, <= 10 s at 1,024 nodes and <= 60 s and <= 4 GiB peak RSS at 16,384 nodes.  The model
is MLPerf DLRM-DCNv2 (``models/dlrm_dcnv2_mlperf_16n.yaml``, ``placement: planned``) weak-scaled at its 16-node
batch of 1,056 per GPU on ``topologies/h200_nvl8_ib_ndr.yaml``.

A ``run`` point is the CLI itself (``simfuse run --model ... --nodes N --batch-per-gpu 1056 --set
uncertainty=U --format json``, everything else at the CLI's defaults: ``--sim-mode auto``, ``--mode both``).
The CLI's default uncertainty is ``bound`` (the whole run repeated with every kernel family at its p10, p50 and
p90 residual: 4 simulations of each mode); ``none`` is the simulation alone.  Each point runs in a fresh Python
process, so ``peak_rss_gib`` is that point's own peak resident set; ``wall_s`` is the time inside it (model and
topology loading, planning, simulation), ``process_wall_s`` the whole process as the parent saw it (interpreter
start and imports included).  ``simfuse run`` uses its default ``--workers`` (the CPU count: 2 here) for the
fused candidates and the interval's runs; a run point's ``peak_rss_gib`` bounds the whole process tree (this
process plus every worker at the largest worker's peak).  Rows are appended to
``experiments/results/bench_planner.csv`` with the machine, the date and the commit::

    python experiments/bench/bench_planner.py [--points planner:1024,run:1024:none,run:1024:bound,...] [--out CSV]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "models/dlrm_dcnv2_mlperf_16n.yaml"
TOPOLOGY = ROOT / "topologies/h200_nvl8_ib_ndr.yaml"
BATCH_PER_GPU = 1056  # the 16-node MLPerf batch per GPU (the model file's header)
DEFAULT_POINTS = ("planner:1024,run:1024:none,run:1024:bound,planner:16384,run:16384:none,run:16384:bound")
RSS_TARGET_GIB = 4.0


def _rss_gib(who=resource.RUSAGE_SELF) -> float:
    """Peak resident set of this process so far (GiB; Linux reports ru_maxrss in KiB); ``RUSAGE_CHILDREN``: of
    its largest finished child (a worker of ``simfuse run --workers``)."""
    return resource.getrusage(who).ru_maxrss / 2**20


def _run_target_s(nodes: int) -> float:
    """The issue's targets: 10 s up to 1,024 nodes, 60 s at 16,384 and beyond (none in between)."""
    return 10.0 if nodes <= 1024 else 60.0 if nodes >= 16384 else float("nan")


def _planner_target_s(nodes: int) -> float:
    """5 s up to 1,024 nodes (the issue sets none beyond)."""
    return 5.0 if nodes <= 1024 else float("nan")


def _child_planner(nodes: int, model: str, topology: str, batch_per_gpu: int) -> list[dict]:
    sys.path.insert(0, str(ROOT))
    from simfuse.fused.knobs import ExecutionSpec
    from simfuse.spec import load_workload
    from simfuse.spec.workload import DLRMSettings
    from simfuse.system import System
    from simfuse.workloads.planner import plan_tables
    from simfuse.workloads.run import scaled_spec

    system = System.load(topology)
    g = system.gpus_per_node
    spec = scaled_spec(load_workload(model), nodes, g, ExecutionSpec(settings=(DLRMSettings(batch_per_gpu=batch_per_gpu, placement="planned"),)))
    rows, total = [], 0.0
    for mode in ("baseline", "fused"):
        t0 = time.perf_counter()
        p = plan_tables(spec, system, nodes, g, mode)
        dt = time.perf_counter() - t0
        total += dt
        rows.append({"what": f"planner_{mode}", "wall_s": dt, "result": p.candidate,
                     "estimated_critical_s": p.estimated_critical_s, "peak_rss_gib": _rss_gib(),
                     "gpus": nodes * g, "global_batch": spec.global_batch, "model": spec.name,
                     "topology": system.name})
    rows.append({**rows[-1], "what": "planner_both", "wall_s": total, "result": "", "estimated_critical_s": None})
    return [{**r, "target_s": _planner_target_s(nodes)} for r in rows]


def _child_run(nodes: int, model: str, topology: str, uncertainty: str, batch_per_gpu: int) -> list[dict]:
    sys.path.insert(0, str(ROOT))
    from simfuse.cli import main as cli

    argv = ["run", "--model", model, "--topology", topology, "--nodes", str(nodes), "--batch-per-gpu",
            str(batch_per_gpu), "--set", f"uncertainty={uncertainty}", "--format", "json"]
    buf = io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(buf):
        rc = cli(argv)
    wall = time.perf_counter() - t0
    if rc:
        raise SystemExit(f"simfuse {' '.join(argv)} exited with {rc}")
    out = {r["mode"]: r for r in json.loads(buf.getvalue())["rows"]}
    b, f = out["baseline"], out["fused"]
    from simfuse.cli.run import _workers

    workers = _workers(None)  # the CLI's default --workers
    # an upper bound on the peak of the whole process tree: this process plus every worker at the largest
    # worker's peak, all at once (forked workers share the parent's pages, so the real sum is lower)
    parent, child = _rss_gib(), _rss_gib(resource.RUSAGE_CHILDREN)
    return [{"what": "run_both_modes", "wall_s": wall, "target_s": _run_target_s(nodes),
             "peak_rss_gib": parent + workers * child, "parent_rss_gib": parent, "worker_rss_gib": child,
             "workers": workers,
             "gpus": f["gpus"], "global_batch": f.get("global_batch"), "model": f.get("model"), "topology": f.get("topology"),
             "baseline_iteration_s": b["iteration_time_s"], "fused_iteration_s": f["iteration_time_s"],
             "rank_classes": f.get("rank_classes"), "sim_mode": f.get("sim_mode"),
             "uncertainty": f.get("uncertainty", uncertainty),
             "command": "simfuse " + " ".join(a if "/" not in a else os.path.relpath(a, ROOT) for a in argv)}]


def _meets(wall_s: float, target_s: float, peak_rss_gib: float):
    """Whether a point meets its wall-time target and the 4 GiB peak RSS; None where it has no target."""
    if target_s != target_s:  # NaN: no target at this node count
        return None
    return bool(wall_s <= target_s and peak_rss_gib <= RSS_TARGET_GIB)


def _machine() -> str:
    return (f"{platform.node()} ({platform.processor() or platform.machine()}, {os.cpu_count()} cpus, "
            f"Python {platform.python_version()})")


def _commit() -> str:
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""
    return sha + ("+dirty" if dirty else "")


def _parse_points(text: str) -> list[tuple[str, int, str]]:
    from simfuse.errors import SpecError

    out = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        bits = part.split(":")
        try:
            kind, nodes = bits[0], int(bits[1])
        except (IndexError, ValueError):
            raise SpecError("<argument>", "--points", f"cannot parse {part!r} (planner:N or run:N:none|bound|mc)")\
                from None
        if kind == "planner" and len(bits) == 2:
            out.append((kind, nodes, ""))
        elif kind == "run" and len(bits) == 3 and bits[2] in ("none", "bound", "mc"):
            out.append((kind, nodes, bits[2]))
        else:
            raise SpecError("<argument>", "--points", f"cannot parse {part!r} (planner:N or run:N:none|bound|mc)")
        if nodes < 1:
            raise SpecError("<argument>", "--points", f"node count must be >= 1 in {part!r}")
    return out


def check_args(args) -> list[tuple[str, int, str]]:
    """Every argument checked before any point runs (a SpecError naming it); returns the points."""
    from simfuse.arguments import check_out_writable, check_setting
    from simfuse.checks import check_nodes
    from simfuse.spec import load_topology, load_workload

    points = _parse_points(args.points)
    for _kind, nodes, _unc in points:
        check_nodes(nodes, "--points")
    check_setting("batch_per_gpu", args.batch_per_gpu, "--batch-per-gpu")
    load_workload(args.model)
    load_topology(args.topology)
    check_out_writable(args.out, is_dir=False)
    return points


def cli(argv=None) -> int:
    """The command line: :func:`main` (which returns its table), with a SpecError as one line and exit code 2."""
    from simfuse.arguments import script_main

    def run(a) -> int:
        main(a)
        return 0

    return script_main(run, argv, "bench_planner.py")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", default=DEFAULT_POINTS, help="comma-separated planner:NODES and "
                                                             "run:NODES:UNCERTAINTY points (default: %(default)s)")
    ap.add_argument("--model", default=str(MODEL))
    ap.add_argument("--topology", default=str(TOPOLOGY))
    ap.add_argument("--batch-per-gpu", type=int, default=BATCH_PER_GPU, help="weak scaling (default: the 16-node "
                                                                             "MLPerf batch, %(default)s)")
    ap.add_argument("--out", default=str(ROOT / "experiments/results/bench_planner.csv"))
    ap.add_argument("--replace", action="store_true", help="write only the new rows (default: append to --out)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:  # one point, in this fresh process: JSON rows on the last line of stdout
        kind, nodes, unc = args.child.split(":")
        rows = _child_planner(int(nodes), args.model, args.topology, args.batch_per_gpu) if kind == "planner" \
            else _child_run(int(nodes), args.model, args.topology, unc, args.batch_per_gpu)
        print(json.dumps(rows))
        return None
    import pandas as pd

    sys.path.insert(0, str(ROOT))
    from simfuse.results.io import atomic_write_df

    points = check_args(args)
    meta = {"machine": _machine(), "date": datetime.date.today().isoformat(), "commit": _commit()}
    rows = []
    for kind, nodes, unc in points:
        cmd = [sys.executable, __file__, "--child", f"{kind}:{nodes}:{unc}", "--model", args.model,
               "--topology", args.topology, "--batch-per-gpu", str(args.batch_per_gpu)]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        pwall = time.perf_counter() - t0
        if proc.returncode:
            sys.stderr.write(proc.stderr)
            raise SystemExit(f"point {kind}:{nodes}:{unc} failed (exit {proc.returncode})")
        for r in json.loads(proc.stdout.strip().splitlines()[-1]):
            r = {**meta, "nodes": nodes, **r, "process_wall_s": pwall}
            r["meets_target"] = _meets(r["wall_s"], r["target_s"], r["peak_rss_gib"])
            rows.append(r)
            print(f"{r['what']:>16} {nodes:>6} nodes {unc or '':>5}: {r['wall_s']:7.2f} s (target {r['target_s']:g} s)"
                  f", process {pwall:6.2f} s, peak RSS {r['peak_rss_gib']:.2f} GiB", flush=True)
    df = pd.DataFrame(rows)
    if not args.replace and Path(args.out).exists():
        df = pd.concat([pd.read_csv(args.out), df], ignore_index=True)
    atomic_write_df(df, args.out)
    return df


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(cli())
