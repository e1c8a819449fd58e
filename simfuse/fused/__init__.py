"""Fused computation-collective operators (workgroup-level push model) and their bulk baselines."""

from .base import FusedKnobs, FusedOp, OpResult, PushEngine, run_op
from .ops import OPS, EmbeddingAllToAll, GemmAllToAll, GemvAllReduce, make_op

__all__ = ["FusedKnobs", "FusedOp", "OpResult", "PushEngine", "run_op", "OPS", "EmbeddingAllToAll",
           "GemmAllToAll", "GemvAllReduce", "make_op"]
