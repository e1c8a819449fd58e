"""``simfuse fit-fabric``: fabric calibration by simulation (:mod:`simfuse.calibrate.fabric_fit`)."""

from __future__ import annotations

from ..calibrate.fabric_fit import calibrated_topology_yaml, fit_fabric


def cmd_fit_fabric(args) -> int:
    """``simfuse fit-fabric LOG --topology FILE --out FILE``: write a topology whose simulated collectives
    reproduce the log."""
    import json
    import sys

    from ..calibrate.nccl_tests import read_nccl_tests
    from ..checks import check_out_file
    from ..results.io import atomic_write_text
    from ..system import System

    out = check_out_file(args.out)
    if args.collective is not None:  # an unknown name was ignored (the log's own collective fitted, exit 0)
        from ..names import canonical_collective

        args.collective = canonical_collective(args.collective, "<argument>", "--collective")
    _check_log_sizes(args.ranks, args.nodes, "<argument>", "--ranks", "--nodes")  # before the log is read
    system = System.load(args.topology)
    from ..calibrate.corpus import corpus_folder, load_corpus, simulation_problem, topology_for_run
    from ..calibrate.detect import TORCH_PROFILER
    from ..errors import SpecError

    topology = system.topology
    if corpus_folder(args.log) is not None:  # a run of the public network corpus (data/network_corpus/)
        if not args.run:
            raise SpecError(args.log, "--run", "a network corpus holds many runs: name one with --run RUN_ID")
        run = load_corpus(args.log).run(args.run)
        problem = simulation_problem(run, topology)
        if problem is not None:  # the runs `validate --corpus` skips, for the same reason
            raise SpecError(args.log, f"run {run.run_id}", f"not simulated: {problem}")
        log = run.as_log()
        topology, assumptions = topology_for_run(run, topology)
        for note in assumptions:
            print(f"simfuse: note: {note}", file=sys.stderr)
    elif args.run:
        raise SpecError("<argument>", "--run", f"names a run of a network corpus folder; {args.log} is a single log "
                        "(drop --run, or give the corpus folder, e.g. data/network_corpus)")
    elif _format(args) == TORCH_PROFILER:  # a Kineto trace: its NCCL kernels as nccl-tests rows
        from ..calibrate.kineto_nccl import read_kineto_nccl

        log = read_kineto_nccl(args.log, args.collective, ranks=args.ranks, nodes=args.nodes)
        for note in log.notes:
            print(f"simfuse: note: {note}", file=sys.stderr)
    else:
        # result rows pasted without their header are read when the user gives the ranks they ran on
        log = read_nccl_tests(args.log, args.collective, ranks=args.ranks, nodes=args.nodes,
                              headerless=args.ranks is not None)
    _check_log_sizes(log.ranks, log.nodes, log.source, "ranks", "nodes")
    from ..guard import check_cost, cost_note, estimate_fit_fabric

    note = cost_note(check_cost(estimate_fit_fabric(log, topology), args.force, command="fit-fabric"),
                     "fit-fabric")
    if note:
        print(f"simfuse: note: {note}", file=sys.stderr)
    res = fit_fabric(log, topology, force=args.force, algorithm=args.algorithm, protocol=args.protocol)
    for p in res.problems:
        print(f"simfuse: warning: applied with --force: {p}", file=sys.stderr)
    if out is not None:
        atomic_write_text(out, calibrated_topology_yaml(args.topology, res))
    if args.format == "json":
        print(json.dumps({**res.as_dict(), "written": [str(out)] if out else []}))
        return 0
    print(f"{res.collective} on {res.nodes} nodes x {res.gpus_per_node} GPUs ({res.level}), algorithms "
          f"{', '.join(sorted(set(res.algorithms)))}")
    ovh = (f"{res.overhead_field.split('.')[1][:-2]} {res.overhead_s * 1e6:.3f} us" if res.overhead_field
           else "per-collective overhead kept (the topology's)")
    print(f"  efficiency {res.efficiency:.4f}  latency {res.latency_s * 1e6:.3f} us  {ovh}")
    for note in res.notes:
        print(f"  note: {note}")
    print(f"  max |simulated/measured - 1|: {res.residual_text()}")
    if out is not None:
        print(f"wrote {out}")
    return 0


def _format(args) -> str | None:
    """The input's detected format; None for an unrecognised file when ``--ranks`` is given (read as result rows
    pasted without their header)."""
    from ..calibrate.detect import detect_format
    from ..errors import TraceError

    try:
        return detect_format(args.log)
    except TraceError as exc:
        if args.ranks is None or "unrecognised input" not in exc.message:
            raise
        return None


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
    p.add_argument("log", help="nccl-tests output (launcher prefixes and preambles are fine), a PyTorch "
                                "profiler trace (its NCCL kernels with message sizes), or a network corpus folder "
                                "with --run")
    p.add_argument("--topology", required=True, help="topology YAML whose line rates bound the fit")
    p.add_argument("--out", default=None, help="write the fitted topology YAML here")
    p.add_argument("--collective", default=None, help="override the collective the log measured")
    p.add_argument("--ranks", type=int, default=None, help="ranks, when the log does not say (with --ranks, result "
                                                           "rows pasted without their header are read too)")
    p.add_argument("--nodes", type=int, default=None, help="nodes, when the log does not say")
    p.add_argument("--run", default=None, help="with a network corpus folder (data/network_corpus) as LOG: the "
                                               "run to fit (its hardware overrides the topology's NICs and NVLink)")
    p.add_argument("--algorithm", default=None,
                   help="the algorithm the log ran (NCCL_ALGO spelling: Ring, Tree, NVLS, NVLSTree, CollnetDirect, "
                        "...), when known; default: NCCL_ALGO from the log, else the tuner's choice")
    p.add_argument("--protocol", default=None, help="the protocol the log ran (LL, LL128, Simple), when known")
    p.add_argument("--force", action="store_true", help="apply a poor or implausible fit anyway (warns); run a fit "
                                                         "the cost guard estimates too expensive")
    p.add_argument("--format", default="text", choices=("text", "json"))
    p.set_defaults(func=cmd_fit_fabric)
