"""The stages of :func:`~simfuse.workloads.dlrm.build_dlrm_graph`: what every rank's program shares
(:class:`DLRMContext`: the traffic of the placement, the dense network's kernels in issue order, the replicated
tables' kernels), and one rank's program (:class:`RankProgram`: forward, backward, optimizer steps)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..collectives import Layout
from ..fused.knobs import DTYPE_BYTES
from ..fused.ops import EmbeddingAllToAll, PushKernel, RelayWait, TwrwEmbeddingPush
from ..fused.twrw import twrw_rail_bytes, twrw_stage1_bytes
from ..graph import AllToAllVNode, CollectiveNode, ComputeNode, DelayNode, FusedNode
from .dense import elementwise_work, gemm_work
from .dlrm_kernels import (
    _A2A_KINDS,
    _HIER_KINDS,
    _SHARDED_KINDS,
    _buckets,
    _dense_layers,
    _pool_work,
    dense_elementwise,
    sparse_update_works,
)
from .ids import spec_ids_bytes


@dataclasses.dataclass
class Traffic:
    """What the placement sends, per rank: bytes of its All-to-All shards to every rank (table/row/column-wise:
    ``b`` x its columns each), its hierarchical shards in column-equivalent tables of ``dim_h[r]`` columns
    (table-row-wise and grid: stage 1 to each local peer, stage 2 on its rail to every node), the input
    distribution's ids, and the replicated tables."""

    ub_all: np.ndarray    # All-to-All shard bytes each rank sends every rank
    twrw: np.ndarray      # column-equivalent hierarchical tables per rank
    dim_h: np.ndarray     # their width per rank (the gcd of the rank's hierarchical shards' widths; D without any)
    key_sizes: np.ndarray  # the input distribution's bytes to every shard holder
    dp_tables: list       # the replicated (data-parallel) tables

    @property
    def has_twrw(self) -> bool:
        return bool(self.twrw.any())


def placement_traffic(spec, per_rank, vec: bool, b: int, n: int) -> Traffic:
    """The :class:`Traffic` of ``per_rank`` (per-rank unit lists, or :class:`~simfuse.workloads.planner.RankUnits`
    when ``vec``).  The input distribution (``embedding.input_dist``): every rank sends each shard holder its
    ``b`` bags' ids of the tables that holder serves (a row shard gets the ids in its rows: ``u.pooling`` per bag,
    uniform ids; a column shard all of its table's) and one length per bag and shard; the same vector from every
    rank (:func:`simfuse.workloads.ids.ids_bytes`: key width, optional deduplication of repeated bags)."""
    D, ceb = spec.dim, DTYPE_BYTES[spec.comm_dtype]
    if vec:
        uni_cols, hcols = per_rank.columns(_A2A_KINDS, D), per_rank.columns(_HIER_KINDS, D)
        dim_h = per_rank.gcd_dims(_HIER_KINDS, D)
        dp_tables = per_rank.tables_of("data_parallel")
    else:
        uni_cols = np.array([sum(u.dim or D for u in us if u.kind in _A2A_KINDS) for us in per_rank], dtype=float)
        hcols = np.array([sum(u.dim or D for u in us if u.kind in _HIER_KINDS) for us in per_rank], dtype=float)
        dim_h = np.array([math.gcd(*(int(u.dim or D) for u in us if u.kind in _HIER_KINDS)) for us in per_rank],
                         dtype=np.int64)
        dp_tables = sorted({u.table for us in per_rank for u in us if u.kind == "data_parallel"})
    if spec.input_dist != "none":
        def unit_ids(u):
            return spec_ids_bytes(spec, b, u.pooling, u.table) if u.kind in _SHARDED_KINDS else 0.0

        if vec:
            key_sizes = per_rank.per_rank_sum(unit_ids)
        else:
            key_sizes = np.array([sum(unit_ids(u) for u in us) for us in per_rank], dtype=float)
    else:
        key_sizes = np.zeros(n)
    # each rank's hierarchical kernel in column-equivalent tables of ``dim_h[r]`` columns, the gcd of the widths
    # that rank holds (as the All-to-All shards' EmbeddingAllToAll): a shard of ``w`` columns is ``w / dim_h[r]``
    # tables of ``dim_h[r]``.  Hierarchical shards fill every GPU of their node alike, so the width is the same on
    # every GPU of a node; a node without such shards gets ``D`` (no tables)
    dim_h = np.where(dim_h > 0, dim_h, D).astype(np.int64)
    return Traffic(uni_cols * b * ceb, hcols / dim_h, dim_h, key_sizes, dp_tables)


@dataclasses.dataclass
class DenseSchedule:
    """The dense network's kernels in issue order, and its gradients' all-reduce buckets."""

    bottom_fwd: list
    inter_fwd: list
    top_fwd: list
    top_bwd: list    # per top layer (last first): its element-wise kernels, dgrad and wgrad
    inter_seq: list  # the interaction backward: (kind, works, gradient index or -1)
    bot_bwd: list
    dense_params: int
    buckets: list
    closing: dict    # gradient index -> the bucket it closes


def _mlp_backward(layers, dt: str, grad_eb: int):
    works, grads = [], []
    for (lbl, m, nn, k) in reversed(layers):
        works.append([gemm_work(lbl + "_dgrad", m, k, nn, dt), gemm_work(lbl + "_wgrad", k, nn, m, dt)])
        grads.append(float(k * nn + nn) * grad_eb)
    return works, grads


def dense_schedule(spec, b: int, fuse_bwd: bool, bulk_twrw: bool, dp_rows_bucketed: float) -> DenseSchedule:
    """The element-wise kernels (:func:`~simfuse.workloads.dlrm_kernels.dense_elementwise`) in issue order: an MLP
    layer's after its forward GEMM and before its backward pair; the loss after the top MLP.  ``fuse_bwd``: the
    fused backward pushes d(embeddings) from the kernel that produces it; ``bulk_twrw``: table-row-wise shards
    still go through a bulk exchange; ``dp_rows_bucketed``: bytes of replicated-table gradients in the last
    DDP bucket."""
    bottom, inter, top = _dense_layers(spec, b)
    dew = dense_elementwise(spec, b)
    dt, grad_eb = spec.dense_dtype, DTYPE_BYTES[spec.grad_dtype]

    def fwd(layers):
        return [gemm_work(lbl, m, nn, k, dt) for (lbl, m, nn, k) in layers]

    top_bwd, top_grads = _mlp_backward(top, dt, grad_eb)
    inter_bwd, inter_grads = _mlp_backward(inter, dt, grad_eb)
    bot_bwd, bot_grads = _mlp_backward(bottom, dt, grad_eb)
    if spec.dense_fusion != "legacy":  # the first layer's input is the data: no dgrad (HugeCTR skip_dgrad for the
        # first dense layer, add_dense_layer_helpers.cpp / mlp_layer.cu; PyTorch: the input needs no gradient)
        bot_bwd[-1] = bot_bwd[-1][1:]
    bottom_fwd = [w for gm, extra in zip(fwd(bottom), dew.bottom_fwd, strict=True) for w in [gm, *extra]]
    top_fwd = [w for gm, extra in zip(fwd(top), dew.top_fwd, strict=True) for w in [gm, *extra]] + dew.loss_fwd
    top_bwd = [list(extra) + pair for pair, extra in zip(top_bwd, reversed(dew.top_bwd), strict=True)]
    if dew.loss_bwd:
        top_bwd[0] = list(dew.loss_bwd) + top_bwd[0]
    bot_bwd = [list(extra) + pair for pair, extra in zip(bot_bwd, reversed(dew.bottom_bwd), strict=True)]
    inter_fwd = list(dew.inter_fwd_head)
    inter_gemms = fwd(inter)
    for li_, gemms in enumerate(zip(inter_gemms[0::2], inter_gemms[1::2], strict=True)):
        inter_fwd += [*gemms, *dew.inter_fwd[li_]]
    inter_seq = _interaction_backward(spec, dew, inter_bwd, len(inter) // 2, b, fuse_bwd, bulk_twrw)
    dense_params = sum(k * nn + nn for (_lbl, _m, nn, k) in top + inter + bottom)  # weights + biases
    buckets, closes = _buckets(top_grads + inter_grads + bot_grads, spec.bucket_bytes)
    # bucketed: the replicated tables' weights are DDP parameters like the dense ones (TorchRec's data-parallel
    # sharding); their gradients are ready at the backward's end and join its last bucket
    if dp_rows_bucketed:
        buckets[-1] += dp_rows_bucketed
    return DenseSchedule(bottom_fwd, inter_fwd, top_fwd, top_bwd, inter_seq, bot_bwd, dense_params, buckets,
                         {last: k for k, last in closes.items()})


def _interaction_backward(spec, dew, inter_bwd, n_cross: int, b: int, fuse_bwd: bool, bulk_twrw: bool) -> list:
    """``(kind, works, gradient index or -1)`` in issue order; ``inter_bwd`` lists cross layers last to first,
    u pair then v pair.  The ``producer`` is the kernel producing d(embeddings), the one the fused backward
    pushes from."""
    dt = spec.dense_dtype
    inter_seq: list = [("ew", dew.inter_bwd_head, -1)]
    for k_ in range(n_cross):
        li_ = n_cross - 1 - k_
        inter_seq += [("ew", dew.inter_bwd_pre[li_], -1), ("gemm", inter_bwd[2 * k_], 2 * k_),
                      ("gemm", inter_bwd[2 * k_ + 1], 2 * k_ + 1), ("ew", dew.inter_bwd_post[li_], -1)]
    # fused, epilogue DCN: the fused backward kernel is the first cross layer's dgrad GEMM with HugeCTR's final
    # ``matrix_add`` folded into its epilogue (a second addend: the dX accumulator, b x more bytes read), so it
    # produces d(embeddings) and pushes it; the separate add is gone
    fold = fuse_bwd and spec.dense_fusion == "epilogue" and n_cross > 0
    if dew.emb_grad is None or fold:  # legacy, or the fold: the last dgrad GEMM produces d(embeddings)
        _kind, (dgrad_w, wgrad_w), j_ = inter_seq.pop(-2)
        if fold:  # HugeCTR's order (dU before dY: dY overwrites the input x0 that dU reads,
            # multi_cross_layer.cu Core23TempMultiCrossBackwardFunctorv2), so the pushing GEMM is the last
            extra = float(b) * dgrad_w.shape_dict()["n"] * DTYPE_BYTES[dt] / dgrad_w.num_workgroups
            dgrad_w = dataclasses.replace(dgrad_w, bytes_per_wg=dgrad_w.bytes_per_wg + extra,
                                          traffic_bytes_per_wg=dgrad_w.requested_bytes_per_wg + extra)
            inter_seq.insert(-1, ("gemm", [wgrad_w], j_))
            inter_seq.insert(-1, ("producer", [dgrad_w], -1))
        else:
            inter_seq.insert(-1, ("producer", [dgrad_w], -1))
            inter_seq.insert(-1, ("gemm", [wgrad_w], j_))
    else:
        inter_seq += [("producer", [dew.emb_grad], -1)]
    # the copy of the embedding gradient out of the concat gradient feeds the bulk exchange only: the fused
    # backward pushed it to the owners (kept whole when table-row-wise shards still go through a bulk exchange,
    # twrw_push bulk: an upper bound, the copy then needs only their columns)
    return inter_seq + [("ew", [] if fuse_bwd and not bulk_twrw else dew.emb_grad_copy, -1),
                        ("ew", dew.inter_bwd_tail, -1)]


@dataclasses.dataclass
class ReplicatedTables:
    """The replicated (data-parallel) tables' kernels.  They run as one group (one pooling, one local reduce,
    one optimizer kernel over all of them: FBGEMM's table-batched embedding under TorchRec's data-parallel
    sharding, HugeCTR's data-parallel embedding op); ``bucketed_per_table`` keeps one of each per table (simfuse
    before 2026-12-06).  The local reduce is the scatter-add of the ``b`` bags' lookup gradients into the
    table's dense gradient, parallel over the lookups."""

    groups: list
    pool: list
    reduce: list
    rows: list
    update: list


def replicated_tables(spec, dp_tables: list, b: int) -> ReplicatedTables:
    D, eb, grad_eb = spec.dim, DTYPE_BYTES[spec.embedding_dtype], DTYPE_BYTES[spec.grad_dtype]
    groups = ([[t] for t in dp_tables] if spec.dense_allreduce == "bucketed_per_table" else
              [dp_tables] if dp_tables else [])

    def name(prefix, ts):
        return f"{prefix}{ts[0]}" if len(ts) == 1 else prefix

    pool = [_pool_work(name("embedding_dp", ts), b, sum(spec.tables[t].pooling for t in ts), D, eb,
                       tables=len(ts), rows=sum(spec.tables[t].rows for t in ts)) for ts in groups]
    reduce = [elementwise_work(name("emb_dp_local_reduce", ts),
                               b * sum(spec.tables[t].pooling for t in ts) * D * grad_eb,
                               b * sum(spec.tables[t].pooling for t in ts) * D, spec.embedding_dtype,
                               wgs=max(1, sum(b * int(math.ceil(spec.tables[t].pooling)) for t in ts) // 64))
              for ts in groups]
    rows = [sum(spec.tables[t].rows for t in ts) for ts in groups]
    update = [elementwise_work(name("emb_update_dp", ts),
                               r * D * (eb * (2.0 + 2.0 * spec.optimizer_state_factor) + grad_eb),
                               3.0 * r * D, spec.embedding_dtype, wgs=max(1, r * D // 8192))
              for ts, r in zip(groups, rows, strict=True)]
    return ReplicatedTables(groups, pool, reduce, rows, update)


@dataclasses.dataclass
class DLRMContext:
    """What every rank's program of one graph shares."""

    spec: object
    system: object
    graph: object
    nodes: int
    g: int
    b: int
    mode: str
    knobs: object
    per_rank: object
    traffic: Traffic
    dense: DenseSchedule
    dp: ReplicatedTables
    layout: Layout

    @property
    def n(self) -> int:
        return self.nodes * self.g

    @property
    def fuse_bwd(self) -> bool:
        return self.mode == "fused" and self.spec.fuse_backward

    @property
    def twrw_h(self) -> bool:
        """Fused mode: table-row-wise shards push hierarchically (TwrwEmbeddingPush; backward: the gradient
        push's relay)."""
        return self.mode == "fused" and self.traffic.has_twrw and self.knobs.twrw_push == "hierarchical"

    @property
    def dp_in_bucket(self) -> bool:
        return self.spec.dense_allreduce == "bucketed" and bool(self.traffic.dp_tables)


def make_context(spec, system, graph, nodes: int, g: int, mode: str, knobs, per_rank, vec: bool) -> DLRMContext:
    n = nodes * g
    b = spec.global_batch // n
    traffic = placement_traffic(spec, per_rank, vec, b, n)
    fuse_bwd = mode == "fused" and spec.fuse_backward
    bulk_twrw = traffic.has_twrw and not (mode == "fused" and knobs.twrw_push == "hierarchical")
    dp_bucketed = (float(sum(spec.tables[t].rows for t in traffic.dp_tables) * spec.dim
                         * DTYPE_BYTES[spec.grad_dtype])
                   if spec.dense_allreduce == "bucketed" and traffic.dp_tables else 0.0)
    dense = dense_schedule(spec, b, fuse_bwd, bulk_twrw, dp_bucketed)
    return DLRMContext(spec, system, graph, nodes, g, b, mode, knobs, per_rank, traffic, dense,
                       replicated_tables(spec, traffic.dp_tables, b), Layout(nodes, g))


def _after(*ids) -> tuple:
    return tuple(i for i in ids if i >= 0)


def column_equivalent_tables(dims: list[int]) -> int:
    """Shards of ``dims`` columns as tables of their greatest common column count, the width one fused embedding
    kernel pools them at (:meth:`RankProgram._a2a_op`); 0 for no shards."""
    return sum(dims) // math.gcd(*dims) if dims else 0


class RankProgram:
    """One rank's program of a DLRM iteration: :meth:`build` emits its nodes into ``graph.program(rank)``."""

    def __init__(self, ctx: DLRMContext, rank: int):
        self.ctx, self.r = ctx, rank
        self.rg = ctx.graph.program(rank)
        units = ctx.per_rank[rank]
        self.units = [u for u in units if u.kind in _A2A_KINDS]
        self.tr_units = [u for u in units if u.kind in _HIER_KINDS]
        self.grad_ars: list[int] = []  # the dense gradients' all-reduces (the dense optimizer step waits for them)
        self.dp_red: list[int] = []  # the replicated tables' local reduce (bucketed: the last bucket waits for it)
        self.side: list[int] = []  # the current layer block's wgrad nodes on the side stream (async_wgrad)
        self.li = 0  # the next gradient index (its bucket closes there)
        self._sizes()

    def _sizes(self) -> None:
        """Forward sends; the backward sends the transpose (gradients back to the shard holders)."""
        c, r, t = self.ctx, self.r, self.ctx.traffic
        b, n, ceb = c.b, c.n, DTYPE_BYTES[c.spec.comm_dtype]
        local_of, node_of = np.arange(n) % c.g, np.arange(n) // c.g
        rail, peers = local_of == local_of[r], node_of == node_of[r]
        self.rail_in = twrw_rail_bytes(b, t.dim_h[r], ceb, t.twrw[r])  # what this rank's tables send each rail peer
        self.fwd_sizes = np.full(n, t.ub_all[r]) + np.where(rail, self.rail_in, 0.0)
        self.bwd_sizes = t.ub_all + np.where(rail, twrw_rail_bytes(b, t.dim_h, ceb, t.twrw), 0.0)
        self.st1_fwd = np.where(peers, twrw_stage1_bytes(c.nodes, b, t.dim_h[r], ceb, t.twrw[r]), 0.0)
        self.st1_bwd = np.where(peers, twrw_stage1_bytes(c.nodes, b, t.dim_h, ceb, t.twrw), 0.0)

    def comp(self, work, phase, deps=()) -> int:
        """A compute node of ``work`` (a KernelWork, or a ``(label, KernelWork)`` of :func:`dense_elementwise`)."""
        if isinstance(work, tuple):
            name, work = work
        else:
            name = work.name
        return self.rg.add(ComputeNode(name=name, work=work, phase=phase, deps=tuple(deps)))

    def grad_done(self, dep: int) -> None:
        """Gradient ``self.li`` is done with ``dep``: the all-reduce of the bucket it closes (bucketed)."""
        c = self.ctx
        k = None if c.spec.dense_allreduce == "grouped" else c.dense.closing.get(self.li)
        self.li += 1
        if k is not None:
            extra = tuple(self.dp_red) if k == len(c.dense.buckets) - 1 else ()
            self.grad_ars.append(self.rg.add(CollectiveNode(
                name=f"ddp_allreduce{k}", op="all_reduce", group="world", size_bytes=c.dense.buckets[k],
                stream="comm_dp", phase=f"allreduce_bucket{k}", deps=(dep, *extra))))

    def build(self) -> None:
        waits = self.forward_embeddings()
        last = self.forward_dense(waits)
        last = self.backward_top(last)
        pre_push, bwd_x, last = self.backward_interaction(last)
        tr_x = self.backward_exchange(pre_push, bwd_x, last)
        self.backward_bottom_and_updates(last, tr_x)

    # ------------------------------------------------------------------------------------------------ forward
    def _bottom_and_dp(self, gate=()) -> int:
        """The bottom MLP and the data-parallel tables' local pooling (own ``b`` bags); ``gate``: what the first
        of them waits for.  Returns the last node's id."""
        last = -1
        for w in self.ctx.dense.bottom_fwd:
            last = self.comp(w, "bottom_mlp_fwd", deps=gate if last < 0 else ())
        for w in self.ctx.dp.pool:
            last = self.comp(w, "embedding_dp_fwd")
        return last

    def _dp_and_bottom(self, gate=()) -> int:
        """``overlap`` order (HugeCTR's issue order: the data-parallel lookups, then the bottom MLP)."""
        last = -1
        for w in self.ctx.dp.pool:
            last = self.comp(w, "embedding_dp_fwd", deps=gate if last < 0 else ())
        for w in self.ctx.dense.bottom_fwd:
            last = self.comp(w, "bottom_mlp_fwd", deps=gate if last < 0 else ())
        return last

    def _input_dist(self) -> tuple:
        """The sparse ids to the shard holders: prefetch (the next batch's, own stream, from the iteration's
        start; the step ends no sooner than it) or inline (this batch's: the model-parallel lookups wait for
        it).  Returns what the lookups wait for."""
        c = self.ctx
        if not c.traffic.key_sizes.any():
            return ()
        keys = self.rg.add(AllToAllVNode(name="a2a_input", group="world", send_bytes=c.traffic.key_sizes,
                                         stream="comm_input" if c.spec.input_dist == "prefetch" else "comm"))
        return (keys,) if c.spec.input_dist == "inline" else ()

    def _a2a_op(self):
        """The All-to-All shards' embedding operator (None without any); counts the fused kernel's waves."""
        c, units = self.ctx, self.units
        if not units:
            return None
        D = c.spec.dim
        dims = [u.dim or D for u in units]
        cols, dim_eq = sum(dims), math.gcd(*dims)
        op = EmbeddingAllToAll({"tables_per_gpu": column_equivalent_tables(dims), "rows": max(u.rows for u in units),
                                "dim": dim_eq, "pooling": sum(u.pooling * (u.dim or D) for u in units) / cols,
                                "global_batch": c.spec.global_batch, "dtype": c.spec.embedding_dtype,
                                "comm_dtype": c.spec.comm_dtype, "bags_per_wg": c.spec.bags_per_wg}, c.layout,
                               c.spec.source)
        if c.mode == "fused":
            c.graph.meta["fused_waves"] = max(c.graph.meta["fused_waves"],
                                              -(-op.W // c.system.cost.slots(op.work("fused"))))
        return op

    def _twrw_forward(self, last: int, kdep: tuple) -> tuple[int, tuple]:
        """Table-row-wise shards' forward: fused, the pooling kernel pushes to the node-local reducers, which put
        on the rail; else pool, reduce inside the node (stage 1; stage 2 joins the All-to-All).  Returns (its
        last node, what an overlapped bottom MLP waits for)."""
        c, t, spec = self.ctx, self.ctx.traffic, self.ctx.spec
        D_h, eb, ceb, B = int(t.dim_h[self.r]), DTYPE_BYTES[spec.embedding_dtype], DTYPE_BYTES[spec.comm_dtype], \
            spec.global_batch
        # column-equivalent tables and their summed lookups (a shard of w columns: w / dim_h tables)
        tr_tables = sum((u.dim or spec.dim) // D_h for u in self.tr_units)
        tr_lookups = sum(u.pooling * ((u.dim or spec.dim) // D_h) for u in self.tr_units)
        if c.twrw_h:
            bags = TwrwEmbeddingPush.bags_for(c.b, 4)  # _pool_work's 4 bags per workgroup, whole ones per rank
            work = _pool_work("embedding_twrw", B, tr_lookups, D_h, eb, tables=tr_tables, bags_per_wg=bags,
                              out_eb=ceb) if self.tr_units else None
            op = TwrwEmbeddingPush(work, c.layout, t.twrw, self.r, B, bags, t.dim_h, ceb, spec.source)
            return self.rg.add(FusedNode(name="embedding_twrw_fused", op=op, group="world", knobs=c.knobs,
                                         deps=_after(last, *kdep), wait_phase="a2a_twrw_fwd_exposed")), ()
        if not t.has_twrw:
            return last, ()
        tr_dep = last
        if self.tr_units:
            tr_dep = self.comp(_pool_work("embedding_twrw", B, tr_lookups, D_h, eb, tables=tr_tables, out_eb=ceb),
                               "embedding_fwd", deps=kdep)
        tr_dep = self.rg.add(AllToAllVNode(name="a2a_fwd_intra", group="world", send_bytes=self.st1_fwd,
                                           stream="comm", deps=_after(tr_dep)))
        return tr_dep, (tr_dep,)

    def forward_embeddings(self) -> tuple:
        """The lookups and their exchange (bulk: the bottom MLP and data-parallel pooling first, the
        model-parallel embedding after them; overlap, HugeCTR train_intra_iteration_overlap,
        docs/hugectr_baseline.md: the model-parallel embedding first, the rest while its All-to-All is in
        flight).  Returns what the interaction waits for."""
        c, rg = self.ctx, self.rg
        kdep = self._input_dist()
        overlap = c.spec.schedule == "overlap"
        last = self._bottom_and_dp() if not overlap else -1
        op = self._a2a_op()
        # gate: what an overlapped bottom MLP waits for (HugeCTR: the model forward, intra-node reduction included)
        tr_dep, gate = self._twrw_forward(last, kdep)
        if c.mode == "baseline":
            if op is not None:
                last = self.comp(op.work("compute"), "embedding_fwd", deps=kdep)
            waits = (rg.add(AllToAllVNode(name="a2a_fwd", group="world", send_bytes=self.fwd_sizes, stream="comm",
                                          deps=_after(max(last, tr_dep)))),)
        else:  # the fused kernel pushes the All-to-All shards; table-row-wise stage 2 stays a bulk exchange
            if op is not None:
                a2a = rg.add(FusedNode(name="embedding_fwd_fused", op=op, group="world", knobs=c.knobs,
                                       deps=_after(last, *kdep), wait_phase="a2a_fwd_exposed"))
            else:
                a2a = rg.add(AllToAllVNode(name="a2a_fwd", group="world", send_bytes=np.zeros(c.n), stream="comm",
                                           deps=_after(last)))
            waits = (a2a,)
            if c.twrw_h:
                waits += (tr_dep,)
            elif c.traffic.has_twrw:
                waits += (rg.add(AllToAllVNode(name="a2a_fwd_rail", group="world",
                                               send_bytes=self.fwd_sizes - c.traffic.ub_all[self.r],
                                               stream="comm", deps=(tr_dep,))),)
        if overlap:
            self._dp_and_bottom(gate)
        return waits

    def forward_dense(self, waits: tuple) -> int:
        last, first = -1, True
        for w in self.ctx.dense.inter_fwd:
            last = self.comp(w, "interaction_fwd", deps=waits if first else ())
            first = False
        for w in self.ctx.dense.top_fwd:
            last = self.comp(w, "top_mlp_fwd")
        return last

    # ----------------------------------------------------------------------------------------------- backward
    def bwd_pair(self, pair, phase, last) -> tuple[int, int]:
        """An MLP / cross layer's backward: its element-wise kernels, dgrad and wgrad GEMMs (the wgrad last, the
        dgrad before it unless the layer has none).  With ``async_wgrad`` the wgrad runs on the ``compute_wgrad``
        stream once the output gradient exists, beside the dgrad (HugeCTR mlp_layer.cu bprop: wgrad on
        comp_overlap_stream; not for a layer without dgrad, the first bottom layer).  Returns (the main stream's
        last node, the node the layer's weight gradient is done with)."""
        *pre, wg = pair
        if not (self.ctx.spec.async_wgrad and pre and not isinstance(pre[-1], tuple)):
            for w in pair:
                last = self.comp(w, phase)
            return last, last
        for w in pre[:-1]:
            last = self.comp(w, phase)
        self.side.append(self.rg.add(ComputeNode(name=wg.name, work=wg, phase=phase, stream="compute_wgrad",
                                                 deps=(last,))))
        return self.comp(pre[-1], phase), self.side[-1]

    def join(self, last) -> int:
        """The end of a layer block: the main stream waits for the block's wgrads (HugeCTR joins the overlap
        stream at the end of each MLP / MultiCross layer's bprop)."""
        if not self.side:
            return last
        j = self.rg.add(DelayNode(name="wgrad_join", time_s=0.0, deps=(self.side[-1],)))
        self.side.clear()
        return j

    def backward_top(self, last: int) -> int:
        for pair in self.ctx.dense.top_bwd:
            last, wdone = self.bwd_pair(pair, "top_mlp_bwd", last)
            self.grad_done(wdone)
        return self.join(last)

    def _push(self, works):
        """The fused backward's push of d(embeddings) from the kernel producing it (table-row-wise gradients
        over the rail, relayed inside the holder node)."""
        c, t = self.ctx, self.ctx.traffic
        pwork = works[0][1] if isinstance(works[0], tuple) else works[0]
        if c.twrw_h:
            return PushKernel(pwork, np.arange(c.n), self.bwd_sizes, tag="a2a_bwd_fused", layout=c.layout,
                              relay_bytes=self.bwd_sizes - t.ub_all,
                              relay_in_bytes=self.rail_in, relay_channel="a2a_bwd_twrw")
        return PushKernel(pwork, np.arange(c.n), t.ub_all, tag="a2a_bwd_fused", layout=c.layout)

    def backward_interaction(self, last: int) -> tuple:
        """Per cross layer its element-wise kernels and dgrad + wgrad pairs (``inter_seq``).  Returns (the node
        before the fused push, the fused push or None, the last node)."""
        pre_push, bwd_x = -1, None
        for kind, works, j in self.ctx.dense.inter_seq:
            if kind == "producer" and self.ctx.fuse_bwd:
                pre_push = last
                bwd_x = last = self.rg.add(FusedNode(name="interaction_bwd_fused", op=self._push(works),
                                                     group="world", knobs=self.ctx.knobs, wait_phase="a2a_bwd_wait"))
                continue
            if kind == "gemm":
                last, wdone = self.bwd_pair(works, "interaction_bwd", last)
            else:
                for w in works:
                    last = self.comp(w, "interaction_bwd")
                wdone = last
            if j >= 0:
                self.grad_done(wdone)
        return pre_push, bwd_x, self.join(last)

    def backward_exchange(self, pre_push: int, bwd_x, last: int):
        """The embedding gradients' exchange: bulk (baseline), the relayed table-row-wise gradients (fused,
        hierarchical) or their bulk rail exchange; then table-row-wise stage 1.  Sets ``self.bwd_x``; returns
        what the table-row-wise update waits for."""
        c, rg = self.ctx, self.rg
        tr_x = None
        if not c.fuse_bwd:
            bwd_x = rg.add(AllToAllVNode(name="a2a_bwd", group="world", send_bytes=self.bwd_sizes, stream="comm",
                                         deps=(last,)))
            tr_x = bwd_x
        elif c.twrw_h:  # the relayed table-row-wise gradients: their own exchange, on the communication stream
            relay = RelayWait("a2a_bwd_twrw", self.rail_in, c.nodes, c.g)
            tr_x = rg.add(FusedNode(name="a2a_bwd_twrw", op=relay, group="world", stream="comm", knobs=c.knobs,
                                    wait_phase="a2a_bwd_twrw_wait", deps=(pre_push,)))
        elif c.traffic.has_twrw:
            tr_x = rg.add(AllToAllVNode(name="a2a_bwd_rail", group="world", send_bytes=self.bwd_sizes -
                                        c.traffic.ub_all, stream="comm", deps=(last,)))
        if c.traffic.has_twrw and not (c.fuse_bwd and c.twrw_h):
            tr_x = rg.add(AllToAllVNode(name="a2a_bwd_intra", group="world", send_bytes=self.st1_bwd, stream="comm",
                                        deps=(tr_x,)))
        self.bwd_x = bwd_x
        return tr_x

    def backward_bottom_and_updates(self, last: int, tr_x) -> None:
        """The replicated tables' local reduce (bucketed: their gradients ride in the last DDP bucket;
        bucketed_per_table: each table's gradient its own all-reduce), the bottom MLP's backward, the grouped
        all-reduce, and the optimizer steps."""
        c, spec, rg, dp = self.ctx, self.ctx.spec, self.rg, self.ctx.dp
        bwd_x = self.bwd_x
        dgrad, grad_eb = last, DTYPE_BYTES[spec.grad_dtype]
        dp_ars = []
        if c.dp_in_bucket:
            self.dp_red.append(self.comp(dp.reduce[0], "embedding_update", deps=(dgrad,)))
        for i, ts in enumerate(dp.groups if spec.dense_allreduce == "bucketed_per_table" else ()):
            red = self.comp(dp.reduce[i], "embedding_update", deps=(dgrad,))
            dp_ars.append(rg.add(CollectiveNode(name=f"dp_table_allreduce{ts[0]}", op="all_reduce", group="world",
                                                size_bytes=float(dp.rows[i] * spec.dim * grad_eb),
                                                stream="comm_dp", phase="allreduce_dp_tables", deps=(red,))))
        for pair in c.dense.bot_bwd:
            last, wdone = self.bwd_pair(pair, "bottom_mlp_bwd", last)
            self.grad_done(wdone)
        last = self.join(last)
        grouped = spec.dense_allreduce == "grouped"
        if grouped:  # HugeCTR grouped_all_reduce: the data-parallel tables' local reduce into their dense
            # gradients, then one all-reduce of every dense and data-parallel-table gradient (docs/hugectr_baseline.md)
            for w in dp.reduce:
                last = self.comp(w, "embedding_update")
            grouped_bytes = float(c.dense.dense_params * grad_eb + sum(spec.tables[t].rows * spec.dim for t in
                                                                       c.traffic.dp_tables) * grad_eb)
            self.grad_ars.append(rg.add(CollectiveNode(name="grouped_allreduce", op="all_reduce", group="world",
                                                       size_bytes=grouped_bytes, stream="comm_dp",
                                                       phase="allreduce_grouped", deps=(last,))))
        self._sparse_updates(bwd_x, tr_x)
        for i, w in enumerate(dp.update):  # the optimizer step over the tables, once their reduced gradient is in
            self.comp(w, "embedding_update", deps=(self.grad_ars[-1],) if grouped else
                      (bwd_x, self.grad_ars[-1]) if c.dp_in_bucket else (bwd_x, dp_ars[i]))
        self._dense_update()

    def _sparse_updates(self, bwd_x, tr_x) -> None:
        spec, D, B = self.ctx.spec, self.ctx.spec.dim, self.ctx.spec.global_batch
        for label, units, dep in (("emb_update", self.units, bwd_x), ("emb_update_twrw", self.tr_units, tr_x)):
            if units:
                for w in sparse_update_works(label, spec, B, [(u.rows, u.pooling, u.dim or D) for u in units]):
                    dep = self.comp(w, "embedding_update", deps=(dep,))

    def _dense_update(self) -> None:
        """The dense optimizer step.  Adagrad per parameter (HugeCTR adagrad_optimizer.cu
        ada_grad_update4_kernel): read the fp32 weight, the gradient and the fp32 accumulator, write weight and
        accumulator; with a non-fp32 dense dtype the weights are cast to it before the forward (HugeCTR
        model_pipeline.cpp network_init conv_weight_): read 4, write the dense element.  SGD: w -= lr * g on the
        dense-dtype weights (PyTorch foreach SGD)."""
        spec, params = self.ctx.spec, self.ctx.dense.dense_params
        dt, grad_eb = spec.dense_dtype, DTYPE_BYTES[spec.grad_dtype]
        if spec.dense_optimizer == "adagrad":
            update_bytes = 4 + grad_eb + 4 + 4 + 4 + ((4 + DTYPE_BYTES[dt]) if dt != "fp32" else 0)
            self.comp(elementwise_work("dense_update", params * update_bytes, 5.0 * params, "fp32",
                                       wgs=max(1, params // 8192)), "dense_update", deps=tuple(self.grad_ars))
        elif spec.dense_optimizer == "sgd":
            self.comp(elementwise_work("dense_update", params * (2.0 * DTYPE_BYTES[dt] + grad_eb), 2.0 * params, dt,
                                       wgs=max(1, params // 8192)), "dense_update", deps=tuple(self.grad_ars))
