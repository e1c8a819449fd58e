"""Choose the cost model of a topology: calibrated when it references a profile, else the roofline."""

from __future__ import annotations

from ..spec import TopologySpec
from .analytic import RooflineCostModel


def cost_model_for(topology: TopologySpec):
    """The cost model for ``topology``: ``CalibratedCostModel`` if ``topology.calibration`` is set."""
    if topology.calibration:
        from ..calibrate.profile import cost_model_for as calibrated

        return calibrated(topology)
    return RooflineCostModel(topology.device)


def resolve_topology(topology: TopologySpec) -> TopologySpec:
    """Apply the calibration profile's fabric and launch overrides (if any) to the topology."""
    if topology.calibration:
        from ..calibrate.profile import apply_to_topology, load_profile

        return apply_to_topology(topology, load_profile(topology.calibration))
    return topology
