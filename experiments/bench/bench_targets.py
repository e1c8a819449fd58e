"""Benchmark the speed targets of issues 34 (item 5) and 35 (item 7), one fresh process a point.

* ``run`` points: ``simfuse run --model M --topology T --nodes N --set uncertainty=none --format json`` (the CLI
  itself, both modes, its default workers), every shipped model (``models/*.yaml``) at node counts from 1 to
  16,384.  Target: at most 10 s; the cost guard's estimate (``simfuse.guard.estimate_workload``, what ``run``
  checks before it starts) within 2x of the measured time.  A DLRM model runs at its file's global batch where
  that splits over the GPUs, else at the smallest whole batch per GPU that reaches it (``--batch-per-gpu``).
* ``collective`` points: ``simfuse collective --op OP --size 64MiB`` (the tuner's algorithm, ``--mode auto``) for
  every collective on every shipped topology at 512 and 1,024 nodes (4,096 and 8,192 GPUs).  Target: at most
  2 s and 1 GB peak resident memory.

``wall_s`` is the time inside the point's process (loading, planning, simulating), ``peak_rss_mib`` its peak
resident set (a ``run`` point also counts its largest worker: forked workers share pages, so this bounds the
tree).  Rows go to ``experiments/results/bench_targets.csv`` with the machine, the date and the commit::

    python experiments/bench/bench_targets.py [--what run,collective] [--nodes 1,8,128] [--models a.yaml,...] [--out CSV]

``--only collectives`` runs the collective points alone and writes them to
``experiments/results/bench_collectives.csv`` (unless ``--out`` says otherwise); ``--collective-nodes`` picks
their node counts.  A collective row also carries the cost guard's estimate (``simfuse.guard
.estimate_collective_run``, what ``simfuse collective`` checks before it starts) and its ratio to the wall time.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import json
import math
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

from bench_planner import _commit  # the commit a row was measured at (one helper for both benchmarks)

ROOT = Path(__file__).resolve().parents[2]
RUN_TOPOLOGY = ROOT / "topologies/h100_nvl8_ib_ndr.yaml"
RUN_NODES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
COLLECTIVE_NODES = (512, 1024)
OPS = ("all_to_all", "all_reduce", "reduce_scatter", "all_gather")
RUN_TARGET_S, COLLECTIVE_TARGET_S, COLLECTIVE_TARGET_MIB = 10.0, 2.0, 1000.0


def _rss_mib(who=resource.RUSAGE_SELF) -> float:
    return resource.getrusage(who).ru_maxrss / 1024.0


def _cpu_s() -> float:
    """CPU time of this process and its finished workers (user + system): what the point costs the machine,
    apart from waiting for a CPU on a shared machine."""
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime


def _batch_args(model: str, nodes: int, g: int) -> list[str]:
    from simfuse.spec import DLRMSpec, load_workload

    spec = load_workload(model)
    if not isinstance(spec, DLRMSpec) or spec.global_batch % (nodes * g) == 0:
        return []
    return ["--batch-per-gpu", str(max(1, math.ceil(spec.global_batch / (nodes * g))))]


def _estimate(model: str, topology: str, nodes: int):
    """The cost guard's estimate of the run point: what ``simfuse run`` checks before it starts
    (:func:`simfuse.guard.estimate_run` with the command's default workers)."""
    sys.path.insert(0, str(ROOT))
    from simfuse.cli.run import _workers
    from simfuse.fused.knobs import parse_execution
    from simfuse.guard import estimate_run
    from simfuse.spec import load_topology, load_workload
    from simfuse.workloads.run import scaled_spec

    topo = load_topology(topology)
    g = topo.scale_up.gpus_per_node
    extra = _batch_args(model, nodes, g)
    settings = {"uncertainty": "none"}
    if extra:
        settings["batch_per_gpu"] = int(extra[1])
    ex = parse_execution(settings)
    return (estimate_run(scaled_spec(load_workload(model), nodes, g, ex), topo, nodes, g, "auto", ex, _workers(None)),
            extra, g)


def _child_run(model: str, topology: str, nodes: int) -> dict:
    sys.path.insert(0, str(ROOT))
    from simfuse.cli import main as cli

    est, extra, g = _estimate(model, topology, nodes)
    argv = ["run", "--model", model, "--topology", topology, "--nodes", str(nodes), *extra,
            "--set", "uncertainty=none", "--format", "json", "--force"]
    buf, err = io.StringIO(), io.StringIO()
    t0, c0 = time.perf_counter(), _cpu_s()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err):
        rc = cli(argv)
    wall, cpu = time.perf_counter() - t0, _cpu_s() - c0
    if rc:
        msg = (err.getvalue().strip().splitlines() or [""])[-1][:300]
        return {"what": "run", "model": Path(model).stem, "topology": Path(topology).stem, "nodes": nodes,
                "gpus": nodes * g, "error": f"exit {rc}: {msg}", "wall_s": wall}
    rows = json.loads(buf.getvalue())["rows"]
    modes = {r["mode"]: r for r in rows}
    f = modes.get("fused") or rows[0]
    return {"what": "run", "model": Path(model).stem, "topology": Path(topology).stem, "nodes": nodes,
            "gpus": nodes * g, "batch_args": " ".join(extra), "wall_s": wall, "cpu_s": cpu,
            "peak_rss_mib": _rss_mib() + _rss_mib(resource.RUSAGE_CHILDREN), "target_s": RUN_TARGET_S,
            "guard_estimate_s": est.seconds, "guard_ratio": est.seconds / wall if wall > 0 else float("nan"),
            "guard_ratio_cpu": est.seconds / cpu if cpu > 0 else float("nan"),
            "guard_simulated_ranks": est.simulated_ranks, "guard_events": est.events,
            "sim_mode": f.get("sim_mode"), "rank_classes": f.get("rank_classes"),
            "speedup": (modes["baseline"]["iteration_time_s"] / modes["fused"]["iteration_time_s"]
                        if "baseline" in modes and "fused" in modes else None)}


def _child_collective(op: str, topology: str, nodes: int) -> dict:
    sys.path.insert(0, str(ROOT))
    from simfuse.collectives import run_collective
    from simfuse.guard import estimate_collective_run
    from simfuse.spec import load_topology

    topo = load_topology(topology)
    g = topo.scale_up.gpus_per_node
    t0, c0 = time.perf_counter(), _cpu_s()
    res = run_collective(topo, nodes, op, 64 * 2**20)
    wall, cpu = time.perf_counter() - t0, _cpu_s() - c0
    rss = _rss_mib()
    est = estimate_collective_run(topo, op, nodes, g, [64 * 2**20], "auto")  # after the run: its memory is the run's
    return {"what": "collective", "model": op, "topology": Path(topology).stem, "nodes": nodes,
            "gpus": res.ranks, "wall_s": wall, "cpu_s": cpu, "peak_rss_mib": rss, "target_s": COLLECTIVE_TARGET_S,
            "guard_estimate_s": est.seconds, "guard_ratio": est.seconds / wall if wall > 0 else float("nan"),
            "guard_ratio_cpu": est.seconds / cpu if cpu > 0 else float("nan"),
            "guard_simulated_ranks": est.simulated_ranks, "guard_events": est.events,
            "sim_mode": res.mode, "algorithm": f"{res.algorithm}/{res.protocol}", "time_us": res.time_s * 1e6,
            "events": res.events}


def _meets(row: dict):
    err = row.get("error")
    if isinstance(err, str) and err:  # (a row read back from a CSV has the column, NaN when the run went well)
        return False
    ok = row["wall_s"] <= row["target_s"]
    if row["what"] == "collective":
        return bool(ok and row["peak_rss_mib"] <= COLLECTIVE_TARGET_MIB)
    return bool(ok and 0.5 <= row["guard_ratio"] <= 2.0)


def reestimate(path: Path) -> None:
    """Recompute the guard columns of the run rows of ``path`` with this checkout's guard (the simulation columns
    stay as measured); ``guard_commit`` says which guard gave them."""
    import pandas as pd

    df = pd.read_csv(path)
    for i, row in df.iterrows():
        if row["what"] != "run" or isinstance(row.get("error"), str):
            continue
        est = _estimate(str(ROOT / "models" / f"{row['model']}.yaml"),
                        str(ROOT / "topologies" / f"{row['topology']}.yaml"), int(row["nodes"]))[0]
        df.loc[i, "guard_estimate_s"] = est.seconds
        df.loc[i, "guard_ratio"] = est.seconds / row["wall_s"]
        df.loc[i, "guard_ratio_cpu"] = est.seconds / row["cpu_s"]
        df.loc[i, "guard_simulated_ranks"] = est.simulated_ranks
        df.loc[i, "guard_events"] = est.events
        df.loc[i, "meets_target"] = _meets(df.loc[i].to_dict())
        df.loc[i, "guard_commit"] = _commit()
    df.to_csv(path, index=False)


def _machine() -> str:
    return f"{platform.node()} ({platform.machine()}, {os.cpu_count()} cpus, Python {platform.python_version()})"


def check_args(args) -> None:
    """Every argument checked before any point runs (a SpecError naming it): the kinds of point, both node lists,
    the model and topology files named, and a writable ``--out`` (an existing one with ``--reestimate``)."""
    from simfuse.arguments import check_out_writable
    from simfuse.errors import SpecError
    from simfuse.spec import load_topology, load_workload
    from simfuse.sweeps import parse_nodes

    unknown = [w for w in args.what.split(",") if w not in ("run", "collective")]
    if unknown:
        raise SpecError("<argument>", "--what", f"unknown kind {unknown[0]!r}; expected run, collective or both")
    if args.nodes is not None:
        parse_nodes(args.nodes)
    if args.collective_nodes is not None:
        parse_nodes(args.collective_nodes, "--collective-nodes")
    for model in (args.models.split(",") if args.models else []):
        load_workload(model)
    for topo in (args.topologies.split(",") if args.topologies else []):
        load_topology(topo)
    if args.reestimate and not Path(args.out).is_file():
        raise SpecError("<argument>", "--out", f"no such file: {args.out!r} (--reestimate rewrites an existing CSV)")
    check_out_writable(args.out, is_dir=False)


def main(argv=None) -> int:
    from simfuse.arguments import script_main

    return script_main(_main, argv, "bench_targets.py")


def _main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--what", default="run,collective")
    p.add_argument("--nodes", default=None, help="node counts of the run points (default 1..16,384)")
    p.add_argument("--models", default=None, help="model files (default every models/*.yaml)")
    p.add_argument("--topologies", default=None, help="collective points' topologies (default every shipped one)")
    p.add_argument("--only", choices=("collectives", "runs"), default=None,
                   help="only the collective points (written to experiments/results/bench_collectives.csv unless "
                        "--out is given) or only the run points")
    p.add_argument("--collective-nodes", default=None, help="node counts of the collective points (default 512,1024)")
    p.add_argument("--out", default=None, help="CSV to append to (default experiments/results/bench_targets.csv)")
    p.add_argument("--reestimate", action="store_true",
                   help="recompute the guard columns of --out's run rows with this checkout's guard, and stop")
    p.add_argument("--child", nargs=4, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.only is not None:
        args.what = "collective" if args.only == "collectives" else "run"
    if args.out is None:
        name = "bench_collectives.csv" if args.only == "collectives" else "bench_targets.csv"
        args.out = str(ROOT / "experiments/results" / name)
    if not args.child:
        check_args(args)
    if args.reestimate:
        reestimate(Path(args.out))
        return 0
    if args.child:
        kind, a, b, n = args.child
        row = _child_run(a, b, int(n)) if kind == "run" else _child_collective(a, b, int(n))
        print(json.dumps(row))
        return 0
    from simfuse.sweeps import parse_nodes

    what = args.what.split(",")
    points = []
    if "run" in what:
        models = args.models.split(",") if args.models else sorted(str(m) for m in (ROOT / "models").glob("*.yaml"))
        nodes = parse_nodes(args.nodes) if args.nodes else RUN_NODES
        points += [("run", m, str(RUN_TOPOLOGY), n) for m in models for n in nodes]
    if "collective" in what:
        topos = (args.topologies.split(",") if args.topologies
                 else sorted(str(t) for t in (ROOT / "topologies").glob("*.yaml")))
        cnodes = parse_nodes(args.collective_nodes) if args.collective_nodes else COLLECTIVE_NODES
        points += [("collective", op, t, n) for t in topos for n in cnodes for op in OPS]
    import pandas as pd

    from simfuse.results.io import atomic_write_df

    rows = []
    for kind, a, b, n in points:
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, __file__, "--child", kind, a, b, str(n)], capture_output=True,
                           text=True, timeout=1800)
        try:
            row = json.loads(r.stdout.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            row = {"what": kind, "model": Path(a).stem, "topology": Path(b).stem, "nodes": n,
                   "error": (r.stderr.strip().splitlines() or ["?"])[-1][:200], "wall_s": time.perf_counter() - t0}
        row["meets_target"] = _meets(row)
        rows.append(row)
        print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()}), flush=True)
    df = pd.DataFrame(rows)
    df["machine"] = _machine()
    df["date"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    df["commit"] = _commit()
    out = Path(args.out)
    if out.exists():
        df = pd.concat([pd.read_csv(out), df], ignore_index=True)
    atomic_write_df(df, out)
    print(f"wrote {out} ({len(rows)} rows)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
