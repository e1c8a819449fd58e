"""``fabric: fat_tree`` -- every node hangs off the fabric through uplinks whose capacity is the node's NIC
bandwidth over ``scale_out.oversubscription``; every inter-node byte crosses them.

Links beyond NVLink and NICs, only when ``oversubscription > 1`` and there is more than one node (a
non-blocking uplink can never be the bottleneck, so leaving it out is exact): full mode ``up[n]``/``down[n]``
per node of ``nics_per_node * nic_bw / oversubscription``; symmetric mode ``core_up``/``core_down`` of one
rank's NIC share over ``oversubscription``.  Route classes: SELF, INTRA, INTER (``nic, [up], [down], nic``),
all with the topology's ``scale_out.latency_us``.
"""

from __future__ import annotations

import numpy as np

from .base import INTER, INTRA, SELF, Fabric, LinkFamily, register_fabric


@register_fabric("fat_tree")
class FatTreeFabric(Fabric):
    CLASS_TIER = {SELF: "self", INTRA: "nvlink", INTER: "spine"}

    def _configure(self) -> None:
        self.has_core = self.oversub > 1.0 and self.nodes > 1

    def _link_families(self) -> list[LinkFamily]:
        if not self.has_core:
            return []
        k = self.nics_per_node
        return [LinkFamily("core", "spine", "up", "down", "core_up", "core_down",
                           k * self.nic_bw / self.oversub, self.nic_bw / self.gpus_per_nic / self.oversub,
                           self.nodes, str, self.node_of)]

    def _inter_classes(self, src: int, dsts: np.ndarray) -> np.ndarray:
        return np.full(dsts.shape, INTER, dtype=np.int64)

    def _route_kinds(self, route_class: int) -> tuple[str, ...]:
        return ("nic", "core") if self.has_core else ("nic",)
