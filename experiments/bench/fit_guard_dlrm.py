"""Fit the cost guard's DLRM simulation constants to measured run times: full simulation
(``simfuse.guard.DLRM_SECONDS_PER_EVENT`` and ``DLRM_PUSH_EXPONENT``) and rank classes
(``DLRM_SECONDS_PER_CLASS``, ``DLRM_SECONDS_PER_CLASS_FLOW`` and ``DLRM_SECONDS_PER_RANK_TABLE``).

Reads the DLRM run rows of a ``bench_targets.py`` CSV (default ``experiments/results/bench_guard_fit.csv``) and
splits them by the guard's own count of simulated ranks (this checkout's): every rank (more than one), or rank
classes.  The estimate is of wall time (a run's candidates after the first shared by its workers), so the fits
minimise the mean squared log ratio of the estimate to each run's wall time.  The estimate is linear in each
constant, so for every push exponent on a grid it is computed twice (per-event constant 0 and 1) and the best
constant found by a 1-D search; the class constants by a grid search over all three.  Prints the fits and each
point's ratio; changes no file::

    python experiments/bench/fit_guard_dlrm.py [--csv CSV]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def _estimates(rows: pd.DataFrame, **constants) -> np.ndarray:
    """The guard's estimate of every row with its module constants set to ``constants`` (restored after)."""
    from bench_targets import _estimate

    import simfuse.guard as guard

    old = {k: getattr(guard, k) for k in constants}
    for k, v in constants.items():
        setattr(guard, k, v)
    try:
        return np.array([_estimate(str(ROOT / "models" / f"{r.model}.yaml"),
                                   str(ROOT / "topologies" / f"{r.topology}.yaml"), int(r.nodes))[0].seconds
                         for r in rows.itertuples()])
    finally:
        for k, v in old.items():
            setattr(guard, k, v)


def _report(name: str, rows: pd.DataFrame, ratio: np.ndarray) -> None:
    ok = int(((ratio >= 0.5) & (ratio <= 2)).sum())
    print(f"  {name}: {ok} of {len(rows)} points within 2x of their wall time, ratios {ratio.min():.2f}-{ratio.max():.2f}")
    for r, q in zip(rows.itertuples(), ratio, strict=True):
        print(f"    {r.model} {r.nodes}: wall {r.wall_s:.1f} s, estimate/wall {q:.2f}")


def fit_full(rows: pd.DataFrame) -> tuple[float, float]:
    wall = rows["wall_s"].to_numpy()
    best = None
    for e in np.round(np.arange(0.0, 1.01, 0.1), 2):
        rest = _estimates(rows, DLRM_SECONDS_PER_EVENT=0.0, DLRM_PUSH_EXPONENT=e)
        slope = _estimates(rows, DLRM_SECONDS_PER_EVENT=1.0, DLRM_PUSH_EXPONENT=e) - rest
        for c in np.geomspace(1e-7, 1e-4, 301):
            loss = float(np.mean(np.log((rest + c * slope) / wall) ** 2))
            if best is None or loss < best[0]:
                best = (loss, float(c), float(e))
    loss, c, e = best
    print(f"DLRM_SECONDS_PER_EVENT = {c:.3g}, DLRM_PUSH_EXPONENT = {e:.2f} (rms log ratio {np.sqrt(loss):.3f})")
    _report("full simulation", rows, _estimates(rows, DLRM_SECONDS_PER_EVENT=c, DLRM_PUSH_EXPONENT=e) / wall)
    return c, e


def fit_classes(rows: pd.DataFrame) -> tuple[float, float, float]:
    wall = rows["wall_s"].to_numpy()
    base = {"DLRM_SECONDS_PER_CLASS": 0.0, "DLRM_SECONDS_PER_CLASS_FLOW": 0.0, "DLRM_SECONDS_PER_RANK_TABLE": 0.0}
    rest = _estimates(rows, **base)
    xa, xb, xc = (_estimates(rows, **{**base, k: 1.0}) - rest for k in base)
    grid_a = np.concatenate([[0.0], np.geomspace(1e-4, 1.0, 161)])
    grid_b = np.concatenate([[0.0], np.geomspace(1e-8, 1e-3, 201)])
    grid_c = np.concatenate([[0.0], np.geomspace(1e-8, 1e-5, 61)])
    best = None
    for c in grid_c:
        est = (rest + c * xc)[None, None, :] + grid_a[:, None, None] * xa[None, None, :] \
            + grid_b[None, :, None] * xb[None, None, :]
        loss = np.mean(np.log(np.maximum(est, 1e-12) / wall) ** 2, axis=2)
        i, j = np.unravel_index(np.argmin(loss), loss.shape)
        if best is None or loss[i, j] < best[0]:
            best = (float(loss[i, j]), float(grid_a[i]), float(grid_b[j]), float(c))
    loss, a, b, c = best
    print(f"DLRM_SECONDS_PER_CLASS = {a:.3g}, DLRM_SECONDS_PER_CLASS_FLOW = {b:.3g}, "
          f"DLRM_SECONDS_PER_RANK_TABLE = {c:.3g} (rms log ratio {np.sqrt(loss):.3f})")
    _report("rank classes", rows, _estimates(rows, DLRM_SECONDS_PER_CLASS=a, DLRM_SECONDS_PER_CLASS_FLOW=b,
                                             DLRM_SECONDS_PER_RANK_TABLE=c) / wall)
    return a, b, c


def _error(message: str) -> int:
    print(f"fit_guard_dlrm.py: error: {' '.join(message.splitlines())}", file=sys.stderr)
    return 2


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--csv", default=str(ROOT / "experiments/results/bench_guard_fit.csv"))
    a = ap.parse_args(argv)
    try:
        df = pd.read_csv(a.csv)
        missing = sorted({"what", "model", "cpu_s", "gpus", "nodes", "topology"} - set(df.columns))
    except (OSError, ValueError) as exc:
        return _error(f"--csv: cannot read {a.csv!r} ({getattr(exc, 'strerror', None) or exc})")
    if missing:
        return _error(f"--csv: {a.csv!r} lacks column(s) {', '.join(missing)} (a bench_targets.py CSV)")
    dlrm = df[(df["what"] == "run") & df["model"].str.startswith("dlrm") & df["cpu_s"].notna() & (df["gpus"] > 1)]
    if dlrm.empty:
        raise SystemExit(f"{a.csv}: no DLRM run rows")
    # which rows run every rank: the guard's own count (this checkout's), as it prices them
    counts = np.array([_count(r) for r in dlrm.itertuples()])
    full, classes = dlrm[counts == dlrm["gpus"].to_numpy()], dlrm[counts < dlrm["gpus"].to_numpy()]
    if len(full):
        fit_full(full)
    if len(classes):
        fit_classes(classes)
    return 0


def _count(r) -> int:
    from bench_targets import _estimate

    return _estimate(str(ROOT / "models" / f"{r.model}.yaml"), str(ROOT / "topologies" / f"{r.topology}.yaml"),
                     int(r.nodes))[0].simulated_ranks


if __name__ == "__main__":
    raise SystemExit(main())
