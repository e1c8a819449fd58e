"""``fabric: rail_optimized`` -- NIC ``i`` of every node sits on rail leaf ``i``; same-rail traffic stays on the
leaf, cross-rail traffic goes up to the spine through per-NIC uplinks of ``nic_bw / oversubscription``.

Links beyond NVLink and NICs, only when ``oversubscription > 1`` and there is more than one node: full mode
``xup[n,i]``/``xdown[n,i]`` per NIC; symmetric mode ``core_up``/``core_down`` of one rank's NIC share over
``oversubscription``.  Route classes: SELF, INTRA, INTER (same rail: ``nic, nic``), INTER_XRAIL (other rail:
``nic, [xup], [xdown], nic``), all inter-node ones with ``scale_out.latency_us``.
"""

from __future__ import annotations

import numpy as np

from .base import INTER, INTER_XRAIL, INTRA, SELF, Fabric, LinkFamily, register_fabric


@register_fabric("rail_optimized")
class RailOptimizedFabric(Fabric):
    CLASS_TIER = {SELF: "self", INTRA: "nvlink", INTER: "leaf", INTER_XRAIL: "spine"}

    def _configure(self) -> None:
        self.has_core = self.oversub > 1.0 and self.nodes > 1

    def _link_families(self) -> list[LinkFamily]:
        if not self.has_core:
            return []
        k = self.nics_per_node
        return [LinkFamily("core", "spine", "xup", "xdown", "core_up", "core_down",
                           self.nic_bw / self.oversub, self.nic_bw / self.gpus_per_nic / self.oversub,
                           self.nodes * k, lambda j: f"{j // k},{j % k}", self.nic_index)]

    def _inter_classes(self, src: int, dsts: np.ndarray) -> np.ndarray:
        return np.where(self.nic_of(dsts) != self.nic_of(src), INTER_XRAIL, INTER).astype(np.int64)

    def _route_kinds(self, route_class: int) -> tuple[str, ...]:
        return ("nic", "core") if self.has_core and route_class == INTER_XRAIL else ("nic",)
