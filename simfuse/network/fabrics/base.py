"""The shared machinery of every fabric: link table, symmetric class links, rank classes, flow groups, geometry.

A fabric is a set of *link families* (one kind of link each: an NVLink port, a NIC, a leaf uplink, ...) and a
rule that maps a route class to the families a flow of that class crosses.  Subclasses (one module per fabric
kind, registered under the topology YAML's ``scale_out.fabric`` name) say only that:

* :meth:`Fabric._link_families` -- the families present for this run (capacities, how many, which rank uses
  which one);
* :meth:`Fabric._inter_classes` -- the route class of each off-node flow;
* :meth:`Fabric._route_kinds` -- the families (send side, in order) a route class crosses; the receive side
  crosses the same families in reverse order;
* optionally :meth:`Fabric._inter_latency_s` -- the latency of an off-node route class.

Two modes:

* ``symmetric=False`` (full simulation): one link per physical port and direction, e.g. ``nvl_tx[r]``,
  ``nvl_rx[r]`` per GPU, ``nic_tx[n,i]``, ``nic_rx[n,i]`` per NIC, plus the fabric's uplinks.
* ``symmetric=True`` (representative rank): one *class* link per family and direction, with the capacity one
  rank gets of it when all ranks behave alike (a NIC shared by two GPUs gives each half; a leaf uplink shared
  by every GPU below the leaf gives each its share).  Flows are routed from the representative rank only,
  grouped by route class and size; by symmetry the receive side of a class sees the same load as the send
  side.  This is exact when every rank's traffic is a relabelling of rank 0's under an automorphism of the
  fabric (uniform all-to-all, ...); callers check that before using it (see ``node_transitive``).

Construction dispatches: ``Fabric(topology, nodes, ...)`` returns an instance of the class registered for
``topology.scale_out.fabric`` (``Fabric.__new__`` looks it up), so ``isinstance(f, Fabric)`` holds for every
fabric and existing callers need no change.  A subclass can also be constructed directly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ...errors import SpecError
from ...spec import TopologySpec

# Route classes.  Anything other than SELF and INTRA leaves the node (callers test ``c not in (SELF, INTRA)``).
SELF = 0  # same GPU: no link
INTRA = 1  # same node: NVLink through NVSwitch
INTER = 2  # other node; fat_tree: through the leaf uplinks; rail_optimized: same rail (stays on the rail leaf)
INTER_XRAIL = 3  # rail_optimized: other node, other rail (through the spine)
INTER_LEAF = 4  # fat_tree_3tier: other node under the same leaf switch
INTER_SPINE = 5  # fat_tree_3tier: other leaf of the same pod (leaf -> spine -> leaf)
INTER_CORE = 6  # fat_tree_3tier: other pod (leaf -> spine -> core -> spine -> leaf)
CLASS_NAMES = {SELF: "self", INTRA: "intra", INTER: "inter", INTER_XRAIL: "inter_xrail",
               INTER_LEAF: "inter_leaf", INTER_SPINE: "inter_spine", INTER_CORE: "inter_core"}

#: Node relabellings a per-rank schedule can be invariant under (every rank's schedule is the image of rank 0's):
#: ``shift``: node -> node + t (mod nodes), the meaning of a collective algorithm's ``symmetric`` flag (rings
#: over nodes, neighbour trees); ``xor``: node -> node XOR t, nodes a power of two (recursive halving/doubling);
#: ``any``: every permutation of the nodes (schedules that treat every other node alike: direct all-to-all,
#: direct reduce-scatter / all-gather, the rail exchanges of the hierarchical all-to-all).  In every case the
#: local GPU indices are relabelled as the algorithm's ``symmetric`` flag says.  ``any`` includes ``xor`` and
#: ``shift``.
RELABELLINGS = ("shift", "xor", "any")

_REGISTRY: dict[str, type[Fabric]] = {}
#: symmetric flow_groups with at most this many destinations group them in plain Python (same result)
_SMALL_FLOWS = 64


def register_fabric(name: str):
    """Class decorator: make ``cls`` the fabric for ``scale_out.fabric: name`` (the name is added to
    ``simfuse.spec.topology.FABRICS``, which validates the YAML)."""
    from ...spec.topology import register_fabric_kind

    def deco(cls):
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(f"fabric {name!r} registered twice")
        cls.kind = name
        _REGISTRY[name] = cls
        register_fabric_kind(name)
        return cls

    return deco


def fabric_class(name: str, source: str = "<topology>") -> type[Fabric]:
    """The class registered for a fabric name; unknown names raise :class:`SpecError`."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise SpecError(source, "scale_out.fabric",
                        f"unknown fabric {name!r}; expected one of {', '.join(sorted(_REGISTRY))}") from None


def registered_fabrics() -> dict[str, type[Fabric]]:
    return dict(_REGISTRY)


def full_node_topology(topology: TopologySpec, nodes: int, gpus_per_node: int) -> TopologySpec:
    """``topology`` as a collective on ``nodes`` nodes of ``gpus_per_node`` GPUs sees it: where
    ``scale_out.full_node_efficiency`` applies (:meth:`~simfuse.spec.topology.ScaleOutSpec.applies_full_node`:
    set, across nodes, every NIC of the node driven) it is the scale-out efficiency of every NIC-bound rate (the
    NICs, the uplinks they feed, SHARP's share, the tree's rate per NIC); elsewhere ``topology`` itself, so a
    collective inside one node or on fewer GPUs than NICs per node never changes.  A value outside (0, 1] raises
    :class:`SpecError` (the loader refuses it in a file; this catches one set by an override)."""
    so = topology.scale_out
    v = so.full_node_efficiency
    if v is None:
        return topology
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 < v <= 1.0:
        raise SpecError(topology.source, "scale_out.full_node_efficiency",
                        f"must be a fraction of the line rate in (0, 1], got {v!r}")
    if not so.applies_full_node(nodes, gpus_per_node):
        return topology
    return topology.with_overrides({"scale_out.efficiency": float(v)})


@dataclass(frozen=True)
class FlowGroupSpec:
    """A group of identical flows to start together: ``count`` flows of ``size_bytes`` over ``links``."""

    links: tuple[int, ...]
    weights: tuple[float, ...]
    size_bytes: float
    latency_s: float
    count: int
    route_class: int
    dsts: np.ndarray  # destination ranks (full mode: one; symmetric mode: all ``count`` of them)


@dataclass(frozen=True)
class LinkFamily:
    """One kind of link, present on the send (tx) and the receive (rx) side of a route.  ``tier``: the switch
    tier the link leads up to (``nvlink`` for NVLink ports, ``leaf`` for NICs, ``spine`` or ``core`` for uplinks).

    Full mode: ``count`` links per side, each of ``capacity_bytes_per_s``, link ``j`` named
    ``f"{tx_name}[{label(j)}]"``; a rank uses the one at index ``unit_of(rank)``.  Symmetric mode: one class link per side of
    ``share_bytes_per_s`` (one rank's share), named ``sym_tx_name`` / ``sym_rx_name``.
    """

    kind: str
    tier: str
    tx_name: str
    rx_name: str
    sym_tx_name: str
    sym_rx_name: str
    capacity_bytes_per_s: float
    share_bytes_per_s: float
    count: int
    label: Callable[[int], str]
    unit_of: Callable[[np.ndarray], np.ndarray]


class Fabric:
    """Links and routes for ``nodes`` nodes of the topology (``gpus_per_node`` overrides the file's).

    ``Fabric(...)`` builds the subclass registered for ``topology.scale_out.fabric``.
    """

    kind: ClassVar[str] = ""
    #: route classes this fabric can produce, and the highest switch tier each one reaches
    CLASS_TIER: ClassVar[dict[int, str]] = {SELF: "self", INTRA: "nvlink"}

    def __new__(cls, topology: TopologySpec | None = None, *args, **kwargs):
        if cls is Fabric and topology is not None:
            cls = fabric_class(topology.scale_out.fabric, topology.source)
        return super().__new__(cls)

    def __init__(self, topology: TopologySpec, nodes: int, *, gpus_per_node: int | None = None,
                 symmetric: bool = True):
        if self.kind and topology.scale_out.fabric != self.kind:
            raise SpecError(topology.source, "scale_out.fabric",
                            f"{type(self).__name__} needs fabric {self.kind!r}, got {topology.scale_out.fabric!r}")
        if nodes < 1:
            raise SpecError("<run>", "nodes", f"must be >= 1, got {nodes}")
        g = gpus_per_node if gpus_per_node is not None else topology.scale_up.gpus_per_node
        if g < 1:
            raise SpecError("<run>", "gpus_per_node", f"must be >= 1, got {g}")
        topology = full_node_topology(topology, nodes, g)
        self.topology = topology
        self.nodes = int(nodes)
        self.gpus_per_node = int(g)
        self.n_ranks = self.nodes * self.gpus_per_node
        self.symmetric = symmetric
        so, su = topology.scale_out, topology.scale_up
        self.nics_per_node = min(so.nics_per_node, self.gpus_per_node)
        if self.gpus_per_node % self.nics_per_node != 0:
            raise SpecError(topology.source, "scale_out.nics_per_node",
                            f"must divide gpus per node ({self.gpus_per_node})")
        self.gpus_per_nic = self.gpus_per_node // self.nics_per_node
        self.fabric_kind = so.fabric
        self.oversub = so.oversubscription
        self.nvl_bw = su.effective_bw_bytes_per_s
        self.nic_bw = so.effective_nic_bw_bytes_per_s
        self.intra_latency_s = su.latency_s
        self.inter_latency_s = so.latency_s
        # in-network reduction, only where the topology declares it (collective algorithms route through these)
        self.has_nvls = bool(su.nvls)
        self.has_sharp = bool(so.sharp) and self.nodes > 1
        self._configure()
        self._names: list[str] = []
        self._caps: list[float] = []
        self.families: dict[str, LinkFamily] = {f.kind: f for f in self._all_families()}
        self._build()

    # -- subclass hooks ---------------------------------------------------------------------------------
    def _configure(self) -> None:
        """Read fabric-specific parameters (called before the links are built)."""

    def _link_families(self) -> list[LinkFamily]:
        """Families beyond the NVLink ports and NICs (uplinks of the switch tiers), present for this run."""
        return []

    def _inter_classes(self, src: int, dsts: np.ndarray) -> np.ndarray:
        """Route class of each off-node flow ``src -> dsts[i]``."""
        return np.full(dsts.shape, INTER, dtype=np.int64)

    def _route_kinds(self, route_class: int) -> tuple[str, ...]:
        """Families an off-node route class crosses on the send side, from the NIC up."""
        return ("nic",)

    def _inter_latency_s(self, route_class: int) -> float:
        return self.inter_latency_s

    #: True when shifting every rank by a whole number of nodes (rank -> rank + m * gpus_per_node, mod n) is an
    #: automorphism of the fabric, so schedules that are relabellings by node shifts (rings over nodes, shifted
    #: tile orders) are symmetric.  Subclasses whose nodes are not all alike set it per run.
    node_transitive: bool = True

    @classmethod
    def symmetry_problem(cls, topology: TopologySpec, nodes: int, *, gpus_per_node: int | None = None,
                         steps_of_rank=None, relabelling: str = "shift") -> str | None:
        """Why the representative-rank mode would not be exact for this run, or ``None`` when it is.

        ``steps_of_rank(rank) -> [(dsts, sizes_bytes), ...]`` is the per-rank schedule (a collective
        algorithm's ``steps``), whose own ``symmetric`` flag already covers node-transitive fabrics (every node
        alike, as fat_tree and rail_optimized): there this returns ``None``.  Fabrics whose nodes differ
        (fat_tree_3tier with more than one leaf) check the schedule against the fabric.  ``relabelling`` (one
        of :data:`RELABELLINGS`) names the node relabellings that map the schedule onto itself, so that the
        fabric can decide from its own automorphisms without reading every rank's schedule.  Called on
        ``Fabric`` it dispatches to the topology's fabric class."""
        if relabelling not in RELABELLINGS:
            raise ValueError(f"unknown relabelling {relabelling!r}; expected one of {', '.join(RELABELLINGS)}")
        if cls is Fabric:
            cls = fabric_class(topology.scale_out.fabric, topology.source)
        return cls._symmetry_problem(topology, nodes, gpus_per_node, steps_of_rank, relabelling)

    @classmethod
    def _symmetry_problem(cls, topology, nodes, gpus_per_node, steps_of_rank, relabelling="shift") -> str | None:
        return None

    def node_shift_unit(self) -> int:
        """The smallest node shift ``u`` such that shifting every rank by a multiple of ``u`` nodes maps this
        fabric onto itself: 1 where every node is alike (``node_transitive``)."""
        return 1 if self.node_transitive else self.nodes

    def shift_representatives(self, unit_nodes: int) -> np.ndarray | None:
        """Full mode: for every link, the link of the first ``unit_nodes`` nodes it is the translate of under a
        shift by a multiple of ``unit_nodes`` nodes (ids into ``capacities``), or ``None`` when the shift does
        not map every link family onto itself link by link (``unit_nodes`` not dividing the node count, or a
        family whose links are not laid out per block of ``unit_nodes`` nodes).  Under a node shift that is an
        automorphism (:meth:`node_shift_unit`), a link and its representative carry translates of the same
        flows at every moment of a shift-invariant run (:mod:`simfuse.collectives.quotient`)."""
        if self.symmetric:
            raise RuntimeError("shift_representatives() needs a full (non-symmetric) fabric")
        if unit_nodes < 1 or self.nodes % unit_nodes:
            return None
        blocks = self.nodes // unit_nodes
        ranks = np.arange(self.n_ranks, dtype=np.int64)
        unit_ranks = unit_nodes * self.gpus_per_node
        rep = np.arange(len(self._caps), dtype=np.int64)
        for fam in self.families.values():
            if fam.count % blocks:
                return None
            per = fam.count // blocks
            idx = np.asarray(fam.unit_of(ranks), dtype=np.int64)
            # the links of a block of nodes are the block's own, numbered like the first block's
            if not np.array_equal(idx, np.asarray(fam.unit_of(ranks % unit_ranks), dtype=np.int64)
                                  + (ranks // unit_ranks) * per):
                return None
            j = np.arange(fam.count, dtype=np.int64)
            for base in (self._tx0[fam.kind], self._rx0[fam.kind]):
                rep[base + j] = base + j % per
        return rep

    def schedule_problem(self, steps_of_rank) -> str | None:
        """Check (on a fabric of either mode) that every rank's schedule looks like rank 0's to the fabric: in
        every step each rank sends, and receives, the same multiset of (route class, size).  With capacities
        alike within each link family this makes every link of a family equally loaded at all times, so the
        max-min rates of corresponding flows are equal and the representative rank is exact.  Returns a
        reason when the check fails, ``None`` when it passes.  Cost: the whole schedule of every rank."""
        n = self.n_ranks
        rows = []  # (dst, step, class, size) of every flow
        ref = None
        for r in range(n):
            sig = []
            for s, (dsts, sizes) in enumerate(steps_of_rank(r)):
                dsts = np.asarray(dsts, dtype=np.int64)
                sizes = np.broadcast_to(np.asarray(sizes, dtype=float), dsts.shape)
                c = self.route_class(r, dsts)
                order = np.lexsort((sizes, c))
                sig.append((c[order].tobytes(), sizes[order].tobytes()))
                rows.append(np.stack([dsts, np.full(len(dsts), s), c, sizes], axis=1).astype(float))
            if ref is None:
                ref = sig
            elif sig != ref:
                return f"rank {r} sends a different mix of route classes than rank 0 on this fabric"
        if not rows:
            return None
        # receive side: per destination, the multiset of (step, class, size) must be destination 0's
        uniq, counts = np.unique(np.concatenate(rows), axis=0, return_counts=True)
        table = np.column_stack([uniq[:, 1:], counts])
        bounds = np.flatnonzero(np.diff(uniq[:, 0])) + 1
        chunks = np.split(table, bounds)
        if len(chunks) != n:
            return "some ranks receive nothing while others receive"
        for chunk in chunks[1:]:
            if not np.array_equal(chunk, chunks[0]):
                return "ranks receive different mixes of route classes on this fabric"
        return None

    # -- construction -----------------------------------------------------------------------------------
    def _all_families(self) -> list[LinkFamily]:
        k, N = self.nics_per_node, self.nodes
        share = 1.0 / self.gpus_per_nic  # each rank's share of its NIC
        base = [
            LinkFamily("nvl", "nvlink", "nvl_tx", "nvl_rx", "nvl_tx", "nvl_rx", self.nvl_bw, self.nvl_bw,
                       self.n_ranks, str, np.asarray),
            LinkFamily("nic", "leaf", "nic_tx", "nic_rx", "nic_tx", "nic_rx", self.nic_bw, self.nic_bw * share,
                       N * k, lambda j: f"{j // k},{j % k}", self.nic_index),
        ]
        extra = []
        if self.has_nvls:
            # the NVSwitch's reduction/multicast, one port's share per GPU (scale_up.nvls_efficiency of the port)
            nv = self.topology.scale_up.nvls_bw_bytes_per_s
            extra.append(LinkFamily("nvls", "nvlink", "nvls_up", "nvls_down", "nvls_up", "nvls_down", nv, nv,
                                    self.n_ranks, str, np.asarray))
        if self.has_sharp:
            # the IB switches' SHARP reduction, one NIC's share (scale_out.sharp_efficiency of the NIC rate)
            sb = self.topology.scale_out.sharp_bw_bytes_per_s
            extra.append(LinkFamily("sharp", "leaf", "sharp_up", "sharp_down", "sharp_up", "sharp_down", sb,
                                    sb * share, N * k, lambda j: f"{j // k},{j % k}", self.nic_index))
        return base + self._link_families() + extra

    def _add(self, name: str, cap: float) -> int:
        self._names.append(name)
        self._caps.append(cap)
        return len(self._caps) - 1

    def _build(self) -> None:
        self._class_links_memo: dict = {}  # (route class, class a, class b, via) -> _class_links' answer
        self.class_mult: list[float] = []
        self._class_links_tx: list[dict] = []
        self._class_links_rx: list[dict] = []
        self.class_of_rank = np.zeros(self.n_ranks, dtype=np.int64)
        self._tx0: dict[str, int] = {}
        self._rx0: dict[str, int] = {}
        if self.symmetric:
            self._build_class(float(self.n_ranks))
        else:
            for fam in self.families.values():
                self._tx0[fam.kind] = len(self._caps)
                for j in range(fam.count):
                    self._add(f"{fam.tx_name}[{fam.label(j)}]", fam.capacity_bytes_per_s)
                self._rx0[fam.kind] = len(self._caps)
                for j in range(fam.count):
                    self._add(f"{fam.rx_name}[{fam.label(j)}]", fam.capacity_bytes_per_s)
        self.capacities = np.asarray(self._caps)
        self.names = list(self._names)

    def _build_class(self, multiplicity: float) -> int:
        self._class_links_memo = {}
        cid = len(self.class_mult)
        sfx = "" if cid == 0 else f"[c{cid}]"
        tx, rx = {}, {}
        for fam in self.families.values():
            tx[fam.kind] = self._add(f"{fam.sym_tx_name}{sfx}", fam.share_bytes_per_s)
            rx[fam.kind] = self._add(f"{fam.sym_rx_name}{sfx}", fam.share_bytes_per_s)
        self._class_links_tx.append(tx)
        self._class_links_rx.append(rx)
        self.class_mult.append(float(multiplicity))
        self.capacities = np.asarray(self._caps)
        self.names = list(self._names)
        return cid

    def set_rank_classes(self, class_of_rank) -> int:
        """Partition the ranks into classes (symmetric mode only): ranks of a class behave alike, classes
        differ (uneven table placement).  Each class gets its own send and receive links.  A group of ``k``
        flows from the representative of class ``a`` to ranks of class ``b`` loads class ``a``'s send links
        with weight ``k`` and class ``b``'s receive links with ``k * n_a / n_b`` (the class-``a`` senders'
        flows spread evenly over the ``n_b`` receivers).  With one class this is the plain symmetric mode, which
        is exact; with several it assumes each class's flows spread evenly (checked against full simulation in
        the tests).  Returns the number of classes."""
        if not self.symmetric:
            raise RuntimeError("rank classes need a symmetric fabric")
        cls = np.asarray(class_of_rank, dtype=np.int64)
        if cls.shape != (self.n_ranks,) or cls.min() != 0:
            raise ValueError("class_of_rank must give a class (0..C-1) for every rank")
        counts = np.bincount(cls)
        if np.any(counts == 0):
            raise ValueError("every class needs at least one rank")
        self.class_mult[0] = float(counts[0])
        for c in range(1, len(counts)):
            self._build_class(float(counts[c]))
        self.class_of_rank = cls
        return len(counts)

    def representative(self, cls: int) -> int:
        """The lowest rank of a class."""
        return int(np.flatnonzero(self.class_of_rank == cls)[0])

    # -- geometry ---------------------------------------------------------------------------------------
    def node_of(self, rank):
        return np.asarray(rank) // self.gpus_per_node

    def local_of(self, rank):
        return np.asarray(rank) % self.gpus_per_node

    def nic_of(self, rank):
        """Index of a rank's NIC within its node."""
        return self.local_of(rank) // self.gpus_per_nic

    def nic_index(self, rank):
        """Global index of a rank's NIC (``node * nics_per_node + nic_of``)."""
        return self.node_of(rank) * self.nics_per_node + self.nic_of(rank)

    # -- routes -----------------------------------------------------------------------------------------
    @property
    def route_classes(self) -> tuple[int, ...]:
        """The route classes this fabric can produce."""
        return tuple(self.CLASS_TIER)

    @property
    def tiers(self) -> tuple[str, ...]:
        """Names of the switch tiers of this fabric, lowest first (``self`` and ``nvlink`` included)."""
        return tuple(dict.fromkeys(self.CLASS_TIER.values()))

    @staticmethod
    def route_class_name(route_class: int) -> str:
        """Short name of a route class (``self``, ``intra``, ``inter``, ``inter_leaf``, ...)."""
        return CLASS_NAMES[int(route_class)]

    def tier_of(self, route_class: int) -> str:
        """The highest switch tier a flow of ``route_class`` reaches on this fabric (``self``, ``nvlink``,
        ``leaf``, ``spine``, ``core``)."""
        try:
            return self.CLASS_TIER[int(route_class)]
        except KeyError:
            raise ValueError(f"route class {route_class} does not occur on fabric {self.kind!r}") from None

    def route_class(self, src: int, dsts: np.ndarray) -> np.ndarray:
        """Route class of each flow ``src -> dsts[i]`` (SELF, INTRA, or the fabric's off-node classes)."""
        dsts = np.asarray(dsts, dtype=np.int64)
        cls = np.full(dsts.shape, INTRA, dtype=np.int64)
        off = self.node_of(dsts) != self.node_of(src)
        if off.any():
            cls[off] = self._inter_classes(int(src), dsts[off])
        cls[dsts == src] = SELF
        return cls

    def latency_for(self, route_class: int) -> float:
        """End-to-end latency (s) of a flow's last byte for a route class."""
        if route_class == SELF:
            return 0.0
        if route_class == INTRA:
            return self.intra_latency_s
        return self._inter_latency_s(int(route_class))

    def route_kinds(self, route_class: int) -> tuple[str, ...]:
        """Link families crossed by a route class, in path order (send side up, receive side down), e.g.
        ``("nic", "leaf", "leaf", "nic")``; valid in both modes."""
        if route_class == SELF:
            return ()
        up = ("nvl",) if route_class == INTRA else tuple(self._route_kinds(int(route_class)))
        return up + up[::-1]

    def _up(self, cls: int, via: tuple[str, ...] = ()) -> tuple[str, ...]:
        """Send-side families of a route class; ``via`` adds the switch reduction links an in-network collective
        crosses (``nvls`` on intra-node flows, ``sharp`` on off-node flows) where the fabric has them."""
        if cls == INTRA:
            return ("nvl", "nvls") if "nvls" in via and self.has_nvls else ("nvl",)
        up = tuple(self._route_kinds(cls))
        return up + ("sharp",) if "sharp" in via and self.has_sharp else up

    def _class_links(self, cls: int, a: int, b: int, via: tuple[str, ...] = ()) -> tuple[tuple[int, ...], tuple[bool, ...]]:
        """Class links of a route class from class ``a`` to class ``b``, and whether each is a receive link."""
        if cls == SELF:
            return (), ()
        key = (cls, a, b, via)
        got = self._class_links_memo.get(key)
        if got is None:  # (a DLRM run asks the same few tens of times each: memoised per class layout)
            tx, rx = self._class_links_tx[a], self._class_links_rx[b]
            up = self._up(cls, via)
            links = tuple(tx[k] for k in up) + tuple(rx[k] for k in reversed(up))
            got = self._class_links_memo[key] = (links, (False,) * len(up) + (True,) * len(up))
        return got

    def class_links(self, route_class: int, src_class: int = 0, dst_class: int | None = None) -> tuple[int, ...]:
        """Symmetric mode: the class links (ids into ``capacities``/``names``) a flow of ``route_class`` crosses
        from rank class ``src_class`` to ``dst_class`` (default: the same class).  Full mode has no class links;
        use :meth:`path` for one flow's physical links or :meth:`route_kinds` for the families."""
        if not self.symmetric:
            raise RuntimeError("class_links() needs a symmetric fabric; use path() in full mode")
        b = src_class if dst_class is None else dst_class
        return self._class_links(int(route_class), src_class, b)[0]

    def path(self, src: int, dst: int, via: tuple[str, ...] = ()) -> tuple[tuple[int, ...], float]:
        """Physical links and latency of one flow (full mode)."""
        if self.symmetric:
            raise RuntimeError("path() needs a full (non-symmetric) fabric")
        cls = int(self.route_class(src, np.array([dst]))[0])
        if cls == SELF:
            return (), 0.0
        up = self._up(cls, via)
        links = [self._tx0[k] + int(self.families[k].unit_of(src)) for k in up]
        links += [self._rx0[k] + int(self.families[k].unit_of(dst)) for k in reversed(up)]
        return tuple(links), self.latency_for(cls)

    def flow_groups(self, src: int, dsts: np.ndarray, sizes_bytes: np.ndarray,
                    same_class: bool = False, via: tuple[str, ...] = ()) -> list[FlowGroupSpec]:
        """Flows ``src -> dsts[i]`` of ``sizes_bytes[i]`` as flow groups for this fabric's mode.

        Symmetric mode: flows of one route class and size form one group (``count`` flows, weight ``count``
        on every class link).  Full mode: one group per flow on its physical path.  ``same_class``: the traffic
        is rank-symmetric (every rank sends and receives alike, as in a collective), so receivers are taken to be
        of the sender's class whatever the destination's class.  ``via``: switch reductions to route through
        (:meth:`_up`).
        """
        dsts = np.asarray(dsts, dtype=np.int64)
        sizes = np.broadcast_to(np.asarray(sizes_bytes, dtype=float), dsts.shape)
        cls = self.route_class(src, dsts)
        out: list[FlowGroupSpec] = []
        if self.symmetric and len(dsts) <= _SMALL_FLOWS:
            # the same groups, in the same order, grouped with a dict: numpy's per-call overhead dominates the
            # many calls with a handful of destinations (issue 11: a fifth of a 1,024-node DLRM run)
            a_cls = int(self.class_of_rank[src])
            dl = dsts.tolist()
            bl = [a_cls] * len(dl) if same_class else self.class_of_rank[dsts].tolist()
            by_key: dict = {}
            for d, size, c, bc in zip(dl, sizes.tolist(), cls.tolist(), bl, strict=True):
                k = (c, bc, size)
                lst = by_key.get(k)
                if lst is None:
                    by_key[k] = [d]
                else:
                    lst.append(d)
            mult = self.class_mult
            for k in sorted(by_key):
                c, bc, size = k
                members = by_key[k]
                links, is_rx = self._class_links(c, a_cls, bc, via)
                cnt = len(members)
                rx_w = cnt * mult[a_cls] / mult[bc]
                weights = tuple(rx_w if rx else float(cnt) for rx in is_rx)
                out.append(FlowGroupSpec(links, weights, size, self.latency_for(c), cnt, c,
                                         np.array(members, dtype=np.int64)))
        elif self.symmetric:
            a_cls = int(self.class_of_rank[src])
            b_cls = np.full(len(dsts), a_cls) if same_class else self.class_of_rank[dsts]
            # one integer key per flow, ordered as (route class, receiver class, size): groups come out in
            # that order, each with its destinations in their given order
            size_vals, size_idx = np.unique(sizes, return_inverse=True)
            n_b = int(self.class_of_rank.max()) + 1
            key = (cls.astype(np.int64) * n_b + b_cls) * len(size_vals) + size_idx.reshape(-1)
            keys, inverse, counts = np.unique(key, return_inverse=True, return_counts=True)
            order = np.argsort(inverse.reshape(-1), kind="stable")
            bounds = np.cumsum(counts)[:-1]
            for kj, members in zip(keys.tolist(), np.split(dsts[order], bounds), strict=True):
                c, rest = divmod(kj, n_b * len(size_vals))
                bc, si = divmod(rest, len(size_vals))
                size = size_vals[si]
                links, is_rx = self._class_links(c, a_cls, bc, via)
                cnt = len(members)
                rx_w = cnt * self.class_mult[a_cls] / self.class_mult[bc]
                weights = tuple(rx_w if rx else float(cnt) for rx in is_rx)
                out.append(FlowGroupSpec(links, weights, float(size), self.latency_for(c), cnt, c, members))
        else:
            for d, size, c in zip(dsts.tolist(), sizes.tolist(), cls.tolist(), strict=False):
                links, lat = self.path(src, d, via)
                out.append(FlowGroupSpec(links, (1.0,) * len(links), float(size), lat, 1, int(c),
                                         np.array([d])))
        return out

    def describe(self) -> dict:
        return {
            "nodes": self.nodes, "gpus_per_node": self.gpus_per_node, "ranks": self.n_ranks,
            "nics_per_node": self.nics_per_node, "fabric": self.fabric_kind, "oversubscription": self.oversub,
            "symmetric": self.symmetric, "links": len(self.capacities), "tiers": list(self.tiers),
            "families": list(self.families),
        }
