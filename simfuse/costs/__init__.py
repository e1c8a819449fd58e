from .analytic import RooflineCostModel
from .base import CostModel, KernelWork

__all__ = ['CostModel', 'KernelWork', 'RooflineCostModel']
