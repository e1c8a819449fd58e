"""Triton kernels of :mod:`simfuse.kernels`.

One kernel source serves every backend: remote buffers are reached through an int64 table of
peer base addresses (``tl.load(table + rank).to(tl.pointer_type(...))``), which holds CPU addresses
under the interpreter, device addresses of one GPU for the emulated backend, and mapped peer
addresses for the symmetric-memory backend.

Signalling: a producer program stores its tile, runs ``tl.debug_barrier()`` (all its threads' stores
issued) and then does one ``atomic_add(..., sem="release", scope="sys")`` on the destination's
flag.  A consumer waits with ``atomic_add(flag, 0, sem="acquire")`` (portable acquire load: Triton
3.6 has no ``tl.atomic_load``).  No kernel ever spins on a flag set by a later program of the same
launch, so the interpreter (which runs programs one after another) cannot deadlock.

Timers (``TIMER`` constexpr): 0 off; 1 ``%globaltimer``/``%smid`` through inline PTX (GPU only);
2 a *sequence counter*: ``atomic_add(counter, 1)`` returns a tick that orders program starts and
ends, which works under the interpreter (where inline asm raises).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _timer(counter, TIMER: tl.constexpr):
    if TIMER == 1:
        t = tl.inline_asm_elementwise(
            "mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1
        )
    else:
        t = tl.atomic_add(counter, 1).to(tl.int64)
    return t


@triton.jit
def _smid(TIMER: tl.constexpr):
    if TIMER == 1:
        s = tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=tl.int32, is_pure=True, pack=1)
    else:
        s = -1
    return s


@triton.jit
def _trace_begin(counter, TIMER: tl.constexpr):
    t0 = 0
    if TIMER != 0:
        t0 = _timer(counter, TIMER)
    return t0


@triton.jit
def _trace_end(trace_buf, counter, t0, pid, TIMER: tl.constexpr):
    if TIMER != 0:
        tl.debug_barrier()
        t1 = _timer(counter, TIMER)
        sm = _smid(TIMER)
        tl.store(trace_buf + pid * 3 + 0, t0)
        tl.store(trace_buf + pid * 3 + 1, t1)
        tl.store(trace_buf + pid * 3 + 2, sm.to(tl.int64))


@triton.jit
def marker_kernel(out, counter, slot, TIMER: tl.constexpr):
    """Writes the timer into ``out[slot]``: launched just before and after a traced kernel."""
    t = _timer(counter, TIMER)
    tl.store(out + slot, t)


@triton.jit(do_not_specialize=["expected"])
def wait_flags_kernel(flags, expected, RESET: tl.constexpr):
    """Spins (acquire) until ``flags[0] >= expected``, then subtracts ``expected`` (one program).

    Launch only after every producer has been launched (the emulated backend launches producers first,
    so under the interpreter the loop exits at once); in the symmetric backend producers are other
    processes' kernels running concurrently.
    """
    exp = expected.to(tl.int64)
    v = tl.atomic_add(flags, 0, sem="acquire", scope="sys")
    while v < exp:
        v = tl.atomic_add(flags, 0, sem="acquire", scope="sys")
    if RESET:
        tl.atomic_add(flags, -exp, sem="relaxed", scope="sys")


# ----------------------------------------------------------------------------------------------
# Embedding-bag pooling (+ All-to-All push)
# ----------------------------------------------------------------------------------------------
@triton.jit(do_not_specialize=["rank", "table_base", "bags_per_slice", "batch"])
def embedding_kernel(
    weight,  # [total_rows, D] rows of this rank's tables, concatenated
    indices,  # int64, table-major bags
    offsets,  # int64 [T*batch + 1]
    table_offsets,  # int64 [T + 1] first row of each table in ``weight``
    out_table,  # int64 [world] base addresses of each rank's output buffer (FUSED), or unused
    flag_table,  # int64 [world] addresses of each rank's flag (FUSED)
    local_out,  # [batch, T*D] local output (compute variant)
    rank,
    batch,
    bags_per_slice,
    table_base,  # tables of the ranks before this one: first column of its tables / D in destination rows
    out_row_stride,  # elements per destination row
    trace_buf,
    counter,
    D: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BAGS: tl.constexpr,
    UNROLL: tl.constexpr,
    MEAN: tl.constexpr,
    FUSED: tl.constexpr,
    TIMER: tl.constexpr,
    SUB: tl.constexpr = 16,
):
    pid_b = tl.program_id(0)
    dst = tl.program_id(1)
    t = tl.program_id(2)
    pid = (t * tl.num_programs(1) + dst) * tl.num_programs(0) + pid_b
    t0 = _trace_begin(counter, TIMER)

    # Bags in sub-blocks of SUB (<= 16) per step: with a [BAGS, BLOCK_D] tile of BAGS >= 32 bags and more than
    # one warp, Triton 3.6 fails in TritonGPURemoveLayoutConversions ("'tt.load' op failed to verify that mask
    # type matches ptr type", measured on the H200 2026-12-03: 32 bags at 2-16 warps, 64 at 4-16); 16 compiles at
    # every warp count.  The program still pools BAGS bags; the fused variant releases one flag add per sub-block.
    for sb in tl.static_range(BAGS // SUB):
        bag_local = pid_b * BAGS + sb * SUB + tl.arange(0, SUB)
        bmask = bag_local < bags_per_slice
        seg = t * batch + dst * bags_per_slice + bag_local
        start = tl.load(offsets + seg, mask=bmask, other=0)
        end = tl.load(offsets + seg + 1, mask=bmask, other=0)
        lens = end - start
        maxlen = tl.max(lens, axis=0)
        row0 = tl.load(table_offsets + t)
        cols = tl.arange(0, BLOCK_D)
        cmask = cols < D
        acc = tl.zeros([SUB, BLOCK_D], dtype=tl.float32)
        for j0 in range(0, maxlen, UNROLL):
            for u in tl.static_range(UNROLL):
                m = (j0 + u) < lens
                idx = tl.load(indices + start + j0 + u, mask=m, other=0)
                rows = tl.load(
                    weight + (row0 + idx)[:, None] * D + cols[None, :],
                    mask=m[:, None] & cmask[None, :],
                    other=0.0,
                    eviction_policy="evict_first",
                )
                acc += rows.to(tl.float32)
        if MEAN:
            acc = acc / tl.maximum(lens, 1).to(tl.float32)[:, None]
        smask = bmask[:, None] & cmask[None, :]
        if FUSED:
            base = tl.multiple_of(tl.load(out_table + dst).to(tl.pointer_type(weight.dtype.element_ty)), 16)
            ptrs = base + bag_local[:, None].to(tl.int64) * out_row_stride + ((table_base + t) * D + cols)[None, :]
            tl.store(ptrs, acc.to(weight.dtype.element_ty), mask=smask)
            tl.debug_barrier()
            flag = tl.load(flag_table + dst).to(tl.pointer_type(tl.int64))
            nbags = tl.sum(bmask.to(tl.int64), axis=0)
            tl.atomic_add(flag, nbags, sem="release", scope="sys")
        else:
            bag = dst * bags_per_slice + bag_local
            ptrs = local_out + bag[:, None].to(tl.int64) * out_row_stride + (t * D + cols)[None, :]
            tl.store(ptrs, acc.to(weight.dtype.element_ty), mask=smask)
    _trace_end(trace_buf, counter, t0, pid, TIMER)


# ----------------------------------------------------------------------------------------------
# GEMV (+ direct two-phase AllReduce)
# ----------------------------------------------------------------------------------------------
@triton.jit(do_not_specialize=["rank", "world", "tokens"])
def gemv_kernel(
    x,  # [tokens, K]
    w,  # [N, K]
    staging_table,  # int64 [world] -> fp32 [world * SPLIT_K, tokens, N] partial slots at each rank
    counter_table,  # int64 [world] -> int64 [num_tiles] arrival counters at each rank
    out_table,  # int64 [world] -> out [tokens, N] at each rank
    flag_table,  # int64 [world] -> int64 done flag at each rank
    rank,
    world,
    tokens,
    N,
    K,
    trace_buf,
    counter,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SPLIT_K: tl.constexpr,
    T_PAD: tl.constexpr,
    UPCAST: tl.constexpr,
    IEEE: tl.constexpr,
    TIMER: tl.constexpr,
    VEC: tl.constexpr = False,
    GPU_SCOPE: tl.constexpr = False,
):
    """Program (tile, ks) computes the partial y[:, tile] over its K range, pushes it to the slot
    (rank, ks) of the tile's owner (``tile % world``), and bumps the owner's arrival counter
    (acq_rel).  The program that arrives last (counter == world*SPLIT_K - 1) sums every slot in a
    fixed order (deterministic), resets the counter, stores the reduced tile into every rank's output
    and releases every rank's done flag.  No program waits for another one."""
    tile = tl.program_id(0)
    ks = tl.program_id(1)
    pid = tile * SPLIT_K + ks
    t0 = _trace_begin(counter, TIMER)
    ty = w.dtype.element_ty

    rows_t = tl.arange(0, T_PAD)
    tmask = rows_t < tokens
    n = tile * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = n < N
    k_per = tl.cdiv(tl.cdiv(K, SPLIT_K), BLOCK_K) * BLOCK_K
    k_begin = ks * k_per
    if VEC:
        # one token (T_PAD == 1): no tl.dot (whose M >= 16 would pad the token 16x); an fp32
        # [BLOCK_N, BLOCK_K] accumulator of products, reduced over K once after the loop
        acc2 = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
        for k0 in range(k_begin, k_begin + k_per, BLOCK_K):
            kk = k0 + tl.arange(0, BLOCK_K)
            kmask = kk < K
            xv = tl.load(x + kk, mask=kmask, other=0.0).to(tl.float32)
            wt = tl.load(
                w + n[:, None].to(tl.int64) * K + kk[None, :],
                mask=nmask[:, None] & kmask[None, :],
                other=0.0,
                eviction_policy="evict_first",
            )
            acc2 += wt.to(tl.float32) * xv[None, :]
        acc = tl.reshape(tl.sum(acc2, axis=1), [T_PAD, BLOCK_N])
    else:
        acc = tl.zeros([T_PAD, BLOCK_N], dtype=tl.float32)
        for k0 in range(k_begin, k_begin + k_per, BLOCK_K):
            kk = k0 + tl.arange(0, BLOCK_K)
            kmask = kk < K
            xt = tl.load(x + rows_t[:, None] * K + kk[None, :], mask=tmask[:, None] & kmask[None, :], other=0.0)
            wt = tl.load(
                w + n[:, None].to(tl.int64) * K + kk[None, :],
                mask=nmask[:, None] & kmask[None, :],
                other=0.0,
                eviction_policy="evict_first",
            )
            if UPCAST:
                xt = xt.to(tl.float32)
                wt = wt.to(tl.float32)
            if IEEE:
                acc += tl.dot(xt, tl.trans(wt), input_precision="ieee")
            else:
                acc += tl.dot(xt, tl.trans(wt))

    owner = tile % world
    omask = tmask[:, None] & nmask[None, :]
    stage = tl.multiple_of(tl.load(staging_table + owner).to(tl.pointer_type(tl.float32)), 16)
    slot = rank * SPLIT_K + ks
    tl.store(stage + (slot * tokens + rows_t[:, None]) * N + n[None, :], acc, mask=omask)
    tl.debug_barrier()
    ctr = tl.load(counter_table + owner).to(tl.pointer_type(tl.int64))
    if GPU_SCOPE:  # every rank on this GPU (emulated backend): device-scope ordering suffices
        old = tl.atomic_add(ctr + tile, 1, sem="acq_rel", scope="gpu")
    else:
        old = tl.atomic_add(ctr + tile, 1, sem="acq_rel", scope="sys")
    tl.debug_barrier()
    if old == world * SPLIT_K - 1:
        tl.atomic_xchg(ctr + tile, 0, sem="relaxed", scope="sys")
        red = tl.zeros([T_PAD, BLOCK_N], dtype=tl.float32)
        for s in range(0, world * SPLIT_K):
            red += tl.load(
                stage + (s * tokens + rows_t[:, None]) * N + n[None, :], mask=omask, other=0.0, volatile=True
            )
        red_t = red.to(ty)
        for d in range(0, world):
            ob = tl.multiple_of(tl.load(out_table + d).to(tl.pointer_type(ty)), 16)
            tl.store(ob + rows_t[:, None] * N + n[None, :], red_t, mask=omask)
        tl.debug_barrier()
        for d in range(0, world):
            fl = tl.load(flag_table + d).to(tl.pointer_type(tl.int64))
            if GPU_SCOPE:
                tl.atomic_add(fl, 1, sem="release", scope="gpu")
            else:
                tl.atomic_add(fl, 1, sem="release", scope="sys")
    _trace_end(trace_buf, counter, t0, pid, TIMER)


# ----------------------------------------------------------------------------------------------
# GEMM (+ All-to-All of output rows)
# ----------------------------------------------------------------------------------------------
@triton.jit(do_not_specialize=["world"])
def gemm_kernel(
    a,  # [M, K]
    b,  # [K, N]
    dest_rank,  # int32 [M] rank that owns output row m (FUSED)
    dest_row,  # int32 [M] row of m in that rank's receive buffer (FUSED)
    out_table,  # int64 [world] -> receive buffer [rows_d, N] at each rank (FUSED)
    flag_table,  # int64 [world] -> int64 flag at each rank (FUSED)
    local_out,  # [M, N] (compute variant)
    world,
    M,
    N,
    K,
    trace_buf,
    counter,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    UPCAST: tl.constexpr,
    IEEE: tl.constexpr,
    FUSED: tl.constexpr,
    TIMER: tl.constexpr,
    EVEN: tl.constexpr = False,
    GPU_SCOPE: tl.constexpr = False,
):
    """C tile = A tile @ B; each row of the tile is stored straight into its owner's receive buffer;
    then the program adds, for each destination rank, (rows it delivered there) to that rank's flag
    (release).  A rank expects ``rows_received * cdiv(N, BLOCK_N)``."""
    pid = tl.program_id(0)
    t0 = _trace_begin(counter, TIMER)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    group = GROUP_M * num_n
    gid = pid // group
    first_m = gid * GROUP_M
    gsize = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % gsize
    pid_n = (pid % group) // gsize

    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    mmask = rm < M
    nmask = rn < N
    a_ptrs = a + rm[:, None].to(tl.int64) * K + rk[None, :]
    b_ptrs = b + rk[:, None].to(tl.int64) * N + rn[None, :]
    if EVEN:
        # M, N, K multiples of the block sizes (checked by the launcher): mask-free main loop
        rme = tl.max_contiguous(tl.multiple_of(pid_m * BLOCK_M + tl.arange(0, BLOCK_M), BLOCK_M), BLOCK_M)
        rne = tl.max_contiguous(tl.multiple_of(pid_n * BLOCK_N + tl.arange(0, BLOCK_N), BLOCK_N), BLOCK_N)
        a_ptrs = a + rme[:, None].to(tl.int64) * K + rk[None, :]
        b_ptrs = b + rk[:, None].to(tl.int64) * N + rne[None, :]
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        if EVEN:
            ka = tl.load(a_ptrs)
            kb = tl.load(b_ptrs)
        else:
            ka = tl.load(a_ptrs, mask=mmask[:, None] & ((k0 + rk)[None, :] < K), other=0.0)
            kb = tl.load(b_ptrs, mask=((k0 + rk)[:, None] < K) & nmask[None, :], other=0.0)
        if UPCAST:
            ka = ka.to(tl.float32)
            kb = kb.to(tl.float32)
        if IEEE:
            acc += tl.dot(ka, kb, input_precision="ieee")
        else:
            acc += tl.dot(ka, kb)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K * N
    ty = a.dtype.element_ty
    c = acc.to(ty)
    smask = mmask[:, None] & nmask[None, :]
    if FUSED:
        dr = tl.load(dest_rank + rm, mask=mmask, other=0)
        drow = tl.load(dest_row + rm, mask=mmask, other=0)
        # peer buffers are 16-byte aligned (checked when allocated): say so, or stores are not vectorized
        bases = tl.multiple_of(tl.load(out_table + dr, mask=mmask, other=0).to(tl.pointer_type(ty)), [16])
        tl.store(bases[:, None] + drow[:, None].to(tl.int64) * N + rn[None, :], c, mask=smask)
        tl.debug_barrier()
        for d in range(0, world):
            cnt = tl.sum(((dr == d) & mmask).to(tl.int64), axis=0)
            if cnt > 0:
                fl = tl.load(flag_table + d).to(tl.pointer_type(tl.int64))
                if GPU_SCOPE:  # every rank on this GPU (emulated backend)
                    tl.atomic_add(fl, cnt, sem="release", scope="gpu")
                else:
                    tl.atomic_add(fl, cnt, sem="release", scope="sys")
    else:
        tl.store(local_out + rm[:, None].to(tl.int64) * N + rn[None, :], c, mask=smask)
    _trace_end(trace_buf, counter, t0, pid, TIMER)
