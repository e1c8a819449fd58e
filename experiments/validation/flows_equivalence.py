"""Record the simulated times of a fixed set of workloads, to check that a change to the flow network or the
executor leaves results unchanged (issue 11: the flow-network speed-up must not move any number).

Each case is a ``simfuse`` CLI command (``--format json``); every finite float of its JSON output is kept under a
dotted path.  ``--compare OLD.json`` checks the new values against an earlier recording (one made by running the
old code, e.g. ``PYTHONPATH=<old checkout> python experiments/validation/flows_equivalence.py --out old.json``) and reports
the largest relative difference; it exits 1 above ``--rtol`` (default 1e-12)::

    python experiments/validation/flows_equivalence.py --out NEW.json [--compare OLD.json] [--cases dlrm_full,...]

The cases cover DLRM planned (both modes, rank classes, and every rank in full simulation), the TP decode step,
the MoE layer and the LLM TP+DP step on the fast path and in full simulation, and collectives and fused operators
in symmetric and full mode.  Wall times and event counts are dropped (they are allowed to change).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOPO = "topologies/h200_nvl8_ib_ndr.yaml"
TOPO3 = "topologies/h200_3tier_pods.yaml"

CASES: dict[str, list[str]] = {
    # DLRM planned, both modes (the benchmark's workload), rank classes at 1,024 nodes, and every rank at 2 nodes
    "dlrm_planned_1024": ["run", "--model", "models/dlrm_dcnv2_mlperf_16n.yaml", "--topology", TOPO, "--nodes",
                          "1024", "--batch-per-gpu", "16", "--set", "uncertainty=none"],
    "dlrm_planned_64_bound": ["run", "--model", "models/dlrm_dcnv2_mlperf_16n.yaml", "--topology", TOPO,
                              "--nodes", "64", "--batch-per-gpu", "64"],
    "dlrm_planned_full_2": ["run", "--model", "models/dlrm_dcnv2_mlperf_16n.yaml", "--topology", TOPO, "--nodes",
                            "2", "--batch-per-gpu", "64", "--sim-mode", "full", "--set", "uncertainty=none"],
    "dlrm_v1_full_2": ["run", "--model", "models/dlrm_v1.yaml", "--topology", TOPO, "--nodes", "2",
                       "--sim-mode", "full", "--set", "uncertainty=none"],
    "dlrm_v1_3tier_8": ["run", "--model", "models/dlrm_v1.yaml", "--topology", TOPO3, "--nodes", "8",
                        "--set", "uncertainty=none"],
    "decode_fast_4": ["run", "--model", "models/transformer_tp_decode.yaml", "--topology", TOPO, "--nodes", "4"],
    "decode_full_2": ["run", "--model", "models/transformer_tp_decode.yaml", "--topology", TOPO, "--nodes", "2",
                      "--sim-mode", "full", "--set", "uncertainty=none"],
    "moe_fast_8": ["run", "--model", "models/moe_layer.yaml", "--topology", TOPO, "--nodes", "8"],
    "moe_full_2": ["run", "--model", "models/moe_layer.yaml", "--topology", TOPO, "--nodes", "2", "--sim-mode",
                   "full", "--set", "uncertainty=none"],
    # the LLM step has no ``simfuse run`` kind: simulate_llm itself (models, nodes, sim_mode)
    "llm_fast_8": ["llm", "models/llm_tp_dp.yaml", "8", "auto"],
    "llm_70b_fast_16": ["llm", "models/llm_tp_dp_70b.yaml", "16", "auto"],
    "llm_full_2": ["llm", "models/llm_tp_dp.yaml", "2", "full"],
    "a2a_full_4": ["collective", "--topology", TOPO, "--nodes", "4", "--op", "all_to_all", "-b", "1KiB", "-e",
                   "64MiB", "-f", "8", "--mode", "full"],
    "ar_sym_16": ["collective", "--topology", TOPO, "--nodes", "16", "--op", "all_reduce", "-b", "1KiB", "-e",
                  "256MiB", "-f", "16"],
    "ar_ring_full_2": ["collective", "--topology", TOPO, "--nodes", "2", "--op", "all_reduce", "--algorithm",
                       "ring", "-b", "64KiB", "-e", "64MiB", "-f", "32", "--mode", "full"],
    "op_emb_full_2": ["op", "--op", "embedding_all_to_all", "--topology", TOPO, "--nodes", "2", "--mode", "full"],
    "op_gemm_a2a_sym_8": ["op", "--op", "gemm_all_to_all", "--topology", TOPO, "--nodes", "8"],
    "op_gemv_ar_full_2": ["op", "--op", "gemv_all_reduce", "--topology", TOPO, "--nodes", "2", "--mode", "full"],
    "op_ag_gemm_full_1": ["op", "--op", "all_gather_gemm", "--topology", TOPO, "--nodes", "1", "--mode", "full"],
}

_DROP = ("wall", "events", "_s_wall", "elapsed")


def _flatten(obj, prefix: str, out: dict) -> None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            if any(d in str(k) for d in _DROP):
                continue
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            _flatten(v, f"{prefix}[{i}]", out)
    elif isinstance(obj, bool):
        out[prefix] = obj
    elif isinstance(obj, (int, float)):
        if not (isinstance(obj, float) and not math.isfinite(obj)):
            out[prefix] = obj
    elif isinstance(obj, str):
        out[prefix] = obj


def _run_llm(model: str, nodes: str, sim_mode: str) -> dict:
    from simfuse.fused.knobs import ExecutionSpec
    from simfuse.spec import load_workload
    from simfuse.system import System
    from simfuse.workloads.llm import simulate_llm

    res = simulate_llm(load_workload(model), System.load(TOPO), int(nodes),
                       execution=ExecutionSpec(mode="both", sim_mode=sim_mode))
    keep = ("iteration_time_s", "compute_time_s", "exposed_comm_time_s", "sim_mode", "classes", "phases")
    return {m: {k: getattr(r, k) for k in keep} for m, r in res.items()}


def run_case(argv: list[str]) -> tuple[dict, float]:
    if argv[0] == "llm":
        t0 = time.perf_counter()
        out = _run_llm(*argv[1:])
        flat: dict = {}
        _flatten(json.loads(json.dumps(out)), "", flat)
        return flat, time.perf_counter() - t0
    from simfuse.cli import main as cli  # the simfuse on PYTHONPATH: the code under test

    buf = io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(buf):
        rc = cli([*argv, "--format", "json", "--force"])
    wall = time.perf_counter() - t0
    if rc:
        raise SystemExit(f"simfuse {' '.join(argv)} exited with {rc}")
    flat: dict = {}
    _flatten(json.loads(buf.getvalue()), "", flat)
    return flat, wall


def compare(old: dict, new: dict) -> tuple[float, list[str]]:
    worst, problems = 0.0, []
    for case, vals in old.items():
        if case not in new:
            continue
        nv = new[case]
        for k, a in vals.items():
            if k not in nv:
                problems.append(f"{case}: {k} missing")
                continue
            b = nv[k]
            if isinstance(a, (int, float)) and not isinstance(a, bool) and isinstance(b, (int, float)):
                rel = 0.0 if a == b else abs(a - b) / max(abs(a), abs(b))
                worst = max(worst, rel)
                if rel > 0:
                    problems.append(f"{case}: {k} {a!r} -> {b!r} (rel {rel:.3g})")
            elif a != b:
                problems.append(f"{case}: {k} {a!r} -> {b!r}")
        for k in nv.keys() - vals.keys():
            problems.append(f"{case}: {k} new")
    return worst, problems


class ArgumentError(ValueError):
    """A bad argument, named (checked here without simfuse's helpers: the simfuse under test may be an old one)."""


def check_args(args) -> list[str]:
    """Every argument checked before any case runs; returns the case names."""
    import tempfile

    names = [c for c in args.cases.split(",") if c]
    unknown = [c for c in names if c not in CASES]
    if unknown or not names:
        raise ArgumentError(f"--cases: unknown case {(unknown or [''])[0]!r}; known: {', '.join(CASES)}")
    if not math.isfinite(args.rtol) or args.rtol < 0:
        raise ArgumentError(f"--rtol: must be a finite number >= 0, got {args.rtol!r}")
    if args.compare:
        try:
            json.loads(Path(args.compare).read_text())["values"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ArgumentError(f"--compare: cannot read a recording from {args.compare!r} "
                                f"({getattr(exc, 'strerror', None) or type(exc).__name__})") from None
    out = Path(args.out)
    if out.is_dir():
        raise ArgumentError(f"--out: {args.out!r} is a directory; expected a JSON file")
    try:
        with tempfile.TemporaryFile(dir=out.parent):
            pass
    except OSError as exc:
        raise ArgumentError(f"--out: cannot write under {str(out.parent)!r} ({exc.strerror or exc})") from None
    return names


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--compare", default=None)
    ap.add_argument("--rtol", type=float, default=1e-12)
    args = ap.parse_args(argv)
    try:
        names = check_args(args)
    except ArgumentError as exc:
        print(f"flows_equivalence.py: error: {exc}", file=sys.stderr)
        return 2
    import simfuse

    print(f"simfuse from {Path(simfuse.__file__).parent}", flush=True)
    results, walls = {}, {}
    for name in names:
        results[name], walls[name] = run_case(CASES[name])
        print(f"{name:>24}: {len(results[name]):5d} values, {walls[name]:7.2f} s", flush=True)
    Path(args.out).write_text(json.dumps({"values": results, "wall_s": walls}, indent=1, sort_keys=True))
    if args.compare:
        old = json.loads(Path(args.compare).read_text())["values"]
        worst, problems = compare(old, results)
        for p in problems[:40]:
            print(p)
        print(f"largest relative difference: {worst:.3g} over {sum(len(v) for v in results.values())} values "
              f"({len(problems)} differ)")
        if worst > args.rtol or any("missing" in p or " new" in p for p in problems):
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
