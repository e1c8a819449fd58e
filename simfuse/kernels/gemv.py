"""GEMV fused with a direct two-phase AllReduce (tensor parallelism, ``W`` split along ``K``).

Rank ``r`` holds ``x_r: [tokens, K_r]`` and ``w_r: [N, K_r]`` (``tokens`` in 1..16); the result on every
rank is ``y = sum_r x_r @ w_r.T`` of shape ``[tokens, N]`` in the inputs' dtype (fp32 accumulation).

Fused kernel: output tile ``i`` (``BLOCK_N`` columns) is owned by rank ``i % W``.  Each program pushes
its fp32 partial tile into its slot of the owner's staging buffer and bumps the owner's arrival
counter (acq_rel); the program that arrives last reduces the ``W * split_k`` slots in a fixed order
and pushes the reduced tile into every rank's output, then releases every rank's done flag (each
rank expects ``cdiv(N, BLOCK_N)``).  No program spins, so the kernel is deadlock-free when the ranks'
launches run one after another (emulated backend, interpreter).
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

KERNEL = "gemv_all_reduce"
MAX_TOKENS = 16


@dataclass(frozen=True)
class GemvConfig:
    """Launch parameters: output columns per program, K step, K splits per rank, warps, pipeline stages."""

    block_n: int = 64
    block_k: int = 128
    split_k: int = 1
    num_warps: int = 4
    num_stages: int = 3
    vec: bool = False  # one token: multiply-and-reduce in fp32 instead of a 16-row-padded tl.dot
    # "gpu": device-scope release/acquire for the flags and counters (only with the emulated backend, where
    # every rank lives on one GPU); "sys" (default): system scope, needed across processes and GPUs
    scope: str = "sys"

    def validate(self) -> None:
        if self.scope not in ("sys", "gpu"):
            raise ValueError(f"config.scope: {self.scope!r} not one of ('sys', 'gpu')")
        if not isinstance(self.vec, bool):
            raise ValueError(f"config.vec: {self.vec!r} is not a bool")
        for name in ("block_n", "block_k", "split_k", "num_warps"):
            v = check_int(f"config.{name}", getattr(self, name), minimum=1, maximum=1024)
            if v & (v - 1):
                raise ValueError(f"config.{name}: {v} is not a power of two")
        if self.block_n < 16 or self.block_k < 16:
            raise ValueError("config.block_n/block_k: must be at least 16 (tl.dot tile)")
        check_int("config.num_stages", self.num_stages, minimum=1, maximum=8)
        per_thread = self.block_n * self.block_k // (32 * self.num_warps)
        if per_thread > MAX_TILE_ELEMS_PER_THREAD:
            raise ValueError(f"config: a {self.block_n}x{self.block_k} tile is {per_thread} elements per thread at "
                             f"{self.num_warps} warps (at most {MAX_TILE_ELEMS_PER_THREAD}): use a smaller tile or "
                             "more warps")

    def shared_bytes(self, dtype: torch.dtype, tokens: int = 1) -> int:
        """Upper estimate of the shared memory of one program: the fp32 (IEEE ``tl.dot``) path pipelines the
        x and W tiles of ``num_stages - 1`` K steps; the other paths (bf16/fp16 ``tl.dot``, ``vec``) keep far
        less (12 KiB measured for bf16 128x128), so only fp32 is estimated (0 otherwise)."""
        if dtype != torch.float32 or (self.vec and tokens == 1):
            return 0
        return pipelined_shared_bytes((16 + self.block_n) * self.block_k * 4, self.num_stages)

    def fit_shared_memory(self, dtype: torch.dtype, limit: int, tokens: int = 1) -> GemvConfig:
        """This configuration with ``num_stages`` lowered until :meth:`shared_bytes` fits ``limit`` (fp32 large
        tiles: 128x256 needs 2 stages on an H200); raises ValueError when even 1 stage does not fit."""
        from dataclasses import replace

        for st in range(self.num_stages, 0, -1):
            c = replace(self, num_stages=st)
            if c.shared_bytes(dtype, tokens) <= limit:
                return c
        raise ValueError(f"config: a {self.block_n}x{self.block_k} {dtype_name(dtype)} tile needs "
                         f"{replace(self, num_stages=1).shared_bytes(dtype, tokens)} bytes of shared memory even at "
                         f"1 stage (limit {limit}): use a smaller tile")


def _check_shared(cfg: GemvConfig, dtype, tokens, device) -> None:
    need = cfg.shared_bytes(dtype, tokens)
    limit = shared_memory_limit(device)
    if need > limit:
        try:
            hint = f"; num_stages={cfg.fit_shared_memory(dtype, limit, tokens).num_stages} fits " \
                   "(GemvConfig.fit_shared_memory)"
        except ValueError:
            hint = "; no num_stages fits: use a smaller tile"
        raise KernelConfigError(f"config: {cfg.block_n}x{cfg.block_k} {dtype_name(dtype)} tiles at num_stages="
                                f"{cfg.num_stages} need about {need} bytes of shared memory, the device has "
                                f"{limit}{hint}")


def _check(group, xs, ws):
    nl = len(group.local_ranks)
    xs = check_list("xs", xs, nl)
    ws = check_list("ws", ws, nl)
    dev = group.device
    n = tokens = dtype = None
    for i, r in enumerate(group.local_ranks):
        x = check_tensor(f"xs[{r}]", xs[i], ndim=2, dtypes=FLOAT_DTYPES, device=dev)
        w = check_tensor(f"ws[{r}]", ws[i], ndim=2, dtypes=FLOAT_DTYPES, device=dev)
        if dtype is None:
            n, tokens, dtype = w.shape[0], x.shape[0], w.dtype
        if x.dtype != w.dtype or w.dtype != dtype:
            raise ValueError(f"xs[{r}]/ws[{r}]: dtypes {x.dtype}/{w.dtype} differ (expected {dtype} everywhere)")
        if w.shape[0] != n:
            raise ValueError(f"ws[{r}]: N={w.shape[0]} differs from the first rank's N={n}")
        if x.shape[1] != w.shape[1]:
            raise ValueError(f"xs[{r}]: K={x.shape[1]} does not match ws[{r}]'s K={w.shape[1]}")
        if x.shape[0] != tokens:
            raise ValueError(f"xs[{r}]: {x.shape[0]} tokens differ from the first rank's {tokens}")
        if not 1 <= tokens <= MAX_TOKENS:
            raise ValueError(f"xs[{r}]: tokens={tokens} must lie in 1..{MAX_TOKENS}")
        if w.shape[1] == 0 or n == 0:
            raise ValueError(f"ws[{r}]: empty matrix {tuple(w.shape)}")
    return xs, ws, n, tokens, dtype


def _launch_rank(group, r, x, w, cfg, *, world, rank, stage_t, ctr_t, out_t, flag_t, variant, trace):
    n, k = w.shape
    tokens = x.shape[0]
    tiles = cdiv(n, cfg.block_n)
    grid = (tiles, cfg.split_k)
    traced = trace is not None and r == trace.rank
    meta = None
    k_per = cdiv(cdiv(k, cfg.split_k), cfg.block_k) * cfg.block_k
    fl = by = 0.0
    if traced:
        shape = format_shape({"n": n, "k": k, "tokens": tokens, "block_n": cfg.block_n, "split_k": cfg.split_k})
        meta = {"kernel": KERNEL, "variant": variant, "backend": group.backend, "world_size": group.world_size,
                "rank": r, "dtype": dtype_name(w.dtype), "shape": shape}
        kk = min(k_per, k)
        fl = 2.0 * tokens * cfg.block_n * kk
        by = float(cfg.block_n * kk * w.element_size() + tokens * kk * x.element_size() + tokens * cfg.block_n * 4)
    args = [x, w, stage_t, ctr_t, out_t, flag_t, rank, world, tokens, n, k]
    vec = cfg.vec and tokens == 1
    if cfg.scope == "gpu" and group.backend != "emulated":
        raise ValueError("config.scope: 'gpu' needs the emulated backend (all ranks on one GPU)")
    consts = dict(BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, SPLIT_K=cfg.split_k, T_PAD=1 if vec else 16, VEC=vec,
                  GPU_SCOPE=cfg.scope == "gpu",
                  UPCAST=interpreting() and w.dtype != torch.float32, IEEE=w.dtype == torch.float32,
                  num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    launch(K.gemv_kernel, grid, args, consts, dummy=ctr_t, trace=trace if traced else None, meta=meta,
           flops_per_program=fl, bytes_per_program=by)


def gemv_all_reduce(group, xs: Sequence[torch.Tensor], ws: Sequence[torch.Tensor], *, out: PeerBuffer | None = None,
                    workspace: Workspace | None = None, config: GemvConfig | None = None,
                    trace: TraceRecorder | None = None, wait: bool | str = True) -> list[torch.Tensor]:
    """Fused GEMV + AllReduce; lists hold one entry per local rank.  Returns ``[tokens, N]`` per local rank.

    ``wait``: see :func:`~simfuse.kernels.embedding.wait_flags`.  With ``wait=False`` each rank's done flag (``workspace.get('gemv_flags', ...)``) is left at
    ``cdiv(N, block_n)``; arrival counters are always back at zero after the launch.
    """
    cfg = config or GemvConfig()
    cfg.validate()
    if wait not in WAIT_MODES:
        raise ValueError(f"wait: {wait!r} not one of {WAIT_MODES}")
    xs, ws, n, tokens, dtype = _check(group, xs, ws)
    _check_shared(cfg, dtype, tokens, group.device)
    world = group.world_size
    tiles = cdiv(n, cfg.block_n)
    wsp = workspace or Workspace(group)
    if out is None:
        out = group.alloc((tokens, n), dtype) if group.backend == "emulated" else wsp.get("gemv_out", (tokens, n), dtype)
    elif out.shape != (tokens, n) or out.dtype != dtype:
        raise ValueError(f"out: expected shape {(tokens, n)} dtype {dtype}, got {out.shape} {out.dtype}")
    stage = wsp.get("gemv_stage", (world * cfg.split_k, tokens, n), torch.float32)
    ctr = wsp.get("gemv_ctr", (tiles,), torch.int64, fill=0)
    flags = wsp.get("gemv_flags", (1,), torch.int64, fill=0)
    group.barrier()
    group.run_ranks(lambda i, r: _launch_rank(group, r, xs[i], ws[i], cfg, world=world, rank=r, stage_t=stage.ptr_table,
                                              ctr_t=ctr.ptr_table, out_t=out.ptr_table, flag_t=flags.ptr_table,
                                              variant="fused", trace=trace))
    wait_flags(group, flags, tiles, mode=wait)
    return [out.local(r) for r in group.local_ranks]


def gemv_compute(group, xs, ws, *, config: GemvConfig | None = None, trace: TraceRecorder | None = None,
                 workspace: Workspace | None = None) -> list[torch.Tensor]:
    """The unfused compute kernel: each local rank's partial ``x_r @ w_r.T`` (``[tokens, N]``, inputs' dtype).

    Same kernel with a world of one (split-K partials reduced by the last-arriving program); its
    buffers come from ``workspace`` (the returned partials are overwritten by the next call with it).
    Each rank's own entry of a pointer table (``ptr_table[r:r+1]``) is its local one-entry table."""
    cfg = config or GemvConfig()
    cfg.validate()
    xs, ws, n, tokens, dtype = _check(group, xs, ws)
    _check_shared(cfg, dtype, tokens, group.device)
    tiles = cdiv(n, cfg.block_n)
    wsp = workspace or Workspace(group)
    o = wsp.get("gemv_c_out", (tokens, n), dtype)
    st = wsp.get("gemv_c_stage", (cfg.split_k, tokens, n), torch.float32)
    ct = wsp.get("gemv_c_ctr", (tiles,), torch.int64, fill=0)
    fl = wsp.get("gemv_c_flag", (1,), torch.int64, fill=0)
    def one(i, r):
        s = slice(r, r + 1)
        _launch_rank(group, r, xs[i], ws[i], cfg, world=1, rank=0, stage_t=st.ptr_table[s], ctr_t=ct.ptr_table[s],
                     out_t=o.ptr_table[s], flag_t=fl.ptr_table[s], variant="compute", trace=trace)

    group.run_ranks(one)
    return [o.local(r) for r in group.local_ranks]


def all_reduce_sum(group, partials: Sequence[torch.Tensor], *, collective: str = "auto",
                   out: PeerBuffer | None = None, workspace: Workspace | None = None) -> list[torch.Tensor]:
    """The baseline's AllReduce of ``[tokens, N]`` partials (one per local rank).

    ``copy``: direct two-phase with explicit copies (chunk ``c`` of the columns is owned by rank ``c``:
    every rank copies its chunk into the owner's staging rows, the owner sums them in fp32 and copies
    the sum into every rank's output); ``torch``: ``torch.distributed.all_reduce`` (symmetric backend);
    ``auto``: torch for symmetric, copy for emulated.
    """
    world = group.world_size
    if collective == "auto":
        collective = "torch" if group.backend == "symmetric" else "copy"
    if collective not in ("copy", "torch"):
        raise ValueError(f"collective: {collective!r} not one of ('auto', 'copy', 'torch')")
    tokens, n = partials[0].shape
    dtype = partials[0].dtype
    if collective == "torch":
        if group.backend != "symmetric":
            raise ValueError("collective: 'torch' needs the symmetric backend (a torch.distributed group)")
        import torch.distributed as dist

        y = partials[0].clone()
        dist.all_reduce(y, group=group.pg)
        return [y]
    wsp = workspace or Workspace(group)
    if out is None:
        out = wsp.get("ar_out", (tokens, n), dtype)
    stage = wsp.get("ar_stage", (world, tokens, n), dtype)
    bounds = [(c * n) // world for c in range(world + 1)]
    group.barrier()
    for i, r in enumerate(group.local_ranks):  # phase 1: push my chunk c to owner c
        for c in range(world):
            a, b = bounds[c], bounds[c + 1]
            stage.remote(c)[r, :, a:b].copy_(partials[i][:, a:b])
    group.barrier()
    for r in group.local_ranks:  # phase 2: owner reduces its chunk and pushes it to all
        a, b = bounds[r], bounds[r + 1]
        red = stage.local(r)[:, :, a:b].float().sum(0).to(dtype)
        for d in range(world):
            out.remote(d)[:, a:b].copy_(red)
    group.barrier()
    return [out.local(r) for r in group.local_ranks]


def gemv_all_reduce_baseline(group, xs, ws, *, config: GemvConfig | None = None, collective: str = "auto",
                             out: PeerBuffer | None = None, workspace: Workspace | None = None) -> list[torch.Tensor]:
    """Unfused baseline: :func:`gemv_compute`, then :func:`all_reduce_sum`."""
    parts = gemv_compute(group, xs, ws, config=config, workspace=workspace)
    return all_reduce_sum(group, parts, collective=collective, out=out, workspace=workspace)


def gemv_reference(xs: Sequence[torch.Tensor], ws: Sequence[torch.Tensor]) -> torch.Tensor:
    """float64 ``sum_r xs[r] @ ws[r].T`` over ALL ranks' inputs (the result every rank should hold)."""
    return sum(x.cpu().double() @ w.cpu().double().T for x, w in zip(xs, ws, strict=False))
