"""GEMM fused with the All-to-All of its output rows (MoE expert outputs pushed to the token owners).

Rank ``r`` holds ``a_r: [M_r, K]`` (the tokens routed to its expert) and ``b_r: [K, N]`` (the expert's
weight).  Row ``m`` of ``c_r = a_r @ b_r`` belongs to rank ``dest_rank_r[m]`` at row ``dest_row_r[m]`` of
that rank's receive buffer ``[recv_rows[d], N]``.  :func:`moe_routing` builds these maps for the usual
layout (expert ``r``'s rows grouped by source rank ``s``; rank ``s`` receives them in expert order).

Fused kernel: each ``BLOCK_M x BLOCK_N`` tile is computed and every row stored straight into its
owner's buffer; then, per destination, the program adds the number of rows it delivered there to that
rank's flag (release).  Rank ``d`` expects ``recv_rows[d] * cdiv(N, BLOCK_N)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from . import _triton as K
from ._launch import KernelConfigError, launch
from ._runtime import (
    FLOAT_DTYPES,
    MAX_TILE_ELEMS_PER_THREAD,
    cdiv,
    check_index_range,
    check_int,
    check_list,
    check_tensor,
    dtype_name,
    interpreting,
    pipelined_shared_bytes,
    shared_memory_limit,
)
from .embedding import WAIT_MODES, wait_flags
from .peer import PeerBuffer, Workspace
from .trace import TraceRecorder, format_shape

KERNEL = "gemm_all_to_all"


@dataclass(frozen=True)
class GemmConfig:
    """Tile sizes, grouped ordering (``group_m`` row tiles per group), warps and pipeline stages."""

    block_m: int = 128
    block_n: int = 128
    block_k: int = 64
    group_m: int = 8
    num_warps: int = 8
    num_stages: int = 3
    even: bool = False  # mask-free main loop when M, N, K are multiples of the block sizes
    # "gpu": device-scope release/acquire for the flags and counters (only with the emulated backend, where
    # every rank lives on one GPU); "sys" (default): system scope, needed across processes and GPUs
    scope: str = "sys"

    def validate(self) -> None:
        if self.scope not in ("sys", "gpu"):
            raise ValueError(f"config.scope: {self.scope!r} not one of ('sys', 'gpu')")
        if not isinstance(self.even, bool):
            raise ValueError(f"config.even: {self.even!r} is not a bool")
        for name in ("block_m", "block_n", "block_k", "group_m", "num_warps"):
            v = check_int(f"config.{name}", getattr(self, name), minimum=1, maximum=1024)
            if v & (v - 1):
                raise ValueError(f"config.{name}: {v} is not a power of two")
        if min(self.block_m, self.block_n, self.block_k) < 16:
            raise ValueError("config.block_m/n/k: must be at least 16 (tl.dot tile)")
        check_int("config.num_stages", self.num_stages, minimum=1, maximum=8)
        per_thread = self.block_m * self.block_n // (32 * self.num_warps)
        if per_thread > MAX_TILE_ELEMS_PER_THREAD // 2:
            raise ValueError(f"config: a {self.block_m}x{self.block_n} accumulator is {per_thread} fp32 values per "
                             f"thread at {self.num_warps} warps (at most {MAX_TILE_ELEMS_PER_THREAD // 2}): use a "
                             "smaller tile or more warps")

    def shared_bytes(self, dtype: torch.dtype) -> int:
        """Upper estimate of one program's shared memory for fp32 (IEEE) operands: ``num_stages - 1`` buffers of
        the A and B tiles of one K step (128x128x64: 131,072 bytes at 3 stages, measured with Triton 3.9 for
        sm_90); 0 for bf16/fp16, whose need is far less and is left to the compiler's own check."""
        if dtype != torch.float32:
            return 0
        return pipelined_shared_bytes((self.block_m + self.block_n) * self.block_k * 4, self.num_stages)


def _check_shared(cfg: GemmConfig, dtype, device) -> None:
    need, limit = cfg.shared_bytes(dtype), shared_memory_limit(device)
    if need > limit:
        raise KernelConfigError(f"config: {cfg.block_m}x{cfg.block_n}x{cfg.block_k} fp32 tiles at num_stages="
                                f"{cfg.num_stages} need about {need} bytes of shared memory, the device has {limit}: "
                                "lower num_stages or block_k")


def moe_routing(counts: Sequence[Sequence[int]]) -> tuple[list[torch.Tensor], list[torch.Tensor], list[int]]:
    """``counts[r][s]``: rows expert rank ``r`` computes for tokens of source rank ``s`` (grouped by ``s``).

    Returns ``(dest_rank, dest_row, recv_rows)``: int32 maps per expert rank, and rows each rank receives.
    """
    world = len(counts)
    for r, row in enumerate(counts):
        if len(row) != world:
            raise ValueError(f"counts[{r}]: expected {world} entries, got {len(row)}")
        for s, c in enumerate(row):
            check_int(f"counts[{r}][{s}]", c, minimum=0)
    recv = [sum(counts[r][s] for r in range(world)) for s in range(world)]
    dest_rank, dest_row = [], []
    for r in range(world):
        dr, dw = [], []
        for s in range(world):
            start = sum(counts[q][s] for q in range(r))
            dr += [s] * counts[r][s]
            dw += list(range(start, start + counts[r][s]))
        dest_rank.append(torch.tensor(dr, dtype=torch.int32))
        dest_row.append(torch.tensor(dw, dtype=torch.int32))
    return dest_rank, dest_row, recv


def _check(group, as_, bs, dest_rank=None, dest_row=None, recv_rows=None, validate=True):
    nl = len(group.local_ranks)
    as_ = check_list("a", as_, nl)
    bs = check_list("b", bs, nl)
    dev = group.device
    kdim = ndim = dtype = None
    for i, r in enumerate(group.local_ranks):
        a = check_tensor(f"a[{r}]", as_[i], ndim=2, dtypes=FLOAT_DTYPES, device=dev)
        b = check_tensor(f"b[{r}]", bs[i], ndim=2, dtypes=FLOAT_DTYPES, device=dev)
        if dtype is None:
            kdim, ndim, dtype = b.shape[0], b.shape[1], b.dtype
        if a.dtype != dtype or b.dtype != dtype:
            raise ValueError(f"a[{r}]/b[{r}]: dtypes {a.dtype}/{b.dtype} differ (expected {dtype} everywhere)")
        if a.shape[1] != b.shape[0]:
            raise ValueError(f"a[{r}]: K={a.shape[1]} does not match b[{r}]'s K={b.shape[0]}")
        if b.shape != (kdim, ndim):
            raise ValueError(f"b[{r}]: shape {tuple(b.shape)} differs from the first rank's {(kdim, ndim)}")
        if kdim == 0 or ndim == 0:
            raise ValueError(f"b[{r}]: empty matrix {tuple(b.shape)}")
    if dest_rank is None:
        return as_, bs, kdim, ndim, dtype, None
    world = group.world_size
    dest_rank = check_list("dest_rank", dest_rank, nl)
    dest_row = check_list("dest_row", dest_row, nl)
    if not isinstance(recv_rows, (list, tuple)) or len(recv_rows) != world:
        raise ValueError(f"recv_rows: expected a list of {world} ints (rows each rank receives)")
    recv = [check_int(f"recv_rows[{d}]", v, minimum=0) for d, v in enumerate(recv_rows)]
    for i, r in enumerate(group.local_ranks):
        m = as_[i].shape[0]
        dr = check_tensor(f"dest_rank[{r}]", dest_rank[i], ndim=1, dtypes=(torch.int32,), device=dev)
        dw = check_tensor(f"dest_row[{r}]", dest_row[i], ndim=1, dtypes=(torch.int32,), device=dev)
        if dr.numel() != m or dw.numel() != m:
            raise ValueError(f"dest_rank[{r}]/dest_row[{r}]: lengths {dr.numel()}/{dw.numel()} differ from M={m}")
        if validate and m:
            drh, dwh = dr.cpu().long(), dw.cpu().long()
            check_index_range(f"dest_rank[{r}]", drh, 0, world)
            check_index_range(f"dest_row[{r}]", dwh, 0, torch.tensor(recv)[drh])
            key = drh * (max(recv) + 1) + dwh
            if key.unique().numel() != m:
                raise ValueError(f"dest_row[{r}]: two rows of rank {r} go to the same destination row")
    return as_, bs, kdim, ndim, dtype, (dest_rank, dest_row, recv)


def _launch_rank(group, r, a, b, cfg, *, fused, dr, dw, out_t, flag_t, local_out, trace, dummy=None):
    m, k = a.shape
    n = b.shape[1]
    if cfg.scope == "gpu" and group.backend != "emulated":
        raise ValueError("config.scope: 'gpu' needs the emulated backend (all ranks on one GPU)")
    grid = (cdiv(m, cfg.block_m) * cdiv(n, cfg.block_n),)
    traced = trace is not None and r == trace.rank
    meta = None
    fl = by = 0.0
    if traced:
        shape = format_shape({"m": m, "n": n, "k": k, "block_m": cfg.block_m, "block_n": cfg.block_n,
                              "block_k": cfg.block_k})
        meta = {"kernel": KERNEL, "variant": "fused" if fused else "compute", "backend": group.backend,
                "world_size": group.world_size, "rank": r, "dtype": dtype_name(a.dtype), "shape": shape}
        e = a.element_size()
        fl = 2.0 * cfg.block_m * cfg.block_n * k
        by = float((cfg.block_m + cfg.block_n) * k * e + cfg.block_m * cfg.block_n * e)
    dummy = dr if fused else dummy
    args = [a, b, dr if fused else a, dw if fused else a, out_t if fused else dummy, flag_t if fused else dummy,
            local_out if not fused else a, group.world_size, m, n, k]
    consts = dict(BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m,
                  UPCAST=interpreting() and a.dtype != torch.float32, IEEE=a.dtype == torch.float32, FUSED=fused,
                  EVEN=cfg.even and m % cfg.block_m == 0 and n % cfg.block_n == 0 and k % cfg.block_k == 0,
                  GPU_SCOPE=cfg.scope == "gpu", num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    launch(K.gemm_kernel, grid, args, consts, dummy=out_t if fused else dummy, trace=trace if traced else None,
           meta=meta, flops_per_program=fl, bytes_per_program=by)


def gemm_all_to_all(group, a: Sequence[torch.Tensor], b: Sequence[torch.Tensor], dest_rank: Sequence[torch.Tensor],
                    dest_row: Sequence[torch.Tensor], recv_rows: Sequence[int], *, out: PeerBuffer | None = None,
                    workspace: Workspace | None = None, config: GemmConfig | None = None,
                    trace: TraceRecorder | None = None, wait: bool | str = True,
                    validate: bool = True) -> list[torch.Tensor]:
    """Fused GEMM + All-to-All; lists hold one entry per local rank.

    Returns each local rank's receive buffer ``[max(recv_rows), N]`` (rows beyond ``recv_rows[d]`` are
    not written).  ``wait``: see :func:`~simfuse.kernels.embedding.wait_flags`; ``wait=False`` leaves the flags (``workspace.get('gemm_flags', ...)``) at
    ``recv_rows[d] * cdiv(N, block_n)``.
    """
    cfg = config or GemmConfig()
    cfg.validate()
    if wait not in WAIT_MODES:
        raise ValueError(f"wait: {wait!r} not one of {WAIT_MODES}")
    a, b, kdim, ndim, dtype, route = _check(group, a, b, dest_rank, dest_row, recv_rows, validate)
    _check_shared(cfg, dtype, group.device)
    dest_rank, dest_row, recv = route
    wsp = workspace or Workspace(group)
    rows = max(max(recv), 1)
    if out is None:
        out = group.alloc((rows, ndim), dtype) if group.backend == "emulated" else wsp.get("gemm_out", (rows, ndim), dtype)
    elif out.shape[1:] != (ndim,) or out.shape[0] < max(recv) or out.dtype != dtype:
        raise ValueError(f"out: expected at least ({max(recv)}, {ndim}) of {dtype}, got {out.shape} {out.dtype}")
    flags = wsp.get("gemm_flags", (1,), torch.int64, fill=0)
    group.barrier()
    group.run_ranks(lambda i, r: _launch_rank(group, r, a[i], b[i], cfg, fused=True, dr=dest_rank[i], dw=dest_row[i],
                                              out_t=out.ptr_table, flag_t=flags.ptr_table, local_out=None,
                                              trace=trace))
    tiles_n = cdiv(ndim, cfg.block_n)
    wait_flags(group, flags, [recv[r] * tiles_n for r in group.local_ranks], mode=wait)
    return [out.local(r) for r in group.local_ranks]


def gemm_compute(group, a, b, *, config: GemmConfig | None = None, trace: TraceRecorder | None = None) -> list[torch.Tensor]:
    """The unfused compute kernel: ``a_r @ b_r`` (``[M_r, N]``) of each local rank, kept locally."""
    cfg = config or GemmConfig()
    cfg.validate()
    a, b, kdim, ndim, dtype, _ = _check(group, a, b)
    _check_shared(cfg, dtype, group.device)
    outs = [torch.empty((x.shape[0], ndim), dtype=dtype, device=group.device) for x in a]
    dummy = torch.empty(1, dtype=torch.int64, device=group.device)
    group.run_ranks(lambda i, r: _launch_rank(group, r, a[i], b[i], cfg, fused=False, dr=None, dw=None, out_t=None,
                                              flag_t=None, local_out=outs[i], trace=trace, dummy=dummy))
    return outs


def scatter_plan(group, dest_rank, dest_row) -> list[list[tuple[int, torch.Tensor, torch.Tensor]]]:
    """Per local rank, ``(d, source rows, destination rows)`` for every destination ``d`` it sends to.

    Building it synchronizes with the device (``nonzero``); pass it to :func:`scatter_rows` to keep
    repeated baseline calls free of host syncs."""
    plan = []
    for i, _r in enumerate(group.local_ranks):
        dr, dw = dest_rank[i].long(), dest_row[i].long()
        items = []
        for d in range(group.world_size):
            sel = (dr == d).nonzero().flatten()
            if sel.numel():
                items.append((d, sel, dw[sel]))
        plan.append(items)
    return plan


def scatter_rows(group, cs: Sequence[torch.Tensor], dest_rank, dest_row, recv_rows, *, collective: str = "auto",
                 out: PeerBuffer | None = None, plan=None) -> list[torch.Tensor]:
    """The baseline's All-to-All: row ``m`` of ``cs[r]`` to row ``dest_row[m]`` of rank ``dest_rank[m]``.

    ``copy``: ``index_copy_`` into the peers' buffers, then a barrier (any backend); ``torch``:
    ``torch.distributed.all_to_all_single`` (symmetric backend; needs the :func:`moe_routing` layout:
    rows grouped by destination, each source's rows consecutive and in order at the receiver).
    """
    world = group.world_size
    if collective == "auto":
        collective = "torch" if group.backend == "symmetric" else "copy"
    if collective not in ("copy", "torch"):
        raise ValueError(f"collective: {collective!r} not one of ('auto', 'copy', 'torch')")
    ndim, dtype = cs[0].shape[1], cs[0].dtype
    rows = max(max(recv_rows), 1)
    if collective == "torch":
        if group.backend != "symmetric":
            raise ValueError("collective: 'torch' needs the symmetric backend (a torch.distributed group)")
        import torch.distributed as dist

        dr = dest_rank[0].long()
        send_counts = torch.bincount(dr, minlength=world).to(group.device)
        recv_counts = torch.empty_like(send_counts)
        dist.all_to_all_single(recv_counts, send_counts, group=group.pg)
        recv = torch.empty((int(recv_counts.sum()), ndim), dtype=dtype, device=group.device)
        dist.all_to_all_single(recv, cs[0], recv_counts.tolist(), send_counts.tolist(), group=group.pg)
        return [recv]
    if out is None:
        out = group.alloc((rows, ndim), dtype)
    if plan is None:
        plan = scatter_plan(group, dest_rank, dest_row)
    group.barrier()
    for i, _r in enumerate(group.local_ranks):
        for d, src, dst in plan[i]:
            out.remote(d).index_copy_(0, dst, cs[i].index_select(0, src))
    group.barrier()
    return [out.local(r) for r in group.local_ranks]


def gemm_all_to_all_baseline(group, a, b, dest_rank, dest_row, recv_rows, *, config: GemmConfig | None = None,
                             collective: str = "auto", out: PeerBuffer | None = None, plan=None,
                             validate: bool = True) -> list[torch.Tensor]:
    """Unfused baseline: :func:`gemm_compute`, then :func:`scatter_rows` (``plan`` from :func:`scatter_plan`)."""
    _check(group, a, b, dest_rank, dest_row, recv_rows, validate)
    cs = gemm_compute(group, a, b, config=config)
    return scatter_rows(group, cs, dest_rank, dest_row, recv_rows, collective=collective, out=out, plan=plan)


def gemm_reference(a, b, dest_rank, dest_row, recv_rows) -> list[torch.Tensor]:
    """float64 receive buffers of ALL ranks (``[recv_rows[d], N]``) from ALL ranks' inputs."""
    world = len(a)
    ndim = b[0].shape[1]
    outs = [torch.full((recv_rows[d], ndim), float("nan"), dtype=torch.float64) for d in range(world)]
    for r in range(world):
        c = a[r].cpu().double() @ b[r].cpu().double()
        dr, dw = dest_rank[r].cpu().long(), dest_row[r].cpu().long()
        for m in range(c.shape[0]):
            outs[int(dr[m])][int(dw[m])] = c[m]
    return outs
