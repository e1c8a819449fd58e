"""Dense-compute calibration from PyTorch profiler (Kineto) traces: the ``dense:`` section of a profile.

**What is read.**  One pass over the trace (:func:`~simfuse.calibrate.torch_trace.iter_trace_events`).  CPU
operators (``cat == "cpu_op"``) give the shapes and dtypes (``args["Input Dims"]`` / ``args["Input type"]``, present
when the trace was recorded with ``record_shapes=True``); GPU kernels (``cat == "kernel"``) are linked to the
operator that launched them by ``args["External id"]`` (Kineto copies the innermost operator's id onto the
runtime call and its kernels).  The GPU time of one operator call is the sum of its kernels' ``dur``; for a GEMM
only its GEMM kernels count (a main kernel plus a split-K reduction, e.g. ``cublasLt::splitKreduce_kernel``; not
the bias copy ``aten::addmm`` launches before it).  NCCL kernels are left to
:mod:`simfuse.calibrate.kineto_nccl`.

**Families** (one operator call = one sample):

* ``gemm``: an operator in :data:`GEMM_OPS` or a kernel matching :data:`GEMM_KERNEL_RE` (cuBLAS/cuBLASLt
  ``*gemm*``, ``sm90_xmma*``, ``ampere_*gemm*``, ``nvjet_*``, CUTLASS, rocBLAS/Tensile ``Cijk_*``).  Shape
  ``(batch, M, N, K)`` from the operator's ``Input Dims`` (:func:`gemm_shape`); work = ``2 batch M N K`` FLOP.
* ``embedding_bag``: ``aten::embedding_bag`` / ``_embedding_bag*`` or an ``EmbeddingBag`` kernel; work = bytes
  of the gathered rows, the pooled output and the indices.
* ``elementwise``: a kernel named ``*elementwise_kernel*`` (PyTorch's ``vectorized_elementwise_kernel``,
  ``unrolled_elementwise_kernel``, ``elementwise_kernel``); work = bytes of the tensor inputs plus one output of
  the largest input's size.

**Model** (per family and dtype).  The element-wise and embedding families: a saturating curve in one size
variable ``x`` (bytes moved),

    achieved rate(x) = peak * x / (x + x_half)          time = work / rate(x)

fitted on the squared log error of the times: for each ``x_half`` on a fixed log grid (deterministic) the best
``peak`` is closed-form (the geometric mean), and the ``x_half`` with the least error is kept.  Repeated calls of one
shape are first reduced to their median, so that each shape counts once.  ``x_half`` is fitted only with at least
:data:`MIN_DISTINCT_X` distinct sizes and :data:`MIN_POINTS_PER_PARAMETER` shapes per parameter; otherwise it is 0
(a constant rate) and the fit says so in ``note``.

GEMMs: the same saturating curve in ``x = min(M, N)`` is one candidate; the others follow how a GEMM kernel spends
its time (:func:`gemm_candidates`):

    time = s_per_call + s_per_byte * unique bytes + s_per_flop * F

with ``F`` = ``2 B M N K`` (``flops``), the FLOP of whole ``tile_m x tile_n`` output tiles (``tile``: edge tiles
padded), or whole waves of such tiles over the SMs (``wave``: a grid of 8 tiles costs one full wave, like one of
132), for the tiles of :data:`GEMM_TILES`.  The coefficients are non-negative and minimise the squared relative
error (:func:`nnls_relative`, exact).  With at least :data:`MIN_SHAPES_FOR_CV` shapes the candidate of least
**leave-shape-out** rms error is kept (never the in-sample error), and the section records every candidate's
error and the nested cross-validated error of the whole procedure (selection included) under ``cv``.  Why: on the
H200 trace the saturating curve leaves 74% rms (in-sample; 98% leave-shape-out) because a thin GEMM's time is a
per-call floor plus one wave of tiles whose cost grows with K, not a rate that grows with M; the wave model of
64 x 64 tiles leaves 5.2% leave-shape-out.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..costs.calibrated import gemm_flop_term
from ..errors import TraceError
from ..units import DTYPE_BYTES, INDEX_DTYPE_BYTES
from .torch_trace import bad_duration, iter_trace_events, nccl_collective

GEMM_OPS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
                      "aten::_scaled_mm", "aten::addmv", "aten::mv"})
#: cuBLAS / cuBLASLt (``*gemm*``, ``sm90_xmma*``, ``ampere_*gemm*``, CUDA 12.8+ ``nvjet_*``), CUTLASS, Tensile
GEMM_KERNEL_RE = re.compile(r"gemm|xmma|^nvjet_|cutlass|^Cijk_|splitKreduce", re.IGNORECASE)
EMBEDDING_RE = re.compile(r"embedding_?bag", re.IGNORECASE)
ELEMENTWISE_KERNEL_RE = re.compile(r"elementwise_kernel", re.IGNORECASE)
FAMILIES = ("gemm", "embedding_bag", "elementwise")
#: torch ``Input type`` strings -> simfuse dtype names (simfuse.units.DTYPE_BYTES)
TORCH_DTYPES = {"float": "fp32", "c10::bfloat16": "bf16", "c10::half": "fp16", "double": "fp64",
                "c10::float8_e4m3fn": "fp8", "c10::float8_e5m2": "fp8", "signed char": "int8",
                "unsigned char": "int8", "long int": "int64", "int": "int32", "long": "int64", "bool": "bool"}
#: element bytes of every dtype name above (simfuse.units: one table)
ELEM_BYTES = {**DTYPE_BYTES, **INDEX_DTYPE_BYTES}
MIN_DISTINCT_X = 2
MIN_POINTS_PER_PARAMETER = 2
X_HALF_GRID = 241  # log-spaced candidates for x_half (plus 0), from 1e-3 min(x) to 10 max(x)


@dataclass(frozen=True)
class DenseSample:
    """One operator call: family, dtype, operator and kernel names, shape, work (FLOP or bytes), GPU time."""

    family: str
    dtype: str
    op: str
    kernels: tuple[str, ...]
    shape: tuple[tuple[str, int], ...]
    work: float  # FLOP (gemm) or bytes (embedding_bag, elementwise)
    x: float  # the model's size variable: min(M, N) or bytes
    time_s: float
    cus: int = 0  # SMs of the traced device (Kineto ``deviceProperties[0].numSms``); 0 = not in the trace


def _dtype(types, i: int = 0) -> str:
    if not isinstance(types, list) or i >= len(types):
        return ""
    return TORCH_DTYPES.get(str(types[i]).lower(), "")


def gemm_shape(op: str, dims) -> tuple[int, int, int, int] | None:
    """(batch, M, N, K) of a GEMM operator from its ``Input Dims``; None when the dims are not a GEMM's.

    ``mm [M,K] [K,N]``; ``addmm bias [M,K] [K,N]``; ``bmm [B,M,K] [B,K,N]``; ``baddbmm bias [B,M,K] [B,K,N]``;
    ``linear x[...,K] w[N,K] (bias)``; ``matmul a[...,M,K] b[...,K,N]`` (a 1-d operand is a vector);
    ``mv / addmv`` -> M x 1."""
    if not isinstance(dims, list):
        return None
    try:
        d = [list(map(int, x)) if isinstance(x, list) else [] for x in dims]
    except (TypeError, ValueError):
        return None
    if op in ("aten::addmm", "aten::baddbmm", "aten::addmv"):
        d = d[1:]
    if op == "aten::linear":
        if len(d) < 2 or not d[0] or len(d[1]) != 2:
            return None
        x, w = d[0], d[1]
        return 1, math.prod(x[:-1]) or 1, w[0], x[-1]
    if len(d) < 2:
        return None
    a, b = d[0], d[1]
    if op in ("aten::mv", "aten::addmv"):
        return (1, a[0], 1, a[1]) if len(a) == 2 and len(b) == 1 else None
    if len(a) == 1:
        a = [1, a[0]]
    if len(b) == 1:
        b = [b[0], 1]
    if len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
        return None
    batch = max(math.prod(a[:-2]) if len(a) > 2 else 1, math.prod(b[:-2]) if len(b) > 2 else 1)
    if op == "aten::matmul" and len(a) > 2 and len(b) == 2:  # [..., M, K] x [K, N] is one GEMM of prod(...) M rows
        return 1, math.prod(a[:-1]), b[-1], a[-1]
    return batch, a[-2], b[-1], a[-1]


def _negative_extent(dims, depth: int = 0):
    """The first negative number in ``Input Dims`` (a list of tensor shapes, possibly nested for tensor lists),
    else None."""
    if isinstance(dims, bool):
        return None
    if isinstance(dims, (int, float)):
        return dims if dims < 0 else None
    if isinstance(dims, list) and depth < 4:
        for d in dims:
            bad = _negative_extent(d, depth + 1)
            if bad is not None:
                return bad
    return None


def _trace_sms(meta: dict) -> int:
    """SMs of the traced GPU from Kineto's ``deviceProperties`` (0 when absent or not one device kind)."""
    props = meta.get("deviceProperties")
    if not isinstance(props, list):
        return 0
    sms = {p.get("numSms") for p in props if isinstance(p, dict)}
    if len(sms) != 1:
        return 0
    (n,) = sms
    return int(n) if isinstance(n, int) and not isinstance(n, bool) and 0 < n <= 100_000 else 0


def _tensor_bytes(dims, types) -> list[float]:
    out = []
    for i, dm in enumerate(dims if isinstance(dims, list) else []):
        t = str(types[i]).lower() if isinstance(types, list) and i < len(types) else ""
        if not isinstance(dm, list) or t in ("", "scalar", "scalarlist", "tensorlist", "genericlist"):
            continue
        eb = ELEM_BYTES.get(TORCH_DTYPES.get(t, ""), 0)
        try:
            out.append(float(math.prod(int(v) for v in dm)) * eb)
        except (TypeError, ValueError):
            continue
    return out


def _classify(op: str, kernels: list[str]) -> str:
    if op in GEMM_OPS or any(GEMM_KERNEL_RE.search(k) for k in kernels):
        return "gemm"
    if EMBEDDING_RE.search(op) or any(EMBEDDING_RE.search(k) for k in kernels):
        return "embedding_bag"
    if any(ELEMENTWISE_KERNEL_RE.search(k) for k in kernels):
        return "elementwise"
    return ""


#: cuBLAS / CUTLASS GEMM kernel names -> operand dtype, for traces without ``Input type`` (PyTorch < 1.10):
#: ``volta_sgemm_128x64_nn`` fp32, ``ampere_s1688gemm_..._tf32`` / ``..._s16816gemm_...`` tf32,
#: ``volta_h884gemm_...`` / ``ampere_fp16_s16816gemm_fp16_...`` / ``turing_fp16_...`` fp16, ``..._bf16_...`` bf16
_GEMM_DTYPE_RES = ((re.compile(r"bf16", re.I), "bf16"), (re.compile(r"fp16|f16|h884|h1688|h16816|hgemm", re.I), "fp16"),
                   (re.compile(r"tf32|s1688|s16816|s884", re.I), "tf32"), (re.compile(r"sgemm", re.I), "fp32"))


def gemm_dtype_from_kernels(names) -> str:
    """The operand dtype a GEMM kernel's name spells (:data:`_GEMM_DTYPE_RES`), '' if none or ambiguous."""
    found = set()
    for n in names:
        for rx, dt in _GEMM_DTYPE_RES:
            if rx.search(n):
                found.add(dt)
                break
    return found.pop() if len(found) == 1 else ""


def read_dense_samples(path: str | Path, skipped: dict[str, int] | None = None) -> list[DenseSample]:
    """Every GEMM, embedding-bag and element-wise operator call of a Kineto trace with its shape and GPU time.

    Calls that cannot be used are counted in ``skipped`` by reason (no ``Input Dims``: record with
    ``record_shapes=True``; kernel with no launching operator; unknown dtype)."""
    src = str(path)
    meta: dict = {}
    ops: dict[int, tuple[str, object, object]] = {}
    launched: dict[int, list[tuple[str, float]]] = {}
    skip = skipped if skipped is not None else {}
    for i, ev in enumerate(iter_trace_events(path, meta)):
        if ev.get("ph") != "X":
            continue
        cat = ev.get("cat")
        if cat not in ("cpu_op", "kernel"):
            continue
        args = ev.get("args") or {}
        if not isinstance(args, dict):
            raise TraceError(src, f"key traceEvents[{i}].args", "expected an object")
        ext = args.get("External id")
        name = ev.get("name")
        if not isinstance(name, str):
            raise TraceError(src, f"key traceEvents[{i}].name", f"expected a string, got {name!r}")
        if cat == "cpu_op":
            if isinstance(ext, int):
                dims = args.get("Input Dims")
                bad = _negative_extent(dims)
                if bad is not None:
                    raise TraceError(src, f"key traceEvents[{i}].args.Input Dims", f"negative tensor extent {bad!r} "
                                     f"(operator {name[:60]!r}): a corrupt trace")
                ops[ext] = (name, dims, args.get("Input type"))
            continue
        dur = ev.get("dur")
        if bad_duration(dur):
            raise TraceError(src, f"key traceEvents[{i}].dur", f"expected a finite non-negative number, got {dur!r}")
        if nccl_collective(name):
            continue
        if not isinstance(ext, int) or ext <= 0:
            if _classify("", [name]):
                skip["kernel without a launching operator (no External id)"] = \
                    skip.get("kernel without a launching operator (no External id)", 0) + 1
            continue
        launched.setdefault(ext, []).append((name, float(dur) * 1e-6))
    out: list[DenseSample] = []
    cus = _trace_sms(meta)

    def skip_(reason: str) -> None:
        skip[reason] = skip.get(reason, 0) + 1

    for ext in sorted(launched):
        kern = launched[ext]
        names = [k for k, _ in kern]
        op, dims, types = ops.get(ext, ("", None, None))
        fam = _classify(op, names)
        if not fam:
            continue
        if fam == "gemm" and any(GEMM_KERNEL_RE.search(k) for k in names):
            # only the GEMM's own kernels (main + split-K reduction): aten::addmm also launches a bias copy
            kern = [(k, d) for k, d in kern if GEMM_KERNEL_RE.search(k)]
            names = [k for k, _ in kern]
        t = sum(d for _, d in kern)
        if not op:
            skip_(f"{fam}: kernel without a launching operator (External id not found)")
            continue
        if not isinstance(dims, list):
            skip_(f"{fam}: no Input Dims (record the trace with record_shapes=True)")
            continue
        if t <= 0:
            skip_(f"{fam}: zero duration")
            continue
        kname = tuple(sorted(set(names)))
        if fam == "gemm":
            shp = gemm_shape(op, dims)
            # aten::addmm / baddbmm: the first tensor is the bias, so the GEMM operands' type is at index 1
            dt = _dtype(types, 1 if op in ("aten::addmm", "aten::baddbmm", "aten::addmv") else 0)
            if shp is None:
                skip_(f"gemm: operator {op} with Input Dims not a matrix product")
                continue
            if not dt:
                dt = gemm_dtype_from_kernels(names)  # PyTorch < 1.10 traces record no Input type
            if not dt:
                skip_("gemm: unknown dtype")
                continue
            b, m, n, k = shp
            out.append(DenseSample("gemm", dt, op, kname, (("batch", b), ("m", m), ("n", n), ("k", k)),
                                   2.0 * b * m * n * k, float(min(m, n)), t, cus))
        elif fam == "embedding_bag":
            d = dims if isinstance(dims, list) else []
            dt = _dtype(types, 0)
            if len(d) < 3 or len(d[0] or []) != 2 or not d[1] or not d[2] or not dt:
                skip_("embedding_bag: Input Dims not (weight, indices, offsets) or unknown dtype")
                continue
            dim = int(d[0][1])
            lookups = int(math.prod(d[1]))
            bags = max(1, int(d[2][0]) - 1) if len(d[2]) == 1 else int(math.prod(d[2]))
            ib = ELEM_BYTES.get(_dtype(types, 1), 8)
            eb = ELEM_BYTES[dt]
            nbytes = float(lookups * dim * eb + bags * dim * eb + lookups * ib)
            out.append(DenseSample("embedding_bag", dt, op, kname, (("lookups", lookups), ("bags", bags),
                                                                    ("dim", dim)), nbytes, nbytes, t))
        else:
            sizes = _tensor_bytes(dims, types)
            dt = _dtype(types, 0)
            if not sizes or not dt:
                skip_("elementwise: no tensor inputs with a known dtype")
                continue
            nbytes = float(sum(sizes) + max(sizes))
            out.append(DenseSample("elementwise", dt, op, kname, (("bytes", int(nbytes)),), nbytes, nbytes, t))
    return out


# ------------------------------------------------------------------------------------------------------- fit
def _g(x: float) -> float:
    x = float(x)
    return 0.0 if abs(x) < 1e-12 else float(f"{x:.6g}")


def _sig(x: float) -> float:
    """Six significant digits, small values kept (per-byte and per-FLOP seconds are ~1e-14)."""
    return float(f"{float(x):.6g}")


def fit_saturating(x: np.ndarray, work: np.ndarray, time_s: np.ndarray) -> tuple[float, float]:
    """(peak rate, x_half) of ``rate = peak x / (x + x_half)`` minimising the squared log error of the times."""
    r = np.log(work / time_s)
    best = (math.inf, 0.0, float(np.exp(r.mean())))
    distinct = np.unique(x)
    if len(distinct) >= MIN_DISTINCT_X and len(x) >= 2 * MIN_POINTS_PER_PARAMETER:
        grid = np.concatenate([[0.0], np.logspace(math.log10(distinct[0]) - 3, math.log10(distinct[-1]) + 1,
                                                  X_HALF_GRID)])
    else:
        grid = np.array([0.0])
    for h in grid:
        e = np.log(x / (x + h))
        lp = float(np.mean(r - e))
        sse = float(np.sum((r - e - lp) ** 2))
        if sse < best[0] - 1e-12:
            best = (sse, float(h), math.exp(lp))
    return best[2], best[1]


#: output tiles (M x N) tried for the tile-padding and wave-quantisation terms (Hopper cuBLAS / CUTLASS tile sizes)
GEMM_TILES = ((64, 64), (64, 128), (128, 64), (128, 128), (128, 256), (256, 128))
#: a family needs this many shapes for leave-shape-out errors and the shape-aware GEMM candidates
MIN_SHAPES_FOR_CV = 6


@dataclass(frozen=True)
class Candidate:
    """One GEMM model family: the saturating curve (``flop_term`` None) or ``c0 + c_b bytes + c_f F`` with ``F``
    the :func:`~simfuse.costs.calibrated.gemm_flop_term` of kind ``flop_term``."""

    name: str
    flop_term: str | None = None
    tile: tuple[int, int] | None = None


def gemm_candidates(cus: int) -> list[Candidate]:
    """Saturating, plain FLOP, tile padding per tile and (when the trace gives the SM count) wave quantisation
    per tile, simplest first (ties go to the earlier)."""
    out = [Candidate("saturating"), Candidate("flops", "flops")]
    out += [Candidate(f"tile_{a}x{b}", "tile", (a, b)) for a, b in GEMM_TILES]
    if cus > 0:
        out += [Candidate(f"wave_{a}x{b}", "wave", (a, b)) for a, b in GEMM_TILES]
    return out


def nnls_relative(a: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Non-negative coefficients ``c`` minimising ``sum(((a c) - t) / t)^2`` (relative errors), exactly: every
    subset of the columns is solved by least squares and the best one with no negative coefficient kept."""
    w = a / t[:, None]
    y = np.ones(len(t))
    best, coef = math.inf, np.zeros(a.shape[1])
    cols = range(a.shape[1])
    for r in range(1, a.shape[1] + 1):
        for sub in itertools.combinations(cols, r):
            c, *_ = np.linalg.lstsq(w[:, sub], y, rcond=None)
            if np.any(c < 0):
                continue
            e = float(np.sum((w[:, sub] @ c - y) ** 2))
            if e < best - 1e-15:
                best = e
                coef = np.zeros(a.shape[1])
                coef[list(sub)] = c
    return coef


@dataclass
class _Family:
    """The per-shape medians of one (family, dtype)."""

    keys: list
    x: np.ndarray
    work: np.ndarray
    t: np.ndarray
    mnkb: np.ndarray | None = None  # (shapes, 4): M, N, K, batch (gemm)
    elem_bytes: int = 0
    cus: int = 0

    def design(self, cand: Candidate, idx) -> np.ndarray:
        rows = []
        for m, n, k, b in self.mnkb[idx]:
            nbytes = (m * k + k * n + m * n) * b * self.elem_bytes
            rows.append((1.0, nbytes, gemm_flop_term(cand.flop_term, m, n, k, b, cand.tile or (128, 128),
                                                     self.cus or 1)))
        return np.array(rows, dtype=float)


def _fit(fam: _Family, cand: Candidate, idx) -> tuple:
    if cand.flop_term is None:
        return fit_saturating(fam.x[idx], fam.work[idx], fam.t[idx])
    return tuple(nnls_relative(fam.design(cand, idx), fam.t[idx]))


def _predict(fam: _Family, cand: Candidate, params: tuple, idx) -> np.ndarray:
    if cand.flop_term is None:
        peak, h = params
        x = fam.x[idx]
        return fam.work[idx] / (peak * x / (x + h))
    return fam.design(cand, idx) @ np.asarray(params)


def _loso(fam: _Family, cand: Candidate, idx: np.ndarray) -> np.ndarray:
    """Relative errors of each shape of ``idx`` predicted by ``cand`` fitted on the other shapes of ``idx``."""
    out = np.empty(len(idx))
    for j, i in enumerate(idx):
        rest = idx[idx != i]
        out[j] = _predict(fam, cand, _fit(fam, cand, rest), [i])[0] / fam.t[i] - 1.0
    return out


def _rms(e: np.ndarray) -> float:
    return float(np.sqrt(np.mean(e ** 2)))


def select_model(fam: _Family, cands: list[Candidate]) -> tuple[Candidate, dict[str, float], np.ndarray,
                                                                 np.ndarray]:
    """The candidate with the least leave-shape-out rms error, every candidate's rms, the selected one's
    leave-shape-out errors, and the errors of the whole procedure under nested cross-validation (each shape
    predicted by the candidate selected, and fitted, without it)."""
    idx = np.arange(len(fam.t))
    errs = {c.name: _loso(fam, c, idx) for c in cands}
    scores = {c.name: _rms(errs[c.name]) for c in cands}
    best = min(cands, key=lambda c: (scores[c.name], cands.index(c)))
    nested = np.empty(len(idx))
    for i in idx:
        rest = idx[idx != i]
        inner = min(cands, key=lambda c: (_rms(_loso(fam, c, rest)), cands.index(c)))
        nested[i] = _predict(fam, inner, _fit(fam, inner, rest), [i])[0] / fam.t[i] - 1.0
    return best, scores, errs[best.name], nested


def dense_section(samples: list[DenseSample], sources: list[str], skipped: dict[str, int]) -> dict:
    """The ``dense:`` mapping of a profile (see the module doc and docs/calibration.md)."""
    groups: dict[tuple[str, str], dict[tuple, list[DenseSample]]] = {}
    for s in samples:
        groups.setdefault((s.family, s.dtype), {}).setdefault(s.shape, []).append(s)
    fits = []
    for (fam_name, dt) in sorted(groups):
        shapes = groups[(fam_name, dt)]
        keys = sorted(shapes)
        gemm = fam_name == "gemm"
        cus_seen = sorted({s.cus for ss in shapes.values() for s in ss})
        fam = _Family(keys, np.array([shapes[k][0].x for k in keys]), np.array([shapes[k][0].work for k in keys]),
                      np.array([float(np.median([s.time_s for s in shapes[k]])) for k in keys]),
                      elem_bytes=ELEM_BYTES.get(dt, 0), cus=cus_seen[0] if len(cus_seen) == 1 else 0)
        if gemm:
            fam.mnkb = np.array([[dict(k)[d] for d in ("m", "n", "k", "batch")] for k in keys], dtype=float)
        cv = None
        cand = Candidate("saturating")
        if len(keys) >= MIN_SHAPES_FOR_CV:
            cands = gemm_candidates(fam.cus) if gemm and fam.elem_bytes else [cand]
            cand, scores, errs, nested = select_model(fam, cands)
            cv = {"method": "leave-shape-out", "selected": cand.name, "rel_residual_rms": _g(_rms(errs)),
                  "rel_residual_max": _g(float(np.max(np.abs(errs)))),
                  "nested_rel_residual_rms": _g(_rms(nested)),
                  "nested_rel_residual_max": _g(float(np.max(np.abs(nested)))),
                  "candidates": {k: _g(v) for k, v in scores.items()}}
        idx = np.arange(len(keys))
        params = _fit(fam, cand, idx)
        pred = _predict(fam, cand, params, idx)
        rel = pred / fam.t - 1.0
        x, work, t = fam.x, fam.work, fam.t
        quality = {"rel_residual_rms": _g(_rms(rel)), "rel_residual_max": _g(float(np.max(np.abs(rel)))),
                   "points": int(len(keys))}
        if cand.flop_term is None:
            peak, h = params
            item = {"family": fam_name, "dtype": dt, "x": "min_m_n" if gemm else "bytes",
                    ("peak_flops_per_s" if gemm else "peak_bytes_per_s"): _g(peak),
                    ("m_half" if gemm else "bytes_half"): _g(h),
                    ("x_min" if not gemm else "m_min"): _g(float(x.min())),
                    ("x_max" if not gemm else "m_max"): _g(float(x.max())), "fit": quality}
            if h == 0.0:
                item["note"] = (f"constant rate: {len(np.unique(x))} distinct size(s) over {len(keys)} shape(s); "
                                f"the saturation x_half needs >= {MIN_DISTINCT_X} sizes and "
                                f">= {2 * MIN_POINTS_PER_PARAMETER} shapes" if len(np.unique(x)) < MIN_DISTINCT_X
                                or len(keys) < 2 * MIN_POINTS_PER_PARAMETER else "constant rate fits best")
        else:
            c0, cb, cf = params
            mnk = fam.mnkb
            item = {"family": fam_name, "dtype": dt, "model": "terms", "flop_term": cand.flop_term,
                    "tile": list(cand.tile) if cand.tile else [128, 128], "cus": int(fam.cus or 1),
                    "s_per_call": _sig(c0), "s_per_byte": _sig(cb), "s_per_flop": _sig(cf),
                    "m_min": _g(mnk[:, 0].min()), "m_max": _g(mnk[:, 0].max()), "n_min": _g(mnk[:, 1].min()),
                    "n_max": _g(mnk[:, 1].max()), "k_min": _g(mnk[:, 2].min()), "k_max": _g(mnk[:, 2].max()),
                    "fit": quality}
        if cv is not None:
            item["cv"] = cv
        item["kernels"] = sorted({k[:160] for ss in shapes.values() for s in ss for k in s.kernels})[:8]
        item["samples"] = [{**dict(k), "calls": len(shapes[k]), "time_s": _g(tt),
                            ("flops" if gemm else "bytes"): _g(w), "rel_residual": _g(rr)}
                           for k, tt, w, rr in zip(keys, t, work, rel, strict=True)]
        fits.append(item)
    return {"model": "gemm: the candidate of least leave-shape-out error among time = work / (peak * x / "
                     "(x + x_half)) (x = min(M, N) rows, m_half) and time = s_per_call + s_per_byte * bytes + "
                     "s_per_flop * F (F: 2 B M N K FLOP, or padded to whole tiles, or to whole waves of tiles); "
                     "embedding_bag, elementwise: the saturating curve in bytes moved (bytes_half)",
            "sources": list(sources), "fits": fits,
            "skipped": {k: int(v) for k, v in sorted(skipped.items())}}


__all__ = ["Candidate", "DenseSample", "dense_section", "fit_saturating", "gemm_candidates", "gemm_shape",
           "nnls_relative", "read_dense_samples", "select_model"]
