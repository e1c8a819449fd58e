"""Compare this directory's (calibrated) sweep with a roofline sweep of the same topology, and count the runs whose
kernels lie inside the traced range of the calibration profile.

    grep -v '^calibration:' topologies/h200_nvl8_ib_ndr.yaml > /tmp/h200_roofline.yaml
    .venv/bin/python experiments/fused_ops/fused_ops.py --topology /tmp/h200_roofline.yaml --out /tmp/fo_roofline
    .venv/bin/python experiments/validation/calibration_effect.py --roofline /tmp/fo_roofline

Writes ``calibration_effect.csv`` (per operator and regime: time reduction with the roofline and with the profile,
mean calibrated/roofline ratio of the baseline and fused kernel times) and ``calibration_coverage.csv`` (per
operator, kernel variant and regime: runs whose requested bytes and FLOP per workgroup lie within 10% of the range
of the profile's traced points of that kernel, variant and dtype -- the ``in_calibration_range`` rule of
``simfuse validate``; outside, the fit extrapolates).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[2]
HERE = REPO / "experiments" / "results" / "fused_ops"
sys.path.insert(0, str(REPO))

from simfuse.costs.calibrated import trace_kernel_name  # noqa: E402
from simfuse.fused.ops import make_op  # noqa: E402

TOL = 0.10


def load_fused_ops():
    spec = importlib.util.spec_from_file_location("fused_ops", REPO / "experiments" / "fused_ops" / "fused_ops.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def effect(cal: pd.DataFrame, roof: pd.DataFrame) -> pd.DataFrame:
    keys = ["op", "nodes", "gpus_per_node"]
    assert (cal[keys].values == roof[keys].values).all(), "sweeps differ"
    d = cal[keys + ["regime"]].copy()
    d["tr_roofline"] = roof["time_reduction"].values
    d["tr_calibrated"] = cal["time_reduction"].values
    d["base_compute_ratio"] = cal["baseline_compute_s"].values / roof["baseline_compute_s"].values
    d["fused_compute_ratio"] = cal["fused_compute_s"].values / roof["fused_compute_s"].values
    d["fused_overhead_roofline"] = roof["fused_compute_s"].values / roof["baseline_compute_s"].values - 1
    d["fused_overhead_calibrated"] = cal["fused_compute_s"].values / cal["baseline_compute_s"].values - 1
    d["tr_change"] = d["tr_calibrated"] - d["tr_roofline"]
    rows = []
    for op in dict.fromkeys(d["op"]):
        for regime in ("intra", "inter", "all"):
            s = d[(d["op"] == op) & ((d["regime"] == regime) if regime != "all" else True)]
            rows.append({
                "op": op, "regime": regime, "runs": len(s),
                "roofline_avg": s["tr_roofline"].mean(), "roofline_max": s["tr_roofline"].max(),
                "calibrated_avg": s["tr_calibrated"].mean(), "calibrated_max": s["tr_calibrated"].max(),
                "change_avg_points": 100 * s["tr_change"].mean(),
                "change_min_points": 100 * s["tr_change"].min(), "change_max_points": 100 * s["tr_change"].max(),
                "base_compute_ratio_mean": s["base_compute_ratio"].mean(),
                "base_compute_ratio_min": s["base_compute_ratio"].min(),
                "base_compute_ratio_max": s["base_compute_ratio"].max(),
                "fused_compute_ratio_mean": s["fused_compute_ratio"].mean(),
                "fused_overhead_roofline_mean": s["fused_overhead_roofline"].mean(),
                "fused_overhead_calibrated_mean": s["fused_overhead_calibrated"].mean(),
            })
    return pd.DataFrame(rows)


def coverage(profile_path: Path) -> pd.DataFrame:
    prof = yaml.safe_load(profile_path.read_text())
    pts = pd.DataFrame([p for p in prof["points"] if p.get("kind") == "kernel"])
    pts["bytes_wg"] = pts["bytes"] / pts["grid"]
    pts["flops_wg"] = pts["flops"] / pts["grid"]
    rng = pts.groupby(["kernel", "variant", "dtype"])[["bytes_wg", "flops_wg"]].agg(["min", "max"])
    fo = load_fused_ops()
    rows = []
    for name, plist in fo.sweep_params(False).items():
        for p in plist:
            for nodes, g in fo.GPU_CONFIGS:
                op = make_op(name, p, nodes, g)
                for variant in ("compute", "fused"):
                    w = op.work(variant)
                    key = (trace_kernel_name(w.name), w.variant, w.dtype)
                    inside = key in rng.index
                    if inside:
                        for col, v in (("bytes_wg", w.requested_bytes_per_wg), ("flops_wg", w.flops_per_wg)):
                            lo, hi = rng.loc[key, (col, "min")], rng.loc[key, (col, "max")]
                            inside &= lo * (1 - TOL) <= v <= hi * (1 + TOL)
                    rows.append({"op": name, "variant": variant, "regime": "intra" if nodes == 1 else "inter",
                                 "inside": bool(inside), "flops_wg": w.flops_per_wg,
                                 "bytes_wg": w.requested_bytes_per_wg,
                                 "traced_flops_wg_min": rng.loc[key, ("flops_wg", "min")] if key in rng.index else None,
                                 "traced_flops_wg_max": rng.loc[key, ("flops_wg", "max")] if key in rng.index else None})
    r = pd.DataFrame(rows)
    return (r.groupby(["op", "variant", "regime"], sort=False)
            .agg(runs=("inside", "size"), inside_traced_range=("inside", "sum"),
                 flops_wg_min=("flops_wg", "min"), flops_wg_max=("flops_wg", "max"),
                 bytes_wg_min=("bytes_wg", "min"), bytes_wg_max=("bytes_wg", "max"),
                 traced_flops_wg_min=("traced_flops_wg_min", "first"),
                 traced_flops_wg_max=("traced_flops_wg_max", "first"))
            .reset_index())


def check_args(args) -> None:
    """Both sweep directories hold fused_ops.csv, the profile exists and ``--calibrated`` is writable (a SpecError
    naming the flag, before anything is read or written)."""
    from simfuse.arguments import check_out_writable
    from simfuse.errors import SpecError

    for flag, d in (("--roofline", args.roofline), ("--calibrated", args.calibrated)):
        if not (Path(d) / "fused_ops.csv").is_file():
            raise SpecError("<argument>", flag, f"no fused_ops.csv in {d!r} (the output directory of a "
                            "fused_ops.py sweep)")
    if not Path(args.profile).is_file():
        raise SpecError("<argument>", "--profile", f"no such file: {args.profile!r}")
    check_out_writable(args.calibrated, "--calibrated")


def main(argv=None) -> int:
    from simfuse.arguments import script_main

    return script_main(_main, argv, "calibration_effect.py")


def _main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--roofline", required=True, help="output directory of the roofline sweep")
    ap.add_argument("--calibrated", default=str(HERE), help="output directory of the calibrated sweep (and of "
                    "the two CSVs this script writes)")
    ap.add_argument("--profile", default=str(REPO / "profiles" / "h200_calibration.yaml"))
    args = ap.parse_args(argv)
    check_args(args)
    out = Path(args.calibrated)
    cal = pd.read_csv(out / "fused_ops.csv")
    roof = pd.read_csv(Path(args.roofline) / "fused_ops.csv")
    e = effect(cal, roof)
    c = coverage(Path(args.profile))
    e.to_csv(out / "calibration_effect.csv", index=False, float_format="%.6g")
    c.to_csv(out / "calibration_coverage.csv", index=False, float_format="%.6g")
    with pd.option_context("display.width", 250, "display.max_columns", 30):
        print(e.round(3).to_string(index=False))
        print()
        print(c.to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
