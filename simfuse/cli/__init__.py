"""The ``simfuse`` command line.  Every subcommand is also callable from Python (see each module).

Exit codes: 0 success, 2 bad input (a one-line error naming the file and field), 1 other failures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from ..errors import SimfuseError, SpecError, short_repr
from ..units import parse_size_bytes, seed_arg


def _load_topology(path: str):
    from ..spec import load_topology

    return load_topology(path)


def cmd_collective(args) -> int:
    from ..checks import check_nodes, check_out_file, size_range
    from ..collectives import REGISTRY, run_collective
    from ..system import System

    # bounds on every argument before loading or simulating anything
    check_nodes(args.nodes)
    check_out_file(args.out)
    from ..arguments import check_out_writable

    check_out_writable(args.out, is_dir=False)
    if args.algorithm is not None and args.algorithm not in REGISTRY.get(args.op, {}):
        raise SpecError("<argument>", "--algorithm", f"unknown algorithm {short_repr(args.algorithm)} for {args.op}; "
                        f"expected one of {', '.join(REGISTRY.get(args.op, {}))}")
    if args.size is None and args.begin is None:
        raise SpecError("<argument>", "--size", "give --size or a range with --begin/--end/--factor")
    if args.size is not None and (args.begin is not None or args.end is not None or args.factor is not None):
        raise SpecError("<argument>", "--size", "give --size or a range with --begin/--end/--factor, not both")
    if args.end is not None and args.begin is None:
        raise SpecError("<argument>", "--end", "a range needs --begin too")
    if args.begin is not None:
        begin = parse_size_bytes(args.begin, "<argument>", "--begin")
        end = parse_size_bytes(args.end or args.begin, "<argument>", "--end")
        sizes = size_range(begin, end, 2.0 if args.factor is None else args.factor)
    else:
        sizes = [parse_size_bytes(args.size, "<argument>", "--size")]
    topo = System.load(args.topology).topology
    from ..arguments import check_collective
    from ..guard import cost_note, estimate_collective_run

    g = check_collective(topo, args.nodes, args.op, sizes, algorithm=args.algorithm, gpus_per_node=args.gpus_per_node,
                         mode=args.mode, protocol=args.protocol, force=args.force)  # the API's checks too
    note = cost_note(estimate_collective_run(topo, args.op, args.nodes, g, sizes, args.mode, args.algorithm,
                                             args.protocol), "collective")
    if note:
        print(f"simfuse: note: {note}", file=sys.stderr)
    from ..progress import command_progress

    rows = []
    with command_progress(args, "simfuse collective") as progress:
        progress.begin("size", len(sizes))
        for size in sizes:
            progress.doing(f"{size:,} bytes")
            row = run_collective(topo, args.nodes, args.op, size, algorithm=args.algorithm,
                                 gpus_per_node=g, mode=args.mode, seed=args.seed,
                                 protocol=args.protocol).as_dict()
            progress.advance()
            row.pop("wall_s")  # keep the output deterministic
            rows.append(output_units(row))
    if len(rows) > 1 or args.out:
        import pandas as pd

        df = pd.DataFrame(rows)
        if args.out:
            write_table(df, Path(args.out))
            if args.format == "json":  # stdout stays JSON (a pipeline into jq); the note goes to stderr
                print(json.dumps(rows if len(rows) > 1 else rows[0]))
                print(f"simfuse: wrote {args.out} ({len(df)} sizes)", file=sys.stderr)
            else:
                print(f"wrote {args.out} ({len(df)} sizes)")
        elif args.format == "json":
            print(json.dumps(rows))
        else:
            sys.stdout.write(df.to_csv(index=False))
        return 0
    r = rows[0]
    if args.format == "json":
        print(json.dumps(r))
    else:
        print(f"{r['op']} ({r['algorithm']}/{r['protocol']}, {r['mode']}) on {r['ranks']} GPUs ({r['nodes']} nodes x "
              f"{r['gpus_per_node']}), size {r['size_bytes'] / 2**20:.3f} MiB per rank")
        print(f"  time   {r['time_s'] * 1e6:12.2f} us")
        print(f"  algbw  {r['algbw_gbyte_per_s']:12.2f} GB/s")
        print(f"  busbw  {r['busbw_gbyte_per_s']:12.2f} GB/s")
    return 0


def output_units(row: dict) -> dict:
    """Output columns with unambiguous unit names (:data:`simfuse.units.OUTPUT_RENAMES`: ``*_gbps`` -> GB/s is
    written ``*_gbyte_per_s``)."""
    from ..units import OUTPUT_RENAMES

    return {OUTPUT_RENAMES.get(k, k): v for k, v in row.items()}


def write_table(df, path: Path) -> Path:
    """Write ``df`` by extension: ``.parquet`` real Parquet (needs pyarrow: the ``parquet`` extra), anything
    else CSV; atomically."""
    from ..results.io import atomic_write_df

    if path.suffix.lower() in (".parquet", ".pq"):
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise SpecError("<argument>", "--out", "writing Parquet needs pyarrow: pip install 'simfuse[parquet]' "
                                                   "(or name the file .csv)") from None
        from ..results.io import atomic_write

        return atomic_write(path, lambda tmp: df.to_parquet(tmp, index=False))
    return atomic_write_df(df, path)


def _collective_arg(value: str) -> str:
    from ..collectives import OPS
    from ..names import canonical_collective

    try:
        name = canonical_collective(value)
    except SpecError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None
    if name not in OPS:
        raise argparse.ArgumentTypeError(f"{value!r}: simulated collectives are {', '.join(OPS)}")
    return name


def build_parser() -> argparse.ArgumentParser:
    from ..collectives import OPS, REGISTRY

    algorithm_names = list(dict.fromkeys(a for algos in REGISTRY.values() for a in algos))  # every op's, in order

    p = argparse.ArgumentParser(prog="simfuse", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("collective", help="simulate one bulk-synchronous collective (nccl-tests definitions)")
    c.add_argument("--topology", required=True, help="topology YAML file")
    c.add_argument("--nodes", type=int, default=1)
    c.add_argument("--gpus-per-node", type=int, default=None)
    c.add_argument("--op", required=True, type=_collective_arg, metavar="OP",
                   help=f"{' | '.join(OPS)} (aliases such as alltoall, allreduce, allgather accepted)")
    c.add_argument("--algorithm", default=None,
                   help=f"{' | '.join(algorithm_names)} (depends on --op and on the hardware the topology "
                        "declares; pat: all-gather / reduce-scatter with one GPU per node); default: the tuner's "
                        "choice, as in workloads")
    c.add_argument("--protocol", default=None, type=str.strip,
                   help="LL | LL128 | Simple (NCCL_PROTO); default: the tuner's choice (needs "
                        "collectives.protocol_model: nccl in the topology for LL and LL128)")
    c.add_argument("--size", default=None, help="per-rank buffer, e.g. 64MiB, 1GB")
    c.add_argument("-b", "--begin", default=None, help="range start (nccl-tests -b)")
    c.add_argument("-e", "--end", default=None, help="range end (nccl-tests -e)")
    c.add_argument("-f", "--factor", type=float, default=None, help="range factor (nccl-tests -f; default 2)")
    c.add_argument("--out", default=None, help="write the table to this file: Parquet if it ends in .parquet, "
                                               "CSV otherwise")
    c.add_argument("--mode", default="auto", choices=("auto", "symmetric", "full"))
    c.add_argument("--seed", type=seed_arg, default=0)
    c.add_argument("--format", default="text", choices=("text", "json"))
    c.add_argument("--force", action="store_true", help="run even when the cost guard estimates it too expensive")
    c.add_argument("--quiet", action="store_true", help="no progress on stderr (shown once the command has taken "
                                                        "1 s on a terminal, 10 s elsewhere)")
    c.set_defaults(func=cmd_collective)

    for mod, fn in (("simfuse.cli.op", "add_op_parser"), ("simfuse.cli.run", "add_run_parser"),
                    ("simfuse.cli.run", "add_sweep_parser"), ("simfuse.cli.calibrate", "add_calibrate_parser"),
                    ("simfuse.cli.calibrate", "add_validate_parser"),
                    ("simfuse.cli.fit_fabric", "add_fit_fabric_parser")):
        try:
            module = __import__(mod, fromlist=[fn])
        except ImportError:
            continue
        if hasattr(module, fn):
            getattr(module, fn)(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        from ..checks import check_finite_number

        for name in ("factor", "seed"):  # argparse's float() accepts nan/inf and int() any size
            if isinstance(getattr(args, name, None), (int, float)):
                check_finite_number(getattr(args, name), f"--{name}")
        return int(args.func(args) or 0)
    except SpecError as exc:
        print(f"simfuse: error: {exc}", file=sys.stderr)
        return 2
    except SimfuseError as exc:
        print(f"simfuse: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # stdout closed early (`simfuse op ... | head`): not an error of the run
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - keep Python's exit flush from raising again
        except OSError:
            pass
        return 0
    except OSError as exc:  # a path that cannot be read or written (--out under /proc, a full disk): one line
        where = exc.filename if exc.filename is not None else "<file>"
        print(f"simfuse: error: {where}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("simfuse: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
