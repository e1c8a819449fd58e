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


class CalibratedCostModel:
    """:class:`~simfuse.costs.base.CostModel` from a calibration profile, roofline fallback otherwise.

    ``fits``: (kernel, variant, dtype) -> :class:`KernelFit`; ``fused_slowdown``: (kernel, dtype) -> ratio of
    fused to compute workgroup time; ``compute_units``: CUs seen in the traces (``None``: the device's).
    """

    def __init__(self, fits: dict[tuple[str, str, str], KernelFit], fallback: RooflineCostModel,
                 fused_slowdown: dict[tuple[str, str], float] | None = None, compute_units: int | None = None):
        self.fits = dict(fits)
        self.fallback = fallback
        self.fused_slowdown = dict(fused_slowdown or {})
        self.compute_units = compute_units or fallback.device.compute_units

    @classmethod
    def from_profile(cls, profile, fallback: RooflineCostModel) -> CalibratedCostModel:
        """Build from a :class:`simfuse.calibrate.profile.CalibrationProfile`."""
        return cls(profile.kernel_fits(), fallback, profile.fused_slowdown_map(), profile.compute_units)

    def lookup(self, work: KernelWork) -> tuple[KernelFit, float] | None:
        """The fit used for ``work`` and a time multiplier, or ``None`` (roofline fallback)."""
        name = trace_kernel_name(work.name)
        fit = self.fits.get((name, work.variant, work.dtype))
        if fit is not None:
            return fit, 1.0
        if work.variant == "fused":
            fit = self.fits.get((name, "compute", work.dtype))
            if fit is not None:
                return fit, self.fused_slowdown.get((name, work.dtype), 1.0)
        return None

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
