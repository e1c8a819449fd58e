"""Small, deterministic least-squares fits used by calibration.

* :func:`nnls_relative` -- non-negative least squares on *relative* residuals (each row divided by its
  measurement), exact for the few (<= 4) unknowns used here: every subset of active variables is solved with
  ``numpy.linalg.lstsq`` and the best non-negative solution wins.  No scipy needed.
* :func:`fit_alpha_beta` -- alpha-beta collective models with nccl-tests' bus-bandwidth definitions.
* :class:`FitQuality` -- what every fitted parameter carries into the profile.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

#: Collectives with an alpha-beta formula: name -> (alpha multiplier(n), byte multiplier(n)).
#: ``time_s = a(n) * alpha_s + b(n) * size_bytes / beta_bytes_per_s``; ``b(n)`` is nccl-tests' busbw factor, so
#: ``beta`` is the bus bandwidth.  all_reduce is the ring algorithm (2(n-1) steps).
COLLECTIVE_FACTORS = {
    "all_reduce": (lambda n: 2.0 * (n - 1), lambda n: 2.0 * (n - 1) / n),
    "alltoall": (lambda n: 1.0, lambda n: (n - 1) / n),
    "all_gather": (lambda n: float(n - 1), lambda n: (n - 1) / n),
    "reduce_scatter": (lambda n: float(n - 1), lambda n: (n - 1) / n),
}

#: Canonical collective name (simfuse.names) -> key of the profile format's ``fabric.<level>.collectives``.
PROFILE_COLLECTIVE = {"all_to_all": "alltoall"}


def profile_collective(name: str) -> str:
    """The profile format's key for a canonical collective name (the format still spells all-to-all
    ``alltoall``; readers accept both)."""
    return PROFILE_COLLECTIVE.get(name, name)


@dataclass(frozen=True)
class FitQuality:
    """Fit quality: root-mean-square and maximum of ``(model - measured) / measured`` over ``points``."""

    rel_residual_rms: float
    rel_residual_max: float
    points: int

    def to_dict(self) -> dict:
        return {"rel_residual_rms": _clean(self.rel_residual_rms), "rel_residual_max": _clean(self.rel_residual_max),
                "points": int(self.points)}


def _clean(x: float) -> float:
    return float(f"{float(x):.6g}")


def quality(pred: np.ndarray, meas: np.ndarray, weights: np.ndarray | None = None) -> FitQuality:
    """Relative residuals of ``pred`` against ``meas`` (weighted rms if ``weights``)."""
    pred = np.asarray(pred, dtype=float)
    meas = np.asarray(meas, dtype=float)
    if meas.size == 0:
        return FitQuality(float("nan"), float("nan"), 0)
    rel = (pred - meas) / meas
    w = np.ones_like(rel) if weights is None else np.asarray(weights, dtype=float)
    rms = math.sqrt(float(np.sum(w * rel**2) / np.sum(w)))
    return FitQuality(rms, float(np.max(np.abs(rel))), int(meas.size))


def nnls_relative(x: np.ndarray, y: np.ndarray, weights: np.ndarray | None = None,
                  drop_preference: tuple[int, ...] = ()) -> np.ndarray:
    """Minimise ``sum w_i ((x_i . c - y_i) / y_i)^2`` subject to ``c >= 0``.

    ``x``: (points, k) with k <= 6; ``y`` > 0.  Columns that are all zero get coefficient 0.  Exhaustive over the
    active sets (full-rank ones), so the result is the exact optimum and deterministic.  When several active sets
    fit equally well (collinear columns: e.g. every program does the same work, so a constant overhead and a work
    term are indistinguishable), the one without the columns named in ``drop_preference`` (in that order) wins,
    then the smallest.
    """
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    n, k = x.shape
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=float)
    scale = np.sqrt(w) / y
    a = x * scale[:, None]
    b = y * scale
    # Normalise columns for conditioning (bytes ~1e6, flops ~1e9, constant 1).
    norms = np.linalg.norm(a, axis=0)
    usable = [j for j in range(k) if norms[j] > 0]
    candidates: list[tuple[float, tuple[int, ...], np.ndarray]] = [(float(np.sum(b**2)), (), np.zeros(0))]
    for r in range(1, len(usable) + 1):
        for subset in itertools.combinations(usable, r):
            cols = list(subset)
            an = a[:, cols] / norms[cols]
            sol, _, rank, _ = np.linalg.lstsq(an, b, rcond=None)
            if rank < len(cols) or np.any(sol < 0):
                continue
            candidates.append((float(np.sum((an @ sol - b) ** 2)), subset, sol / norms[cols]))
    best_cost = min(c[0] for c in candidates)
    tied = [c for c in candidates if c[0] <= best_cost * (1 + 1e-9) + 1e-18]
    _, cols, sol = min(tied, key=lambda c: (tuple(j in c[1] for j in drop_preference), len(c[1]), c[1]))
    best = np.zeros(k)
    best[list(cols)] = sol
    return best


@dataclass(frozen=True)
class AlphaBetaFit:
    """``time_s = a(n) * alpha_s + b(n) * size_bytes / beta_bytes_per_s`` (see :data:`COLLECTIVE_FACTORS`)."""

    collective: str
    ranks: int
    alpha_s: float
    beta_bytes_per_s: float  # bus bandwidth; inf if the byte term vanished
    quality: FitQuality

    def time_s(self, size_bytes: float) -> float:
        return alpha_beta_time_s(self.collective, self.ranks, self.alpha_s, self.beta_bytes_per_s, size_bytes)


def alpha_beta_time_s(collective: str, ranks: int, alpha_s: float, beta_bytes_per_s: float,
                      size_bytes: float) -> float:
    """Model time of one collective of ``size_bytes`` (nccl-tests' size: the per-rank buffer) over ``ranks``."""
    fa, fb = COLLECTIVE_FACTORS[collective]
    byte_term = 0.0 if not math.isfinite(beta_bytes_per_s) else fb(ranks) * size_bytes / beta_bytes_per_s
    return fa(ranks) * alpha_s + byte_term


def fit_alpha_beta(collective: str, ranks: int, size_bytes: np.ndarray, time_s: np.ndarray) -> AlphaBetaFit:
    """Fit alpha and beta (non-negative, relative residuals) to measured ``time_s`` at ``size_bytes``."""
    if collective not in COLLECTIVE_FACTORS:
        raise ValueError(f"no alpha-beta model for collective {collective!r}")
    if ranks < 2:
        raise ValueError("alpha-beta fit needs at least 2 ranks")
    fa, fb = COLLECTIVE_FACTORS[collective]
    size_bytes = np.asarray(size_bytes, dtype=float)
    time_s = np.asarray(time_s, dtype=float)
    x = np.column_stack([np.full(size_bytes.shape, fa(ranks)), fb(ranks) * size_bytes])
    c = nnls_relative(x, time_s)
    beta = 1.0 / c[1] if c[1] > 0 else float("inf")
    q = quality(x @ c, time_s)
    return AlphaBetaFit(collective, int(ranks), float(c[0]), float(beta), q)
