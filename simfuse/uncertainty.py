"""Input uncertainty: sampling the declared input ranges and asking which inputs move the answer.

``--set uncertainty=inputs`` runs the point estimate's configuration (DLRM: each mode's sharding plan, as chosen
at the nominal inputs; fused knobs the point estimate tuned are tuned again on each draw, as a deployment tunes them
on its own hardware) on ``uncertainty_draws`` draws of every input range declared in the
model and topology files (``uncertain:`` blocks, :mod:`simfuse.spec.ranges`), jointly with the kernel cost
model's cross-validated residuals where the calibration profile has them:

* **Latin hypercube sampling** (:class:`scipy.stats.qmc.LatinHypercube`, scrambled, seeded from the run's seed):
  every input's range is cut into ``n`` equal-probability strata and each stratum is drawn exactly once, so 32-64
  draws cover ten inputs far more evenly than plain Monte Carlo (whose p10/p90 wander between seeds).  scipy's
  implementation is chosen over SALib's because it is the same well-kept library that gives the rank statistics
  below, it takes a ``numpy.random.Generator`` (no global seed), and SALib would add a dependency for samplers
  whose extra indices (Sobol first/total order) need 10-100x more simulations than this budget allows.
* **Sensitivity**: (1) a one-at-a-time **tornado**: each input at each end of its range (every other choice for a
  categorical one), all others at their nominal values, no residual draw -- the speedup's swing per input;
  (2) the **Spearman rank correlation** of each input with the speedup over the joint Latin hypercube draws,
  which sees interactions the one-at-a-time runs cannot.  Inputs are ranked by the tornado's swing, or by the
  rank correlation's size with ``sensitivity=rank`` (no one-at-a-time runs: the cheap setting for sweeps).

Every draw is generated in the parent process before any simulation runs, so results do not depend on the
number of worker processes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .spec.ranges import InputRange

OWNERS = ("model", "topology")


@dataclass(frozen=True)
class Input:
    """One uncertain input of a run: its file (``owner``: model or topology) and range."""

    owner: str
    range: InputRange

    @property
    def name(self) -> str:
        return f"{self.owner}:{self.range.path}"


def run_inputs(spec, system) -> list[Input]:
    """Every input range the run's model and topology files declare (model first, each in file order)."""
    out = [Input("model", r) for r in _ranges(getattr(spec, "inputs", None))]
    topo = system.nominal if getattr(system, "nominal", None) is not None else system.topology
    out += [Input("topology", r) for r in _ranges(getattr(topo, "inputs", None))]
    return out


def _ranges(space) -> tuple:
    return space.ranges if space is not None else ()


def latin_hypercube(n: int, d: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` x ``d`` points in [0, 1)^d, one per stratum of every axis (scrambled LHS, seeded by ``rng``)."""
    from scipy.stats import qmc

    if d == 0:
        return np.zeros((n, 0))
    return qmc.LatinHypercube(d=d, rng=rng).random(n)


def lhs_design(inputs: list[Input], n: int, rng: np.random.Generator) -> list[dict[str, object]]:
    """``n`` joint draws of ``inputs`` (name -> value), Latin hypercube over their quantiles."""
    u = latin_hypercube(n, len(inputs), rng)
    return [{inp.name: inp.range.value_at(u[i, j]) for j, inp in enumerate(inputs)} for i in range(n)]


def oat_design(inputs: list[Input]) -> list[tuple[str, object]]:
    """One-at-a-time runs: (input name, value) for each end of every range (every other choice)."""
    return [(inp.name, v) for inp in inputs for v in inp.range.extremes]


def apply_values(spec, system, values: dict[str, object]):
    """``(spec, system)`` with ``values`` (input name -> value) in place of the files' own values.  Topology
    inputs change the file's (nominal) topology, which is then resolved again with the same calibration
    profile; model inputs change only the fields they name (settings from the command line survive)."""
    model = {k.split(":", 1)[1]: v for k, v in values.items() if k.startswith("model:")}
    topo = {k.split(":", 1)[1]: v for k, v in values.items() if k.startswith("topology:")}
    if model:
        spec = spec.inputs.apply(spec, model)
    if topo:
        nominal = system.nominal if system.nominal is not None else system.topology
        system = system.with_nominal(nominal.inputs.apply(nominal, topo))
    return spec, system


def _rank(v: np.ndarray) -> np.ndarray:
    from scipy.stats import rankdata

    return rankdata(v)


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation of ``x`` and ``y`` (0 where either is constant)."""
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return 0.0
    rx, ry = _rank(np.asarray(x, float)), _rank(np.asarray(y, float))
    c = np.corrcoef(rx, ry)[0, 1]
    return float(c) if math.isfinite(c) else 0.0


def coded(inp: Input, values: list) -> np.ndarray:
    """An input's drawn values as numbers (a categorical input: the index of its choice)."""
    if inp.range.categorical:
        return np.array([inp.range.choices.index(v) for v in values], dtype=float)
    return np.array(values, dtype=float)


@dataclass
class InputAnalysis:
    """What ``uncertainty=inputs`` found for one run: the joint draws (``draws``: one dict per draw, input
    values and each mode's iteration time, s) and the one-at-a-time runs (``oat``: input, value, times)."""

    inputs: list[Input]
    draws: list[dict]
    oat: list[dict]
    nominal: dict[str, float]   # mode -> iteration time at the nominal inputs (the point estimate), s

    def metric(self, times: dict[str, float]) -> float:
        """The analysed quantity of one run: the speedup when both modes ran, else the one mode's time."""
        if "baseline" in times and "fused" in times:
            return times["baseline"] / times["fused"]
        return next(iter(times.values()))

    @property
    def metric_name(self) -> str:
        return "speedup" if {"baseline", "fused"} <= set(self.nominal) else "iteration_time_s"

    def sensitivity_rows(self) -> list[dict]:
        """One row per input, most influential first.  With one-at-a-time runs (``sensitivity=oat``) the swing is
        the metric from the input's least to its most favourable end, the others nominal (the nominal point within
        it).  Without them (``sensitivity=rank``) and with at least :data:`MIN_CONDITIONAL_DRAWS` draws, it is read
        off the joint draws: the gap between the mean metric of the draws in the input's lowest and highest
        quarter (a categorical input: between its choices' means), labelled ``conditional``; the other inputs
        vary within those draws, so it is noisier than a one-at-a-time swing.  With fewer draws only the rank
        correlation ranks the inputs (swing 0, ``rank``).  ``spearman``: the rank correlation of the input with the
        metric over the draws."""
        point = self.metric(self.nominal)
        ys = np.array([self.metric(d["times"]) for d in self.draws], dtype=float)
        conditional = not self.oat and len(ys) >= MIN_CONDITIONAL_DRAWS
        rows = []
        for inp in self.inputs:
            x = coded(inp, [d["values"][inp.name] for d in self.draws]) if self.draws else np.zeros(0)
            r = inp.range
            if self.oat:
                ends = [(o["value"], self.metric(o["times"])) for o in self.oat if o["input"] == inp.name]
                ends.append((r.nominal, point))  # a one-at-a-time swing spans the nominal point
            else:
                ends = _conditional_ends(inp, x, ys) if conditional else [(r.nominal, point)]
            lo, hi = min(ends, key=lambda e: e[1]), max(ends, key=lambda e: e[1])
            rows.append({
                "input": inp.name, "file": inp.owner, "path": r.path, "nominal": r.nominal,
                "range": r.describe(), "source": r.source, "metric": self.metric_name, "metric_nominal": point,
                "metric_min": lo[1], "metric_max": hi[1], "value_at_min": lo[0], "value_at_max": hi[0],
                "swing": hi[1] - lo[1],
                "spearman": spearman(x, ys) if len(ys) else 0.0,
                "method": "oat" if self.oat else ("conditional" if conditional else "rank"),
            })
        rows.sort(key=lambda row: (-row["swing"], -abs(row["spearman"]), row["input"]))
        for i, row in enumerate(rows, 1):
            row["rank"] = i
        return rows

    def draw_rows(self) -> list[dict]:
        out = []
        for i, d in enumerate(self.draws):
            row = {"draw": i, **{f"{k}": v for k, v in d["values"].items()}}
            for m, t in d["times"].items():
                row[f"{m}_iteration_time_s"] = t
            if self.metric_name == "speedup":
                row["speedup"] = self.metric(d["times"])
            out.append(row)
        return out


#: fewest joint draws from which ``sensitivity=rank`` reads conditional swings (four a quarter)
MIN_CONDITIONAL_DRAWS = 16


def _conditional_ends(inp: Input, x: np.ndarray, ys: np.ndarray) -> list[tuple[object, float]]:
    """``(value, mean metric)`` of the draws at each end of an input: a categorical input's choices (each with
    draws), or a continuous input's lowest and highest quarter of draws (value: the quarter's mean input)."""
    if inp.range.categorical:
        return [(c, float(ys[x == i].mean())) for i, c in enumerate(inp.range.choices) if (x == i).any()]
    order = np.argsort(x, kind="stable")
    q = max(1, len(x) // 4)
    out = []
    for part in (order[:q], order[-q:]):
        v = float(x[part].mean())
        out.append((float(f"{v:.4g}"), float(ys[part].mean())))
    return out


def quantiles(values) -> dict[str, float]:
    v = np.asarray(list(values), dtype=float)
    return {f"p{q}": float(np.quantile(v, q / 100)) for q in (10, 50, 90)}

