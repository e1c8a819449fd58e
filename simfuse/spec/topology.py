"""System (topology) specs: device, scale-up fabric, scale-out fabric, GPU-initiated communication costs.

YAML files use human units named in the keys (``bw_gbps`` = 1e9 bytes/s per direction, ``latency_us``,
``nic_bw_gbit`` = link rate in 1e9 bits/s; the unambiguous spellings ``bw_gbyte_per_s``, ``hbm_bw_gbyte_per_s`` and
``nic_bw_gbit_per_s`` are accepted too); the dataclasses hold SI units (bytes/s, seconds).
The node count is a run parameter, not part of the file.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import SpecError, short_repr
from ..units import gbit_to_bytes_per_s, gbps_to_bytes_per_s
from ._fields import Fields, check_finite, load_yaml_mapping
from .ranges import InputSpace, parse_uncertain

# fabric kinds; each has a class registered under this name in simfuse/network/fabrics/ (a test checks they match)
FABRICS = ("fat_tree", "rail_optimized", "fat_tree_3tier")


def register_fabric_kind(name: str) -> None:
    """Accept ``scale_out.fabric: <name>`` in topology files (:func:`simfuse.network.fabrics.register_fabric`
    calls this for every fabric class it registers)."""
    global FABRICS
    if name not in FABRICS:
        FABRICS = (*FABRICS, name)
# fields only fat_tree_3tier reads (rejected for the other fabrics so that a typo'd fabric name is not silent)
FABRIC_3TIER_FIELDS = ("nodes_per_leaf", "leaves_per_pod", "spine_oversubscription", "hop_latency_ns")
DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8")

# Bounds checked at load time (far beyond real hardware; they keep sizes and loops finite).
MAX_GPUS_PER_NODE = 1024
MAX_COMPUTE_UNITS = 100_000
MAX_RATE = 1e15         # TFLOP/s, GB/s, Gbit/s in the file's units (huge values model free links)
MAX_LATENCY_US = 1e9    # about 17 minutes
MAX_CHANNELS = 64       # NCCL's MAXCHANNELS (src/include/device.h): the channel minimums' upper bound


@dataclass(frozen=True)
class GemmEfficiencySpec:
    """Measured efficiency of library GEMMs (cuBLAS ``torch.matmul``) at small row counts ``M`` (``device.
    gemm_efficiency`` in the topology file; opt-in, absent = the tiled roofline).

    ``points``: ``(M, eff)`` with ``M`` strictly increasing and ``0 < eff <= 1``: the fraction of the whole-GEMM
    roofline (``max(2 M N K / (peak x flops_efficiency), unique bytes / (HBM x hbm_efficiency))``) the kernel
    reaches at ``M`` rows, interpolated linearly in ``log M`` and held constant below the first point.
    ``floor_s``: the measured per-call time of the smallest GEMMs, **in-graph launch latency included** (the
    curve is measured as shares of CUDA-graph replays); the cost model subtracts the device's in-graph launch
    latency and charges the run's own (eager or graph), so no launch is counted twice.  ``overhead_s``: a fixed
    per-call kernel time (prologue, epilogue, wave tail) added to the roofline part.  GEMMs with more rows than
    the last point, and GEMMs of another ``dtype`` than the one measured, keep the tiled roofline (or the
    calibrated model).  ``source``: where the numbers come from."""

    source: str
    floor_s: float
    points: tuple[tuple[float, float], ...]
    dtype: str = "bf16"
    overhead_s: float = 0.0

    def efficiency(self, m: float) -> float:
        """``eff`` at ``m`` rows (log-linear between points, constant below the first; beyond the last point the
        caller does not use the curve)."""
        pts = self.points
        if m <= pts[0][0]:
            return pts[0][1]
        for (m0, e0), (m1, e1) in zip(pts, pts[1:], strict=False):
            if m <= m1:
                w = (math.log(m) - math.log(m0)) / (math.log(m1) - math.log(m0))
                return e0 + w * (e1 - e0)
        return pts[-1][1]

    @property
    def m_max(self) -> float:
        return self.points[-1][0]


@dataclass(frozen=True)
class StridedCopySpec:
    """Measured rate of copies into (or out of) column slices of a row-major matrix -- the DLRM concat kernels
    (HugeCTR's ``concat_fwd_kernel`` / ``concat_bwd_kernel``, PyTorch's ``torch.cat`` along dim 1) -- whose working
    set does not fit the L2 (``device.strided_copy``; opt-in, absent = such copies priced as any element-wise
    kernel).

    ``efficiency``: the fraction of the HBM data-sheet rate the copy reaches when its bytes exceed ``min_bytes``
    (the L2 size, data sheet); below it the copy is priced as any element-wise kernel (measured within 0.8-1.0 of
    that there).  ``source``: where it was measured."""

    source: str
    efficiency: float
    min_bytes: float

    def factor(self, hbm_efficiency: float, nbytes: float) -> float:
        """Time multiplier of a strided copy of ``nbytes`` over an element-wise kernel of the same bytes (>= 1)."""
        if nbytes <= self.min_bytes:
            return 1.0
        return max(1.0, hbm_efficiency / self.efficiency)


@dataclass(frozen=True)
class DeviceSpec:
    """One GPU.  ``peak_flops`` maps dtype -> FLOP/s (dense); efficiencies are achievable fractions of peak."""

    name: str
    compute_units: int
    max_workgroups_per_cu: int
    peak_flops: dict[str, float]
    hbm_bw_bytes_per_s: float
    hbm_efficiency: float = 0.9
    flops_efficiency: float = 0.75
    #: from one kernel's launch (its predecessor done) to its first workgroup starting, for kernels launched
    #: eagerly and queued ahead by the host (PyTorch eager, HugeCTR without graphs)
    kernel_launch_latency_s: float = 4e-6
    memory_bytes: float = 141e9
    #: small-M efficiency of library GEMMs (``device.gemm_efficiency``); None = the tiled roofline everywhere
    gemm_efficiency: GemmEfficiencySpec | None = None
    #: measured rate of strided (column-slice) copies beyond the L2 (``device.strided_copy``); None = element-wise
    strided_copy: StridedCopySpec | None = None
    #: the same for kernels replayed from a CUDA graph (``device.graph_launch_latency_us``); None = as eager
    graph_launch_latency_s: float | None = None

    @property
    def graph_launch_s(self) -> float:
        """Per-kernel launch latency inside a CUDA graph (s): ``graph_launch_latency_s``, else the eager one."""
        g = self.graph_launch_latency_s
        return self.kernel_launch_latency_s if g is None else g

    @property
    def workgroup_slots(self) -> int:
        """Workgroups resident at once on the whole device (one wave)."""
        return self.compute_units * self.max_workgroups_per_cu

    def flops(self, dtype: str) -> float:
        if dtype not in self.peak_flops:
            raise SpecError(f"topology device {self.name!r}", f"device.peak_tflops.{dtype}",
                            f"no peak FLOP/s given for dtype {dtype!r} (the topology gives "
                            f"{', '.join(sorted(self.peak_flops)) or 'none'}): add it to the topology file, or run "
                            f"another dtype")
        return self.peak_flops[dtype]


@dataclass(frozen=True)
class ScaleUpSpec:
    """Switched NVLink-class fabric inside a node: every GPU has one port of ``bw_bytes_per_s`` each way."""

    gpus_per_node: int
    bw_bytes_per_s: float
    latency_s: float
    efficiency: float = 1.0
    #: NVLink SHARP (NVLS): the NVSwitch reduces (multimem ld_reduce) and multicasts (multimem st) in the switch;
    #: declared by the file (``scale_up.nvls: true``), never assumed.  Third-generation NVSwitch (HGX H100/H200).
    nvls: bool = False
    #: fraction of the NVLink port rate the switch's reduction/multicast sustains per GPU.  Default 0.85: NCCL's
    #: ``nvlsEfficiency`` for Hopper (NVIDIA/nccl src/graph/tuning.cc, master 5067397, 2026).
    nvls_efficiency: float = 0.85

    @property
    def nvls_bw_bytes_per_s(self) -> float:
        """Per-GPU rate of the switch's reduction (after the port efficiency): the NVLS links' capacity."""
        return self.bw_bytes_per_s * self.efficiency * self.nvls_efficiency

    @property
    def effective_bw_bytes_per_s(self) -> float:
        return self.bw_bytes_per_s * self.efficiency


@dataclass(frozen=True)
class ScaleOutSpec:
    """NICs and the inter-node fabric.

    ``fabric``: ``fat_tree`` (every inter-node byte crosses the node's leaf uplinks, whose capacity is the
    node's NIC bandwidth over ``oversubscription``) or ``rail_optimized`` (NIC i of every node sits on leaf i;
    same-rail traffic stays on the leaf, cross-rail traffic crosses the oversubscribed spine) or
    ``fat_tree_3tier`` (nodes -> leaves -> pod spines -> core; ``oversubscription`` is the leaf -> spine tier's,
    ``spine_oversubscription`` the spine -> core tier's; see :mod:`simfuse.network.fabrics.fat_tree_3tier`).

    3-tier defaults: a 64-port NDR switch (NVIDIA Quantum-2 QM9700: 64 x 400 Gb/s) used non-blocking has 32
    ports down, i.e. ``nodes_per_leaf = 32 / 8 NICs = 4`` nodes of 8 rails; ``leaves_per_pod = 8`` makes a pod
    of 32 nodes, the size of a DGX SuperPOD scalable unit; both oversubscriptions 1 (non-blocking, as SuperPOD
    builds are; 2:1 or 3:1 at the upper tiers are common cost-reduced choices).  ``hop_latency_s`` = 200 ns
    per further switch hop: Quantum-2 port-to-port cut-through latency is quoted at about 130-150 ns by
    resellers (one quotes ~330 ns; NVIDIA's datasheet gives no figure), plus ~10 m of fibre at 5 ns/m; calibrate.
    """

    nics_per_node: int
    nic_bw_bytes_per_s: float
    latency_s: float
    fabric: str = "fat_tree"
    oversubscription: float = 1.0
    efficiency: float = 1.0
    nodes_per_leaf: int = 4
    leaves_per_pod: int = 8
    spine_oversubscription: float = 1.0
    hop_latency_s: float = 200e-9
    #: IB SHARP (NCCL CollNet): the InfiniBand switches reduce; declared by the file (``scale_out.sharp: true``,
    #: Quantum-2 switches with SHARPv3 and the NCCL SHARP plugin), never assumed.
    sharp: bool = False
    #: fraction of the NIC rate a SHARP reduction sustains.  Default 0.85: NCCL's CollNet Direct refinement on
    #: Hopper (``if (minCompCap >= 90) busBw *= .85``, NVIDIA/nccl src/graph/tuning.cc, master 5067397).
    sharp_efficiency: float = 0.85
    #: fraction of the NIC line rate when a collective across nodes drives every NIC of its nodes (its GPUs per node
    #: >= ``nics_per_node``) with NCCL's default connections (one QP per connection, NCCL's own channel count); it
    #: replaces ``efficiency`` for such collectives only (:meth:`applies_full_node`).  ``None`` (files that do not
    #: name it): ``efficiency`` everywhere.  Calibrated, not from a data sheet: on the public network corpus
    #: (data/network_corpus, experiments/results/network_validation/) two independent H100 clusters with 8 GPUs and
    #: 8 x 400 Gb/s per node reach 0.80-0.82 of line rate at >= 1 GiB with NCCL's defaults, where the same
    #: clusters reach 0.96-0.98 with 1-4 GPUs per node or with NCCL_MIN_CTAS=24 NCCL_IB_QPS_PER_CONNECTION=2; two
    #: more such clusters reach 0.90-0.92 (the leave-source-out fits and range are in fitted_ranges.csv there).  A
    #: machine whose NCCL raises its QPs per connection or channels leaves it unset.
    full_node_efficiency: float | None = None

    def applies_full_node(self, nodes: int, gpus_per_node: int) -> bool:
        """Whether :attr:`full_node_efficiency` replaces :attr:`efficiency` for a collective on ``nodes`` nodes of
        ``gpus_per_node`` GPUs each: it is set, the collective crosses nodes and its GPUs drive every NIC."""
        return self.full_node_efficiency is not None and nodes > 1 and gpus_per_node >= self.nics_per_node

    def efficiency_across_nodes(self, gpus_per_node: int) -> float:
        """The scale-out efficiency a collective across nodes of ``gpus_per_node`` GPUs each sees: the full-node
        efficiency where it applies (:meth:`applies_full_node`), else :attr:`efficiency`."""
        return self.full_node_efficiency if self.applies_full_node(2, gpus_per_node) else self.efficiency

    @property
    def effective_nic_bw_bytes_per_s(self) -> float:
        return self.nic_bw_bytes_per_s * self.efficiency

    @property
    def sharp_bw_bytes_per_s(self) -> float:
        """Per-NIC rate of an in-switch (SHARP) reduction: the SHARP links' capacity."""
        return self.effective_nic_bw_bytes_per_s * self.sharp_efficiency


@dataclass(frozen=True)
class GpuInitiatedSpec:
    """Costs of GPU-initiated communication used by fused operators.

    ``put_issue_s``: time a workgroup spends issuing one put/store burst (instruction overhead).
    ``nic_proxy_latency_s``: doorbell/proxy latency before an inter-node put reaches the wire.
    ``flag_latency_s``: time from the data's arrival to the receiver observing the flag (fence + flag write).
    ``occupancy_loss``: fraction of workgroup slots lost to communication state in fused kernels.
    ``put_post_s``: time the issuing GPU's NIC queue is busy posting one off-node put (work-queue entry +
    doorbell, or the host proxy's post); the off-node puts of one batch serialize on it
    (:func:`simfuse.fused.base.start_puts`).  Default 0 (the behaviour of files that do not name it).
    """

    put_issue_s: float = 0.5e-6
    store_issue_s: float = 0.1e-6
    nic_proxy_latency_s: float = 2.0e-6
    flag_latency_s: float = 1.0e-6
    occupancy_loss: float = 0.0
    put_post_s: float = 0.0


@dataclass(frozen=True)
class CollectiveOverheadSpec:
    """Per-collective costs of the bulk-synchronous baselines."""

    #: a collective's fixed cost before its first step, and after its last: NCCL's tuning model charges one base
    #: latency per collective, 8.4 us for Simple (``baseLatencies``, src/graph/tuning.cc; LL / LL128 relative to
    #: it, :mod:`simfuse.collectives.protocols`), and no separate completion term
    launch_s: float = 8.4e-6
    sync_s: float = 0.0
    channels: int = 0  # ring channels; 0 means one per NIC (or one per GPU inside a node)
    #: ``nccl``: LL / LL128 / Simple protocols with NCCL's latency and bandwidth constants
    #: (:mod:`simfuse.collectives.protocols`), chosen by the tuner; ``none``: one idealised protocol (wire rate, the
    #: fabric's latencies only), the behaviour of files that do not name a model.
    protocol_model: str = "none"
    #: the host proxy's cost to post one network message (``ibv_post_send`` + completion), charged per off-node
    #: peer of a point-to-point exchange (all-to-all); NCCL's ``getNetOverhead`` default 1 us on x86 (2 us on AMD
    #: CPUs), NVIDIA/nccl src/graph/tuning.cc.  Used with ``protocol_model: nccl`` only.
    net_overhead_s: float = 1e-6
    #: how the tuner chooses among NCCL's algorithms and protocols across nodes: ``nccl`` ranks them with NCCL's own
    #: cost model (:mod:`simfuse.collectives.nccl_model`) and simulates the winner, as NCCL picks what *its* model
    #: prices cheapest; ``simulate`` simulates every candidate and keeps the fastest (simfuse's own optimum, a
    #: what-if).  ``nccl`` applies under ``protocol_model: nccl`` to all-reduce / reduce-scatter / all-gather across
    #: nodes on GPUs in NCCL's tables; everything else is simulated either way.
    tuner: str = "nccl"
    #: NCCL's ``NCCL_MIN_CTAS`` (``ncclConfig_t.minCTAs``): at least this many channels (CTAs) per collective; 0:
    #: not set, NCCL's own counts.  NCCL raises its ring / tree channels to it (src/graph/connect.cc
    #: ``copyChannels``) and clamps the NVLS channels (16 on Hopper) to it (src/transport/nvls.cc
    #: ``ncclNvlsTuning``); simfuse charges it where channels set the price, the pipeline fill of the tree and
    #: the NVLS tree (:mod:`simfuse.collectives.algorithms`): more channels carry fewer chunks each, so the fill
    #: weighs more; and the per-channel caps of the tree and the LL128 ring (:mod:`simfuse.collectives.protocols`):
    #: more channels carry more.  NCCL's *choice* is unchanged by it (its model reads the searched graphs'
    #: channels).
    min_ctas: int = 0
    #: NCCL's ``NCCL_MIN_NCHANNELS`` (older ``NCCL_MIN_NRINGS``): at least this many ring / tree channels (not NVLS
    #: ones), src/graph/connect.cc ``copyChannels``; priced as :attr:`min_ctas` is for rings and trees.  0: not set.
    min_nchannels: int = 0


@dataclass(frozen=True)
class TopologySpec:
    name: str
    device: DeviceSpec
    scale_up: ScaleUpSpec
    scale_out: ScaleOutSpec
    gpu_initiated: GpuInitiatedSpec = field(default_factory=GpuInitiatedSpec)
    collectives: CollectiveOverheadSpec = field(default_factory=CollectiveOverheadSpec)
    calibration: str | None = None  # path of a calibration profile (resolved against the topology file)
    source: str = "<memory>"
    #: the file's ``uncertain:`` block (:mod:`simfuse.spec.ranges`); not part of the spec's identity
    inputs: InputSpace | None = field(default=None, compare=False, repr=False)

    @property
    def gpus_per_node(self) -> int:
        return self.scale_up.gpus_per_node

    def replace(self, **changes) -> TopologySpec:
        return dataclasses.replace(self, **changes)

    def with_overrides(self, overrides: dict[str, float | str]) -> TopologySpec:
        """Return a copy with dotted-path overrides such as ``{"scale_out.nic_bw_bytes_per_s": 25e9}``."""
        spec = self
        for key, value in overrides.items():
            parts = key.split(".")
            if len(parts) == 1:
                if not hasattr(spec, parts[0]):
                    raise SpecError("<override>", key, "unknown topology field")
                spec = dataclasses.replace(spec, **{parts[0]: value})
                continue
            if len(parts) != 2 or not hasattr(spec, parts[0]):
                raise SpecError("<override>", key, "unknown topology field")
            sub = getattr(spec, parts[0])
            if not dataclasses.is_dataclass(sub) or not hasattr(sub, parts[1]):
                raise SpecError("<override>", key, "unknown topology field")
            spec = dataclasses.replace(spec, **{parts[0]: dataclasses.replace(sub, **{parts[1]: value})})
        return spec


def _device(f: Fields) -> DeviceSpec:
    flops = f.sub("peak_tflops")
    peak: dict[str, float] = {}
    for dtype in list(flops.data):
        if dtype not in DTYPES:
            raise SpecError(f.source, flops.name(dtype), f"unknown dtype; expected one of {', '.join(DTYPES)}")
        peak[dtype] = flops.number(dtype, positive=True, max_value=MAX_RATE) * 1e12
    if not peak:
        raise SpecError(f.source, f.name("peak_tflops"), "give at least one dtype")
    dev = DeviceSpec(
        name=f.label("name"),
        compute_units=f.integer("compute_units", min_value=1, max_value=MAX_COMPUTE_UNITS),
        max_workgroups_per_cu=f.integer("max_workgroups_per_cu", min_value=1, max_value=1024),
        peak_flops=peak,
        hbm_bw_bytes_per_s=gbps_to_bytes_per_s(f.number(f.pick("hbm_bw_gbyte_per_s", "hbm_bw_gbps"), positive=True,
                                                        max_value=MAX_RATE)),
        hbm_efficiency=f.number("hbm_efficiency", 0.9, positive=True, max_value=1.0),
        flops_efficiency=f.number("flops_efficiency", 0.75, positive=True, max_value=1.0),
        kernel_launch_latency_s=f.number("kernel_launch_latency_us", 4.0, min_value=0.0,
                                         max_value=MAX_LATENCY_US) * 1e-6,
        memory_bytes=f.number("memory_gb", 141.0, positive=True, max_value=1e9) * 1e9,
        graph_launch_latency_s=(f.number("graph_launch_latency_us", min_value=0.0, max_value=MAX_LATENCY_US) * 1e-6
                                if f.has("graph_launch_latency_us") else None),
        gemm_efficiency=_gemm_efficiency(f.sub("gemm_efficiency")) if f.has("gemm_efficiency") else None,
        strided_copy=_strided_copy(f.sub("strided_copy")) if f.has("strided_copy") else None,
    )
    f.reject_unknown()
    return dev


MAX_GEMM_CURVE_POINTS = 1000


def _strided_copy(f: Fields) -> StridedCopySpec:
    """``device.strided_copy: {source: str, efficiency: (0, 1], l2_mb: number}``."""
    source = f.string("source")
    if not source.strip():
        raise SpecError(f.source, f.name("source"), "must name where the rate was measured")
    eff = f.number("efficiency", positive=True, max_value=1.0)
    l2 = f.number("l2_mb", min_value=0.0, max_value=1e9) * 1e6
    f.reject_unknown()
    return StridedCopySpec(source, eff, l2)


def _gemm_efficiency(f: Fields) -> GemmEfficiencySpec:
    """``device.gemm_efficiency: {source: str, dtype: str, floor_us: number, [overhead_us: number,] points: [[M
    rows, efficiency], ...]}``."""
    source = f.string("source")
    dtype = f.string("dtype", choices=DTYPES)
    if not source.strip():
        raise SpecError(f.source, f.name("source"), "must name where the curve was measured")
    floor_s = f.number("floor_us", min_value=0.0, max_value=MAX_LATENCY_US) * 1e-6
    overhead_s = f.number("overhead_us", 0.0, min_value=0.0, max_value=MAX_LATENCY_US) * 1e-6
    raw = f.list("points", max_items=MAX_GEMM_CURVE_POINTS)
    if not raw:
        raise SpecError(f.source, f.name("points"), "give at least one [M, efficiency] point")
    pts: list[tuple[float, float]] = []
    for i, p in enumerate(raw):
        where = f"{f.name('points')}[{i}]"
        if not isinstance(p, list) or len(p) != 2 or any(isinstance(v, bool) or not isinstance(v, (int, float))
                                                         for v in p):
            raise SpecError(f.source, where, f"expected [M rows, efficiency] (two numbers), got {short_repr(p)}")
        try:
            m, eff = float(p[0]), float(p[1])
        except OverflowError:  # an integer beyond float range
            raise SpecError(f.source, where, f"numbers out of range in {short_repr(p)}") from None
        if not (math.isfinite(m) and m >= 1):
            raise SpecError(f.source, where, f"M (rows) must be a finite number >= 1, got {short_repr(p[0])}")
        if not (math.isfinite(eff) and 0 < eff <= 1):
            raise SpecError(f.source, where, f"efficiency must be in (0, 1] (a fraction of the roofline), got {short_repr(p[1])}")
        if pts and m <= pts[-1][0]:
            raise SpecError(f.source, where, f"M must increase strictly from point to point ({m:g} after "
                                             f"{pts[-1][0]:g})")
        pts.append((m, eff))
    f.reject_unknown()
    return GemmEfficiencySpec(source, floor_s, tuple(pts), dtype, overhead_s)


def topology_from_dict(data: dict, source: str = "<memory>") -> TopologySpec:
    """Validate a topology mapping (as loaded from YAML) into a :class:`TopologySpec`, with its ``uncertain:``
    block (input ranges, :mod:`simfuse.spec.ranges`) checked and kept as ``inputs``."""
    if not isinstance(data, dict):
        Fields(data, source)  # raises: not a mapping
    spec = _topology_body({k: v for k, v in data.items() if k != "uncertain"}, source)  # the body's errors first
    return dataclasses.replace(spec, inputs=parse_uncertain(data, source, _topology_body)[1])


def _topology_body(data: dict, source: str) -> TopologySpec:
    root = Fields(data, source)
    check_finite(data, source)
    device = _device(root.sub("device"))

    su = root.sub("scale_up")
    scale_up = ScaleUpSpec(
        gpus_per_node=su.integer("gpus_per_node", min_value=1, max_value=MAX_GPUS_PER_NODE),
        bw_bytes_per_s=gbps_to_bytes_per_s(su.number(su.pick("bw_gbyte_per_s", "bw_gbps"), positive=True,
                                                     max_value=MAX_RATE)),
        latency_s=su.number("latency_us", min_value=0.0, max_value=MAX_LATENCY_US) * 1e-6,
        efficiency=su.number("efficiency", 1.0, positive=True, max_value=1.0),
        nvls=su.boolean("nvls", False),
        nvls_efficiency=su.number("nvls_efficiency", ScaleUpSpec.nvls_efficiency, positive=True, max_value=1.0),
    )
    if "nvls_efficiency" in su.data and not scale_up.nvls:
        raise SpecError(source, su.name("nvls_efficiency"), "given but scale_up.nvls is not true")
    su.string("kind", "nvswitch", choices=("nvswitch",))
    su.reject_unknown()

    so = root.sub("scale_out")
    fabric = so.string("fabric", "fat_tree", choices=FABRICS)
    tier3: dict = {}
    if fabric == "fat_tree_3tier":
        d = ScaleOutSpec
        tier3 = dict(
            nodes_per_leaf=so.integer("nodes_per_leaf", d.nodes_per_leaf, min_value=1),
            leaves_per_pod=so.integer("leaves_per_pod", d.leaves_per_pod, min_value=1),
            spine_oversubscription=so.number("spine_oversubscription", d.spine_oversubscription, min_value=1.0),
            hop_latency_s=so.number("hop_latency_ns", d.hop_latency_s * 1e9, min_value=0.0) / 1e9,
        )
    else:
        for key in FABRIC_3TIER_FIELDS:
            if key in so.data:
                raise SpecError(source, so.name(key), f"only used by fabric fat_tree_3tier (this is {fabric})")
    scale_out = ScaleOutSpec(
        nics_per_node=so.integer("nics_per_node", min_value=1, max_value=MAX_GPUS_PER_NODE),
        nic_bw_bytes_per_s=gbit_to_bytes_per_s(so.number(so.pick("nic_bw_gbit_per_s", "nic_bw_gbit"), positive=True,
                                                         max_value=MAX_RATE)),
        latency_s=so.number("latency_us", min_value=0.0, max_value=MAX_LATENCY_US) * 1e-6,
        fabric=fabric,
        oversubscription=so.number("oversubscription", 1.0, min_value=1.0, max_value=1e6),
        efficiency=so.number("efficiency", 1.0, positive=True, max_value=1.0),
        sharp=so.boolean("sharp", False),
        sharp_efficiency=so.number("sharp_efficiency", ScaleOutSpec.sharp_efficiency, positive=True, max_value=1.0),
        full_node_efficiency=(so.number("full_node_efficiency", positive=True, max_value=1.0)
                              if "full_node_efficiency" in so.data else None),
        **tier3,
    )
    if "sharp_efficiency" in so.data and not scale_out.sharp:
        raise SpecError(source, so.name("sharp_efficiency"), "given but scale_out.sharp is not true")
    so.reject_unknown()
    if scale_up.gpus_per_node % scale_out.nics_per_node != 0:
        raise SpecError(source, "scale_out.nics_per_node",
                        f"must divide scale_up.gpus_per_node ({scale_up.gpus_per_node})")

    gi = root.sub("gpu_initiated", required=False)
    gpu_initiated = GpuInitiatedSpec(
        put_issue_s=gi.number("put_issue_us", 0.5, min_value=0.0, max_value=MAX_LATENCY_US) * 1e-6,
        store_issue_s=gi.number("store_issue_us", 0.1, min_value=0.0, max_value=MAX_LATENCY_US) * 1e-6,
        nic_proxy_latency_s=gi.number("nic_proxy_latency_us", 2.0, min_value=0.0, max_value=MAX_LATENCY_US) * 1e-6,
        flag_latency_s=gi.number("flag_latency_us", 1.0, min_value=0.0, max_value=MAX_LATENCY_US) * 1e-6,
        occupancy_loss=gi.number("occupancy_loss", 0.0, min_value=0.0, max_value=0.9),
        put_post_s=gi.number("put_post_us", 0.0, min_value=0.0, max_value=MAX_LATENCY_US) * 1e-6,
    )
    gi.reject_unknown()

    co = root.sub("collectives", required=False)
    collectives = CollectiveOverheadSpec(
        launch_s=co.number("launch_us", 8.4, min_value=0.0, max_value=MAX_LATENCY_US) * 1e-6,
        sync_s=co.number("sync_us", 0.0, min_value=0.0, max_value=MAX_LATENCY_US) * 1e-6,
        channels=co.integer("channels", 0, min_value=0, max_value=MAX_GPUS_PER_NODE),
        protocol_model=co.string("protocol_model", "none", choices=("none", "nccl")),
        net_overhead_s=co.number("net_overhead_us", 1.0, min_value=0.0, max_value=MAX_LATENCY_US) * 1e-6,
        tuner=co.string("tuner", "nccl", choices=("nccl", "simulate")),
        min_ctas=co.integer("min_ctas", 0, min_value=0, max_value=MAX_CHANNELS),
        min_nchannels=co.integer("min_nchannels", 0, min_value=0, max_value=MAX_CHANNELS),
    )
    co.reject_unknown()

    calibration = None
    if root.has("calibration"):
        calibration = root.string("calibration")
        if not calibration.strip():  # "" would resolve to the topology's own directory
            raise SpecError(source, "calibration", "empty path; name a calibration profile or drop the field")
        if source not in ("<memory>",) and not Path(calibration).is_absolute():
            calibration = str((Path(source).parent / calibration).resolve())
    spec = TopologySpec(
        name=root.label("name"),
        device=device,
        scale_up=scale_up,
        scale_out=scale_out,
        gpu_initiated=gpu_initiated,
        collectives=collectives,
        calibration=calibration,
        source=source,
    )
    root.reject_unknown(extra_allowed=("description",))
    return spec


def load_topology(path: str | Path) -> TopologySpec:
    """Load and validate a topology YAML file; errors name the file and the field."""
    return topology_from_dict(load_yaml_mapping(path), source=str(path))
