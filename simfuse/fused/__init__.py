"""Fused computation-collective operators (workgroup-level push model) and their bulk baselines."""

from .base import FusedOp, GroupOp, MemberOp, OpResult, PushEngine, PushOp
from .knobs import ExecutionSpec, FusedKnobs
from .ops import (
    OPS,
    AllGatherGemm,
    EmbeddingAllToAll,
    GemmAllToAll,
    GemmReduceScatter,
    GemvAllReduce,
    PushKernel,
    make_op,
    register_op,
)

__all__ = ["ExecutionSpec", "FusedKnobs", "FusedOp", "GroupOp", "MemberOp", "OpResult", "PushEngine", "PushOp",
           "OPS", "AllGatherGemm", "EmbeddingAllToAll", "GemmAllToAll", "GemmReduceScatter", "GemvAllReduce",
           "PushKernel", "make_op", "register_op"]
