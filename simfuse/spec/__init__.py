"""Validated specs (pure data, no simpy)."""

from .topology import (
    CollectiveOverheadSpec,
    DeviceSpec,
    GemmEfficiencySpec,
    GpuInitiatedSpec,
    ScaleOutSpec,
    ScaleUpSpec,
    TopologySpec,
    load_topology,
    topology_from_dict,
)

__all__ = [
    "CollectiveOverheadSpec", "DeviceSpec", "GemmEfficiencySpec", "GpuInitiatedSpec", "ScaleOutSpec", "ScaleUpSpec",
    "TopologySpec", "load_topology", "topology_from_dict",
]

from .workload import (  # noqa: E402
    DLRMSpec,
    LLMSpec,
    MoESpec,
    TableSpec,
    TransformerDecodeSpec,
    load_workload,
    workload_from_dict,
)

__all__ += ["DLRMSpec", "LLMSpec", "MoESpec", "TableSpec", "TransformerDecodeSpec", "load_workload", "workload_from_dict"]
