"""The operator graph: per-rank DAGs of kernels, collectives on groups, fused operators, send/recv and waits.

Vocabulary (close to Chakra's execution-trace nodes: COMP_NODE, COMM_COLL_NODE, COMM_SEND/RECV_NODE):

* :class:`ComputeNode`: a kernel (:class:`~simfuse.costs.KernelWork`, priced by the cost model) or a fixed
  duration (``time_s``, e.g. imported from a trace);
* :class:`CollectiveNode`: a bulk collective (``all_reduce``, ``all_to_all``, ``reduce_scatter``, ``all_gather``)
  on a named communicator group, ``size_bytes`` per rank in nccl-tests convention; ``algorithm=None`` lets the
  tuner choose;
* :class:`AllToAllVNode`: an uneven bulk all-to-all (``send_bytes[i]`` to the group's ``i``-th member); a flow to a
  peer starts once both sides have launched it;
* :class:`FusedNode`: a fused compute+communication operator (:mod:`simfuse.fused`): a kernel whose workgroups
  push results to peers; the stream is free when the kernel ends, dependents wait until the data has arrived;
* :class:`SendNode` / :class:`RecvNode`: point-to-point, matched by ``(src, dst, tag)``;
* :class:`DelayNode`: a fixed wait (host gaps, a dependency-only join with ``time_s=0``).

Execution semantics (:mod:`simfuse.graph.executor`): the nodes of one stream of a rank run in program order
(CUDA stream semantics); a node starts when the previous node of its stream has released the stream and every
node in ``deps`` is done.  Streams are named freely (``compute``, ``comm``, ``comm_dp`` ...).

A :class:`Graph` holds the programs of the simulated ranks.  Either every rank has a program, or only class
representatives do and ``class_of_rank`` says which class every rank belongs to (ranks of a class run
relabellings of the representative's program; see :func:`simfuse.graph.symmetry.relative_signature` for the
check).  ``repeat``: the graph is one of ``repeat`` identical back-to-back steps (transformer layers), so the
step time is multiplied.  Builders only emit nodes: they never touch simpy or links.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..collectives.groups import Group
from ..costs import KernelWork
from ..errors import SpecError

COLLECTIVE_OPS = ("all_reduce", "all_to_all", "reduce_scatter", "all_gather")


@dataclass(kw_only=True)
class Node:
    """Common fields: ``name``, ``deps`` (ids of nodes of the same rank that must be done), ``stream``, ``phase``
    (label for breakdowns; default the name).  ``id`` is assigned by :meth:`RankGraph.add`."""

    name: str
    deps: tuple[int, ...] = ()
    stream: str = "compute"
    phase: str = ""
    id: int = -1

    kind = "node"

    def label(self) -> str:
        return self.phase or self.name


@dataclass(kw_only=True)
class ComputeNode(Node):
    work: KernelWork | None = None
    time_s: float | None = None
    kind = "compute"

    def __post_init__(self):
        if (self.work is None) == (self.time_s is None):
            raise SpecError("<graph>", self.name, "a compute node needs exactly one of work or time_s")
        if self.time_s is not None and not self.time_s >= 0:
            raise SpecError("<graph>", self.name, f"time_s must be >= 0, got {self.time_s!r}")


@dataclass(kw_only=True)
class CollectiveNode(Node):
    op: str
    group: str
    size_bytes: float
    algorithm: str | None = None
    stream: str = "comm"
    kind = "collective"

    def __post_init__(self):
        if self.op not in COLLECTIVE_OPS:
            raise SpecError("<graph>", self.name, f"unknown collective {self.op!r}; expected one of "
                                                  f"{', '.join(COLLECTIVE_OPS)}")
        if not self.size_bytes >= 0:
            raise SpecError("<graph>", self.name, f"size_bytes must be >= 0, got {self.size_bytes!r}")


@dataclass(kw_only=True)
class AllToAllVNode(Node):
    group: str
    send_bytes: np.ndarray
    stream: str = "comm"
    kind = "all_to_allv"

    def __post_init__(self):
        self.send_bytes = np.asarray(self.send_bytes, dtype=float)
        if np.any(~np.isfinite(self.send_bytes)) or np.any(self.send_bytes < 0):
            raise SpecError("<graph>", self.name, "send_bytes must be finite and >= 0")

    @property
    def size_bytes(self) -> float:
        return float(self.send_bytes.sum())


@dataclass(kw_only=True)
class FusedNode(Node):
    """``op``: an operator object of :mod:`simfuse.fused` (``EmbeddingAllToAll``, ``GemvAllReduce``, ``PushKernel``
    ...); ``knobs``: :class:`~simfuse.fused.FusedKnobs` (None = defaults)."""

    op: object
    group: str
    knobs: object = None
    wait_phase: str = ""  # label of the exposed wait for data after the kernel (breakdowns)
    kind = "fused"

    @property
    def size_bytes(self) -> float:
        return float(self.op.collective_size_bytes())


@dataclass(kw_only=True)
class SendNode(Node):
    dst: int
    size_bytes: float
    tag: int = 0
    stream: str = "comm"
    kind = "send"


@dataclass(kw_only=True)
class RecvNode(Node):
    src: int
    size_bytes: float
    tag: int = 0
    stream: str = "comm"
    kind = "recv"


@dataclass(kw_only=True)
class DelayNode(Node):
    time_s: float = 0.0
    kind = "delay"

    def __post_init__(self):
        if not self.time_s >= 0:
            raise SpecError("<graph>", self.name, f"time_s must be >= 0, got {self.time_s!r}")


@dataclass
class RankGraph:
    """The program of one rank: nodes in program order (ids are list positions)."""

    rank: int
    nodes: list[Node] = field(default_factory=list)

    def add(self, node: Node) -> int:
        """Append ``node`` (its deps must be earlier nodes); returns its id."""
        nid = len(self.nodes)
        for d in node.deps:
            if not 0 <= d < nid:
                raise SpecError("<graph>", node.name, f"dependency {d} is not an earlier node of rank {self.rank}")
        node.id = nid
        self.nodes.append(node)
        return nid

    def streams(self) -> list[str]:
        seen: dict[str, None] = {}
        for n in self.nodes:
            seen.setdefault(n.stream, None)
        return list(seen)


@dataclass
class Graph:
    """Programs of the simulated ranks on ``n_ranks`` ranks (``nodes`` x ``gpus_per_node``)."""

    nodes: int
    gpus_per_node: int
    groups: dict[str, Group] = field(default_factory=dict)
    programs: dict[int, RankGraph] = field(default_factory=dict)
    class_of_rank: np.ndarray | None = None
    repeat: int = 1
    name: str = "graph"
    meta: dict = field(default_factory=dict)  # builder notes carried to results (e.g. number of rank classes)

    @property
    def n_ranks(self) -> int:
        return self.nodes * self.gpus_per_node

    def add_group(self, group: Group) -> Group:
        if max(group.ranks) >= self.n_ranks:
            raise SpecError("<graph>", group.name, f"rank {max(group.ranks)} is outside the {self.n_ranks} ranks")
        old = self.groups.get(group.name)
        if old is not None and old.ranks != group.ranks:
            raise SpecError("<graph>", group.name, "two different groups share this name")
        self.groups[group.name] = group
        return group

    def program(self, rank: int) -> RankGraph:
        """The program of ``rank`` (created empty on first use)."""
        if not 0 <= rank < self.n_ranks:
            raise SpecError("<graph>", "rank", f"{rank} is outside the {self.n_ranks} ranks")
        rg = self.programs.get(rank)
        if rg is None:
            rg = self.programs[rank] = RankGraph(rank)
        return rg

    @property
    def full(self) -> bool:
        """True when every rank has its own program (no class representatives)."""
        return self.class_of_rank is None and len(self.programs) == self.n_ranks

    def validate(self) -> None:
        """Groups exist and contain the ranks that use them; ranks without programs are covered by classes."""
        for r, rg in self.programs.items():
            for nd in rg.nodes:
                gname = getattr(nd, "group", None)
                if gname is not None:
                    g = self.groups.get(gname)
                    if g is None:
                        raise SpecError("<graph>", nd.name, f"unknown group {gname!r}")
                    if r not in g:
                        raise SpecError("<graph>", nd.name, f"rank {r} is not a member of group {gname!r}")
        if self.class_of_rank is None and len(self.programs) not in (self.n_ranks,):
            if len(self.programs) != 1 or 0 not in self.programs:
                raise SpecError("<graph>", "programs", "give every rank a program, or class representatives "
                                                        "with class_of_rank, or rank 0 alone (symmetric)")
        if self.repeat < 1:
            raise SpecError("<graph>", "repeat", "must be >= 1")

    def node_count(self) -> int:
        return sum(len(rg.nodes) for rg in self.programs.values())
