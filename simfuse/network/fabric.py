"""The fabric of a run: links (scale-up NVLink ports, NICs, fabric uplinks) and routes between ranks.

Two modes:

* ``symmetric=False`` (full simulation): one link per physical port: ``nvl_tx[r]``, ``nvl_rx[r]`` per GPU,
  ``nic_tx[n,i]``, ``nic_rx[n,i]`` per NIC, and, when the fabric is oversubscribed, ``up[n]``/``down[n]`` per
  node (fat tree) or ``xup[n,i]``/``xdown[n,i]`` per NIC (rail-optimized, cross-rail traffic only).
* ``symmetric=True`` (representative rank): one *class* link per kind, with the capacity one rank gets of it
  when all ranks behave alike (a NIC shared by two GPUs gives each half).  Flows are routed from the
  representative rank 0 only, grouped by route class and size; by symmetry the receive side of a class sees the
  same load as the send side.  This is exact when every rank's traffic is a relabelling of rank 0's (uniform
  all-to-all, rings with one channel per GPU, ...); callers check that before using it.

Routes: same GPU -> no link; same node -> ``nvl_tx[src], nvl_rx[dst]`` with the scale-up latency; other node ->
``nic_tx, [up|xup], [down|xdown], nic_rx`` with the scale-out latency (GPU<->NIC PCIe hops are folded into it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import SpecError
from ..spec import TopologySpec

# route classes
SELF, INTRA, INTER, INTER_XRAIL = 0, 1, 2, 3
CLASS_NAMES = {SELF: "self", INTRA: "intra", INTER: "inter", INTER_XRAIL: "inter_xrail"}


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


class Fabric:
    """Links and routes for ``nodes`` nodes of the topology (``gpus_per_node`` overrides the file's)."""

    def __init__(self, topology: TopologySpec, nodes: int, *, gpus_per_node: int | None = None,
                 symmetric: bool = True):
        if nodes < 1:
            raise SpecError("<run>", "nodes", f"must be >= 1, got {nodes}")
        g = gpus_per_node if gpus_per_node is not None else topology.scale_up.gpus_per_node
        if g < 1:
            raise SpecError("<run>", "gpus_per_node", f"must be >= 1, got {g}")
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
        self._names: list[str] = []
        self._caps: list[float] = []
        self._build()

    # -- construction -----------------------------------------------------------------------------------
    def _add(self, name: str, cap: float) -> int:
        self._names.append(name)
        self._caps.append(cap)
        return len(self._caps) - 1

    def _build(self) -> None:
        _g, k, N = self.gpus_per_node, self.nics_per_node, self.nodes
        fat_core = self.fabric_kind == "fat_tree" and self.oversub > 1.0 and N > 1
        rail_core = self.fabric_kind == "rail_optimized" and self.oversub > 1.0 and N > 1
        self.has_core = fat_core or rail_core
        self.class_mult: list[float] = []
        self._class_links_tx: list[dict] = []
        self._class_links_rx: list[dict] = []
        self.class_of_rank = np.zeros(self.n_ranks, dtype=np.int64)
        if self.symmetric:
            self._build_class(float(self.n_ranks))
        else:
            self.nvl_tx0 = len(self._caps)
            for r in range(self.n_ranks):
                self._add(f"nvl_tx[{r}]", self.nvl_bw)
            self.nvl_rx0 = len(self._caps)
            for r in range(self.n_ranks):
                self._add(f"nvl_rx[{r}]", self.nvl_bw)
            self.nic_tx0 = len(self._caps)
            for n in range(N):
                for i in range(k):
                    self._add(f"nic_tx[{n},{i}]", self.nic_bw)
            self.nic_rx0 = len(self._caps)
            for n in range(N):
                for i in range(k):
                    self._add(f"nic_rx[{n},{i}]", self.nic_bw)
            if fat_core:
                self.up0 = len(self._caps)
                for n in range(N):
                    self._add(f"up[{n}]", k * self.nic_bw / self.oversub)
                self.down0 = len(self._caps)
                for n in range(N):
                    self._add(f"down[{n}]", k * self.nic_bw / self.oversub)
            if rail_core:
                self.up0 = len(self._caps)
                for n in range(N):
                    for i in range(k):
                        self._add(f"xup[{n},{i}]", self.nic_bw / self.oversub)
                self.down0 = len(self._caps)
                for n in range(N):
                    for i in range(k):
                        self._add(f"xdown[{n},{i}]", self.nic_bw / self.oversub)
        self.capacities = np.asarray(self._caps)
        self.names = list(self._names)

    def _build_class(self, multiplicity: float) -> int:
        cid = len(self.class_mult)
        sfx = "" if cid == 0 else f"[c{cid}]"
        share = 1.0 / self.gpus_per_nic  # each rank's share of its NIC
        tx = {"nvl": self._add(f"nvl_tx{sfx}", self.nvl_bw), "nic": self._add(f"nic_tx{sfx}", self.nic_bw * share)}
        rx = {"nvl": self._add(f"nvl_rx{sfx}", self.nvl_bw), "nic": self._add(f"nic_rx{sfx}", self.nic_bw * share)}
        if self.has_core:
            tx["core"] = self._add(f"core_up{sfx}", self.nic_bw * share / self.oversub)
            rx["core"] = self._add(f"core_down{sfx}", self.nic_bw * share / self.oversub)
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
        return self.local_of(rank) // self.gpus_per_nic

    def route_class(self, src: int, dsts: np.ndarray) -> np.ndarray:
        """Route class (SELF, INTRA, INTER, INTER_XRAIL) of each flow ``src -> dsts[i]``."""
        dsts = np.asarray(dsts, dtype=np.int64)
        cls = np.full(dsts.shape, INTER, dtype=np.int64)
        same_node = self.node_of(dsts) == self.node_of(src)
        cls[same_node] = INTRA
        cls[dsts == src] = SELF
        if self.fabric_kind == "rail_optimized":
            xr = (~same_node) & (self.nic_of(dsts) != self.nic_of(src))
            cls[xr] = INTER_XRAIL
        return cls

    def latency_for(self, route_class: int) -> float:
        if route_class == SELF:
            return 0.0
        return self.intra_latency_s if route_class == INTRA else self.inter_latency_s

    def _class_links(self, cls: int, a: int, b: int) -> tuple[tuple[int, ...], tuple[bool, ...]]:
        """Class links of a route class from class ``a`` to class ``b``, and whether each is a receive link."""
        tx, rx = self._class_links_tx[a], self._class_links_rx[b]
        if cls == SELF:
            return (), ()
        if cls == INTRA:
            return (tx["nvl"], rx["nvl"]), (False, True)
        uses_core = self.has_core and (self.fabric_kind == "fat_tree" or cls == INTER_XRAIL)
        if uses_core:
            return (tx["nic"], tx["core"], rx["core"], rx["nic"]), (False, False, True, True)
        return (tx["nic"], rx["nic"]), (False, True)

    def path(self, src: int, dst: int) -> tuple[tuple[int, ...], float]:
        """Physical links and latency of one flow (full mode)."""
        if self.symmetric:
            raise RuntimeError("path() needs a full (non-symmetric) fabric")
        cls = int(self.route_class(src, np.array([dst]))[0])
        lat = self.latency_for(cls)
        if cls == SELF:
            return (), 0.0
        if cls == INTRA:
            return (self.nvl_tx0 + src, self.nvl_rx0 + dst), lat
        k = self.nics_per_node
        sn, dn = src // self.gpus_per_node, dst // self.gpus_per_node
        snic = sn * k + (src % self.gpus_per_node) // self.gpus_per_nic
        dnic = dn * k + (dst % self.gpus_per_node) // self.gpus_per_nic
        links = [self.nic_tx0 + snic]
        if self.has_core:
            if self.fabric_kind == "fat_tree":
                links += [self.up0 + sn, self.down0 + dn]
            elif cls == INTER_XRAIL:
                links += [self.up0 + snic, self.down0 + dnic]
        links.append(self.nic_rx0 + dnic)
        return tuple(links), lat

    def flow_groups(self, src: int, dsts: np.ndarray, sizes_bytes: np.ndarray,
                    same_class: bool = False) -> list[FlowGroupSpec]:
        """Flows ``src -> dsts[i]`` of ``sizes_bytes[i]`` as flow groups for this fabric's mode.

        Symmetric mode: flows of one route class and size form one group (``count`` flows, weight ``count``
        on every class link).  Full mode: one group per flow on its physical path.  ``same_class``: the traffic
        is rank-symmetric (every rank sends and receives alike, as in a collective), so receivers are taken to be
        of the sender's class whatever the destination's class.
        """
        dsts = np.asarray(dsts, dtype=np.int64)
        sizes = np.broadcast_to(np.asarray(sizes_bytes, dtype=float), dsts.shape)
        cls = self.route_class(src, dsts)
        out: list[FlowGroupSpec] = []
        if self.symmetric:
            a_cls = int(self.class_of_rank[src])
            b_cls = np.full(len(dsts), a_cls) if same_class else self.class_of_rank[dsts]
            keys = np.stack([cls.astype(float), b_cls.astype(float), sizes], axis=1)
            uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
            inverse = inverse.reshape(-1)
            for j, (c, bc, size) in enumerate(uniq):
                c, bc = int(c), int(bc)
                members = dsts[inverse == j]
                links, is_rx = self._class_links(c, a_cls, bc)
                cnt = len(members)
                rx_w = cnt * self.class_mult[a_cls] / self.class_mult[bc]
                weights = tuple(rx_w if rx else float(cnt) for rx in is_rx)
                out.append(FlowGroupSpec(links, weights, float(size), self.latency_for(c), cnt, c, members))
        else:
            for d, size, c in zip(dsts.tolist(), sizes.tolist(), cls.tolist(), strict=False):
                links, lat = self.path(src, d)
                out.append(FlowGroupSpec(links, (1.0,) * len(links), float(size), lat, 1, int(c),
                                         np.array([d])))
        return out

    def describe(self) -> dict:
        return {
            "nodes": self.nodes, "gpus_per_node": self.gpus_per_node, "ranks": self.n_ranks,
            "nics_per_node": self.nics_per_node, "fabric": self.fabric_kind, "oversubscription": self.oversub,
            "symmetric": self.symmetric, "links": len(self.capacities),
        }
