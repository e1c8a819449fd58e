"""``simfuse op``: one fused operator against its bulk-synchronous baseline."""

from __future__ import annotations

import json

from ..errors import SpecError


def split_knobs(sets: dict):
    """Split ``--set`` pairs into operator parameters and fused-operator knobs (validated)."""
    import dataclasses

    from .knobs import FusedKnobs, parse_execution

    knob_names = {f.name for f in dataclasses.fields(FusedKnobs)}
    params = {k: v for k, v in sets.items() if k not in knob_names}
    knobs = parse_execution({k: v for k, v in sets.items() if k in knob_names}).knobs
    for k, v in params.items():  # operator parameters: numbers where they parse
        for conv in (int, float):
            try:
                params[k] = conv(v)
                break
            except (TypeError, ValueError):
                continue
    return params, knobs


def cmd_op(args) -> int:
    from ..system import System
    from ..workloads.op import run_op
    from .knobs import fused_knob_names, parse_set_pairs
    from .ops import OPS, make_op

    system = System.load(args.topology)
    topo = system.topology
    g = args.gpus_per_node or topo.scale_up.gpus_per_node
    if args.nodes < 1 or g < 1:
        raise SpecError("<argument>", "--nodes", "nodes and GPUs per node must be >= 1")
    params, knobs = split_knobs(parse_set_pairs(args.set))
    unknown = set(params) - set(OPS[args.op].defaults) if args.op in OPS else set()
    if unknown:
        raise SpecError("<argument>", "--set", f"unknown parameter {sorted(unknown)[0]!r} for {args.op}; known: "
                        f"{', '.join(list(OPS[args.op].defaults) + fused_knob_names())}")
    op = make_op(args.op, params, args.nodes, g)
    res = run_op(op, system, args.nodes, knobs=knobs, mode=args.mode, seed=args.seed)
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
    return 0


def add_op_parser(sub) -> None:
    from .ops import OPS

    p = sub.add_parser("op", help="simulate a fused operator against its bulk-synchronous baseline")
    p.add_argument("--op", required=True, choices=sorted(OPS))
    p.add_argument("--topology", required=True)
    p.add_argument("--nodes", type=int, default=1)
    p.add_argument("--gpus-per-node", type=int, default=None)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="operator parameter or knob (slice_wgs, tile_order, persistent_grid, occupancy_loss, "
                        "hbm_comm_factor, baseline_algorithm)")
    p.add_argument("--mode", default="auto", choices=("auto", "symmetric", "full"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--format", default="text", choices=("text", "json"))
    p.set_defaults(func=cmd_op)
