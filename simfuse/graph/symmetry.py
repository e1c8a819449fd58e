"""Symmetry as a property of the graph: ranks whose programs are relabellings of each other form a class.

A rank's *relative signature* describes its program with every peer written relative to the rank itself:
node offset ``(node(peer) - node(rank)) mod nodes`` and local offset ``(local(peer) - local(rank)) mod
gpus_per_node`` (the fabric's automorphisms for the symmetric fabrics here: shifting nodes, and shifting local
indices the same way on every node).  Groups are described by their members' offsets, uneven all-to-all sizes
by the sizes sent to each offset, fused operators by their per-destination output under the same relabelling
(:meth:`~simfuse.fused.base.FusedOp.destination_summary`: how many outputs of how many bytes go to each
destination, in closed form, so no per-workgroup arrays).  Ranks with equal signatures run relabelled programs.

What a signature does not see: the order a fused kernel's workgroups run in.  ``remote_first`` (the default)
orders them by destination offset from the rank (a relabelling of rank 0's order); ``natural`` runs every rank in
index order (incast: every rank starts with rank 0's slice), which no relabelling maps onto rank 0's, yet its
signature is rank 0's: fold a graph with ``natural`` fused nodes only where that approximation is wanted
(``simfuse op`` refuses it on the fast path).

:func:`fold` turns a graph with a program per rank into the fast form: rank 0 alone when every rank has the
signature of rank 0 (exact), or class representatives with ``class_of_rank`` (the class approximation of
:meth:`simfuse.network.Fabric.set_rank_classes`) when asked to.  It is applied to imported Chakra graphs
(:func:`simfuse.workloads.run.simulate_graph`), which hold no fused nodes; the workload builders emit their
fast forms themselves, so fused-node signatures serve graphs built by hand.
"""

from __future__ import annotations

import numpy as np

from .ir import AllToAllVNode, CollectiveNode, ComputeNode, DelayNode, FusedNode, Graph, RecvNode, SendNode


def _rel(graph: Graph, rank: int, peers) -> tuple:
    g, N = graph.gpus_per_node, graph.nodes
    p = np.asarray(peers, dtype=np.int64)
    return tuple(zip(((p // g - rank // g) % N).tolist(), ((p % g - rank % g) % g).tolist(), strict=True))


def _rel_group(graph: Graph, rank: int, ranks) -> tuple:
    """Members relative to ``rank`` as a set (sorted): the registered algorithms order a group node-major,
    which node and local shifts preserve."""
    return tuple(sorted(_rel(graph, rank, ranks)))


def _rel_summary(graph: Graph, rank: int, dst, count, bytes_each) -> tuple:
    """A fused operator's :meth:`~simfuse.fused.base.FusedOp.destination_summary` relative to ``rank``: the
    outputs per (relative destination, bytes each), sorted; the same for two ranks exactly when their
    multisets of (relative destination, bytes) per output are."""
    tally: dict = {}
    rel = _rel(graph, rank, dst)
    for key, c in zip(zip(rel, np.asarray(bytes_each, dtype=float).tolist(), strict=True),
                      np.asarray(count, dtype=np.int64).tolist(), strict=True):
        if c:
            tally[key] = tally.get(key, 0) + c
    return tuple(sorted((r, b, c) for (r, b), c in tally.items()))


def _node_sig(graph: Graph, rank: int, nd) -> tuple:
    base = (type(nd).__name__, nd.stream, tuple(nd.deps))
    if isinstance(nd, ComputeNode):
        return base + (nd.work, nd.time_s)
    if isinstance(nd, DelayNode):
        return base + (nd.time_s,)
    if isinstance(nd, CollectiveNode):
        grp = graph.groups[nd.group]
        return base + (nd.op, nd.size_bytes, nd.algorithm, _rel_group(graph, rank, grp.ranks))
    if isinstance(nd, AllToAllVNode):
        grp = graph.groups[nd.group]
        rel = _rel(graph, rank, grp.ranks)
        return base + (tuple(sorted(zip(rel, nd.send_bytes.tolist(), strict=True))),)
    if isinstance(nd, FusedNode):
        grp = graph.groups[nd.group]
        op = nd.op
        out = None
        if hasattr(op, "destination_summary"):
            out = _rel_summary(graph, rank, *op.destination_summary(rank))
            relay = getattr(op, "relay_bytes", None)  # a relaying PushKernel: what each destination forwards
            if relay is not None:
                out = (out, _rel_summary(graph, rank, op.dst_ranks, np.ones(len(relay), dtype=np.int64), relay),
                       op.relay_in_bytes)
            elif hasattr(op, "relay_in_bytes"):  # a RelayWait: what it receives for relaying
                out = (out, op.relay_in_bytes)
        work = op.work("fused") if hasattr(op, "work") else None
        return base + (type(op).__name__, work, out, nd.knobs, _rel_group(graph, rank, grp.ranks))
    if isinstance(nd, SendNode):
        return base + (nd.size_bytes, nd.tag, _rel(graph, rank, [nd.dst]))
    if isinstance(nd, RecvNode):
        return base + (nd.size_bytes, nd.tag, _rel(graph, rank, [nd.src]))
    return base + (repr(nd),)


def relative_signature(graph: Graph, rank: int) -> tuple:
    """The program of ``rank`` with peers relabelled relative to ``rank`` (hashable)."""
    return tuple(_node_sig(graph, rank, nd) for nd in graph.programs[rank].nodes)


def signature_classes(graph: Graph) -> np.ndarray:
    """Class of every rank (numbered by first appearance) from relative signatures; needs every program."""
    if len(graph.programs) != graph.n_ranks:
        raise ValueError("signature_classes needs a program for every rank")
    ids: dict = {}
    out = np.empty(graph.n_ranks, dtype=np.int64)
    for r in range(graph.n_ranks):
        out[r] = ids.setdefault(relative_signature(graph, r), len(ids))
    return out


def is_symmetric(graph: Graph) -> bool:
    """True when every rank's program is a relabelling of rank 0's."""
    return graph.full and int(signature_classes(graph).max()) == 0


def fold(graph: Graph, *, allow_classes: bool = False) -> Graph:
    """The fast form of a full graph: rank 0 alone when symmetric; with ``allow_classes`` one representative
    per signature class otherwise; else the graph unchanged."""
    if not graph.full:
        return graph
    cls = signature_classes(graph)
    n_cls = int(cls.max()) + 1
    if n_cls > 1 and not allow_classes:
        return graph
    out = Graph(graph.nodes, graph.gpus_per_node, dict(graph.groups), repeat=graph.repeat, name=graph.name,
                meta=dict(graph.meta))
    if n_cls == 1:
        out.programs = {0: graph.programs[0]}
        return out
    first = {}
    for r, c in enumerate(cls.tolist()):
        first.setdefault(c, r)
    out.programs = {r: graph.programs[r] for r in first.values()}
    out.class_of_rank = cls
    return out



def node_period(node_types, unit: int = 1) -> int:
    """Smallest multiple ``p`` of ``unit`` dividing ``len(node_types)`` with ``node_types[i] ==
    node_types[(i + p) % N]`` for all ``i``: shifting every rank by ``p`` nodes maps the sequence onto itself."""
    t = np.asarray(node_types)
    N = len(t)
    for p in range(unit, N + 1, unit):
        if N % p == 0 and np.array_equal(t, np.roll(t, -p)):
            return p
    return N


def shift_classes(class_of_rank, nodes: int, gpus_per_node: int, node_unit: int = 1,
                  locals_by: str = "columns") -> np.ndarray:
    """Classes of ranks that see the same labels (``class_of_rank``) around them: rank ``(i, l)`` (node, local)
    and ``(i', l')`` share a class when ``i' = i (mod p)`` -- ``p`` the period of the node sequence
    (:func:`node_period`, a multiple of ``node_unit``; a node's type is its ranks' labels in local order) --
    and locals ``l`` and ``l'`` carry the same label on every node (equal columns).

    Two ranks of one class then see the same labels at every node offset, on their own rail and on their own
    node, so a program built from the labels by node offsets, rails and node-local groups (uniform and uneven
    all-to-alls, hierarchical exchanges, collectives whose schedules are invariant under permutations of the
    local indices) is the same program for both, relabelled: node shifts by ``p`` and a permutation of the
    locals of equal columns, applied on every node, map one onto the other.  What the relabelling does not
    preserve: orders that depend on the local offset between two ranks (a fused kernel's remote-first tile
    order visits a node's GPUs by local offset; a ring's successor is the next local index) -- those make the
    classes an approximation, measured against full simulation in the tests.  ``locals_by="shift"`` merges
    locals only by a cyclic shift of the local index that maps every node's labels onto themselves (period
    ``q``: class ``(i mod p, l mod q)``), which keeps local offsets: exact for those orders too.  Classes are
    numbered by first appearance (rank order)."""
    c = np.asarray(class_of_rank, dtype=np.int64).reshape(nodes, gpus_per_node)
    _, node_type = np.unique(c, axis=0, return_inverse=True)
    p = node_period(node_type.reshape(-1), max(1, int(node_unit)))
    if locals_by == "shift":
        g = gpus_per_node
        q = next(q for q in range(1, g + 1) if g % q == 0 and np.array_equal(c, np.roll(c, -q, axis=1)))
        col = np.arange(g) % q
    else:
        _, col = np.unique(c[:p].T, axis=0, return_inverse=True)  # locals with the same labels on every node
    key = (np.arange(nodes)[:, None] % p) * gpus_per_node + col.reshape(1, -1)
    return _first_appearance(key.reshape(-1))


def _first_appearance(key: np.ndarray) -> np.ndarray:
    _, first, inv = np.unique(key, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    renum = np.empty(len(order), dtype=np.int64)
    renum[order] = np.arange(len(order))
    return renum[inv.reshape(-1)]


def orbit_classes(class_of_rank, topology, nodes: int, gpus_per_node: int,
                  locals_by: str = "columns") -> np.ndarray | None:
    """:func:`shift_classes` of ``class_of_rank`` on ``topology``'s fabric, or ``None`` where the class links of
    :meth:`~simfuse.network.Fabric.set_rank_classes` cannot stand for them: a node shift by the period must map
    the fabric onto itself (its :meth:`~simfuse.network.Fabric.node_shift_unit`), and every physical link shared
    by several ranks (a NIC of two GPUs, a node's or a leaf's uplinks) must be shared by ranks of one class
    only (each class gets its own share of it).  With these classes the executor runs collectives as full
    simulation does (``graph.meta["orbit_classes"]``)."""
    from ..errors import SpecError
    from ..network import Fabric

    try:
        fabric = Fabric(topology, nodes, gpus_per_node=gpus_per_node, symmetric=True)
    except SpecError:
        return None  # no symmetric form of this fabric at this node count (partial leaves or pods)
    cls = shift_classes(class_of_rank, nodes, gpus_per_node, fabric.node_shift_unit(), locals_by)
    ranks = np.arange(nodes * gpus_per_node, dtype=np.int64)
    for fam in fabric.families.values():
        unit = np.asarray(fam.unit_of(ranks), dtype=np.int64)
        if len(np.unique(unit)) == len(unit):
            continue  # one rank per link
        order = np.lexsort((cls, unit))
        u, c = unit[order], cls[order]
        same_unit = u[1:] == u[:-1]
        if np.any(same_unit & (c[1:] != c[:-1])):
            return None
    return cls
