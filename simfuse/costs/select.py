"""Deprecated helpers kept for callers outside the package: build a :class:`simfuse.system.System` instead.

``simfuse.costs`` does not import ``simfuse.calibrate``: these delegate to ``simfuse.system`` lazily.
"""

from __future__ import annotations


def cost_model_for(topology):
    """The cost model of ``topology`` (see :meth:`simfuse.system.System.from_topology`)."""
    from ..system import System

    return System.from_topology(topology).cost


def resolve_topology(topology):
    """``topology`` with its calibration profile applied (see :class:`simfuse.system.System`)."""
    from ..system import System

    return System.from_topology(topology).topology
