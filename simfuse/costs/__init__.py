from .analytic import RooflineCostModel
from .base import CostModel, KernelWork
from .select import cost_model_for, resolve_topology

__all__ = ["CostModel", "KernelWork", "RooflineCostModel", "cost_model_for", "resolve_topology"]
