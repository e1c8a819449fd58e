"""NCCL's own cost model, used to *choose* an algorithm and protocol the way NCCL does.

NCCL picks a collective's algorithm and protocol with an analytic model (NVIDIA/nccl master 5067397,
``src/graph/tuning.cc``: ``ncclTopoTuneModel`` fills a latency and a bus bandwidth per (collective, algorithm,
protocol); ``ncclTopoGetAlgoTime`` prices ``latency + bytes / bandwidth`` with a per-size correction for trees;
the enqueue path takes the cheapest).  simfuse's default tuner ranks the candidates with that model, then
simulates only the winner (:class:`~simfuse.collectives.tuner.Tuner`): **choose like NCCL, price like simfuse**.
Ranking by simulated time instead picks what simfuse prices cheapest, which is not what NCCL runs when the two
models disagree (at 16-128 MiB on 8-10 H100 nodes simfuse priced tree/LL128 cheapest, where NCCL's model, and the
measured 216-238 GB/s algbw of such runs, say NVLSTree).

The model needs NCCL's *graphs* (channels and per-channel speeds per algorithm), which NCCL's topology search
(``src/graph/search.cc``) finds on the real machine.  :func:`graphs_for` estimates them from a topology file for the
machines simfuse models (NVSwitch nodes, GPU-affine NICs), following the search's rules:

* a channel's speed is the first entry of NCCL's speed array (``sm90SpeedArrayInter`` = 48, 45, 42, 40, 30, 24, ...
  on Hopper; ``sm100SpeedArrayInter`` from 96 on Blackwell; ``speedArrayInter`` from 48 otherwise) not above the
  NIC's line rate (GB/s, as NCCL reads the port speed), and a NIC carries ``floor(rate / speed)`` channels (at
  least one); the group's nodes use ``nics_per_node x gpus in the group per node / gpus per node`` NICs;
* ring and tree graphs: that many channels, at most 32 (``MAXCHANNELS / 2``, src/init.cc), doubled at half speed
  where ``ncclTopoDupChannels`` does (speed >= 25 and not (sm > 80, speed < 50 and more than 4 channels));
  the tree's (and CollNet's) intra-node speed is raised, as the search's second pass does "for trees (2 nodes or
  collnet)", to the fastest array entry up to twice the network speed when the NIC speed is not the array's top;
* the NVLS graph: one channel per head GPU, at most the group's GPUs per node, at the same total rate.

Known gaps, documented rather than hidden: the search's timeouts, PCIe paths and cross-NIC rings are not modelled;
``graph->latencyInter`` (0 for InfiniBand) is taken as 0; the CPU is taken as Intel x86 (NCCL's default
``getNetOverhead`` of 1 us, ``llMaxBws`` rows for Intel).  Single-node groups are left to the simulating tuner: on
one node NCCL's channels come from NVLink, which this estimate does not search.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .protocols import (
    _BASE_LAT_US,
    _BW_EFFICIENCY,
    _HW_LAT_NET_US,
    _HW_LAT_NVLINK_US,
    _LL_MAX_GBYTE_PER_S,
    _NET_OVERHEAD_MULT,
    _RING_LL128_CAP_GBYTE_PER_S,
    _TREE_CAP_GBYTE_PER_S,
    TREE_BW_SHARE,
    TREE_LL_SHARE,
    nccl_generation,
    ring_steps,
)

#: NCCL's speed arrays for graphs across nodes (GB/s per channel), src/graph/search.cc (NVIDIA/nccl 5067397)
_SPEEDS_INTER = {
    "hopper": (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12),
    "blackwell": (96.0, 86.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0,
                  2.4, 1.2, 0.24, 0.12),
    "other": (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2, 0.24,
              0.12),
}
#: ``MAXCHANNELS / 2``: the ring graph's channel limit (src/init.cc); the tree's is the ring's count
_MAX_RING_CHANNELS = 32
#: ``nvlsEfficiency`` (src/graph/tuning.cc): Hopper 0.85, Blackwell 0.74; NVLS does not exist before Hopper
_NVLS_EFFICIENCY = {"hopper": 0.85, "blackwell": 0.74}
#: ``perChMaxNVLSTreeBws`` (GB/s per channel) for [2 nodes, more than 2 nodes]
_NVLS_TREE_CAP_GBYTE_PER_S = {"volta": (18.5, 10.0), "ampere": (23.6, 17.8), "hopper": (57.7, 45.5),
                              "blackwell": (96.0, 80.0)}
#: ``treeCorrectionFactor[protocol][log2(bytes / 64)]`` (src/graph/tuning.cc): NCCL's static correction of the tree
#: all-reduce's bandwidth at medium sizes, powers of two from 64 B
_TREE_CORRECTION = {
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9),
}
#: NCCL's ring "plateau" latency factor for multi-node Simple all-reduce (sm >= 80: 1.4; older: 1.9)
_RING_PLATEAU = 1.4
#: ``getNetOverhead`` (us) on Intel x86 (Simple pays it three times: ``_NET_OVERHEAD_MULT``)
_NET_OVERHEAD_US = 1.0


@dataclass(frozen=True)
class NcclGraph:
    """One algorithm's graph as NCCL's search would find it: channels and per-channel speeds (GB/s)."""

    channels: int
    bw_intra: float
    bw_inter: float


@dataclass(frozen=True)
class NcclGraphs:
    ring: NcclGraph
    tree: NcclGraph
    nvls: NcclGraph
    generation: str


def _log2i(n: int) -> int:
    """NCCL's ``log2i``: floor(log2(n)), 0 for n <= 1."""
    return int(math.floor(math.log2(n))) if n > 1 else 0


def _speed_index(speeds: tuple[float, ...], limit: float) -> int:
    for i, s in enumerate(speeds):
        if s <= limit:
            return i
    return len(speeds) - 1


def graphs_for(topology, nodes: int, ppn: int) -> NcclGraphs | None:
    """NCCL's ring, tree and NVLS graphs for a group of ``nodes`` nodes x ``ppn`` GPUs on ``topology`` (see the
    module docstring), or None where the estimate does not apply (one node, a GPU outside NCCL's tables)."""
    gen = nccl_generation(topology.device.name)
    if gen is None or nodes < 2 or ppn < 1:
        return None
    so, su = topology.scale_out, topology.scale_up
    nic = so.nic_bw_bytes_per_s / 1e9  # the port speed NCCL reads, not the achievable rate
    nvlink = su.bw_bytes_per_s / 1e9
    if nic <= 0:
        return None
    speeds = _SPEEDS_INTER.get(gen, _SPEEDS_INTER["other"])
    idx = _speed_index(speeds, min(nic, nvlink))
    s = speeds[idx]
    nics = max(1, round(so.nics_per_node * ppn / max(1, su.gpus_per_node)))
    ch = min(_MAX_RING_CHANNELS, nics * max(1, int(nic // s)))
    total = ch * s
    cc_above_80 = gen in ("hopper", "blackwell")
    bw = s
    if not (s < 25.0 or (cc_above_80 and s < 50.0 and ch > 4)):
        dup = min(2 * ch, _MAX_RING_CHANNELS)
        bw = s / math.ceil(dup / ch)
        ch = dup
    ring = NcclGraph(ch, bw, bw)
    tree_intra = bw
    if idx > 0:  # the second pass raises a tree's intra-node speed up to twice the network's
        up = [v for v in speeds[:idx] if v <= min(2 * s, nvlink)]
        if up:
            tree_intra = max(up) * bw / s
    tree = NcclGraph(ch, tree_intra, bw)
    heads = max(1, min(ppn, ch))
    nvls = NcclGraph(heads, total / heads, total / heads)
    return NcclGraphs(ring, tree, nvls, gen)


def _bandwidth_gbyte_per_s(op: str, family: str, protocol: str, nodes: int, ppn: int,
                           graphs: NcclGraphs) -> float:
    """``comm->bandwidths[op][family][protocol]`` (GB/s of algorithm bandwidth; 0: not run)."""
    gen, n = graphs.generation, nodes * ppn
    idx2 = 1 if nodes <= 2 else 2  # [N1, N2, N4] tables; N1 is never asked here
    steps = ring_steps(op, n, nodes)[0]
    if family in ("nvls", "nvls_tree"):
        g = graphs.nvls
        eff = _NVLS_EFFICIENCY.get(gen, 0.0)
        if g.channels < 2 or eff <= 0:
            return 0.0
        intra = g.bw_intra * eff * (g.channels - 1) / g.channels
        intra *= 2.0 if op == "all_reduce" else (ppn - 1) / ppn
        inter = g.bw_inter * (2.0 if nodes <= 2 and family == "nvls_tree" else 1.0)
        cap = _NVLS_TREE_CAP_GBYTE_PER_S[gen][idx2 - 1] if family == "nvls_tree" else math.inf
        bus = g.channels * min(intra, inter, cap)
    else:
        g = graphs.tree if family in ("tree", "collnet") else graphs.ring
        bw = g.bw_intra if (nodes <= 2 or family == "collnet") else g.bw_inter
        bus = g.channels * bw
    if family == "ring" and protocol == "LL":
        bus = min(_LL_MAX_GBYTE_PER_S[idx2 - 1], bus * _BW_EFFICIENCY["LL"])
    if family == "ring" and protocol == "LL128":
        bus = min(bus * _BW_EFFICIENCY["LL128"], g.channels * _RING_LL128_CAP_GBYTE_PER_S[gen])
    if family == "tree" and op == "all_reduce":
        bus = min(bus * TREE_BW_SHARE, g.channels * _TREE_CAP_GBYTE_PER_S["Simple"][gen][idx2 - 1])
    if family == "tree" and protocol == "LL":
        bus = min(bus * TREE_LL_SHARE, _LL_MAX_GBYTE_PER_S[idx2 - 1])
    if family == "tree" and protocol == "LL128":
        bus = min(bus * 120.0 / 128.0, g.channels * _TREE_CAP_GBYTE_PER_S["LL128"][gen][idx2 - 1])
    if family == "pat":
        bus *= 0.75
    if family == "collnet":
        if protocol != "Simple":
            return 0.0
        if op in ("all_gather", "reduce_scatter"):
            return 0.0  # not modelled by simfuse (NCCL needs the CollNet plugin's all-gather there)
        factor = ppn / g.channels
        factor -= (factor - 1) / 2
        bus /= factor
        if gen in ("hopper", "blackwell"):
            bus *= 0.85
    if not (family != "ring" and op in ("all_gather", "reduce_scatter")):
        bus *= (n / steps) if family in ("ring", "nvls", "nvls_tree") else 0.5
    return bus


def _latency_us(op: str, family: str, protocol: str, nodes: int, ppn: int) -> float:
    """``comm->latencies[op][family][protocol]`` (us), NVLink inside nodes, InfiniBand between them."""
    n = nodes * ppn
    lat = _BASE_LAT_US[family][protocol]
    intra = _HW_LAT_NVLINK_US[family][protocol]
    inter = (_HW_LAT_NET_US["tree"][protocol] if ppn == 1 and protocol in _HW_LAT_NET_US["tree"]
             else _HW_LAT_NET_US[family][protocol])
    if family == "ring":
        overhead = _NET_OVERHEAD_US * _NET_OVERHEAD_MULT[protocol]
        intra = max(intra, overhead)
        steps, inter_steps = ring_steps(op, n, nodes)
        return lat + (steps - inter_steps) * intra + inter_steps * inter
    if family == "tree":
        return lat + (2 * ((ppn - 1) * intra + _log2i(nodes) * inter) if op == "all_reduce" else 0.0)
    if family == "collnet":
        return lat + 2 * (min(1, ppn - 1) * intra + (ppn - 1) * 0.4) + inter
    if family == "nvls":
        return intra + inter
    if family == "nvls_tree":
        return lat + intra + 2 * _log2i(nodes) * inter
    if family == "pat":
        return lat + _log2i(nodes) * inter / 3.5 + n * 2.8
    raise ValueError(f"unknown family {family!r}")


def nccl_time_s(op: str, family: str, protocol: str, nodes: int, ppn: int, size_bytes: float,
                graphs: NcclGraphs) -> float | None:
    """NCCL's predicted time (s) of ``op`` run with ``family``/``protocol`` on ``nodes`` x ``ppn`` GPUs
    (``ncclTopoGetAlgoTime`` with one operation), or None where NCCL's model does not run it."""
    if op not in ("all_reduce", "reduce_scatter", "all_gather"):
        return None
    if family not in _BASE_LAT_US or protocol not in _BASE_LAT_US[family]:
        return None
    bw = _bandwidth_gbyte_per_s(op, family, protocol, nodes, ppn, graphs)
    if bw <= 0:
        return None
    lat = _latency_us(op, family, protocol, nodes, ppn)
    log_size = _log2i(int(size_bytes) >> 6) if int(size_bytes) >= 64 else -1
    if family == "tree" and op == "all_reduce" and 0 <= log_size < 23:
        bw *= _TREE_CORRECTION[protocol][log_size]
    if family == "nvls_tree" and op == "all_reduce" and 0 <= log_size < 24 and graphs.generation == "blackwell":
        bw *= _TREE_CORRECTION[protocol][log_size]
    if (family == "ring" and protocol == "Simple" and op == "all_reduce"
            and size_bytes / (graphs.ring.channels * nodes * ppn) >= 64):
        lat *= _RING_PLATEAU
    return (lat + size_bytes / (1000.0 * bw)) * 1e-6
