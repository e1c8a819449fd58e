"""Analytic roofline cost model built from a :class:`~simfuse.spec.DeviceSpec`."""

from __future__ import annotations

import math

from ..spec import DeviceSpec
from .base import KernelWork

#: A single compute unit can pull at most this multiple of its fair share of HBM bandwidth
#: (limited outstanding requests per CU, Little's law).  Matters only for partial waves.
PER_CU_BW_HEADROOM = 2.0


def gemm_curve_time_s(device: DeviceSpec, work: KernelWork) -> float | None:
    """Kernel time (s, launch latency excluded) of a plain GEMM under the device's measured small-M efficiency
    curve (``device.gemm_efficiency``, :class:`~simfuse.spec.topology.GemmEfficiencySpec`), or None where the
    curve does not apply (no curve, not a plain ``gemm`` with an ``(m, n, k)`` shape, or more rows than the
    curve's last point: the tiled model prices those unchanged).

        time = max(floor_s - graph_launch_s, overhead_s + roofline_s / eff(M))

    ``roofline_s`` is the whole GEMM's ``max(2 M N K / (peak x flops_efficiency), unique bytes / (HBM x
    hbm_efficiency))`` (no tile padding: the curve was measured against the real FLOP and bytes).  The curve was
    measured as per-call shares of CUDA-graph replays (``experiments/gpu_campaigns/gemm_small_m.py``), so its floor contains
    the device's in-graph launch latency (``DeviceSpec.graph_launch_s``), which is subtracted here; the engine
    then charges the launch latency of the run (eager or graph) before the kernel."""
    curve = device.gemm_efficiency
    if curve is None or work.name != "gemm" or work.variant != "compute" or work.dtype != curve.dtype or \
            work.impl != "library":
        return None
    shape = work.shape_dict()
    m, n, k = (float(shape.get(key) or 0.0) for key in ("m", "n", "k"))
    if not (m > 0 and n > 0 and k > 0) or m > curve.m_max:
        return None
    t_flops = 2.0 * m * n * k / (device.flops(work.dtype) * device.flops_efficiency)
    t_bytes = work.total_bytes / (device.hbm_bw_bytes_per_s * device.hbm_efficiency)
    return max(curve.floor_s - device.graph_launch_s, curve.overhead_s + max(t_flops, t_bytes) / curve.efficiency(m))


def strided_factor(device: DeviceSpec, work: KernelWork) -> float:
    """Time multiplier of a strided copy kernel (``shape`` flag ``strided``: the DLRM concat copies) whose bytes
    exceed the L2, from the device's measured ``strided_copy`` rate; 1.0 for every other kernel."""
    if device.strided_copy is None or not dict(work.shape).get("strided"):
        return 1.0
    return device.strided_copy.factor(device.hbm_efficiency, work.total_bytes)


def spread_over_waves_s(kernel_time_s: float, work: KernelWork, concurrent_wgs: int) -> float:
    """Per-workgroup time that makes the engine's waves of ``concurrent_wgs`` workgroups add up to the kernel
    time (``n / W`` of it per wave of ``n``)."""
    w = max(1, int(work.num_workgroups))
    return kernel_time_s * min(max(1, concurrent_wgs), w) / w


class RooflineCostModel:
    """Roofline per workgroup.

    With ``n`` workgroups resident, spread evenly over the compute units, each workgroup gets
    ``peak_flops * flops_efficiency / CUs / wgs_per_cu`` FLOP/s and ``min(HBM_eff / n, headroom * HBM_eff / CUs /
    wgs_per_cu)`` bytes/s; its time is the larger of its FLOP and byte terms (no overlap credit is lost).
    ``hbm_share`` (0..1) is the fraction of HBM bandwidth left to compute (the rest is taken by outgoing
    communication in fused kernels).  A plain GEMM within the device's measured small-M curve
    (``device.gemm_efficiency``) is priced by :func:`gemm_curve_time_s` instead.
    """

    def __init__(self, device: DeviceSpec, hbm_share: float = 1.0):
        self.device = device
        self.hbm_share = hbm_share

    def slots(self, work: KernelWork) -> int:
        per_cu = work.max_wgs_per_cu or self.device.max_workgroups_per_cu
        return self.device.compute_units * max(1, per_cu)

    def workgroup_time_s(self, work: KernelWork, concurrent_wgs: int) -> float:
        curve_t = gemm_curve_time_s(self.device, work)
        if curve_t is not None:
            return spread_over_waves_s(curve_t, work, concurrent_wgs)
        dev = self.device
        n = max(1, min(concurrent_wgs, self.slots(work)))
        per_cu = max(1, math.ceil(n / dev.compute_units))
        flop_rate = dev.flops(work.dtype) * dev.flops_efficiency / dev.compute_units / per_cu
        hbm = dev.hbm_bw_bytes_per_s * dev.hbm_efficiency * self.hbm_share
        byte_rate = min(hbm / n, PER_CU_BW_HEADROOM * hbm / dev.compute_units / per_cu)
        t_flops = work.flops_per_wg / flop_rate if work.flops_per_wg > 0 else 0.0
        t_bytes = work.bytes_per_wg / byte_rate if work.bytes_per_wg > 0 else 0.0
        return max(t_flops, t_bytes * strided_factor(dev, work))

    def launch_latency_s(self, work: KernelWork) -> float:
        return self.device.kernel_launch_latency_s

    def reduction_time_s(self, size_bytes: float) -> float:
        """At one workgroup's share of the device's effective HBM bandwidth (the reduction is bandwidth-bound:
        one add per element read)."""
        dev = self.device
        return size_bytes / (dev.hbm_bw_bytes_per_s * dev.hbm_efficiency / dev.compute_units)
