"""Workload specs (``models/*.yaml``): DLRM training, tensor-parallel decode, MoE layer.

Every file has ``name`` and ``kind`` (``dlrm``, ``transformer_tp_decode``, ``moe_layer``); the rest depends on
the kind.  Validation errors name the file and the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import SpecError
from ._fields import Fields, load_yaml_mapping

KINDS = ("dlrm", "transformer_tp_decode", "moe_layer")
DTYPES = ("fp32", "bf16", "fp16")
PLACEMENTS = ("table_wise", "row_wise", "planned")  # planned: simfuse.workloads.planner
INTERACTIONS = ("dot", "dcn")


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
    kind: str = "dlrm"
    source: str = "<memory>"


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
    kind: str = "transformer_tp_decode"
    source: str = "<memory>"


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
    kind: str = "moe_layer"
    source: str = "<memory>"


WorkloadSpec = DLRMSpec | TransformerDecodeSpec | MoESpec


def _int_list(f: Fields, key: str) -> tuple[int, ...]:
    vals = f.list(key)
    out = []
    for i, v in enumerate(vals):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise SpecError(f.source, f"{f.name(key)}[{i}]", f"expected a positive integer, got {v!r}")
        out.append(int(v))
    if not out:
        raise SpecError(f.source, f.name(key), "must not be empty")
    return tuple(out)


def _tables(f: Fields) -> tuple[TableSpec, ...]:
    emb = f.sub("embedding")
    tables: list[TableSpec] = []
    if emb.has("tables"):
        for i, t in enumerate(emb.list("tables")):
            tf = Fields(t, f.source, f"{emb.name('tables')}[{i}]")
            tables.append(TableSpec(rows=tf.integer("rows", min_value=1), pooling=tf.number("pooling", positive=True)))
            tf.reject_unknown()
    else:
        rows = emb.list("rows")
        pooling = emb.list("pooling")
        if len(rows) != len(pooling):
            raise SpecError(f.source, emb.name("pooling"), f"has {len(pooling)} entries but rows has {len(rows)}")
        for i, (r, p) in enumerate(zip(rows, pooling, strict=False)):
            if isinstance(r, bool) or not isinstance(r, int) or r < 1:
                raise SpecError(f.source, f"{emb.name('rows')}[{i}]", f"expected a positive integer, got {r!r}")
            if isinstance(p, bool) or not isinstance(p, (int, float)) or p <= 0:
                raise SpecError(f.source, f"{emb.name('pooling')}[{i}]", f"expected a positive number, got {p!r}")
            tables.append(TableSpec(int(r), float(p)))
    if not tables:
        raise SpecError(f.source, emb.name("tables"), "needs at least one table")
    return tuple(tables), emb


def _dlrm(root: Fields, source: str) -> DLRMSpec:
    tables, emb = _tables(root)
    dim = emb.integer("dim", min_value=1)
    placement = emb.string("placement", "table_wise", choices=PLACEMENTS)
    emb_dtype = emb.string("dtype", "fp32", choices=DTYPES)
    memfrac = emb.number("memory_fraction", 0.5, positive=True, max_value=1.0)
    opt = emb.number("optimizer_state_factor", 1.0, min_value=0.0)
    bags = emb.integer("bags_per_wg", 4, min_value=1)
    emb.reject_unknown()
    inter = root.sub("interaction")
    kind = inter.string("kind", choices=INTERACTIONS)
    dcn_layers = inter.integer("layers", 3 if kind == "dcn" else 0, min_value=0)
    dcn_rank = inter.integer("low_rank", 512 if kind == "dcn" else 0, min_value=0)
    inter.reject_unknown()
    spec = DLRMSpec(
        name=root.string("name"),
        global_batch=root.integer("global_batch", min_value=1),
        dim=dim,
        tables=tables,
        dense_features=root.integer("dense_features", min_value=1),
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
        bucket_bytes=root.number("ddp_bucket_mib", 25.0, positive=True) * 2**20,
        bags_per_wg=bags,
        fuse_backward=root.boolean("fuse_backward", True),
        source=source,
    )
    if spec.bottom_mlp[-1] != dim:
        raise SpecError(source, "bottom_mlp", f"last layer ({spec.bottom_mlp[-1]}) must equal embedding.dim ({dim})")
    root.reject_unknown(extra_allowed=("kind", "description"))
    return spec


def _decode(root: Fields, source: str) -> TransformerDecodeSpec:
    spec = TransformerDecodeSpec(
        name=root.string("name"), layers=root.integer("layers", min_value=1), hidden=root.integer("hidden", min_value=1),
        ffn=root.integer("ffn", min_value=1), tokens=root.integer("tokens", min_value=1),
        dtype=root.string("dtype", "bf16", choices=DTYPES), source=source)
    if spec.tokens > 64:
        raise SpecError(source, "tokens", f"decode GEMV expects 1..64 tokens, got {spec.tokens}")
    root.reject_unknown(extra_allowed=("kind", "description"))
    return spec


def _moe(root: Fields, source: str) -> MoESpec:
    spec = MoESpec(
        name=root.string("name"), layers=root.integer("layers", min_value=1),
        tokens_per_gpu=root.integer("tokens_per_gpu", min_value=1), hidden=root.integer("hidden", min_value=1),
        ffn=root.integer("ffn", min_value=1), experts_per_gpu=root.integer("experts_per_gpu", min_value=1),
        top_k=root.integer("top_k", min_value=1), dtype=root.string("dtype", "bf16", choices=DTYPES), source=source)
    root.reject_unknown(extra_allowed=("kind", "description"))
    return spec


def workload_from_dict(data: dict, source: str = "<memory>") -> WorkloadSpec:
    root = Fields(data, source)
    kind = root.string("kind", choices=KINDS)
    return {"dlrm": _dlrm, "transformer_tp_decode": _decode, "moe_layer": _moe}[kind](root, source)


def load_workload(path: str | Path) -> WorkloadSpec:
    """Load and validate a workload YAML file."""
    return workload_from_dict(load_yaml_mapping(path), source=str(path))
