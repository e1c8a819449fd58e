"""``simfuse run`` (one workload at one node count) and ``simfuse sweep`` (node-count sweeps)."""

from __future__ import annotations

from pathlib import Path

from ..errors import SpecError


def cmd_run(args) -> int:
    import pandas as pd

    from ..checks import check_nodes, check_out_dir, resolve_gpus_per_node
    from ..costs import resolve_topology
    from ..guard import check_cost, estimate_workload
    from ..spec import load_topology, load_workload
    from .run import simulate_workload, summary_rows, write_run_outputs

    # every argument checked before simulating: a bad --out fails now, not after the simulation
    check_nodes(args.nodes)
    if args.trace and not args.out:
        raise SpecError("<argument>", "--trace", "needs --out DIR")
    check_out_dir(args.out)
    spec = load_workload(args.model)
    topo = resolve_topology(load_topology(args.topology))
    g = resolve_gpus_per_node(topo, args.gpus_per_node)
    check_cost(estimate_workload(spec, topo, args.nodes, g, args.sim_mode), args.force)
    res = simulate_workload(spec, topo, args.nodes, mode=args.mode, gpus_per_node=g, sim_mode=args.sim_mode,
                            record=bool(args.trace))
    rows = summary_rows(spec.name, topo.name, args.nodes, args.nodes * g, res)
    df = pd.DataFrame(rows)
    cols = ["mode", "iteration_time_s", "compute_time_s", "exposed_comm_time_s"] + (["speedup"] if "speedup" in df
                                                                                      else [])
    show = df[cols].copy()
    for c in ("iteration_time_s", "compute_time_s", "exposed_comm_time_s"):
        show[c.replace("_s", "_ms")] = show.pop(c) * 1e3
    print(f"{spec.name} on {topo.name}: {args.nodes} nodes x {g} GPUs ({res[next(iter(res))].sim_mode} simulation)")
    print(show.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    if args.out:
        check_out_dir(args.out)  # still a directory (or absent) after the simulation
        written = write_run_outputs(Path(args.out), res, rows, bool(args.trace))
        print("wrote " + ", ".join(str(p) for p in written))
    return 0


def cmd_sweep(args) -> int:
    import os

    from ..checks import check_out_dir, resolve_gpus_per_node
    from ..costs import resolve_topology
    from ..guard import check_cost, estimate_workload
    from ..spec import load_topology, load_workload
    from ..sweep import parse_nodes, run_sweep

    nodes = parse_nodes(args.nodes)
    if args.workers is not None and not 1 <= args.workers <= 1024:
        raise SpecError("<argument>", "--workers", f"must be in 1..1024, got {args.workers}")
    check_out_dir(args.out)
    spec = load_workload(args.model)
    topo = resolve_topology(load_topology(args.topology))
    g = resolve_gpus_per_node(topo, args.gpus_per_node)
    for n in nodes:  # the guard looks at every point before the first one starts
        check_cost(estimate_workload(spec, topo, n, g, args.sim_mode), args.force)
    workers = args.workers or os.cpu_count() or 1
    df = run_sweep(args.model, args.topology, nodes, args.out, gpus_per_node=args.gpus_per_node, mode=args.mode,
                   sim_mode=args.sim_mode, workers=workers, scheduler=args.scheduler,
                   progress=not args.quiet)
    fused = df[df["mode"] == "fused"]
    if len(fused):
        print(fused[["nodes", "gpus", "iteration_time_s", "speedup"]].to_string(index=False,
                                                                              float_format=lambda v: f"{v:.4g}"))
    print(f"wrote {Path(args.out) / 'results.csv'}")
    return 0


def _common(p) -> None:
    p.add_argument("--model", required=True, help="workload YAML (models/)")
    p.add_argument("--topology", required=True, help="topology YAML (topologies/)")
    p.add_argument("--gpus-per-node", type=int, default=None)
    p.add_argument("--mode", default="both", choices=("both", "fused", "baseline"))
    p.add_argument("--sim-mode", default="auto", choices=("auto", "classes", "full"),
                   help="classes: one representative per class of alike ranks; full: every rank")
    p.add_argument("--force", action="store_true", help="run even when the cost guard estimates it too expensive")


def add_run_parser(sub) -> None:
    p = sub.add_parser("run", help="simulate one training iteration / step of a workload")
    _common(p)
    p.add_argument("--nodes", type=int, default=1)
    p.add_argument("--out", default=None, help="write summary.csv, breakdown.csv (and trace.json) here")
    p.add_argument("--trace", action="store_true", help="write a Perfetto trace (DIR/trace.json)")
    p.set_defaults(func=cmd_run)


def add_sweep_parser(sub) -> None:
    p = sub.add_parser("sweep", help="sweep a workload over node counts")
    _common(p)
    p.add_argument("--nodes", default="1,2,4,8", help="1,2,4,... or 8..1024 (powers of two)")
    p.add_argument("--out", required=True)
    p.add_argument("--workers", type=int, default=None, help="local processes (default: CPU count)")
    p.add_argument("--scheduler", default=None, help="Dask scheduler address (tcp://host:8786)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_sweep)
