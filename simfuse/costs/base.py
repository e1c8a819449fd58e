"""Cost-model interface: how long does one workgroup of this kernel take on this device?

A kernel is a grid of identical workgroups (:class:`KernelWork`).  The engine asks the cost model for the
duration of one workgroup when ``concurrent_wgs`` workgroups are resident on the device at once (a full wave
or a partial last wave) and for the launch latency of the kernel.  Implementations: :class:`~simfuse.costs.
analytic.RooflineCostModel` (from the device spec) and ``simfuse.costs.calibrated.CalibratedCostModel`` (fitted
from measured traces, falling back to the roofline for kernels it has no data for).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class KernelWork:
    """A compute kernel as ``num_workgroups`` identical workgroups.

    ``name`` identifies the kernel family for calibrated lookups (``embedding_bag``, ``gemv``, ``gemm``,
    ``mlp``, ``elementwise`` ...); ``variant`` is ``compute`` for a plain kernel and ``fused`` for the compute
    part of a fused kernel (which may run slower: extra registers, stores to peers).  ``shape`` carries the
    operator parameters (for calibrated lookups and for traces).  Sizes are per workgroup, in FLOP and bytes.
    """

    name: str
    num_workgroups: int
    flops_per_wg: float
    bytes_per_wg: float
    dtype: str = "bf16"
    variant: str = "compute"
    shape: tuple[tuple[str, float], ...] = field(default=())
    max_wgs_per_cu: int | None = None  # occupancy limit of this kernel; None = the device's
    #: bytes one workgroup *requests* (its tiles' loads and stores, L2 hits included), the definition of
    #: ``bytes_per_program`` in kernel traces; None = ``bytes_per_wg``.  ``bytes_per_wg`` is HBM traffic (unique
    #: bytes, the roofline's input); calibrated models, fitted on traces, use the requested bytes.
    traffic_bytes_per_wg: float | None = None
    #: whose kernel: ``library`` (cuBLAS-like: the profile's ``dense:`` fits and the device's small-M GEMM curve,
    #: both measured on library GEMMs, price it) or ``simfuse`` (the bundled Triton kernel, compute or fused
    #: variant: its own wave models price it, so a fused operator's baseline is the same kernel unfused)
    impl: str = "library"

    @property
    def requested_bytes_per_wg(self) -> float:
        return self.bytes_per_wg if self.traffic_bytes_per_wg is None else self.traffic_bytes_per_wg

    @property
    def total_flops(self) -> float:
        return self.flops_per_wg * self.num_workgroups

    @property
    def total_bytes(self) -> float:
        return self.bytes_per_wg * self.num_workgroups

    def shape_dict(self) -> dict[str, float]:
        return dict(self.shape)


class CostModel(Protocol):
    """What the engine needs from a cost model.  All times in seconds."""

    def workgroup_time_s(self, work: KernelWork, concurrent_wgs: int) -> float:
        """Duration of one workgroup while ``concurrent_wgs`` workgroups (of this kernel) are resident."""
        ...

    def launch_latency_s(self, work: KernelWork) -> float:
        """Time from the launch call to the first workgroup starting."""
        ...

    def slots(self, work: KernelWork) -> int:
        """Workgroups of this kernel resident at once on one device (one full wave)."""
        ...

    def reduction_time_s(self, size_bytes: float) -> float:
        """One workgroup summing partials of ``size_bytes`` in all (read once) at the owner of a fused operator's
        output, beside the kernels (the two-phase operators' owner-side reductions)."""
        ...


class FusedFloor:
    """Cost-model adapter enforcing a physical invariant: a workgroup of a fused kernel (``variant="fused"``)
    never runs faster than the same workgroup of the plain kernel.  Fits of the two variants are made
    separately, so without the floor a calibrated fused kernel could come out slightly faster than its compute
    kernel (0.75% was seen).  Likewise its launch latency is never shorter and it never has more resident
    workgroups.  Everything else is delegated to the wrapped model.

    ``launch_override_s``: when set, every kernel's launch latency is this value (kernels replayed from a CUDA
    graph: the device's measured per-kernel gap inside a graph, ``DeviceSpec.graph_launch_s``) instead of the
    wrapped model's (eager launches; a calibration profile's per-family values)."""

    def __init__(self, inner, launch_override_s: float | None = None):
        self.inner = inner
        self.launch_override_s = launch_override_s

    def workgroup_time_s(self, work: KernelWork, concurrent_wgs: int) -> float:
        t = self.inner.workgroup_time_s(work, concurrent_wgs)
        if work.variant == "fused":
            t = max(t, self.inner.workgroup_time_s(self._plain(work), concurrent_wgs))
        return t

    def _plain(self, work: KernelWork) -> KernelWork:
        from dataclasses import replace

        return replace(work, variant="compute")

    def launch_latency_s(self, work: KernelWork) -> float:
        if self.launch_override_s is not None:
            return self.launch_override_s
        t = self.inner.launch_latency_s(work)
        return max(t, self.inner.launch_latency_s(self._plain(work))) if work.variant == "fused" else t

    def reduction_time_s(self, size_bytes: float) -> float:
        return self.inner.reduction_time_s(size_bytes)

    def slots(self, work: KernelWork) -> int:
        """A fused kernel holds more state per workgroup: never more resident workgroups than the plain one."""
        s = self.inner.slots(work)
        return min(s, self.inner.slots(self._plain(work))) if work.variant == "fused" else s

    def __getattr__(self, name):
        if name in ("inner", "launch_override_s"):  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)
