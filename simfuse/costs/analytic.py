"""Analytic roofline cost model built from a :class:`~simfuse.spec.DeviceSpec`."""

from __future__ import annotations

import math

from ..spec import DeviceSpec
from .base import KernelWork

#: A single compute unit can pull at most this multiple of its fair share of HBM bandwidth
#: (limited outstanding requests per CU, Little's law).  Matters only for partial waves.
PER_CU_BW_HEADROOM = 2.0


class RooflineCostModel:
    """Roofline per workgroup.

    With ``n`` workgroups resident, spread evenly over the compute units, each workgroup gets
    ``peak_flops * flops_efficiency / CUs / wgs_per_cu`` FLOP/s and ``min(HBM_eff / n, headroom * HBM_eff / CUs /
    wgs_per_cu)`` bytes/s; its time is the larger of its FLOP and byte terms (no overlap credit is lost).
    ``hbm_share`` (0..1) is the fraction of HBM bandwidth left to compute (the rest is taken by outgoing
    communication in fused kernels).
    """

    def __init__(self, device: DeviceSpec, hbm_share: float = 1.0):
        self.device = device
        self.hbm_share = hbm_share

    def slots(self, work: KernelWork) -> int:
        per_cu = work.max_wgs_per_cu or self.device.max_workgroups_per_cu
        return self.device.compute_units * max(1, per_cu)

    def workgroup_time_s(self, work: KernelWork, concurrent_wgs: int) -> float:
        dev = self.device
        n = max(1, min(concurrent_wgs, self.slots(work)))
        per_cu = max(1, math.ceil(n / dev.compute_units))
        flop_rate = dev.flops(work.dtype) * dev.flops_efficiency / dev.compute_units / per_cu
        hbm = dev.hbm_bw_bytes_per_s * dev.hbm_efficiency * self.hbm_share
        byte_rate = min(hbm / n, PER_CU_BW_HEADROOM * hbm / dev.compute_units / per_cu)
        t_flops = work.flops_per_wg / flop_rate if work.flops_per_wg > 0 else 0.0
        t_bytes = work.bytes_per_wg / byte_rate if work.bytes_per_wg > 0 else 0.0
        return max(t_flops, t_bytes)

    def launch_latency_s(self, work: KernelWork) -> float:
        return self.device.kernel_launch_latency_s
