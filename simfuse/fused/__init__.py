"""Fused computation-collective operators (workgroup-level push model) and their bulk baselines."""

from .base import FusedOp, OpResult, PushEngine
from .knobs import ExecutionSpec, FusedKnobs
from .ops import OPS, EmbeddingAllToAll, GemmAllToAll, GemvAllReduce, PushKernel, make_op

__all__ = ["ExecutionSpec", "FusedKnobs", "FusedOp", "OpResult", "PushEngine", "OPS",
           "EmbeddingAllToAll", "GemmAllToAll", "GemvAllReduce", "PushKernel", "make_op"]

