from .fabrics import (
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
    fabric_class,
    registered_fabrics,
)
from .flows import FlowNetwork, max_min_rates, progressive_fill

__all__ = ['Fabric', 'FlowGroupSpec', 'FlowNetwork', 'max_min_rates', 'progressive_fill', 'SELF', 'INTRA', 'INTER', 'INTER_XRAIL',
           'INTER_LEAF', 'INTER_SPINE', 'INTER_CORE', 'CLASS_NAMES', 'RELABELLINGS', 'fabric_class', 'registered_fabrics']
