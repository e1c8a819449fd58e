"""``torch.library`` registration: ``torch.ops.simfuse.<name>``.

The registered operators run every rank of an *emulated* group in the calling process (lists hold one
tensor per rank; the world size is the length of the lists) and return fresh output tensors, one per
rank.  The symmetric-memory backend needs a process group and persistent peer buffers, so it is used
through the Python API (:mod:`simfuse.kernels.embedding` etc.), not through these operators.

Importing this module registers the operators once per process (``torch.library.custom_op``);
:func:`register_ops` imports it and returns ``torch.ops.simfuse``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .embedding import EmbeddingConfig, embedding_all_to_all, embedding_all_to_all_baseline
from .gemm import GemmConfig, gemm_all_to_all, gemm_all_to_all_baseline
from .gemv import GemvConfig, gemv_all_reduce, gemv_all_reduce_baseline
from .peer import EmulatedGroup

__all__ = ["register_ops"]


def _group(tensors: list[Tensor]) -> EmulatedGroup:
    if not tensors:
        raise ValueError("inputs: need one tensor per rank, got an empty list")
    return EmulatedGroup(len(tensors), tensors[0].device)


def _emb_fake_shapes(weights, offsets, table_offsets):
    world = len(weights)
    tables = [t.shape[0] - 1 for t in table_offsets]
    batch = (offsets[0].shape[0] - 1) // tables[0]
    return [weights[0].new_empty((batch // world, sum(tables) * weights[0].shape[1])) for _ in range(world)]


@torch.library.custom_op("simfuse::embedding_all_to_all", mutates_args=())
def _embedding_all_to_all(weights: list[Tensor], indices: list[Tensor], offsets: list[Tensor],
                          table_offsets: list[Tensor], mode: str = "sum", bags_per_program: int = 8,
                          num_warps: int = 4) -> list[Tensor]:
    cfg = EmbeddingConfig(bags_per_program=bags_per_program, num_warps=num_warps)
    return embedding_all_to_all(_group(weights), weights, indices, offsets, table_offsets, mode=mode, config=cfg)


@_embedding_all_to_all.register_fake
def _(weights, indices, offsets, table_offsets, mode="sum", bags_per_program=8, num_warps=4):
    return _emb_fake_shapes(weights, offsets, table_offsets)


@torch.library.custom_op("simfuse::embedding_all_to_all_baseline", mutates_args=())
def _embedding_all_to_all_baseline(weights: list[Tensor], indices: list[Tensor], offsets: list[Tensor],
                                   table_offsets: list[Tensor], mode: str = "sum") -> list[Tensor]:
    outs = embedding_all_to_all_baseline(_group(weights), weights, indices, offsets, table_offsets, mode=mode)
    return [o.clone() for o in outs]


@_embedding_all_to_all_baseline.register_fake
def _(weights, indices, offsets, table_offsets, mode="sum"):
    return _emb_fake_shapes(weights, offsets, table_offsets)


@torch.library.custom_op("simfuse::gemv_all_reduce", mutates_args=())
def _gemv_all_reduce(xs: list[Tensor], ws: list[Tensor], block_n: int = 64, block_k: int = 128, split_k: int = 1,
                     num_warps: int = 4) -> list[Tensor]:
    cfg = GemvConfig(block_n=block_n, block_k=block_k, split_k=split_k, num_warps=num_warps)
    return gemv_all_reduce(_group(xs), xs, ws, config=cfg)


@_gemv_all_reduce.register_fake
def _(xs, ws, block_n=64, block_k=128, split_k=1, num_warps=4):
    return [ws[0].new_empty((xs[0].shape[0], ws[0].shape[0])) for _ in xs]


@torch.library.custom_op("simfuse::gemv_all_reduce_baseline", mutates_args=())
def _gemv_all_reduce_baseline(xs: list[Tensor], ws: list[Tensor]) -> list[Tensor]:
    return [o.clone() for o in gemv_all_reduce_baseline(_group(xs), xs, ws)]


@_gemv_all_reduce_baseline.register_fake
def _(xs, ws):
    return [ws[0].new_empty((xs[0].shape[0], ws[0].shape[0])) for _ in xs]


@torch.library.custom_op("simfuse::gemm_all_to_all", mutates_args=())
def _gemm_all_to_all(a: list[Tensor], b: list[Tensor], dest_rank: list[Tensor], dest_row: list[Tensor],
                     recv_rows: list[int], block_m: int = 128, block_n: int = 128, block_k: int = 64,
                     num_warps: int = 8, num_stages: int = 3) -> list[Tensor]:
    cfg = GemmConfig(block_m=block_m, block_n=block_n, block_k=block_k, num_warps=num_warps, num_stages=num_stages)
    outs = gemm_all_to_all(_group(a), a, b, dest_rank, dest_row, list(recv_rows), config=cfg)
    return [o[:n].clone() for o, n in zip(outs, recv_rows, strict=False)]


@_gemm_all_to_all.register_fake
def _(a, b, dest_rank, dest_row, recv_rows, block_m=128, block_n=128, block_k=64, num_warps=8, num_stages=3):
    return [b[0].new_empty((n, b[0].shape[1])) for n in recv_rows]


@torch.library.custom_op("simfuse::gemm_all_to_all_baseline", mutates_args=())
def _gemm_all_to_all_baseline(a: list[Tensor], b: list[Tensor], dest_rank: list[Tensor], dest_row: list[Tensor],
                              recv_rows: list[int]) -> list[Tensor]:
    outs = gemm_all_to_all_baseline(_group(a), a, b, dest_rank, dest_row, list(recv_rows))
    return [o[:n].clone() for o, n in zip(outs, recv_rows, strict=False)]


@_gemm_all_to_all_baseline.register_fake
def _(a, b, dest_rank, dest_row, recv_rows):
    return [b[0].new_empty((n, b[0].shape[1])) for n in recv_rows]


def register_ops():
    """Make sure the operators are registered; returns the ``torch.ops.simfuse`` namespace."""
    return torch.ops.simfuse
