"""Calibrated cost model: per-workgroup times fitted from measured kernel traces (``simfuse calibrate``).

For a kernel in the profile (matched by trace kernel name, variant and dtype; see :data:`KERNEL_NAME_MAP`) the
time of one workgroup at **full occupancy** (``slots`` resident) is

    wg_time_s = overhead_s + bytes_per_wg / bw_bytes_per_s + flops_per_wg / flops_per_s

(a term is absent when the fit dropped it).  With only ``n < slots`` workgroups resident (a partial wave) the
terms scale like the roofline model does:

* the FLOP term with the workgroups sharing one compute unit: ``s_f = ceil(n / CUs) / (slots / CUs)``;
* the byte term with the workgroups sharing HBM, limited by what one CU can pull (``headroom`` times its fair
  share; fitted per kernel when the traces have partial waves, else
  :data:`~simfuse.costs.analytic.PER_CU_BW_HEADROOM`): ``s_b = max(n / slots, s_f / headroom)``;
* the overhead term does not scale.

The same scale factors are applied when fitting, so fit and model agree.  A fitted kernel's ``slots`` (the
most programs seen resident) replace the device's and ``KernelWork.max_wgs_per_cu``; its ``launch_latency_s``
replaces the device's.  Kernels
not in the profile fall back to :class:`~simfuse.costs.analytic.RooflineCostModel`.  A ``fused`` kernel without
its own fit uses its ``compute`` fit times the measured fused/compute slowdown (1 if unmeasured).

Order for a plain ``gemm`` kernel: the profile's ``dense:`` fit (:class:`DenseFit`) where it covers the shape,
then the device's measured small-M curve (``device.gemm_efficiency``, :func:`~simfuse.costs.analytic.
gemm_curve_time_s`) up to its last row count, then the wave model, the classic fit and the roofline.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..errors import SimfuseError
from ..units import DTYPE_BYTES
from .analytic import (
    PER_CU_BW_HEADROOM,
    RooflineCostModel,
    gemm_curve_time_s,
    spread_over_waves_s,
    strided_factor,
)
from .base import KernelWork

#: Simulator ``KernelWork.name`` -> kernel name in the traces / profile.  Trace names map to themselves.
KERNEL_NAME_MAP = {
    "embedding_bag": "embedding_all_to_all",
    "gemv": "gemv_all_reduce",
    "gemm": "gemm_all_to_all",
}


def trace_kernel_name(work_name: str) -> str:
    """Profile/trace kernel name for a ``KernelWork.name`` (identity for names already in trace form)."""
    return KERNEL_NAME_MAP.get(work_name, work_name)


@dataclass(frozen=True)
class KernelFit:
    """Fitted per-workgroup model of one (kernel, variant, dtype).  ``None`` rates mean the term was dropped."""

    kernel: str
    variant: str
    dtype: str
    overhead_s: float
    bw_bytes_per_s: float | None
    flops_per_s: float | None
    slots: int
    launch_latency_s: float
    bw_headroom: float = PER_CU_BW_HEADROOM  # how far one CU can exceed its fair HBM share (partial waves)

    def full_occupancy_time_s(self, bytes_per_wg: float, flops_per_wg: float) -> float:
        return self.time_s(bytes_per_wg, flops_per_wg, 1.0, 1.0)

    def time_s(self, bytes_per_wg: float, flops_per_wg: float, byte_scale: float, flop_scale: float) -> float:
        t = self.overhead_s
        if self.bw_bytes_per_s:
            t += bytes_per_wg / self.bw_bytes_per_s * byte_scale
        if self.flops_per_s:
            t += flops_per_wg / self.flops_per_s * flop_scale
        return t


def occupancy_scales(concurrent_wgs: float, slots: int, compute_units: int | None,
                     headroom: float = PER_CU_BW_HEADROOM) -> tuple[float, float]:
    """(byte scale, FLOP scale) of a workgroup with ``concurrent_wgs`` resident, relative to full occupancy."""
    slots = max(1, int(slots))
    n = min(max(1.0, float(concurrent_wgs)), float(slots))
    cus = compute_units if compute_units and compute_units > 0 else slots
    per_cu_full = max(1.0, slots / cus)
    per_cu = max(1.0, math.ceil(n / cus - 1e-9))
    s_f = min(1.0, per_cu / per_cu_full)
    s_b = min(1.0, max(n / slots, s_f / headroom))
    return s_b, s_f


#: A calibrated fit is used only for workgroups whose bytes and FLOP lie within this factor of the traced
#: range; further out (e.g. GEMM tiles 100x thinner than any traced) the roofline is used instead.
EXTRAPOLATION_FACTOR = 4.0


def traced_ranges(points: list[dict]) -> dict[tuple[str, str], tuple[float, float, float, float]]:
    """(kernel, dtype) -> (min, max requested bytes per program, min, max FLOP per program) over the profile's
    kernel points (all variants)."""
    acc: dict[tuple[str, str], list[list[float]]] = {}
    for p in points or []:
        if p.get("kind") != "kernel" or not p.get("grid"):
            continue
        grid = float(p["grid"])
        key = (str(p.get("kernel")), str(p.get("dtype")))
        b = float(p.get("bytes") or 0.0) / grid
        f = float(p.get("flops") or 0.0) / grid
        acc.setdefault(key, [[], []])
        acc[key][0].append(b)
        acc[key][1].append(f)
    return {k: (min(v[0]), max(v[0]), min(v[1]), max(v[1])) for k, v in acc.items()}


# ------------------------------------------------------------------------------------------------ wave models
class UncalibratedConfig(SimfuseError, ValueError):
    """A kernel configuration the calibrated wave model refuses to price (it lies where the model has no term for
    what the device does, e.g. register spilling): the message names the kernel, the quantity and the limit."""


# (fitted by simfuse.calibrate.wavefit; evaluated here so that simfuse.costs never imports simfuse.calibrate)
#: SMs of the device the wave models were measured on (H200); a fit stores its own.
CUS = 132

#: HBM access granularity of the embedding gather's ``per_dram_byte`` term: a gathered row costs its bytes rounded up
#: to this.  Chosen by the H200 campaign's leave-region-out CV among the L2 sector (32 B), 64 B and the 128 B line
#: (docs/calibration.md): only rows under 64 B (fp32 dim 8, 16-bit dim 16) pay more than their bytes.
DRAM_ATOM_BYTES = 64
#: Lookups per dependent-load step of the embedding kernel (``EmbeddingConfig.unroll``; the campaign and the
#: kernel default use 2) unless the shape says ``unroll``; bags gathered together per step (the kernel's ``SUB``).
EMB_UNROLL = 2
EMB_SUB_BAGS = 16
#: L2 cache of the H200 the wave models were measured on: 60 MiB (``torch.cuda.get_device_properties``, recorded in
#: docs/sources.md S9; NVIDIA's H100/H200 SXM product pages say 50 MB --
#: the device reports 60 MiB).
L2_BYTES = 60 * 2**20
#: Capacity a uniform random gather effectively hits in: the L2 is two partitions, each caching for the SMs next to
#: it (NVIDIA A100/H100 whitepapers, "L2 cache"), so a table read from every SM may be held twice.  A close call, not
#: decided by the nested CV: plain leave-region-out of the soft-max forms on the H200 campaigns preferred 60 MiB by
#: 0.1-0.5 points of median, half of it matches the v2 sweep's 128 MiB table better (docs/calibration.md).
L2_EFFECTIVE_BYTES = L2_BYTES // 2
#: Latency of a dependent row load that hits in L2, relative to one from HBM: a gather step of a table with hit
#: fraction ``h`` costs ``r + (1 - r)(1 - h)`` of a step of a large table (``per_step_l2``).  Chosen by the H200
#: campaigns' nested leave-region-out CV (docs/calibration.md); the v2 table-size sweep (fp32 dim 32, pooling 64,
#: 512 programs: latency-bound) gives 7.7 us of gather at 1-64 Ki rows against 16.5 us at 8 Mi rows, i.e. 0.47.
L2_LATENCY_RATIO = 0.5
#: Warps per embedding program when the shape does not say (``EmbeddingConfig.num_warps`` of the campaigns).
EMB_NUM_WARPS = 8


def l2_hit_fraction(table_rows: float, row_bytes: float, l2_bytes: float | None = None) -> float:
    """Expected L2 hit fraction of a uniform random row gather from a table of ``table_rows`` rows of
    ``row_bytes``: ``min(1, l2_bytes / table_bytes)`` (an LRU cache of that size holding a random subset of the
    rows); 0 when the table size is unknown (``table_rows`` 0 or missing: a table far larger than the L2, the
    behaviour of profiles before table sizes were modelled)."""
    tb = float(table_rows or 0.0) * float(row_bytes)
    cap = L2_EFFECTIVE_BYTES if l2_bytes is None else l2_bytes
    return 0.0 if tb <= 0 else min(1.0, float(cap) / tb)


def _pow2_floor_divisor(n: int) -> int:
    """The largest power of two dividing ``n`` (``n >= 1``)."""
    n = max(1, int(n))
    return n & -n


def _next_pow2(n: float) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1.0, float(n))) - 1e-9))


def embedding_layout(dim: float, elem_bytes: int, bags_per_program: float, num_warps: int) -> dict[str, float]:
    """How the embedding kernel (``simfuse/kernels/_triton.py`` ``embedding_kernel``) lays one gather load over a
    program's threads.  Each step loads a ``[SUB, BLOCK_D]`` tile (``SUB = min(bags per program, 16)`` bags,
    ``BLOCK_D = next_pow2(dim)`` columns, the columns ``>= dim`` masked off) with ``32 x num_warps`` threads, in
    Triton's blocked layout (Triton 3.6 ``Coalesce`` pass and ``BlockedEncodingAttr::get``, read, not measured):

    * elements per thread per load ``vec = min(16 B / element, largest power of two dividing dim, max(1, tile /
      threads))`` -- the row offset ``idx x dim`` is only known to be a multiple of dim's power-of-two factor, a
      load is at most 128 bits, and a tile smaller than the threads leaves each thread one element;
    * lanes fill the columns first: ``tpw_c = min(32, BLOCK_D / vec)`` lanes across, the rest down the bags; warps
      likewise (``wpc_c = min(W, BLOCK_D / (vec tpw_c))``), so a thread covers a ``[rows_cta, cols_cta]`` CTA tile
      and issues ``ceil(SUB / rows_cta) x ceil(BLOCK_D / cols_cta)`` vector loads per tile (1 when the CTA tile is
      larger than the tile: replicated lanes).

    Returns ``block_d``, ``sub``, ``vec``, ``loads_per_thread`` (vector loads per thread per tile),
    ``useful_lane_fraction`` (requested elements / element slots of those loads: masked columns, replication) and
    ``acc_per_thread`` (fp32 accumulator elements per thread, ``SUB x BLOCK_D / threads``: what spills)."""
    d = max(1, int(round(float(dim))))
    block_d = _next_pow2(d)
    sub = int(min(max(1.0, float(bags_per_program)), float(EMB_SUB_BAGS)))
    sub = _next_pow2(sub)  # tl.arange needs a power of two (the campaigns' bags per program are 1-16)
    w = max(1, int(num_warps))
    threads = 32 * w
    elems = sub * block_d
    vec = max(1, min(16 // max(1, int(elem_bytes)), _pow2_floor_divisor(d), max(1, elems // threads)))
    tpw_c = min(32, max(1, block_d // vec))
    tpw_r = 32 // tpw_c
    wpc_c = min(w, max(1, block_d // (vec * tpw_c)))
    wpc_r = w // wpc_c
    rows_cta, cols_cta = tpw_r * wpc_r, vec * tpw_c * wpc_c
    loads = math.ceil(sub / rows_cta) * math.ceil(block_d / cols_cta)
    useful = sub * d / (loads * threads * vec)
    return {"block_d": float(block_d), "sub": float(sub), "vec": float(vec), "loads_per_thread": float(loads),
            "useful_lane_fraction": float(useful), "acc_per_thread": float(elems) / threads}


#: Bags per program when neither the shape nor the work terms say (``EmbeddingConfig.bags_per_program`` default).
EMB_BAGS_PER_PROGRAM = 8


#: Work terms of the dependent-step chain (the wave models' latency slot) that a per-layout factor scales.
LATENCY_FEATURES = frozenset({"per_step", "per_step_l2"})


def layout_key_of(feats: dict[str, float]) -> str:
    """:func:`layout_key` of a program from its work terms (``layout_block_d``, ``layout_sub``, ``layout_warps``)."""
    return f"{int(feats['layout_block_d'])}x{int(feats['layout_sub'])}x{int(feats['layout_warps'])}"


def layout_factor(factors: dict[str, float], key: str) -> float:
    """``factors[key]``; else the factor of the same bags and warps at the nearest row width (in log; a tie: the
    wider), else 1.0 (the rule ``WaveFit.slots_for`` uses for slots)."""
    if key in factors:
        return float(factors[key])
    bd, rest = key.split("x", 1)
    same = [(int(k.split("x", 1)[0]), v) for k, v in factors.items() if k.split("x", 1)[1] == rest]
    if not same:
        return 1.0
    return float(min(same, key=lambda kv: (abs(math.log(kv[0] / int(bd))), -kv[0]))[1])


def layout_key(dim: float, bags_per_program: float, num_warps: float) -> str:
    """``"BLOCK_DxSUBxWARPS"`` of an embedding launch configuration: what its compiled kernel -- and so its registers,
    shared memory and resident programs -- depends on (``embedding_kernel``'s constexprs: ``BLOCK_D = next_pow2(dim)``,
    ``SUB = min(bags per program, 16)`` rounded up to a power of two, and the warps)."""
    sub = _next_pow2(min(max(1.0, float(bags_per_program)), float(EMB_SUB_BAGS)))
    return f"{_next_pow2(max(1.0, float(dim)))}x{sub}x{max(1, int(round(float(num_warps))))}"


def features(kernel: str, flops: float, nbytes: float, shape: dict, dtype: str | None = None) -> dict[str, float]:
    """Per-program work terms of one program of ``kernel`` (FLOP, requested bytes, operator shape, dtype)."""
    f = {"per_program": 1.0, "per_byte": float(nbytes)}
    if kernel == "embedding_all_to_all":
        d = float(shape.get("dim") or 1)
        p = float(shape.get("pooling") or 0)
        if not p and shape.get("lookups") and shape.get("bags"):  # kernel-trace / held-out shapes
            p = float(shape["lookups"]) / float(shape["bags"])
        p = p or 1.0
        rows = flops / d
        row_b = d * DTYPE_BYTES.get(dtype or "fp32", 4)
        # HBM bytes: gathered rows at the access granularity, their int64 indices, the pooled rows written
        bags = rows / p
        unroll = float(shape.get("unroll") or EMB_UNROLL)
        # dependent load steps: each step gathers ``unroll`` lookups of up to 16 bags (the kernel's sub-block)
        steps = math.ceil(p / unroll - 1e-9) * math.ceil(bags / EMB_SUB_BAGS - 1e-9)
        gathered = rows * math.ceil(row_b / DRAM_ATOM_BYTES - 1e-9) * DRAM_ATOM_BYTES
        dram = gathered + rows * 8.0 + rows / p * row_b
        # table size (rows per table, ``shape["rows"]``): the gathered rows that hit in L2 do not reach HBM
        h = l2_hit_fraction(shape.get("rows") or 0.0, row_b)
        warps = float(shape.get("num_warps") or EMB_NUM_WARPS)
        lay = embedding_layout(d, DTYPE_BYTES.get(dtype or "fp32", 4), bags, int(warps))
        # per thread: steps x unroll tile loads of ``loads_per_thread`` vector loads each (the layout's padded work)
        warp_ld = float(steps) * unroll * lay["loads_per_thread"]
        # requested HBM bytes (rows at their own size, indices, pooled rows written), less the rows' L2 hits
        raw = rows * row_b * (1.0 - h) + rows * 8.0 + rows / p * row_b
        f.update(per_row=rows, per_bag=bags, per_step=float(steps), per_dram_byte=dram,
                 per_row_hbm=rows * (1.0 - h), per_raw_byte=raw,
                 per_l2_byte=dram, per_hbm_byte=dram - h * gathered,
                 per_step_l2=float(steps) * (L2_LATENCY_RATIO + (1.0 - L2_LATENCY_RATIO) * (1.0 - h)),
                 per_warp_byte=dram / warps, l2_hit=h, per_warp_ld=warp_ld, per_sm_ld=warp_ld * warps,
                 acc_per_thread=lay["acc_per_thread"])
        # the compiled configuration (:func:`layout_key`), for the per-layout latency factors of a wave model
        bd, sb, nw = (float(x) for x in layout_key(d, bags, warps).split("x"))
        f.update(layout_block_d=bd, layout_sub=sb, layout_warps=nw)
    elif kernel == "gemv_all_reduce":
        tokens = float(shape.get("tokens") or 1)
        rows = float(shape.get("rows_per_wg") or shape.get("block_n") or 1)
        # the fp32 partial slots the tile's last-arriving program sums (split-k x ranks in the bundled kernel:
        # ``world * SPLIT_K`` volatile loads after an acq_rel counter; 1 = its own partial, no split)
        f.update(per_k=float(shape.get("k_per_wg") or flops / (2.0 * tokens * rows)),
                 per_slot=float(shape.get("reduce_slots") or 1.0))
    elif kernel == "gemm_all_to_all":
        f.update(per_k=float(shape.get("k") or 0.0), per_flop=float(flops))
    return f


def sigma(kind: str, n: float, slots: int, cus: int = CUS) -> float:
    if kind == "fixed":
        return 1.0
    n = min(max(1.0, float(n)), float(slots))
    cu = math.ceil(n / cus - 1e-9) / max(1, math.ceil(slots / cus - 1e-9))
    if kind == "cu":
        return min(1.0, cu)
    h = float(kind[3:])  # devH
    return min(1.0, max(n / slots, cu / h))


def load(kind: str, n: float, slots: int, cus: int = CUS) -> float:
    """Multiplier of a term's per-program work in a wave of ``n`` resident programs: ``sigma`` times, for the
    throughput terms (every kind but ``fixed``), the programs per SM at full occupancy (``slots / CUs``) -- so that
    their coefficient is a per-SM cost (seconds per byte or FLOP of one SM) that does not change with a
    configuration's occupancy: a bandwidth-bound launch then takes total bytes / bandwidth whatever its slots."""
    s = sigma(kind, n, slots, cus)
    return s if kind == "fixed" else s * slots / cus


def waves(grid: int, slots: int) -> list[tuple[int, int]]:
    """[(programs resident, number of such waves)]."""
    full, rest = divmod(int(grid), int(slots))
    out = [(slots, full)] if full else []
    if rest:
        out.append((rest, 1))
    return out


def term_feature(key: str) -> str:
    """The work term (:func:`features` key) a wave-model term prices: its key up to an ``@`` (``per_row@dev16``
    is the per-row work with a second, throughput scaling; plain keys price themselves)."""
    return key.split("@", 1)[0]


def soft_max(values, order: float) -> float:
    """``(sum v^k)^(1/k)`` of non-negative ``values``: the sum at ``k = 1``, tending to the max as ``k`` grows (a
    program runs at the slowest of its limits -- latency chain, per-program memory parallelism, HBM share --
    with a smooth knee where two are close)."""
    vals = [float(v) for v in values if v > 0.0]
    if not vals:
        return 0.0
    top = max(vals)
    return top * sum((v / top) ** order for v in vals) ** (1.0 / order)


@dataclass(frozen=True)
class WaveFit:
    """Fitted wave model of one (kernel, variant, dtype).  ``terms``: term -> (sigma kind, seconds per unit).

    A program's time is the sum of its terms (``max_terms`` empty: the linear model of profiles before issue 12),
    or the sum of the terms outside ``max_terms`` plus the soft maximum of order ``max_order`` (:func:`soft_max`)
    of those in it: ``sum_add c_j phi_j L_j(n) + (sum_max (c_j phi_j L_j(n))^k)^(1/k)``."""

    kernel: str
    variant: str
    dtype: str
    slots: int
    launch_s: float
    terms: dict[str, tuple[str, float]]
    cus: int = CUS
    #: quantiles of log(measured / predicted) over the leave-region-out predictions: {"p10": .., "p50": .., "p90": ..}
    residual_log_quantiles: dict[str, float] = field(default_factory=dict)
    cv: dict = field(default_factory=dict)  # leave-region-out summary (median/max |error| overall and per region)
    #: every leave-region-out log(measured / predicted), sorted: the law :meth:`CalibratedCostModel.draw` samples
    residual_logs: tuple[float, ...] = ()
    #: embedding: slots per row width (registers grow with the dim: 1056 programs up to dim 128, 264 at 1024) of the
    #: default 8-bag, 8-warp configuration (profiles before issue 12's fifth pass; the fallback of ``slots_by_layout``)
    slots_by_dim: dict[int, int] = field(default_factory=dict)
    #: terms combined by a soft maximum instead of summed (empty: every term summed)
    max_terms: tuple[str, ...] = ()
    #: order ``k`` of that soft maximum (1 = sum; larger = closer to the plain max)
    max_order: float = 1.0
    #: embedding: the most fp32 accumulator elements per thread (:func:`embedding_layout` ``acc_per_thread``) of
    #: any configuration the model was fitted on; a launch beyond it would spill registers into local memory,
    #: which no term prices, and is refused (:meth:`rejection`).  0: no limit (profiles before issue 12's fourth
    #: pass).
    max_acc_per_thread: float = 0.0
    #: embedding: resident programs per launch configuration (:func:`layout_key` -> slots), from the compiled kernels'
    #: registers, shared memory and warps (``wavefit.occupancy_slots``) of the campaign launches; empty: by dim only
    slots_by_layout: dict[str, int] = field(default_factory=dict)
    #: embedding: per compiled configuration (:func:`layout_key`), a factor on the latency terms (the dependent-step
    #: chain, :data:`LATENCY_FEATURES`): the chain's time per step measured per compiled kernel, fitted with the
    #: other coefficients (``wavefit.fit_layout_factors``); a layout not in it takes the nearest row width's of
    #: the same bags and warps, else 1.  Empty: no factors (profiles before issue 12's sixth pass).
    latency_by_layout: dict[str, float] = field(default_factory=dict)

    def __post_init__(self):
        unknown = [t for t in self.max_terms if t not in self.terms]
        if unknown:
            raise ValueError(f"max_terms {unknown} are not in terms {sorted(self.terms)}")
        if not (math.isfinite(self.max_order) and self.max_order >= 1.0):
            raise ValueError(f"max_order {self.max_order!r} must be a finite number >= 1")
        if not (math.isfinite(self.max_acc_per_thread) and self.max_acc_per_thread >= 0.0):
            raise ValueError(f"max_acc_per_thread {self.max_acc_per_thread!r} must be a finite number >= 0")
        for k, v in self.slots_by_layout.items():
            parts = str(k).split("x")
            if len(parts) != 3 or not all(x.isdigit() and int(x) >= 1 for x in parts) or int(v) < 1:
                raise ValueError(f"slots_by_layout entry {k!r}: {v!r}: expected 'BLOCK_DxSUBxWARPS' (positive "
                                 f"integers) -> resident programs >= 1")
        for k, v in self.latency_by_layout.items():
            parts = str(k).split("x")
            if (len(parts) != 3 or not all(x.isdigit() and int(x) >= 1 for x in parts)
                    or not (math.isfinite(float(v)) and float(v) > 0.0)):
                raise ValueError(f"latency_by_layout entry {k!r}: {v!r}: expected 'BLOCK_DxSUBxWARPS' (positive "
                                 f"integers) -> a finite factor > 0")

    def latency_factor(self, feats: dict[str, float]) -> float:
        """The :data:`latency_by_layout` factor of a program with work terms ``feats`` (1.0 without factors)."""
        if not self.latency_by_layout or not feats.get("layout_block_d"):
            return 1.0
        return layout_factor(self.latency_by_layout, layout_key_of(feats))

    def rejection(self, feats: dict[str, float]) -> str | None:
        """Why this model refuses to price a program with work terms ``feats`` (None: it prices it).  An embedding
        configuration whose accumulator tile needs more registers per thread than any fitted configuration
        (``max_acc_per_thread``) spills to local memory on the device (H200 campaigns: 46-1,482 spilled registers
        and up to 10x the time at 128-256 elements per thread, 0-6 spills at <= 64), which no term models."""
        acc = float(feats.get("acc_per_thread", 0.0))
        if self.max_acc_per_thread > 0.0 and acc > self.max_acc_per_thread * (1.0 + 1e-9):
            return (f"{self.kernel}/{self.variant}/{self.dtype}: {acc:g} fp32 accumulator elements per thread "
                    f"(bags per program (at most 16) x next_pow2(dim) / (32 x num_warps)) exceed the "
                    f"{self.max_acc_per_thread:g} of any calibrated configuration: the kernel would spill "
                    f"registers to local memory, which the wave model does not price; use more warps or fewer "
                    f"bags per program")
        return None

    def slots_for(self, shape: dict | None = None, feats: dict | None = None) -> int:
        """Resident programs for a launch of this shape.  Embedding: the measured configuration of the same compiled
        layout (:data:`slots_by_layout`; bags per program from ``shape['bags_per_wg']`` or the work terms'
        ``per_bag``, warps from ``shape['num_warps']``, defaults :data:`EMB_BAGS_PER_PROGRAM` and
        :data:`EMB_NUM_WARPS`), else of the same bags and warps at the nearest row width (in log; a tie: the wider,
        fewer slots), else the default configuration's at the nearest measured dim (``slots_by_dim``)."""
        shape = shape or {}
        d = float(shape.get("dim") or 0)
        if self.slots_by_layout and d > 0:
            bags = float(shape.get("bags_per_wg") or (feats or {}).get("per_bag") or EMB_BAGS_PER_PROGRAM)
            key = layout_key(d, bags, float(shape.get("num_warps") or EMB_NUM_WARPS))
            if key in self.slots_by_layout:
                return int(self.slots_by_layout[key])
            bd, rest = key.split("x", 1)
            same = [(int(k.split("x", 1)[0]), v) for k, v in self.slots_by_layout.items() if k.split("x", 1)[1] == rest]
            if same:
                return int(min(same, key=lambda kv: (abs(math.log(kv[0] / int(bd))), -kv[0]))[1])
        if not self.slots_by_dim or d <= 0:
            return self.slots
        best = min(self.slots_by_dim, key=lambda k: (abs(math.log(k / d)), k))
        return int(self.slots_by_dim[best])

    def program_time_s(self, feats: dict[str, float], n: float, slots: int | None = None) -> float:
        s = slots or self.slots

        lat = self.latency_factor(feats)

        def u(t: str) -> float:
            kind, c = self.terms[t]
            f = feats.get(term_feature(t), 0.0) * (lat if term_feature(t) in LATENCY_FEATURES else 1.0)
            return c * f * load(kind, n, s, self.cus)

        add = sum(u(t) for t in self.terms if t not in self.max_terms)
        return add + soft_max([u(t) for t in self.max_terms], self.max_order) if self.max_terms else add

    def launch_time_s(self, grid: int, feats: dict[str, float], slots: int | None = None) -> float:
        s = slots or self.slots
        return self.launch_s + sum(k * self.program_time_s(feats, n, s) for n, k in waves(grid, s))

    def to_dict(self) -> dict:
        d = {"kernel": self.kernel, "variant": self.variant, "dtype": self.dtype, "slots": int(self.slots),
             "cus": int(self.cus), "launch_s": _g(self.launch_s),
             "terms": {t: {"sigma": k, "s_per_unit": _g(c)} for t, (k, c) in self.terms.items()}}
        if self.max_terms:  # written only for the soft-max form: linear profiles keep their old layout
            d.update(max_terms=list(self.max_terms), max_order=_g(self.max_order))
        if self.max_acc_per_thread:
            d.update(max_acc_per_thread=_g(self.max_acc_per_thread))
        if self.slots_by_layout:
            d.update(slots_by_layout={str(k): int(v) for k, v in sorted(self.slots_by_layout.items())})
        if self.latency_by_layout:
            d.update(latency_by_layout={str(k): _g(v) for k, v in sorted(self.latency_by_layout.items())})
        d.update({"residual_log_quantiles": {k: _g(v) for k, v in self.residual_log_quantiles.items()},
                  "residual_logs": [_g(x) for x in self.residual_logs],
                  "slots_by_dim": {int(k): int(v) for k, v in sorted(self.slots_by_dim.items())}, "cv": self.cv})
        return d

    @classmethod
    def from_dict(cls, d: dict) -> WaveFit:
        mt = d.get("max_terms") or ()
        if isinstance(mt, str) or not isinstance(mt, (list, tuple)):
            raise ValueError(f"max_terms must be a list of term names, got {mt!r}")
        return cls(str(d["kernel"]), str(d["variant"]), str(d["dtype"]), int(d["slots"]), float(d["launch_s"]),
                   {t: (str(v["sigma"]), float(v["s_per_unit"])) for t, v in (d.get("terms") or {}).items()},
                   int(d.get("cus", CUS)), {k: float(v) for k, v in (d.get("residual_log_quantiles") or {}).items()},
                   dict(d.get("cv") or {}), tuple(sorted(float(x) for x in d.get("residual_logs") or ())),
                   {int(k): int(v) for k, v in (d.get("slots_by_dim") or {}).items()},
                   tuple(str(t) for t in mt), float(d.get("max_order", 1.0)),
                   float(d.get("max_acc_per_thread", 0.0)),
                   {str(k): int(v) for k, v in (d.get("slots_by_layout") or {}).items()},
                   {str(k): float(v) for k, v in (d.get("latency_by_layout") or {}).items()})

    def scaled(self, factor: float) -> WaveFit:
        """The same model with every time (launch and program) multiplied by ``factor`` (the soft maximum is
        homogeneous of degree 1: scaling its terms scales it)."""
        from dataclasses import replace

        return replace(self, launch_s=self.launch_s * factor,
                       terms={t: (k, c * factor) for t, (k, c) in self.terms.items()})


def _quantile_factor(logs: tuple[float, ...], q: float) -> float:
    """exp of the ``q`` quantile (linear interpolation) of sorted log residuals; 1.0 when there are none."""
    if not logs:
        return 1.0
    pos = min(max(q, 0.0), 1.0) * (len(logs) - 1)
    i = int(math.floor(pos))
    j = min(i + 1, len(logs) - 1)
    return math.exp(logs[i] + (logs[j] - logs[i]) * (pos - i))


def _g(x: float) -> float:
    return float(f"{float(x):.6g}")




#: kinds of the FLOP term of a shape-aware GEMM model (:func:`gemm_flop_term`)
GEMM_FLOP_TERMS = ("flops", "tile", "wave")


def gemm_flop_term(kind: str, m: float, n: float, k: float, batch: float = 1.0, tile: tuple[int, int] = (128, 128),
                   cus: int = CUS) -> float:
    """FLOP a GEMM call is charged in a shape-aware dense model (:class:`DenseFit` ``model="terms"``).

    ``flops``: ``2 B M N K``.  ``tile``: every ``tile_m x tile_n`` output tile costs a whole tile (padding of
    the edge tiles).  ``wave``: tiles run in waves of ``cus`` (one per SM) and every wave costs a whole wave of
    full tiles (wave quantisation: a GEMM of 8 tiles takes as long as one of 132)."""
    if kind == "flops":
        return 2.0 * batch * m * n * k
    bm, bn = tile
    tiles = batch * math.ceil(m / bm) * math.ceil(n / bn)
    if kind == "tile":
        return tiles * 2.0 * bm * bn * k
    if kind == "wave":
        return math.ceil(tiles / cus) * cus * 2.0 * bm * bn * k
    raise ValueError(f"unknown GEMM FLOP term {kind!r}")


@dataclass(frozen=True)
class DenseFit:
    """Whole-kernel model of one dense family (``gemm``, ``elementwise``) and dtype, fitted from profiler traces
    (``dense:`` in a profile; :mod:`simfuse.calibrate.dense`).

    ``model="saturating"``: ``time = work / (peak * x / (x + x_half))`` with ``x = min(M, N)`` and ``work = 2 M N K``
    FLOP for GEMMs, ``x = work = bytes moved`` otherwise; used for ``x >= x_min / EXTRAPOLATION_FACTOR`` (above the
    traced range the curve is saturated).

    ``model="terms"`` (GEMMs): ``time = s_per_call + s_per_byte * bytes + s_per_flop * F`` with ``bytes`` the
    unique bytes of the operands and the output and ``F`` the :func:`gemm_flop_term` of kind ``flop_term`` (tile
    ``tile_m x tile_n``, ``cus`` SMs); used where each of M, N and K lies within ``EXTRAPOLATION_FACTOR`` of the
    traced range (``ranges``: (m_min, m_max, n_min, n_max, k_min, k_max))."""

    family: str
    dtype: str
    peak_per_s: float  # FLOP/s (gemm) or bytes/s
    x_half: float
    x_min: float
    x_max: float
    model: str = "saturating"
    s_per_call: float = 0.0
    s_per_byte: float = 0.0
    s_per_flop: float = 0.0
    flop_term: str = "flops"
    tile: tuple[int, int] = (128, 128)
    cus: int = CUS
    ranges: tuple[float, float, float, float, float, float] | None = None

    def in_range(self, work: KernelWork, factor: float | None) -> bool:
        """Whether ``work`` lies within ``factor`` of the traced sizes (None: always)."""
        shape = work.shape_dict()
        if self.family == "gemm":
            m, n, k = (float(shape.get(key) or 0.0) for key in ("m", "n", "k"))
        if factor is None:
            return True
        if self.model == "terms" and self.ranges is not None:
            lo_hi = zip(self.ranges[0::2], self.ranges[1::2], strict=True)
            return all(lo / factor <= v <= hi * factor for v, (lo, hi) in zip((m, n, k), lo_hi, strict=True))
        x = min(m, n) if self.family == "gemm" else float(shape.get("bytes") or work.total_bytes)
        return x >= self.x_min / factor

    def kernel_time_s(self, work: KernelWork) -> float | None:
        """Kernel time (s, launch latency excluded) of ``work``, or None when its shape is not known."""
        shape = work.shape_dict()
        if self.family == "gemm":
            m, n, k = (float(shape.get(key) or 0.0) for key in ("m", "n", "k"))
            if not (m and n and k):
                return None
            if self.model == "terms":
                return (self.s_per_call + self.s_per_byte * work.total_bytes
                        + self.s_per_flop * gemm_flop_term(self.flop_term, m, n, k, 1.0, self.tile, self.cus))
            x, amount = min(m, n), 2.0 * m * n * k
        else:
            amount = float(shape.get("bytes") or work.total_bytes)
            x = amount
        if amount <= 0:
            return 0.0
        return amount / (self.peak_per_s * x / (x + self.x_half))


class CalibratedCostModel:
    """:class:`~simfuse.costs.base.CostModel` from a calibration profile, roofline fallback otherwise.

    ``fits``: (kernel, variant, dtype) -> :class:`KernelFit`; ``fused_slowdown``: (kernel, dtype) -> ratio of
    fused to compute workgroup time; ``compute_units``: CUs seen in the traces (``None``: the device's).
    """

    def __init__(self, fits: dict[tuple[str, str, str], KernelFit], fallback: RooflineCostModel,
                 fused_slowdown: dict[tuple[str, str], float] | None = None, compute_units: int | None = None,
                 ranges: dict[tuple[str, str], tuple[float, float, float, float]] | None = None,
                 extrapolation: float | None = EXTRAPOLATION_FACTOR,
                 wave_fits: dict[tuple[str, str, str], WaveFit] | None = None,
                 dense_fits: dict[tuple[str, str], DenseFit] | None = None):
        self.wave_fits = dict(wave_fits or {})
        #: (family, dtype) -> whole-kernel model from profiler traces; takes precedence for ``gemm``/``elementwise``
        self.dense_fits = dict(dense_fits or {})
        self.fits = dict(fits)
        self.fallback = fallback
        self.fused_slowdown = dict(fused_slowdown or {})
        self.compute_units = compute_units or fallback.device.compute_units
        self.ranges = dict(ranges or {})
        self.extrapolation = extrapolation
        self.fallback_kernels: set[tuple[str, str]] = set()  # (kernel name, reason) that used the roofline

    @classmethod
    def from_profile(cls, profile, fallback: RooflineCostModel,
                     extrapolation: float | None = EXTRAPOLATION_FACTOR) -> CalibratedCostModel:
        """Build from a :class:`simfuse.profile.CalibrationProfile`."""
        return cls(profile.kernel_fits(), fallback, profile.fused_slowdown_map(), profile.compute_units,
                   traced_ranges(profile.points), extrapolation, getattr(profile, "wave_fits", None) or {},
                   getattr(profile, "dense", None) or {})

    # -------------------------------------------------------------------------------------------- wave models
    def wave_lookup(self, work: KernelWork) -> WaveFit | None:
        """The wave model used for ``work``: its own (kernel, variant, dtype), else for a fused kernel the compute
        one.  Wave models are used wherever they exist, with no range guard: they are cross-validated on
        predictions 4x outside the campaign's range along each axis (``cv`` in the profile)."""
        name = trace_kernel_name(work.name)
        w = self.wave_fits.get((name, work.variant, work.dtype))
        if w is None and work.variant == "fused":
            w = self.wave_fits.get((name, "compute", work.dtype))
        return w

    @staticmethod
    def wave_features(work: KernelWork) -> dict[str, float]:
        shape = dict(work.shape)
        name = trace_kernel_name(work.name)
        if name == "gemv_all_reduce" and not (shape.get("rows_per_wg") or shape.get("block_n")) and shape.get("n"):
            shape["rows_per_wg"] = float(shape["n"]) / max(1, work.num_workgroups)  # one program per row block
        return features(name, work.flops_per_wg, work.requested_bytes_per_wg, shape, work.dtype)

    def residual_quantiles(self, kernel: str, variant: str = "compute", dtype: str | None = None,
                           qs: tuple[float, ...] = (0.1, 0.5, 0.9)) -> dict[str, float]:
        """Prediction-interval factors of a kernel family: ``{"p10": f10, "p50": f50, "p90": f90}`` such that the
        measured time is ``f x`` the prediction at that quantile of the cross-validated (leave-region-out)
        residuals.  ``kernel`` may be a trace or a ``KernelWork`` name; ``dtype`` None = the first fitted one.
        All 1.0 for a perfect fit, or for a family without a wave model (no residuals known)."""
        name = trace_kernel_name(kernel)
        cands = [w for (k, v, d), w in sorted(self.wave_fits.items())
                 if k == name and v == variant and (dtype is None or d == dtype)]
        logs = cands[0].residual_logs if cands else ()
        return {f"p{round(q * 100)}": _quantile_factor(logs, q) for q in qs}

    def _with_waves(self, waves_: dict[tuple[str, str, str], WaveFit]) -> CalibratedCostModel:
        m = CalibratedCostModel(self.fits, self.fallback, self.fused_slowdown, self.compute_units, self.ranges,
                                self.extrapolation, waves_, self.dense_fits)
        return m

    def quantile_model(self, q: float) -> CalibratedCostModel:
        """This model with each wave-model family's times multiplied by its residual factor at quantile ``q``
        (e.g. 0.1 and 0.9: the p10 / p90 cost model; every family at the same quantile, an analytic bound)."""
        return self._with_waves({k: w.scaled(_quantile_factor(w.residual_logs, q)) for k, w in self.wave_fits.items()})

    def draw(self, rng) -> CalibratedCostModel:
        """A perturbed cost model for Monte Carlo: every wave-model family (kernel, variant, dtype) scaled by one
        factor ``exp(r)``, ``r`` drawn from its cross-validated residuals (``rng``: ``numpy.random.Generator`` or
        ``random.Random``; draws are in sorted-key order, so a fixed seed gives the same model).  Families without
        residuals are left as they are."""
        out = {}
        for k in sorted(self.wave_fits):
            w = self.wave_fits[k]
            if w.residual_logs:
                i = int(rng.integers(len(w.residual_logs))) if hasattr(rng, "integers") else \
                    rng.randrange(len(w.residual_logs))
                w = w.scaled(math.exp(w.residual_logs[i]))
            out[k] = w
        return self._with_waves(out)

    def in_range(self, work: KernelWork) -> bool:
        """Whether ``work``'s bytes and FLOP per workgroup lie within ``extrapolation`` times the traced range of
        its kernel (any variant); no range information counts as inside."""
        if self.extrapolation is None:
            return True
        rng = self.ranges.get((trace_kernel_name(work.name), work.dtype))
        if rng is None:
            return True
        b_lo, b_hi, f_lo, f_hi = rng
        x = self.extrapolation
        b, f = work.requested_bytes_per_wg, work.flops_per_wg
        return (b_lo / x <= b <= b_hi * x) and (f_lo / x <= f <= f_hi * x)

    def lookup(self, work: KernelWork) -> tuple[KernelFit, float] | None:
        """The fit used for ``work`` and a time multiplier, or ``None`` (roofline fallback: no fit, or the work
        is far outside the shapes the fit was traced on)."""
        name = trace_kernel_name(work.name)
        fit = self.fits.get((name, work.variant, work.dtype))
        factor = 1.0
        if fit is None and work.variant == "fused":
            fit = self.fits.get((name, "compute", work.dtype))
            factor = self.fused_slowdown.get((name, work.dtype), 1.0)
        if fit is None:
            return None
        if not self.in_range(work):
            self.fallback_kernels.add((name, "outside traced range"))
            return None
        return fit, factor

    def slots(self, work: KernelWork) -> int:
        w = self.wave_lookup(work)
        if w is not None:
            return w.slots_for(work.shape_dict(), self.wave_features(work))
        found = self.lookup(work)
        return found[0].slots if found else self.fallback.slots(work)

    def dense_time_s(self, work: KernelWork) -> float | None:
        """Whole-kernel time of a plain ``gemm`` / ``elementwise`` kernel from the profile's ``dense:`` fits, or
        None (no fit for its dtype, shape unknown, or below the traced sizes: the other models price it)."""
        if work.name not in ("gemm", "elementwise") or work.variant != "compute" or not self.dense_fits or \
                work.impl != "library":
            return None
        fit = self.dense_fits.get((work.name, work.dtype))
        if fit is None:
            return None
        if not fit.in_range(work, self.extrapolation):
            self.fallback_kernels.add((work.name, "outside the traced sizes of the dense fit"))
            return None
        return fit.kernel_time_s(work)

    def curve_time_s(self, work: KernelWork) -> float | None:
        """Kernel time of a plain GEMM from the device's small-M curve (``device.gemm_efficiency``) when no
        ``dense:`` fit of the profile prices it (profile fits win), else None.  Its launch latency is the device's
        (:meth:`launch_latency_s`); the curve's floor is net of the in-graph latency it was measured with."""
        device = getattr(self.fallback, "device", None)
        if work.name != "gemm" or device is None or device.gemm_efficiency is None or \
                self.dense_time_s(work) is not None:
            return None
        return gemm_curve_time_s(self.fallback.device, work)

    def reduction_time_s(self, size_bytes: float) -> float:
        """Not calibrated (no trace measures it): the roofline's."""
        return self.fallback.reduction_time_s(size_bytes)

    def workgroup_time_s(self, work: KernelWork, concurrent_wgs: int) -> float:
        t = self.dense_time_s(work)
        if t is not None:  # a strided copy beyond the L2 at the device's measured rate (device.strided_copy)
            t *= strided_factor(self.fallback.device, work)
        else:
            t = self.curve_time_s(work)
        if t is not None:
            # the engine runs waves of ``n`` workgroups; ``n / W`` of the kernel time each sums to the kernel time
            return spread_over_waves_s(t, work, concurrent_wgs)
        w = self.wave_lookup(work)
        if w is not None:
            factor = 1.0
            if work.variant == "fused" and w.variant != "fused":
                factor = self.fused_slowdown.get((w.kernel, work.dtype), 1.0)
            feats = self.wave_features(work)
            why = w.rejection(feats)
            if why is not None:
                raise UncalibratedConfig(f"{work.name}: {why}")
            return factor * w.program_time_s(feats, concurrent_wgs, w.slots_for(work.shape_dict(), feats))
        found = self.lookup(work)
        if found is None:
            return self.fallback.workgroup_time_s(work, concurrent_wgs)
        fit, factor = found
        s_b, s_f = occupancy_scales(concurrent_wgs, fit.slots, self.compute_units, fit.bw_headroom)
        return factor * fit.time_s(work.requested_bytes_per_wg, work.flops_per_wg, s_b, s_f)

    def launch_latency_s(self, work: KernelWork) -> float:
        # whole-kernel models (profiler kernel durations, the small-M curve net of the launch) take the device's
        if self.dense_time_s(work) is not None or self.curve_time_s(work) is not None:
            return self.fallback.launch_latency_s(work)
        w = self.wave_lookup(work)
        if w is not None:
            return w.launch_s
        found = self.lookup(work)
        return found[0].launch_latency_s if found else self.fallback.launch_latency_s(work)
