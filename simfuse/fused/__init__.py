"""Fused computation-collective operators (workgroup-level push model) and their bulk baselines."""

from .base import FusedOp, OpResult, PushEngine
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
)

__all__ = ["ExecutionSpec", "FusedKnobs", "FusedOp", "OpResult", "PushEngine", "run_op", "OPS",
           "AllGatherGemm", "EmbeddingAllToAll", "GemmAllToAll", "GemmReduceScatter", "GemvAllReduce", "PushKernel", "make_op"]


def __getattr__(name):
    # run_op builds operator graphs (a layer above this package); kept here for existing callers
    if name == "run_op":
        from ..workloads.op import run_op

        return run_op
    raise AttributeError(name)
