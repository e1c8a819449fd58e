"""Embedding-bag pooling fused with the All-to-All of pooled rows (DLRM model parallelism).

Layout (per rank ``r``, holding ``T_r`` tables of dimension ``D``):

* ``weight``: ``[rows, D]``, the rows of the rank's tables concatenated; ``table_offsets``: int64
  ``[T_r + 1]``, first row of each table (``None``: one table).
* ``indices``: int64, table-major then bag-major (as in FBGEMM's table-batched embedding);
  ``offsets``: int64 ``[T_r * batch + 1]``; bag ``(t, b)`` pools ``indices[offsets[t*batch+b] :
  offsets[t*batch+b+1]]`` (row numbers local to table ``t``; variable pooling).
* The global batch is split evenly: rank ``d`` owns samples ``[d*batch/W, (d+1)*batch/W)``.
* Output at rank ``d``: ``[batch/W, F*D]`` with ``F = sum_r T_r``; rank ``r``'s table ``t`` lands in
  columns ``(sum_{r'<r} T_{r'} + t) * D ...``, in the weight's dtype (fp32 accumulation).

The fused kernel stores each pooled tile straight into the owner's buffer and adds the number of bags
it delivered to the owner's flag (release); each rank expects ``batch/W * F`` bags.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from . import _triton as K
from ._launch import launch
from ._runtime import (
    FLOAT_DTYPES,
    cdiv,
    check_index_range,
    check_int,
    check_list,
    check_tensor,
    dtype_name,
    next_pow2,
)
from .peer import PeerBuffer, Workspace
from .trace import TraceRecorder, format_shape

KERNEL = "embedding_all_to_all"
MODES = ("sum", "mean")


@dataclass(frozen=True)
class EmbeddingConfig:
    """Launch parameters: bags pooled per program (power of 2), warps, lookups unrolled per step."""

    bags_per_program: int = 8
    num_warps: int = 4
    unroll: int = 2

    def validate(self) -> None:
        for name in ("bags_per_program", "num_warps", "unroll"):
            v = check_int(f"config.{name}", getattr(self, name), minimum=1, maximum=64)
            if v & (v - 1):
                raise ValueError(f"config.{name}: {v} is not a power of two")


@dataclass
class _Checked:
    world: int
    batch: int
    dim: int
    dtype: torch.dtype
    tables: list[int]  # per rank, all ranks
    table_offsets: list[torch.Tensor]  # per local rank


def _check(group, weights, indices, offsets, table_offsets, tables_per_rank, mode, validate) -> _Checked:
    if mode not in MODES:
        raise ValueError(f"mode: {mode!r} not one of {MODES}")
    nl = len(group.local_ranks)
    weights = check_list("weights", weights, nl)
    indices = check_list("indices", indices, nl)
    offsets = check_list("offsets", offsets, nl)
    if table_offsets is None:
        table_offsets = [None] * nl
    table_offsets = check_list("table_offsets", table_offsets, nl)
    dev = group.device
    dim = dtype = batch = None
    tabs_local, toffs = [], []
    for i, r in enumerate(group.local_ranks):
        w = check_tensor(f"weights[{r}]", weights[i], ndim=2, dtypes=FLOAT_DTYPES, device=dev)
        if dim is None:
            dim, dtype = w.shape[1], w.dtype
        if w.shape[1] != dim:
            raise ValueError(f"weights[{r}]: embedding dim {w.shape[1]} differs from weights[0]'s {dim}")
        if w.dtype != dtype:
            raise ValueError(f"weights[{r}]: dtype {w.dtype} differs from weights[0]'s {dtype}")
        to = table_offsets[i]
        if to is None:
            to = torch.tensor([0, w.shape[0]], dtype=torch.int64, device=dev)
        to = check_tensor(f"table_offsets[{r}]", to, ndim=1, dtypes=(torch.int64,), device=dev)
        if to.numel() < 2:
            raise ValueError(f"table_offsets[{r}]: needs at least 2 entries (one table)")
        if validate:
            toh = to.cpu()
            if int(toh[0]) != 0 or int(toh[-1]) != w.shape[0] or bool((toh[1:] < toh[:-1]).any()):
                raise ValueError(
                    f"table_offsets[{r}]: must start at 0, not decrease and end at weights rows {w.shape[0]}")
        nt = to.numel() - 1
        ix = check_tensor(f"indices[{r}]", indices[i], ndim=1, dtypes=(torch.int64,), device=dev)
        of = check_tensor(f"offsets[{r}]", offsets[i], ndim=1, dtypes=(torch.int64,), device=dev)
        if (of.numel() - 1) % nt != 0 or of.numel() < 2:
            raise ValueError(f"offsets[{r}]: length {of.numel()} is not tables*batch+1 with {nt} tables")
        b = (of.numel() - 1) // nt
        if batch is None:
            batch = b
        if b != batch:
            raise ValueError(f"offsets[{r}]: batch {b} differs from rank {group.local_ranks[0]}'s batch {batch}")
        if validate:
            ofh = of.cpu()
            if int(ofh[0]) != 0 or int(ofh[-1]) != ix.numel() or bool((ofh[1:] < ofh[:-1]).any()):
                raise ValueError(f"offsets[{r}]: must start at 0, not decrease and end at len(indices)={ix.numel()}")
            lens = ofh[1:] - ofh[:-1]
            table_of = torch.repeat_interleave(torch.arange(nt * b) // b, lens)
            rows = (toh[1:] - toh[:-1])[table_of]
            check_index_range(f"indices[{r}]", ix.cpu(), 0, rows)
        tabs_local.append(nt)
        toffs.append(to)
    world = group.world_size
    if batch % world != 0:
        raise ValueError(f"batch_size: world size {world} does not divide the batch {batch}")
    if tables_per_rank is None:
        if len(group.local_ranks) != world:
            raise ValueError("tables_per_rank: required with the symmetric backend (tables of every rank)")
        tables = tabs_local
    else:
        tables = [check_int(f"tables_per_rank[{i}]", t, minimum=1) for i, t in enumerate(tables_per_rank)]
        if len(tables) != world:
            raise ValueError(f"tables_per_rank: expected {world} entries, got {len(tables)}")
        for i, r in enumerate(group.local_ranks):
            if tables[r] != tabs_local[i]:
                raise ValueError(f"tables_per_rank: rank {r} has {tabs_local[i]} tables, not {tables[r]}")
    return _Checked(world, batch, dim, dtype, tables, toffs)


def _program_work(offsets: torch.Tensor, nt: int, batch: int, world: int, bags: int, dim: int, elem: int):
    """Analytic FLOP and HBM bytes per program, in launch order (pid = (t*world + d)*nb + pb)."""
    bs = batch // world
    nb = cdiv(bs, bags)
    lens = (offsets[1:] - offsets[:-1]).cpu().view(nt, world, bs).double()
    pad = nb * bags - bs
    if pad:
        lens = torch.cat([lens, torch.zeros(nt, world, pad, dtype=lens.dtype)], dim=2)
    look = lens.view(nt, world, nb, bags).sum(-1).flatten()
    nbag = torch.full((nt, world, nb, bags), 1.0)
    if pad:
        nbag[:, :, -1, bags - pad:] = 0
    nbag = nbag.sum(-1).flatten()
    flops = (look * dim).tolist()
    byts = (look * (dim * elem + 8) + nbag * (dim * elem + 16)).tolist()
    return flops, byts


def _meta(group, rank, variant, ck: _Checked, mode, cfg, tables_local, rows, n_idx):
    shape = format_shape({"bags": ck.batch, "dim": ck.dim, "mode": mode, "tables": tables_local, "rows": rows,
                          "lookups": n_idx, "bags_per_program": cfg.bags_per_program})
    return {"kernel": KERNEL, "variant": variant, "backend": group.backend, "world_size": group.world_size,
            "rank": rank, "dtype": dtype_name(ck.dtype), "shape": shape}


def _launch_rank(group, i, r, ck, cfg, mode, weights, indices, offsets, *, fused, out, flags, local_out, trace):
    w, ix, of, to = weights[i], indices[i], offsets[i], ck.table_offsets[i]
    nt = to.numel() - 1
    bs = ck.batch // ck.world
    grid = (cdiv(bs, cfg.bags_per_program), ck.world, nt)
    tbase = sum(ck.tables[:r])
    ftot = sum(ck.tables)
    traced = trace is not None and r == trace.rank
    meta = fl = by = None
    if traced:
        meta = _meta(group, r, "fused" if fused else "compute", ck, mode, cfg, nt, w.shape[0], ix.numel())
        fl, by = _program_work(of, nt, ck.batch, ck.world, cfg.bags_per_program, ck.dim, w.element_size())
    args = [
        w, ix, of, to,
        out.ptr_table if fused else of, flags.ptr_table if fused else of,
        local_out if not fused else w,
        r, ck.batch, bs, tbase, ftot * ck.dim if fused else nt * ck.dim,
    ]
    consts = dict(D=ck.dim, BLOCK_D=next_pow2(ck.dim), BAGS=cfg.bags_per_program, SUB=min(cfg.bags_per_program, 16), UNROLL=cfg.unroll,
                  MEAN=mode == "mean", FUSED=fused, num_warps=cfg.num_warps)
    launch(K.embedding_kernel, grid, args, consts, dummy=of, trace=trace if traced else None, meta=meta,
           flops_per_program=fl or 0.0, bytes_per_program=by or 0.0)


WAIT_MODES = (True, False, "device", "host")


def wait_flags(group, flags: PeerBuffer, expected: int | Sequence[int], *, reset: bool = True,
               mode: bool | str = "device") -> None:
    """Consumer side: each local rank waits until its flag reaches ``expected`` (one int for every rank,
    or one per local rank), then subtracts it (so the flag is back at zero for the next call).

    ``mode``: ``device`` (or True) -- a one-program kernel spins on the flag with acquire loads;
    ``host`` -- a host barrier over the group first (every producer kernel has finished), then the same
    kernel, which finds the flag complete at once.  Use ``host`` when several processes share one GPU:
    their kernels are time-sliced, and a spinning consumer holds the GPU while the producer waits for
    its turn.  ``False``: return without waiting (flags keep their counts).
    """
    if mode not in WAIT_MODES:
        raise ValueError(f"wait: {mode!r} not one of {WAIT_MODES}")
    if mode is False:
        return
    if mode == "host":
        group.barrier()
    exp = [int(expected)] * len(group.local_ranks) if isinstance(expected, int) else [int(e) for e in expected]
    for r, e in zip(group.local_ranks, exp, strict=False):
        K.wait_flags_kernel[(1,)](flags.local(r), e, RESET=reset)


def embedding_all_to_all(
    group,
    weights: Sequence[torch.Tensor],
    indices: Sequence[torch.Tensor],
    offsets: Sequence[torch.Tensor],
    table_offsets: Sequence[torch.Tensor] | None = None,
    *,
    mode: str = "sum",
    tables_per_rank: Sequence[int] | None = None,
    out: PeerBuffer | None = None,
    workspace: Workspace | None = None,
    config: EmbeddingConfig | None = None,
    trace: TraceRecorder | None = None,
    wait: bool | str = True,
    validate: bool = True,
) -> list[torch.Tensor]:
    """Fused pooling + All-to-All. Lists hold one entry per local rank (``group.local_ranks``).

    Returns the pooled rows each local rank owns, ``[batch/W, F*D]``.  ``wait`` is the consumer's
    wait mode (see :func:`wait_flags`); with ``wait=False`` the flags
    (``workspace.get('emb_flags', ...)``) are left at their counts (``batch/W * F`` per rank) for the
    caller to check or wait on.  ``validate=False`` skips the data-dependent index checks (host sync).
    """
    if wait not in WAIT_MODES:
        raise ValueError(f"wait: {wait!r} not one of {WAIT_MODES}")
    cfg = config or EmbeddingConfig()
    cfg.validate()
    ck = _check(group, weights, indices, offsets, table_offsets, tables_per_rank, mode, validate)
    ws = workspace or Workspace(group)
    bs, ftot = ck.batch // ck.world, sum(ck.tables)
    if out is None:
        out = group.alloc((bs, ftot * ck.dim), ck.dtype) if group.backend == "emulated" else \
            ws.get("emb_out", (bs, ftot * ck.dim), ck.dtype)
    elif out.shape != (bs, ftot * ck.dim) or out.dtype != ck.dtype:
        raise ValueError(f"out: expected shape {(bs, ftot * ck.dim)} dtype {ck.dtype}, got {out.shape} {out.dtype}")
    flags = ws.get("emb_flags", (1,), torch.int64, fill=0)
    group.barrier()
    group.run_ranks(lambda i, r: _launch_rank(group, i, r, ck, cfg, mode, weights, indices, offsets, fused=True,
                                              out=out, flags=flags, local_out=None, trace=trace))
    wait_flags(group, flags, bs * ftot, mode=wait)
    return [out.local(r) for r in group.local_ranks]


def embedding_compute(group, weights, indices, offsets, table_offsets=None, *, mode="sum", tables_per_rank=None,
                      config: EmbeddingConfig | None = None, trace: TraceRecorder | None = None,
                      validate: bool = True) -> list[torch.Tensor]:
    """The unfused compute kernel: pooled rows ``[batch, T_r*D]`` of each local rank, kept locally."""
    cfg = config or EmbeddingConfig()
    cfg.validate()
    ck = _check(group, weights, indices, offsets, table_offsets, tables_per_rank, mode, validate)
    outs = [torch.empty((ck.batch, (to.numel() - 1) * ck.dim), dtype=ck.dtype, device=group.device)
            for to in ck.table_offsets]
    group.run_ranks(lambda i, r: _launch_rank(group, i, r, ck, cfg, mode, weights, indices, offsets, fused=False,
                                              out=None, flags=None, local_out=outs[i], trace=trace))
    return outs


def all_to_all_rows(group, locals_: Sequence[torch.Tensor], tables: Sequence[int], dim: int, *,
                    collective: str = "auto", out: PeerBuffer | None = None) -> list[torch.Tensor]:
    """The baseline's collective: rank ``r``'s rows of slice ``d`` go to rank ``d`` at ``r``'s columns.

    ``collective``: ``copy`` (explicit copies into the peers' buffers, then a barrier; any backend),
    ``torch`` (``torch.distributed.all_to_all_single``; symmetric backend), ``auto`` (torch for the
    symmetric backend, copy for the emulated one).
    """
    world = group.world_size
    if collective == "auto":
        collective = "torch" if group.backend == "symmetric" else "copy"
    if collective not in ("copy", "torch"):
        raise ValueError(f"collective: {collective!r} not one of ('auto', 'copy', 'torch')")
    batch = locals_[0].shape[0]
    bs = batch // world
    ftot = sum(tables)
    dtype = locals_[0].dtype
    if collective == "torch":
        if group.backend != "symmetric":
            raise ValueError("collective: 'torch' needs the symmetric backend (a torch.distributed group)")
        import torch.distributed as dist

        r = group.rank
        send = locals_[0].reshape(-1)
        recv = torch.empty(bs * ftot * dim, dtype=dtype, device=group.device)
        dist.all_to_all_single(recv, send, [bs * t * dim for t in tables], [bs * tables[r] * dim] * world,
                               group=group.pg)
        parts = torch.split(recv, [bs * t * dim for t in tables])
        return [torch.cat([p.view(bs, t * dim) for p, t in zip(parts, tables, strict=False)], dim=1)]
    if out is None:
        out = group.alloc((bs, ftot * dim), dtype)  # collective for the symmetric backend: pass ``out`` to reuse
    group.barrier()
    for i, r in enumerate(group.local_ranks):
        c0 = sum(tables[:r]) * dim
        for d in range(world):
            out.remote(d)[:, c0:c0 + tables[r] * dim].copy_(locals_[i][d * bs:(d + 1) * bs])
    group.barrier()
    return [out.local(r) for r in group.local_ranks]


def embedding_all_to_all_baseline(group, weights, indices, offsets, table_offsets=None, *, mode="sum",
                                  tables_per_rank=None, config: EmbeddingConfig | None = None,
                                  collective: str = "auto", out: PeerBuffer | None = None,
                                  validate: bool = True) -> list[torch.Tensor]:
    """Unfused baseline: :func:`embedding_compute`, then :func:`all_to_all_rows`."""
    ck = _check(group, weights, indices, offsets, table_offsets, tables_per_rank, mode, validate)
    locs = embedding_compute(group, weights, indices, offsets, table_offsets, mode=mode, tables_per_rank=ck.tables,
                             config=config, validate=False)
    return all_to_all_rows(group, locs, ck.tables, ck.dim, collective=collective, out=out)


def embedding_reference(weights, indices, offsets, table_offsets=None, *, mode="sum") -> list[torch.Tensor]:
    """float64 reference over ALL ranks' inputs (lists indexed by rank): the output of every rank."""
    world = len(weights)
    if table_offsets is None:
        table_offsets = [torch.tensor([0, w.shape[0]]) for w in weights]
    pooled = []  # per rank [batch, T_r*D]
    for w, ix, of, to in zip(weights, indices, offsets, table_offsets, strict=False):
        to = to.cpu()
        nt = to.numel() - 1
        b = (of.numel() - 1) // nt
        cols = []
        for t in range(nt):
            o = of[t * b:(t + 1) * b + 1].cpu()
            idx = ix.cpu()[int(o[0]):int(o[-1])]
            wt = w.cpu().double()[int(to[t]):int(to[t + 1])]
            cols.append(F.embedding_bag(idx, wt, o - o[0], mode=mode, include_last_offset=True))
        pooled.append(torch.cat(cols, dim=1))
    b = pooled[0].shape[0]
    bs = b // world
    return [torch.cat([p[d * bs:(d + 1) * bs] for p in pooled], dim=1) for d in range(world)]
