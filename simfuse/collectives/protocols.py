"""NCCL's protocols (LL, LL128, Simple): what each costs in latency and in bandwidth.

Every constant is NCCL's own tuning model, ``src/graph/tuning.cc`` of NVIDIA/nccl (master, commit 5067397, 2026;
``ncclTunerConstantsDefaults`` and ``ncclTopoTuneModel``), in microseconds:

* ``baseLatencies`` (once per collective): Tree LL/LL128/Simple 6.8/14.0/8.4, Ring 6.6/14.0/8.4, CollNet and
  NVLS/NVLSTree 0;
* ``hwLatencies`` (per hop), NVLink: Tree 0.6/1.25/4.0, Ring 0.6/1.9/3.4, CollNetDirect Simple 3.7, NVLS and
  NVLSTree Simple 25; network: Tree 5.0/8.5/14, Ring 2.7/4.0/14.0, CollNetDirect Simple 31, NVLS Simple 18,
  NVLSTree Simple 20.9;
* bandwidth: Ring LL ``busBw * .5`` (an 8-byte line carries 4 bytes of data and a 4-byte flag), Ring/Tree LL128
  ``* 0.92`` (a 128-byte line carries 120 bytes of data; NCCL rounds to .92), Simple the full rate;
* PAT (all-gather / reduce-scatter, one GPU per node): base 8.0, NVLink hop Simple 4.0, network hop Simple 14;
* NVLS, NVLSTree, CollNet and PAT run Simple only (``if ((a == NCCL_ALGO_NVLS || ...) && p != NCCL_PROTO_SIMPLE)``);
* in rings across nodes every intra-node hop costs at least the network post overhead (``getNetOverhead``: 1 us
  on x86, tripled for Simple): ``intraLat = max(intraLat, netOverhead)`` (rings only: an all-to-all's NVLink
  sends post nothing; its network posts follow :mod:`.posting`);
* a ring's latency counts the hops of one chunk's path, not every channel's: of its ``nsteps`` steps
  (all-reduce ``2(n-1)``, reduce-scatter / all-gather ``n-1``, ``n`` ranks) only ``nInterSteps`` cross a node
  boundary (``2(N-1)`` / ``N-1`` on ``N`` nodes) and pay ``interLat``; the others pay ``intraLat``:
  ``latency = base + (nsteps - nInterSteps) intraLat + nInterSteps interLat``.

How simfuse uses them (:meth:`ProtocolCost.hop_latency_s`, :func:`wire_factor`): a protocol multiplies the bytes a
flow puts on the wire by ``1 / bandwidth efficiency``, and a flow's last byte arrives after ``max(fabric latency,
NCCL hop latency)`` (the fabric's latency is the wire's; NCCL's per-hop figure includes the wire, the flag/fence
handshake and for the network the proxy, so the larger of the two is charged, never their sum).  A multi-node
ring runs its steps in lockstep over all its channels, and every step holds a network hop on some channel, so
charging each flow its own hop's latency would charge ``interLat`` on all ``nsteps`` steps (``g`` times NCCL's
count with ``g`` GPUs per node).  Instead every flow of a ring step arrives after the mean hop latency of one
chunk's path (:meth:`ProtocolCost.ring_step_latency_s`): ``((nsteps - nInterSteps) intra + nInterSteps inter) /
nsteps``, with ``intra`` / ``inter`` each the larger of the fabric's and NCCL's latency, so the steps add up to
NCCL's ring latency exactly, whatever the channels and in either simulation mode.  The base latency is taken
relative to Simple's (the topology's ``collectives.launch_us`` + ``sync_us`` are the Simple collective's fixed
cost): LL starts 1.8 us earlier than Simple on a ring, LL128 5.6 us later.

The tree's own bandwidth limits (:func:`tree_rate_factor`): NCCL's tree all-reduce runs at ``0.92`` of its
channels' rate, and each tree channel at most at a measured per-channel rate (``perChMaxTreeBws`` for Simple,
``perChMaxTreeLL128Bws`` for LL128, per GPU generation and for 2 / more than 2 nodes).  A tree channel enters and
leaves a node through one NIC (src/graph/search.cc: "Trees are symmetric", one NIC per channel), so the cap is a
rate per NIC; simfuse charges it by scaling the tree's off-node bytes so that its network part runs at
``min(0.92 x NIC rate, cap)`` per NIC (LL128 and LL with their own factors and caps).

The ring's LL128 cap (:func:`ring_rate_factor`): across nodes each ring channel carries LL128 at most at
``perChMaxRingLL128Bws`` (36.7 GB/s on Hopper), below the 0.92 x 50 GB/s an NDR NIC's channel would otherwise move.

Left out of the simulated price (documented, not silently): the ring's "plateau" latency factor (x1.4 on Hopper
for multi-node Simple), the tree correction factors per size, the ring's LL cap (``llMaxBws``) and NVLSTree's
per-channel cap (``perChMaxNVLSTreeBws``, 57.7 / 45.5 GB/s per channel on Hopper over 16 NVLS channels: above the
NICs' rate): the flow network computes bandwidth from the links instead.  All of them enter the *choice* of
algorithm and protocol, which follows NCCL's model whole (:mod:`.nccl_model`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import SpecError

PROTOCOLS = ("LL", "LL128", "Simple")
#: NCCL algorithm family whose constants an algorithm uses (simfuse's own direct/hierarchical schedules are
#: point-to-point like NCCL's ring: they use the ring's)
FAMILIES = ("ring", "tree", "collnet", "nvls", "nvls_tree", "pat")

_BASE_LAT_US = {  # baseLatencies
    "tree": {"LL": 6.8, "LL128": 14.0, "Simple": 8.4},
    "ring": {"LL": 6.6, "LL128": 14.0, "Simple": 8.4},
    "collnet": {"Simple": 0.0},
    "nvls": {"Simple": 0.0},
    "nvls_tree": {"Simple": 0.0},
    "pat": {"Simple": 8.0},
}
_HW_LAT_NVLINK_US = {  # hwLatencies[NCCL_HW_NVLINK]
    "tree": {"LL": 0.6, "LL128": 1.25, "Simple": 4.0},
    "ring": {"LL": 0.6, "LL128": 1.9, "Simple": 3.4},
    "collnet": {"Simple": 3.7},
    "nvls": {"Simple": 25.0},
    "nvls_tree": {"Simple": 25.0},
    "pat": {"Simple": 4.0},
}
_HW_LAT_NET_US = {  # hwLatencies[NCCL_HW_NET]
    "tree": {"LL": 5.0, "LL128": 8.5, "Simple": 14.0},
    "ring": {"LL": 2.7, "LL128": 4.0, "Simple": 14.0},
    "collnet": {"Simple": 31.0},
    "nvls": {"Simple": 18.0},
    "nvls_tree": {"Simple": 20.9},
    "pat": {"Simple": 14.0},
}
#: fraction of the link rate that carries data (ring LL x.5, LL128 x.92; Simple full)
_BW_EFFICIENCY = {"LL": 0.5, "LL128": 0.92, "Simple": 1.0}
#: NCCL multiplies the network post overhead by 3 for Simple (``if (p == NCCL_PROTO_SIMPLE) netOverhead *= 3``)
_NET_OVERHEAD_MULT = {"LL": 1.0, "LL128": 1.0, "Simple": 3.0}


#: NCCL's per-channel tree all-reduce caps (GB/s of bus bandwidth per channel) for [2 nodes, more than 2 nodes],
#: per GPU generation: ``perChMaxTreeBws`` (Simple) and ``perChMaxTreeLL128Bws`` (LL128), NVIDIA/nccl
#: 5067397c2676d5aed50042fc39e5c8ee96eb0027:src/graph/tuning.cc (``ncclTunerConstantsDefaults``)
_TREE_CAP_GBYTE_PER_S = {
    "Simple": {"volta": (18.5, 10.0), "ampere": (23.6, 17.8), "hopper": (41.4, 36.0), "blackwell": (42.8, 24.0)},
    "LL128": {"volta": (20.0, 20.0), "ampere": (20.0, 20.0), "hopper": (36.7, 29.0), "blackwell": (31.67, 20.0)},
}
#: the tree all-reduce's share of its channels' rate (``busBw * .92``, same file, ``ncclTopoTuneModel``)
TREE_BW_SHARE = 0.92
#: LL on a tree: ``busBw * 1.0 / 3.8`` of the Simple rate, and at most ``llMaxBws`` in all (GB/s; multi-node rows
#: are by host CPU: Intel 39.0 on 2 nodes, 20.4 beyond; simfuse assumes Intel hosts, as ``net_overhead_us``'s 1 us)
TREE_LL_SHARE = 1.0 / 3.8
_LL_MAX_GBYTE_PER_S = (39.0, 20.4)
#: GPU names -> NCCL's compute-capability class (``compCapIndex``: Volta sm70, Ampere sm80, Hopper sm90,
#: Blackwell sm100); longest match first
_GENERATIONS = (("GB200", "blackwell"), ("B200", "blackwell"), ("B100", "blackwell"), ("H100", "hopper"),
                ("H200", "hopper"), ("H800", "hopper"), ("H20", "hopper"), ("GH200", "hopper"), ("A100", "ampere"),
                ("A800", "ampere"), ("V100", "volta"))


def nccl_generation(device_name: str) -> str | None:
    """NCCL's GPU class of ``device_name`` (``hopper``, ...), None for a GPU NCCL's tables do not cover."""
    name = device_name.upper()
    for key, gen in sorted(_GENERATIONS, key=lambda kv: len(kv[0]), reverse=True):
        if key in name:
            return gen
    return None


#: fastest network channel NCCL's topology search tries (GB/s): ``sm90SpeedArrayInter`` / ``sm100SpeedArrayInter``
#: / ``speedArrayInter`` start at 48 / 96 / 48 (src/graph/search.cc, same commit): a NIC of line rate ``B`` carries
#: ``max(1, round(B / top))`` tree channels (one per 400 Gb/s NIC; a topology NIC that stands for several physical
#: ones, as the corpus's 4 x 400 Gb/s per GPU, carries several)
_TOP_CHANNEL_GBYTE_PER_S = {"volta": 48.0, "ampere": 48.0, "hopper": 48.0, "blackwell": 96.0}


def _nic_channels(applies: bool, device_name: str, nic_rate_bytes_per_s: float, nic_line_bytes_per_s: float | None,
                  nics_per_gpu: int, min_channels: float = 0.0) -> tuple[str, float] | None:
    """``(NCCL's GPU class, channels a GPU's NICs carry)`` where an algorithm limit ``applies`` to a GPU in NCCL's
    tables with a NIC, else None: one channel per :data:`_TOP_CHANNEL_GBYTE_PER_S` of the NIC's line rate (at
    least one), times the NICs a GPU has; at least ``min_channels`` (a GPU's NICs' share of the channels
    ``NCCL_MIN_NCHANNELS`` / ``NCCL_MIN_CTAS`` ask for, :func:`min_channels_per_nic`)."""
    gen = nccl_generation(device_name) if applies else None
    if gen is None or nic_rate_bytes_per_s <= 0:
        return None
    line = nic_line_bytes_per_s or nic_rate_bytes_per_s
    return gen, max(max(1, nics_per_gpu) * max(1, round(line / (_TOP_CHANNEL_GBYTE_PER_S[gen] * 1e9))),
                    min_channels)


def min_channels_per_nic(min_channels: int, gpus_per_node: int, nics_per_node: int, nics_per_gpu: int) -> float:
    """The searched-graph channels a GPU's NICs stand for when NCCL runs at least ``min_channels`` channels
    (``NCCL_MIN_NCHANNELS`` / ``NCCL_MIN_CTAS``; NCCL copies its channels up to that count, src/graph/connect.cc
    ``copyChannels``), 0 where no minimum is set.  NCCL's per-channel caps count the search's channels, and it
    runs twice as many (``nChannels * 2`` in ``ncclTopoPostset``, same file): a minimum of ``M`` running
    channels is ``M / 2`` of the search's.  Each channel crosses a node through one NIC, so the node's NICs in use
    (its GPUs' NICs, at most the node's) share them evenly; a minimum below NCCL's own count changes nothing."""
    if min_channels <= 0:
        return 0.0
    nics_used = max(1, min(nics_per_node, gpus_per_node * max(1, nics_per_gpu)))
    return max(1, nics_per_gpu) * min_channels / (2.0 * nics_used)


def tree_rate_factor(family: str, protocol: str, nodes: int, device_name: str, nic_rate_bytes_per_s: float,
                     model: str = "nccl", nic_line_bytes_per_s: float | None = None,
                     nics_per_gpu: int = 1, nics_per_node: int = 1, min_channels: float = 0.0) -> float:
    """Bytes-on-the-wire multiplier that holds a multi-node tree all-reduce to NCCL's tree rate per NIC
    (``nic_rate_bytes_per_s``: the NIC's achievable rate; ``nic_line_bytes_per_s``: its line rate, which sets
    its channel count, default the achievable rate; ``nics_per_gpu``: NICs per GPU of the group where a node has
    more NICs than the group has GPUs on it -- NCCL's channels use them all, simfuse's flows one;
    ``nics_per_node``: shares LL's total cap; ``min_channels``: channels per NIC that ``NCCL_MIN_NCHANNELS`` /
    ``NCCL_MIN_CTAS`` impose, :func:`min_channels_per_nic` -- the cap is per channel, so more channels raise it).

    NCCL's model: ``busBw = min(0.92 x channels x rate, channels x cap)``, ``algbw = busBw / 2`` (rate and cap
    per channel; below, per NIC).  simfuse's tree
    (:class:`~simfuse.collectives.algorithms.AllReduceTree`) moves ``2 size / nics`` per NIC each way beyond two
    nodes and ``size / nics`` on two nodes (each node the root of one tree), one channel per NIC.  Holding the
    NIC part to NCCL's time ``2 size / (nics x min(0.92 r, cap))`` takes a factor ``rate / min(0.92 rate, cap)``
    beyond two nodes (``r`` = the NIC's rate, NCCL's ``bwInter``) and ``2 rate / min(0.92 x 2 rate, cap)`` on two,
    where NCCL prices the tree at its intra-node rate, at most twice the network's (src/graph/search.cc: "increase
    bwIntra for trees (2 nodes or collnet)" while ``bwIntra < bwInter * 2``); never below 1.  NCCL applies this
    limit to every protocol; LL128 then takes ``x 120/128`` and its own cap (``perChMaxTreeLL128Bws``), LL
    ``x 1/3.8`` and at most ``llMaxBws`` in all (:data:`TREE_LL_SHARE`); the protocol's own wire factor
    (:data:`_BW_EFFICIENCY`) is taken out of the result.  Other families, one node, ``protocol_model: none`` and
    GPUs outside NCCL's tables: 1."""
    found = _nic_channels(model == "nccl" and family == "tree" and nodes >= 2, device_name, nic_rate_bytes_per_s,
                          nic_line_bytes_per_s, nics_per_gpu, min_channels)
    if found is None:
        return 1.0
    gen, channels = found
    idx = 0 if nodes <= 2 else 1
    k = 2.0 if nodes <= 2 else 1.0
    per_nic = min(TREE_BW_SHARE * k * nic_rate_bytes_per_s, channels * _TREE_CAP_GBYTE_PER_S["Simple"][gen][idx] * 1e9)
    if protocol == "LL128":
        per_nic = min(per_nic * 120 / 128, channels * _TREE_CAP_GBYTE_PER_S["LL128"][gen][idx] * 1e9)
    elif protocol == "LL":
        per_nic = min(per_nic * TREE_LL_SHARE, _LL_MAX_GBYTE_PER_S[idx] * 1e9 / max(1, nics_per_node))
    return max(1.0, _BW_EFFICIENCY.get(protocol, 1.0) * k * nic_rate_bytes_per_s / per_nic)


#: NCCL's per-channel ring LL128 cap ``perChMaxRingLL128Bws`` (GB/s; the same for 1, 2 and more nodes),
#: src/graph/tuning.cc NVIDIA/nccl 5067397
_RING_LL128_CAP_GBYTE_PER_S = {"volta": 20.0, "ampere": 20.0, "hopper": 36.7, "blackwell": 40.0}


def ring_rate_factor(protocol: str, nodes: int, device_name: str, nic_rate_bytes_per_s: float,
                     model: str = "nccl", nic_line_bytes_per_s: float | None = None, nics_per_gpu: int = 1,
                     min_channels: float = 0.0) -> float:
    """Bytes-on-the-wire multiplier that holds a multi-node LL128 ring to NCCL's per-channel cap: NCCL prices it
    at ``min(0.92 x channels x rate, channels x perChMaxRingLL128Bw)``; per NIC (channels per NIC as for the tree,
    :func:`tree_rate_factor`) simfuse's LL128 ring already moves ``1 / 0.92`` bytes per byte, so the factor is
    ``0.92 rate / min(0.92 rate, channels x cap)``, never below 1; ``min_channels`` as for the tree.  Other
    protocols, one node, ``protocol_model: none`` and GPUs outside NCCL's tables: 1."""
    found = _nic_channels(model == "nccl" and protocol == "LL128" and nodes >= 2, device_name,
                          nic_rate_bytes_per_s, nic_line_bytes_per_s, nics_per_gpu, min_channels)
    if found is None:
        return 1.0
    gen, channels = found
    eff = _BW_EFFICIENCY["LL128"] * nic_rate_bytes_per_s
    return max(1.0, eff / min(eff, channels * _RING_LL128_CAP_GBYTE_PER_S[gen] * 1e9))


def algorithm_rate_factors(topology, algo) -> tuple[float, float]:
    """``(all flows, off-node flows)``: multipliers on ``algo``'s bytes on the wire for its algorithm-level limits
    under ``protocol_model: nccl`` (1, 1 otherwise).  All flows: the pipeline fill of the pipelined multi-node
    all-reduces (``fill_factor`` of :mod:`.algorithms`; it stretches every stage alike).  Off-node flows: the
    tree's rate per NIC (:func:`tree_rate_factor`) or a ring's LL128 cap (:func:`ring_rate_factor`); limits of the
    network part, not of the NVLink part.
    ``algo``: an Algorithm or a group's wrapper of one."""
    co = topology.collectives
    if co.protocol_model != "nccl":
        return 1.0, 1.0
    inner = getattr(algo, "algo", algo)
    L = algo.layout
    so = topology.scale_out
    nics_per_gpu = so.nics_per_node // max(1, L.gpus_per_node)
    # NCCL_MIN_NCHANNELS / NCCL_MIN_CTAS raise the ring and tree channels, NCCL_MIN_CTAS alone the NVLS ones
    # (src/graph/connect.cc copyChannels, src/transport/nvls.cc ncclNvlsTuning)
    min_ch = co.min_ctas if inner.family in ("nvls", "nvls_tree") else max(co.min_ctas, co.min_nchannels)
    per_nic = min_channels_per_nic(min_ch, L.gpus_per_node, so.nics_per_node, nics_per_gpu)
    if inner.family == "ring":
        net = ring_rate_factor(inner.protocol, L.nodes, topology.device.name, so.effective_nic_bw_bytes_per_s,
                               co.protocol_model, so.nic_bw_bytes_per_s, nics_per_gpu, per_nic)
    else:
        net = tree_rate_factor(inner.family, inner.protocol, L.nodes, topology.device.name,
                               so.effective_nic_bw_bytes_per_s, co.protocol_model, so.nic_bw_bytes_per_s,
                               nics_per_gpu, so.nics_per_node, per_nic)
    fill = inner.fill_factor(min_ch) if L.nodes > 1 and hasattr(inner, "fill_factor") else 1.0
    return fill, net


def ring_steps(op: str, ranks: int, nodes: int) -> tuple[int, int]:
    """NCCL's ``(nsteps, nInterSteps)`` of a ring ``op`` on ``ranks`` ranks over ``nodes`` nodes
    (``ncclTopoTuneModel``, src/graph/tuning.cc, NVIDIA/nccl 5067397): all-reduce ``2(n-1)`` steps of which
    ``2(N-1)`` cross nodes, reduce-scatter / all-gather ``n-1`` and ``N-1``; one node: none cross."""
    if op == "all_reduce":
        steps, inter = 2 * (ranks - 1), 2 * (nodes - 1)
    elif op in ("reduce_scatter", "all_gather"):
        steps, inter = ranks - 1, nodes - 1
    else:
        raise ValueError(f"no NCCL ring for {op!r}")
    return max(0, steps), (max(0, inter) if nodes > 1 else 0)


def canonical_protocol(name: str | None, source: str = "<argument>", field: str = "protocol") -> str | None:
    """``ll`` / ``LL128`` / ``simple`` ... -> NCCL's spelling; None stays None; unknown names raise SpecError."""
    if name is None:
        return None
    for p in PROTOCOLS:
        if str(name).lower() == p.lower():
            return p
    raise SpecError(source, field, f"unknown protocol {name!r}; expected one of {', '.join(PROTOCOLS)}")


#: NCCL's point-to-point protocol rule (all-to-all is grouped send/recv): a p2p operation runs LL when its
#: connection has LL buffers and it carries at most ``NCCL_P2P_LL_THRESHOLD`` = 16 KiB, otherwise Simple; never
#: LL128 (NVIDIA/nccl v2.21.5-1 src/enqueue.cc:507,529 ``addP2pToPlan``).  Network connections get LL buffers only
#: with ``NCCL_ALLOC_P2P_NET_LL_BUFFERS=1``, default 0 (src/init.cc:585, src/transport/net.cc:721), so p2p
#: between nodes is Simple (the same at v2.27.7-1, where the LL threshold scales with the channels per peer).
P2P_LL_THRESHOLD_BYTES = 16384


def p2p_protocols(multi_node: bool, per_peer_bytes: float | None = None) -> tuple[str, ...]:
    """Protocols NCCL runs an all-to-all with: Simple across nodes; inside a node LL too, for at most
    :data:`P2P_LL_THRESHOLD_BYTES` per peer (``per_peer_bytes`` None: not known yet, LL kept)."""
    if multi_node or (per_peer_bytes is not None and per_peer_bytes > P2P_LL_THRESHOLD_BYTES):
        return ("Simple",)
    return ("LL", "Simple")


def protocols_for(family: str, model: str) -> tuple[str, ...]:
    """Protocols an algorithm family can run with: all three (ring, tree) or Simple only (NVLS, CollNet); with
    ``protocol_model: none`` just Simple (idealised)."""
    if model != "nccl":
        return ("Simple",)
    return tuple(p for p in PROTOCOLS if p in _BASE_LAT_US[family])


@dataclass(frozen=True)
class ProtocolCost:
    """What ``protocol`` costs an algorithm of ``family``; ``model == "none"`` costs nothing extra."""

    family: str
    protocol: str
    model: str = "nccl"
    multi_node: bool = False
    net_overhead_s: float = 1e-6
    #: point-to-point (all-to-all: grouped send/recv): the ring's net-overhead floor on NVLink hops does not apply
    #: (an intra-node send posts nothing to the network proxy; its posts are priced by :mod:`.posting`)
    p2p: bool = False
    #: algorithm-level limits as multipliers on the bytes on the wire (:func:`algorithm_rate_factors`): of every
    #: flow (pipeline fill) and, on top, of the off-node flows (the tree's rate per NIC)
    rate_factor: float = 1.0
    net_rate_factor: float = 1.0
    #: a multi-node ring: NCCL's ``(nsteps, nInterSteps)`` (:func:`ring_steps`); ``(0, 0)``: each flow pays its own
    #: hop's latency (every other algorithm, and rings inside one node, where every hop is an NVLink hop)
    ring: tuple[int, int] = (0, 0)
    #: the fabric's own (wire) latency of an intra-node and of an inter-node hop (s): what a ring step's hop
    #: latencies are the larger of, with NCCL's (:meth:`ring_step_latency_s`)
    fabric_latency_s: tuple[float, float] = (0.0, 0.0)

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise ValueError(f"unknown algorithm family {self.family!r}")
        if self.protocol not in protocols_for(self.family, self.model):
            if self.model != "nccl":
                raise SpecError("<argument>", "protocol",
                                f"{self.protocol} needs collectives.protocol_model: nccl in the topology (this one "
                                f"models a single idealised protocol, Simple)")
            raise SpecError("<argument>", "protocol",
                            f"{self.family} algorithms run with {', '.join(protocols_for(self.family, self.model))}"
                            f" only, not {self.protocol}")

    @property
    def active(self) -> bool:
        return self.model == "nccl"

    @property
    def wire_factor(self) -> float:
        """Bytes on the wire per byte of data."""
        return self.rate_factor / _BW_EFFICIENCY[self.protocol] if self.active else 1.0

    @property
    def base_offset_s(self) -> float:
        """Fixed cost relative to the ring's Simple (the topology's launch time; may be negative): NCCL's base
        latency of the family and protocol minus the ring's Simple one, so NVLS, NVLSTree and CollNet, whose
        base latency is 0 in NCCL's model, start without the launch gap."""
        if not self.active:
            return 0.0
        return (_BASE_LAT_US[self.family][self.protocol] - _BASE_LAT_US["ring"]["Simple"]) * 1e-6

    def launch_gap_s(self, launch_s: float) -> float:
        """The launch gap of a collective run with this protocol: ``launch_s`` (the topology's, Simple's) plus
        :attr:`base_offset_s`, never below 0; a zero gap (overheads left out) stays zero."""
        return max(0.0, launch_s + self.base_offset_s) if launch_s > 0 else launch_s

    def hop_latency_s(self, off_node: bool) -> float:
        """NCCL's per-hop latency (s) of this family and protocol on an NVLink (intra-node) or network hop."""
        if not self.active:
            return 0.0
        if off_node:
            return _HW_LAT_NET_US[self.family][self.protocol] * 1e-6
        lat = _HW_LAT_NVLINK_US[self.family][self.protocol] * 1e-6
        if self.multi_node and self.family == "ring" and not self.p2p:
            lat = max(lat, self.net_overhead_s * _NET_OVERHEAD_MULT[self.protocol])
        return lat

    def ring_step_latency_s(self, intra_fabric_s: float, inter_fabric_s: float) -> float | None:
        """The latency every flow of one step of a multi-node ring pays (None: not such a ring, or no protocol
        model): the mean hop latency along one chunk's path, ``((nsteps - k) intra + k inter) / nsteps`` with
        ``k = nInterSteps``, ``intra = max(intra_fabric_s, NVLink hop)`` and ``inter = max(inter_fabric_s,
        network hop)`` (:meth:`hop_latency_s`), so the ``nsteps`` steps sum to NCCL's ring latency."""
        steps, inter_steps = self.ring
        if not self.active or steps <= 0 or inter_steps <= 0:
            return None
        intra = max(intra_fabric_s, self.hop_latency_s(False))
        inter = max(inter_fabric_s, self.hop_latency_s(True))
        return ((steps - inter_steps) * intra + inter_steps * inter) / steps


def wire_factor(protocol: str) -> float:
    """Bytes on the wire per byte of data under the NCCL model."""
    return 1.0 / _BW_EFFICIENCY[canonical_protocol(protocol)]
