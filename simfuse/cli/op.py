"""``simfuse op``: one fused operator against its bulk-synchronous baseline."""

from __future__ import annotations

import json

from ..errors import SpecError, short_repr
from ..units import seed_arg


def cmd_op(args) -> int:
    from ..arguments import refuse_repeated_keys, split_knobs
    from ..checks import check_nodes, resolve_gpus_per_node
    from ..collectives import REGISTRY
    from ..fused.knobs import FusedKnobs, parse_set_pairs
    from ..fused.ops import OPS, make_op
    from ..guard import check_cost, estimate_op
    from ..system import System
    from ..workloads.op import run_op

    check_nodes(args.nodes)
    refuse_repeated_keys(args.set)
    params, knobs = split_knobs(parse_set_pairs(args.set))
    unknown = set(params) - set(OPS[args.op].defaults) if args.op in OPS else set()
    if unknown:
        raise SpecError("<argument>", "--set", f"unknown parameter {short_repr(sorted(unknown)[0])} for {args.op}; "
                        f"known: {', '.join(list(OPS[args.op].defaults) + _op_knobs())}")
    if knobs.twrw_push != FusedKnobs().twrw_push:  # a DLRM knob: table-row-wise shards exist only in DLRM's embedding
        raise SpecError("<argument>", "twrw_push", f"{knobs.twrw_push}: applies to dlrm workloads (`simfuse run`), "
                        f"not the {args.op} operator")
    algos = REGISTRY.get(OPS[args.op].collective, {})
    if knobs.baseline_algorithm is not None and knobs.baseline_algorithm not in algos:
        raise SpecError("<argument>", "baseline_algorithm", f"unknown {short_repr(knobs.baseline_algorithm)} for "
                        f"{OPS[args.op].collective}; expected one of {', '.join(algos)}")
    for k in ("slice_wgs", "persistent_grid"):
        if getattr(knobs, k) > 2**31:
            raise SpecError("<argument>", k, f"must be <= {2**31}, got {getattr(knobs, k)}")
    system = System.load(args.topology)
    topo = system.topology
    g = resolve_gpus_per_node(topo, args.gpus_per_node)
    op = make_op(args.op, params, args.nodes, g)
    check_cost(estimate_op(args.op, params, topo, args.nodes, g, args.mode, knobs.slice_wgs, knobs.tile_order),
               args.force, command="op")
    from ..progress import command_progress

    with command_progress(args, "simfuse op") as progress:
        res = run_op(op, system, args.nodes, knobs=knobs, mode=args.mode, seed=args.seed, launch=args.launch,
                     progress=progress)
    d = res.as_dict()
    d["params"].pop("wall_s", None)
    if args.format == "json":
        print(json.dumps(d))
        return 0
    print(f"{res.op} on {res.ranks} GPUs ({res.nodes} nodes x {res.gpus_per_node}), {res.mode} simulation")
    print(f"  params: {', '.join(f'{k}={v}' for k, v in d['params'].items())}")
    print(f"  {'':10s} {'time (us)':>12s} {'compute (us)':>14s} {'exposed comm (us)':>18s}")
    print(f"  {'baseline':10s} {res.baseline_time_s*1e6:12.2f} {res.baseline_compute_s*1e6:14.2f} "
          f"{res.baseline_exposed_comm_s*1e6:18.2f}")
    print(f"  {'fused':10s} {res.fused_time_s*1e6:12.2f} {res.fused_compute_s*1e6:14.2f} "
          f"{res.fused_exposed_comm_s*1e6:18.2f}")
    print(f"  speedup {res.speedup:.3f}x  (time reduction {res.time_reduction*100:.1f}%)")
    if res.intervals:
        b, f, sp = res.intervals["baseline_time_s"], res.intervals["fused_time_s"], res.intervals["speedup"]
        print(f"  p10/p50/p90 (calibration residuals): baseline {b['p10']*1e6:.2f}/{b['p50']*1e6:.2f}/"
              f"{b['p90']*1e6:.2f} us, fused {f['p10']*1e6:.2f}/{f['p50']*1e6:.2f}/{f['p90']*1e6:.2f} us, speedup "
              f"{sp['p10']:.3f}/{sp['p50']:.3f}/{sp['p90']:.3f}x")
    return 0


def _op_knobs() -> list[str]:
    """The fused-operator knobs an operator alone takes (``twrw_push`` acts on DLRM's table-row-wise shards only)."""
    from ..fused.knobs import fused_knob_names

    return [k for k in fused_knob_names() if k != "twrw_push"]


def op_help() -> str:
    """``op --help``'s epilog: every operator of :data:`~simfuse.fused.ops.OPS` with the first line of its
    docstring and its parameters with their defaults, then the fused-operator knobs (all from the code)."""
    import textwrap

    from ..fused.knobs import FusedKnobs, _scalar_fields
    from ..fused.ops import OPS

    lines = ["operators and their parameters (--set NAME=VALUE; default in parentheses):"]
    for name in sorted(OPS):
        cls = OPS[name]
        doc = (cls.__doc__ or "").strip().split("\n")[0].rstrip(".:").replace("``", "")
        lines.extend(textwrap.wrap(f"{name}: {doc}" if doc else name, 104, initial_indent="  ",
                                   subsequent_indent="      "))
        params = "parameters: " + ", ".join(f"{k} ({v})" for k, v in cls.defaults.items())
        lines.extend(textwrap.wrap(params, 104, initial_indent="    ", subsequent_indent="        "))
    lines.append("fused-operator knobs (--set NAME=VALUE):")
    fields = _scalar_fields(FusedKnobs)
    for name in _op_knobs():  # not twrw_push: DLRM's embedding only (refused here)
        f = fields[name]
        ch = f.metadata.get("choices")
        text = f"{name}: {f.metadata.get('help', '')}" + (f" [{'|'.join(ch)}]" if ch else "")
        lines.extend(textwrap.wrap(text, 104, initial_indent="  ", subsequent_indent="      "))
    return "\n".join(lines)


def add_op_parser(sub) -> None:
    import argparse

    from ..fused.ops import OPS
    from ..spec.workload import LAUNCHES

    p = sub.add_parser("op", help="simulate a fused operator against its bulk-synchronous baseline",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=op_help())
    p.add_argument("--op", required=True, choices=sorted(OPS))
    p.add_argument("--topology", required=True)
    p.add_argument("--nodes", type=int, default=1)
    p.add_argument("--gpus-per-node", type=int, default=None)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="operator parameter (listed below per operator) or fused-operator knob")
    p.add_argument("--mode", default="auto", choices=("auto", "symmetric", "full"))
    p.add_argument("--launch", default="eager", choices=LAUNCHES,
                   help="kernels launched eagerly (device.kernel_launch_latency_us) or replayed from a CUDA graph "
                        "(device.graph_launch_latency_us), in both modes")
    p.add_argument("--seed", type=seed_arg, default=0)
    p.add_argument("--format", default="text", choices=("text", "json"))
    p.add_argument("--force", action="store_true", help="run even when the cost guard estimates it too expensive")
    p.add_argument("--quiet", action="store_true",
                   help="no progress on stderr (by default a live line on a terminal; elsewhere a line every 30 s "
                        "once the run has taken 10 s)")
    p.set_defaults(func=cmd_op)
