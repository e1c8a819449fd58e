"""``simfuse run`` (one workload at one node count) and ``simfuse sweep`` (node-count sweeps)."""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import SpecError, short_repr
from ..progress import command_progress


def cmd_run(args) -> int:
    import pandas as pd

    from ..checks import check_out_dir, resolve_gpus_per_node
    from ..fused.knobs import parse_execution, parse_set_pairs
    from ..guard import check_cost, cost_note, estimate_run
    from ..spec import load_workload
    from ..system import System
    from ..workloads import workload_for
    from ..workloads.run import run_workload, write_run_outputs

    _check_run_args(args)
    pairs = _resolve_flags(args, parse_set_pairs(args.set))
    ex = parse_execution({**pairs, **_scaling_settings(args), "mode": args.mode, "sim_mode": args.sim_mode})
    system = System.load(args.topology)
    topo = system.topology
    if args.chakra:
        if args.model:
            raise SpecError("<argument>", "--chakra", "give either --model or --chakra, not both")
        from ..graph.chakra import import_et
        from ..workloads.chakra_workload import ChakraWorkload

        # the topology's GPUs per node unless the trace records its own or --gpus-per-node says (issue 35)
        graph = import_et(args.chakra, gpus_per_node=args.gpus_per_node,
                          node_gpus=resolve_gpus_per_node(topo, None))
        nodes, g, name = graph.nodes, resolve_gpus_per_node(topo, graph.gpus_per_node), graph.name
        # the trace fixes what it runs: flags that would change it are refused, not ignored
        if args.nodes is not None and args.nodes != nodes:
            raise SpecError("<argument>", "--nodes", f"the Chakra trace runs on {nodes} nodes; drop --nodes")
        if args.mode not in (None, "both"):
            raise SpecError("<argument>", "--mode", "a Chakra trace runs as recorded (one mode); drop --mode")
        from ..spec.settings import given_settings

        workload_only = [("--export-chakra", args.export_chakra)] + [
            (f.metadata.get("flag") or f.name, v) for _kind, v, f in given_settings(ex.settings)]
        for flag, value in workload_only:
            if value:
                raise SpecError("<argument>", flag, "applies to a --model workload; a Chakra trace runs as recorded")
        spec = ChakraWorkload.of(graph)
        if nodes * g == 1:  # Chakra records no rank count: a directory short of rank files reads as one rank
            print(f"simfuse: note: {args.chakra} holds one rank's ET file: its collectives move no data (a trace of "
                  "several ranks needs every <prefix>.<rank>.et)", file=sys.stderr)
        note = cost_note(check_cost(estimate_run(spec, topo, nodes, g, args.sim_mode or "auto", ex), args.force,
                                    command="chakra"), "chakra")
        if note:
            print(f"simfuse: note: {note}", file=sys.stderr)
        with command_progress(args, "simfuse run") as progress:
            res, rows = run_workload(spec, system, nodes, gpus_per_node=g, execution=ex, record=bool(args.trace),
                                     progress=progress)
        workload = workload_for(spec)
    else:
        if not args.model:
            raise SpecError("<argument>", "--model", "give a workload (--model FILE) or a Chakra ET (--chakra DIR)")
        spec = load_workload(args.model)
        nodes, name = args.nodes or 1, spec.name
        if args.export_chakra and ex.mode == "fused":  # the export is the baseline graph the run simulated
            raise SpecError("<argument>", "--export-chakra", "writes the baseline graph as the run simulates it: "
                                                            "run with --mode baseline or both")
        from ..arguments import check_run

        # nodes, GPUs per node and the cost guard: the checks simfuse.api.run makes too
        g, est = check_run(spec, topo, nodes, args.gpus_per_node, ex, sim_mode=args.sim_mode, force=args.force,
                           workers=_workers(args.workers))
        note = cost_note(est)
        if note:
            print(f"simfuse: note: {note}", file=sys.stderr)
        with command_progress(args, "simfuse run") as progress:
            res, rows = run_workload(spec, system, nodes, gpus_per_node=g, execution=ex, record=bool(args.trace),
                                     workers=_workers(args.workers), progress=progress, expected_s=est.seconds)
        workload = workload_for(spec)
        if args.export_chakra:  # the baseline graph as the run simulated it (its chosen DLRM plan)
            base = res.get("baseline")
            _export_chakra(spec, system, nodes, g, ex, args.export_chakra,
                           plan=workload.plan_of(base) if base is not None else None)
    df = pd.DataFrame(rows)
    # a speedup needs both modes: a Chakra trace (or one mode) has none, so the column is left out, not NaN
    has_speedup = "speedup" in df and df["speedup"].notna().any()
    cols = ["mode", "iteration_time_s", "compute_time_s", "exposed_comm_time_s"] + (["speedup"] if has_speedup
                                                                                      else [])
    show = df[cols].copy()
    for c in ("iteration_time_s", "compute_time_s", "exposed_comm_time_s"):
        show[c.replace("_s", "_ms")] = show.pop(c) * 1e3
    if "iteration_time_p10_s" in df and (df.get("uncertainty") != "none").any():
        for q in ("p10", "p50", "p90"):
            show[f"{q}_ms"] = df[f"iteration_time_{q}_s"] * 1e3
        if "speedup_p10" in df:
            for q in ("p10", "p50", "p90"):
                show[f"speedup_{q}"] = df[f"speedup_{q}"]
    written = []
    if args.out:
        check_out_dir(args.out)  # still a directory (or absent) after the simulation
        written = _write_locked(Path(args.out), lambda: write_run_outputs(Path(args.out), res, rows,
                                                                          bool(args.trace), workload))
    if getattr(args, "format", "text") == "json":
        print(_json({"rows": rows, "written": [str(p) for p in written]}))
        return 0
    print(f"{name} on {topo.name}: {nodes} nodes x {g} GPUs ({res[next(iter(res))].sim_mode} simulation)")
    print(show.to_string(index=False, float_format=lambda v: f"{v:.4f}", na_rep="-"))  # the baseline has no speedup
    unc = df["uncertainty"].iloc[0] if "uncertainty" in df else "none"
    if unc == "inputs":
        an = next(r.input_analysis for r in res.values() if r.input_analysis is not None)
        print(f"p10/p50/p90: {len(an.draws)} Latin hypercube draws of {len(an.inputs)} input ranges "
              "(the files' uncertain: blocks) joint with the kernel residuals; point = nominal inputs")
        top = an.sensitivity_rows()[:3]
        how = {"oat": "one at a time, min..max", "conditional": "mean of the draws at each input's low and high "
                                                                "quarter, min..max"}
        if top and top[0]["method"] in how:
            print(f"top drivers of the {an.metric_name} ({how[top[0]['method']]}): " + "; ".join(
                f"{r['input']} {r['metric_min']:.3f}..{r['metric_max']:.3f}" for r in top))
        elif top:
            print(f"top drivers of the {an.metric_name} (rank correlation over {len(an.draws)} draws; "
                  f"{len(an.draws)} are too few for swings): " + "; ".join(
                      f"{r['input']} {r['spearman']:+.2f}" for r in top))
    elif "uncertainty_note" in df:
        print(("p10/p50/p90: " if unc != "none" else "") + df["uncertainty_note"].iloc[0])
    if written:
        print("wrote " + ", ".join(str(p) for p in written))
    return 0


def _check_run_args(args) -> None:
    """Every argument of ``run`` checked before simulating: a bad --out fails now, not after the simulation."""
    from ..arguments import check_out_writable, refuse_repeated_keys
    from ..checks import check_nodes, check_out_dir

    if args.nodes is not None:
        check_nodes(args.nodes)
    _check_workers(args.workers)
    if args.trace and not args.out:
        raise SpecError("<argument>", "--trace", "needs --out DIR")
    for path, flag in ((args.out, "--out"), (args.export_chakra, "--export-chakra")):
        check_out_dir(path, flag)
        check_out_writable(path, flag)
    refuse_repeated_keys(args.set)


#: every file ``run --out`` may write; those an earlier run wrote and this one does not are removed
RUN_OUTPUTS = ("summary.csv", "breakdown.csv", "plan.csv", "trace.json", "uncertainty_draws.csv", "sensitivity.csv",
               "tornado.png")


def _write_locked(out: Path, write) -> list[Path]:
    """Write a run's outputs into ``out`` under the lock ``sweep`` takes (a second run or sweep on the same
    directory fails at once instead of mixing files), each through a temporary file (``write`` uses the atomic
    writers), then remove the outputs of an earlier run that this one did not write (a stale plan.csv or
    trace.json would be read as this run's)."""
    import contextlib

    from ..checks import remove_stale
    from ..sweeps import SweepLock

    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    lock = SweepLock(out)
    try:
        lock.acquire()
    except SpecError as exc:
        if created:
            with contextlib.suppress(OSError):
                out.rmdir()
        raise SpecError(exc.source, exc.field, exc.message.replace("another sweep", "another run or sweep")) from None
    try:
        written = write()
        remove_stale(out, RUN_OUTPUTS, {p.name for p in written})
        return written
    finally:
        lock.release()


def _json(obj) -> str:
    """JSON with numpy scalars as numbers and NaN as null."""
    import json
    import math

    def clean(v):
        if isinstance(v, dict):
            return {str(k): clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        if hasattr(v, "item"):
            v = v.item()
        return None if isinstance(v, float) and not math.isfinite(v) else v

    return json.dumps(clean(obj))


def _export_chakra(spec, system, nodes: int, g: int, ex, directory: str, plan=None) -> None:
    """Write the baseline graph of the workload (every rank's program) as Chakra ET into ``directory``; ``plan``:
    the DLRM sharding plan the run chose (default: the one the builder makes)."""
    import dataclasses

    from ..graph.chakra import export_et
    from ..workloads.run import workload_graph

    graph = workload_graph(spec, system, nodes, "baseline", gpus_per_node=g,
                           execution=dataclasses.replace(ex, sim_mode="full"), plan=plan)
    if not graph.full:  # builders that emit rank 0 alone: relabelled programs are needed per rank
        raise SpecError("<argument>", "--export-chakra", "this workload's builder emits a symmetric graph only")
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    paths = export_et(graph, d, prefix=spec.name)
    import re

    # an earlier export of more ranks under the same prefix: its extra rank files would be read with these
    mine = {p.name for p in paths}
    rank_file = re.compile(re.escape(spec.name) + r"\.\d+\.et(\.gz)?$")
    for old in d.iterdir():
        if rank_file.match(old.name) and old.name not in mine and (old.is_file() or old.is_symlink()):
            old.unlink()
    print(f"wrote {len(paths) - 1} Chakra ET files and {paths[-1].name} to {d} (baseline graph)")


def cmd_sweep(args) -> int:
    from ..arguments import check_out_writable, refuse_repeated_keys
    from ..checks import check_out_dir, resolve_gpus_per_node
    from ..fused.knobs import parse_execution, parse_set_pairs
    from ..guard import check_cost, estimate_run
    from ..spec import load_workload
    from ..sweeps import parse_nodes, run_sweep
    from ..system import System

    if not args.model:
        raise SpecError("<argument>", "--model", "sweep needs --model FILE")
    nodes = parse_nodes(args.nodes)
    _check_workers(args.workers)
    check_out_dir(args.out)
    check_out_writable(args.out)
    refuse_repeated_keys(args.set)
    settings = {**_resolve_flags(args, parse_set_pairs(args.set)), **_scaling_settings(args)}
    ex = parse_execution({**settings, "mode": args.mode, "sim_mode": args.sim_mode})  # validate before any worker
    spec = load_workload(args.model)
    topo = System.load(args.topology).topology
    g = resolve_gpus_per_node(topo, args.gpus_per_node)
    from ..workloads.run import scaled_spec

    for n in nodes:  # the guard looks at every point, at its scaled batch, before the first one starts
        check_cost(estimate_run(scaled_spec(spec, n, g, ex), topo, n, g, args.sim_mode, ex), args.force)
    workers = _workers(args.workers)
    with command_progress(args, "simfuse sweep") as progress:
        df = run_sweep(args.model, args.topology, nodes, args.out, gpus_per_node=args.gpus_per_node, mode=args.mode,
                       sim_mode=args.sim_mode, workers=workers, scheduler=args.scheduler,
                       progress=progress, settings=settings)
    reused = int(df.attrs.get("reused_points", 0))
    if getattr(args, "format", "text") == "json":
        print(_json({"rows": df.to_dict(orient="records"), "written": [str(Path(args.out) / "results.csv")],
                     "reused_points": reused}))
        return 0
    # the fused rows (their speedup over the baseline) where the sweep ran both modes, else the one mode's rows
    shown = df[df["mode"] == "fused"] if "fused" in set(df["mode"]) else df
    if len(shown):
        cols = ["nodes", "gpus", "iteration_time_s"] + [
            c for c in ("speedup", "iteration_time_p10_s", "iteration_time_p50_s", "iteration_time_p90_s",
                        "speedup_p10", "speedup_p50", "speedup_p90") if c in shown and shown[c].notna().any()]
        if set(shown["mode"]) != {"fused"} or "speedup" not in cols:
            cols.insert(0, "mode")
        print(shown[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}", na_rep="-"))
    done = f"; {reused} of {len(nodes)} points reused from an earlier run" if reused else ""
    print(f"wrote {Path(args.out) / 'results.csv'}{done}")
    return 0


#: flags that are also execution settings: (argparse attribute, --flag, --set key, default)
_FLAG_SETTINGS = (("mode", "--mode", "mode", "both"), ("sim_mode", "--sim-mode", "sim_mode", "auto"),
                  ("global_batch", "--global-batch", "global_batch", None),
                  ("batch_per_gpu", "--batch-per-gpu", "batch_per_gpu", None), ("plan", "--plan", "plan_file", None))


def _resolve_flags(args, pairs: dict) -> dict:
    """A setting given both as a flag and as ``--set key=value``: refused when the two differ (nothing is
    silently overridden); given once, either spelling counts.  Sets the flags on ``args`` and returns the
    ``--set`` pairs without them."""
    pairs = dict(pairs)
    for attr, flag, key, default in _FLAG_SETTINGS:
        given, via_set = getattr(args, attr, None), pairs.pop(key, None)
        if given is not None and via_set is not None:
            same = str(Path(given).resolve()) == str(Path(via_set).resolve()) if attr == "plan" else \
                str(given) == str(via_set)
            if not same:
                raise SpecError("<argument>", flag, f"given as {short_repr(given)} and as --set {key}="
                                                    f"{short_repr(via_set)}; give it once")
        value = given if given is not None else via_set  # (parse_execution converts and checks a --set text)
        setattr(args, attr, value if value is not None else default)
    return pairs


def _scaling_settings(args) -> dict:
    """``--global-batch`` / ``--batch-per-gpu`` / ``--plan`` as execution settings (so sweeps key on them)."""
    out = {}
    if getattr(args, "global_batch", None) is not None:
        out["global_batch"] = args.global_batch
    if getattr(args, "batch_per_gpu", None) is not None:
        out["batch_per_gpu"] = args.batch_per_gpu
    if getattr(args, "plan", None):
        out["plan_file"] = str(Path(args.plan).resolve())
    return out


def _common(p) -> None:
    p.add_argument("--model", default=None, help="workload YAML (models/)")
    p.add_argument("--topology", required=True, help="topology YAML (topologies/)")
    p.add_argument("--gpus-per-node", type=int, default=None)
    p.add_argument("--mode", default=None, choices=("both", "fused", "baseline"), help="default: both")
    p.add_argument("--sim-mode", default=None, choices=("auto", "classes", "full"),
                   help="classes: one representative per class of alike ranks; full: every rank")
    p.add_argument("--format", default="text", choices=("text", "json"), help="summary format on stdout")
    p.add_argument("--force", action="store_true", help="run even when the cost guard estimates it too expensive")
    p.add_argument("--global-batch", type=int, default=None, help="strong scaling: fixed global batch (DLRM)")
    p.add_argument("--batch-per-gpu", type=int, default=None, help="weak scaling: fixed batch per GPU (DLRM)")
    p.add_argument("--plan", default=None, help="force this sharding plan: CSV (table, sharding, ranks[, mode]) or a TorchRec "
                        "plan (its printed text or JSON; docs/extending.md)")
    add_set_option(p)


def _check_workers(workers: int | None) -> None:
    if workers is not None and not 1 <= workers <= 1024:
        raise SpecError("<argument>", "--workers", f"must be in 1..1024, got {workers}")


def _workers(workers: int | None) -> int:
    """``--workers``, or this machine's CPU count."""
    import os

    return workers or os.cpu_count() or 1


def add_set_option(p) -> None:
    """``--set KEY=VALUE`` for every execution setting and fused-operator knob (generated from the dataclasses
    in :mod:`simfuse.fused.knobs`)."""
    import argparse

    from ..fused.knobs import knob_help

    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = ((p.epilog or "") + "\n--set keys:\n  " + knob_help().replace("\n", "\n  ")).strip()
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="execution setting or fused-operator knob (listed below)")


def add_run_parser(sub) -> None:
    p = sub.add_parser("run", help="simulate one training iteration / step of a workload")
    _common(p)
    p.add_argument("--nodes", type=int, default=None, help="default: 1 (a Chakra trace: its own)")
    p.add_argument("--out", default=None, help="write summary.csv, breakdown.csv, plan.csv (workloads with embedding tables) "
                                                "and trace.json (with --trace) here")
    p.add_argument("--trace", action="store_true", help="write a Perfetto trace (DIR/trace.json)")
    p.add_argument("--chakra", default=None, metavar="DIR",
                   help="run a Chakra execution trace (ET files <prefix>.<rank>.et) instead of --model")
    p.add_argument("--export-chakra", default=None, metavar="DIR",
                   help="also write the workload's baseline graph as Chakra ET (one file per rank) into DIR")
    p.add_argument("--workers", type=int, default=None,
                   help="processes for the run's independent simulations: fused candidates, interval runs "
                        "(default: CPU count; results do not depend on it)")
    p.add_argument("--quiet", action="store_true",
                   help="no progress on stderr (by default a live line on a terminal; elsewhere a line every 30 s "
                        "once the run has taken 10 s)")
    p.set_defaults(func=cmd_run)


def add_sweep_parser(sub) -> None:
    p = sub.add_parser("sweep", help="sweep a workload over node counts")
    _common(p)
    p.add_argument("--nodes", default="1,2,4,8", help="1,2,4,... or 8..1024 (powers of two)")
    p.add_argument("--out", required=True)
    p.add_argument("--workers", type=int, default=None, help="local processes (default: CPU count)")
    p.add_argument("--scheduler", default=None, help="Dask scheduler address (tcp://host:8786)")
    p.add_argument("--quiet", action="store_true",
                   help="no progress on stderr (by default a live line on a terminal; elsewhere a line every 30 s "
                        "once the sweep has taken 10 s)")
    p.set_defaults(func=cmd_sweep)
