"""Kernel cost models behind one interface: the analytic roofline and the calibrated model.

Choosing one for a topology (and applying a calibration profile) happens once, at the edge:
:class:`simfuse.system.System`.
"""

from .analytic import RooflineCostModel
from .base import CostModel, KernelWork

__all__ = ["CostModel", "KernelWork", "RooflineCostModel"]
