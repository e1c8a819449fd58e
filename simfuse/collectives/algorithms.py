"""Bulk-synchronous collective algorithms as per-rank step schedules.

An algorithm says, for a rank, what it sends in each step: ``steps(rank) -> [(dsts, sizes_bytes), ...]``.
A rank starts step ``s`` once its own sends of step ``s-1`` have completed and everything addressed to it in
step ``s-1`` has arrived (the data dependency of rings and phased algorithms).

Sizes follow nccl-tests: ``size_bytes`` is the per-rank buffer (all-reduce: the vector; all-to-all: the send
buffer, ``size/n`` to each peer; reduce-scatter: the input, all-gather: the output, both ``n`` chunks).
``symmetric`` says whether every rank's schedule is a relabelling of rank 0's on a symmetric fabric, so the
representative-rank fast path is exact.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import SpecError

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
    name: str = field(default="", init=False)
    op: str = field(default="", init=False)

    symmetric: bool = field(default=True, init=False)

    def __post_init__(self):
        pass

    def steps(self, rank: int) -> list[Step]:  # pragma: no cover - interface
        raise NotImplementedError


def _others(n: int, rank: int) -> np.ndarray:
    d = np.arange(n, dtype=np.int64)
    return d[d != rank]


class AllToAllDirect(Algorithm):
    """Every rank sends ``size/n`` to every other rank at once (pairwise direct)."""

    def __post_init__(self):
        self.name, self.op = "direct", "all_to_all"

    def steps(self, rank):
        n = self.layout.n
        d = _others(n, rank)
        return [(d, np.full(len(d), self.size_bytes / n))] if len(d) else []


class AllToAllHierarchical(Algorithm):
    """Two phases: intra-node exchange that gathers, on GPU ``j`` of each node, all data bound for local index
    ``j`` everywhere; then an inter-node exchange between same-index GPUs (same rail), ``g*size/n`` per node."""

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
        return [(succ, np.full(len(succ), per)) for _ in range(n_steps)]

    def __post_init__(self):
        c = self._ring_channels()
        self.symmetric = c == self.layout.gpus_per_node or self.layout.nodes == 1


class AllReduceRing(_Ring):
    """Ring all-reduce: ``n-1`` reduce-scatter steps then ``n-1`` all-gather steps of ``size/n``."""

    def __post_init__(self):
        super().__post_init__()
        self.name, self.op = "ring", "all_reduce"

    def steps(self, rank):
        n = self.layout.n
        return self._ring_steps(rank, 2 * (n - 1), self.size_bytes / n)


class ReduceScatterRing(_Ring):
    def __post_init__(self):
        super().__post_init__()
        self.name, self.op = "ring", "reduce_scatter"

    def steps(self, rank):
        n = self.layout.n
        return self._ring_steps(rank, n - 1, self.size_bytes / n)


class AllGatherRing(_Ring):
    def __post_init__(self):
        super().__post_init__()
        self.name, self.op = "ring", "all_gather"

    def steps(self, rank):
        n = self.layout.n
        return self._ring_steps(rank, n - 1, self.size_bytes / n)


class AllReduceDirect(Algorithm):
    """Direct two-phase all-reduce: reduce-scatter (``size/n`` to every peer) then all-gather (same)."""

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

    def _inter_steps(self, node: int, local: int, shard: float) -> list[Step]:
        L = self.layout
        N = L.nodes
        if N & (N - 1):
            return super()._inter_steps(node, local, shard)
        rs = [(np.array([L.rank(node ^ (1 << k), local)], dtype=np.int64), np.array([shard / 2 ** (k + 1)]))
              for k in range(N.bit_length() - 1)]
        return rs + rs[::-1]


REGISTRY: dict[str, dict[str, type[Algorithm]]] = {
    "all_to_all": {"direct": AllToAllDirect, "hierarchical": AllToAllHierarchical},
    "all_reduce": {"ring": AllReduceRing, "direct": AllReduceDirect, "hierarchical": AllReduceHierarchical,
                   "hierarchical_rhd": AllReduceHierarchicalRHD},
    "reduce_scatter": {"ring": ReduceScatterRing, "direct": ReduceScatterDirect},
    "all_gather": {"ring": AllGatherRing, "direct": AllGatherDirect},
}
DEFAULT_ALGORITHM = {"all_to_all": "direct", "all_reduce": "ring", "reduce_scatter": "ring", "all_gather": "ring"}


def make_algorithm(op: str, algorithm: str | None, layout: Layout, size_bytes: float, channels: int = 0) -> Algorithm:
    """Instantiate a registered algorithm; unknown names raise :class:`SpecError`."""
    if op not in REGISTRY:
        raise SpecError("<argument>", "op", f"unknown collective {op!r}; expected one of {', '.join(OPS)}")
    name = algorithm or DEFAULT_ALGORITHM[op]
    if name not in REGISTRY[op]:
        raise SpecError("<argument>", "algorithm",
                        f"unknown algorithm {name!r} for {op}; expected one of {', '.join(REGISTRY[op])}")
    if size_bytes < 0:
        raise SpecError("<argument>", "size", f"must be non-negative, got {size_bytes}")
    return REGISTRY[op][name](layout, float(size_bytes), channels)
