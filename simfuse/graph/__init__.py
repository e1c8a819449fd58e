"""Operator graphs (per-rank DAGs of kernels, collectives on groups, fused operators) and their executor."""

from .ir import (
    AllToAllVNode,
    CollectiveNode,
    ComputeNode,
    DelayNode,
    FusedNode,
    Graph,
    Node,
    RankGraph,
    RecvNode,
    SendNode,
)

__all__ = ["AllToAllVNode", "CollectiveNode", "ComputeNode", "DelayNode", "FusedNode", "Graph", "Node",
           "RankGraph", "RecvNode", "SendNode", "execute", "Executor", "GraphResult"]


def __getattr__(name):  # the executor imports simpy and the fabric: load it on first use
    if name in ("execute", "Executor", "GraphResult"):
        from . import executor

        return getattr(executor, name)
    raise AttributeError(name)
