"""Compatibility module: the fabrics now live in :mod:`simfuse.network.fabrics` (one module per kind)."""

from .fabrics import (  # noqa: F401
    CLASS_NAMES,
    INTER,
    INTER_CORE,
    INTER_LEAF,
    INTER_SPINE,
    INTER_XRAIL,
    INTRA,
    SELF,
    Fabric,
    FlowGroupSpec,
)
