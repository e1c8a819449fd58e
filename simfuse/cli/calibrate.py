"""CLI wiring for ``simfuse calibrate`` and ``simfuse validate`` (registered by :mod:`simfuse.cli`).

Handlers return an exit code: 0 on success, 2 on bad input (one-line error on stderr, no traceback, no
half-written output).
"""

from __future__ import annotations

import argparse
import json
import sys

from ..errors import SimfuseError
from ..names import COLLECTIVES, canonical_collective
from ..units import int_arg


def _collective_arg(value: str) -> str:
    try:
        return canonical_collective(value)
    except SimfuseError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


_positive_int = int_arg(1)


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
    p.add_argument("--collective", type=_collective_arg, default=None, metavar="NAME",
                   help=f"collective of the nccl-tests logs when neither file name nor content tells: "
                        f"{', '.join(COLLECTIVES)} (aliases such as alltoall, allreduce accepted)")
    p.add_argument("--ranks", type=_positive_int, default=None, metavar="N",
                   help="ranks of the nccl-tests logs that list no 'Rank' lines (default: from the log)")
    p.add_argument("--nodes", type=_positive_int, default=None, metavar="M",
                   help="nodes of the nccl-tests logs when the log does not tell (default: from the log)")
    p.add_argument("--topology", default=None, metavar="FILE",
                   help="topology YAML whose line rates the fabric fit must respect (checked when given)")
    p.add_argument("--force", action="store_true",
                   help="write an implausible fabric fit anyway (with a warning and a note in the profile) "
                        "instead of refusing it with exit code 2")
    p.add_argument("--kind", choices=("auto", "kineto", "torch-profiler", "nccl-tests", "kernel-trace", "campaign"),
                   default="auto", help="input format (default: detected from each file's content); kineto: "
                                        "PyTorch profiler traces -> the dense-compute section (GEMM, embedding, "
                                        "element-wise rates by shape)")
    p.add_argument("--format", choices=("text", "json"), default="text", help="summary format on stdout")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr (shown once the command has taken "
                                                        "1 s on a terminal, 10 s elsewhere)")
    p.set_defaults(func=_calibrate)
    return p


def add_validate_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``validate --topology FILE [--measurements CSV] [--format json] [--out DIR]``."""
    p = subparsers.add_parser(
        "validate", help="compare simulated with measured times (calibration and held-out points)",
        description="Simulate every calibration point of the topology's calibration profile and every held-out "
                    "measurement, and report the absolute percentage errors.")
    p.add_argument("--topology", default=None, metavar="FILE", help="topology YAML with a `calibration:` profile")
    p.add_argument("--campaign", metavar="CSV", nargs="+", action="extend", default=None,
                   help="kernel timing campaign(s) (experiments/gpu_campaigns/trace_campaign.py; several after one --campaign "
                        "or --campaign repeated, all merged): refit the "
                        "wave models and report leave-region-out errors per family and per region")
    p.add_argument("--heldout-campaign", metavar="CSV", default=None,
                   help="with --campaign: a campaign never fitted on; each of its shapes is predicted by the models "
                        "fitted on the --campaign files (median/max error per family, worst points)")
    p.add_argument("--measurements", metavar="CSV", default=None,
                   help="held-out kernel measurements (kernel,variant,backend,world_size,dtype,shape,grid,...)")
    p.add_argument("--corpus", metavar="DIR", default=None,
                   help="a network corpus folder (data/network_corpus): simulate its multi-node runs on --topology "
                        "with each run's hardware and compare with the published times (sizes >= 1 MiB)")
    p.add_argument("--runs", metavar="ID", nargs="+", default=None,
                   help="with --corpus: only the runs whose id starts with one of these")
    p.add_argument("--format", choices=("text", "json"), default="text", help="summary format on stdout")
    p.add_argument("--out", metavar="DIR", default=None,
                   help="write validation.csv, residuals.png and summary.json here (with --corpus: "
                        "corpus_validation.csv and corpus_summary.json)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr (shown once the command has taken "
                                                        "1 s on a terminal, 10 s elsewhere)")
    p.set_defaults(func=_validate)
    return p


def _per(s_per_unit: float, unit: float) -> str:
    """A rate ``1 / s_per_unit`` in ``unit`` per second for a summary line ('inf' for a dropped term)."""
    return f"{1.0 / s_per_unit / unit:.4g}" if s_per_unit > 0 else "inf"


def _fail(exc: BaseException) -> int:
    print(f"error: {exc}", file=sys.stderr)
    return 2


def _calibrate(args: argparse.Namespace) -> int:
    from ..calibrate.build import calibrate
    from ..checks import check_out_file

    if args.compute_units is not None and not 1 <= args.compute_units <= 100_000:
        return _fail(ValueError("--compute-units must be in 1..100000"))
    try:
        check_out_file(args.out)
    except SimfuseError as exc:
        return _fail(exc)
    skipped: list[str] = []
    warnings: list[str] = []
    from ..progress import command_progress, ticking

    try:
        with command_progress(args, "simfuse calibrate") as progress, ticking(progress, "reading and fitting"):
            profile = calibrate(args.inputs, args.out, compute_units=args.compute_units, collective=args.collective,
                                skipped=skipped, ranks=getattr(args, "ranks", None),
                                nodes=getattr(args, "nodes", None), topology=getattr(args, "topology", None),
                                force=getattr(args, "force", False), warnings=warnings, kind=getattr(args, "kind", None))
    except (SimfuseError, OSError) as exc:
        return _fail(exc)
    for line in skipped:
        print(f"skipped {line}", file=sys.stderr)
    for line in warnings:
        print(line, file=sys.stderr)
    if getattr(args, "format", "text") == "json":
        print(json.dumps(_calibrate_summary(args.out, profile, skipped, warnings)))
        return 0
    n_k = len(profile.get("kernels", []))
    levels = ", ".join(sorted(profile.get("fabric", {}))) or "none"
    print(f"wrote {args.out}: {n_k} kernel fit(s), fabric levels: {levels}, "
          f"{len(profile.get('points', []))} calibration point(s)")
    for d in profile.get("dense", {}).get("fits", []):
        if d.get("model") == "terms":
            rate = (f"{d['s_per_call'] * 1e6:.3g} us per call + bytes at {_per(d['s_per_byte'], 1e12)} TB/s + "
                    f"{d['flop_term']} FLOP ({d['tile'][0]}x{d['tile'][1]} tiles) at {_per(d['s_per_flop'], 1e12)} "
                    "TFLOP/s")
        elif d["family"] == "gemm":
            rate = f"peak {d['peak_flops_per_s'] / 1e12:.4g} TFLOP/s, m_half {d['m_half']:.4g}"
        else:
            rate = f"peak {d['peak_bytes_per_s'] / 1e9:.4g} GB/s, bytes_half {d['bytes_half']:.4g}"
        cv = d.get("cv")
        cv_text = (f"; leave-shape-out rms {cv['rel_residual_rms']:.3g}, max {cv['rel_residual_max']:.3g} "
                   f"(nested {cv['nested_rel_residual_rms']:.3g})") if cv else ""
        print(f"  dense {d['family']}/{d['dtype']}: {rate}, rel. residual rms "
              f"{d['fit']['rel_residual_rms']:.3g}, max {d['fit']['rel_residual_max']:.3g} over "
              f"{d['fit']['points']} shapes{cv_text}")
    for reason, n in profile.get("dense", {}).get("skipped", {}).items():
        print(f"  dense: skipped {n} call(s): {reason}", file=sys.stderr)
    for k in profile.get("kernels", []):
        q = k["fit"]
        print(f"  {k['kernel']}/{k['variant']}/{k['dtype']}: overhead {k['overhead_s'] * 1e6:.3g} us, "
              f"bw {_fmt_rate(k['bw_bytes_per_s'], 'GB/s')}, flops {_fmt_rate(k['flops_per_s'], 'GFLOP/s')}, "
              f"slots {k['slots']}, launch {k['launch_latency_s'] * 1e6:.3g} us, "
              f"rel. residual rms {q['rel_residual_rms']:.3g} over {q['points']} points")
    return 0


def _calibrate_summary(out, profile: dict, skipped: list[str], warnings: list[str]) -> dict:
    """What ``calibrate --format json`` prints: the fits (SI units, names as in the profile) and the messages."""
    fabric = {}
    for level, lv in profile.get("fabric", {}).items():
        fabric[level] = {"use": lv["use"], "ranks": lv["ranks"], "hosts": lv["hosts"],
                         "collectives": {c: {"alpha_s": v["alpha_s"], "beta_bytes_per_s": v.get("beta_bytes_per_s"),
                                             "fit": v.get("fit")} for c, v in lv["collectives"].items()}}
    kernels = [{k: v for k, v in kf.items() if k in ("kernel", "variant", "dtype", "overhead_s", "bw_bytes_per_s",
                                                     "flops_per_s", "slots", "launch_latency_s", "fit")}
               for kf in profile.get("kernels", [])]
    return {"out": str(out), "kernels": kernels, "fabric": fabric, "points": len(profile.get("points", [])),
            "sources": profile.get("sources", []), "skipped": skipped, "warnings": warnings,
            "notes": profile.get("notes", []),
            "dense": [{k: v for k, v in d.items() if k != "samples"} for d in profile.get("dense", {}).get("fits", [])],
            "dense_skipped": profile.get("dense", {}).get("skipped", {})}


def _validate_campaign(args: argparse.Namespace) -> int:
    from ..calibrate.validate import campaign_validation
    from ..progress import command_progress, ticking

    try:
        with command_progress(args, "simfuse validate") as progress, \
                ticking(progress, "refitting and cross-validating the wave models"):
            summary = campaign_validation(args.campaign, args.out, heldout=getattr(args, "heldout_campaign", None))
    except (SimfuseError, OSError, KeyError, ValueError) as exc:
        return _fail(exc)
    if args.format == "json":
        print(json.dumps(summary))
        return 0
    print_campaign_summary(summary, args.out)
    return 0


def print_campaign_summary(summary: dict, out=None) -> None:
    """The text report of :func:`simfuse.calibrate.validate.campaign_validation` (``simfuse validate --campaign``):
    per family and region, then the held-out campaign's shapes; ``out``: where the files were written, if any."""
    t = summary["target"]
    print(f"leave-region-out (each region = the points within 2x of the lowest or highest value of one axis); target "
          f"median <= {t['median_abs'] * 100:g}%, max <= {t['max_abs'] * 100:g}%")
    for fam in summary["families"]:
        flag = "met" if fam["meets_target"] else "MISSED"
        print(f"  {fam['family']}: {fam['points']} held-out predictions, median {fam['median_abs'] * 100:.1f}%, "
              f"max {fam['max_abs'] * 100:.1f}% ({flag}); in-sample median {fam['fit_median_abs'] * 100:.1f}%; "
              f"interval p10/p90 x{fam['p10']:.3f}/x{fam['p90']:.3f}{'; ' + fam['base'] if fam.get('base') else ''}")
        if fam.get("model"):
            print(f"      model: {fam['model']}")
        for name, r in fam["regions"].items():
            beyond = r.get("programs_per_sm", 0) > r.get("train_programs_per_sm", 1 << 30)
            note = (f" (up to {r['programs_per_sm']} programs per SM, the rest at most {r['train_programs_per_sm']}: "
                    "SM sharing no training point showed)" if beyond else "")
            print(f"      {name}: {r['points']} points, median {r['median_abs'] * 100:.1f}%, "
                  f"max {r['max_abs'] * 100:.1f}%{note}")
    h = summary.get("heldout")
    if h:
        print(f"held-out campaign {h['source']} (never fitted on): {h['all']['points']} shapes, median "
              f"{h['all']['median_abs_pct']:.1f}%, max {h['all']['max_abs_pct']:.1f}%")
        for fam, s in h["families"].items():
            fc = s["fitted_configs"]
            extra = (f" (configurations the cost model prices, not spilling: {fc['points']}, median "
                     f"{fc['median_abs_pct']:.1f}%, max {fc['max_abs_pct']:.1f}%)"
                     if fc["points"] != s["points"] and fc["points"] else "")
            noise = (f"; fresh-allocation repeats spread median {s['repeat_spread_median_pct']:.1f}%, max "
                     f"{s['repeat_spread_max_pct']:.1f}%, error beyond half that spread median "
                     f"{s['beyond_noise_median_abs_pct']:.1f}%, max {s['beyond_noise_max_abs_pct']:.1f}%"
                     if "repeat_spread_median_pct" in s else "")
            print(f"  {fam}: {s['points']} shapes, median {s['median_abs_pct']:.1f}%, max "
                  f"{s['max_abs_pct']:.1f}%{extra}{noise}")
        print("  worst:")
        for r in h["worst"]:
            shape = (f"dim {r['dim']:g} pooling {r['pooling']:g} bags {r['bags']:g} rows {r['table_rows']:g} "
                     f"bags/wg {r['bags_per_wg']:g} warps {r['num_warps']:g} spills {r['n_spills']:g}"
                     if r["family"].startswith("embedding") else
                     f"m {r['m']:g} n {r['n']:g} k {r['k']:g} split_k {r['split_k']:g}")
            spread = f" (repeats spread {r['repeat_spread_pct']:.1f}%)" if r.get("repeats", 1) > 1 else ""
            print(f"    {r['family']} {shape} grid {r['grid']} slots {r['slots']}: measured "
                  f"{r['measured_s'] * 1e6:.2f} us, predicted {r['predicted_s'] * 1e6:.2f} us "
                  f"({r['pct_error']:+.1f}%){' REFUSED by the cost model (would spill)' if r.get('rejected') else ''}"
                  f"{spread}")
    if out:
        print(f"  wrote {out}/campaign_cv.json, campaign_cv.csv" +
              (", heldout_validation.csv, heldout_summary.json" if h else ""))


def _fmt_rate(x, unit: str) -> str:
    return "-" if x is None else f"{x / 1e9:.4g} {unit}"


def _validate(args: argparse.Namespace) -> int:
    from ..calibrate.validate import run_validation
    from ..checks import check_out_dir

    if args.campaign:
        return _validate_campaign(args)
    if not args.topology:
        return _fail(ValueError("--topology is required (unless --campaign is given)"))
    if getattr(args, "corpus", None):
        return _validate_corpus(args)
    if getattr(args, "runs", None):
        return _fail(ValueError("--runs selects runs of a network corpus: it needs --corpus DIR"))
    try:
        check_out_dir(args.out)
        table, summary = run_validation(args.topology, args.measurements, args.out)
    except (SimfuseError, OSError) as exc:
        return _fail(exc)
    except ImportError as exc:  # the engine's compute model is missing from this install
        return _fail(exc)
    if args.format == "json":
        print(json.dumps(summary))
    else:
        cal = table[(table["set"] == "calibration") & (table["kind"] == "kernel")]
        for line in validation_lines(summary, makespan=bool((cal["quantity"] == "makespan").any())):
            print(line)
        if args.out:
            print(f"  wrote {args.out}/validation.csv, residuals.png, summary.json")
    return 0


def validation_lines(summary: dict, makespan: bool = False) -> list[str]:
    """The text report of ``simfuse validate``: held-out errors (measurements the profile was not fitted on: the
    accuracy to expect on new shapes) apart from in-sample errors (the profile's own calibration points: how well
    the fit reproduces what it was fitted to), each labelled as such.  ``makespan``: the in-sample kernel points
    compare traced launches' makespans (every wave of the grid), not kernel times as the held-out rows do."""
    def pct(x):
        return "n/a" if x is None else f"{x:.2f}%"

    def stats(s):
        return f"{s['points']} points, median |error| {pct(s['median_abs_pct_error'])}, max {pct(s['max_abs_pct_error'])}"

    lines = []
    held = summary["held_out"]
    if held["points"]:
        lines.append(f"held-out (measurements the profile was NOT fitted on; the accuracy to expect on new shapes): "
                     f"{stats(held)}")
        inr = summary.get("held_out_in_calibration_range") or {}
        if inr.get("points") and inr["points"] != held["points"]:
            lines.append(f"  of which inside the calibrated range: {stats(inr)}")
    else:
        lines.append("held-out: none given (--measurements CSV); the errors below are in-sample only and do not "
                     "show the accuracy on new shapes")
    lines.append("in-sample (the profile's own calibration points, which the fit was made on; how closely the "
                 "fitted model reproduces them):")
    for name, label in (("calibration_kernels", "kernels"), ("calibration_collectives", "collectives")):
        s = summary[name]
        if s["points"]:
            lines.append(f"  {label}: {stats(s)}")
    if makespan and summary["calibration_kernels"]["points"] and held["points"]:
        lines.append("  (in-sample kernel points compare each traced launch's makespan (its whole grid); held-out rows "
                     "compare kernel times, so the two figures measure different things)")
    return lines


def _validate_corpus(args: argparse.Namespace) -> int:
    from ..calibrate.validate import corpus_validation
    from ..checks import check_out_dir

    try:
        check_out_dir(args.out)
        _, summary = corpus_validation(args.corpus, args.topology, args.out, runs=args.runs)
    except (SimfuseError, OSError) as exc:
        return _fail(exc)
    if args.format == "json":
        print(json.dumps(summary))
        return 0

    def line(name: str, s: dict) -> str:
        if not s["points"]:
            return f"  {name}: no points"
        return (f"  {name}: {s['points']} points, median |error| {s['median_abs_pct_error']:.1f}%, max "
                f"{s['max_abs_pct_error']:.1f}%")
    print(f"network corpus {summary['corpus']} on {summary['topology']}: {summary['runs']} runs simulated")
    print(line("all sizes >= 1 MiB", summary["all"]))
    print(line(">= 64 MiB", summary["ge_64MiB"]))
    for key, s in summary["by_collective_nodes"].items():
        print(line(key.replace("/", " on ") + " nodes", s))
    for sk in summary["skipped"]:
        print(f"  not simulated: {sk['run_id']}: {sk['reason']}")
    if args.out:
        print(f"  wrote {args.out}/corpus_validation.csv, corpus_summary.json")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``calibrate`` and ``validate`` alone (the same subcommands as ``simfuse calibrate|validate``)."""
    parser = argparse.ArgumentParser(prog="simfuse")
    sub = parser.add_subparsers(dest="command", required=True)
    add_calibrate_parser(sub)
    add_validate_parser(sub)
    args = parser.parse_args(argv)
    return int(args.func(args))
