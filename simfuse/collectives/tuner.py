"""The tuner: policy above the runner.  :class:`Tuner` picks, like NCCL's tuner, an algorithm NCCL implements and
its protocol for an (op, group shape, size) among the candidates
(:func:`~simfuse.collectives.groups.candidate_algorithms`), memoised per shape and size: the choice depends only on
the group's geometry, so every group of one shape gets the same algorithm.  Across nodes, for the collectives
NCCL's cost model prices (all-reduce, reduce-scatter, all-gather), it takes the candidate NCCL's own model
prices cheapest (:mod:`.nccl_model`; the topology's ``collectives.tuner: nccl``, the default) and the simulation
then prices that choice; elsewhere (one node, all-to-all, simfuse's what-if schedules, ``collectives.tuner:
simulate``) it simulates each candidate alone on the group with the runner and keeps the fastest.
Choices read ``"algorithm/protocol"`` (``"ring/LL"``, ``"nvls/Simple"``) under ``collectives.protocol_model: nccl``.
:class:`GroupAlgorithms` instantiates the choices of one run.

The runner (:mod:`.runner`) never imports this module.
"""

from __future__ import annotations

from ..errors import SpecError
from .algorithms import REGISTRY, make_algorithm, split_choice
from .groups import (
    Group,
    GroupAlgorithm,
    _protocols,
    candidate_algorithms,
    group_layout,
    make_group_algorithm,
)
from .nccl_model import graphs_for, nccl_time_s
from .protocols import protocols_for
from .runner import check_hardware, simulate_group_collective


class Tuner:
    """Picks an algorithm per ``(op, group shape, size)``: across nodes NCCL's choice by NCCL's cost model
    (:meth:`nccl_choice`, where it applies), else the fastest by simulating each candidate alone on the group (the
    fabric is the whole system, so the group's links are the real ones).  Memoised.

    ``forced``: ``{op: algorithm}`` to skip tuning for some ops (a user's choice, e.g. ``--set
    baseline_algorithm=...``).  ``what_ifs``: tune over simfuse's own schedules too (not NCCL's; off by default,
    :func:`candidate_algorithms`)."""

    what_ifs: bool = False

    def __init__(self, topology, nodes: int, gpus_per_node: int, forced: dict[str, str] | None = None):
        self.topology = topology
        self.nodes = nodes
        self.gpus_per_node = gpus_per_node
        self.forced = dict(forced or {})
        self._cache: dict = {}

    def choose(self, op: str, group: Group, size_bytes: float, *, symmetric_only: bool = True,
               algorithm: str | None = None, protocol: str | None = None) -> str:
        """The chosen ``"algorithm[/protocol]"`` (NCCL's model's cheapest or the fastest simulated, see the
        class); ``algorithm`` / ``protocol`` (or a forced algorithm) restrict the search to that algorithm /
        protocol (a name that carries its protocol is returned as given)."""
        forced = self.forced.get(op) or None
        algorithm = algorithm or forced
        if algorithm is not None and "/" in algorithm:
            return algorithm
        if algorithm is not None and protocol is not None:
            return f"{algorithm}/{protocol}"
        key = (op, group.key(self.gpus_per_node), float(size_bytes), symmetric_only, algorithm, protocol)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        names = candidate_algorithms(op, group, self.gpus_per_node, symmetric_only=symmetric_only,
                                     topology=self.topology, size_bytes=size_bytes if protocol is None else None,
                                     what_ifs=self.what_ifs)
        if algorithm is not None:
            names = [n for n in names if split_choice(n)[0] == algorithm] or self._as_named(
                op, group, algorithm, size_bytes if protocol is None else None)
        if protocol is not None:
            names = [n for n in names if split_choice(n)[1] in (None, protocol)]
            names = [n if "/" in n else f"{n}/{protocol}" for n in names]
        if not names:
            raise SpecError("<group>", group.name, f"no {op} algorithm is symmetric on this group; use full mode")
        if len(names) == 1 or group.size == 1:
            best = names[0]
        elif (ranked := self.nccl_choice(op, group, size_bytes, names)) is not None:
            best = ranked
        else:
            best, best_t = names[0], float("inf")
            for name in names:
                t = simulate_group_collective(self.topology, self.nodes, self.gpus_per_node, op, name, group,
                                              size_bytes)
                if t < best_t:
                    best, best_t = name, t
        self._cache[key] = best
        return best

    def nccl_choice(self, op: str, group: Group, size_bytes: float, names: list[str]) -> str | None:
        """The candidate NCCL's cost model prices cheapest (ties: the first listed), or None where that model does
        not decide (``collectives.tuner: simulate``, no protocol model, one node, an irregular group, a GPU
        outside NCCL's tables, a what-if candidate, or none the model runs)."""
        co = self.topology.collectives
        if co.tuner != "nccl" or co.protocol_model != "nccl":
            return None
        shape = group.shape(self.gpus_per_node)
        if shape is None or shape[0] < 2:
            return None
        graphs = graphs_for(self.topology, *shape)
        if graphs is None:
            return None
        best, best_t = None, float("inf")
        for name in names:
            algorithm, protocol = split_choice(name)
            cls = REGISTRY.get(op, {}).get(algorithm)
            if cls is None or not cls.nccl or protocol is None:
                return None
            t = nccl_time_s(op, cls.family, protocol, shape[0], shape[1], size_bytes, graphs)
            if t is not None and t < best_t:  # None: NCCL's model does not run it (NVLSTree on one GPU a node)
                best, best_t = name, t
        return best

    def _as_named(self, op: str, group: Group, algorithm: str, size_bytes: float | None) -> list[str]:
        """A named algorithm the candidates leave out (a ring across more than 16 nodes, an asymmetric one): run
        as named, with each protocol it runs with under ``protocol_model: nccl`` (the tuner picks the fastest; an
        all-to-all keeps NCCL's p2p rule at ``size_bytes``), unless it needs an in-network reduction the topology
        does not declare (SpecError naming the topology field, as ``simfuse collective --algorithm`` does)."""
        if algorithm not in REGISTRY.get(op, {}):
            return [algorithm]
        layout, _ = group_layout(group, self.gpus_per_node)
        algo = make_algorithm(op, algorithm, layout, 1.0)
        check_hardware(algo, self.topology)
        model = self.topology.collectives.protocol_model
        if model == "none":
            return [algorithm]
        protos = _protocols(op, algo, layout, group, model, size_bytes) or protocols_for(algo.family, model)
        return [f"{algorithm}/{p}" for p in protos]


class GroupAlgorithms:
    """The collective algorithms of one run: the tuner's choice (or a named algorithm) instantiated on its group,
    memoised per (op, what was asked, group, size).  A :class:`GroupAlgorithm` holds no run state, so every
    simulated rank of the run shares one; the executor owns one per run, next to its tuner.

    :meth:`get` asks one of three things: ``algorithm`` given with its protocol (``"ring/LL"``), that choice as
    named (no tuning); an algorithm without a protocol (a collective node that names one) or ``restrict_to``
    given, the tuner's fastest protocol of that one algorithm (a bulk exchange is priced as a ``direct``
    all-to-all, :class:`~simfuse.collectives.exchange.BulkProtocols`);
    neither, the tuner's fastest algorithm and protocol.  Groups are told apart by name, first rank and size
    (the groups of one graph have distinct names)."""

    def __init__(self, tuner: Tuner, gpus_per_node: int, channels: int, *, symmetric_only: bool):
        self.tuner, self.gpus_per_node, self.channels = tuner, gpus_per_node, channels
        self.symmetric_only = symmetric_only
        self._memo: dict = {}

    def get(self, op: str, group: Group, size_bytes: float, *, algorithm: str | None = None,
            restrict_to: str | None = None) -> tuple[str, GroupAlgorithm]:
        """``(choice, algorithm on the group)`` for ``op`` on ``group`` at ``size_bytes`` (see the class)."""
        if algorithm is not None and restrict_to is not None:
            raise ValueError("name an algorithm or restrict the tuner to one, not both")
        if algorithm is not None and "/" not in algorithm:
            # a named algorithm without a protocol runs its fastest protocol, as `simfuse collective --algorithm`
            # does (NCCL tunes the protocol of a forced NCCL_ALGO too)
            algorithm, restrict_to = None, algorithm
        key = (op, algorithm, restrict_to, group.name, group.ranks[0], group.size, float(size_bytes))
        hit = self._memo.get(key)
        if hit is None:
            name = algorithm or self.tuner.choose(op, group, size_bytes, symmetric_only=self.symmetric_only,
                                                  algorithm=restrict_to)
            hit = self._memo[key] = (name, make_group_algorithm(op, name, group, self.gpus_per_node, size_bytes,
                                                                self.channels))
        return hit
