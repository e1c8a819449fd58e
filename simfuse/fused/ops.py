"""Fused operators: embedding-bag + All-to-All, GEMM + All-to-All (MoE), GEMV + AllReduce (decode), and for
tensor-parallel training with sequence parallelism GEMM + ReduceScatter and AllGather + GEMM."""

from __future__ import annotations

import bisect

import numpy as np
import simpy

from ..collectives import Layout
from ..costs import KernelWork
from ..engine.compute import effective_slots
from ..errors import SpecError
from ..network import INTRA, SELF
from .base import FusedOp, PushEngine, PushOp, dtype_bytes, fused_work, start_puts


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


def _largest_divisor_at_most(n: int, cap: int) -> int:
    for d in range(min(cap, n), 0, -1):
        if n % d == 0:
            return d
    return 1


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
        self.ceb = self.eb if p["comm_dtype"] is None else dtype_bytes(str(p["comm_dtype"]), source)
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


class GemvAllReduce(FusedOp):
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
        dev = topology.device
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
            reduce_s = n * slice_bytes / (dev.hbm_bw_bytes_per_s * dev.hbm_efficiency / dev.compute_units)
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


class GemmReduceScatter(FusedOp):
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
        gi, dev = topology.gpu_initiated, topology.device
        engines: dict[int, PushEngine] = {}
        n_pos = -(-self.W // tp)  # upper bound on slices per chunk
        arrived = np.zeros((1 if fabric.symmetric else self.layout.n, n_pos), dtype=np.int64)  # partials arrived per (owner, slice position)
        # the reductions are waits on the owner: only the last one's end matters for the node
        reduce_rate = dev.hbm_bw_bytes_per_s * dev.hbm_efficiency / dev.compute_units  # one workgroup's share
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
                reduce_s = tp * float(eng.slice_bytes[sl[full]].max()) / reduce_rate + gi.store_issue_s
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


class AllGatherGemm(FusedOp):
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
    exchange = True
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
        arrivals = inst.__dict__.setdefault("ag_arrivals", {})  # (src, dst) -> event: shard landed

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


class PushKernel(FusedOp):
    """Any compute kernel whose waves push their share of a per-destination payload as they complete.

    ``send_bytes[i]`` goes to ``dst_ranks[i]`` over the whole kernel; a wave of ``w`` of the kernel's ``W``
    workgroups pushes ``w / W`` of every destination's bytes as GPU-initiated puts the moment it ends (flag and,
    off the node, proxy latency per put).  Used for gradients produced by a GEMM (DLRM's interaction backward
    pushing embedding gradients to the table owners).

    Relay (the transpose of :class:`TwrwEmbeddingPush`'s two stages): ``relay_bytes[i]`` of ``send_bytes[i]``
    are forwarded by ``dst_ranks[i]`` to each of its node-local peers as soon as the wave's push has landed there
    (its store issue, then NVLink stores with their flag latency); ``relay_in_bytes`` is what this rank itself
    receives for relaying from each of the ``layout.nodes`` ranks of its rail (itself included).  DLRM: the
    table-row-wise gradients, ``b * D`` per table, go over the rail to the holder node's GPU of the same local
    index, which passes them to the other row shards.  The relayed data is a second exchange, waited for by a
    :class:`RelayWait` node sharing ``relay_channel`` (so the consumers of the direct pushes do not wait for the
    relays); a relaying rank counts as started in it once every push addressed to it has landed and its relays
    are issued.  Full simulation relays each
    landed push; the fast paths (one simulated rank per class) relay, by relabelling, what every rail rank sends
    this rank when this rank's own pushes of that wave to its rail have landed (the wave's end for its own share)."""

    name = "push_kernel"
    collective = "all_to_all"
    exchange = True

    def __init__(self, work: KernelWork, dst_ranks, send_bytes, tag: str = "push_kernel",
                 layout: Layout | None = None, relay_bytes=None, relay_in_bytes: float = 0.0,
                 relay_channel: str = ""):
        self.kernel = work
        self.dst_ranks = np.asarray(dst_ranks, dtype=np.int64)
        self.send_bytes = np.asarray(send_bytes, dtype=float)
        if self.dst_ranks.shape != self.send_bytes.shape:
            raise SpecError("<push_kernel>", "send_bytes", "needs one entry per destination rank")
        self.relay_bytes = None if relay_bytes is None else np.asarray(relay_bytes, dtype=float)
        if self.relay_bytes is not None:
            if self.relay_bytes.shape != self.send_bytes.shape:
                raise SpecError("<push_kernel>", "relay_bytes", "needs one entry per destination rank")
            if np.any(self.relay_bytes < 0) or np.any(self.relay_bytes > self.send_bytes * (1 + 1e-12)):
                raise SpecError("<push_kernel>", "relay_bytes", "must lie between 0 and send_bytes")
            if layout is None:
                raise SpecError("<push_kernel>", "layout", "a relaying push needs the layout (node-local peers)")
        if not relay_in_bytes >= 0:
            raise SpecError("<push_kernel>", "relay_in_bytes", f"must be >= 0, got {relay_in_bytes!r}")
        if self.relay_bytes is not None and not relay_channel:
            raise SpecError("<push_kernel>", "relay_channel", "a relaying push needs the channel of its RelayWait")
        self.relay_in_bytes = float(relay_in_bytes)
        self.relay_channel = relay_channel
        self.tag = tag
        self.layout = layout
        self.params = {}

    def work(self, variant: str) -> KernelWork:
        import dataclasses

        return dataclasses.replace(self.kernel, variant=variant)

    def collective_size_bytes(self) -> float:
        return float(self.send_bytes.sum())

    def destination_summary(self, rank: int):
        """``send_bytes[i]`` to ``dst_ranks[i]`` over the whole kernel (each wave pushes its share of every row)."""
        return self.dst_ranks, np.ones(len(self.dst_ranks), dtype=np.int64), self.send_bytes

    def _peers(self, rank: int) -> np.ndarray:
        g = self.layout.gpus_per_node
        p = np.arange((rank // g) * g, (rank // g + 1) * g, dtype=np.int64)
        return p[p != rank]

    def member_process(self, ctx, inst, entity: int, rank: int, knobs):
        env = ctx.sim.env
        inst.enter(entity)
        W = self.kernel.num_workgroups
        keep = (self.dst_ranks != rank) & (self.send_bytes > 0)
        dsts, sizes = self.dst_ranks[keep], self.send_bytes[keep]
        gi = ctx.topology.gpu_initiated
        relaying = self.relay_bytes is not None
        # orbit classes (the executor's exact class mode) relay as full simulation does, at the representative of
        # each receiver's class (``ctx.rep_of``; the identity in full simulation)
        symmetric = ctx.fabric.symmetric and not getattr(ctx, "orbit_classes", False)
        rep_of = getattr(ctx, "rep_of", int)
        relay_tag = f"{self.tag}:relay"
        if relaying:
            st = relay_channel(ctx.sim, self.relay_channel, env)
            issued = st["issued"].setdefault(entity, env.event())
            relay_of = dict(zip(self.dst_ranks.tolist(), self.relay_bytes.tolist(), strict=True))
            own_relay = relay_of.get(rank, 0.0)

        def relay(src: int, nbytes: float, after=None):
            """simpy process: ``src`` forwards ``nbytes`` to each node-local peer (once ``after`` has fired)."""
            if after:
                yield simpy.AllOf(env, after)
            peers = self._peers(src)
            if len(peers) == 0 or nbytes <= 0:
                return
            yield env.timeout(gi.store_issue_s)
            for grp, done in start_puts(ctx.net, ctx.fabric, gi, src, peers, np.full(len(peers), nbytes), relay_tag):
                st["flows"].append((grp, done))
                if st["inst"] is not None:
                    st["inst"].register(grp, done)

        def spawn(src: int, nbytes: float, after=None):
            st["procs"].setdefault(src, []).append(env.process(relay(src, nbytes, after)))

        if relaying:  # the relayed part travels as flows of its own, waited for by the RelayWait node
            rsz = self.relay_bytes[keep]
            direct = sizes - rsz
            d_dsts, d_sizes = dsts[direct > 0], direct[direct > 0]
            r_dsts, r_sizes = dsts[rsz > 0], rsz[rsz > 0]
        else:
            d_dsts, d_sizes = dsts, sizes

        def on_complete(idx, _t):
            f = len(idx) / W
            puts = start_puts(ctx.net, ctx.fabric, gi, rank, d_dsts, d_sizes * f, self.tag) if len(d_dsts) else []
            for grp, done in puts:
                inst.register(grp, done)
            if not relaying:
                return
            rputs = start_puts(ctx.net, ctx.fabric, gi, rank, r_dsts, r_sizes * f, self.tag) if len(r_dsts) else []
            for grp, done in rputs:
                st["flows"].append((grp, done))
                if st["inst"] is not None:
                    st["inst"].register(grp, done)
            g = self.layout.gpus_per_node
            if symmetric:
                # relabelling: this rank's pushes to its rail peers stand for theirs to it
                if self.relay_in_bytes > 0:
                    spawn(rank, self.relay_in_bytes * f)  # its own share: at the wave's end
                    rail = [done for grp, done in (rputs or puts)
                            if grp.route_class not in (SELF, INTRA) and np.any(np.asarray(grp.dsts) % g == rank % g)]
                    if self.layout.nodes > 1:
                        spawn(rank, (self.layout.nodes - 1) * self.relay_in_bytes * f, rail)
                return
            if own_relay > 0:
                spawn(rank, own_relay * f)
            for grp, done in rputs:
                for d in np.asarray(grp.dsts).tolist():
                    rb = relay_of.get(int(d), 0.0) * f
                    st["land"].setdefault(rep_of(int(d)), []).append(done)
                    done.callbacks.append(lambda _ev, d=rep_of(int(d)), rb=rb: spawn(d, rb))

        from ..engine import run_kernel

        t = yield env.process(run_kernel(ctx.sim, self.work("fused"), ctx.cost, rank=rank, on_complete=on_complete))
        inst.start(entity)
        if not relaying:
            return t
        issued.succeed()

        def finish():
            if not symmetric and self.relay_in_bytes > 0:
                # every simulated rank has issued its pushes; wait for those addressed to this rank, whose landing
                # callbacks have spawned the relays by then
                yield simpy.AllOf(env, [st["issued"].setdefault(c, env.event()) for c in inst.entities])
                yield simpy.AllOf(env, st["land"].get(rank, []))
            yield simpy.AllOf(env, st["procs"].get(rank, []))
            st["relayed"].setdefault(entity, env.event()).succeed()

        env.process(finish())
        return t


def relay_channel(sim, name: str, env) -> dict:
    """The state a relaying :class:`PushKernel` shares with its :class:`RelayWait` nodes in one simulation (kept
    on the simulation object: nothing outlives the run)."""
    chans = sim.__dict__.setdefault("_relay_channels", {})
    st = chans.get(name)
    if st is None:
        st = chans[name] = {"issued": {}, "land": {}, "procs": {}, "relayed": {}, "flows": [], "inst": None}
    return st


class RelayWait(FusedOp):
    """The receiving side of a relaying :class:`PushKernel` (same ``channel``): no kernel; the node is done when
    every relayed flow addressed to this rank has landed (an exchange of its own on the group, so the direct
    pushes' consumers do not wait for it).  Put it on a communication stream after the push kernel's node."""

    name = "relay_wait"
    collective = "all_to_all"
    exchange = True

    def __init__(self, channel: str, relay_in_bytes: float, nodes: int, gpus_per_node: int):
        self.channel, self.params = channel, {}
        self.relay_in_bytes = float(relay_in_bytes)
        self.nodes, self.g = int(nodes), int(gpus_per_node)

    def work(self, variant: str):
        return None

    def collective_size_bytes(self) -> float:
        return float(self.nodes * self.relay_in_bytes * (self.g - 1))

    def destination_summary(self, rank: int):
        """Nothing: a relay wait sends nothing (the relays are its :class:`PushKernel`'s)."""
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0)

    def member_process(self, ctx, inst, entity: int, rank: int, knobs):
        env = ctx.sim.env
        st = relay_channel(ctx.sim, self.channel, env)
        if st["inst"] is None:
            st["inst"] = inst
            for grp, done in st["flows"]:
                inst.register(grp, done)
        inst.enter(entity)
        t = env.now

        def started():
            if self.relay_in_bytes > 0:
                yield st["relayed"].setdefault(entity, env.event())
            inst.start(entity)

        env.process(started())
        yield env.timeout(0)  # a simpy process: no kernel, the stream is free at once
        return t


class _Coverage:
    """Arrival counts over one reducer's slice positions ``[0, K)`` as a piecewise-constant function (sorted
    segment starts and counts, full segments marked done): :class:`TwrwEmbeddingPush`'s reducer, whose positions
    arrive as contiguous ranges from each of the ``g`` partial senders.  O(segments) per update; segments stay
    few (ranges arrive roughly in order, and done ones merge)."""

    DONE = -1

    def __init__(self, K: int, g: int):
        self.starts, self.vals, self.K, self.g = [0], [0], int(K), int(g)

    def _split(self, x: int) -> int:
        """Index of the segment starting at ``x`` (created if needed); ``x`` in ``[0, K]``."""
        st = self.starts
        if x >= self.K:
            return len(st)
        i = bisect.bisect_right(st, x) - 1
        if st[i] == x:
            return i
        st.insert(i + 1, x)
        self.vals.insert(i + 1, self.vals[i])
        return i + 1

    def add(self, ranges) -> list[tuple[int, int]]:
        """One more arrival on each ``[a, b)`` of ``ranges`` (one landing); returns the ranges that reached ``g``
        arrivals with it (in position order), which are then done."""
        lo, hi = self.K, 0
        for a, b in ranges:
            if b <= a:
                continue
            i, j = self._split(a), self._split(b)
            for k in range(i, j):
                self.vals[k] += 1
            lo, hi = min(lo, a), max(hi, b)
        if hi <= lo:
            return []
        st, vals, g = self.starts, self.vals, self.g
        i = bisect.bisect_right(st, lo) - 1
        full = []
        k = i
        while k < len(st) and st[k] < hi:
            if vals[k] == g:
                vals[k] = self.DONE
                end = st[k + 1] if k + 1 < len(st) else self.K
                if full and full[-1][1] == st[k]:
                    full[-1] = (full[-1][0], end)
                else:
                    full.append((st[k], end))
            k += 1
        # merge equal neighbours over the touched span (segments starting past ``hi`` were not touched)
        k = max(1, i)
        while k < len(st) and st[k] <= hi:
            if vals[k] == vals[k - 1]:
                del st[k], vals[k]
            else:
                k += 1
        return full


class _TwrwStage1:
    """Closed form of one rank's stage-1 schedule in :class:`TwrwEmbeddingPush` (no per-workgroup arrays).

    Slices are numbered, per destination reducer (offset ``h`` from this rank's local index), in execution
    order; a reducer's slice ``kappa`` covers the same positions of its range for every sender of the node, so
    the reducer counts arrivals per slice number.  ``F(kappa)``: positions covered by the reducer's slices
    ``< kappa`` (cumulative).  Three shapes:

    * ``remote_first``: chunks ``c`` of ``s`` positions (the last one ``Q - (C - 1) s``); execution runs chunk
      ``c`` for offsets ``0, 1, ..., g - 1`` before chunk ``c + 1``; slice ``sigma = c g + h``, ``kappa = c``,
      covering positions ``[c s, min((c + 1) s, Q))``;
    * ``natural``, ``g > 1``: blocks ``beta = tau n + o`` of ``kb`` workgroups (table ``tau``, owner ``o``, one
      reducer ``o mod g``), each cut every ``s`` (``J`` slices); a reducer's slices are those of its blocks,
      ``kappa = (beta // g) J + j``;
    * ``natural``, ``g == 1``: the whole grid is one run to this rank, cut every ``s``; ``kappa`` = slice.
    """

    def __init__(self, op, rank: int, fabric, topology, knobs):
        lay = op.layout
        self.g, self.N, self.n = lay.gpus_per_node, lay.nodes, lay.n
        g = self.g
        self.rank, self.k, self.l = rank, rank // g, rank % g
        self.s = max(1, int(knobs.slice_wgs))
        self.t, self.kb, self.Q = op.t, op.kb, op.Q
        self.W = g * self.Q
        self.shape = "remote_first" if knobs.tile_order != "natural" else ("natural" if g > 1 else "natural1")
        self.reducers = np.array([self.k * g + (self.l + h) % g for h in range(g)], dtype=np.int64)
        cls = fabric.route_class(rank, self.reducers)
        gi = topology.gpu_initiated
        self.issue = np.where(cls == SELF, 0.0, np.where(cls == INTRA, gi.store_issue_s, gi.put_issue_s)).tolist()
        s, Q, kb = self.s, self.Q, self.kb
        if self.shape == "remote_first":
            self.C = -(-Q // s)
            self.L_last = Q - (self.C - 1) * s
            self.P_last = (self.C - 1) * g * s
            self.K = self.C
        elif self.shape == "natural":
            self.J = -(-kb // s)
            self.K = self.t * self.N * self.J
        else:
            self.K = -(-self.W // s)
        self.hold_all = self.s >= self.W > 0
        # a window of this many positions holds the last workgroup of a slice to every reducer: slices are at
        # most s long and cycle through the g reducers (remote_first), or g consecutive blocks of kb have g
        # different reducers (natural)
        self.span = g * s if self.shape == "remote_first" else g * kb if self.shape == "natural" else s
        self.max_issue = max(self.issue)

    def F(self, kappa: int) -> int:
        """Positions of a reducer's range covered by its slices ``< kappa``."""
        if self.shape == "natural":
            return (kappa // self.J) * self.kb + min((kappa % self.J) * self.s, self.kb)
        return min(kappa * self.s, self.Q)

    def _F_arr(self, kappa: np.ndarray) -> np.ndarray:
        """:meth:`F` of an array (``natural``, ``g > 1``)."""
        return (kappa // self.J) * self.kb + np.minimum((kappa % self.J) * self.s, self.kb)

    def kappas(self, pos: int) -> list[int]:
        """Per offset ``h``: how many of that reducer's slices have completed once positions ``< pos`` ran."""
        g, s = self.g, self.s
        if self.shape == "remote_first":
            if pos <= self.P_last:
                n = pos // s
            else:
                n = (self.C - 1) * g + min(g, (pos - self.P_last) // self.L_last)
            return [(n - h + g - 1) // g for h in range(g)]
        if self.shape == "natural":
            kb, J = self.kb, self.J
            b0, part = divmod(pos, kb)
            out = []
            for h in range(g):
                lr = (self.l + h) % g
                out.append(((b0 - lr + g - 1) // g) * J + ((part // s) if b0 % g == lr else 0))
            return out
        return [pos // s + (1 if pos >= self.W and self.W % s else 0)]

    def wave_overhead_s(self, lo: int, hi: int) -> float:
        """The costliest issue among the slices whose last workgroup runs in positions ``[lo, hi)``."""
        if hi - lo >= self.span:  # the window holds a slice end of every reducer (called once per wave: cheap)
            return self.max_issue
        a, b = self.kappas(lo), self.kappas(hi)
        best = 0.0
        for h in range(self.g):
            if b[h] > a[h] and self.issue[h] > best:
                best = self.issue[h]
        return best

    def owner_counts(self, ranges) -> np.ndarray:
        """Positions per owner node (length ``N``) among a reducer's slice ranges ``[(k0, k1), ...)``."""
        N = self.N
        nodes, counts = [], []
        for k0, k1 in ranges:
            if self.shape == "natural":
                J = self.J
                bb = np.arange(k0 // J, (k1 - 1) // J + 1, dtype=np.int64)
                lo = np.maximum(k0, bb * J)
                hi = np.minimum(k1, (bb + 1) * J)
                nodes.append(bb % N)
                counts.append(self._F_arr(hi) - self._F_arr(lo))
                continue
            a, b = self.F(k0), self.F(k1)
            # remote_first: positions q, owner node offset q // (kb t); natural1: execution positions, owner node
            # (i // kb) mod N (one GPU per node)
            blk = self.kb * self.t if self.shape == "remote_first" else self.kb
            bb = np.arange(a // blk, (b - 1) // blk + 1, dtype=np.int64)
            cnt = np.minimum(b, (bb + 1) * blk) - np.maximum(a, bb * blk)
            nodes.append((self.k + bb + 1) % N if self.shape == "remote_first" else bb % N)
            counts.append(cnt)
        if not nodes:
            return np.zeros(N, dtype=np.int64)
        return np.bincount(np.concatenate(nodes), weights=np.concatenate(counts), minlength=N).astype(np.int64)


#: most stage-2 (rail) put batches a reducer issues per kernel (see TwrwEmbeddingPush)
MAX_STAGE2_PUTS = 64
#: most stage-1 push points (macro-waves, :func:`~simfuse.engine.compute.run_kernel_waves`) of a
#: TwrwEmbeddingPush kernel: the resolution of stage 2, which already leaves in MAX_STAGE2_PUTS batches of
#: ``Q / MAX_STAGE2_PUTS`` reduced positions (a macro-wave of 1/64 of the kernel completes about one batch).  Each
#: push point starts NVLink flows, and every flow start and end re-solves the flow network with the long rail puts
#: in flight: at 1,024 nodes x 1,056 bags per GPU (MLPerf DLRM-DCNv2, planned) 256 points took 14.9 s for both
#: modes, 64 took 6.0 s (2-core VM), and the fused iteration moved by +0.2% (0.061472 -> 0.061598 s; +0.11% at
#: 64 nodes, +0.17% at 128; unchanged at 16 nodes, whose kernels have fewer waves).  Kernels of at most this many
#: waves push once per wave (exact).
MAX_TWRW_PUSH_WAVES = MAX_STAGE2_PUTS


class TwrwEmbeddingPush(FusedOp):
    """Table-row-wise embedding pooling with a hierarchical fused push (DLRM, planned sharding).

    A table-row-wise table has ``g`` row shards on the GPUs of one node; each shard pools all ``B`` bags at its
    share of the lookups (one kernel for the ``tables[r]`` shards of rank ``r``; every GPU of a holder node holds
    the same number).  Bag ``x`` belongs to rank ``x // b``; its *reducer* is the GPU of the holder node with that
    rank's local index.  The bulk path reduces inside the node (stage 1: ``N * b * D`` per table to each local
    peer) and then sends on the rails (stage 2: ``b * D`` per table to each rank of the rail).  Fused:

    * stage 1: each workgroup (``bags`` bags of one table) pushes its partial sums to the bags' reducer over
      NVLink as its slice completes (:class:`~simfuse.fused.base.PushEngine`: slices of ``slice_wgs``, store
      issue, flag latency; the reducer's own share stays local);
    * stage 2: once all ``g`` partials of a workgroup's bags have landed at the reducer, it adds them (``g`` x the
      slice's bytes at one workgroup's HBM share, the convention of :class:`GemmReduceScatter`), then puts the
      reduced bags on its rail to their owner (``put_issue_s``, then proxy and flag latency per put); the bags of
      its own node stay there.  Reductions and puts are issued by the reducer as partials complete, whatever
      its own kernel is doing (a communication workgroup or proxy, as the two-phase operators assume).

    ``remote_first`` order (interleaved and shifted, symmetric): a reducer's bag range is ordered by owner node
    offset from the holder node (other nodes first, its own node last), then bag block, then table, and cut in
    chunks of ``slice_wgs`` workgroups; GPU ``l`` runs chunk ``c`` for reducers ``l, l + 1, ...`` (mod ``g``)
    before chunk ``c + 1``, so at each step every reducer gets one GPU's chunk (no incast) and all ``g`` partials
    of a chunk land within ``g`` steps.  ``natural``: the index order (table, bag), the same on every GPU.

    A rank counts as started (its stage 2 complete) when its kernel has ended and its reducer has pushed every
    reduced slice; a rank's data is ready when every push addressed to it has landed.  Full simulation counts
    each reducer's partials; the fast paths (one simulated rank per class) count, by relabelling inside the
    node, a rank's own pushes of a slice position to all ``g`` reducers as the ``g`` partials it receives."""

    name = "embedding_twrw_push"
    collective = "all_to_all"
    exchange = True

    def __init__(self, work: KernelWork | None, layout: Layout, tables, rank: int, global_batch: int, bags: int,
                 dim: int, elem_bytes: int, source: str = "<table_row_wise>"):
        self.layout, self.source, self.params = layout, source, {}
        n, g = layout.n, layout.gpus_per_node
        self.tables = np.asarray(tables, dtype=np.int64)
        if self.tables.shape != (n,) or np.any(self.tables < 0):
            raise SpecError(source, "tables", f"needs a shard count >= 0 for each of the {n} ranks")
        by_node = self.tables.reshape(layout.nodes, g)
        if np.any(by_node != by_node[:, :1]):
            raise SpecError(source, "tables", "table-row-wise shards must fill every GPU of their node alike")
        self.rank = int(rank)
        self.t = int(self.tables[self.rank])
        self.B, self.D, self.eb = int(global_batch), int(dim), int(elem_bytes)
        if self.B % n:
            raise SpecError(source, "global_batch", f"{self.B} is not divisible by the {n} ranks")
        self.b = self.B // n
        self.bags = int(bags)
        if self.bags < 1 or self.b % self.bags:
            raise SpecError(source, "bags", f"{bags} bags per workgroup do not divide the {self.b} bags per rank")
        self.kernel = work if self.t > 0 else None
        if self.t > 0 and (work is None or work.num_workgroups != self.t * self.B // self.bags):
            raise SpecError(source, "work", f"the pooling kernel needs {self.t * self.B // self.bags} workgroups "
                                            f"({self.t} tables x {self.B // self.bags} blocks of {self.bags} bags)")
        self.kb = self.b // self.bags                       # blocks per owner
        self.Q = layout.nodes * self.kb * self.t            # workgroups per reducer range
        self.wg_bytes = float(self.bags * self.D * self.eb)

    @staticmethod
    def bags_for(b: int, bags_per_wg: int) -> int:
        """Bags per workgroup: the largest divisor of ``b`` up to ``bags_per_wg`` (a workgroup has one owner)."""
        return _largest_divisor_at_most(b, bags_per_wg)

    def work(self, variant: str) -> KernelWork | None:
        import dataclasses

        return None if self.kernel is None else dataclasses.replace(self.kernel, variant=variant)

    def collective_size_bytes(self) -> float:
        return float(self.t * self.B * self.D * self.eb)

    def _wgs(self, rank: int):
        """Per workgroup of ``rank``: reducer rank, position in the reducer's range (``q``)."""
        g, N, t = self.layout.gpus_per_node, self.layout.nodes, int(self.tables[rank])
        per_table = self.B // self.bags
        i = np.arange(t * per_table, dtype=np.int64)
        tau, beta = i // per_table, i % per_table
        owner = beta // self.kb
        w = beta % self.kb
        k = rank // g
        reducer = k * g + owner % g
        sp = ((owner // g - k) % N - 1) % N                # owner node offset, other nodes first
        q = (sp * self.kb + w) * t + tau
        return reducer, q

    def wg_destinations(self, rank: int):
        reducer, _q = self._wgs(rank)
        return reducer, np.full(len(reducer), self.wg_bytes)

    def order(self, rank: int, fabric, tile_order: str, slice_wgs: int = 1) -> np.ndarray:
        reducer, q = self._wgs(rank)
        if tile_order == "natural":
            return np.arange(len(q), dtype=np.int64)
        g = self.layout.gpus_per_node
        shift = (reducer % g - rank % g) % g
        return np.lexsort((q, shift, q // max(1, int(slice_wgs)))).astype(np.int64)

    def owners(self, reducer: int, q: np.ndarray) -> np.ndarray:
        """The bags' owners of positions ``q`` of ``reducer``'s range."""
        g, N = self.layout.gpus_per_node, self.layout.nodes
        sig = (q // (self.kb * self.t) + 1) % N
        return ((reducer // g + sig) % N) * g + reducer % g

    def bytes_by_destination(self, rank: int) -> tuple[np.ndarray, np.ndarray]:
        """``(dst[], bytes[])``: what ``rank``'s kernel sends each node-local reducer (``Q`` workgroups' outputs
        each; for :func:`~simfuse.fused.base.fused_work`, without the per-workgroup arrays)."""
        g = self.layout.gpus_per_node
        t = int(self.tables[rank])
        Q = self.layout.nodes * self.kb * t
        dst = np.arange((rank // g) * g, (rank // g + 1) * g, dtype=np.int64)
        return dst, np.full(g, Q * self.wg_bytes)

    def destination_summary(self, rank: int):
        """Closed form: ``Q`` workgroups (``nodes x kb x tables[rank]``) to each node-local reducer, none without
        tables."""
        g = self.layout.gpus_per_node
        Q = self.layout.nodes * self.kb * int(self.tables[rank])
        if Q == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0)
        return (np.arange((rank // g) * g, (rank // g + 1) * g, dtype=np.int64), np.full(g, Q, dtype=np.int64),
                np.full(g, self.wg_bytes))

    def member_process(self, ctx, inst, entity: int, rank: int, knobs):
        """simpy process of one rank: pooling kernel with stage-1 pushes; its reducer's stage 2 runs on after the
        kernel (the rank is started when it is done).  Returns the kernel's end (s).

        Closed form (:class:`_TwrwStage1`): each wave (macro-wave beyond :data:`MAX_TWRW_PUSH_WAVES` waves, as
        :class:`~simfuse.fused.base.RunPushEngine` beyond :data:`~simfuse.fused.base.MAX_PUSH_WAVES`) completes
        a contiguous range of every reducer's slices; they leave as one flow per reducer, and the reducer counts
        arrivals on slice ranges (:class:`_Coverage`) instead of per workgroup.  ``tests/fused/test_twrw_closed_form.py``
        checks it against the per-workgroup model (:class:`~simfuse.fused.base.PushEngine`)."""
        from ..engine.compute import run_kernel_waves
        from . import base as _base

        env = ctx.sim.env
        inst.enter(entity)
        if self.t == 0:
            inst.start(entity)
            return env.now
        topology, g = ctx.topology, self.layout.gpus_per_node
        gi, dev = topology.gpu_initiated, topology.device
        # a push to reducer h is credited to h's simulated stand-in: h in full simulation, the representative of
        # h's class with orbit classes; rank 0's own state in the symmetric mode (relabelling)
        rep_of = getattr(ctx, "rep_of", int)
        symmetric = ctx.fabric.symmetric and not getattr(ctx, "orbit_classes", False)
        reduce_s = g * max(1, int(knobs.slice_wgs)) * self.wg_bytes / (
            dev.hbm_bw_bytes_per_s * dev.hbm_efficiency / dev.compute_units)
        tag = f"{self.name}:rail"
        batch = -(-self.Q // MAX_STAGE2_PUTS)
        st = inst.__dict__.setdefault("twrw_state", {})
        sched = _TwrwStage1(self, rank, ctx.fabric, topology, knobs)

        def reducer_state(r: int):
            s = st.get(r)
            if s is None:
                s = st[r] = {"cov": _Coverage(sched.K, g), "reduced": 0, "procs": [], "done": env.event(),
                             "ready": [], "n_ready": 0}
            return s

        def stage2(r: int, ranges):
            yield env.timeout(reduce_s)
            cnt = sched.owner_counts(ranges)
            cnt[r // g] = 0                                  # the bags of the reducer's own node stay there
            away = np.flatnonzero(cnt)
            if len(away):
                yield env.timeout(gi.put_issue_s)
                uo = away * g + r % g
                for grp, done in start_puts(ctx.net, ctx.fabric, gi, r, uo, cnt[away] * self.wg_bytes, tag):
                    inst.register(grp, done)

        def land(entries):
            """Partials landed: ``entries`` = [(reducer, kappa0, kappa1), ...] (one landing)."""
            by_r: dict[int, list] = {}
            for r, k0, k1 in entries:
                by_r.setdefault(r, []).append((k0, k1))
            for r in sorted(by_r):
                rs = reducer_state(r)
                full = rs["cov"].add(by_r[r])
                if not full:
                    continue
                nq = sum(sched.F(b) - sched.F(a) for a, b in full)
                rs["reduced"] += nq
                rs["ready"].extend(full)
                rs["n_ready"] += nq
                # reduced slices go out in at most MAX_STAGE2_PUTS batches per reducer (as the pushes are
                # coalesced to at most MAX_PUSH_WAVES waves): the event count stays bounded at any scale
                if rs["n_ready"] >= batch or rs["reduced"] == self.Q:
                    rs["procs"].append(env.process(stage2(r, rs["ready"])))
                    rs["ready"], rs["n_ready"] = [], 0
                if rs["reduced"] == self.Q:
                    env.process(_all_then(env, list(rs["procs"]), rs["done"]))

        def arrived(entries):
            return lambda _ev: land(entries)

        def on_wave(lo: int, hi: int, _t: float) -> None:
            if sched.hold_all:
                if hi < sched.W:
                    return
                lo = 0
            a, b = sched.kappas(lo), sched.kappas(hi)
            local, remote = [], []
            for h in range(g):
                if b[h] > a[h]:
                    (local if h == 0 else remote).append(h)
            if local:
                land([(rank, a[0], b[0])])
            if not remote:
                return
            remote.sort(key=lambda h: sched.reducers[h])
            dsts = sched.reducers[remote]
            sizes = np.array([(sched.F(b[h]) - sched.F(a[h])) * self.wg_bytes for h in remote])
            for grp, ev in start_puts(ctx.net, ctx.fabric, gi, rank, dsts, sizes, self.name):
                gd = set(np.asarray(grp.dsts).tolist())
                entries = [(rank if symmetric else rep_of(int(sched.reducers[h])), a[h], b[h]) for h in remote
                           if int(sched.reducers[h]) in gd]
                ev.callbacks.append(arrived(entries))
                inst.register(grp, ev)

        occ = knobs.effective_occupancy_loss(topology)
        kernel_end = yield env.process(run_kernel_waves(
            ctx.sim, fused_work(self, knobs, ctx.fabric, rank), ctx.cost, rank=rank, on_wave=on_wave,
            wave_overhead_s=sched.wave_overhead_s, occupancy_loss=occ,
            persistent_grid=knobs.persistent_grid or None,
            max_events=min(_base.MAX_PUSH_WAVES, MAX_TWRW_PUSH_WAVES)))
        done = reducer_state(rank)["done"]

        def finish():
            yield done
            inst.start(entity)

        env.process(finish())
        return kernel_end


def _all_then(env, events, done):
    """simpy process: wait for ``events``, then fire ``done``."""
    if events:
        yield simpy.AllOf(env, events)
    done.succeed()


OPS: dict[str, type[FusedOp]] = {
    EmbeddingAllToAll.name: EmbeddingAllToAll,
    GemvAllReduce.name: GemvAllReduce,
    GemmAllToAll.name: GemmAllToAll,
    GemmReduceScatter.name: GemmReduceScatter,
    AllGatherGemm.name: AllGatherGemm,
}


def make_op(name: str, params: dict, nodes: int, gpus_per_node: int, source: str = "<params>") -> FusedOp:
    if name not in OPS:
        raise SpecError(source, "op", f"unknown fused operator {name!r}; expected one of {', '.join(OPS)}")
    return OPS[name](params, Layout(nodes, gpus_per_node), source)
