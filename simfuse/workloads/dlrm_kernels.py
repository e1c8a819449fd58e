"""The kernels and sizes one DLRM iteration is made of, shared by the graph builder (:mod:`.dlrm`) and each
rank's program (:mod:`.dlrm_program`): the sharding kinds, the pooling kernel, the dense layers and their
element-wise kernels, the sparse update's kernels and the all-reduce buckets."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..fused.knobs import DTYPE_BYTES
from ..spec import DLRMSpec
from .dense import elementwise_work
from .planner import HIER_SHARDINGS
from .pooling import pool_work as _pool_work  # noqa: F401  (the pooling kernel, shared with the planner)
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


def _dcn_elementwise(ew, b: int, T: int, D: int, L: int, unfused: bool):
    """The DCN interaction's element-wise kernels (:func:`dense_elementwise`; ``ew`` makes one):
    ``(forward head, per layer forward, backward head, per layer before / after its GEMMs, backward tail,
    the embedding gradient's copy, its producer)``."""
    inter_fwd: list = [[] for _ in range(L)]
    pre: list = [[] for _ in range(L)]
    post: list = [[] for _ in range(L)]
    head_f: list = []
    head_b: list = []
    tail: list = []
    emb_copy: list = []
    bx = float(b) * ((T + 1) * D)
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
    return head_f, inter_fwd, head_b, pre, post, tail, emb_copy, emb_grad


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
    if spec.interaction == "dcn":
        head_f, inter_fwd, head_b, pre, post, tail, emb_copy, emb_grad = _dcn_elementwise(ew, b, T, D, L, unfused)
    else:
        head_f, inter_fwd, head_b, pre, post, tail, emb_copy, emb_grad = [dot], [], [], [], [], [], [], dot
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
