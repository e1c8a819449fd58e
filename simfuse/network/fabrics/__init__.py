"""Fabrics behind one interface: :class:`Fabric` (the shared machinery, in :mod:`.base`) and one module per
fabric kind, registered under the topology YAML's ``scale_out.fabric`` name.  ``Fabric(topology, nodes, ...)``
builds the registered class for the topology.

To add a fabric: write a module here with a :class:`Fabric` subclass decorated ``@register_fabric("name")``
that implements ``_link_families``, ``_inter_classes`` and ``_route_kinds`` (and ``_inter_latency_s`` if its
tiers add latency), import it below (registering adds the name to the topology validator), and validate any
fields it reads in :mod:`simfuse.spec.topology`.
"""

from . import fat_tree, fat_tree_3tier, rail_optimized  # noqa: F401  (registers the fabrics)
from .base import (
    CLASS_NAMES,
    INTER,
    INTER_CORE,
    INTER_LEAF,
    INTER_SPINE,
    INTER_XRAIL,
    INTRA,
    RELABELLINGS,
    SELF,
    Fabric,
    FlowGroupSpec,
    LinkFamily,
    fabric_class,
    register_fabric,
    registered_fabrics,
)
from .fat_tree import FatTreeFabric
from .fat_tree_3tier import FatTree3TierFabric
from .rail_optimized import RailOptimizedFabric

__all__ = ["CLASS_NAMES", "INTER", "INTER_CORE", "INTER_LEAF", "INTER_SPINE", "INTER_XRAIL", "INTRA", "SELF",
           "Fabric", "FatTree3TierFabric", "FatTreeFabric", "FlowGroupSpec", "LinkFamily", "RELABELLINGS", "RailOptimizedFabric",
           "fabric_class", "register_fabric", "registered_fabrics"]
