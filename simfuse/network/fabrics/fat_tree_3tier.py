"""``fabric: fat_tree_3tier`` -- a three-tier fat tree with pods: nodes -> leaf switches -> spine -> core.

Geometry (topology fields, validated in :mod:`simfuse.spec.topology`): all NICs of a node attach to one leaf;
``nodes_per_leaf`` consecutive nodes share a leaf; ``leaves_per_pod`` consecutive leaves share a pod's spine
layer; the pods meet in the core.  Node ``n`` is under leaf ``n // nodes_per_leaf`` in pod
``n // (nodes_per_leaf * leaves_per_pod)``.

Capacities (per direction): a leaf's uplinks to its spine carry ``nodes_per_leaf * nics_per_node * nic_bw /
oversubscription``; a pod's uplinks to the core carry the pod's leaf-uplink capacity over
``spine_oversubscription``.  The parallel uplinks of a leaf (of a pod) are one aggregate link: flows spread over
them perfectly, which is what adaptive routing aims for (ECMP hashing collisions are not modelled).  The
capacities are those of full switches: a run whose last leaf or pod is only partly filled keeps the full
uplink capacity (full mode only; the symmetric mode needs whole leaves and pods, or a single one).

Links: full mode ``leaf_up[l]``/``leaf_down[l]`` per leaf (when there is more than one leaf) and
``spine_up[p]``/``spine_down[p]`` per pod (when there is more than one pod); symmetric mode one class link of
each (``leaf_up``, ``leaf_down``, ``spine_up``, ``spine_down``) with one rank's share: its NIC share over
``oversubscription`` (leaf tier) and over ``oversubscription * spine_oversubscription`` (core tier).

Route classes and latencies (``scale_out.latency_us`` is the end-to-end latency through one leaf switch; every
further switch hop adds ``hop_latency_ns``):

* INTER_LEAF: same leaf, ``nic_tx, nic_rx``, ``latency``;
* INTER_SPINE: same pod, ``nic_tx, leaf_up, leaf_down, nic_rx``, ``latency + 2 hops`` (spine and second leaf);
* INTER_CORE: other pod, ``nic_tx, leaf_up, spine_up, spine_down, leaf_down, nic_rx``, ``latency + 4 hops``.
"""

from __future__ import annotations

import numpy as np

from ...errors import SpecError
from .base import INTER_CORE, INTER_LEAF, INTER_SPINE, INTRA, SELF, Fabric, LinkFamily, register_fabric

_HOPS = {INTER_LEAF: 0, INTER_SPINE: 2, INTER_CORE: 4}  # switch hops beyond the first leaf's


def _pow2(x: int) -> bool:
    return x >= 1 and not x & (x - 1)


@register_fabric("fat_tree_3tier")
class FatTree3TierFabric(Fabric):
    CLASS_TIER = {SELF: "self", INTRA: "nvlink", INTER_LEAF: "leaf", INTER_SPINE: "spine", INTER_CORE: "core"}

    def _configure(self) -> None:
        so, src = self.topology.scale_out, self.topology.source
        # the spec validates these on load; check again for specs built in code or changed by with_overrides
        for field, value, low in (("nodes_per_leaf", so.nodes_per_leaf, 1), ("leaves_per_pod", so.leaves_per_pod, 1),
                                  ("spine_oversubscription", so.spine_oversubscription, 1.0),
                                  ("hop_latency_ns", so.hop_latency_s, 0.0)):
            if not value >= low:
                raise SpecError(src, f"scale_out.{field}", f"must be >= {low}, got {value!r}")
        self.nodes_per_leaf = int(so.nodes_per_leaf)
        self.leaves_per_pod = int(so.leaves_per_pod)
        self.spine_oversub = float(so.spine_oversubscription)
        self.hop_latency_s = float(so.hop_latency_s)
        self.nodes_per_pod = self.nodes_per_leaf * self.leaves_per_pod
        self.n_leaves = -(-self.nodes // self.nodes_per_leaf)
        self.n_pods = -(-self.n_leaves // self.leaves_per_pod)
        if self.symmetric:
            if self.n_leaves > 1 and self.nodes % self.nodes_per_leaf:
                raise SpecError(src, "scale_out.nodes_per_leaf",
                                f"{self.nodes} nodes do not fill whole leaves of {self.nodes_per_leaf}: the ranks "
                                "are not alike, so the symmetric mode does not apply: " + self._whole_counts())
            if self.n_pods > 1 and self.n_leaves % self.leaves_per_pod:
                raise SpecError(src, "scale_out.leaves_per_pod",
                                f"{self.n_leaves} leaves do not fill whole pods of {self.leaves_per_pod}: the ranks "
                                "are not alike, so the symmetric mode does not apply: " + self._whole_counts())
        # shifting nodes cyclically maps the fabric onto itself only when all nodes share one leaf
        self.node_transitive = self.n_leaves == 1

    def _whole_counts(self) -> str:
        """What to run instead of a partly filled leaf or pod (the end of the symmetric mode's refusal)."""
        return (f"use a multiple of {self.nodes_per_leaf} nodes (whole leaves; beyond one pod, a multiple of "
                f"{self.nodes_per_pod}: whole pods), or `simfuse collective --mode full` with --algorithm and "
                "--protocol, which simulates every rank")

    @classmethod
    def _symmetry_problem(cls, topology, nodes, gpus_per_node, steps_of_rank, relabelling="shift") -> str | None:
        """Whole leaves and pods are needed.  With more than one leaf, shifting nodes cyclically is no
        automorphism (the last node of a leaf has its successor under another leaf), but these are, and each
        group of them moves any node onto any other (transitive), so a schedule invariant under one is
        symmetric without reading any rank's schedule:

        * any permutation of the nodes within a leaf, of the leaves within a pod and of the pods (the switch
          hierarchy is preserved): a schedule invariant under every node permutation (``relabelling="any"``);
        * node -> node XOR t when nodes per leaf, leaves per pod and the node count are powers of two (bit
          ``k`` of the node index then says at which tier two nodes meet): ``"xor"`` and ``"any"`` schedules.

        Other schedules (``"shift"``: rings and trees over neighbouring nodes) must pass
        :meth:`Fabric.schedule_problem`, which reads every rank's schedule and fails at the first rank whose
        hop crosses a leaf boundary that rank 0's does not.  A standalone collective does not ask: it runs such
        schedules on the ranks of one shift unit (:mod:`simfuse.collectives.quotient`), exactly."""
        try:
            fabric = cls(topology, nodes, gpus_per_node=gpus_per_node, symmetric=True)
        except SpecError as exc:
            return exc.message
        if fabric.node_transitive or steps_of_rank is None or relabelling == "any":
            return None
        if relabelling == "xor" and all(_pow2(x) for x in (fabric.nodes, fabric.nodes_per_leaf,
                                                           fabric.leaves_per_pod)):
            return None
        return fabric.schedule_problem(steps_of_rank)

    def node_shift_unit(self) -> int:
        """Whole pods (several pods) or whole leaves (one pod): such shifts map leaves onto leaves and pods onto
        pods (needs whole leaves and pods, as the symmetric mode does)."""
        if self.node_transitive:
            return 1
        return self.nodes_per_pod if self.n_pods > 1 else self.nodes_per_leaf

    def leaf_of(self, rank):
        """Leaf switch index of a rank."""
        return self.node_of(rank) // self.nodes_per_leaf

    def pod_of(self, rank):
        """Pod index of a rank."""
        return self.node_of(rank) // self.nodes_per_pod

    def _link_families(self) -> list[LinkFamily]:
        k, share = self.nics_per_node, self.nic_bw / self.gpus_per_nic
        leaf_up_bw = self.nodes_per_leaf * k * self.nic_bw / self.oversub
        out = []
        if self.n_leaves > 1:
            out.append(LinkFamily("leaf", "spine", "leaf_up", "leaf_down", "leaf_up", "leaf_down",
                                  leaf_up_bw, share / self.oversub, self.n_leaves, str, self.leaf_of))
        if self.n_pods > 1:
            out.append(LinkFamily("spine", "core", "spine_up", "spine_down", "spine_up", "spine_down",
                                  self.leaves_per_pod * leaf_up_bw / self.spine_oversub,
                                  share / (self.oversub * self.spine_oversub), self.n_pods, str, self.pod_of))
        return out

    def _inter_classes(self, src: int, dsts: np.ndarray) -> np.ndarray:
        cls = np.full(dsts.shape, INTER_CORE, dtype=np.int64)
        cls[self.pod_of(dsts) == self.pod_of(src)] = INTER_SPINE
        cls[self.leaf_of(dsts) == self.leaf_of(src)] = INTER_LEAF
        return cls

    def _route_kinds(self, route_class: int) -> tuple[str, ...]:
        return {INTER_LEAF: ("nic",), INTER_SPINE: ("nic", "leaf"), INTER_CORE: ("nic", "leaf", "spine")}[route_class]

    def _inter_latency_s(self, route_class: int) -> float:
        return self.inter_latency_s + _HOPS[route_class] * self.hop_latency_s

    def describe(self) -> dict:
        d = super().describe()
        d.update(nodes_per_leaf=self.nodes_per_leaf, leaves_per_pod=self.leaves_per_pod, leaves=self.n_leaves,
                 pods=self.n_pods, spine_oversubscription=self.spine_oversub, hop_latency_s=self.hop_latency_s)
        return d
