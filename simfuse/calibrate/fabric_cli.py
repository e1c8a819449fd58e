"""``simfuse fit-fabric``: fabric calibration by simulation (:mod:`simfuse.calibrate.fabric_fit`)."""

from __future__ import annotations

from .fabric_fit import LARGE_BYTES, calibrated_topology_yaml, fit_fabric


def cmd_fit_fabric(args) -> int:
    """``simfuse fit-fabric LOG --topology FILE --out FILE``: write a topology whose simulated collectives
    reproduce the log."""
    import json
    import sys

    from ..checks import check_out_file
    from ..results.io import atomic_write_text
    from ..system import System
    from .nccl_tests import read_nccl_tests

    out = check_out_file(args.out)
    _check_log_sizes(args.ranks, args.nodes, "<argument>", "--ranks", "--nodes")  # before the log is read
    system = System.load(args.topology)
    from .detect import TORCH_PROFILER, detect_format

    if detect_format(args.log) == TORCH_PROFILER:  # a Kineto trace: its NCCL kernels as nccl-tests rows
        from .kineto_nccl import read_kineto_nccl

        log = read_kineto_nccl(args.log, args.collective, ranks=args.ranks, nodes=args.nodes)
        for note in log.notes:
            print(f"simfuse: note: {note}", file=sys.stderr)
    else:
        log = read_nccl_tests(args.log, args.collective, ranks=args.ranks, nodes=args.nodes)
    _check_log_sizes(log.ranks, log.nodes, log.source, "ranks", "nodes")
    from ..guard import check_cost, cost_note, estimate_fit_fabric

    note = cost_note(check_cost(estimate_fit_fabric(log, system.topology), args.force, command="fit-fabric"),
                     "fit-fabric")
    if note:
        print(f"simfuse: note: {note}", file=sys.stderr)
    res = fit_fabric(log, system.topology, force=args.force)
    for p in res.problems:
        print(f"simfuse: warning: applied with --force: {p}", file=sys.stderr)
    if out is not None:
        atomic_write_text(out, calibrated_topology_yaml(args.topology, res))
    if args.format == "json":
        print(json.dumps({**res.as_dict(), "written": [str(out)] if out else []}))
        return 0
    print(f"{res.collective} on {res.nodes} nodes x {res.gpus_per_node} GPUs ({res.level}), algorithms "
          f"{', '.join(sorted(set(res.algorithms)))}")
    print(f"  efficiency {res.efficiency:.4f}  latency {res.latency_s * 1e6:.3f} us  per-collective overhead "
          f"{res.overhead_s * 1e6:.3f} us")
    print(f"  max |simulated/measured - 1|: {100 * res.max_residual():.1f}% (all sizes), "
          f"{100 * res.max_residual(LARGE_BYTES):.1f}% (>= 64 MiB)")
    if out is not None:
        print(f"wrote {out}")
    return 0


def _check_log_sizes(ranks, nodes, source: str, rank_field: str, node_field: str) -> None:
    """Rank and node counts (given or read from a log) within the bounds of every other command, before anything
    is sized by them (``nranks 1000000000`` must not build a billion-rank world)."""
    from ..checks import MAX_GPUS_PER_NODE, MAX_NODES
    from ..errors import SpecError

    if nodes is not None and (isinstance(nodes, bool) or not isinstance(nodes, int) or not 1 <= nodes <= MAX_NODES):
        raise SpecError(source, node_field, f"must be an integer in 1..{MAX_NODES:,}, got {nodes!r}")
    most = MAX_NODES * 8 if nodes is None else min(MAX_NODES * 8, nodes * MAX_GPUS_PER_NODE)
    if ranks is not None and (isinstance(ranks, bool) or not isinstance(ranks, int) or not 1 <= ranks <= most):
        raise SpecError(source, rank_field, f"must be an integer in 1..{most:,}, got {ranks!r}")


def add_fit_fabric_parser(sub) -> None:
    p = sub.add_parser("fit-fabric", help="fit a topology's fabric to an nccl-tests log by simulation")
    p.add_argument("log", help="nccl-tests output (launcher prefixes and preambles are fine) or a PyTorch "
                                "profiler trace (its NCCL kernels with message sizes)")
    p.add_argument("--topology", required=True, help="topology YAML whose line rates bound the fit")
    p.add_argument("--out", default=None, help="write the fitted topology YAML here")
    p.add_argument("--collective", default=None, help="override the collective the log measured")
    p.add_argument("--ranks", type=int, default=None, help="ranks, when the log does not say")
    p.add_argument("--nodes", type=int, default=None, help="nodes, when the log does not say")
    p.add_argument("--force", action="store_true", help="apply a poor or implausible fit anyway (warns); run a fit "
                                                         "the cost guard estimates too expensive")
    p.add_argument("--format", default="text", choices=("text", "json"))
    p.set_defaults(func=cmd_fit_fabric)
