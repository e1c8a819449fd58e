"""Wave models of the kernels, fitted to a designed timing campaign with leave-region-out cross-validation.

A launch of ``G`` programs with ``S`` resident at once (slots, from the compiled kernel's registers, shared memory
and warps) runs ``floor(G / S)`` full waves and one partial wave of ``G mod S`` programs; its time is

    T = launch_s + sum over waves w of  sum_j  c_j * phi_j * sigma_j(n_w)

``phi_j`` are per-program work terms that follow how the kernels spend time (:data:`TERMS`): embedding -- per
program, per bag (offsets, store, flag), per gathered row (a dependent index load and a row load: latency),
per byte (requested, or at the HBM access granularity: ``per_dram_byte``, CV picks); GEMV -- per program, per
partial slot its tile's last program sums (split-k x ranks), per K element of the program's slice (the
k-steps), per byte; GEMM -- per program (tile prologue/epilogue), per K element (k-steps), per FLOP, per byte.  ``sigma_j(n)`` says how term ``j``
speeds up when only ``n < S`` programs are resident (the last, partial wave, or a grid smaller than a wave):

* ``fixed`` -- not at all (latency: a program's dependent loads take as long however many run);
* ``cu`` -- with the programs sharing one SM: ``ceil(n / CUs) / ceil(S / CUs)``;
* ``dev2`` ... ``dev16`` -- with the programs sharing HBM, one SM pulling at most h = 2 ... 16 times its fair
  share: ``max(n / S, cu / h)``.

A ``fused`` variant may instead be priced as ``a + s x`` its ``compute`` model (``base: compute``), when that
cross-validates better: the fused kernels do the same loads plus stores to peers and flags, and their own grids
are sparser.

The model is linear in (launch_s, c_j), so each candidate term set (which terms, which ``sigma``) is fitted by
non-negative least squares on relative residuals.  Terms are chosen by cross-validation, not by fit: the grid
of every family is cut into **regions** (the extreme value of each axis: the smallest and largest embedding
dim, pooling, bag count; GEMV n and k; GEMM m, n, k), each 4x beyond the next grid value.  Leave-region-out:
for each region, the candidates are scored by leave-region-out over the *other* regions (inner loop), the best
one is fitted on everything outside the region and predicts the region (outer loop); a training set with no axis of
3 or more values left (the fp32 GEMM grid) scores its candidates by leave-one-shape-out instead.  The outer residuals are
what :func:`cross_validate` reports -- predictions 4x outside the shapes the fit saw, along one axis -- and
what the prediction intervals are drawn from.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from ..costs.calibrated import (
    CUS,
    LATENCY_FEATURES,
    WaveFit,
    _g,
    layout_factor,
    layout_key,
    layout_key_of,
    load,
    term_feature,
    waves,
)
from ..profile.fit import nnls_relative
from .campaign import (  # noqa: F401  (re-exported: wavefit's readers)
    CAMPAIGN_COLUMNS,
    CAMPAIGN_DTYPES,
    CAMPAIGN_KERNELS,
    MAX_FIT_SPILLS,
    SHAPE_KEY,
    Point,
    acc_limits,
    campaign_points,
    is_campaign,
    merge_repeats,
    occupancy_slots,
    read_campaign,
    spills_too_much,
    table_rows,
    with_table_rows,
)

_DEV = ("dev2", "dev4", "dev8", "dev16", "cu")
#: Per family: slot -> the options cross-validation may choose from: None = leave the slot out, a sigma kind = the
#: slot's own term with that occupancy scaling, (term, kind) = another term in that slot (alternatives that are
#: never used together, e.g. requested bytes or bytes at the HBM access granularity).
TERMS: dict[str, dict[str, tuple]] = {
    "embedding_all_to_all": {"per_program": ("fixed",), "per_bag": (None, "cu"),
                             "per_row": (None, "fixed", "cu"),
                             "per_byte": (None, *_DEV, *(("per_dram_byte", k) for k in _DEV))},
    "gemv_all_reduce": {"per_program": ("fixed",), "per_slot": (None, "fixed"), "per_k": (None, "fixed", "cu"),
                        "per_byte": (None, "dev2", "dev4", "dev8", "dev16", "cu")},
    "gemm_all_to_all": {"per_program": ("fixed",), "per_k": (None, "fixed", "cu"), "per_flop": (None, "cu"),
                        "per_byte": (None, "dev2", "dev4", "dev8", "cu")},
}

#: Soft-max model forms per family (the linear ones of :data:`TERMS` stay candidates too; cross-validation chooses).
#: A program's time is its ``add`` terms summed plus the soft maximum of order ``k`` (``orders``) of its ``max``
#: terms: it runs at the slowest of its limits.  Per family: (add slots, max slots, orders), slots as in
#: :data:`TERMS`, keyed ``feature@sigma`` in the max group.  Embedding gather (a row load depends on its index
#: load, each program pools 8 bags, 2 lookups a step):
#:
#: * ``per_row@fixed`` or ``per_step@fixed`` -- the latency chain: dependent index -> row loads (per lookup, or
#:   per step of ``unroll`` lookups of the program's bags), as long however many programs run;
#: * ``per_row@dev16`` -- the device's random-access rate (rows per second, shared by the resident programs);
#: * ``per_dram_byte@fixed`` -- one program's memory-level parallelism: its warps keep a bounded number of bytes
#:   in flight, so a program streams at most so many bytes per second, however idle HBM is (1 program per SM);
#: * ``per_warp_ld@fixed`` -- the same limit counted in the kernel's layout instead of bytes: the vector loads each
#:   thread issues (:func:`simfuse.costs.calibrated.embedding_layout`: a ``[min(bags, 16), next_pow2(dim)]`` tile
#:   over ``32 x num_warps`` threads, masked columns and replicated lanes included);
#: * ``per_dram_byte@dev16`` / ``per_hbm_byte@dev16`` -- its share of HBM bandwidth (bytes at the access
#:   granularity, less the L2 hits of a small table).
#:
#: (``per_l2_byte@dev16``, the L2's own rate, was a further optional slot in issue 12's third pass; no region of
#: v1 + v2 chose it, and it doubled the candidates: left out.)
MAX_FORMS: dict[str, tuple[dict[str, tuple], dict[str, tuple], tuple[float, ...]]] = {
    "embedding_all_to_all": ({"per_program": ("fixed",), "per_bag": (None, "cu")},
                             {"latency": (("per_step@fixed", "fixed"), ("per_step_l2@fixed", "fixed")),
                              "mlp": (("per_dram_byte@fixed", "fixed"), ("per_warp_byte@fixed", "fixed")),
                              "hbm": (("per_dram_byte@dev16", "dev16"), ("per_hbm_byte@dev16", "dev16"),
                                      ("per_raw_byte@dev16", "dev16")),
                              "rate": (("per_row_hbm@dev16", "dev16"),)},
                             (2.0, 4.0)),
    # GEMV (sixth pass): a program streams its ``block_n x k/split_k`` slice in k-steps of ``block_k``; alone on
    # the device it runs at its own pipeline's rate (the chain of k-steps, ~55-60 GB/s a program in v4/v5's 2-32
    # program launches, however idle HBM is), in a full grid at its share of HBM (4.2-4.3 TB/s): the soft maximum
    # of the two instead of the linear model's one byte term scaled by a fixed SM-sharing rule (``devH``), which
    # cannot price both a 2-program and a 3-per-SM launch (fifth pass: the programs-per-SM regions 12-42% off).
    "gemv_all_reduce": ({"per_program": ("fixed",), "per_slot": (None, "fixed")},
                        {"latency": (("per_k@fixed", "fixed"),),
                         "hbm": tuple((f"per_byte@{k}", k) for k in ("dev2", "dev4", "dev8", "dev16"))},
                        (2.0, 4.0)),
}
#: Fifth pass (v4): the ``rate`` slot -- the device's random row-access rate (``per_row_hbm``: gathered rows that
#: miss the L2; the campaigns' best rows per second level off at ~32 G/s for rows up to 64 B, while wide rows reach
#: 4.1-4.2 TB/s: a row costs the soft maximum of a request and its bytes) -- and ``per_raw_byte`` (the rows at their
#: own size) are new; the candidate set was pruned by plain leave-region-out over every form on the training
#: campaigns (v1-v4, heldout2, heldout3; never heldout4): every family's best form has the rate term and a
#: memory-parallelism term (``per_warp_ld@fixed`` and no such term were never among the best: left out), 48 forms.
#: Families whose linear candidates (:data:`TERMS`) are not tried: the soft-max forms won every region of every
#: embedding family on the v1 campaign (docs/calibration.md), and leaving the 66 linear term sets out keeps the
#: nested cross-validation over 12 regions affordable.
SOFTMAX_ONLY = frozenset({"embedding_all_to_all"})

@dataclass(frozen=True)
class Spec:
    """One candidate model: ``terms`` (key -> sigma kind; a key's work term is :func:`term_feature` of it), which
    of them are combined by the soft maximum, and its order (``max_terms`` empty: the linear model)."""

    terms: tuple[tuple[str, str], ...]
    max_terms: frozenset = frozenset()
    max_order: float = 1.0

    def __len__(self) -> int:
        return len(self.terms)

    def items(self):
        return iter(self.terms)

    @property
    def linear(self) -> bool:
        return not self.max_terms

    def describe(self) -> str:
        add = [f"{t}:{k}" for t, k in self.terms if t not in self.max_terms]
        mx = [f"{t}:{k}" for t, k in self.terms if t in self.max_terms]
        return " + ".join(add + ([f"softmax{self.max_order:g}({', '.join(mx)})"] if mx else []))


def _as_spec(spec) -> Spec:
    return spec if isinstance(spec, Spec) else Spec(tuple(dict(spec).items()))


#: Regions per family: name -> (campaign column, which end of its range).
REGION_AXES = {
    "embedding_all_to_all": ("dim", "pooling", "bags", "table_rows", "bags_per_wg", "num_warps"),
    "gemv_all_reduce": ("n", "k", "split_k", "programs_per_sm"),
    "gemm_all_to_all": ("m", "n", "k"),
}


# ------------------------------------------------------------------------------------------------ fitting
def _slot_products(slots: dict[str, tuple]) -> list[list[tuple[str, str]]]:
    names = list(slots)
    out = []
    for combo in itertools.product(*(slots[t] for t in names)):
        out.append([o if isinstance(o, tuple) else (t, o) for t, o in zip(names, combo, strict=True) if o is not None])
    return out


def _candidates(kernel: str) -> list[Spec]:
    """The linear term sets of :data:`TERMS`, then the soft-max forms of :data:`MAX_FORMS`."""
    out = [] if kernel in SOFTMAX_ONLY else [Spec(tuple(c)) for c in _slot_products(TERMS[kernel])]
    if kernel in MAX_FORMS:
        add_slots, max_slots, orders = MAX_FORMS[kernel]
        for add in _slot_products(add_slots):
            for mx in _slot_products(max_slots):
                for k in orders:
                    out.append(Spec(tuple(add) + tuple(mx), frozenset(t for t, _ in mx), float(k)))
    return out


def _tensor(pts: list[Point], spec: Spec) -> tuple[np.ndarray, np.ndarray]:
    """``F[p, w, j]``: term ``j``'s work times its load in wave ``w`` of point ``p`` (a full and a partial wave at
    most); ``M[p, w]``: how many such waves."""
    f = np.zeros((len(pts), 2, len(spec)))
    m = np.zeros((len(pts), 2))
    for i, p in enumerate(pts):
        for w, (n, mult) in enumerate(waves(p.grid, p.slots)):
            m[i, w] = mult
            for j, (t, kind) in enumerate(spec.items()):
                f[i, w, j] = p.feats.get(term_feature(t), 0.0) * load(kind, n, p.slots)
    return f, m


def _design(pts: list[Point], spec) -> np.ndarray:
    f, m = _tensor(pts, _as_spec(spec))
    return np.column_stack([np.ones(len(pts))] + [(m * f[:, :, j]).sum(-1) for j in range(f.shape[2])])


def _softmax_model(coef: np.ndarray, f: np.ndarray, m: np.ndarray, spec: Spec) -> tuple[np.ndarray, np.ndarray]:
    """Launch times and their derivatives by ``log c`` (the fit's parameters) of the soft-max form."""
    k = spec.max_order
    mx = np.array([t in spec.max_terms for t, _ in spec.items()])
    u = f * coef[1:]  # (points, waves, terms)
    add = u[:, :, ~mx].sum(-1)
    um = u[:, :, mx]
    top = um.max(-1, keepdims=True)
    safe = np.where(top > 0, top, 1.0)
    smax = top[..., 0] * ((um / safe) ** k).sum(-1) ** (1.0 / k)
    t = coef[0] + (m * (add + smax)).sum(-1)
    share = np.where(smax[..., None] > 0, (um / np.where(smax > 0, smax, 1.0)[..., None]) ** (k - 1.0), 0.0)
    jac = np.zeros((len(t), len(coef)))
    jac[:, 0] = coef[0]
    jac[:, 1:][:, ~mx] = (m[..., None] * u[:, :, ~mx]).sum(1)
    jac[:, 1:][:, mx] = (m[..., None] * um * share).sum(1)
    return t, jac


#: Parameters of a soft-max fit live in log space between these bounds (a term at the floor is dropped).
_LOG_COEF_FLOOR, _LOG_COEF_CEIL = -120.0, 5.0


def _fit_softmax(pts: list[Point], spec: Spec, y: np.ndarray) -> np.ndarray:
    """Least squares of log(predicted / measured) by Levenberg-Marquardt over the logs of the (positive)
    coefficients, from the linear fit of the same terms summed (numpy only, deterministic)."""
    f, m = _tensor(pts, spec)
    x = np.column_stack([np.ones(len(pts))] + [(m * f[:, :, j]).sum(-1) for j in range(f.shape[2])])
    cols = list(range(x.shape[1]))
    if len(cols) > 6:  # the exact NNLS takes 6 columns at most: start from launch, additive terms, first/last max term
        mx = [j + 1 for j, (t, _) in enumerate(spec.items()) if t in spec.max_terms]
        cols = [c for c in cols if c not in mx] + [mx[0], mx[-1]]
    c0 = np.zeros(x.shape[1])
    c0[cols] = nnls_relative(x[:, cols], y)
    # a term the linear fit dropped starts where it alone would explain 1% of the median launch
    alone = np.median(y) / np.maximum(np.median(np.where(x > 0, x, np.nan), axis=0), 1e-300)
    alone = np.nan_to_num(alone, nan=1.0)
    c0 = np.where(c0 > 0, c0, 1e-2 * alone)
    theta = np.clip(np.log(c0), _LOG_COEF_FLOOR, _LOG_COEF_CEIL)
    live = np.array([True] + [bool(np.any(f[:, :, j] > 0)) for j in range(f.shape[2])])
    t, jac = _softmax_model(np.exp(theta), f, m, spec)
    r = np.log(t / y)
    cost = float(r @ r)
    lam = 1e-3
    for _ in range(100):
        jr = (jac / t[:, None])[:, live]
        h = jr.T @ jr
        g = jr.T @ r
        done = True
        for _ in range(12):
            step = np.zeros_like(theta)
            try:
                step[live] = np.linalg.solve(h + lam * np.diag(np.diag(h) + 1e-12), -g)
            except np.linalg.LinAlgError:
                lam *= 10.0
                continue
            th2 = np.clip(theta + step, _LOG_COEF_FLOOR, _LOG_COEF_CEIL)
            t2, jac2 = _softmax_model(np.exp(th2), f, m, spec)
            r2 = np.log(t2 / y)
            c2 = float(r2 @ r2)
            if c2 < cost:
                done = cost - c2 < 1e-12 * max(cost, 1e-30) or float(np.max(np.abs(th2 - theta))) < 1e-7
                theta, t, jac, r, cost = th2, t2, jac2, r2, c2
                lam = max(lam / 3.0, 1e-12)
                break
            lam *= 4.0
        if done:
            break
    coef = np.exp(theta)
    coef[~live] = 0.0
    coef[theta <= _LOG_COEF_FLOOR + 20.0] = 0.0  # at the floor: a term the fit has dropped
    return coef


def _fit(pts: list[Point], spec) -> np.ndarray:
    spec = _as_spec(spec)
    y = np.array([p.time_s for p in pts])
    if spec.linear:
        return nnls_relative(_design(pts, spec), y)
    return _fit_softmax(pts, spec, y)


def _predict(pts: list[Point], spec, coef: np.ndarray) -> np.ndarray:
    spec = _as_spec(spec)
    if spec.linear:
        return _design(pts, spec) @ coef
    f, m = _tensor(pts, spec)
    return _softmax_model(np.asarray(coef, dtype=float), f, m, spec)[0]


#: Per-layout latency factors (sixth pass): searched on this log grid, with a penalty ``LAYOUT_PENALTY x points x
#: log(factor)^2`` that keeps a layout whose launches the latency term does not limit at 1, and fitted only for
#: layouts with at least ``LAYOUT_MIN_POINTS`` fitted launches.
LAYOUT_GRID = tuple(float(x) for x in np.exp(np.linspace(np.log(0.2), np.log(5.0), 49)))
LAYOUT_PENALTY = 0.005
LAYOUT_MIN_POINTS = 4


def _latency_columns(spec: Spec) -> list[int]:
    return [j for j, (t, _) in enumerate(spec.items()) if term_feature(t) in LATENCY_FEATURES]


def with_layout_factors(pts: list[Point], factors: dict[str, float]) -> list[Point]:
    """``pts`` with their latency work terms (:data:`LATENCY_FEATURES`) multiplied by their layout's factor (the
    nearest-width rule of :func:`simfuse.costs.calibrated.layout_factor`): what ``WaveFit.latency_by_layout`` does
    at prediction time."""
    if not factors:
        return pts
    out = []
    for p in pts:
        if not p.feats.get("layout_block_d"):
            out.append(p)
            continue
        g = layout_factor(factors, layout_key_of(p.feats))
        out.append(Point(p.kernel, p.variant, p.dtype, p.grid, p.slots,
                         {**p.feats, **{k: p.feats[k] * g for k in LATENCY_FEATURES if k in p.feats}}, p.axes,
                         p.time_s))
    return out


def fit_layout_factors(pts: list[Point], spec, iters: int = 3) -> tuple[np.ndarray, dict[str, float]]:
    """Coefficients of ``spec`` and a factor per compiled layout on its latency terms, by alternation: fit the
    coefficients, then per layout (``LAYOUT_MIN_POINTS`` launches or more) the factor on :data:`LAYOUT_GRID`
    minimising its launches' squared log errors plus the penalty, ``iters`` times.  The dependent-step chain's time
    per step differs between compiled configurations at equal counts (H200 v5: 8 bags x 4 warps about 0.85-1.0 us a
    step, 4 bags x 8 warps 0.35-0.5, nearly whatever the row width) in a way no layout count explained; the
    factors measure it per kernel, like the slots.  No latency term in ``spec`` or no layouts: ``({})``."""
    spec = _as_spec(spec)
    lat = _latency_columns(spec)
    coef = _fit(pts, spec)
    keys = [layout_key_of(p.feats) if p.feats.get("layout_block_d") else None for p in pts]
    groups: dict[str, list[int]] = {}
    for i, k in enumerate(keys):
        if k is not None:
            groups.setdefault(k, []).append(i)
    groups = {k: v for k, v in groups.items() if len(v) >= LAYOUT_MIN_POINTS}
    if not lat or not groups:
        return coef, {}
    factors: dict[str, float] = {}
    y = np.array([p.time_s for p in pts])
    grid = np.array(LAYOUT_GRID)
    for _ in range(iters):
        for key in sorted(groups):
            idx = groups[key]
            sub = [pts[i] for i in idx]
            f, m = _tensor(sub, spec)
            best = None
            for g in grid:
                f2 = f.copy()
                f2[:, :, lat] *= g
                if spec.linear:
                    x = np.column_stack([np.ones(len(sub))] + [(m * f2[:, :, j]).sum(-1) for j in range(f2.shape[2])])
                    t = x @ coef
                else:
                    t = _softmax_model(coef, f2, m, spec)[0]
                r = np.log(np.maximum(t, 1e-15) / y[idx])
                cost = float(r @ r) + LAYOUT_PENALTY * len(idx) * float(np.log(g)) ** 2
                if best is None or cost < best[0] - 1e-15:
                    best = (cost, float(g))
            factors[key] = _g(best[1])
        coef = _fit(with_layout_factors(pts, factors), spec)
    return coef, factors


#: A region holds the points within this factor of an axis' extreme value: the designed grids step 2-4x, so on a
#: grid axis it is the extreme grid value alone, and an off-grid (held-out) shape near the extreme joins it instead of
#: forming a region of its own (fifth pass, when heldout2/heldout3 joined the training data).
REGION_SPAN = 2.0


def regions(pts: list[Point]) -> dict[str, list[int]]:
    """Region name -> indices: for each axis of the family, the points at its smallest value (up to
    :data:`REGION_SPAN` times it) and at its largest (down to 1 / :data:`REGION_SPAN` of it); an axis spanning less
    than 8x (GEMV programs per SM, 1-3) takes its extreme values alone.  Only axes with at least 3 distinct values,
    and only regions that leave at least 2 distinct values of the axis outside, so that the rest still spans it."""
    out: dict[str, list[int]] = {}
    if not pts:
        return out
    for ax in REGION_AXES[pts[0].kernel]:
        vals = sorted({p.axes[ax] for p in pts})
        if len(vals) < 3:
            continue
        lo, hi = vals[0], vals[-1]
        span = REGION_SPAN if hi >= 8 * lo else 1.0
        low = {v for v in vals if v <= lo * span * (1 + 1e-9) and (span == 1.0 or v < lo * span * (1 - 1e-9))}
        high = {v for v in vals if v >= hi / span * (1 - 1e-9) and (span == 1.0 or v > hi / span * (1 + 1e-9))}
        for name, inside in ((f"{ax}={lo:g} (lowest)", low), (f"{ax}={hi:g} (highest)", high)):
            if len(vals) - len(inside) >= 2:
                out[name] = [i for i, p in enumerate(pts) if p.axes[ax] in inside]
    return out


def programs_per_sm(pts: list[Point]) -> int:
    """Most programs any of ``pts`` runs on one SM at once (its first wave: ``ceil(min(grid, slots) / CUs)``).  A
    region above its training set's value needs SM sharing that no training point showed: the fit cannot have
    learnt it (on the H200 campaign: GEMV n = 16,384, the only GEMV grid over one program per SM)."""
    return max((math.ceil(min(p.grid, p.slots) / CUS - 1e-9) for p in pts), default=0)


def inner_regions(pts: list[Point]) -> dict[str, list[int]]:
    """Regions for choosing terms on a training set: :func:`regions` when the training set still has an axis with 3
    or more values, else leave-one-shape-out (a family sampled on 2 values per axis, like the fp32 GEMM, would
    otherwise have nothing to choose its terms by and fall back to a constant per program)."""
    return regions(pts) or {f"point {i}": [i] for i in range(len(pts))}


def _lro_errors(pts: list[Point], spec: dict[str, str], regs: dict[str, list[int]]) -> np.ndarray:
    errs = []
    for idx in regs.values():
        s = set(idx)
        train = [p for i, p in enumerate(pts) if i not in s]
        test = [pts[i] for i in idx]
        if len(train) < len(spec) + 2 or not test:
            continue
        coef = _fit(train, spec)
        pred = _predict(test, spec, coef)
        errs.extend(np.log(np.maximum(pred, 1e-15) / np.array([p.time_s for p in test])))
    return np.array(errs)


def _score(errs: np.ndarray) -> float:
    """Cross-validation score: rms of the log errors plus half their max (the target bounds both)."""
    if errs.size == 0:
        return float("inf")
    return float(np.sqrt(np.mean(errs**2)) + 0.5 * np.max(np.abs(errs)))


def select_spec(pts: list[Point], regs: dict[str, list[int]], candidates: list[Spec] | None = None) -> Spec:
    """The candidate (default: every one of the family, :func:`_candidates`) with the best leave-region-out score
    over ``regs`` (ties: fewer terms)."""
    best = None
    for spec in _candidates(pts[0].kernel) if candidates is None else candidates:
        sc = _score(_lro_errors(pts, spec, regs))
        key = (sc, len(spec))
        if best is None or key < best[0]:
            best = (key, spec)
    return best[1]


def _cv_summary(out_regs: dict, all_rel: list[float]) -> dict:
    a = np.abs(np.array(all_rel)) if all_rel else np.array([float("nan")])
    return {"regions": out_regs, "errors": all_rel, "median_abs": _g(float(np.median(a))),
            "max_abs": _g(float(np.max(a))), "points": len(all_rel)}


def cross_validate(pts: list[Point], candidates: list[Spec] | None = None, layouts: bool = False) -> dict:
    """Nested leave-region-out: per region, the spec chosen on the other regions (among ``candidates``, default
    all of the family's), fitted outside the region, predicting it.  Returns {'regions': {name: {...}}, 'errors':
    [rel errors], 'median_abs', 'max_abs'}; with ``layouts``, also 'layout': the same summary of the same specs
    fitted with per-layout latency factors (:func:`fit_layout_factors`, on the training regions only)."""
    regs = regions(pts)
    out_regs, lay_regs = {}, {}
    all_rel, lay_rel = [], []
    for name, idx in regs.items():
        s = set(idx)
        train = [p for i, p in enumerate(pts) if i not in s]
        test = [pts[i] for i in idx]
        y = np.array([p.time_s for p in test])
        spec = select_spec(train, inner_regions(train), candidates)
        coef = _fit(train, spec)
        rel = _predict(test, spec, coef) / y - 1.0
        all_rel.extend(rel.tolist())
        out_regs[name] = {"points": len(test), "median_abs": _g(float(np.median(np.abs(rel)))),
                          "max_abs": _g(float(np.max(np.abs(rel)))), "spec": spec, "model": spec.describe(),
                          "programs_per_sm": programs_per_sm(test), "train_programs_per_sm": programs_per_sm(train)}
        if layouts:
            c2, fac = fit_layout_factors(train, spec)
            rel2 = _predict(with_layout_factors(test, fac), spec, c2) / y - 1.0
            lay_rel.extend(rel2.tolist())
            lay_regs[name] = {**out_regs[name], "median_abs": _g(float(np.median(np.abs(rel2)))),
                              "max_abs": _g(float(np.max(np.abs(rel2))))}
    out = _cv_summary(out_regs, all_rel)
    if layouts:
        out["layout"] = _cv_summary(lay_regs, lay_rel)
    return out


def fit_group(pts: list[Point], acc_limit: float | None = None) -> WaveFit:
    """The profile's model of one (kernel, variant, dtype): spec chosen by leave-region-out over all regions,
    fitted to all points; prediction-interval quantiles from the nested leave-region-out residuals.  ``acc_limit``:
    the embedding's ``max_acc_per_thread`` (:func:`acc_limits`; None: the largest tile of ``pts``)."""
    spec = select_spec(pts, inner_regions(pts))
    coef = _fit(pts, spec)
    layouts = bool(_latency_columns(spec)) and any(p.feats.get("layout_block_d") for p in pts)
    cv = cross_validate(pts, layouts=layouts)
    factors: dict[str, float] = {}
    if layouts:  # per-layout latency factors where they cross-validate better (same specs, same regions)
        lay = cv.pop("layout")
        if _score(np.log1p(np.abs(lay["errors"]))) < _score(np.log1p(np.abs(np.array(cv["errors"])))):
            coef, factors = fit_layout_factors(pts, spec)
            cv = {**lay, "without_layout_factors": {"median_abs": cv["median_abs"], "max_abs": cv["max_abs"]}}
        else:
            cv["with_layout_factors"] = {"median_abs": lay["median_abs"], "max_abs": lay["max_abs"]}
    q = _quantiles(cv["errors"])
    slots = pts[0].slots
    terms = {t: (kind, float(c)) for (t, kind), c in zip(spec.items(), coef[1:], strict=True)}
    max_terms = tuple(t for t, _ in spec.items() if t in spec.max_terms)
    pred = _predict(with_layout_factors(pts, factors), spec, coef)
    rel = pred / np.array([p.time_s for p in pts]) - 1.0
    cvs = {"median_abs": cv["median_abs"], "max_abs": cv["max_abs"], "points": cv["points"],
           "fit_median_abs": _g(float(np.median(np.abs(rel)))), "fit_max_abs": _g(float(np.max(np.abs(rel)))),
           "regions": {k: {kk: vv for kk, vv in v.items() if kk != "spec"} for k, v in cv["regions"].items()},
           "_errors": cv["errors"]}
    for k in ("with_layout_factors", "without_layout_factors"):
        if k in cv:
            cvs[k] = cv[k]
    by_dim = slots_by_dim(pts)
    slots = max(by_dim.values()) if by_dim else slots
    by_layout = slots_by_layout(pts)
    return WaveFit(pts[0].kernel, pts[0].variant, pts[0].dtype, slots, float(coef[0]), terms,
                   residual_log_quantiles=q, cv=cvs, residual_logs=_logs(cv["errors"]), slots_by_dim=by_dim,
                   max_terms=max_terms, max_order=spec.max_order if max_terms else 1.0,
                   max_acc_per_thread=float(acc_limit) if acc_limit is not None else
                   max((p.feats.get("acc_per_thread", 0.0) for p in pts), default=0.0), slots_by_layout=by_layout,
                   latency_by_layout=factors)


#: The embedding launch configuration the simulator's works stand for (``EmbeddingConfig`` defaults of the
#: campaigns: 8 bags per program, 8 warps): the resident programs a profile records per row width are this one's.
DEFAULT_EMB_CONFIG = {"bags_per_wg": 8.0, "num_warps": 8.0}


def slots_by_dim(pts: list[Point]) -> dict[int, int]:
    """Embedding: resident programs per row width of the default configuration (:data:`DEFAULT_EMB_CONFIG`;
    at a width measured only with other bags per program, its 8-warp launches; widths measured only at other warp
    counts are left out -- ``WaveFit.slots_for`` takes the nearest width).  The campaign since v3 has 2-16 warps
    per dim, whose slots (4,224 at 2 warps ... 528 at 16) are not those of the simulator's 8-warp kernel."""
    out: dict[int, int] = {}
    for want in ({"bags_per_wg", "num_warps"}, {"num_warps"}):
        for p in sorted(pts, key=lambda p: (p.axes.get("dim", 0.0), p.slots)):
            if "dim" not in p.axes or int(p.axes["dim"]) in out:
                continue
            if all(p.axes.get(k, DEFAULT_EMB_CONFIG[k]) in (0.0, DEFAULT_EMB_CONFIG[k]) for k in want):
                out[int(p.axes["dim"])] = p.slots
    return dict(sorted(out.items()))


def slots_by_layout(pts: list[Point]) -> dict[str, int]:
    """Embedding: resident programs per compiled configuration (:func:`simfuse.costs.calibrated.layout_key` of
    dim, bags per program and warps) over the fitted points -- the slots of their compiled kernels' registers,
    shared memory and warps (:func:`occupancy_slots`); where launches of one configuration disagree (a register
    count that moved with the campaign's Triton build), the fewest.  Empty for other kernels."""
    out: dict[str, int] = {}
    for p in pts:
        if p.kernel != "embedding_all_to_all" or "dim" not in p.axes:
            continue
        key = layout_key(p.axes["dim"], p.axes.get("bags_per_wg") or DEFAULT_EMB_CONFIG["bags_per_wg"],
                         p.axes.get("num_warps") or DEFAULT_EMB_CONFIG["num_warps"])
        out[key] = min(out.get(key, p.slots), p.slots)
    return dict(sorted(out.items()))


def group_points(pts: list[Point]) -> dict[tuple[str, str, str], list[Point]]:
    out: dict[tuple[str, str, str], list[Point]] = {}
    for p in pts:
        out.setdefault((p.kernel, p.variant, p.dtype), []).append(p)
    return out


def _scaled_cv(pts: list[Point], base: WaveFit) -> tuple[dict, np.ndarray]:
    """Leave-region-out of ``T = a + s * T_base`` over ``pts``; returns (cv summary, (a, s) fitted on all)."""
    tb = np.array([base.launch_time_s(p.grid, p.feats, p.slots) for p in pts])
    y = np.array([p.time_s for p in pts])
    x = np.column_stack([np.ones(len(pts)), tb])
    out_regs, all_rel = {}, []
    for name, idx in regions(pts).items():
        tr = np.array([i not in set(idx) for i in range(len(pts))])
        c = nnls_relative(x[tr], y[tr])
        rel = x[~tr] @ c / y[~tr] - 1.0
        all_rel.extend(rel.tolist())
        out_regs[name] = {"points": int((~tr).sum()), "median_abs": _g(float(np.median(np.abs(rel)))),
                          "max_abs": _g(float(np.max(np.abs(rel))))}
    a_ = np.abs(np.array(all_rel)) if all_rel else np.array([float("nan")])
    cv = {"regions": out_regs, "errors": all_rel, "median_abs": _g(float(np.median(a_))),
          "max_abs": _g(float(np.max(a_))), "points": len(all_rel)}
    return cv, nnls_relative(x, y)


def _quantiles(errors: list[float]) -> dict[str, float]:
    ratio = -np.log1p(np.array(errors)) if errors else np.zeros(1)  # log(measured / predicted)
    return {f"p{p}": float(np.quantile(ratio, p / 100)) for p in (10, 50, 90)}


def _logs(errors: list[float]) -> tuple[float, ...]:
    """log(measured / predicted) of the leave-region-out predictions, sorted (the empirical residual law)."""
    return tuple(sorted(_g(x) for x in (-np.log1p(np.array(errors))).tolist())) if errors else ()


def fit_campaign(rows: Iterable[dict]) -> list[WaveFit]:
    """One :class:`WaveFit` per (kernel, variant, dtype) of the campaign (compute variants first, so that a fused
    variant can be priced from its compute model when that cross-validates better)."""
    rows = list(rows)
    groups = group_points(campaign_points(rows))
    limits = acc_limits(rows)
    fits: dict[tuple[str, str, str], WaveFit] = {}
    for key in sorted(groups, key=lambda k: (k[1] != "compute", k)):
        pts = groups[key]
        own = fit_group(pts, limits.get(key))
        base = fits.get((key[0], "compute", key[2]))
        if key[1] == "fused" and base is not None:
            cv, (a, sc) = _scaled_cv(pts, base)
            if _score(np.log1p(np.abs(cv["errors"]))) < _score(np.log1p(np.abs(np.array(own.cv.get("_errors", []))))):
                pred = np.array([a + sc * base.launch_time_s(p.grid, p.feats, p.slots) for p in pts])
                rel = pred / np.array([p.time_s for p in pts]) - 1.0
                cvs = {"median_abs": cv["median_abs"], "max_abs": cv["max_abs"], "points": cv["points"],
                       "fit_median_abs": _g(float(np.median(np.abs(rel)))),
                       "fit_max_abs": _g(float(np.max(np.abs(rel)))), "regions": cv["regions"],
                       "base": f"{a:.4g} s + {sc:.4g} x compute"}
                own = WaveFit(key[0], key[1], key[2], base.slots, float(a + sc * base.launch_s),
                              {t: (k, c * sc) for t, (k, c) in base.terms.items()}, base.cus,
                              _quantiles(cv["errors"]), cvs, _logs(cv["errors"]), dict(base.slots_by_dim),
                              base.max_terms, base.max_order, base.max_acc_per_thread,
                              {**base.slots_by_layout, **slots_by_layout(pts)}, dict(base.latency_by_layout))
        own.cv.pop("_errors", None)
        fits[key] = own
    return [fits[k] for k in sorted(fits)]
