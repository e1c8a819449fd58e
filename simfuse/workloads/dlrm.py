"""One DLRM training iteration, bulk-synchronous (baseline) or with fused embedding + All-to-All.

Operator graph per rank (``b = global_batch / ranks`` samples; tables model-parallel, the rest data-parallel):

forward   bottom MLP -> embedding pooling (own tables, all ``B`` bags) -> All-to-All of pooled rows
          -> interaction (dot or DCN) -> top MLP
backward  top MLP (dgrad + wgrad) -> interaction backward -> All-to-All of embedding gradients to the table
          owners -> bottom MLP backward -> embedding update (sparse, rows + optimizer state)
          dense gradients are bucketed (``ddp_bucket_mib``) in backward order and all-reduced as soon as a bucket
          is full, on the network while backward compute goes on (as DDP does); a bucket's all-reduce starts when
          every rank has produced it, one at a time (one communication stream).

Input distribution (``embedding.input_dist``, both modes): before a shard can pool, the ids of every rank's
``b`` bags for that shard must reach it: an All-to-All-v (``a2a_input``) in which each rank sends each holder
``b x (ids per bag the holder serves x key bytes + shards it holds x 4)`` (ids of its rows for a row shard, all
of the table's for a column shard; one int32 length per bag and shard: TorchRec's KJT input_dist, HugeCTR's data
distributor); with ``embedding.ids_dedup`` each distinct bag once plus an index per bag
(:func:`simfuse.workloads.ids.ids_bytes`).  ``prefetch`` (default) runs the next batch's on its own stream (``comm_input``) from the
iteration's start -- it shares the links with everything else and the step ends no sooner than it; ``inline``
runs this batch's first on the communication stream and the model-parallel lookups wait for it; ``none`` leaves
it out (the model before 2026-12-04).  Data-parallel tables need no ids from other ranks.

Baseline: each All-to-All is a bulk collective after its producer kernel and a launch gap; a pair of ranks
exchanges data once both have launched it.  Fused: the forward embedding kernel pushes pooled rows as its
workgroups finish (:class:`~simfuse.fused.EmbeddingAllToAll`); with ``fuse_backward`` the interaction-backward
kernel pushes each wave's share of the embedding gradients as it completes.

Hierarchical shards (``table_row_wise`` and ``grid``: row shards over the ``g`` GPUs of a node, all ``D`` columns
or ``D / k`` of them) share one path: a rank's volumes scale with the columns it holds in such shards (stage 1
``N b w e`` to each local peer, stage 2 ``b w e`` on the rail, ``w`` those columns).  Their kernels count a shard
of ``w`` columns as ``w / dim_h`` tables of ``dim_h`` columns, ``dim_h`` the gcd of the widths in the plan (the
convention of the All-to-All shards' kernel): exact when every such shard has one width (table-row-wise only, or
grid at one ``k``); with mixed widths a wide shard is priced as ``w / dim_h`` narrower tables: its index
reads count once per column-equivalent table, and a calibrated kernel model also sees more, narrower rows
(the per-row terms and the slots of a narrower compiled layout; roughly +10% pooling time for a 128-column fp32
shard priced at ``dim_h`` 64, by the review of 2026-12-03 -- not measured).

Simulation modes: ``classes``: one representative per class of alike ranks is simulated: one class for even
placements (exact); for uneven ones the *orbit classes* (:func:`~simfuse.graph.symmetry.orbit_classes`: ranks
that see the same placement at every node offset, on their rail and on their node) when the fabric allows them
and there are at most ``ORBIT_MAX_CLASSES``, which the executor runs as full simulation runs every rank (exact
up to the local order of fused pushes, measured in the tests), else the ranks with the same table load (and node
composition), an approximation (:meth:`~simfuse.network.Fabric.set_rank_classes`); ``full``: every rank is
simulated on the physical links; ``auto`` (default): ``classes``, except ``full`` for uneven placements without
orbit classes up to ``FULL_SIM_MAX_RANKS`` ranks.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field

import numpy as np

from ..collectives import Layout
from ..collectives.groups import world
from ..errors import SpecError
from ..fused.knobs import DTYPE_BYTES, FusedKnobs
from ..fused.ops import EmbeddingAllToAll, PushKernel, RelayWait, TwrwEmbeddingPush
from ..graph import AllToAllVNode, CollectiveNode, ComputeNode, DelayNode, FusedNode, Graph
from ..spec import DLRMSpec
from .dense import elementwise_work, gemm_work
from .ids import spec_ids_bytes
from .placement import place_tables, rank_classes
from .planner import HIER_SHARDINGS, RankUnits, check_batch_split
from .result import IterationResult
from .sparse_backward import (  # noqa: F401  (re-exported: the sparse backward's formulas)
    RADIX_DIGIT_BITS,
    SORT_PAIR_BYTES,
    expected_distinct_rows,
    radix_digits,
    sort_bytes,
    sparse_update_bytes,
)

#: sharding types whose shards pool for every bag and send their result straight to the bag owners
_A2A_KINDS = ("table_wise", "row_wise", "column_wise")
#: sharding types whose shards are row shards over the GPUs of one node: pooled, reduced inside the node (stage 1)
#: and sent on the rails (stage 2); table-row-wise (all columns) and grid (``D / k`` columns per node)
_HIER_KINDS = HIER_SHARDINGS
#: sharding types whose shards need the ids of other ranks' bags (all but data-parallel)
_SHARDED_KINDS = _A2A_KINDS + _HIER_KINDS


def _pool_work(label: str, bags: int, lookups: float, dim: int, eb: int, tables: int = 1, bags_per_wg: int = 4,
               rows: int | None = None, out_eb: int | None = None):
    """An embedding-bag pooling kernel: ``bags`` bags of ``lookups`` rows (summed over ``tables``), int64 ids;
    ``rows``: rows per table when known (the calibrated model's L2-hit term; None: a table far beyond the L2);
    ``out_eb``: bytes per element of the pooled rows written (the All-to-All payload's dtype, HugeCTR's fp16
    outputs of fp32 tables; None: the table's ``eb``)."""
    from ..costs import KernelWork

    wgs = max(1, tables * math.ceil(bags / bags_per_wg))
    total = bags * lookups * (dim * eb + 8) + tables * bags * dim * (eb if out_eb is None else out_eb)
    # one workgroup pools ``bags_per_wg`` bags of one table: the FLOP (and rows gathered) are split over all of them
    return KernelWork("embedding_bag", wgs, bags * lookups * dim / wgs, total / wgs,
                      "fp32" if eb == 4 else "fp16", "compute", (("bags", bags), ("dim", dim),
                                                                ("pooling", lookups / tables), ("tables", tables))
                      + ((("rows", rows),) if rows else ()))


#: ``sim_mode="auto"`` simulates every rank when placement is uneven, its orbit classes are not available and
#: there are at most this many ranks.
FULL_SIM_MAX_RANKS = 64
#: uneven placements simulate one representative per orbit class (:func:`simfuse.graph.symmetry.orbit_classes`,
#: the executor's exact class mode) when there are at most this many; else the load classes (approximate)
ORBIT_MAX_CLASSES = 64


@dataclass
class DLRMExtras:
    """What a DLRM result carries beyond the shared :class:`~simfuse.workloads.result.IterationResult`."""

    plan: object = None   # the sharding Plan used (None: placement table_wise / row_wise)
    knobs: object = None  # the FusedKnobs used
    global_batch: int = 0
    tuned: bool = False   # knobs chosen by tuning (simfuse.workloads.dlrm_workload.TUNE_GRID)
    fused_waves: int = 0  # most waves of a simulated rank's fused embedding kernel (0: none)
    dense_fusion: str = ""  # the dense element-wise kernel inventory used (DLRMSpec.dense_fusion)


def _dense_layers(spec: DLRMSpec, b: int):
    """Forward GEMMs (label, m, n, k) of the data-parallel part: bottom MLP, interaction (DCN: per cross layer the
    low-rank ``v`` and ``u`` projections; dot: none) and top MLP.  Their element-wise kernels:
    :func:`dense_elementwise`."""
    T, D = len(spec.tables), spec.dim
    bottom = []
    d_in = spec.dense_features
    for i, out in enumerate(spec.bottom_mlp):
        bottom.append((f"bottom{i}", b, out, d_in))
        d_in = out
    inter = []
    F = T + 1
    if spec.interaction == "dcn":
        x = F * D
        for i in range(spec.dcn_layers):
            inter.append((f"dcn{i}_v", b, spec.dcn_low_rank, x))
            inter.append((f"dcn{i}_u", b, x, spec.dcn_low_rank))
        top_in = x
    else:
        top_in = F * (F - 1) // 2 + D
    top = []
    d_in = top_in
    for i, out in enumerate(spec.top_mlp):
        top.append((f"top{i}", b, out, d_in))
        d_in = out
    return bottom, inter, top


@dataclass
class DenseElementwise:
    """The dense network's kernels other than its GEMMs, per place in the iteration (lists of
    ``(label, KernelWork)``, in issue order).  ``*_fwd[i]`` run after layer ``i``'s forward GEMM,
    ``*_bwd[i]`` before layer ``i``'s dgrad and wgrad GEMMs; ``inter_fwd[l]`` after cross layer ``l``'s two
    GEMMs, ``inter_bwd_pre[l]`` / ``inter_bwd_post[l]`` before / after its four backward GEMMs; ``emb_grad``
    writes the gradient of the pooled embeddings (the kernel the fused backward pushes from); ``emb_grad_copy``
    copies the embedding part of that gradient out for the bulk exchange (the fused backward, which pushes it to
    the owners, does without them)."""

    bottom_fwd: list
    bottom_bwd: list
    top_fwd: list
    top_bwd: list
    inter_fwd_head: list
    inter_fwd: list
    inter_bwd_head: list
    inter_bwd_pre: list
    inter_bwd_post: list
    emb_grad: object
    inter_bwd_tail: list
    loss_fwd: list
    loss_bwd: list
    emb_grad_copy: list = field(default_factory=list)
    #: label -> op class (copy, relu, relu_bwd, reduce, mul, add, fma, memset, loss, dot) of every kernel above
    op_classes: dict = field(default_factory=dict)

    def all(self) -> list:
        """Every kernel of one iteration (forward and backward)."""
        out = [w for group in (self.bottom_fwd, self.bottom_bwd, self.top_fwd, self.top_bwd, self.inter_fwd,
                               self.inter_bwd_pre, self.inter_bwd_post) for ws in group for w in ws]
        return out + self.inter_fwd_head + self.inter_bwd_head + ([self.emb_grad] if self.emb_grad else []) + \
            self.emb_grad_copy + self.inter_bwd_tail + self.loss_fwd + self.loss_bwd


def dense_elementwise(spec: DLRMSpec, b: int) -> DenseElementwise:
    """The element-wise kernels of the dense network at ``b`` samples per GPU, split into kernels as
    ``spec.dense_fusion`` says.  Bytes are HBM traffic in the dense dtype (every operand read once, every output
    written once; bandwidth-bound, priced like every ``elementwise`` kernel).  ReLU follows every MLP layer but
    the top MLP's last (DLRM's networks; MLPerf's ``train.py``).

    ``epilogue`` (HugeCTR v23.08.00-v24.06.00, the MLPerf submissions' code; line numbers at v23.08.00):

    * MLP layers (``layers/mlp_layer.cu``, ``functors/fused_gemm_functors.cu:50-55, 124``): bias + ReLU in the
      forward GEMM's epilogue (``CUBLASLT_EPILOGUE_RELU_AUX_BIAS``), dReLU + bias gradient in the dgrad GEMM's
      (``DRELU_BGRAD``): no kernel of their own, except for an MLP whose last layer has a ReLU (the bottom MLP):
      its output is copied as the mask (``mlp_layer.cu:380-386``, 2 ``b n`` elements moved) and the backward runs
      ``reverse_relu_kernel`` (``fused_fc_layer_functors.cu:132-150``: mask, dY in, dReLU out, 3 ``b n``).
    * Concat (``layers/concat_layer.cu``): one copy kernel per input, forward and backward (2 ``b w`` each).
    * MultiCross, DCNv2 (``layers/multi_cross_layer.cu``, ``Core23TempMultiCross*Functorv2``): per cross layer
      forward, after the ``x U`` and ``(x U) V + bias`` GEMMs, ``fused_matrix_elementwise_dot_add``
      (``x0 .* h + x_l``: 3 reads, 1 write of ``b x``; in layer 0 ``x_l`` is ``x0``, one array read twice); backward: a memset of the ``dX`` accumulator (1), per
      layer ``fused_mul_fma3`` (``S0 = dY .* x0``, ``dX += dY .* H``: 4 reads, 2 writes) before its four
      GEMMs (the residual's gradient rides in the last GEMM's ``beta = 1``), and at the end ``matrix_add`` of the
      accumulator into the input gradient (3): the embedding gradient's producer.
    * Loss: ``BinaryCrossEntropy_Kernel`` (``src/loss.cu:333-380``), loss and its gradient in one kernel.

    ``unfused`` (PyTorch's autograd kernels; the step of ``experiments/dlrm_dense_step.py``, whose per-kernel
    table this inventory was checked against): bias in the GEMM epilogue (cuBLASLt ``addmm``), every other op
    its own kernel -- ReLU forward (2 ``b n``) and backward (3), a bias-gradient reduction per layer (reads
    ``b n``); the concat one kernel (2 ``b x``), its backward a contiguous copy of the embedding part; per
    cross layer forward a multiply (``x0 * h``) and an add (``+ x_l``), 3 ``b x`` each; backward two
    multiplies (``dY * x0``, ``dY * h``), the bias reduction, then two adds after its GEMMs (the residual into
    the ``v`` path's dgrad, the ``dY * h`` part into ``dx0``), the last of which is the embedding gradient's
    producer; the loss a forward and a backward kernel.

    The dot interaction (``interaction.kind: dot``): one kernel forward (the pairwise dot products) and one
    backward, under both settings (as before this option)."""
    from ..costs import KernelWork

    dt = spec.dense_dtype
    eb = DTYPE_BYTES[dt]
    T, D = len(spec.tables), spec.dim
    F = T + 1
    unfused = spec.dense_fusion == "unfused"

    classes: dict = {}

    def ew(label: str, elems_moved: float, flops: float, what: str) -> tuple[str, KernelWork]:
        """(label, kernel); ``what``: its op class (``DenseElementwise.op_classes``).  The concat copies (into or
        out of the interaction input's column slices) are strided: ``device.strided_copy`` prices them."""
        classes[label] = what
        return label, elementwise_work(label, elems_moved * eb, flops, dt, strided=label.startswith("concat"))

    # the dot interaction: one kernel forward (the pairwise dot products of the F features) and one backward
    dot = None if spec.interaction == "dcn" else \
        ew("dot", b * F * D + b * F * F, 2.0 * b * F * F * D, "dot")

    def mlp(prefix: str, widths, last_relu: bool):
        fwd, bwd = [], []
        n_layers = len(widths)
        for i, n in enumerate(widths):
            relu = last_relu or i < n_layers - 1
            f, bk = [], []
            if unfused:
                if relu:
                    f.append(ew(f"{prefix}{i}_relu", 2.0 * b * n, b * n, "relu"))
                    bk.append(ew(f"{prefix}{i}_relu_bwd", 3.0 * b * n, b * n, "relu_bwd"))
                bk.append(ew(f"{prefix}{i}_bias_grad", 1.0 * b * n, b * n, "reduce"))
            elif relu and i == n_layers - 1:  # HugeCTR: the mask copy and reverse_relu of a last ReLU layer
                f.append(ew(f"{prefix}{i}_mask_copy", 2.0 * b * n, 0.0, "copy"))
                bk.append(ew(f"{prefix}{i}_reverse_relu", 3.0 * b * n, b * n, "relu_bwd"))
            fwd.append(f)
            bwd.append(bk)
        return fwd, bwd

    L = spec.dcn_layers if spec.interaction == "dcn" else 0
    if spec.dense_fusion == "legacy":  # one kernel forward and backward (emb_grad None: the last dgrad GEMM)
        one = dot if dot else ew("dcn_ew", 3 * b * F * D * max(1, L), 3 * b * F * D, "fma")
        inter_fwd = [[] for _ in range(L)]
        if L:
            inter_fwd[-1] = [one]
        none_b, none_t = [[] for _ in spec.bottom_mlp], [[] for _ in spec.top_mlp]
        return DenseElementwise(bottom_fwd=none_b, bottom_bwd=list(none_b), top_fwd=none_t, top_bwd=list(none_t),
                                inter_fwd_head=[] if L else [one], inter_fwd=inter_fwd,
                                inter_bwd_head=[one] if L else [], inter_bwd_pre=[[] for _ in range(L)],
                                inter_bwd_post=[[] for _ in range(L)], emb_grad=None if L else one,
                                inter_bwd_tail=[], loss_fwd=[], loss_bwd=[], op_classes=classes)
    bottom_fwd, bottom_bwd = mlp("bottom", spec.bottom_mlp, True)
    top_fwd, top_bwd = mlp("top", spec.top_mlp, False)
    inter_fwd: list = [[] for _ in range(L)]
    pre: list = [[] for _ in range(L)]
    post: list = [[] for _ in range(L)]
    head_f: list = []
    head_b: list = []
    tail: list = []
    emb_copy: list = []
    if spec.interaction == "dcn":
        x = F * D
        bx = float(b) * x
        if unfused:
            head_f.append(ew("concat", 2.0 * bx, 0.0, "copy"))
            for li in range(L):
                inter_fwd[li] = [ew(f"dcn{li}_mul", 3.0 * bx, bx, "mul"), ew(f"dcn{li}_add", 3.0 * bx, bx, "add")]
                pre[li] = [ew(f"dcn{li}_mul_x0_bwd", 3.0 * bx, bx, "mul"), ew(f"dcn{li}_mul_h_bwd", 3.0 * bx, bx, "mul"),
                           ew(f"dcn{li}_bias_grad", bx, bx, "reduce")]
                post[li] = [ew(f"dcn{li}_add_residual_bwd", 3.0 * bx, bx, "add")]
                if li > 0:
                    post[li].append(ew(f"dcn{li}_accumulate_dx0", 3.0 * bx, bx, "add"))
            emb_grad = ew("dcn0_accumulate_dx0", 3.0 * bx, bx, "add")
            emb_copy.append(ew("concat_bwd_embeddings", 2.0 * b * T * D, 0.0, "copy"))
        else:
            head_f += [ew("concat_embeddings", 2.0 * b * T * D, 0.0, "copy"),
                       ew("concat_bottom", 2.0 * b * D, 0.0, "copy")]
            for li in range(L):
                # layer 0 passes x0 as both operands (``x_l`` is ``x0``): two arrays read, not three
                inter_fwd[li] = [ew(f"dcn{li}_dot_add", (4.0 if li else 3.0) * bx, 2.0 * bx, "fma")]
                pre[li] = [ew(f"dcn{li}_mul_fma3", 6.0 * bx, 3.0 * bx, "fma")]
            head_b.append(ew("dcn_dx_memset", bx, 0.0, "memset"))
            emb_grad = ew("dcn_dx_add", 3.0 * bx, bx, "add")
            emb_copy.append(ew("concat_bwd_embeddings", 2.0 * b * T * D, 0.0, "copy"))
            tail.append(ew("concat_bwd_bottom", 2.0 * b * D, 0.0, "copy"))
    else:
        head_f.append(dot)
        emb_grad = dot
    if unfused:
        loss_f, loss_b = [ew("loss", 2.0 * b, 4.0 * b, "loss")], [ew("loss_bwd", 3.0 * b, 4.0 * b, "loss")]
    else:
        loss_f, loss_b = [ew("bce_loss", 3.0 * b, 8.0 * b, "loss")], []
    return DenseElementwise(bottom_fwd, bottom_bwd, top_fwd, top_bwd, head_f, inter_fwd, head_b, pre, post,
                            emb_grad, tail, loss_f, loss_b, emb_copy, classes)


def sparse_update_works(label: str, spec: DLRMSpec, bags: int, shards) -> list[tuple[str, object]]:
    """The sparse backward of a rank's model-parallel shards, the kernels real implementations run (HugeCTR: index
    calculation, local reduce, update; FBGEMM's fused TBE backward), in order: the radix sort of the lookups'
    (id, position) pairs (a histogram pass and one scatter pass per 8-bit digit of the rank's key space), the
    run-length encode of the sorted ids, and one fused kernel that reduces each distinct id's gradients and
    applies the optimizer (:func:`sparse_update_bytes` per shard).  ``shards``: ``(rows, lookups per bag,
    columns)`` per shard; a column shard has its own ids.  Returns ``(name, KernelWork)`` pairs.  The scatter
    passes are priced as strided copies (``device.strided_copy`` beyond the L2: their writes go to 256 buckets,
    not one stream); checked, not fitted, against CUB and a Triton segment-reduce + Adagrad on an H100
    (experiments/embedding_backward.py, experiments/results/embedding_backward/README.md)."""
    shards = [(float(r), float(p), float(c)) for r, p, c in shards if p > 0 and c > 0]
    if not shards or bags <= 0:
        return []
    if spec.sparse_backward == "bytes":  # simfuse before 2026-12-05 (SPARSE_BACKWARDS)
        eb, ceb = DTYPE_BYTES[spec.embedding_dtype], DTYPE_BYTES[spec.comm_dtype]
        lc, cols = sum(p * c for _, p, c in shards), sum(c for _, _, c in shards)
        nbytes = bags * lc * eb * (2.0 + 2.0 * spec.optimizer_state_factor) + bags * cols * ceb
        return [(label, elementwise_work(label, nbytes, bags * lc * 3.0, spec.embedding_dtype,
                                         wgs=max(1, int(cols * bags // (64 * spec.dim)))))]
    n = bags * sum(p for _, p, _ in shards)          # the rank's lookups: one (id, position) pair each
    distinct = sum(expected_distinct_rows(r, bags * p) for r, p, _ in shards)
    hist, per_pass, enc = sort_bytes(n, sum(r for r, _, _ in shards), distinct)
    wgs, sd = max(1, int(n // 512)), spec.embedding_dtype  # programs of 512 ids: the device fills from 68k ids
    works = [(f"{label}_sort_hist", elementwise_work(label, hist, n, sd, wgs=wgs))]
    works += [(f"{label}_sort_pass{i}", elementwise_work(label, per_pass, n, sd, wgs=wgs, strided=True))
              for i in range(radix_digits(sum(r for r, _, _ in shards)))]
    works.append((f"{label}_unique", elementwise_work(label, enc, n, sd, wgs=wgs)))
    eb, ceb = DTYPE_BYTES[spec.embedding_dtype], DTYPE_BYTES[spec.comm_dtype]
    upd = sum(sparse_update_bytes(eb, ceb, spec.optimizer_state_factor, bags, r, p, c) for r, p, c in shards)
    cols = sum(c for _, _, c in shards)
    works.append((label, elementwise_work(label, upd, 3.0 * bags * sum(p * c for _, p, c in shards), sd,
                                          wgs=max(1, int(cols * bags // (64 * spec.dim))))))
    return works


def _buckets(grads_order: list[float], bucket_bytes: float) -> tuple[list[float], dict[int, int]]:
    """DDP buckets in backward order: sizes, and for each bucket the index of the layer that closes it."""
    buckets: list[float] = []
    layer_bucket: list[int] = []
    acc = 0.0
    for gb in grads_order:
        acc += gb
        layer_bucket.append(len(buckets))
        if acc >= bucket_bytes:
            buckets.append(acc)
            acc = 0.0
    if acc > 0:
        buckets.append(acc)
    closes: dict[int, int] = {}
    for i, bk in enumerate(layer_bucket):
        closes[bk] = i
    return buckets, closes


def build_dlrm_graph(spec: DLRMSpec, system, nodes: int, *, gpus_per_node: int | None = None, mode: str = "fused",
                     sim_mode: str = "auto", knobs: FusedKnobs | None = None, plan=None) -> Graph:
    """The operator graph of one training iteration (a graph builder: nodes only, no simulation).

    ``sim_mode``: ``classes`` emits one program per class of alike ranks (orbit classes where available, else
    same table load and node composition; see the module docstring); ``full`` one per rank; ``auto``:
    ``classes``, except ``full`` for uneven placements without orbit classes up to ``FULL_SIM_MAX_RANKS`` ranks.

    ``plan``: a :class:`~simfuse.workloads.planner.Plan` (forced or planned elsewhere); without one,
    ``placement: planned`` plans here for ``mode`` and the other placements use :func:`place_tables`.  The plan
    used is in ``graph.meta["plan"]``.  Traffic per sharding type: see :mod:`simfuse.workloads.planner`."""
    if mode not in ("fused", "baseline"):
        raise SpecError("<argument>", "mode", f"unknown mode {mode!r}; expected fused or baseline")
    if sim_mode not in ("auto", "classes", "full"):
        raise SpecError("<argument>", "sim_mode", f"unknown {sim_mode!r}")
    topology = system.topology
    g = gpus_per_node or topology.scale_up.gpus_per_node
    n = nodes * g
    B, D = spec.global_batch, spec.dim
    check_batch_split(spec, nodes, g)
    b = B // n
    knobs = knobs or FusedKnobs()
    eb = DTYPE_BYTES[spec.embedding_dtype]
    ceb = DTYPE_BYTES[spec.comm_dtype]  # the embedding All-to-Alls' payload (fwd and bwd), e.g. fp16 under HugeCTR AMP
    if plan is None and spec.placement == "planned":
        from .planner import plan_tables

        plan = plan_tables(spec, system, nodes, g, mode)
    if plan is not None:
        if plan.n_ranks != n:
            raise SpecError(plan.source, "ranks", f"the plan is for {plan.n_ranks} ranks, the run has {n}")
        per_rank = plan.per_rank
    else:
        per_rank = place_tables(spec, n, topology.device.memory_bytes)
    vec = isinstance(per_rank, RankUnits)  # a planned placement: per-rank summaries without per-rank lists
    cls_of_rank, sigs = per_rank.rank_classes(g) if vec else rank_classes(per_rank, g)
    n_cls = len(sigs)
    orbit = None  # uneven placements: classes that see the same placement around them (exact), when few enough
    if n_cls > 1 and sim_mode != "full":
        from ..graph.symmetry import orbit_classes

        # fused kernels push to a node's GPUs by local offset (and reduce TWRW partials by it): their classes merge
        # locals only by local shifts; the bulk exchanges of the baseline treat every local alike (equal columns)
        orbit = orbit_classes(cls_of_rank, topology, nodes, g, "shift" if mode == "fused" else "columns")
        if orbit is not None and int(orbit.max()) + 1 > ORBIT_MAX_CLASSES:
            orbit = None
        if orbit is not None:
            cls_of_rank, n_cls = orbit, int(orbit.max()) + 1
    full = sim_mode == "full" or (sim_mode == "auto" and n_cls > 1 and orbit is None and n <= FULL_SIM_MAX_RANKS)
    graph = Graph(nodes, g, name=spec.name)
    graph.meta["orbit_classes"] = orbit is not None
    graph.add_group(world(n))
    if full:
        ranks = list(range(n))
    else:
        graph.class_of_rank = cls_of_rank
        first = {}
        for r, c in enumerate(cls_of_rank.tolist()):
            first.setdefault(c, r)
        ranks = [first[c] for c in sorted(first)]
    graph.meta["classes"] = n_cls
    graph.meta["fused_waves"] = 0
    graph.meta["plan"] = plan
    layout = Layout(nodes, g)
    # per rank: bytes sent to every rank by its All-to-All shards (table/row/column-wise: b x its columns each),
    # and by its hierarchical shards (table-row-wise and grid, ``hcols`` columns held: stage 1 N*b*hcols to each
    # local peer; stage 2 b*hcols to its rail on every node)
    if vec:
        uni_cols, hcols = per_rank.columns(_A2A_KINDS, D), per_rank.columns(_HIER_KINDS, D)
        h_dims = per_rank.dims(_HIER_KINDS, D)
        dp_tables = per_rank.tables_of("data_parallel")
    else:
        uni_cols = np.array([sum(u.dim or D for u in us if u.kind in _A2A_KINDS) for us in per_rank], dtype=float)
        hcols = np.array([sum(u.dim or D for u in us if u.kind in _HIER_KINDS) for us in per_rank], dtype=float)
        h_dims = sorted({u.dim or D for us in per_rank for u in us if u.kind in _HIER_KINDS})
        dp_tables = sorted({u.table for us in per_rank for u in us if u.kind == "data_parallel"})
    ub_all = uni_cols * b * ceb
    # the input distribution (``embedding.input_dist``): every rank sends each shard holder its ``b`` bags' ids
    # of the tables that holder serves (a row shard gets the ids in its rows: ``u.pooling`` per bag, uniform ids;
    # a column shard all of its table's) and one length per bag and shard; the same vector from every rank
    # (simfuse.workloads.ids.ids_bytes: key width, optional deduplication of repeated bags)
    if spec.input_dist != "none":
        def unit_ids(u):
            return spec_ids_bytes(spec, b, u.pooling, u.table) if u.kind in _SHARDED_KINDS else 0.0

        if vec:
            key_sizes = per_rank.per_rank_sum(unit_ids)
        else:
            key_sizes = np.array([sum(unit_ids(u) for u in us) for us in per_rank], dtype=float)
    else:
        key_sizes = np.zeros(n)
    has_keys = bool(key_sizes.any())
    graph.meta["input_dist_bytes"] = float(key_sizes.sum())  # per rank, self included
    has_twrw = bool(hcols.any())
    # the hierarchical kernels in column-equivalent tables of ``dim_h`` columns (the gcd of the shards' widths, as
    # the All-to-All shards' EmbeddingAllToAll): a shard of ``w`` columns is ``w / dim_h`` tables of ``dim_h``
    dim_h = math.gcd(*h_dims) if h_dims else D
    twrw = hcols / dim_h  # column-equivalent hierarchical tables per rank (table-row-wise only: the shard count)
    local_of = np.arange(n) % g
    node_of = np.arange(n) // g

    bottom, inter, top = _dense_layers(spec, b)
    dew = dense_elementwise(spec, b)
    dt = spec.dense_dtype
    grad_eb = DTYPE_BYTES[spec.grad_dtype]

    def fwd(layers):
        return [gemm_work(lbl, m, nn, k, dt) for (lbl, m, nn, k) in layers]

    def bwd(layers):
        works, grads = [], []
        for (lbl, m, nn, k) in reversed(layers):
            works.append([gemm_work(lbl + "_dgrad", m, k, nn, dt), gemm_work(lbl + "_wgrad", k, nn, m, dt)])
            grads.append(float(k * nn + nn) * grad_eb)
        return works, grads

    top_bwd, top_grads = bwd(top)
    inter_bwd, inter_grads = bwd(inter)
    bot_bwd, bot_grads = bwd(bottom)
    if spec.dense_fusion != "legacy":  # the first layer's input is the data: no dgrad (HugeCTR skip_dgrad for the
        # first dense layer, add_dense_layer_helpers.cpp / mlp_layer.cu; PyTorch: the input needs no gradient)
        bot_bwd[-1] = bot_bwd[-1][1:]
    # the element-wise kernels in issue order (dense_elementwise): an MLP layer's after its forward GEMM and
    # before its backward pair (bwd() lists the layers last to first); the loss after the top MLP
    bottom_fwd = [w for gm, extra in zip(fwd(bottom), dew.bottom_fwd, strict=True) for w in [gm, *extra]]
    top_fwd_works = [w for gm, extra in zip(fwd(top), dew.top_fwd, strict=True) for w in [gm, *extra]] + dew.loss_fwd
    top_bwd = [list(extra) + pair for pair, extra in zip(top_bwd, reversed(dew.top_bwd), strict=True)]
    if dew.loss_bwd:
        top_bwd[0] = list(dew.loss_bwd) + top_bwd[0]
    bot_bwd = [list(extra) + pair for pair, extra in zip(bot_bwd, reversed(dew.bottom_bwd), strict=True)]
    inter_fwd_works = list(dew.inter_fwd_head)
    inter_gemms = fwd(inter)
    for li_, gemms in enumerate(zip(inter_gemms[0::2], inter_gemms[1::2], strict=True)):
        inter_fwd_works += [*gemms, *dew.inter_fwd[li_]]
    # backward: (kind, works, gradient index or -1); inter_bwd lists cross layers last to first, u pair then v pair
    inter_seq: list = [("ew", dew.inter_bwd_head, -1)]
    n_cross = len(inter) // 2
    for k_ in range(n_cross):
        li_ = n_cross - 1 - k_
        inter_seq += [("ew", dew.inter_bwd_pre[li_], -1), ("gemm", inter_bwd[2 * k_], 2 * k_),
                      ("gemm", inter_bwd[2 * k_ + 1], 2 * k_ + 1), ("ew", dew.inter_bwd_post[li_], -1)]
    fuse_bwd = mode == "fused" and spec.fuse_backward
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
    bulk_twrw = has_twrw and not (mode == "fused" and knobs.twrw_push == "hierarchical")
    inter_seq += [("ew", [] if fuse_bwd and not bulk_twrw else dew.emb_grad_copy, -1),
                  ("ew", dew.inter_bwd_tail, -1)]
    dense_params = sum(k * nn + nn for (_lbl, _m, nn, k) in top + inter + bottom)  # weights + biases
    # grouped all-reduce: every dense gradient and every data-parallel table's (dense) gradient in one buffer
    grouped_bytes = float(dense_params * grad_eb + sum(spec.tables[t].rows * D for t in dp_tables) * grad_eb)
    # dense Adagrad step per parameter (HugeCTR adagrad_optimizer.cu ada_grad_update4_kernel): read the fp32 weight,
    # the gradient and the fp32 accumulator, write weight and accumulator; with a non-fp32 dense dtype the weights
    # are cast to it before the forward (HugeCTR model_pipeline.cpp network_init conv_weight_): read 4, write the
    # dense element
    dense_update_bytes = 4 + grad_eb + 4 + 4 + 4 + ((4 + DTYPE_BYTES[dt]) if dt != "fp32" else 0)
    buckets, closes = _buckets(top_grads + inter_grads + bot_grads, spec.bucket_bytes)
    # bucketed: the replicated tables' weights are DDP parameters like the dense ones (TorchRec's data-parallel
    # sharding); their gradients are ready at the backward's end and join its last bucket
    dp_in_bucket = spec.dense_allreduce == "bucketed" and bool(dp_tables)
    if dp_in_bucket:
        buckets[-1] += float(sum(spec.tables[t].rows for t in dp_tables) * D * grad_eb)
    closing = {last: k for k, last in closes.items()}
    overlap = spec.schedule == "overlap"
    grouped = spec.dense_allreduce == "grouped"
    # fused mode: table-row-wise shards push hierarchically (TwrwEmbeddingPush; backward: the gradient push's relay)
    twrw_h = mode == "fused" and has_twrw and knobs.twrw_push == "hierarchical"
    twrw_bags = TwrwEmbeddingPush.bags_for(b, 4)  # _pool_work's 4 bags per workgroup, whole ones per rank
    # a replicated table's local reduce: the scatter-add of its ``b`` bags' lookup gradients into its dense gradient,
    # parallel over the lookups (before its all-reduce, bucketed, or the grouped one)
    # The replicated tables run as one group (one pooling, one local reduce, one optimizer kernel over all of
    # them: FBGEMM's table-batched embedding under TorchRec's data-parallel sharding, HugeCTR's data-parallel
    # embedding op); ``bucketed_per_table`` keeps one of each per table (simfuse before 2026-12-06)
    dp_groups = ([[t] for t in dp_tables] if spec.dense_allreduce == "bucketed_per_table" else
                 [dp_tables] if dp_tables else [])

    def dp_name(prefix, ts):
        return f"{prefix}{ts[0]}" if len(ts) == 1 else prefix

    dp_pool = [_pool_work(dp_name("embedding_dp", ts), b, sum(spec.tables[t].pooling for t in ts), D, eb,
                          tables=len(ts), rows=sum(spec.tables[t].rows for t in ts)) for ts in dp_groups]
    dp_reduce = [elementwise_work(dp_name("emb_dp_local_reduce", ts),
                                  b * sum(spec.tables[t].pooling for t in ts) * D * grad_eb,
                                  b * sum(spec.tables[t].pooling for t in ts) * D, spec.embedding_dtype,
                                  wgs=max(1, sum(b * int(math.ceil(spec.tables[t].pooling)) for t in ts) // 64))
                 for ts in dp_groups]
    dp_rows = [sum(spec.tables[t].rows for t in ts) for ts in dp_groups]
    dp_update = [elementwise_work(dp_name("emb_update_dp", ts),
                                  rows * D * (eb * (2.0 + 2.0 * spec.optimizer_state_factor) + grad_eb),
                                  3.0 * rows * D, spec.embedding_dtype, wgs=max(1, rows * D // 8192))
                 for ts, rows in zip(dp_groups, dp_rows, strict=True)]

    for r in ranks:
        units = [u for u in per_rank[r] if u.kind in _A2A_KINDS]
        tr_units = [u for u in per_rank[r] if u.kind in _HIER_KINDS]
        # column-equivalent tables and their summed lookups (a shard of w columns: w / dim_h tables)
        tr_tables = sum((u.dim or D) // dim_h for u in tr_units)
        tr_lookups = sum(u.pooling * ((u.dim or D) // dim_h) for u in tr_units)
        rg = graph.program(r)
        U = len(units)
        cols = sum(u.dim or D for u in units)
        rail = local_of == local_of[r]
        peers = node_of == node_of[r]
        # forward sends; the backward sends the transpose (gradients back to the shard holders)
        fwd_sizes = np.full(n, ub_all[r]) + np.where(rail, twrw[r] * b * dim_h * ceb, 0.0)
        bwd_sizes = ub_all + np.where(rail, twrw * b * dim_h * ceb, 0.0)
        st1_fwd = np.where(peers, twrw[r] * nodes * b * dim_h * ceb, 0.0)
        st1_bwd = np.where(peers, twrw * nodes * b * dim_h * ceb, 0.0)

        def comp(work, phase, deps=(), rg=rg):
            """A compute node of ``work`` (a KernelWork, or a ``(label, KernelWork)`` of :func:`dense_elementwise`)."""
            if isinstance(work, tuple):
                name, work = work
            else:
                name = work.name
            return rg.add(ComputeNode(name=name, work=work, phase=phase, deps=tuple(deps)))

        grad_ars: list[int] = []  # the dense gradients' all-reduces (the dense optimizer step waits for them)

        dp_red: list[int] = []  # the replicated tables' local reduce (bucketed: the last bucket waits for it)

        def grad_done(layer_idx: int, dep: int, rg=rg, grad_ars=grad_ars, dp_red=dp_red):
            k = None if grouped else closing.get(layer_idx)
            if k is not None:
                extra = tuple(dp_red) if k == len(buckets) - 1 else ()
                grad_ars.append(rg.add(CollectiveNode(name=f"ddp_allreduce{k}", op="all_reduce", group="world",
                                                      size_bytes=buckets[k], stream="comm_dp",
                                                      phase=f"allreduce_bucket{k}", deps=(dep, *extra))))

        # ---------------- forward
        # the sparse ids to the shard holders: prefetch (the next batch's, own stream, from the iteration's start;
        # the step ends no sooner than it) or inline (this batch's: the model-parallel lookups wait for it)
        keys = -1
        if has_keys:
            keys = rg.add(AllToAllVNode(name="a2a_input", group="world", send_bytes=key_sizes,
                                        stream="comm_input" if spec.input_dist == "prefetch" else "comm"))
        kdep = (keys,) if keys >= 0 and spec.input_dist == "inline" else ()

        # ---------------- forward (dense)
        def bottom_and_dp(gate=()):
            """The bottom MLP and the data-parallel tables' local pooling (own ``b`` bags); ``gate``: what the
            first of them waits for.  Returns the last node's id."""
            last = -1
            for w in bottom_fwd:
                last = comp(w, "bottom_mlp_fwd", deps=gate if last < 0 else ())
            for w in dp_pool:
                last = comp(w, "embedding_dp_fwd")
            return last

        def dp_and_bottom(gate=()):
            """``overlap`` order (HugeCTR's issue order: the data-parallel lookups, then the bottom MLP)."""
            last = -1
            for w in dp_pool:
                last = comp(w, "embedding_dp_fwd", deps=gate if last < 0 else ())
            for w in bottom_fwd:
                last = comp(w, "bottom_mlp_fwd", deps=gate if last < 0 else ())
            return last

        # bulk: bottom MLP and data-parallel pooling first, the model-parallel embedding after them; overlap
        # (HugeCTR train_intra_iteration_overlap, docs/hugectr_baseline.md): the model-parallel embedding first,
        # the rest while its All-to-All is in flight
        last = bottom_and_dp() if not overlap else -1

        def after(*ids):
            return tuple(i for i in ids if i >= 0)

        if U > 0:
            dim_eq = math.gcd(*[u.dim or D for u in units])
            op = EmbeddingAllToAll({"tables_per_gpu": cols // dim_eq, "rows": max(u.rows for u in units),
                                    "dim": dim_eq, "pooling": sum(u.pooling * (u.dim or D) for u in units) / cols,
                                    "global_batch": B, "dtype": spec.embedding_dtype,
                                    "comm_dtype": spec.comm_dtype, "bags_per_wg": spec.bags_per_wg}, layout,
                                   spec.source)
            if mode == "fused":
                graph.meta["fused_waves"] = max(graph.meta["fused_waves"],
                                                -(-op.W // system.cost.slots(op.work("fused"))))
        tr_dep = last
        gate = ()  # overlap: what the bottom MLP waits for (HugeCTR: the model forward, intra-node reduction included)
        if twrw_h:  # table-row-wise, fused: the pooling kernel pushes to the node-local reducers, which put on the rail
            tr_work = _pool_work("embedding_twrw", B, tr_lookups, dim_h, eb, tables=tr_tables,
                                 bags_per_wg=twrw_bags, out_eb=ceb) if tr_units else None
            tr_op = TwrwEmbeddingPush(tr_work, layout, twrw, r, B, twrw_bags, dim_h, ceb, spec.source)
            tr_dep = rg.add(FusedNode(name="embedding_twrw_fused", op=tr_op, group="world", knobs=knobs,
                                      deps=after(last, *kdep), wait_phase="a2a_twrw_fwd_exposed"))
        elif has_twrw:  # table-row-wise: pool, reduce inside the node (stage 1); stage 2 joins the All-to-All
            if tr_units:
                tr_dep = comp(_pool_work("embedding_twrw", B, tr_lookups, dim_h, eb, tables=tr_tables, out_eb=ceb),
                              "embedding_fwd", deps=kdep)
            tr_dep = rg.add(AllToAllVNode(name="a2a_fwd_intra", group="world", send_bytes=st1_fwd, stream="comm",
                                          deps=after(tr_dep)))
            gate = (tr_dep,)
        if mode == "baseline":
            if U > 0:
                last = comp(op.work("compute"), "embedding_fwd", deps=kdep)
            waits = (rg.add(AllToAllVNode(name="a2a_fwd", group="world", send_bytes=fwd_sizes, stream="comm",
                                          deps=after(max(last, tr_dep)))),)
        else:  # the fused kernel pushes the All-to-All shards; table-row-wise stage 2 stays a bulk exchange
            if U > 0:
                a2a = rg.add(FusedNode(name="embedding_fwd_fused", op=op, group="world", knobs=knobs,
                                       deps=after(last, *kdep), wait_phase="a2a_fwd_exposed"))
            else:
                a2a = rg.add(AllToAllVNode(name="a2a_fwd", group="world", send_bytes=np.zeros(n), stream="comm",
                                           deps=after(last)))
            waits = (a2a,)
            if twrw_h:
                waits += (tr_dep,)
            elif has_twrw:
                waits += (rg.add(AllToAllVNode(name="a2a_fwd_rail", group="world", send_bytes=fwd_sizes - ub_all[r],
                                               stream="comm", deps=(tr_dep,))),)
        if overlap:
            dp_and_bottom(gate)
        first = True
        for w in inter_fwd_works:
            last = comp(w, "interaction_fwd", deps=waits if first else ())
            first = False
        for w in top_fwd_works:
            last = comp(w, "top_mlp_fwd")
        # ---------------- backward
        side: list[int] = []  # the current layer block's wgrad nodes on the side stream (async_wgrad)

        def bwd_pair(pair, phase, last, rg=rg, side=side):
            """An MLP / cross layer's backward: its element-wise kernels, dgrad and wgrad GEMMs (the wgrad last,
            the dgrad before it unless the layer has none).  With ``async_wgrad`` the wgrad runs on the
            ``compute_wgrad`` stream once the output gradient exists, beside the dgrad (HugeCTR mlp_layer.cu
            bprop: wgrad on comp_overlap_stream; not for a layer without dgrad, the first bottom layer).  Returns
            (the main stream's last node, the node the layer's weight gradient is done with)."""
            *pre, wg = pair
            if not (spec.async_wgrad and pre and not isinstance(pre[-1], tuple)):
                for w in pair:
                    last = comp(w, phase)
                return last, last
            for w in pre[:-1]:
                last = comp(w, phase)
            side.append(rg.add(ComputeNode(name=wg.name, work=wg, phase=phase, stream="compute_wgrad",
                                           deps=(last,))))
            return comp(pre[-1], phase), side[-1]

        def join(last, rg=rg, side=side):
            """The end of a layer block: the main stream waits for the block's wgrads (HugeCTR joins the
            overlap stream at the end of each MLP / MultiCross layer's bprop)."""
            if not side:
                return last
            j = rg.add(DelayNode(name="wgrad_join", time_s=0.0, deps=(side[-1],)))
            side.clear()
            return j

        li = 0
        for pair in top_bwd:
            last, wdone = bwd_pair(pair, "top_mlp_bwd", last)
            grad_done(li, wdone)
            li += 1
        last = join(last)
        # interaction backward (``inter_seq``): per cross layer its element-wise kernels and dgrad + wgrad
        # pairs; the kernel producing d(embeddings) (``dew.emb_grad``) is the one the fused backward pushes from
        bwd_x = None
        for kind, works, j in inter_seq:
            if kind == "producer" and fuse_bwd:
                pre_push = last
                pwork = works[0][1] if isinstance(works[0], tuple) else works[0]
                if twrw_h:  # table-row-wise gradients over the rail, relayed inside the holder node
                    push = PushKernel(pwork, np.arange(n), bwd_sizes, tag="a2a_bwd_fused", layout=layout,
                                      relay_bytes=bwd_sizes - ub_all, relay_in_bytes=twrw[r] * b * dim_h * ceb,
                                      relay_channel="a2a_bwd_twrw")
                else:
                    push = PushKernel(pwork, np.arange(n), ub_all, tag="a2a_bwd_fused", layout=layout)
                bwd_x = last = rg.add(FusedNode(name="interaction_bwd_fused", op=push, group="world", knobs=knobs,
                                                wait_phase="a2a_bwd_wait"))
                continue
            if kind == "gemm":
                last, wdone = bwd_pair(works, "interaction_bwd", last)
            else:
                for w in works:
                    last = comp(w, "interaction_bwd")
                wdone = last
            if j >= 0:
                grad_done(li, wdone)
                li += 1
        last = join(last)
        dgrad = last
        if not fuse_bwd:
            bwd_x = rg.add(AllToAllVNode(name="a2a_bwd", group="world", send_bytes=bwd_sizes, stream="comm",
                                         deps=(last,)))
            tr_x = bwd_x
        elif twrw_h:  # the relayed table-row-wise gradients: their own exchange, on the communication stream
            relay = RelayWait("a2a_bwd_twrw", twrw[r] * b * dim_h * ceb, nodes, g)
            tr_x = rg.add(FusedNode(name="a2a_bwd_twrw", op=relay, group="world", stream="comm", knobs=knobs,
                                    wait_phase="a2a_bwd_twrw_wait", deps=(pre_push,)))
        elif has_twrw:
            tr_x = rg.add(AllToAllVNode(name="a2a_bwd_rail", group="world", send_bytes=bwd_sizes - ub_all,
                                        stream="comm", deps=(last,)))
        if has_twrw and not (fuse_bwd and twrw_h):
            tr_x = rg.add(AllToAllVNode(name="a2a_bwd_intra", group="world", send_bytes=st1_bwd, stream="comm",
                                        deps=(tr_x,)))
        # the replicated tables' local reduce; bucketed: their gradients ride in the last DDP bucket;
        # bucketed_per_table: each table's gradient its own all-reduce (their optimizer steps wait for them)
        dp_ars = []
        if dp_in_bucket:
            dp_red.append(comp(dp_reduce[0], "embedding_update", deps=(dgrad,)))
        for i, ts in enumerate(dp_groups if spec.dense_allreduce == "bucketed_per_table" else ()):
            red = comp(dp_reduce[i], "embedding_update", deps=(dgrad,))
            dp_ars.append(rg.add(CollectiveNode(name=f"dp_table_allreduce{ts[0]}", op="all_reduce", group="world",
                                                size_bytes=float(dp_rows[i] * D * grad_eb), stream="comm_dp",
                                                phase="allreduce_dp_tables", deps=(red,))))
        for pair in bot_bwd:
            last, wdone = bwd_pair(pair, "bottom_mlp_bwd", last)
            grad_done(li, wdone)
            li += 1
        last = join(last)
        if grouped:  # HugeCTR grouped_all_reduce: the data-parallel tables' local reduce into their dense
            # gradients, then one all-reduce of every dense and data-parallel-table gradient (docs/hugectr_baseline.md)
            for w in dp_reduce:
                last = comp(w, "embedding_update")
            grad_ars.append(rg.add(CollectiveNode(name="grouped_allreduce", op="all_reduce", group="world",
                                                  size_bytes=grouped_bytes, stream="comm_dp",
                                                  phase="allreduce_grouped", deps=(last,))))
        if U > 0:
            dep = bwd_x
            for w in sparse_update_works("emb_update", spec, B, [(u.rows, u.pooling, u.dim or D) for u in units]):
                dep = comp(w, "embedding_update", deps=(dep,))
        if tr_units:
            dep = tr_x
            for w in sparse_update_works("emb_update_twrw", spec, B,
                                         [(u.rows, u.pooling, u.dim or D) for u in tr_units]):
                dep = comp(w, "embedding_update", deps=(dep,))
        for i, w in enumerate(dp_update):  # the optimizer step over the tables, once their reduced gradient is in
            comp(w, "embedding_update", deps=(grad_ars[-1],) if grouped else
                 (bwd_x, grad_ars[-1]) if dp_in_bucket else (bwd_x, dp_ars[i]))
        if spec.dense_optimizer == "adagrad":
            comp(elementwise_work("dense_update", dense_params * dense_update_bytes, 5.0 * dense_params, "fp32",
                                  wgs=max(1, dense_params // 8192)), "dense_update", deps=tuple(grad_ars))
        elif spec.dense_optimizer == "sgd":  # w -= lr * g on the dense-dtype weights (PyTorch foreach SGD)
            comp(elementwise_work("dense_update", dense_params * (2.0 * DTYPE_BYTES[dt] + grad_eb),
                                  2.0 * dense_params, dt, wgs=max(1, dense_params // 8192)), "dense_update",
                 deps=tuple(grad_ars))
    return graph


def simulate_dlrm(spec: DLRMSpec, topology, nodes: int, *, gpus_per_node: int | None = None,
                  mode: str = "fused", sim_mode: str = "auto", cost=None, seed: int = 0,
                  record: bool = False, record_usage: bool = False, allreduce_algorithm: str | None = None,
                  knobs: FusedKnobs | None = None, tuner=None, plan=None, progress=None) -> IterationResult:
    """Simulate one training iteration; ``mode`` is ``fused`` or ``baseline``.  ``topology``: a
    :class:`~simfuse.system.System` (or a topology spec, resolved here).  ``progress``: a
    :class:`~simfuse.progress.Progress` told the events and simulated time while it runs."""
    from ..graph.executor import Executor
    from ..system import System, as_system

    wall0 = time.perf_counter()
    system = as_system(topology)
    if cost is not None:
        system = System(system.topology, cost, system.profile, system.nominal)
    graph = build_dlrm_graph(spec, system, nodes, gpus_per_node=gpus_per_node, mode=mode, sim_mode=sim_mode,
                             knobs=knobs, plan=plan)
    forced = {"all_reduce": allreduce_algorithm} if allreduce_algorithm else None
    res = Executor(system, graph, seed=seed, record=record, record_usage=record_usage, tuner=tuner,
                   forced_algorithms=forced, progress=progress).run()
    return IterationResult(mode=mode, iteration_time_s=res.time_s, compute_time_s=res.compute_time_s,
                           exposed_comm_time_s=res.exposed_comm_time_s,
                           sim_mode="full" if res.sim_mode == "full" else "classes",
                           classes=graph.meta["classes"], events=res.events, wall_s=time.perf_counter() - wall0,
                           phases=list(res.critical.phases), sim=res.sim, net=res.net,
                           extras=DLRMExtras(plan=graph.meta.get("plan"), knobs=knobs or FusedKnobs(),
                                             global_batch=spec.global_batch, fused_waves=graph.meta["fused_waves"],
                                             dense_fusion=spec.dense_fusion))
