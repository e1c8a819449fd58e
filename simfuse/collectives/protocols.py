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
  sends post nothing; its network posts follow :mod:`.posting`).

How simfuse uses them (:func:`step_latency_s`, :func:`wire_factor`): a protocol multiplies the bytes a flow puts
on the wire by ``1 / bandwidth efficiency``, and a flow's last byte arrives after ``max(fabric latency, NCCL hop
latency)`` (the fabric's latency is the wire's; NCCL's per-hop figure includes the wire, the flag/fence handshake
and for the network the proxy, so the larger of the two is charged, never their sum).  The base latency is taken
relative to Simple's (the topology's ``collectives.launch_us`` + ``sync_us`` are the Simple collective's fixed
cost): LL starts 1.8 us earlier than Simple on a ring, LL128 5.6 us later.

Left out of NCCL's model (documented, not silently): the ring's "plateau" latency factor (x1.4 on Hopper for
multi-node Simple), the tree correction factors per size, per-channel bandwidth caps (``llMaxBws``,
``perChMaxTreeBws``): the flow network computes bandwidth from the links instead.
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
        return 1.0 / _BW_EFFICIENCY[self.protocol] if self.active else 1.0

    @property
    def base_offset_s(self) -> float:
        """Fixed cost relative to Simple's (added to the topology's launch time; may be negative)."""
        if not self.active:
            return 0.0
        base = _BASE_LAT_US[self.family]
        return (base[self.protocol] - base.get("Simple", base[self.protocol])) * 1e-6

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


def wire_factor(protocol: str) -> float:
    """Bytes on the wire per byte of data under the NCCL model."""
    return 1.0 / _BW_EFFICIENCY[canonical_protocol(protocol)]
