"""Workload specs (``models/*.yaml``): DLRM training, tensor-parallel decode, MoE layer, LLM training step with
tensor + data parallelism.

Every file has ``name`` and ``kind`` (``dlrm``, ``transformer_tp_decode``, ``moe_layer``, ``llm_tp_dp``); the rest
depends on the kind.  Validation errors name the file and the field.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import SpecError, short_repr
from ._fields import Fields, load_yaml_mapping
from .ranges import InputSpace, parse_uncertain
from .settings import register_settings, setting

KINDS = ("dlrm", "transformer_tp_decode", "moe_layer", "llm_tp_dp")
LLM_FUSED = ("gemm_rs", "ag_gemm")  # fusable operators of llm_tp_dp: GEMM+ReduceScatter, AllGather+GEMM
DTYPES = ("fp32", "bf16", "fp16")
PLACEMENTS = ("table_wise", "row_wise", "planned")  # planned: simfuse.workloads.planner
INTERACTIONS = ("dot", "dcn")
#: DLRM iteration schedules (docs/hugectr_baseline.md): ``bulk`` issues the embedding kernel after the bottom MLP and
#: waits for the forward All-to-All; ``overlap`` issues the model-parallel embedding kernel first and runs the bottom
#: MLP while its All-to-All is in flight (HugeCTR's ``train_intra_iteration_overlap``)
SCHEDULES = ("bulk", "overlap")
#: dense gradient all-reduce: ``bucketed`` (DDP buckets as backward produces them; the replicated tables' gradients,
#: ready at the backward's end, one more bucket: TorchRec's data-parallel tables are DDP parameters) or ``grouped``
#: (one all-reduce of every dense and data-parallel-table gradient after the backward pass: HugeCTR's
#: ``grouped_all_reduce``); ``bucketed_per_table``: as bucketed with one all-reduce per replicated table (simfuse
#: before 2026-12-06, kept so regression tests can pin older results)
DENSE_ALLREDUCES = ("bucketed", "grouped", "bucketed_per_table")
#: dense optimizer step after the gradient all-reduce: ``none`` (not modelled), ``adagrad`` (fp32 master
#: weights and accumulator; with a non-fp32 dense dtype, the cast of the weights to it) or ``sgd`` (plain SGD on
#: the dense-dtype weights: read weight and gradient, write the weight; PyTorch's ``foreach`` step)
DENSE_OPTIMIZERS = ("none", "adagrad", "sgd")
#: how the dense network's element-wise work is split into kernels (simfuse.workloads.dlrm_kernels.dense_elementwise):
#: ``epilogue`` -- bias and ReLU in the GEMM epilogues, one fused kernel per DCN cross layer and direction, the
#: concat as copies (HugeCTR v23.08-v24.06's ``MLPLayer`` / ``MultiCrossLayer`` / ``ConcatLayer``, the MLPerf
#: submissions' dense network); ``unfused`` -- every element-wise op its own kernel, as PyTorch eager or a CUDA
#: graph of it runs them (ReLU and its backward, bias-gradient reductions, the DCN's multiplies, adds and
#: gradient accumulations); ``legacy`` -- simfuse's inventory before 2026-12-04 (one interaction kernel forward and
#: backward, ``3 b x`` bytes per cross layer; nothing else), kept so regression tests can pin older results
DENSE_FUSIONS = ("epilogue", "unfused", "legacy")
#: how the workload's kernels are launched: ``eager`` (queued by the host, PyTorch's default), ``graph`` (replayed
#: from a CUDA graph: HugeCTR's ``use_cuda_graph``, decode servers); priced by the device's two measured latencies
LAUNCHES = ("eager", "graph")
#: the input distribution, the All-to-All that brings each sample's sparse ids (keys, plus one length per bag and
#: shard) from the rank reading the sample to the shard holders (TorchRec's ``input_dist`` of the
#: KeyedJaggedTensor; HugeCTR's data distributor, ``sparse_data_distribution_op_impl.cu``): ``prefetch`` -- the
#: next batch's keys on their own stream from the iteration's start, overlapped with it (TorchRec's
#: ``TrainPipelineSparseDist``, HugeCTR's ``train_inter_iteration_overlap``); ``inline`` -- this batch's keys
#: before its lookups, which wait for them (TorchRec's ``TrainPipelineBase``); ``none`` -- not modelled (the keys
#: assumed at their shards: simfuse before 2026-12-04, kept so regression tests can pin older results)
INPUT_DISTS = ("prefetch", "inline", "none")
#: the sparse (model-parallel) embedding backward: ``sorted`` -- the kernels real implementations run (HugeCTR's
#: index calculation + local reduce + update, FBGEMM's TBE backward): a radix sort of the lookups' ids, a
#: run-length encode, one fused segment-reduce + optimizer kernel over the distinct rows
#: (:func:`simfuse.workloads.dlrm_kernels.sparse_update_works`; since 2026-12-05); ``bytes`` -- simfuse before 2026-12-05
#: (one kernel, per lookup its row and state read and written, each bag's gradient read once), kept so regression
#: tests can pin older results
SPARSE_BACKWARDS = ("sorted", "bytes")
#: bytes of one sparse id on the wire: TorchRec KeyedJaggedTensor values are int64 by default; HugeCTR's keys are
#: uint32 unless ``i64_input_key`` (include/pybind/solver_wrapper.hpp:138, default false)
KEY_DTYPE_BYTES = {"int32": 4, "int64": 8}
#: bytes of one length (bag size) per (sample, shard) on the wire: int32 (TorchRec KJT lengths; HugeCTR's
#: per-bucket counts, uint32)
LENGTH_BYTES = 4
#: Zipf exponent of the sparse ids' popularity (``embedding.ids_zipf_s``), used only by ``ids_dedup``: Criteo's
#: categorical values are heavy-tailed (a power law); the exponent is not measured here.  Default 1.05, honest
#: range 0.8-1.2 (an exponent near 1 is the usual power-law fit of click-log feature frequencies); measuring it
#: needs the value counts of a Criteo 1TB day file (``np.unique(..., return_counts=True)`` per feature, then a
#: log-log fit of frequency against rank)
IDS_ZIPF_S = 1.05
#: HugeCTR's MLPerf DLRM-DCNv2 planner replicates (data-parallel) every table smaller than ``DP_SHARDING_THRESHOLD``
#: = 0.0125 GB counted with its Adagrad state (``config_DGXH100_{8x8x2112,16x8x1056}.sh``, ``sharding/
#: generate_plan.py``; docs/hugectr_baseline.md e: 12,207 rows of 128 fp32 + 128 fp32 state); the MLPerf model
#: files set ``embedding.data_parallel_below_mib`` to it (11.92 MiB)
HUGECTR_DP_THRESHOLD_BYTES = 0.0125e9

# Bounds checked at load time (far beyond any real model; they keep sizes, memory and loops finite).
MAX_GLOBAL_BATCH = 2**24       # samples per iteration
MAX_TABLES = 100_000
MAX_ROWS = 2**40               # rows of one embedding table
MAX_WIDTH = 2**20              # embedding dim, MLP widths, hidden/ffn sizes, dense features
MAX_POOLING = 1_000_000        # lookups per bag
MAX_LAYERS = 10_000
MAX_TOKENS_PER_GPU = 2**24
MAX_EXPERTS_PER_GPU = 4096


@dataclass(frozen=True)
class TableSpec:
    rows: int
    pooling: float  # average lookups per bag


@dataclass(frozen=True)
class DLRMSpec:
    """One DLRM training iteration (see docs/workloads.md for the operator graph)."""

    name: str
    global_batch: int
    dim: int
    tables: tuple[TableSpec, ...]
    dense_features: int
    bottom_mlp: tuple[int, ...]
    top_mlp: tuple[int, ...]
    interaction: str = "dot"
    dcn_layers: int = 0
    dcn_low_rank: int = 0
    embedding_dtype: str = "fp32"
    dense_dtype: str = "bf16"
    placement: str = "table_wise"
    embedding_memory_fraction: float = 0.5   # share of GPU memory tables (and optimizer state) may use
    optimizer_state_factor: float = 1.0      # extra bytes per embedding byte (Adagrad: 1 row of state)
    bucket_bytes: float = 25 * 2**20         # DDP gradient bucket
    bags_per_wg: int = 4
    fuse_backward: bool = True
    embedding_comm_dtype: str = ""           # payload of the embedding All-to-Alls ("": embedding_dtype)
    grad_dtype: str = "fp32"                 # dense and data-parallel-table gradients (all-reduce payload)
    dense_allreduce: str = "bucketed"        # DENSE_ALLREDUCES
    schedule: str = "bulk"                   # SCHEDULES
    dense_optimizer: str = "none"            # DENSE_OPTIMIZERS
    dense_fusion: str = "epilogue"           # DENSE_FUSIONS
    async_wgrad: bool = False                # weight-gradient GEMMs on a second compute stream (HugeCTR async_wgrad)
    input_dist: str = "prefetch"             # INPUT_DISTS: the sparse ids' All-to-All to the shard holders
    key_dtype: str = "int64"                 # KEY_DTYPE_BYTES: one sparse id on the wire
    sparse_backward: str = "sorted"          # SPARSE_BACKWARDS: the model-parallel embedding backward's kernels
    ids_dedup: bool = False                  # the ids' exchange sends each distinct bag once (simfuse.workloads.ids)
    ids_zipf_s: float = IDS_ZIPF_S           # Zipf exponent of the ids' popularity (only with ids_dedup)
    #: tables whose storage (rows x dim x dtype x (1 + optimizer state)) is below this are replicated by the planner
    #: (0: none forced, data-parallel chosen by cost only, as TorchRec's planner does)
    data_parallel_below_bytes: float = 0.0
    launch: str = "eager"                    # LAUNCHES
    kind: str = "dlrm"
    source: str = "<memory>"
    inputs: InputSpace | None = field(default=None, compare=False, repr=False)  # the uncertain: block

    @property
    def comm_dtype(self) -> str:
        """Element type of the pooled embeddings and their gradients on the wire (forward and backward
        All-to-Alls); the tables and the pooling read ``embedding_dtype``."""
        return self.embedding_comm_dtype or self.embedding_dtype


#: largest global batch or batch per GPU a setting accepts (samples): far above any cluster's (weak scaling to
#: 131,072 GPUs at 1,056 per GPU is 1.4e8); 1e30 overflowed machine integers in the graph builder
MAX_SCALED_BATCH = 2**40


@dataclass(frozen=True)
class DLRMSettings:
    """The run settings only DLRM reads (``--set key=value``; the batch ones also ``--global-batch`` /
    ``--batch-per-gpu``, the plan ``--plan``): its scaling mode and what replaces the model file's choices."""

    placement: str | None = setting(
        "DLRM table placement over the model file's: table_wise | row_wise | planned", optional=True,
        choices=("table_wise", "row_wise", "planned"), elsewhere="applies to DLRM workloads, not {kind}")
    dense_fusion: str | None = setting(
        "DLRM dense element-wise kernels over the model file's: epilogue (HugeCTR's) | unfused (PyTorch's) | "
        "legacy", optional=True, choices=("epilogue", "unfused", "legacy"),
        elsewhere="applies to DLRM workloads, not {kind}")
    plan_file: str | None = setting(
        "sharding plan CSV to force (table, sharding, ranks[, mode]); e.g. a plan.csv from simfuse run",
        optional=True, flag="--plan / plan_file", elsewhere="a sharding plan applies to DLRM workloads, not {kind}")
    global_batch: int | None = setting(
        "strong scaling: this global batch at every node count (DLRM; default: the model file's)", minimum=1,
        maximum=MAX_SCALED_BATCH, optional=True, flag="--global-batch / global_batch",
        elsewhere="scaling modes apply to DLRM workloads, not {kind}")
    batch_per_gpu: int | None = setting(
        "weak scaling: this batch per GPU, global batch = GPUs x it (DLRM)", minimum=1, maximum=MAX_SCALED_BATCH,
        optional=True, flag="--batch-per-gpu / batch_per_gpu",
        elsewhere="scaling modes apply to DLRM workloads, not {kind}")

    @property
    def scaling(self) -> str:
        """``strong`` (fixed global batch), ``weak`` (fixed batch per GPU) or ``model`` (the file's batch)."""
        return "weak" if self.batch_per_gpu else "strong" if self.global_batch else "model"

    def validate(self, source: str) -> None:
        if self.global_batch is not None and self.batch_per_gpu is not None:
            raise SpecError(source, "batch_per_gpu", "give global_batch (strong scaling) or batch_per_gpu (weak "
                                                     "scaling), not both")


register_settings("dlrm", DLRMSettings)


@dataclass(frozen=True)
class TransformerDecodeSpec:
    """Tensor-parallel decode: per layer an attention projection and an MLP down projection, each a GEMV whose
    output is all-reduced over the tensor-parallel group (the fused GEMV + AllReduce)."""

    name: str
    layers: int
    hidden: int
    ffn: int
    tokens: int
    dtype: str = "bf16"
    launch: str = "eager"                    # LAUNCHES
    kind: str = "transformer_tp_decode"
    source: str = "<memory>"
    inputs: InputSpace | None = field(default=None, compare=False, repr=False)  # the uncertain: block


@dataclass(frozen=True)
class MoESpec:
    """A stack of MoE layers: dispatch All-to-All, expert up-projection GEMM, expert down-projection GEMM fused
    with the combine All-to-All (outputs back to token owners)."""

    name: str
    layers: int
    tokens_per_gpu: int
    hidden: int
    ffn: int
    experts_per_gpu: int
    top_k: int
    dtype: str = "bf16"
    launch: str = "eager"                    # LAUNCHES
    kind: str = "moe_layer"
    source: str = "<memory>"
    inputs: InputSpace | None = field(default=None, compare=False, repr=False)  # the uncertain: block


@dataclass(frozen=True)
class LLMSpec:
    """One training step of a dense decoder-only transformer (Llama-3 style: GQA attention, SwiGLU MLP, untied
    embeddings) with Megatron tensor parallelism inside a node and data parallelism across replicas
    (:mod:`simfuse.workloads.llm` has the operator graph).

    ``micro_batch``: sequences of ``seq_len`` tokens per model replica (TP group) per step, i.e. every GPU of
    the TP group works on these sequences (one micro-batch, no gradient accumulation).  ``tp`` must divide the
    GPUs per node (checked when the system is known); DP size = ranks / tp.  ``sequence_parallel``: activations
    between the TP regions are sharded along the sequence, so each TP all-reduce becomes a reduce-scatter
    (after row-parallel GEMMs) and an all-gather (before column-parallel GEMMs).  ``fuse``: which fused
    operators the ``fused`` mode uses (``gemm_rs``: row-parallel GEMM + ReduceScatter, ``ag_gemm``: AllGather +
    column-parallel GEMM); both need ``sequence_parallel``.  ``causal``: attention-core FLOP are halved
    (masked-out key blocks are skipped, as flash-attention kernels do)."""

    name: str
    layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    vocab: int
    seq_len: int
    micro_batch: int
    tp: int
    dtype: str = "bf16"
    grad_dtype: str = "fp32"
    bucket_bytes: float = 25 * 2**20      # DDP gradient bucket (ddp_bucket_mib in the file)
    sequence_parallel: bool = False
    fuse: tuple[str, ...] = ()
    causal: bool = True
    launch: str = "eager"                    # LAUNCHES
    kind: str = "llm_tp_dp"
    source: str = "<memory>"
    inputs: InputSpace | None = field(default=None, compare=False, repr=False)  # the uncertain: block

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def tokens(self) -> int:
        """Tokens per replica per step (rows of every activation of a TP rank without sequence parallelism)."""
        return self.seq_len * self.micro_batch


WorkloadSpec = DLRMSpec | TransformerDecodeSpec | MoESpec | LLMSpec


def _int_list(f: Fields, key: str) -> tuple[int, ...]:
    vals = f.list(key, max_items=MAX_LAYERS)
    out = []
    for i, v in enumerate(vals):
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_WIDTH:
            raise SpecError(f.source, f"{f.name(key)}[{i}]",
                            f"expected an integer in 1..{MAX_WIDTH}, got {short_repr(v)}")
        out.append(int(v))
    if not out:
        raise SpecError(f.source, f.name(key), "must not be empty")
    return tuple(out)


def _tables(f: Fields) -> tuple[TableSpec, ...]:
    emb = f.sub("embedding")
    tables: list[TableSpec] = []
    if emb.has("tables"):
        for i, t in enumerate(emb.list("tables", max_items=MAX_TABLES)):
            tf = Fields(t, f.source, f"{emb.name('tables')}[{i}]")
            tables.append(TableSpec(rows=tf.integer("rows", min_value=1, max_value=MAX_ROWS),
                                    pooling=tf.number("pooling", positive=True, max_value=MAX_POOLING)))
            tf.reject_unknown()
    else:
        rows = emb.list("rows", max_items=MAX_TABLES)
        pooling = emb.list("pooling", max_items=MAX_TABLES)
        if len(rows) != len(pooling):
            raise SpecError(f.source, emb.name("pooling"), f"has {len(pooling)} entries but rows has {len(rows)}")
        for i, (r, p) in enumerate(zip(rows, pooling, strict=False)):
            if isinstance(r, bool) or not isinstance(r, int) or not 1 <= r <= MAX_ROWS:
                raise SpecError(f.source, f"{emb.name('rows')}[{i}]",
                                f"expected an integer in 1..{MAX_ROWS}, got {short_repr(r)}")
            if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p <= MAX_POOLING:  # NaN fails too
                raise SpecError(f.source, f"{emb.name('pooling')}[{i}]",
                                f"expected a number in (0, {MAX_POOLING}], got {short_repr(p)}")
            tables.append(TableSpec(int(r), float(p)))
    if not tables:
        raise SpecError(f.source, emb.name("tables"), "needs at least one table")
    return tuple(tables), emb


def _dlrm(root: Fields, source: str) -> DLRMSpec:
    tables, emb = _tables(root)
    dim = emb.integer("dim", min_value=1, max_value=MAX_WIDTH)
    placement = emb.string("placement", "table_wise", choices=PLACEMENTS)
    emb_dtype = emb.string("dtype", "fp32", choices=DTYPES)
    comm_dtype = emb.string("comm_dtype", emb_dtype, choices=DTYPES)
    memfrac = emb.number("memory_fraction", 0.5, positive=True, max_value=1.0)
    opt = emb.number("optimizer_state_factor", 1.0, min_value=0.0, max_value=1000.0)
    bags = emb.integer("bags_per_wg", 4, min_value=1, max_value=MAX_GLOBAL_BATCH)
    input_dist = emb.string("input_dist", "prefetch", choices=INPUT_DISTS)
    key_dtype = emb.string("key_dtype", "int64", choices=tuple(KEY_DTYPE_BYTES))
    sparse_backward = emb.string("sparse_backward", "sorted", choices=SPARSE_BACKWARDS)
    ids_dedup = emb.boolean("ids_dedup", False)
    ids_zipf_s = emb.number("ids_zipf_s", IDS_ZIPF_S, min_value=0.0, max_value=4.0)
    dp_below = emb.number("data_parallel_below_mib", 0.0, min_value=0.0, max_value=2**30) * 2**20
    emb.reject_unknown()
    inter = root.sub("interaction")
    kind = inter.string("kind", choices=INTERACTIONS)
    if kind != "dcn":  # the cross network's shape: a setting the other interactions would silently ignore
        for key in ("layers", "low_rank"):
            if inter.has(key):
                raise SpecError(inter.source, inter.name(key), f"applies to kind: dcn (the cross network), not {kind}")
    # a DCN of 0 cross layers is its concatenation alone (HugeCTR's Concat without MultiCross)
    dcn_layers = inter.integer("layers", 3 if kind == "dcn" else 0, min_value=0, max_value=MAX_LAYERS)
    dcn_rank = inter.integer("low_rank", 512 if kind == "dcn" else 0, min_value=0, max_value=MAX_WIDTH)
    inter.reject_unknown()
    spec = DLRMSpec(
        name=root.label("name"),
        global_batch=root.integer("global_batch", min_value=1, max_value=MAX_GLOBAL_BATCH),
        dim=dim,
        tables=tables,
        dense_features=root.integer("dense_features", min_value=1, max_value=MAX_WIDTH),
        bottom_mlp=_int_list(root, "bottom_mlp"),
        top_mlp=_int_list(root, "top_mlp"),
        interaction=kind,
        dcn_layers=dcn_layers,
        dcn_low_rank=dcn_rank,
        embedding_dtype=emb_dtype,
        dense_dtype=root.string("dense_dtype", "bf16", choices=DTYPES),
        placement=placement,
        embedding_memory_fraction=memfrac,
        optimizer_state_factor=opt,
        bucket_bytes=root.number("ddp_bucket_mib", 25.0, positive=True, max_value=2**20) * 2**20,
        bags_per_wg=bags,
        fuse_backward=root.boolean("fuse_backward", True),
        embedding_comm_dtype="" if comm_dtype == emb_dtype else comm_dtype,
        grad_dtype=root.string("grad_dtype", "fp32", choices=DTYPES),
        dense_allreduce=root.string("dense_allreduce", "bucketed", choices=DENSE_ALLREDUCES),
        schedule=root.string("schedule", "bulk", choices=SCHEDULES),
        dense_optimizer=root.string("dense_optimizer", "none", choices=DENSE_OPTIMIZERS),
        dense_fusion=root.string("dense_fusion", "epilogue", choices=DENSE_FUSIONS),
        async_wgrad=root.boolean("async_wgrad", False),
        input_dist=input_dist,
        key_dtype=key_dtype,
        sparse_backward=sparse_backward,
        ids_dedup=ids_dedup,
        ids_zipf_s=ids_zipf_s,
        data_parallel_below_bytes=dp_below,
        launch=root.string("launch", "eager", choices=LAUNCHES),
        source=source,
    )
    if spec.bottom_mlp[-1] != dim:
        raise SpecError(source, "bottom_mlp", f"last layer ({spec.bottom_mlp[-1]}) must equal embedding.dim ({dim})")
    root.reject_unknown(extra_allowed=("kind", "description"))
    return spec


def _decode(root: Fields, source: str) -> TransformerDecodeSpec:
    spec = TransformerDecodeSpec(
        name=root.label("name"), layers=root.integer("layers", min_value=1, max_value=MAX_LAYERS),
        hidden=root.integer("hidden", min_value=1, max_value=MAX_WIDTH),
        ffn=root.integer("ffn", min_value=1, max_value=MAX_WIDTH), tokens=root.integer("tokens", min_value=1),
        dtype=root.string("dtype", "bf16", choices=DTYPES), launch=root.string("launch", "eager", choices=LAUNCHES),
        source=source)
    if spec.tokens > 64:
        raise SpecError(source, "tokens", f"decode GEMV expects 1..64 tokens, got {spec.tokens}")
    root.reject_unknown(extra_allowed=("kind", "description"))
    return spec


def _moe(root: Fields, source: str) -> MoESpec:
    spec = MoESpec(
        name=root.label("name"), layers=root.integer("layers", min_value=1, max_value=MAX_LAYERS),
        tokens_per_gpu=root.integer("tokens_per_gpu", min_value=1, max_value=MAX_TOKENS_PER_GPU),
        hidden=root.integer("hidden", min_value=1, max_value=MAX_WIDTH),
        ffn=root.integer("ffn", min_value=1, max_value=MAX_WIDTH),
        experts_per_gpu=root.integer("experts_per_gpu", min_value=1, max_value=MAX_EXPERTS_PER_GPU),
        top_k=root.integer("top_k", min_value=1, max_value=MAX_EXPERTS_PER_GPU), dtype=root.string("dtype", "bf16", choices=DTYPES),
        launch=root.string("launch", "eager", choices=LAUNCHES), source=source)
    root.reject_unknown(extra_allowed=("kind", "description"))
    return spec


def _llm_fuse(root: Fields, sp: bool) -> tuple[str, ...]:
    """``fuse``: true (every fusable operator), false / "none", one of LLM_FUSED, "both", or a list of them.
    Default: true with sequence parallelism (the fused operators replace its reduce-scatter/all-gather), else
    false."""
    val = root.data.get("fuse")
    root._used.add("fuse")
    if val is None:
        val = sp
    if isinstance(val, bool):
        out = LLM_FUSED if val else ()
    elif isinstance(val, str) and val in ("none", "both", *LLM_FUSED):
        out = {"none": (), "both": LLM_FUSED}.get(val, (val,))
    elif isinstance(val, list) and all(isinstance(v, str) and v in LLM_FUSED for v in val):
        out = tuple(v for v in LLM_FUSED if v in val)
    else:
        raise SpecError(root.source, "fuse", f"expected true, false, none, both, {', '.join(LLM_FUSED)} or a "
                                             f"list of them, got {val!r}")
    if out and not sp:
        raise SpecError(root.source, "fuse", f"{', '.join(out)} replace the reduce-scatter/all-gather of "
                                             f"sequence parallelism: set sequence_parallel: true or fuse: false")
    return out


def llm_from_fields(root: Fields, source: str) -> LLMSpec:
    sp = root.boolean("sequence_parallel", False)
    spec = LLMSpec(
        name=root.string("name"), layers=root.integer("layers", min_value=1),
        hidden=root.integer("hidden", min_value=1), ffn=root.integer("ffn", min_value=1),
        heads=root.integer("heads", min_value=1), kv_heads=root.integer("kv_heads", min_value=1),
        vocab=root.integer("vocab", min_value=1), seq_len=root.integer("seq_len", min_value=1),
        micro_batch=root.integer("micro_batch", min_value=1), tp=root.integer("tp", min_value=1),
        dtype=root.string("dtype", "bf16", choices=DTYPES), grad_dtype=root.string("grad_dtype", "fp32",
                                                                                   choices=DTYPES),
        bucket_bytes=root.number("ddp_bucket_mib", 25.0, positive=True) * 2**20, sequence_parallel=sp,
        fuse=_llm_fuse(root, sp), causal=root.boolean("causal", True),
        launch=root.string("launch", "eager", choices=LAUNCHES), source=source)
    if spec.hidden % spec.heads:
        raise SpecError(source, "heads", f"{spec.heads} heads do not divide hidden {spec.hidden}")
    if spec.heads % spec.kv_heads:
        raise SpecError(source, "kv_heads", f"{spec.kv_heads} KV heads do not divide {spec.heads} heads "
                                            f"(grouped-query attention)")
    if spec.heads % spec.tp:
        raise SpecError(source, "tp", f"tp {spec.tp} does not divide the {spec.heads} attention heads")
    if spec.kv_heads % spec.tp:
        raise SpecError(source, "tp", f"tp {spec.tp} does not divide the {spec.kv_heads} KV heads (replicated "
                                      f"KV heads are not modelled)")
    if spec.ffn % spec.tp:
        raise SpecError(source, "tp", f"tp {spec.tp} does not divide ffn {spec.ffn}")
    if sp and spec.tokens % spec.tp:
        raise SpecError(source, "seq_len", f"sequence parallelism splits the {spec.tokens} tokens of a step "
                                           f"(seq_len x micro_batch) over tp {spec.tp}: not divisible")
    root.reject_unknown(extra_allowed=("kind", "description"))
    return spec


def workload_from_dict(data: dict, source: str = "<memory>") -> WorkloadSpec:
    """Validate a workload mapping (as loaded from YAML); every number must be finite and within bounds."""

    if not isinstance(data, dict):
        Fields(data, source)  # raises: not a mapping
    spec = _workload_body({k: v for k, v in data.items() if k != "uncertain"}, source)  # the body's errors first
    inputs = parse_uncertain(data, source, _workload_body)[1]
    if "inputs" in {f.name for f in dataclasses.fields(spec)}:
        return dataclasses.replace(spec, inputs=inputs)
    if "uncertain" in data:  # a registered kind whose spec keeps no input ranges
        raise SpecError(source, "uncertain", f"kind {spec.kind} declares no input ranges")
    return spec


#: ``kind:`` -> the parser of its fields, ``(Fields, source) -> spec`` (the built-in kinds, and those
#: :func:`register_kind` adds: :func:`simfuse.workloads.base.register_workload` registers a workload's ``parse``)
_PARSERS = {"dlrm": _dlrm, "transformer_tp_decode": _decode, "moe_layer": _moe, "llm_tp_dp": llm_from_fields}


def register_kind(kind: str, parse) -> None:
    """Accept ``kind: <kind>`` in model files, its fields parsed and validated by ``parse(root, source)``
    (a :class:`~simfuse.spec._fields.Fields` over the file's mapping; return the spec, raise
    :class:`~simfuse.errors.SpecError` naming the field)."""
    _PARSERS[kind] = parse


def workload_kinds() -> tuple[str, ...]:
    """Every ``kind:`` a model file may name."""
    return tuple(_PARSERS)


def _workload_body(data: dict, source: str) -> WorkloadSpec:
    from ._fields import check_finite

    root = Fields(data, source)
    check_finite(data, source)
    kind = root.string("kind", choices=tuple(_PARSERS))
    return _PARSERS[kind](root, source)


def load_workload(path: str | Path) -> WorkloadSpec:
    """Load and validate a workload YAML file."""
    return workload_from_dict(load_yaml_mapping(path), source=str(path))
