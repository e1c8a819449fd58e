"""Validated specs (pure data, no simpy)."""

from .topology import (
    CollectiveOverheadSpec,
    DeviceSpec,
    GpuInitiatedSpec,
    ScaleOutSpec,
    ScaleUpSpec,
    TopologySpec,
    load_topology,
    topology_from_dict,
)

__all__ = [
    "CollectiveOverheadSpec", "DeviceSpec", "GpuInitiatedSpec", "ScaleOutSpec", "ScaleUpSpec",
    "TopologySpec", "load_topology", "topology_from_dict",
]
