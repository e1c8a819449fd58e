"""Bulk-synchronous collectives: algorithms (per-rank step schedules) and their simpy driver."""

from .algorithms import BUSBW_FACTOR, DEFAULT_ALGORITHM, OPS, REGISTRY, Algorithm, Layout, make_algorithm
from .run import CollectiveResult, run_collective
from .runner import FlowGroupCache, collective_process, start_groups

__all__ = [
    "BUSBW_FACTOR", "DEFAULT_ALGORITHM", "OPS", "REGISTRY", "Algorithm", "Layout", "make_algorithm",
    "CollectiveResult", "FlowGroupCache", "collective_process", "run_collective", "start_groups",
]
