"""Fused operators: embedding-bag + All-to-All, GEMM + All-to-All (MoE), GEMV + AllReduce (decode), and for
tensor-parallel training with sequence parallelism GEMM + ReduceScatter and AllGather + GEMM."""

from __future__ import annotations

import numpy as np
import simpy

from ..collectives import Layout
from ..costs import KernelWork
from ..engine.compute import effective_slots
from ..errors import SpecError
from .base import FusedOp, GroupOp, MemberOp, PushEngine, PushOp, dtype_bytes, fused_work, start_puts
from .base import largest_divisor_at_most as _largest_divisor_at_most
from .push_kernel import PushKernel, RelayWait, relay_channel  # noqa: F401  (re-exported)
from .twrw import MAX_STAGE2_PUTS, MAX_TWRW_PUSH_WAVES, TwrwEmbeddingPush  # noqa: F401  (re-exported)


def _pos_int(params: dict, key: str, source: str, default=None) -> int:
    val = params.get(key, default)
    if val is None:
        raise SpecError(source, key, "missing required parameter")
    try:
        ival = int(val)
    except (TypeError, ValueError):
        raise SpecError(source, key, f"expected an integer, got {val!r}") from None
    if ival != float(val) or ival < 1:
        raise SpecError(source, key, f"must be a positive integer, got {val!r}")
    return ival


class EmbeddingAllToAll(PushOp):
    """Embedding-bag pooling + All-to-All (DLRM, model-parallel tables, data-parallel consumers).

    Each rank holds ``tables_per_gpu`` tables (``rows`` x ``dim``) and pools ``global_batch`` bags of
    ``pooling`` lookups for each; rank ``d`` owns batch slice ``d`` (``global_batch / ranks`` bags) and receives
    its pooled rows from every rank.  A workgroup pools ``bags_per_wg`` bags of one table.  ``dtype``: the
    tables' element type (what pooling reads); ``comm_dtype``: the pooled rows' type on the wire (None: ``dtype``;
    HugeCTR's mixed precision pools fp32 rows into fp16 outputs, docs/hugectr_baseline.md).
    """

    name = "embedding_all_to_all"
    collective = "all_to_all"
    defaults = {"tables_per_gpu": 8, "rows": 1_000_000, "dim": 128, "pooling": 32, "global_batch": 16384,
                "dtype": "fp32", "bags_per_wg": 4, "index_bytes": 8, "comm_dtype": None}

    def __init__(self, params: dict, layout: Layout, source: str = "<params>"):
        super().__init__(params, layout, source)
        p = self.params
        self.T = _pos_int(p, "tables_per_gpu", source)
        self.rows = _pos_int(p, "rows", source)
        self.D = _pos_int(p, "dim", source)
        self.P = float(p["pooling"])
        if not self.P > 0:
            raise SpecError(source, "pooling", f"must be positive, got {p['pooling']!r}")
        self.B = _pos_int(p, "global_batch", source)
        self.eb = dtype_bytes(str(p["dtype"]), source)
        self.ceb = self.eb if p["comm_dtype"] is None else dtype_bytes(str(p["comm_dtype"]), source, "comm_dtype")
        self.idx_b = _pos_int(p, "index_bytes", source)
        n = layout.n
        if self.B % n:
            raise SpecError(source, "global_batch", f"{self.B} is not divisible by the {n} ranks")
        self.local_b = self.B // n
        self.bags = _largest_divisor_at_most(self.local_b, _pos_int(p, "bags_per_wg", source))
        self.blocks_per_table = self.B // self.bags
        self.W = self.T * self.blocks_per_table

    def work(self, variant: str) -> KernelWork:
        bags, P, D, eb = self.bags, self.P, self.D, self.eb
        # the pooled rows are written in the All-to-All payload's dtype (HugeCTR: fp16 outputs of fp32 tables)
        bytes_wg = bags * P * (D * eb + self.idx_b) + bags * D * self.ceb
        return KernelWork("embedding_bag", self.W, bags * P * D, bytes_wg, "fp32" if eb == 4 else "fp16",
                          variant, (("bags", self.B), ("dim", D), ("pooling", P), ("tables", self.T), ("rows", self.rows)))

    def wg_destinations(self, rank: int):
        i = np.arange(self.W, dtype=np.int64)
        block = i % self.blocks_per_table
        dst = (block * self.bags) // self.local_b
        return dst, np.full(self.W, float(self.bags * self.D * self.ceb))

    def destination_summary(self, rank: int):
        """Closed form: every rank owns ``k = local_b / bags`` blocks of every table, ``T k`` workgroups."""
        n = self.layout.n
        return (np.arange(n, dtype=np.int64), np.full(n, self.T * (self.local_b // self.bags), dtype=np.int64),
                np.full(n, float(self.bags * self.D * self.ceb)))

    def output_by_destination(self, rank: int, fabric, tile_order: str):
        """The runs' totals (:meth:`wg_runs`: no per-workgroup arrays)."""
        dst, cnt, per = self.wg_runs(rank, fabric, tile_order)
        return dst, cnt * per

    def wg_runs(self, rank: int, fabric, tile_order: str):
        """Closed form of :func:`~simfuse.fused.base.wg_runs` (no per-workgroup arrays: ``W`` reaches tens of
        millions at 100k GPUs): destination ``d`` owns ``k = local_b / bags`` consecutive blocks of every table.
        ``natural``: table-major index order, runs ``(d, k)`` for every table and destination; ``remote_first``:
        :meth:`FusedOp.order`'s destination order (off-node by node offset, then local peers, then this rank),
        each destination's ``T x k`` workgroups in one run (index order inside it)."""
        n = self.layout.n
        k = self.local_b // self.bags
        per = float(self.bags * self.D * self.ceb)
        if tile_order == "natural":
            dst = np.tile(np.arange(n, dtype=np.int64), self.T)
            return dst, np.full(len(dst), k, dtype=np.int64), np.full(len(dst), per)
        g, N = self.layout.gpus_per_node, self.layout.nodes
        d = np.arange(n, dtype=np.int64)
        node_shift = (d // g - rank // g) % N
        local_shift = (d % g - rank % g) % g
        prio = np.where(node_shift != 0, 0, np.where(local_shift != 0, 1, 2))
        dst = d[np.lexsort((d, local_shift, node_shift, prio))]
        return dst, np.full(n, self.T * k, dtype=np.int64), np.full(n, per)

    def collective_size_bytes(self) -> float:
        return float(self.B * self.T * self.D * self.ceb)


class GemmAllToAll(PushOp):
    """MoE expert GEMM + All-to-All: expert outputs go back to the ranks that own the tokens.

    Every rank owns ``tokens`` tokens; with ``top_k`` routing spread uniformly over all experts, each rank's
    ``experts_per_gpu`` experts process ``tokens * top_k`` rows, ``tokens * top_k / ranks`` from every owner.
    The GEMM is the expert's down projection ``[rows, ffn] x [ffn, hidden]``; tiles are ``tile_m`` x
    ``tile_n`` (``tile_m`` shrinks to the rows per (expert, owner) so a tile has one owner).  HBM bytes per tile
    assume full L2 reuse (unique bytes / tiles); calibration replaces this.
    """

    name = "gemm_all_to_all"
    collective = "all_to_all"
    defaults = {"tokens": 4096, "hidden": 7168, "ffn": 2048, "experts_per_gpu": 4, "top_k": 2, "dtype": "bf16",
                "tile_m": 128, "tile_n": 128}

    def __init__(self, params: dict, layout: Layout, source: str = "<params>"):
        super().__init__(params, layout, source)
        p = self.params
        self.T = _pos_int(p, "tokens", source)
        self.H = _pos_int(p, "hidden", source)
        self.F = _pos_int(p, "ffn", source)
        self.E = _pos_int(p, "experts_per_gpu", source)
        self.k = _pos_int(p, "top_k", source)
        self.eb = dtype_bytes(str(p["dtype"]), source)
        self.dtype = str(p["dtype"])
        n = layout.n
        if self.k > self.E * n:  # top_k distinct experts per token
            raise SpecError(source, "top_k", f"{self.k} exceeds the {self.E * n} experts of {n} ranks "
                                             f"(experts_per_gpu {self.E} per rank)")
        self.M = self.T * self.k
        if self.M % (self.E * n):
            raise SpecError(source, "tokens", f"tokens*top_k ({self.M}) must divide evenly over "
                                              f"experts_per_gpu*ranks ({self.E * n})")
        self.rows_eo = self.M // (self.E * n)  # rows per (expert, owner)
        self.BM = _largest_divisor_at_most(self.rows_eo, _pos_int(p, "tile_m", source))
        self.BN = _largest_divisor_at_most(self.H, _pos_int(p, "tile_n", source))
        self.row_blocks = self.M // self.BM
        self.col_blocks = self.H // self.BN
        self.W = self.row_blocks * self.col_blocks

    def work(self, variant: str) -> KernelWork:
        unique = (self.M * self.F + self.E * self.F * self.H + self.M * self.H) * self.eb
        traffic = (self.BM * self.F + self.F * self.BN + self.BM * self.BN) * self.eb
        return KernelWork("gemm", self.W, 2.0 * self.BM * self.BN * self.F, unique / self.W, self.dtype, variant,
                          (("m", self.M), ("n", self.H), ("k", self.F), ("experts", self.E)),
                          traffic_bytes_per_wg=traffic, impl="simfuse")

    def wg_destinations(self, rank: int):
        i = np.arange(self.W, dtype=np.int64)
        rb = i // self.col_blocks
        rows_per_expert = self.M // self.E
        dst = ((rb * self.BM) % rows_per_expert) // self.rows_eo
        return dst, np.full(self.W, float(self.BM * self.BN * self.eb))

    def destination_summary(self, rank: int):
        """Closed form: every owner has ``rows_eo / BM`` row blocks of each of the ``E`` experts, each
        ``col_blocks`` tiles wide."""
        n = self.layout.n
        return (np.arange(n, dtype=np.int64),
                np.full(n, self.E * (self.rows_eo // self.BM) * self.col_blocks, dtype=np.int64),
                np.full(n, float(self.BM * self.BN * self.eb)))

    def collective_size_bytes(self) -> float:
        return float(self.M * self.H * self.eb)


class GemvAllReduce(GroupOp):
    """Tensor-parallel GEMV + AllReduce (decode): ``y[tokens, N] = sum_r W_r[N, K/n] x_r[tokens, K/n]``.

    Fused variant: direct two-phase.  Output rows are split into ``n`` chunks, chunk ``c`` owned by rank ``c``.
    Each workgroup computes ``rows_per_wg`` rows of the partial result and pushes them to the chunk's owner
    (one flag per peer per workgroup); when all ``n`` partials of a slice are there the owner reduces it
    (``n * slice`` bytes at its workgroup's HBM share) and pushes the reduced slice to every peer.
    """

    name = "gemv_all_reduce"
    collective = "all_reduce"
    defaults = {"n": 8192, "k": 8192, "tokens": 1, "dtype": "bf16", "rows_per_wg": 32}

    def __init__(self, params: dict, layout: Layout, source: str = "<params>"):
        super().__init__(params, layout, source)
        p = self.params
        self.N = _pos_int(p, "n", source)
        self.K = _pos_int(p, "k", source)
        self.M = _pos_int(p, "tokens", source)
        if self.M > 64:
            raise SpecError(source, "tokens", f"GEMV expects few tokens (1..64), got {self.M}")
        self.eb = dtype_bytes(str(p["dtype"]), source)
        self.dtype = str(p["dtype"])
        n = layout.n
        if self.N % n:
            raise SpecError(source, "n", f"{self.N} output rows do not split over {n} ranks")
        if self.K % n:
            raise SpecError(source, "k", f"{self.K} does not split over {n} ranks")
        self.chunk = self.N // n
        self.rows = _largest_divisor_at_most(self.chunk, _pos_int(p, "rows_per_wg", source))
        self.k_local = self.K // n
        self.W = self.N // self.rows
        self.wgs_per_chunk = self.chunk // self.rows

    def work(self, variant: str) -> KernelWork:
        rows, kl, eb, M = self.rows, self.k_local, self.eb, self.M
        return KernelWork("gemv", self.W, 2.0 * M * rows * kl, (rows * kl + M * kl + M * rows) * eb, self.dtype,
                          variant, (("n", self.N), ("k", self.k_local), ("tokens", M)))

    def wg_destinations(self, rank: int):
        i = np.arange(self.W, dtype=np.int64)
        return i // self.wgs_per_chunk, np.full(self.W, float(self.M * self.rows * self.eb))

    def destination_summary(self, rank: int):
        """Closed form: ``wgs_per_chunk`` workgroups to each chunk's owner."""
        n = self.layout.n
        return (np.arange(n, dtype=np.int64), np.full(n, self.wgs_per_chunk, dtype=np.int64),
                np.full(n, float(self.M * self.rows * self.eb)))

    def collective_size_bytes(self) -> float:
        return float(self.M * self.N * self.eb)

    def fused_process(self, sim, fabric, net, cost, knobs, topology, ranks, occupancy_loss):
        env = sim.env
        n = self.layout.n
        gi = topology.gpu_initiated
        symmetric = fabric.symmetric
        engines = {}
        phase2: list[simpy.Event] = []
        # per owner: contributions counted per slice position (0..slices_per_chunk-1)
        state: dict[int, dict] = {}

        def slice_pos_map(engine):
            # position of each slice inside its chunk (in execution order)
            sl_dst = engine.slice_dst
            pos = np.zeros(len(sl_dst), dtype=np.int64)
            for c in np.unique(sl_dst):
                ids = np.flatnonzero(sl_dst == c)
                pos[ids] = np.arange(len(ids))
            return pos

        def reduce_and_push(owner: int, j: int, slice_bytes: float):
            reduce_s = cost.reduction_time_s(n * slice_bytes)
            yield env.timeout(reduce_s + gi.store_issue_s)
            peers = np.array([d for d in range(n) if d != owner], dtype=np.int64)
            if len(peers):
                puts = start_puts(net, fabric, gi, owner, peers, np.full(len(peers), slice_bytes),
                                  f"{self.name}:allgather")
                yield simpy.AllOf(env, [ev for _grp, ev in puts])

        def on_arrival(dsts, slices, t, src):
            eng = engines[src]
            posmap = eng.slice_pos
            for d, s in zip(np.asarray(dsts).tolist(), np.asarray(slices).tolist(), strict=False):
                j = int(posmap[s])
                sb = float(eng.slice_bytes[s])
                if symmetric:
                    # rank 0's push to chunk owner d stands for the push every rank makes at the same position;
                    # owner 0 therefore receives one contribution per position: count them all as owner 0's.
                    owner = 0
                else:
                    owner = int(d)
                st = state.setdefault(owner, {})
                cnt = st.get(j, 0) + 1
                st[j] = cnt
                if cnt == n:
                    phase2.append(env.process(reduce_and_push(owner, j, sb)))

        for r in ranks:
            eng = PushEngine(sim, fabric, net, self, cost, knobs, topology, r, on_arrival=on_arrival)
            eng.slice_pos = slice_pos_map(eng)
            engines[r] = eng
        procs = [env.process(e.process(fused_work(self, knobs, fabric, e.rank), occupancy_loss))
                 for e in engines.values()]
        yield simpy.AllOf(env, procs)
        kernel_end = max(p.value[0] for p in procs)
        # every push has landed, so every reduction has started: wait until each reduced slice was pushed
        if phase2:
            yield simpy.AllOf(env, phase2)
        # slices per chunk x the owners simulated (owner 0 under symmetry, every rank in full mode)
        need = len(engines[ranks[0]].slice_pos) // n * len(ranks)
        if sum(len(v) for v in state.values()) != need:
            raise RuntimeError("gemv_all_reduce: not every slice was reduced (internal error)")
        end = env.now
        sim.recorder.add("fused", self.name, "fused_ops", 0, 0.0, end)
        return kernel_end, end


def _tp_size(params: dict, layout: Layout, source: str) -> int:
    """``tp``: the tensor-parallel group size (consecutive blocks of ``tp`` ranks inside a node); default the
    whole layout (one group: ``simfuse op``)."""
    tp = _pos_int(params, "tp", source, layout.n)
    if tp != layout.n and layout.gpus_per_node % tp:
        raise SpecError(source, "tp", f"tp {tp} must divide the {layout.gpus_per_node} GPUs per node (node-local "
                                      f"groups) or equal all {layout.n} ranks")
    return tp


class GemmReduceScatter(GroupOp):
    """Row-parallel GEMM + ReduceScatter (Megatron sequence parallelism):
    ``y[m, n] = sum_r x_r[m, k/tp] W_r[k/tp, n]``, rows of ``y`` split in ``tp`` chunks, chunk ``c`` owned by TP
    rank ``c`` of the group.

    Fused variant (phase one of :class:`GemvAllReduce`'s two-phase scheme): each tile of ``tile_m`` x ``tile_n``
    outputs is pushed, as soon as it finishes, to the owner of its row chunk (local tiles stay); when all
    ``tp`` partials of a slice position are at the owner it reduces them (``tp * slice`` bytes at one
    workgroup's HBM share, as in GemvAllReduce; the reduction's SM time is not charged to the GEMM).  The node
    is done when every owner has reduced every slice.  Baseline: the GEMM, then a bulk reduce-scatter of the
    ``m x n`` partial (nccl-tests size: the input buffer)."""

    name = "gemm_reduce_scatter"
    collective = "reduce_scatter"
    defaults = {"m": 8192, "n": 8192, "k": 8192, "dtype": "bf16", "tile_m": 128, "tile_n": 128}

    def __init__(self, params: dict, layout: Layout, source: str = "<params>"):
        super().__init__(params, layout, source)
        p = self.params
        _tp_gemm_shape(self, p, layout, source)
        if self.K % self.tp:
            raise SpecError(source, "k", f"{self.K} does not split over tp {self.tp}")
        self.chunk = self.M // self.tp
        self.k_local = self.K // self.tp
        self.BM = _largest_divisor_at_most(self.chunk, _pos_int(p, "tile_m", source))  # a tile has one owner
        self.BN = _largest_divisor_at_most(self.N, _pos_int(p, "tile_n", source))
        self.col_blocks = self.N // self.BN
        self.W = (self.M // self.BM) * self.col_blocks

    def work(self, variant: str) -> KernelWork:
        M, N, K, eb = self.M, self.N, self.k_local, self.eb
        return KernelWork("gemm", self.W, 2.0 * self.BM * self.BN * K, (M * K + K * N + M * N) * eb / self.W,
                          self.dtype, variant, (("m", M), ("n", N), ("k", K)),
                          traffic_bytes_per_wg=(self.BM * K + K * self.BN + self.BM * self.BN) * eb, impl="simfuse")

    def wg_destinations(self, rank: int):
        i = np.arange(self.W, dtype=np.int64)
        base = (rank // self.tp) * self.tp
        return base + (i // self.col_blocks) * self.BM // self.chunk, np.full(self.W, float(self.BM * self.BN
                                                                                            * self.eb))

    def destination_summary(self, rank: int):
        """Closed form: ``chunk / BM`` row blocks of ``col_blocks`` tiles to each rank of the TP group."""
        tp = self.tp
        return (np.arange((rank // tp) * tp, (rank // tp + 1) * tp, dtype=np.int64),
                np.full(tp, (self.chunk // self.BM) * self.col_blocks, dtype=np.int64),
                np.full(tp, float(self.BM * self.BN * self.eb)))

    def collective_size_bytes(self) -> float:
        return float(self.M * self.N * self.eb)

    def fused_process(self, sim, fabric, net, cost, knobs, topology, ranks, occupancy_loss):
        env = sim.env
        tp = self.tp
        gi = topology.gpu_initiated
        engines: dict[int, PushEngine] = {}
        n_pos = -(-self.W // tp)  # upper bound on slices per chunk
        arrived = np.zeros((1 if fabric.symmetric else self.layout.n, n_pos), dtype=np.int64)  # partials arrived per (owner, slice position)
        # the reductions are waits on the owner: only the last one's end matters for the node
        last = {"end": 0.0}

        def on_arrival(dsts, slices, t, src):
            eng = engines[src]
            sl = np.asarray(slices, dtype=np.int64)
            # symmetric: rank 0's push at a position stands for every rank's push at that position, all of them
            # addressed (by relabelling) to owner 0
            own = np.zeros(len(sl), dtype=np.int64) if fabric.symmetric else np.asarray(dsts, dtype=np.int64)
            pos = eng.slice_pos[sl]
            np.add.at(arrived, (own, pos), 1)
            full = arrived[own, pos] == tp
            if full.any():
                reduce_s = cost.reduction_time_s(tp * float(eng.slice_bytes[sl[full]].max())) + gi.store_issue_s
                last["end"] = max(last["end"], sim.env.now + reduce_s)

        for r in ranks:
            eng = PushEngine(sim, fabric, net, self, cost, knobs, topology, r, on_arrival=on_arrival)
            pos = np.zeros(len(eng.slice_dst), dtype=np.int64)
            for c in np.unique(eng.slice_dst):
                ids = np.flatnonzero(eng.slice_dst == c)
                pos[ids] = np.arange(len(ids))
            eng.slice_pos = pos
            engines[r] = eng
        procs = [env.process(e.process(fused_work(self, knobs, fabric, e.rank), occupancy_loss))
                 for e in engines.values()]
        yield simpy.AllOf(env, procs)
        kernel_end = max(p.value[0] for p in procs)
        if last["end"] > env.now:
            yield env.timeout(last["end"] - env.now)
        per_chunk = len(engines[ranks[0]].slice_pos) // tp
        owned = arrived[[0] if fabric.symmetric else list(ranks)]
        if not (owned[:, :per_chunk] == tp).all() or owned[:, per_chunk:].any():
            raise RuntimeError("gemm_reduce_scatter: not every slice was reduced (internal error)")
        sim.recorder.add("fused", self.name, "fused_ops", 0, 0.0, env.now)
        return kernel_end, env.now


class AllGatherGemm(MemberOp):
    """AllGather + column-parallel GEMM (Megatron sequence parallelism): ``y[m, n/tp] = x[m, k] W_r[k, n/tp]``
    where the rows of ``x`` are sharded over the ``tp`` ranks of the group (``m / tp`` rows each).

    Fused variant, consumer side (a simple model): at the start every rank pushes its shard to its ``tp - 1``
    peers (direct NVLink stores: store issue, flag latency); one GEMM kernel runs its tiles local shard
    first, then the shards of peers ``r + 1``, ``r + 2`` ... (the order the shards arrive in by symmetry); its
    waves are those of :func:`~simfuse.engine.run_kernel` (same slots and workgroup times) and a wave starts
    once the shards all its tiles read have arrived (wave granularity: a tile does not start early inside its
    wave).  Baseline: a bulk all-gather (nccl-tests size: the output
    buffer ``m x k``), then the GEMM (``simfuse op`` runs the GEMM first; the sum is the same)."""

    name = "all_gather_gemm"
    collective = "all_gather"
    defaults = {"m": 8192, "n": 8192, "k": 8192, "dtype": "bf16", "tile_m": 128, "tile_n": 128}

    def __init__(self, params: dict, layout: Layout, source: str = "<params>"):
        super().__init__(params, layout, source)
        p = self.params
        _tp_gemm_shape(self, p, layout, source)
        if self.N % self.tp:
            raise SpecError(source, "n", f"{self.N} output columns do not split over tp {self.tp}")
        self.shard_rows = self.M // self.tp
        self.n_local = self.N // self.tp
        self.tile = _pos_int(p, "tile_m", source)
        if _pos_int(p, "tile_n", source) != self.tile:
            raise SpecError(source, "tile_n", "all_gather_gemm uses square tiles: tile_n must equal tile_m")

    def _gemm(self, m: int, variant: str) -> KernelWork:
        """``[m, K] x [K, n_local]`` in ``tile`` x ``tile`` output tiles; HBM bytes assume full L2 reuse (the
        same definition as :func:`simfuse.workloads.dense.gemm_work`, which sits above this layer)."""
        import math

        eb = self.eb
        bm, bn = min(self.tile, m), min(self.tile, self.n_local)
        tiles = math.ceil(m / bm) * math.ceil(self.n_local / bn)
        unique = (m * self.K + self.K * self.n_local + m * self.n_local) * eb
        return KernelWork("gemm", tiles, 2.0 * bm * bn * self.K, unique / tiles, self.dtype, variant,
                          (("m", m), ("n", self.n_local), ("k", self.K)),
                          traffic_bytes_per_wg=(bm * self.K + self.K * bn + bm * bn) * eb, impl="simfuse")

    def work(self, variant: str) -> KernelWork:
        return self._gemm(self.M, variant)

    def collective_size_bytes(self) -> float:
        return float(self.M * self.K * self.eb)

    def shard_bytes(self) -> float:
        return float(self.shard_rows * self.K * self.eb)

    def destination_summary(self, rank: int):
        """The local shard, once to each other rank of the TP group (no per-workgroup pushes)."""
        tp = self.tp
        peers = (rank // tp) * tp + (rank % tp + np.arange(1, tp, dtype=np.int64)) % tp
        return peers, np.ones(tp - 1, dtype=np.int64), np.full(tp - 1, self.shard_bytes())

    def member_process(self, ctx, inst, entity: int, rank: int, knobs):
        """Push the local shard to the peers; run the GEMM's waves, each once the shards its tiles read have
        arrived.  Returns the kernel end (s)."""
        env = ctx.sim.env
        tp = self.tp
        base, pos = (rank // tp) * tp, rank % tp
        gi = ctx.topology.gpu_initiated
        occ = knobs.effective_occupancy_loss(ctx.topology)
        arrivals = inst.shared("ag_arrivals")  # (src, dst) -> event: shard landed

        def arrival(src: int, dst: int):
            ev = arrivals.get((src, dst))
            if ev is None:
                ev = arrivals[(src, dst)] = env.event()
            return ev

        inst.enter(entity)
        t0 = env.now
        work = self.work("fused")
        # the kernel's own threads issue the pushes: nothing leaves before the kernel is launched
        lat = ctx.cost.launch_latency_s(work)
        if lat > 0:
            yield env.timeout(lat)
        t_start = env.now
        peers = np.array([base + (pos + j) % tp for j in range(1, tp)], dtype=np.int64)
        if len(peers):
            yield env.timeout(gi.store_issue_s)
            for grp, done in start_puts(ctx.net, ctx.fabric, gi, rank, peers,
                                        np.full(len(peers), self.shard_bytes()), self.name):
                inst.register(grp, done)
                for d in np.asarray(grp.dsts).tolist():
                    done.callbacks.append(lambda _ev, d=int(d): arrival(rank, d).succeed())

        def shard_event(j: int):
            """The event for the shard of peer ``r + j`` at ``r``.  Symmetric: it reaches r when r's own shard
            reaches r - j (relabelling)."""
            if ctx.fabric.symmetric:
                return arrival(rank, base + (pos - j) % tp)
            return arrival(base + (pos + j) % tp, rank)

        W = int(work.num_workgroups)
        bm = min(self.tile, self.M)
        col_blocks = -(-self.n_local // min(self.tile, self.n_local))
        rb = np.arange(W, dtype=np.int64) // col_blocks
        # shard of the last row a tile reads, relative to this rank (0 = local); tiles run local first
        rel = (np.minimum(((rb + 1) * bm - 1) // self.shard_rows, tp - 1) - pos) % tp
        need = np.sort(rel, kind="stable")
        slots = effective_slots(ctx.cost, work, occ, knobs.persistent_grid or None)
        have = 0
        for lo in range(0, W, slots):
            hi = min(W, lo + slots)
            while have < int(need[hi - 1]):
                have += 1
                ev = shard_event(have)
                if not ev.processed:
                    yield ev
            yield env.timeout(ctx.cost.workgroup_time_s(work, hi - lo))
        ctx.sim.recorder.add("kernel", work.name, f"gpu{rank}/compute", rank, t_start, env.now,
                             variant=work.variant, workgroups=W, slots=slots, launched_s=t0)
        inst.start(entity)
        return env.now


def _tp_gemm_shape(op, p: dict, layout: Layout, source: str) -> None:
    """The shape fields of a tensor-parallel GEMM operator: ``tp``, ``M``, ``N``, ``K``, ``eb``, ``dtype``
    (``m`` must split over the ``tp`` ranks)."""
    op.tp = _tp_size(p, layout, source)
    op.M = _pos_int(p, "m", source)
    op.N = _pos_int(p, "n", source)
    op.K = _pos_int(p, "k", source)
    op.eb = dtype_bytes(str(p["dtype"]), source)
    op.dtype = str(p["dtype"])
    if op.M % op.tp:
        raise SpecError(source, "m", f"{op.M} rows do not split over tp {op.tp}")


OPS: dict[str, type[FusedOp]] = {
    EmbeddingAllToAll.name: EmbeddingAllToAll,
    GemvAllReduce.name: GemvAllReduce,
    GemmAllToAll.name: GemmAllToAll,
    GemmReduceScatter.name: GemmReduceScatter,
    AllGatherGemm.name: AllGatherGemm,
}


def register_op(cls: type[FusedOp]) -> type[FusedOp]:
    """Class decorator: ``simfuse op --op <cls.name>`` (and :func:`make_op`) build ``cls`` from its parameters
    (``cls(params, layout, source)``, ``cls.defaults`` filling those not given)."""
    if cls.name in OPS and OPS[cls.name] is not cls:
        raise ValueError(f"fused operator {cls.name!r} registered twice")
    OPS[cls.name] = cls
    return cls


def make_op(name: str, params: dict, nodes: int, gpus_per_node: int, source: str = "<params>") -> FusedOp:
    if name not in OPS:
        raise SpecError(source, "op", f"unknown fused operator {name!r}; expected one of {', '.join(OPS)}")
    return OPS[name](params, Layout(nodes, gpus_per_node), source)
