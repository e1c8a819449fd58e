"""Communicator groups: collectives over any subset of ranks, and the candidates the tuner
(:mod:`.tuner`) picks from per group.

A :class:`Group` is a named, ordered tuple of global ranks (like an NCCL communicator or a torch process group).
Algorithms (:mod:`.algorithms`) are written for a ``Layout(nodes, gpus_per_node)`` numbered node-major; a
group is *regular* when its members fill ``m`` nodes with ``k`` ranks each (sorted node-major), and then an
algorithm on ``Layout(m, k)`` runs on the group with its local index ``i`` mapped to ``group.ranks[i]``
(:class:`GroupAlgorithm`).  Irregular groups run the flat algorithms only (direct, ring), on ``Layout(1, size)``.

Group constructors for the usual parallel layouts: :func:`world`, :func:`node_local` (the GPUs of one node: a
tensor-parallel group), :func:`rail` (the same local index on every node: a data-parallel group across nodes),
:func:`blocks` (consecutive blocks of ranks).

Candidates (:func:`candidate_algorithms`) read ``"algorithm/protocol"`` (``"ring/LL"``, ``"nvls/Simple"``) under
``collectives.protocol_model: nccl``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import SpecError
from .algorithms import REGISTRY, Algorithm, Layout, make_algorithm, missing_hardware, split_choice
from .protocols import p2p_protocols, protocols_for

FLAT_ALGORITHMS = ("direct", "ring")
#: algorithms whose inter-node phase is a ring of 2(N-1) steps (an all-reduce's not tuned beyond 16 nodes)
RING_BETWEEN_NODES = ("ring", "hierarchical")


@dataclass(frozen=True)
class Group:
    """A communicator: ``name`` and its member ranks (global ranks, in communicator order)."""

    name: str
    ranks: tuple[int, ...]

    def __post_init__(self):
        if len(self.ranks) == 0:
            raise SpecError("<group>", self.name, "a group needs at least one rank")
        if len(set(self.ranks)) != len(self.ranks):
            raise SpecError("<group>", self.name, "a group lists a rank twice")
        if min(self.ranks) < 0:
            raise SpecError("<group>", self.name, "ranks must be >= 0")

    @property
    def size(self) -> int:
        return len(self.ranks)

    def index(self, rank: int) -> int:
        return self._index_map()[rank]

    def _index_map(self) -> dict[int, int]:
        m = self.__dict__.get("_idx")
        if m is None:
            m = {r: i for i, r in enumerate(self.ranks)}
            object.__setattr__(self, "_idx", m)
        return m

    def __contains__(self, rank: int) -> bool:
        return rank in self._index_map()

    def shape(self, gpus_per_node: int) -> tuple[int, int] | None:
        """``(nodes, ranks_per_node)`` if the group is regular on nodes of ``gpus_per_node`` GPUs, else None:
        node-major, every node with the same count of members in the same local order.  Kept on the group (a
        world group of 131,072 ranks is asked once per collective of a run): one pass over the ranks, no sort."""
        memo = self.__dict__.setdefault("_shapes", {})
        if gpus_per_node not in memo:
            memo[gpus_per_node] = self._regular_shape(gpus_per_node)
        return memo[gpus_per_node]

    def _regular_shape(self, gpus_per_node: int) -> tuple[int, int] | None:
        r = np.asarray(self.ranks, dtype=np.int64)
        nodes = r // gpus_per_node
        step = np.diff(nodes)
        if np.any(step < 0):  # members of a node are consecutive, nodes in increasing order
            return None
        bounds = np.concatenate([[0], np.flatnonzero(step) + 1, [len(r)]])
        counts = np.diff(bounds)
        k = int(counts[0])
        if np.any(counts != k):
            return None
        local = (r % gpus_per_node).reshape(len(counts), k)
        if np.any(local != local[0]) or np.any(np.diff(local[0]) <= 0):
            return None
        return len(counts), k

    def key(self, gpus_per_node: int) -> tuple:
        """What the tuner's choice depends on: the regular shape and the local indices' spacing, else the size."""
        s = self.shape(gpus_per_node)
        if s is None:
            return ("irregular", self.size)
        r = np.asarray(self.ranks[: s[1]]) % gpus_per_node
        return ("regular", s, tuple(np.diff(r).tolist()))


def world(n_ranks: int) -> Group:
    return Group("world", tuple(range(n_ranks)))


def node_local(node: int, gpus_per_node: int, name: str | None = None) -> Group:
    return Group(name or f"node{node}", tuple(range(node * gpus_per_node, (node + 1) * gpus_per_node)))


def rail(local: int, nodes: int, gpus_per_node: int, name: str | None = None) -> Group:
    return Group(name or f"rail{local}", tuple(n * gpus_per_node + local for n in range(nodes)))


def blocks(n_ranks: int, size: int, prefix: str) -> list[Group]:
    """Consecutive blocks of ``size`` ranks (``prefix0``, ``prefix1`` ...)."""
    if size < 1 or n_ranks % size:
        raise SpecError("<group>", prefix, f"block size {size} does not divide {n_ranks} ranks")
    return [Group(f"{prefix}{i}", tuple(range(i * size, (i + 1) * size))) for i in range(n_ranks // size)]


@dataclass
class GroupAlgorithm:
    """A registered algorithm running on a group: local schedules mapped to global ranks."""

    algo: Algorithm
    group: Group
    _ranks: np.ndarray = field(init=False, repr=False)

    def __post_init__(self):
        self._ranks = np.asarray(self.group.ranks, dtype=np.int64)

    @property
    def name(self) -> str:
        return self.algo.name

    @property
    def op(self) -> str:
        return self.algo.op

    @property
    def size_bytes(self) -> float:
        return self.algo.size_bytes

    @property
    def symmetric(self) -> bool:
        return self.algo.symmetric

    @property
    def layout(self) -> Layout:
        return self.algo.layout

    @property
    def protocol(self) -> str:
        return self.algo.protocol

    @property
    def family(self) -> str:
        return self.algo.family

    @property
    def via(self) -> tuple[str, ...]:
        return self.algo.via

    @property
    def requires(self) -> tuple[str, ...]:
        return self.algo.requires

    def steps(self, rank: int):
        local = self.group.index(rank)
        out, mapped = [], {}
        for step in self.algo.steps(local):  # a step repeated as one object (rings) stays one object
            hit = mapped.get(id(step))
            if hit is None:
                hit = mapped[id(step)] = (self._ranks[step[0]], step[1])
            out.append(hit)
        return out

    @property
    def members(self) -> list[int]:
        return list(self.group.ranks)


def group_layout(group: Group, gpus_per_node: int) -> tuple[Layout, bool]:
    """The layout an algorithm sees on ``group`` and whether the group is regular."""
    s = group.shape(gpus_per_node)
    if s is None:
        return Layout(1, group.size), False
    return Layout(*s), True


def make_group_algorithm(op: str, algorithm: str | None, group: Group, gpus_per_node: int, size_bytes: float,
                         channels: int = 0) -> GroupAlgorithm:
    """Instantiate ``algorithm`` (a registry name) for ``op`` on ``group``."""
    layout, regular = group_layout(group, gpus_per_node)
    if not regular and split_choice(algorithm)[0] not in (None, *FLAT_ALGORITHMS):
        raise SpecError("<group>", group.name, f"{algorithm} needs a group with the same GPUs on every node; "
                                               f"this one is irregular (use direct or ring)")
    return GroupAlgorithm(make_algorithm(op, algorithm, layout, size_bytes, channels), group)


def _protocols(op: str, algo, layout, group: Group, model: str, size_bytes: float | None) -> tuple[str, ...]:
    """The protocols ``algo`` runs with under ``model``; an all-to-all keeps those NCCL's p2p rule allows at
    ``size_bytes`` (:func:`~simfuse.collectives.protocols.p2p_protocols`; None: every protocol)."""
    protos = protocols_for(algo.family, model)
    if op == "all_to_all" and model == "nccl" and size_bytes is not None and group.size > 0:
        allowed = p2p_protocols(layout.nodes > 1, size_bytes / group.size)  # grouped send/recv
        protos = tuple(p for p in protos if p in allowed)
    return protos


def candidate_algorithms(op: str, group: Group, gpus_per_node: int, *, symmetric_only: bool,
                         topology=None, size_bytes: float | None = None, what_ifs: bool = False) -> list[str]:
    """Algorithms the default tuner tries for ``op`` on ``group``, each with every protocol it runs with
    (``"ring/LL"``, ...) when the topology's ``collectives.protocol_model`` is ``nccl`` (plain names otherwise).

    Only what NCCL implements on that hardware (:data:`~simfuse.collectives.algorithms.NCCL_SET`): NVLS and
    SHARP variants only where the topology declares them, PAT only at one GPU per node, NVLSTree, tree and
    CollNet only across nodes, with NCCL's protocol rules (NVLS, NVLSTree, CollNet and PAT Simple only; an
    all-to-all, grouped send/recv, keeps only the protocols NCCL's p2p rule allows at ``size_bytes``,
    :func:`~simfuse.collectives.protocols.p2p_protocols`; None keeps every protocol).  ``what_ifs``: also
    simfuse's own schedules (hierarchical, hierarchical_rhd, direct all-reduce ...), which otherwise run only
    when named.  Left out: an all-reduce ring across more than 16 nodes (latency-bound there: 2(N-1) sequential
    steps, NCCL's tuner takes trees; and costly to simulate) and algorithms the group's shape does not allow."""
    layout, regular = group_layout(group, gpus_per_node)
    model = topology.collectives.protocol_model if topology is not None else "none"
    names = []
    for name, cls in REGISTRY[op].items():
        if not (cls.nccl or what_ifs):
            continue
        if not regular and name not in FLAT_ALGORITHMS:
            continue
        if name in RING_BETWEEN_NODES and layout.nodes > 16 and (op == "all_reduce" or not cls.nccl):
            continue
        if layout.nodes < cls.min_nodes:
            continue
        if cls.max_gpus_per_node and layout.gpus_per_node > cls.max_gpus_per_node:
            continue
        algo = make_algorithm(op, name, layout, 1.0)
        if topology is not None and missing_hardware(algo, topology):
            continue
        if topology is None and algo.requires:
            continue
        if symmetric_only and not algo.symmetric:
            continue
        protos = _protocols(op, algo, layout, group, model, size_bytes)
        names.extend(name if model == "none" else f"{name}/{p}" for p in protos)
    return names
