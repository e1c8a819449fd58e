"""CLI wiring for ``simfuse calibrate`` and ``simfuse validate`` (registered by :mod:`simfuse.cli`).

Handlers return an exit code: 0 on success, 2 on bad input (one-line error on stderr, no traceback, no
half-written output).
"""

from __future__ import annotations

import argparse
import json
import sys

from ..errors import SimfuseError
from .fit import COLLECTIVE_FACTORS


def add_calibrate_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``calibrate INPUT... --out FILE``."""
    p = subparsers.add_parser(
        "calibrate", help="fit cost models from measured traces into a calibration profile",
        description="Read kernel traces (simfuse.kernels CSV/CSV.gz), PyTorch profiler traces (JSON/JSON.gz) and "
                    "nccl-tests logs (formats detected by content; directories are searched) and write a "
                    "calibration profile (YAML, see docs/calibration.md).")
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="trace/log files or directories")
    p.add_argument("--out", required=True, metavar="FILE", help="profile to write (YAML)")
    p.add_argument("--compute-units", type=int, default=None,
                   help="compute units (SMs) of the device; default: max smid + 1 seen in the kernel traces")
    p.add_argument("--collective", choices=sorted(COLLECTIVE_FACTORS), default=None,
                   help="collective of the nccl-tests logs when neither file name nor content tells")
    p.set_defaults(func=_calibrate)
    return p


def add_validate_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``validate --topology FILE [--measurements CSV] [--format json] [--out DIR]``."""
    p = subparsers.add_parser(
        "validate", help="compare simulated with measured times (calibration and held-out points)",
        description="Simulate every calibration point of the topology's calibration profile and every held-out "
                    "measurement, and report the absolute percentage errors.")
    p.add_argument("--topology", default=None, metavar="FILE", help="topology YAML with a `calibration:` profile")
    p.add_argument("--campaign", metavar="CSV", action="append", default=None,
                   help="kernel timing campaign(s) (experiments/trace_campaign.py; repeats are merged): refit the "
                        "wave models and report leave-region-out errors per family and per region")
    p.add_argument("--measurements", metavar="CSV", default=None,
                   help="held-out kernel measurements (kernel,variant,backend,world_size,dtype,shape,grid,...)")
    p.add_argument("--format", choices=("text", "json"), default="text", help="summary format on stdout")
    p.add_argument("--out", metavar="DIR", default=None,
                   help="write validation.csv, residuals.png and summary.json here")
    p.set_defaults(func=_validate)
    return p


def _fail(exc: BaseException) -> int:
    print(f"error: {exc}", file=sys.stderr)
    return 2


def _calibrate(args: argparse.Namespace) -> int:
    from .build import calibrate

    if args.compute_units is not None and args.compute_units < 1:
        return _fail(ValueError("--compute-units must be >= 1"))
    skipped: list[str] = []
    try:
        profile = calibrate(args.inputs, args.out, compute_units=args.compute_units, collective=args.collective,
                            skipped=skipped)
    except (SimfuseError, OSError) as exc:
        return _fail(exc)
    for line in skipped:
        print(f"skipped {line}", file=sys.stderr)
    n_k = len(profile.get("kernels", []))
    levels = ", ".join(sorted(profile.get("fabric", {}))) or "none"
    print(f"wrote {args.out}: {n_k} kernel fit(s), fabric levels: {levels}, "
          f"{len(profile.get('points', []))} calibration point(s)")
    for k in profile.get("kernels", []):
        q = k["fit"]
        print(f"  {k['kernel']}/{k['variant']}/{k['dtype']}: overhead {k['overhead_s'] * 1e6:.3g} us, "
              f"bw {_fmt_rate(k['bw_bytes_per_s'], 'GB/s')}, flops {_fmt_rate(k['flops_per_s'], 'GFLOP/s')}, "
              f"slots {k['slots']}, launch {k['launch_latency_s'] * 1e6:.3g} us, "
              f"rel. residual rms {q['rel_residual_rms']:.3g} over {q['points']} points")
    return 0


def _validate_campaign(args: argparse.Namespace) -> int:
    from .validate import campaign_validation

    try:
        summary = campaign_validation(args.campaign, args.out)
    except (SimfuseError, OSError, KeyError, ValueError) as exc:
        return _fail(exc)
    if args.format == "json":
        print(json.dumps(summary))
        return 0
    t = summary["target"]
    print(f"leave-region-out (each region = the lowest or highest value of one axis, 4x beyond the rest); target "
          f"median <= {t['median_abs'] * 100:g}%, max <= {t['max_abs'] * 100:g}%")
    for fam in summary["families"]:
        flag = "met" if fam["meets_target"] else "MISSED"
        print(f"  {fam['family']}: {fam['points']} held-out predictions, median {fam['median_abs'] * 100:.1f}%, "
              f"max {fam['max_abs'] * 100:.1f}% ({flag}); in-sample median {fam['fit_median_abs'] * 100:.1f}%; "
              f"interval p10/p90 x{fam['p10']:.3f}/x{fam['p90']:.3f}{'; ' + fam['base'] if fam.get('base') else ''}")
        for name, r in fam["regions"].items():
            print(f"      {name}: {r['points']} points, median {r['median_abs'] * 100:.1f}%, max {r['max_abs'] * 100:.1f}%")
    if args.out:
        print(f"  wrote {args.out}/campaign_cv.json, campaign_cv.csv")
    return 0


def _fmt_rate(x, unit: str) -> str:
    return "-" if x is None else f"{x / 1e9:.4g} {unit}"


def _validate(args: argparse.Namespace) -> int:
    from .validate import run_validation

    if args.campaign:
        return _validate_campaign(args)
    if not args.topology:
        return _fail(ValueError("--topology is required (unless --campaign is given)"))
    try:
        _, summary = run_validation(args.topology, args.measurements, args.out)
    except (SimfuseError, OSError) as exc:
        return _fail(exc)
    except ImportError as exc:  # the engine's compute model is missing from this install
        return _fail(exc)
    if args.format == "json":
        print(json.dumps(summary))
    else:
        def pct(x):
            return "n/a" if x is None else f"{x:.2f}%"
        print(f"{summary['basis']} points: {summary['points']}, median |error| "
              f"{pct(summary['median_abs_pct_error'])}, max |error| {pct(summary['max_abs_pct_error'])}")
        for name in ("calibration_kernels", "calibration_collectives", "held_out"):
            s = summary[name]
            if s["points"]:
                print(f"  {name}: {s['points']} points, median {pct(s['median_abs_pct_error'])}, "
                      f"max {pct(s['max_abs_pct_error'])}")
        if args.out:
            print(f"  wrote {args.out}/validation.csv, residuals.png, summary.json")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry point (``python -m simfuse.calibrate calibrate|validate ...``)."""
    parser = argparse.ArgumentParser(prog="python -m simfuse.calibrate")
    sub = parser.add_subparsers(dest="command", required=True)
    add_calibrate_parser(sub)
    add_validate_parser(sub)
    args = parser.parse_args(argv)
    return int(args.func(args))
