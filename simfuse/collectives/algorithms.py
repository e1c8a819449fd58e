"""Bulk-synchronous collective algorithms as per-rank step schedules.

An algorithm says, for a rank, what it sends in each step: ``steps(rank) -> [(dsts, sizes_bytes), ...]``.
A rank starts step ``s`` once its own sends of step ``s-1`` have completed and everything addressed to it in
step ``s-1`` has arrived (the data dependency of rings and phased algorithms).

Sizes follow nccl-tests: ``size_bytes`` is the per-rank buffer (all-reduce: the vector; all-to-all: the send
buffer, ``size/n`` to each peer; reduce-scatter: the input, all-gather: the output, both ``n`` chunks).
``symmetric`` says whether every rank's schedule is a relabelling of rank 0's on a symmetric fabric, so the
representative-rank fast path is exact.

In-network reduction (NVLS inside a node, IB SHARP between nodes) cannot be written as point-to-point flows
exactly (the switch takes ``g`` inputs and returns one output); those algorithms (``via``) send flows whose
per-port volumes equal the real ones on each GPU's busiest direction, routed through the fabric's switch
reduction links (``nvls``, ``sharp`` families), and say which hardware they need (``requires``).  ``family`` names
the NCCL algorithm whose protocol constants apply (:mod:`.protocols`); ``protocol`` is LL, LL128 or Simple.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from ..errors import SpecError
from .protocols import canonical_protocol

OPS = ("all_to_all", "all_reduce", "reduce_scatter", "all_gather")
BUSBW_FACTOR = {
    "all_to_all": lambda n: (n - 1) / n,
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
}


@dataclass
class Layout:
    """Rank geometry an algorithm needs: ``nodes`` x ``gpus_per_node`` ranks, node-major numbering."""

    nodes: int
    gpus_per_node: int

    @property
    def n(self) -> int:
        return self.nodes * self.gpus_per_node

    def rank(self, node, local):
        return np.asarray(node) * self.gpus_per_node + np.asarray(local)


Step = tuple[np.ndarray, np.ndarray]


@dataclass
class Algorithm:
    """Base class: subclasses implement :meth:`steps`."""

    layout: Layout
    size_bytes: float
    channels: int = 0
    protocol: str = "Simple"
    name: str = field(default="", init=False)
    op: str = field(default="", init=False)

    symmetric: bool = field(default=True, init=False)
    #: node relabellings that map rank 0's schedule onto every rank's (``simfuse.network.RELABELLINGS``):
    #: ``shift`` (node + t: rings, neighbour trees), ``xor`` (node XOR t), ``any`` (every node permutation);
    #: fabrics whose nodes differ (fat_tree_3tier) use it to decide symmetry from their own automorphisms
    relabelling: ClassVar[str] = "shift"
    #: NCCL algorithm family for the protocol constants (``protocols.FAMILIES``)
    family = "ring"
    #: switch reductions the flows pass through: "nvls" (intra-node flows through the NVSwitch's reduction) and/or
    #: "sharp" (off-node flows through the IB switches' reduction)
    via: ClassVar[tuple[str, ...]] = ()
    #: hardware the topology must declare: subset of {"nvls", "sharp"}
    requires: ClassVar[tuple[str, ...]] = ()
    #: smallest node count the algorithm is defined for
    min_nodes = 1
    #: NCCL implements it (the default tuner picks only these; the others are named what-ifs, :data:`NCCL_SET`)
    nccl: ClassVar[bool] = False
    #: largest GPUs per node it runs on (NCCL's PAT: one); 0 = any
    max_gpus_per_node: ClassVar[int] = 0

    def __post_init__(self):
        pass

    def steps(self, rank: int) -> list[Step]:  # pragma: no cover - interface
        raise NotImplementedError


def _others(n: int, rank: int) -> np.ndarray:
    d = np.arange(n, dtype=np.int64)
    return d[d != rank]


class AllToAllDirect(Algorithm):
    """Every rank sends ``size/n`` to every other rank at once (pairwise direct)."""

    nccl = True  # NCCL's all-to-all: grouped send/recv to every peer
    relabelling = "any"

    def __post_init__(self):
        self.name, self.op = "direct", "all_to_all"

    def steps(self, rank):
        n = self.layout.n
        d = _others(n, rank)
        return [(d, np.full(len(d), self.size_bytes / n))] if len(d) else []


class AllToAllHierarchical(Algorithm):
    """Two phases: intra-node exchange that gathers, on GPU ``j`` of each node, all data bound for local index
    ``j`` everywhere; then an inter-node exchange between same-index GPUs (same rail), ``g*size/n`` per node."""

    relabelling = "any"

    def __post_init__(self):
        self.name, self.op = "hierarchical", "all_to_all"

    def steps(self, rank):
        L = self.layout
        g, N, n = L.gpus_per_node, L.nodes, L.n
        node, local = divmod(rank, g)
        peers_local = np.array([L.rank(node, j) for j in range(g) if j != local], dtype=np.int64)
        steps = []
        if len(peers_local):
            steps.append((peers_local, np.full(len(peers_local), self.size_bytes / n * N)))
        peers_node = np.array([L.rank(m, local) for m in range(N) if m != node], dtype=np.int64)
        if len(peers_node):
            steps.append((peers_node, np.full(len(peers_node), self.size_bytes / n * g)))
        return steps


class _Ring(Algorithm):
    """Rings over all ranks with ``channels`` channels (default one per GPU of a node).  Channel ``c`` visits the
    GPUs of every node in local order starting at ``c``; its inter-node hop leaves from local ``c-1``, so every
    GPU is the inter-node sender of exactly one channel (symmetric) when ``channels == gpus_per_node``."""

    n_passes = 1

    def _ring_channels(self) -> int:
        c = self.channels or self.layout.gpus_per_node
        return max(1, int(c))

    def _successors(self, rank: int) -> np.ndarray:
        L = self.layout
        g, N = L.gpus_per_node, L.nodes
        node, local = divmod(rank, g)
        succ = []
        for c in range(self._ring_channels()):
            start = c % g
            pos = (local - start) % g
            if pos < g - 1:
                succ.append(L.rank(node, (local + 1) % g))
            else:
                succ.append(L.rank((node + 1) % N, start))
        return np.array(succ, dtype=np.int64)

    def _ring_steps(self, rank: int, n_steps: int, chunk_bytes: float) -> list[Step]:
        succ = self._successors(rank)
        keep = succ != rank
        succ = succ[keep]
        if len(succ) == 0:
            return []
        per = chunk_bytes / self._ring_channels()
        # every step is the same (one shared tuple): the runner recognises repeated steps by identity
        step = (succ, np.full(len(succ), per))
        return [step] * n_steps

    def __post_init__(self):
        c = self._ring_channels()
        self.symmetric = c == self.layout.gpus_per_node or self.layout.nodes == 1


class AllReduceRing(_Ring):
    """Ring all-reduce: ``n-1`` reduce-scatter steps then ``n-1`` all-gather steps of ``size/n``."""

    nccl = True

    def __post_init__(self):
        super().__post_init__()
        self.name, self.op = "ring", "all_reduce"

    def steps(self, rank):
        n = self.layout.n
        return self._ring_steps(rank, 2 * (n - 1), self.size_bytes / n)


class ReduceScatterRing(_Ring):
    nccl = True

    def __post_init__(self):
        super().__post_init__()
        self.name, self.op = "ring", "reduce_scatter"

    def steps(self, rank):
        n = self.layout.n
        return self._ring_steps(rank, n - 1, self.size_bytes / n)


class AllGatherRing(_Ring):
    nccl = True

    def __post_init__(self):
        super().__post_init__()
        self.name, self.op = "ring", "all_gather"

    def steps(self, rank):
        n = self.layout.n
        return self._ring_steps(rank, n - 1, self.size_bytes / n)


class AllReduceDirect(Algorithm):
    """Direct two-phase all-reduce: reduce-scatter (``size/n`` to every peer) then all-gather (same)."""

    relabelling = "any"

    def __post_init__(self):
        self.name, self.op = "direct", "all_reduce"

    def steps(self, rank):
        n = self.layout.n
        d = _others(n, rank)
        if not len(d):
            return []
        s = (d, np.full(len(d), self.size_bytes / n))
        return [s, s]


class ReduceScatterDirect(Algorithm):
    relabelling = "any"

    def __post_init__(self):
        self.name, self.op = "direct", "reduce_scatter"

    def steps(self, rank):
        n = self.layout.n
        d = _others(n, rank)
        return [(d, np.full(len(d), self.size_bytes / n))] if len(d) else []


class AllGatherDirect(ReduceScatterDirect):
    def __post_init__(self):
        self.name, self.op = "direct", "all_gather"


class AllReduceHierarchical(Algorithm):
    """Intra-node direct reduce-scatter, inter-node ring all-reduce of each ``size/g`` shard among same-index
    GPUs (same rail), intra-node direct all-gather."""

    def __post_init__(self):
        self.name, self.op = "hierarchical", "all_reduce"

    def _inter_steps(self, node: int, local: int, shard: float) -> list[Step]:
        L = self.layout
        N = L.nodes
        nxt = np.array([L.rank((node + 1) % N, local)], dtype=np.int64)
        return [(nxt, np.array([shard / N])) for _ in range(2 * (N - 1))]

    def steps(self, rank):
        L = self.layout
        g, N = L.gpus_per_node, L.nodes
        node, local = divmod(rank, g)
        steps: list[Step] = []
        local_peers = np.array([L.rank(node, j) for j in range(g) if j != local], dtype=np.int64)
        shard = self.size_bytes / g
        if len(local_peers):
            steps.append((local_peers, np.full(len(local_peers), shard)))
        if N > 1:
            steps.extend(self._inter_steps(node, local, shard))
        if len(local_peers):
            steps.append((local_peers, np.full(len(local_peers), shard)))
        return steps


class AllReduceHierarchicalRHD(AllReduceHierarchical):
    """Like ``hierarchical`` but between nodes recursive halving (reduce-scatter) then recursive doubling
    (all-gather) among same-index GPUs, ``log2(nodes)`` steps each (Rabenseifner; log latency like NCCL's trees
    at scale).  Node counts that are not powers of two use the ring between nodes."""

    def __post_init__(self):
        self.name, self.op = "hierarchical_rhd", "all_reduce"
        N = self.layout.nodes
        self.relabelling = "shift" if N & (N - 1) else "xor"  # a ring between nodes, or partners node XOR 2^k

    def _inter_steps(self, node: int, local: int, shard: float) -> list[Step]:
        L = self.layout
        N = L.nodes
        if N & (N - 1):
            return super()._inter_steps(node, local, shard)
        rs = [(np.array([L.rank(node ^ (1 << k), local)], dtype=np.int64), np.array([shard / 2 ** (k + 1)]))
              for k in range(N.bit_length() - 1)]
        return rs + rs[::-1]


#: NCCL's Simple pipeline chunk outside rings (bytes): ``DEFAULT_BUFFSIZE`` 4 MiB / ``NCCL_STEPS`` 8, one step per
#: chunk (NVIDIA/nccl 5067397c2676d5aed50042fc39e5c8ee96eb0027: src/init.cc, src/include/device.h, src/enqueue.cc
#: ``chunkSteps = ... ALGO_RING ? chunkSteps : 1``)
TREE_CHUNK_BYTES = 4 * 2**20 // 8
#: NVLS (and NVLSTree) on Hopper: ``NVLS_NCHANNELS_SM90`` 16 channels, ``NCCL_NVLS_CHUNKSIZE`` 128 KiB, NVLSTree's
#: largest chunk 128 KiB below 4 nodes and 64 KiB from 4 (src/transport/nvls.cc ``ncclNvlsTuning``)
NVLS_CHANNELS = 16
NVLS_CHUNK_BYTES = 128 * 1024


def _pipeline_fill(size_bytes: float, stages: int, chunk_bytes: float, ops: int) -> float:
    """Multiplier on a pipelined step's bytes for its pipeline fill.  ``ops`` pipelines (channels x heads) each
    carry ``size/ops`` in chunks through ``stages`` stages: ``(chunks + stages - 1)`` chunk times where the
    steady state takes ``chunks``, i.e. ``1 + (stages - 1) x min(chunk, size/ops) x ops / size``.  ``size`` is
    what the pipelines carry through their bottleneck links in steady state (a tree across more than two nodes
    moves each chunk over a NIC twice, up and down: :func:`_tree_nic_passes`), so one stage costs one chunk's
    pass, not a chunk's whole share of the steady state."""
    if size_bytes <= 0 or stages <= 1 or ops <= 0:
        return 1.0
    c = min(chunk_bytes, size_bytes / ops)
    return 1.0 + (stages - 1) * c * ops / size_bytes


def _tree_nic_passes(nodes: int) -> int:
    """How many times the double binary tree moves a node's shard over its NIC each way: twice beyond two nodes
    (an interior node receives its children's halves and sends the reduced half up, then the reverse), once on
    two (each node the root of one tree and a leaf of the other): :class:`AllReduceTree`'s volumes."""
    return 2 if nodes > 2 else 1


def _tree_depth(nodes: int) -> int:
    """Height (hops from leaf to root) of each of the two trees of a double binary tree over ``nodes`` nodes:
    ``ceil(log2(nodes))``, 1 for two nodes (NCCL's tuning charges ``log2i(nNodes)`` network hops each way)."""
    return max(1, int(np.ceil(np.log2(nodes)))) if nodes > 1 else 0


class _HierarchicalInNetwork(Algorithm):
    """Skeleton of NCCL's multi-node all-reduces (tree, NVLSTree, CollNet, NVLS with SHARP): an intra-node
    reduce-scatter to ``size/g`` shards (one per local GPU, i.e. per rail), an inter-node all-reduce of each shard
    among the same-index GPUs, an intra-node all-gather -- **pipelined**, as NCCL runs them: a chunk moves on to
    the network while the next one is reduced inside the node, so in steady state the NVLink (or NVLS) part and
    the NIC part run at once and the slower sets the time.

    The representative schedule is one step carrying both parts' volumes concurrently (they use different
    links: NVLink ports, NICs), framed by latency-only hops so the latency terms stay those of the phases: one
    intra-node hop before and after, and the inter-node part's hops (:meth:`_inter_hops`).  Pipeline fill
    (:meth:`fill_factor`) scales that step's bytes under NCCL's protocol model.  Subclasses choose the intra-node transport (``nvls_intra``) and the inter-node
    volumes (:meth:`_inter_flows`)."""

    nvls_intra = False  # intra-node parts through the NVSwitch (NVLS) instead of direct NVLink copies

    def _local_peers(self, node: int, local: int) -> np.ndarray:
        L = self.layout
        return np.array([L.rank(node, j) for j in range(L.gpus_per_node) if j != local], dtype=np.int64)

    def _intra_bytes(self) -> float:
        """Bytes to each local peer of the reduce-scatter and the all-gather together.  NVLS: reduce-scatter sends
        the whole buffer up once (tx = size) and the reduced shard comes down (rx = size/g); all-gather sends the
        shard up once and the switch multicasts every shard (rx = size): ``size (1 + 1/g)`` each way, as flows
        of ``size (g+1) / (g (g-1))`` to each peer.  Direct copies: ``size/g`` to each peer in each part."""
        g, S = self.layout.gpus_per_node, self.size_bytes
        return S * (g + 1) / (g * (g - 1)) if self.nvls_intra else 2 * S / g

    def _inter_flows(self, node: int, local: int, shard: float) -> Step:  # pragma: no cover - interface
        raise NotImplementedError

    def _inter_hops(self) -> int:
        """Network hop latencies of the inter-node part (the pipelined step counts as one)."""
        return 1

    def fill_factor(self, min_channels: int = 0) -> float:
        """Multiplier on the pipelined step's bytes for NCCL's pipeline fill (:func:`_pipeline_fill`), charged
        under ``collectives.protocol_model: nccl`` across nodes (:func:`~.protocols.algorithm_rate_factor`: the
        only step with bytes is the pipelined one); 1 where it is not modelled (CollNet, NVLS).
        ``min_channels``: NCCL's ``NCCL_MIN_CTAS`` (``collectives.min_ctas``; 0 not set), which raises the
        channel count the pipelines run on."""
        return 1.0

    def steps(self, rank):
        L = self.layout
        node, local = divmod(rank, L.gpus_per_node)
        peers = self._local_peers(node, local)
        d_l, s_l = [], []
        if len(peers):
            d_l.append(peers)
            s_l.append(np.full(len(peers), self._intra_bytes()))
        lat_only: list[Step] = []
        if L.nodes > 1:
            d, sz = self._inter_flows(node, local, self.size_bytes / L.gpus_per_node)
            d_l.append(d)
            s_l.append(sz)
            lat_only = [(d[:1], np.zeros(1))] * (self._inter_hops() - 1)
        if not d_l:
            return []
        intra_lat = [(peers[:1], np.zeros(1))] if len(peers) else []
        # NCCL's model charges an NVLS algorithm one NVLink hop (``intraLat``: the NVLS reduce-scatter and
        # all-gather are one pipelined pass through the switch), a chain-based one a hop each way
        tail = [] if self.nvls_intra else intra_lat
        return intra_lat + [(np.concatenate(d_l), np.concatenate(s_l))] + lat_only + tail


class AllReduceTree(_HierarchicalInNetwork):
    """NCCL's tree between nodes (double binary tree, log-depth latency) under an intra-node reduce-scatter /
    all-gather, pipelined (:class:`_HierarchicalInNetwork`).

    Between nodes each rail's shard ``X = size/g`` is reduced up two binary trees (half of ``X`` each) and
    broadcast back down.  With more than two nodes every node is interior in at most one of the two trees: per
    phase it sends ``X`` (``X/2`` to its parent in each tree) and receives ``X`` (two children's halves), ``2X``
    each way over the reduce and the broadcast -- the same load on every node but the roots, which carry less.
    With two nodes each node is the root of one tree and the leaf of the other: it sends its half up the tree it
    is a leaf of and sends the reduced half of the other back down, ``X`` each way in all (nccl-tests#196: on two
    nodes the tree's bus bandwidth can exceed the network's).  The representative schedule sends those volumes
    to the rail neighbours ``node +- 1`` (on a rail every peer is reached over the same links), and ``2 depth``
    network hop latencies (up and down the trees).  Exact for the uncongested bandwidth term and the tree's
    depth, approximate for contention between trees on upper switch tiers.  NCCL's intra-node part is a chain
    (``size`` each way per phase on NVLink); the direct reduce-scatter / all-gather here moves ``(g-1)/g`` of
    it."""

    nccl = True
    family = "tree"
    min_nodes = 2

    def __post_init__(self):
        self.name, self.op = "tree", "all_reduce"

    def _inter_flows(self, node, local, shard):
        L = self.layout
        N = L.nodes
        if N == 2:
            return np.array([L.rank(1 - node, local)], dtype=np.int64), np.array([shard])
        nbr = np.array([L.rank((node + 1) % N, local), L.rank((node - 1) % N, local)], dtype=np.int64)
        return nbr, np.full(2, shard)

    def _inter_hops(self):
        return 2 * _tree_depth(self.layout.nodes)

    def fill_factor(self, min_channels: int = 0):
        """Pipeline fill of NCCL's tree with Simple: each channel's 512 KiB chunks pass the intra-node chain
        (``g-1`` hops) and the tree (``depth`` network hops) up, then back down: ``2 ((g-1) + depth)`` stages.
        Channels: two per NIC (one tree channel per NIC, src/graph/search.cc; doubled for the second tree of the
        double binary tree, src/graph/connect.cc), NICs = ``channels`` or one per GPU.  LL and LL128 move small
        chunks whose passage NCCL's per-hop latencies already hold (they were measured with them): no fill.
        ``NCCL_MIN_CTAS`` (``min_channels``) raises the channels to it (src/graph/connect.cc ``copyChannels``)."""
        if self.protocol != "Simple":
            return 1.0
        L = self.layout
        ops = max(2 * (self.channels or L.gpus_per_node), min_channels)
        stages = 2 * ((L.gpus_per_node - 1) + _tree_depth(L.nodes))
        return _pipeline_fill(self.size_bytes * _tree_nic_passes(L.nodes), stages, TREE_CHUNK_BYTES, ops)


class AllReduceNvls(_HierarchicalInNetwork):
    """NVLink SHARP all-reduce (NCCL's NVLS).  One node: each GPU's buffer goes to the NVSwitch once and the
    reduced result comes back once, plus the multicast store of its reduced shard: ``size (1 + 1/g)`` per
    direction per GPU, one step (NCCL pipelines the ld_reduce and the multimem store).  So
    ``t = size (1 + 1/g) / B_nvls`` and busbw ``= 2 (g-1)/(g+1) B_nvls``, above the port rate for ``g > 3``.
    ``B_nvls`` is the NVLS link of the fabric (``scale_up.bw * efficiency * nvls_efficiency``).

    Several nodes: NCCL runs NVLS across nodes only with CollNet (IB SHARP): NVLS reduce-scatter, an all-reduce
    of each shard among the same-index GPUs over the network, NVLS all-gather, pipelined.  NCCL's model prices
    the network part at its channels' network rate with a ring's step count -- ``busBw = channels x
    min(intraBw, bwInter)``, ``algbw = busBw x nRanks / (2 (nRanks-1))`` (src/graph/tuning.cc; the factor 2
    that SHARP's halving would give is applied to NVLSTree on two nodes only) -- so each NIC carries
    ``2 (n-1)/n x size/g`` each way, as in a ring, not the ``size/g`` an ideal in-switch reduction would:
    ``t = max(NVLS part, 2 (n-1)/n x size / (g x B_nic))``."""

    nccl = True
    family = "nvls"
    via = ("nvls",)
    requires = ("nvls",)
    nvls_intra = True

    def __post_init__(self):
        self.name, self.op = "nvls", "all_reduce"
        if self.layout.nodes > 1:
            self.requires = ("nvls", "sharp")

    def steps(self, rank):
        L = self.layout
        g = L.gpus_per_node
        if L.nodes > 1:
            return super().steps(rank)
        node, local = divmod(rank, g)
        peers = self._local_peers(node, local)
        if not len(peers):
            return []
        return [(peers, np.full(len(peers), self._intra_bytes()))]

    def _inter_flows(self, node, local, shard):
        n = self.layout.n
        d, sz = _sharp_flows(self.layout, node, local, shard)
        return d, sz * 2.0 * (n - 1) / n


def _sharp_flows(L: Layout, node: int, local: int, shard: float) -> Step:
    """IB SHARP between nodes: the GPU's shard goes up to the switches once and the reduced shard comes back once
    (NIC tx = rx = shard), through the SHARP links; a flow to the same rail's GPU on the next node carries
    exactly that volume on the NIC."""
    return np.array([L.rank((node + 1) % L.nodes, local)], dtype=np.int64), np.array([shard])


class AllReduceNvlsTree(AllReduceTree):
    """NCCL's NVLSTree: NVLS reduce-scatter and all-gather inside the node (the switch reduces: each NIC carries
    only its ``1/g`` shard), the double binary tree between nodes (as :class:`AllReduceTree`), pipelined.  On two
    nodes the NIC part is ``size/g`` each way, so busbw ``= 2 (n-1)/n x g x B_nic`` when the NVLS part keeps up
    (NCCL's tuning model doubles NVLSTree's inter-node bandwidth on two nodes, src/graph/tuning.cc)."""

    family = "nvls_tree"
    via = ("nvls",)
    requires = ("nvls",)
    nvls_intra = True

    def __post_init__(self):
        self.name, self.op = "nvls_tree", "all_reduce"

    def fill_factor(self, min_channels: int = 0):
        """Pipeline fill of NCCL's NVLSTree: ``16 channels x g heads`` pipelines (one head per NIC, src/graph/
        connect.cc ``connectNvls``), each chunk through the NVLS reduce-scatter, the tree up and down
        (``depth`` network hops each) and the NVLS all-gather: ``2 + 2 depth`` stages.  Chunk: 128 KiB (64 KiB
        from 4 nodes), shrunk as NCCL does when the pipelines carry few chunks (src/enqueue.cc: 128 KiB below
        ``16 x ops x chunk`` bytes, 64 KiB below ``4 x``, 32 KiB below ``1 x``).  ``NCCL_MIN_CTAS``
        (``min_channels``) raises the 16 channels to it (src/transport/nvls.cc ``ncclNvlsTuning``)."""
        L = self.layout
        ops = max(NVLS_CHANNELS, min_channels) * L.gpus_per_node
        chunk = float(NVLS_CHUNK_BYTES if L.nodes < 4 else 65536)
        for below, floor, to in ((16, 131072, 131072), (4, 65536, 65536), (1, 32768, 32768)):
            if self.size_bytes < below * ops * chunk and chunk > floor:
                chunk = to
        return _pipeline_fill(self.size_bytes * _tree_nic_passes(L.nodes), 2 + 2 * _tree_depth(L.nodes), chunk, ops)


class AllReduceCollNet(_HierarchicalInNetwork):
    """NCCL's CollNet (Direct): intra-node reduce-scatter, IB SHARP all-reduce of each shard in the switches
    (each NIC sends its shard once and receives the result once: half the network bytes of a ring or a tree),
    intra-node all-gather, pipelined."""

    nccl = True
    family = "collnet"
    via = ("sharp",)
    requires = ("sharp",)
    min_nodes = 2

    def __post_init__(self):
        self.name, self.op = "collnet", "all_reduce"

    def _inter_flows(self, node, local, shard):
        return _sharp_flows(self.layout, node, local, shard)


class _Pat(Algorithm):
    """NCCL's PAT (parallel aggregated trees) for all-gather and reduce-scatter at one GPU per node (NCCL >= 2.23;
    ``ncclPatEnable``: ``nNodes == nRanks``, Simple only, src/graph/tuning.cc): logarithmic latency where a ring
    pays ``n-1`` steps.  Written as Bruck's schedule: ``ceil(log2 n)`` steps, step ``k`` moving
    ``min(2^k, n - 2^k)`` blocks of ``size/n`` to the rank ``2^k`` away -- ``(n-1)/n x size`` per rank, as a
    ring.  NCCL's tuning model also scales PAT's bandwidth by 0.75 (its pipelining through a bounded buffer);
    that factor is left out here."""

    family = "pat"
    nccl = True
    max_gpus_per_node = 1
    reverse = False

    def steps(self, rank):
        n = self.layout.n
        if n < 2:
            return []
        block = self.size_bytes / n
        out = []
        k = 1
        while k < n:
            d = (rank - k) % n if not self.reverse else (rank + k) % n
            out.append((np.array([d], dtype=np.int64), np.array([min(k, n - k) * block])))
            k *= 2
        return out[::-1] if self.reverse else out


class AllGatherPat(_Pat):
    def __post_init__(self):
        self.name, self.op = "pat", "all_gather"


class ReduceScatterPat(_Pat):
    reverse = True

    def __post_init__(self):
        self.name, self.op = "pat", "reduce_scatter"


REGISTRY: dict[str, dict[str, type[Algorithm]]] = {
    "all_to_all": {"direct": AllToAllDirect, "hierarchical": AllToAllHierarchical},
    "all_reduce": {"ring": AllReduceRing, "direct": AllReduceDirect, "hierarchical": AllReduceHierarchical,
                   "hierarchical_rhd": AllReduceHierarchicalRHD, "tree": AllReduceTree, "nvls": AllReduceNvls,
                   "nvls_tree": AllReduceNvlsTree, "collnet": AllReduceCollNet},
    "reduce_scatter": {"ring": ReduceScatterRing, "direct": ReduceScatterDirect, "pat": ReduceScatterPat},
    "all_gather": {"ring": AllGatherRing, "direct": AllGatherDirect, "pat": AllGatherPat},
}
#: what NCCL implements, per op (the default tuner's candidates): all-to-all as grouped send/recv (``direct``);
#: all-reduce ring, tree, NVLS, NVLSTree, CollNet (Direct); reduce-scatter / all-gather ring and PAT (NVIDIA/nccl
#: master 5067397 src/graph/tuning.cc ``ncclTopoTuneModel``; NCCL's NVLS and CollNet variants of reduce-scatter /
#: all-gather are not modelled).  The rest (``hierarchical`` all-to-all and all-reduce, ``hierarchical_rhd``,
#: ``direct`` all-reduce / reduce-scatter / all-gather) are named what-ifs: ``--algorithm`` or the
#: ``*_algorithm`` settings run them, the tuner never picks them
NCCL_SET = {op: tuple(name for name, cls in algos.items() if cls.nccl) for op, algos in REGISTRY.items()}
DEFAULT_ALGORITHM = {"all_to_all": "direct", "all_reduce": "ring", "reduce_scatter": "ring", "all_gather": "ring"}


def split_choice(algorithm: str | None) -> tuple[str | None, str | None]:
    """``"ring/LL"`` -> ``("ring", "LL")``: an algorithm name may carry its protocol (NCCL_ALGO/NCCL_PROTO in one
    string, as the tuner's choices do)."""
    if algorithm is None or "/" not in algorithm:
        return algorithm, None
    name, proto = algorithm.split("/", 1)
    return name, canonical_protocol(proto, "<argument>", "algorithm")


def make_algorithm(op: str, algorithm: str | None, layout: Layout, size_bytes: float, channels: int = 0,
                   protocol: str | None = None) -> Algorithm:
    """Instantiate a registered algorithm; unknown names raise :class:`SpecError`.  ``algorithm`` may name the
    protocol too (``"ring/LL128"``); ``protocol`` overrides it; default Simple."""
    algorithm, proto_in_name = split_choice(algorithm)
    protocol = canonical_protocol(protocol) or proto_in_name or "Simple"
    if op not in REGISTRY:
        raise SpecError("<argument>", "op", f"unknown collective {op!r}; expected one of {', '.join(OPS)}")
    name = algorithm or DEFAULT_ALGORITHM[op]
    if name not in REGISTRY[op]:
        raise SpecError("<argument>", "algorithm",
                        f"unknown algorithm {name!r} for {op}; expected one of {', '.join(REGISTRY[op])}")
    if size_bytes < 0:
        raise SpecError("<argument>", "size", f"must be non-negative, got {size_bytes}")
    cls = REGISTRY[op][name]
    if layout.nodes < cls.min_nodes and layout.n > 1:
        raise SpecError("<argument>", "algorithm", f"{op}:{name} needs at least {cls.min_nodes} nodes")
    if cls.max_gpus_per_node and layout.gpus_per_node > cls.max_gpus_per_node:
        raise SpecError("<argument>", "algorithm", f"{op}:{name} runs with at most {cls.max_gpus_per_node} GPU per "
                                                   f"node (NCCL's PAT); this group has {layout.gpus_per_node}")
    return cls(layout, float(size_bytes), channels, protocol)


def missing_hardware(algo: Algorithm, topology) -> list[str]:
    """Which of the in-network reductions ``algo`` needs the topology does not declare."""
    have = {"nvls": topology.scale_up.nvls, "sharp": topology.scale_out.sharp}
    return [h for h in algo.requires if not have[h]]
