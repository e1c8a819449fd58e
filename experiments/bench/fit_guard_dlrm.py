"""Fit the cost guard's full-simulation DLRM constants (``simfuse.guard.DLRM_SECONDS_PER_EVENT`` and
``DLRM_EVENT_PAIR_EXPONENT``) to measured run times.

Reads the run rows of a ``bench_targets.py`` CSV (default ``experiments/results/bench_guard_dlrm.csv``) whose runs
simulate every rank (the guard's ``simulated_ranks`` equal to the GPUs, more than one) and picks the pair that
minimises the mean squared log ratio of the guard's estimate to each run's CPU time (the estimate prices a run's
simulations serially).  The estimate is linear in the per-event constant for a given exponent, so for every
exponent on a grid it is computed twice (constant 0 and 1) and the best constant found in closed form on the log
scale (a 1-D search).  Prints the fit and each point's ratio; changes no file::

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


def _estimates(rows: pd.DataFrame, per_event: float, exponent: float) -> np.ndarray:
    import simfuse.guard as guard
    from bench_targets import _estimate

    old = guard.DLRM_SECONDS_PER_EVENT, guard.DLRM_EVENT_PAIR_EXPONENT
    guard.DLRM_SECONDS_PER_EVENT, guard.DLRM_EVENT_PAIR_EXPONENT = per_event, exponent
    try:
        return np.array([_estimate(str(ROOT / "models" / f"{r.model}.yaml"),
                                   str(ROOT / "topologies" / f"{r.topology}.yaml"), int(r.nodes))[0].seconds
                         for r in rows.itertuples()])
    finally:
        guard.DLRM_SECONDS_PER_EVENT, guard.DLRM_EVENT_PAIR_EXPONENT = old


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--csv", default=str(ROOT / "experiments/results/bench_guard_dlrm.csv"))
    a = ap.parse_args(argv)
    df = pd.read_csv(a.csv)
    rows = df[(df["what"] == "run") & df["model"].str.startswith("dlrm") & (df["guard_simulated_ranks"] == df["gpus"])
              & (df["gpus"] > 1) & df["cpu_s"].notna()]
    if rows.empty:
        raise SystemExit(f"{a.csv}: no fully simulated DLRM run rows")
    cpu = rows["cpu_s"].to_numpy()
    best = None
    for e in np.round(np.arange(0.0, 0.61, 0.05), 2):
        rest = _estimates(rows, 0.0, e)
        slope = _estimates(rows, 1.0, e) - rest
        for c in np.geomspace(1e-7, 1e-4, 301):
            loss = float(np.mean(np.log((rest + c * slope) / cpu) ** 2))
            if best is None or loss < best[0]:
                best = (loss, float(c), float(e))
    loss, c, e = best
    ratio = _estimates(rows, c, e) / cpu
    print(f"DLRM_SECONDS_PER_EVENT = {c:.3g}, DLRM_EVENT_PAIR_EXPONENT = {e:.2f} "
          f"(rms log ratio {np.sqrt(loss):.3f}; {int(((ratio >= 0.5) & (ratio <= 2)).sum())} of {len(rows)} "
          f"points within 2x of their CPU time, ratios {ratio.min():.2f}-{ratio.max():.2f})")
    for r, q in zip(rows.itertuples(), ratio, strict=True):
        print(f"  {r.model} {r.nodes}: cpu {r.cpu_s:.1f} s, estimate/cpu {q:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
