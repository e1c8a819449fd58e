"""Workloads: one registered :class:`~simfuse.workloads.base.Workload` class per model-file ``kind:``
(:mod:`simfuse.workloads.base`), and the run pipeline (:mod:`simfuse.workloads.run`)."""

from . import chakra_workload, dlrm_workload, llm, models  # noqa: F401  (registers the built-in kinds)
from .base import Workload, register_workload, registered_workloads, workload_for
from .result import IterationResult

__all__ = ["IterationResult", "Workload", "register_workload", "registered_workloads", "workload_for"]
