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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .analytic import PER_CU_BW_HEADROOM, RooflineCostModel
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


class CalibratedCostModel:
    """:class:`~simfuse.costs.base.CostModel` from a calibration profile, roofline fallback otherwise.

    ``fits``: (kernel, variant, dtype) -> :class:`KernelFit`; ``fused_slowdown``: (kernel, dtype) -> ratio of
    fused to compute workgroup time; ``compute_units``: CUs seen in the traces (``None``: the device's).
    """

    def __init__(self, fits: dict[tuple[str, str, str], KernelFit], fallback: RooflineCostModel,
                 fused_slowdown: dict[tuple[str, str], float] | None = None, compute_units: int | None = None,
                 ranges: dict[tuple[str, str], tuple[float, float, float, float]] | None = None,
                 extrapolation: float | None = EXTRAPOLATION_FACTOR):
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
        """Build from a :class:`simfuse.calibrate.profile.CalibrationProfile`."""
        return cls(profile.kernel_fits(), fallback, profile.fused_slowdown_map(), profile.compute_units,
                   traced_ranges(profile.points), extrapolation)

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
        found = self.lookup(work)
        return found[0].slots if found else self.fallback.slots(work)

    def workgroup_time_s(self, work: KernelWork, concurrent_wgs: int) -> float:
        found = self.lookup(work)
        if found is None:
            return self.fallback.workgroup_time_s(work, concurrent_wgs)
        fit, factor = found
        s_b, s_f = occupancy_scales(concurrent_wgs, fit.slots, self.compute_units, fit.bw_headroom)
        return factor * fit.time_s(work.requested_bytes_per_wg, work.flops_per_wg, s_b, s_f)

    def launch_latency_s(self, work: KernelWork) -> float:
        found = self.lookup(work)
        return found[0].launch_latency_s if found else self.fallback.launch_latency_s(work)
