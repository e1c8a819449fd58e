"""``simfuse validate``: simulated against measured times, for calibration and held-out points.

Kernel points are simulated with the engine's compute model (:func:`simfuse.engine.compute.simulate_kernel`)
and the topology's cost model (calibrated when the topology names a profile).  Collective points (from
nccl-tests) are evaluated with the fitted alpha-beta model of their level.  Held-out kernel measurements come from
a CSV (``kernel,variant,backend,world_size,dtype,shape,grid,num_warps,median_s,p10_s,p90_s,flops,bytes,device,
date``; flops/bytes are totals of the kernel; optional ``traffic_bytes``: the bytes the launch's programs request,
summed over the grid, counted like the traces' ``bytes_per_program`` -- when present it is the
``KernelWork.traffic_bytes_per_wg`` the calibrated model uses, so that traces and held-out points share one definition).
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..costs.base import CostModel, KernelWork
from ..errors import SpecError, TraceError, short_repr
from ..profile.fit import alpha_beta_time_s
from ..profile.load import CalibrationProfile, apply_to_topology, cost_model_for, load_profile
from ..spec import load_topology
from ..spec.topology import DTYPES as TOPOLOGY_DTYPES
from ._io import GZIP_ERRORS, not_a_file, open_text
from .kernel_trace import format_shape, parse_shape

MEASUREMENT_COLUMNS = ("kernel", "variant", "backend", "world_size", "dtype", "shape", "grid", "num_warps",
                       "median_s", "p10_s", "p90_s", "flops", "bytes", "device", "date")
#: Optional measurement column: requested (trace-definition) bytes of the launch; empty = unknown.
TRAFFIC_COLUMN = "traffic_bytes"
#: shape keys whose values are words (the embedding's pooling ``mode=sum``); every other key is a number
TEXT_SHAPE_KEYS = ("mode",)
_REQUIRED = ("kernel", "variant", "dtype", "shape", "grid", "median_s", "flops", "bytes")
#: Largest launch grid a measurement may name (programs); the engine keeps per-program arrays: measured on the
#: 2-core dev VM, a grid of 2**22 programs takes ~20 s and ~0.9 GB (2**20: ~5 s, 0.3 GB); measured kernels have
#: grids of 10**2-10**4 programs (experiments/results/h200_kernel_heldout.csv: at most 6,144).
MAX_GRID = 2**22
#: Largest sum of the grids of one measurement file (each program costs ~5 us to simulate: ~3 min).
MAX_TOTAL_GRID = 2**25
#: Variants a measured kernel may have.
VARIANTS = ("compute", "fused")
TABLE_COLUMNS = ("set", "kind", "quantity", "kernel", "variant", "backend", "world_size", "dtype", "shape", "grid", "num_warps",
                 "level", "collective", "ranks", "size_bytes", "bytes_per_wg", "requested_bytes_per_wg", "flops_per_wg",
                 "in_calibration_range", "measured_s",
                 "simulated_s", "pct_error")


@dataclass(frozen=True)
class Measurement:
    """One held-out kernel measurement (times in seconds, flops/bytes totals of the kernel)."""

    kernel: str
    variant: str
    backend: str
    world_size: int
    dtype: str
    shape: str
    grid: int
    num_warps: int
    median_s: float
    flops: float
    bytes: float
    line: int
    traffic_bytes: float | None = None  # requested bytes (trace definition), None = not measured


def read_measurements(path: str | Path) -> list[Measurement]:
    """Read a held-out kernel measurement CSV; errors name the file and line."""
    p = Path(path)
    src = str(p)
    if not p.is_file():
        raise TraceError(src, "", not_a_file(src))
    out: list[Measurement] = []
    lineno = 0
    try:
        with open_text(p) as fh:
            lines = (line for line in fh if line.strip() and not line.lstrip().startswith("#"))
            reader = csv.DictReader(lines)
            header = reader.fieldnames or []
            missing = [c for c in _REQUIRED if c not in header]
            if missing:
                raise TraceError(src, "line 1", f"not a kernel measurement table: missing column(s) "
                                                f"{', '.join(missing)}")
            for row in reader:
                lineno = reader.line_num
                if None in row or any(row.get(c) is None for c in header):
                    raise TraceError(src, f"line {lineno}", f"expected {len(header)} fields (truncated or extra?)")
                out.append(_measurement(src, lineno, row))
    except GZIP_ERRORS as exc:
        raise TraceError(src, f"line {lineno + 1}", f"corrupt or truncated gzip stream ({exc})") from None
    except UnicodeDecodeError:
        raise TraceError(src, f"line {lineno + 1}", "not UTF-8 text") from None
    except csv.Error as exc:
        raise TraceError(src, f"line {lineno + 1}", f"malformed CSV ({exc})") from None
    if not out:
        raise TraceError(src, "line 1", "measurement table has no rows")
    total = sum(m.grid for m in out)
    if total > MAX_TOTAL_GRID:
        raise TraceError(src, "grid", f"the rows' grids sum to {total:,} programs, over the {MAX_TOTAL_GRID:,} one "
                                      "validation simulates (~5 us each): split the file")
    return out


def _measurement(src: str, lineno: int, row: dict) -> Measurement:
    where = f"line {lineno}"

    def num(key: str, positive: bool = False, integer: bool = False, default: float | None = None,
            max_value: float = 1e21) -> float:
        text = (row.get(key) or "").strip()
        if not text and default is not None:
            return default
        try:
            v = float(text)
        except ValueError:
            raise TraceError(src, where, f"column {key!r}: {short_repr(text)} is not a number") from None
        if not math.isfinite(v) or v < 0 or (positive and v <= 0) or (integer and not v.is_integer()) \
                or v > max_value:
            raise TraceError(src, where, f"column {key!r}: {short_repr(text)} out of range")
        return v

    items = parse_shape(row["shape"], src, f"{where} shape")
    for key, value in items:  # the kernels' shape keys are numbers, but for the pooling mode
        if isinstance(value, str) and key not in TEXT_SHAPE_KEYS:
            raise TraceError(src, f"{where} shape", f"{key}={short_repr(value)} is not a number")
    shape = format_shape(items)
    for key in ("kernel", "variant", "dtype"):
        if not (row.get(key) or "").strip():
            raise TraceError(src, where, f"column {key!r} is empty")
    if row["variant"].strip() not in VARIANTS:
        raise TraceError(src, where, f"column 'variant': unknown {short_repr(row['variant'].strip())}; expected one "
                         f"of {', '.join(VARIANTS)}")
    if row["dtype"].strip() not in TOPOLOGY_DTYPES:
        raise TraceError(src, where, f"column 'dtype': unknown {short_repr(row['dtype'].strip())}; expected one of "
                         f"{', '.join(TOPOLOGY_DTYPES)}")
    traffic = num(TRAFFIC_COLUMN, default=-1.0) if TRAFFIC_COLUMN in row else -1.0
    return Measurement(row["kernel"].strip(), row["variant"].strip(), (row.get("backend") or "").strip(),
                       int(num("world_size", positive=True, integer=True, default=1, max_value=2**24)), row["dtype"].strip(), shape,
                       int(num("grid", positive=True, integer=True, max_value=MAX_GRID)),
                       int(num("num_warps", integer=True, default=0, max_value=1024)),
                       num("median_s", positive=True), num("flops"), num("bytes"), lineno,
                       traffic if traffic >= 0 else None)


def kernel_work(kernel: str, variant: str, dtype: str, shape: str, grid: int, flops: float,
                nbytes: float, traffic_bytes: float | None = None) -> KernelWork:
    """The :class:`KernelWork` of a measured kernel (totals split evenly over the ``grid`` programs).

    ``traffic_bytes``: the requested bytes of the launch (traces' definition), when known; it becomes
    ``traffic_bytes_per_wg`` (what the calibrated model uses), ``nbytes`` stays the unique footprint."""
    return KernelWork(name=kernel, num_workgroups=int(grid), flops_per_wg=float(flops) / grid,
                      bytes_per_wg=float(nbytes) / grid, dtype=dtype, variant=variant,
                      shape=parse_shape(shape, "<point>", "shape"),
                      traffic_bytes_per_wg=None if traffic_bytes is None else float(traffic_bytes) / grid)


def simulated_kernel_time_s(work: KernelWork, cost_model: CostModel) -> float:
    """Launch latency + makespan of the grid from the engine's compute model."""
    from ..engine.compute import simulate_kernel

    return float(simulate_kernel(work, cost_model).time_s)


def _collective_model(profile: CalibrationProfile, level: str, collective: str) -> tuple[float, float] | None:
    c = (profile.data.get("fabric") or {}).get(level, {}).get("collectives", {}).get(collective)
    if not c:
        return None
    beta = c.get("beta_bytes_per_s")
    return float(c["alpha_s"]), float(beta) if beta else math.inf


def validation_table(topology_path: str | Path, measurements: str | Path | None = None) -> pd.DataFrame:
    """One row per calibration point (``set = calibration``) and held-out measurement (``set = held_out``)."""
    spec = load_topology(topology_path)
    if not spec.calibration:
        raise SpecError(str(topology_path), "calibration", "the topology names no calibration profile")
    profile = load_profile(spec.calibration)
    spec = apply_to_topology(spec, profile)
    cost_model = cost_model_for(spec, extrapolate=True)  # validate the fits themselves, in range or not
    rows = []
    for p in profile.points:
        base = {c: None for c in TABLE_COLUMNS}
        base.update({k: v for k, v in p.items() if k in TABLE_COLUMNS})
        base["set"] = "calibration"
        base["quantity"] = p.get("quantity", "time")
        if p["kind"] == "kernel":
            work = kernel_work(p["kernel"], p["variant"], p["dtype"], p.get("shape", ""), int(p["grid"]),
                               float(p["flops"]), float(p["bytes"]))
            sim = simulated_kernel_time_s(work, cost_model)
            base["bytes_per_wg"], base["flops_per_wg"] = work.bytes_per_wg, work.flops_per_wg
            base["requested_bytes_per_wg"] = work.requested_bytes_per_wg
            if p.get("quantity") == "makespan":  # traced launches: compare the grid's makespan
                sim -= cost_model.launch_latency_s(work)
        else:
            model = _collective_model(profile, p["level"], p["collective"])
            if model is None:
                continue
            sim = alpha_beta_time_s(p["collective"], int(p["ranks"]), model[0], model[1], float(p["size_bytes"]))
        base["simulated_s"] = sim
        rows.append(base)
    if measurements is not None:
        fitted = {(k.kernel, k.variant, k.dtype) for k in profile.kernels}
        held = read_measurements(measurements)
        for m in held:  # every row checked before any is simulated
            if (m.kernel, m.variant, m.dtype) not in fitted:
                raise TraceError(str(measurements), f"line {m.line}", f"no fit for kernel {short_repr(m.kernel)} "
                                 f"variant {m.variant} dtype {m.dtype} in {profile_source(spec)} (it would be "
                                 "simulated with the roofline); known: "
                                 f"{', '.join(sorted('/'.join(k) for k in fitted)) or 'none'}")
            if m.dtype not in spec.device.peak_flops:
                raise TraceError(str(measurements), f"line {m.line}", f"dtype {m.dtype} has no peak FLOP/s in "
                                 f"{topology_path} (device.peak_tflops)")
        for m in held:
            work = kernel_work(m.kernel, m.variant, m.dtype, m.shape, m.grid, m.flops, m.bytes, m.traffic_bytes)
            row = {c: None for c in TABLE_COLUMNS}
            row.update(set="held_out", kind="kernel", quantity="time", kernel=m.kernel, variant=m.variant,
                       backend=m.backend, world_size=m.world_size, dtype=m.dtype, shape=m.shape, grid=m.grid, num_warps=m.num_warps,
                       bytes_per_wg=work.bytes_per_wg, requested_bytes_per_wg=work.requested_bytes_per_wg,
                       flops_per_wg=work.flops_per_wg, measured_s=m.median_s, simulated_s=simulated_kernel_time_s(work, cost_model))
            rows.append(row)
    df = pd.DataFrame(rows, columns=list(TABLE_COLUMNS))
    _mark_calibration_range(df)
    df["measured_s"] = df["measured_s"].astype(float)
    df["simulated_s"] = df["simulated_s"].astype(float)
    df["pct_error"] = 100.0 * (df["simulated_s"] - df["measured_s"]) / df["measured_s"]
    return df


def profile_source(spec) -> str:
    return str(spec.calibration)


#: Relative tolerance of the calibration-range check (per-program counts of shared inputs differ by a few %).
RANGE_TOLERANCE = 0.10


def _mark_calibration_range(df: pd.DataFrame) -> None:
    """``in_calibration_range``: whether a kernel point's requested bytes and FLOP per workgroup (what the calibrated
    model uses) lie within those of the traced points of its (kernel, variant, dtype) -- outside, the fit
    extrapolates (e.g. bytes counted another way)."""
    kern = df["kind"] == "kernel"
    df["in_calibration_range"] = None
    if not kern.any():
        return
    cal = df[kern & (df["set"] == "calibration")]
    ranges = cal.groupby(["kernel", "variant", "dtype"])[["requested_bytes_per_wg", "flops_per_wg"]].agg(["min", "max"])
    for i in df.index[kern]:
        key = (df.at[i, "kernel"], df.at[i, "variant"], df.at[i, "dtype"])
        if key not in ranges.index:
            df.at[i, "in_calibration_range"] = False
            continue
        ok = True
        for col in ("requested_bytes_per_wg", "flops_per_wg"):
            lo, hi = ranges.loc[key, (col, "min")], ranges.loc[key, (col, "max")]
            v = float(df.at[i, col])
            ok &= lo * (1 - RANGE_TOLERANCE) <= v <= hi * (1 + RANGE_TOLERANCE)
        df.at[i, "in_calibration_range"] = bool(ok)


def summarize(df: pd.DataFrame) -> dict:
    """Median and max absolute % error: over held-out points when there are any, else over calibration points."""
    def stats(sub: pd.DataFrame) -> dict:
        err = sub["pct_error"].abs().to_numpy()
        if err.size == 0:
            return {"median_abs_pct_error": None, "max_abs_pct_error": None, "points": 0}
        return {"median_abs_pct_error": float(np.median(err)), "max_abs_pct_error": float(np.max(err)),
                "points": int(err.size)}

    held = df[df["set"] == "held_out"]
    cal = df[df["set"] == "calibration"]
    basis = "held_out" if len(held) else "calibration"
    out = {"basis": basis, **stats(held if len(held) else cal)}
    out["held_out"] = stats(held)
    out["held_out_in_calibration_range"] = stats(held[held["in_calibration_range"] == True])  # noqa: E712
    out["calibration"] = stats(cal)
    out["calibration_kernels"] = stats(cal[cal["kind"] == "kernel"])
    out["calibration_collectives"] = stats(cal[cal["kind"] == "collective"])
    if len(held):
        per = {}
        for (kernel, variant), g in held.groupby(["kernel", "variant"], sort=True):
            per[f"{kernel}/{variant}"] = stats(g)
        out["held_out_by_kernel"] = per
    return out


def _atomic_write(path: Path, write) -> None:
    from ..results.io import atomic_write

    atomic_write(path, write)


def residual_plot(df: pd.DataFrame, path: Path) -> None:
    """Scatter of % error against measured time, calibration and held-out points (matplotlib Agg)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    styles = {("calibration", "kernel"): ("o", "tab:blue"), ("calibration", "collective"): ("s", "tab:green"),
              ("held_out", "kernel"): ("^", "tab:red")}
    for (set_, kind), g in df.groupby(["set", "kind"], sort=True):
        marker, color = styles.get((set_, kind), ("x", "gray"))
        ax.scatter(g["measured_s"] * 1e6, g["pct_error"], marker=marker, color=color, s=18,
                   label=f"{set_} {kind} ({len(g)})", alpha=0.8)
    ax.axhline(0.0, color="black", lw=0.8)
    for y in (-15, -5, 5, 15):
        ax.axhline(y, color="gray", lw=0.5, ls=":")
    ax.set_xscale("log")
    ax.set_xlabel("measured time (us)")
    ax.set_ylabel("simulated vs measured (%)")
    ax.set_title("simfuse validate: residuals")
    ax.legend(fontsize=8)
    fig.tight_layout()
    _atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=120))


def run_validation(topology_path: str | Path, measurements: str | Path | None = None,
                   out_dir: str | Path | None = None) -> tuple[pd.DataFrame, dict]:
    """Compute the table and summary; with ``out_dir`` write ``validation.csv``, ``residuals.png`` and
    ``summary.json`` there (each through a temporary file)."""
    df = validation_table(topology_path, measurements)
    summary = summarize(df)
    if out_dir is not None:
        d = Path(out_dir)
        d.mkdir(parents=True, exist_ok=True)
        _atomic_write(d / "validation.csv", lambda tmp: df.to_csv(tmp, index=False, float_format="%.6g"))
        residual_plot(df, d / "residuals.png")
        _atomic_write(d / "summary.json",
                      lambda tmp: Path(tmp).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8"))
    return df, summary


#: Issue 12's target for held-out (leave-region-out) predictions of every kernel family.
CAMPAIGN_TARGET = {"median_abs": 0.04, "max_abs": 0.12}


def model_form(w) -> str:
    """A wave model's form in words: its summed terms, then the soft maximum of the others (``term:sigma``)."""
    add = [f"{t}:{k}" for t, (k, c) in w.terms.items() if t not in w.max_terms and c > 0]
    mx = [f"{t}:{k}" for t, (k, c) in w.terms.items() if t in w.max_terms and c > 0]
    return " + ".join(add + ([f"softmax{w.max_order:g}({', '.join(mx)})"] if mx else [])) or "launch only"


def campaign_validation(paths, out_dir: str | Path | None = None, heldout=None, families=None, fits=None) -> dict:
    """Refit the wave models on the campaign file(s) and report their nested leave-region-out errors per family
    (kernel/variant/dtype) and per region; with ``out_dir`` write ``campaign_cv.json`` and ``campaign_cv.csv``.

    ``paths``: any number of campaign files (the same grid repeated, or new shapes measured later): their rows
    are pooled, repeats of a shape merged by the median (:func:`simfuse.calibrate.wavefit.merge_repeats`).
    ``heldout``: a campaign file never fitted on: every row of it is predicted by the models fitted on ``paths``
    (:func:`heldout_predictions`); the summary gets a ``heldout`` section and ``out_dir`` also
    ``heldout_validation.csv`` and ``heldout_summary.json``.  ``families``: only these ``kernel/variant/dtype``
    (None: all).  ``fits``: the wave models :func:`simfuse.calibrate.wavefit.fit_campaign` returned for these
    rows, to report them again (e.g. against a second held-out campaign) without refitting; None: fit them."""
    import math

    from .campaign import read_campaign
    from .wavefit import fit_campaign

    rows: list[dict] = []
    for p in paths:
        rows.extend(read_campaign(p))
    held_rows = read_campaign(heldout) if heldout is not None else None  # checked before the (long) fit
    if families is not None:
        keep = set(families)
        rows = [r for r in rows if f"{r.get('kernel')}/{r.get('variant')}/{r.get('dtype')}" in keep]
    if fits is None:
        fits = fit_campaign(rows)
    elif families is not None:
        fits = [w for w in fits if f"{w.kernel}/{w.variant}/{w.dtype}" in keep]
    fams = []
    for w in fits:
        cv = w.cv
        q = w.residual_log_quantiles
        fams.append({"family": f"{w.kernel}/{w.variant}/{w.dtype}", "points": cv["points"],
                     "median_abs": cv["median_abs"], "max_abs": cv["max_abs"],
                     "fit_median_abs": cv["fit_median_abs"], "fit_max_abs": cv["fit_max_abs"],
                     "meets_target": cv["median_abs"] <= CAMPAIGN_TARGET["median_abs"]
                     and cv["max_abs"] <= CAMPAIGN_TARGET["max_abs"],
                     "p10": math.exp(q.get("p10", 0.0)), "p50": math.exp(q.get("p50", 0.0)),
                     "p90": math.exp(q.get("p90", 0.0)), "base": cv.get("base", ""),
                     "terms": {t: k for t, (k, _) in w.terms.items()}, "model": model_form(w),
                     "regions": cv["regions"]})
    summary = {"target": CAMPAIGN_TARGET, "families": fams, "rows": len(rows)}
    table = None
    if heldout is not None:
        table = heldout_predictions(fits, held_rows)
        summary["heldout"] = heldout_summary(table, str(heldout))
    if out_dir is not None:
        d = Path(out_dir)
        d.mkdir(parents=True, exist_ok=True)
        _atomic_write(d / "campaign_cv.json",
                      lambda tmp: Path(tmp).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8"))
        lines = ["family,region,points,median_abs,max_abs"]
        for f in fams:
            lines.append(f"{f['family']},all,{f['points']},{f['median_abs']},{f['max_abs']}")
            lines.extend(f"{f['family']},{name},{r['points']},{r['median_abs']},{r['max_abs']}"
                         for name, r in f["regions"].items())
        _atomic_write(d / "campaign_cv.csv", lambda tmp: Path(tmp).write_text("\n".join(lines) + "\n"))
        if table is not None:
            _atomic_write(d / "heldout_validation.csv",
                          lambda tmp: table.to_csv(tmp, index=False, float_format="%.6g"))
            _atomic_write(d / "heldout_summary.json", lambda tmp: Path(tmp).write_text(
                json.dumps(summary["heldout"], indent=2) + "\n", encoding="utf-8"))
    return summary


HELDOUT_COLUMNS = ("family", "kernel", "variant", "dtype", "dim", "pooling", "bags", "table_rows", "bags_per_wg",
                   "m", "n", "k", "split_k", "num_warps", "grid", "slots", "n_spills", "fitted_config", "rejected",
                   "repeats", "repeat_spread_pct", "measured_s", "predicted_s", "pct_error")


def repeat_spreads(rows: list[dict]) -> dict[tuple, tuple[int, float]]:
    """Shape key (``wavefit.SHAPE_KEY``) -> (measurements, spread in %: slowest / fastest - 1) of the rows of a
    campaign that measured some shapes more than once (``--repeats``: fresh allocations); one measurement: 0."""
    from .campaign import SHAPE_KEY, with_table_rows

    by: dict[tuple, list[float]] = {}
    for r in with_table_rows(rows):
        by.setdefault(tuple(str(r.get(c, "")) for c in SHAPE_KEY), []).append(float(r["median_s"]))
    return {k: (len(t), 100.0 * (max(t) / min(t) - 1.0)) for k, t in by.items()}


def heldout_predictions(fits, rows: list[dict]) -> pd.DataFrame:
    """One row per held-out campaign shape (repeats merged): the measured time and the prediction of its family's
    wave model (a fused shape without a fused model: the compute one), with the shape's own occupancy (slots from
    its compiled kernel's registers, shared memory and warps, as the fit used).  ``rejected`` is True for a shape the
    cost model refuses to price (:meth:`simfuse.costs.calibrated.WaveFit.rejection`: an embedding tile with more
    accumulator registers per thread than any fitted configuration -- it would spill); ``fitted_config`` is False
    for those and for a configuration that spilled beyond what is fitted (``wavefit.MAX_FIT_SPILLS``).  Every shape
    is predicted all the same (the formula, for the record).  A shape whose family has no model is an error naming it."""
    from .campaign import SHAPE_KEY, campaign_points, merge_repeats, spills_too_much

    by = {(w.kernel, w.variant, w.dtype): w for w in fits}
    spreads = repeat_spreads(rows)
    merged = merge_repeats(rows)
    pts = campaign_points(merged, keep_spilling=True)
    out = []
    for r, p in zip(merged, pts, strict=True):
        w = by.get((p.kernel, p.variant, p.dtype)) or by.get((p.kernel, "compute", p.dtype))
        if w is None:
            raise SpecError("heldout campaign", f"{p.kernel}/{p.variant}/{p.dtype}",
                            f"no wave model fitted for this family; fitted: "
                            f"{', '.join(sorted('/'.join(k) for k in by)) or 'none'}")
        pred = w.launch_time_s(p.grid, p.feats, p.slots)
        n_rep, spread = spreads.get(tuple(str(r.get(c, "")) for c in SHAPE_KEY), (1, 0.0))
        out.append({"family": f"{p.kernel}/{p.variant}/{p.dtype}", "kernel": p.kernel, "variant": p.variant,
                    "dtype": p.dtype, **{c: float(r.get(c) or 0) for c in ("dim", "pooling", "bags", "table_rows",
                                                                        "bags_per_wg", "m", "n", "k", "split_k",
                                                                        "num_warps", "n_spills")},
                    "grid": p.grid, "slots": p.slots,
                    "fitted_config": not spills_too_much(r) and w.rejection(p.feats) is None,
                    "rejected": w.rejection(p.feats) is not None, "repeats": n_rep, "repeat_spread_pct": spread,
                    "measured_s": p.time_s, "predicted_s": pred, "pct_error": 100.0 * (pred / p.time_s - 1.0)})
    return pd.DataFrame(out, columns=list(HELDOUT_COLUMNS))


def heldout_summary(df: pd.DataFrame, source: str, worst: int = 10) -> dict:
    """Median / max absolute % error per family (all held-out shapes, and the fitted configurations only) and the
    ``worst`` points overall."""
    def stats(g: pd.DataFrame) -> dict:
        e = g["pct_error"].abs().to_numpy()
        out = {"points": int(e.size), "median_abs_pct": float(np.median(e)) if e.size else None,
               "max_abs_pct": float(np.max(e)) if e.size else None}
        rep = g[g["repeats"] > 1] if "repeats" in g else g.iloc[:0]
        if len(rep):  # measurement noise: the spread of the fresh-allocation repeats, and how far the error is beyond it
            sp = rep["repeat_spread_pct"].to_numpy()
            beyond = np.maximum(0.0, rep["pct_error"].abs().to_numpy() - sp / 2.0)
            out.update(repeat_spread_median_pct=float(np.median(sp)), repeat_spread_max_pct=float(np.max(sp)),
                       beyond_noise_median_abs_pct=float(np.median(beyond)),
                       beyond_noise_max_abs_pct=float(np.max(beyond)))
        return out

    fams = {}
    for fam, g in df.groupby("family", sort=True):
        fams[fam] = {**stats(g), "fitted_configs": stats(g[g["fitted_config"]])}
    kinds = {k: stats(g) for k, g in df.groupby("kernel", sort=True)}
    order = df["pct_error"].abs().sort_values(ascending=False).index[:worst]
    cols = [c for c in HELDOUT_COLUMNS if c not in ("kernel", "variant", "dtype")]
    return {"source": source, "target_pct": {"median_abs": 100 * CAMPAIGN_TARGET["median_abs"],
                                             "max_abs": 100 * CAMPAIGN_TARGET["max_abs"]},
            "all": stats(df), "by_kernel": kinds, "families": fams,
            "worst": [{c: (v.item() if hasattr(v, "item") else v) for c, v in df.loc[i, cols].items()}
                      for i in order]}


CORPUS_COLUMNS = ("run_id", "source_id", "gpu", "collective", "nodes", "gpus_per_node", "forced_algorithm",
                  "simulated_algorithm", "size_bytes", "time_source", "measured_s", "simulated_s", "pct_error",
                  "assumptions")
#: sizes below this are not compared by ``validate --corpus`` (latency-bound points the fabric terms do not set)
CORPUS_MIN_BYTES = 2**20


def corpus_validation(corpus_path: str | Path, topology_path: str | Path, out_dir: str | Path | None = None,
                      runs: list[str] | None = None, min_bytes: float = CORPUS_MIN_BYTES) -> tuple[pd.DataFrame, dict]:
    """Simulate the runs of a network corpus (:mod:`simfuse.calibrate.corpus`) on ``topology_path`` with each
    run's hardware, against the measured times (sizes >= ``min_bytes``).  ``runs``: only these run ids (or
    prefixes).  Runs not simulated (anomalous, single node, GPU without a known NVLink rate) are listed in the
    summary with the reason.  With ``out_dir`` write ``corpus_validation.csv`` and ``corpus_summary.json``."""
    from ..collectives import run_collective
    from .corpus import load_corpus, simulation_problem, topology_for_run

    corpus = load_corpus(corpus_path)
    base = load_topology(topology_path)
    selected = [r for r in corpus.runs if runs is None or any(r.run_id.startswith(x) for x in runs)]
    if runs is not None and not selected:
        raise SpecError(str(corpus_path), "--runs", f"no run id starts with {', '.join(runs)}")
    rows, skipped = [], []
    for run in selected:
        why = simulation_problem(run, base)
        if why is not None:
            skipped.append({"run_id": run.run_id, "reason": why})
            continue
        topo, assumptions = topology_for_run(run, base)
        for r, ts in zip(run.rows, run.time_sources, strict=True):
            if r.size_bytes < min_bytes:
                continue
            res = run_collective(topo, run.nodes, run.collective, float(r.size_bytes), algorithm=run.algorithm,
                                 protocol=run.protocol if run.algorithm else None, gpus_per_node=run.gpus_per_node)
            rows.append({"run_id": run.run_id, "source_id": run.source_id, "gpu": run.gpu,
                         "collective": run.collective, "nodes": run.nodes, "gpus_per_node": run.gpus_per_node,
                         "forced_algorithm": run.nccl_algo, "simulated_algorithm": str(getattr(res, "algorithm", "")),
                         "size_bytes": r.size_bytes, "time_source": ts, "measured_s": r.time_s,
                         "simulated_s": float(res.time_s), "pct_error": 100.0 * (float(res.time_s) / r.time_s - 1.0),
                         "assumptions": "; ".join(assumptions)})
    if runs is not None and not rows:  # every named run skipped, or none with sizes >= min_bytes: nothing checked
        why = "; ".join(f"{s['run_id']}: {s['reason']}" for s in skipped[:3]) or \
            f"no sizes of at least {min_bytes / 2**20:g} MiB"
        raise SpecError(str(corpus_path), "--runs", f"none of the runs named is simulated ({why})")
    df = pd.DataFrame(rows, columns=list(CORPUS_COLUMNS))

    def stats(sub: pd.DataFrame) -> dict:
        e = sub["pct_error"].abs().to_numpy()
        return {"points": int(e.size), "median_abs_pct_error": float(np.median(e)) if e.size else None,
                "max_abs_pct_error": float(np.max(e)) if e.size else None}

    summary = {"topology": str(topology_path), "corpus": str(corpus.folder), "runs": len(selected) - len(skipped),
               "all": stats(df), "ge_64MiB": stats(df[df["size_bytes"] >= 64 * 2**20]),
               "by_collective_nodes": {f"{c}/{n}": stats(g) for (c, n), g in df.groupby(["collective", "nodes"])},
               "skipped": skipped}
    if out_dir is not None:
        d = Path(out_dir)
        d.mkdir(parents=True, exist_ok=True)
        _atomic_write(d / "corpus_validation.csv", lambda tmp: df.to_csv(tmp, index=False, float_format="%.6g"))
        _atomic_write(d / "corpus_summary.json",
                      lambda tmp: Path(tmp).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8"))
    return df, summary
