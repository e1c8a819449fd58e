"""One training step of a dense LLM with tensor parallelism (Megatron-style, inside a node) and data
parallelism (DDP across replicas), as an operator-graph builder.

Ranks and groups.  Rank ``r`` is TP rank ``r % tp`` of replica ``r // tp``: TP groups ``tp{i}`` are node-local
blocks of ``tp`` consecutive ranks (``tp`` divides the GPUs per node), DP groups ``dp{p}`` are the ranks with
position ``p`` in their TP group (``p, p + tp, p + 2 tp, ...``), one per TP position.

Per TP rank, with ``T = seq_len x micro_batch`` tokens, hidden ``h``, ffn ``f``, ``d = h / heads`` and
``q = (heads + 2 kv_heads) d / tp`` QKV columns:

forward   embedding lookup (vocab-parallel: a bandwidth kernel) + TP all-reduce (sequence parallel:
          reduce-scatter);
          per layer: [all-gather] QKV column-parallel GEMM ``T x q x h``; attention core as GEMM-class kernel
          (``4 s^2 h / tp`` FLOP per sequence for full attention, half of it with ``causal``: masked key blocks
          are skipped as flash-attention kernels do); output projection row-parallel ``T x h x h/tp`` + TP
          all-reduce [reduce-scatter]; [all-gather] gate/up column-parallel ``T x 2f/tp x h``; down row-parallel
          ``T x h x f/tp`` + TP all-reduce [reduce-scatter];
          [all-gather] LM head column-parallel ``T x V/tp x h`` (vocab padded to a multiple of tp, as Megatron
          does); cross-entropy (bandwidth kernel over the logits).
backward  cross-entropy backward; LM head dgrad ``T x h x V/tp`` + TP all-reduce [reduce-scatter]; LM head wgrad;
          per layer in reverse: [all-gather of the output gradient] down dgrad, down wgrad, gate/up dgrad +
          TP all-reduce [reduce-scatter], gate/up wgrad, [all-gather] output-projection dgrad and wgrad,
          attention-core backward (2.5x the forward FLOP: five matmuls instead of two, FlashAttention-2, Dao
          2023), QKV dgrad + TP all-reduce [reduce-scatter], QKV wgrad; [all-gather] embedding backward
          (scatter-add of the gradient rows).  A wgrad runs on the compute stream while the all-reduce of its
          dgrad is on the network (as Megatron overlaps them).
DP        gradients (``grad_dtype``) of each replica's shard, in backward order (LM head + final norm, layers
          from the last, embedding), fill DDP buckets of ``ddp_bucket_mib``; a bucket's all-reduce on the DP
          group is launched on stream ``comm_dp`` when the wgrad of its last layer finishes, overlapped with the
          rest of backward (one bucket at a time).  The step ends when every node is done.

Parameters per TP rank: per layer ``h q + h h/tp + 3 h f/tp`` sharded plus two RMSNorm vectors ``2 h``
(replicated over TP, all-reduced over DP), embedding and LM head ``h V/tp`` each (untied, Llama 3), final norm
``h`` (:func:`param_counts`).

Left out (small next to the GEMMs, or not about communication): norms, residual adds, SwiGLU and rotary
embeddings as kernels; the cross-entropy's two small TP all-reduces (``T`` floats each); the TP all-reduce of
norm gradients with sequence parallelism; activation recomputation (the backward all-gathers reuse no saved
gathered activations: the wgrad of a column-parallel GEMM uses its saved gathered input); the optimizer step.

Fused mode (``fuse``, needs ``sequence_parallel``): ``gemm_rs`` replaces every row-parallel GEMM + reduce-scatter
(forward output projection, down projection; backward QKV, gate/up and LM head dgrad) by
:class:`~simfuse.fused.ops.GemmReduceScatter`; ``ag_gemm`` replaces every all-gather + column-parallel GEMM
(forward QKV, gate/up, LM head; backward down and output-projection dgrad) by
:class:`~simfuse.fused.ops.AllGatherGemm`.  The embedding's collectives stay bulk.

Simulation: symmetric (rank 0's program only; every rank runs a relabelling of it: every TP group and every DP
group has the same shape and every rank the same work, so this is exact) unless ``sim_mode=full`` or the fused
operators' ``natural`` tile order (incast) asks for every rank's program.
"""

from __future__ import annotations

import math

from ..collectives import Layout
from ..collectives.groups import Group, blocks
from ..costs import KernelWork
from ..errors import SpecError
from ..fused.knobs import ExecutionSpec
from ..fused.ops import AllGatherGemm, GemmReduceScatter
from ..graph import CollectiveNode, ComputeNode, FusedNode, Graph
from ..spec import LLMSpec
from ..units import DTYPE_BYTES
from .base import Workload, register_workload
from .dense import elementwise_work, gemm_work
from .dlrm_kernels import _buckets
from .op import symmetric_ok
from .result import IterationResult

#: FlashAttention-2 (Dao 2023): the backward pass runs five matmuls against the forward's two.
ATTENTION_BWD_FLOP_RATIO = 2.5
#: query rows per attention workgroup (flash-attention tile)
ATTENTION_BLOCK = 128


def padded_vocab_local(spec: LLMSpec) -> int:
    """Vocabulary rows per TP rank (vocab padded up to a multiple of tp)."""
    return math.ceil(spec.vocab / spec.tp)


def qkv_local(spec: LLMSpec) -> int:
    """QKV output columns per TP rank: (heads + 2 kv_heads) head_dim / tp."""
    return (spec.heads + 2 * spec.kv_heads) * spec.head_dim // spec.tp


def param_counts(spec: LLMSpec) -> dict[str, int]:
    """Parameters per TP rank: ``layer`` (one layer, sharded + replicated norms), ``lm_head`` (with the final
    norm), ``embedding``, and ``total``."""
    h, f, tp = spec.hidden, spec.ffn, spec.tp
    layer = h * qkv_local(spec) + h * (h // tp) + 3 * h * (f // tp) + 2 * h
    vl = padded_vocab_local(spec)
    out = {"layer": layer, "lm_head": h * vl + h, "embedding": h * vl}
    out["total"] = spec.layers * layer + out["lm_head"] + out["embedding"]
    return out


def attention_work(spec: LLMSpec, backward: bool = False) -> KernelWork:
    """Attention core of one TP rank (``heads / tp`` heads of every sequence) as one GEMM-class kernel: a
    workgroup handles ``ATTENTION_BLOCK`` query rows of one head against the (causal: on average half of the)
    keys.  Forward FLOP ``4 s^2 h / tp`` per sequence (``QK^T`` and ``PV``; halved when causal); HBM bytes:
    Q, K, V read and O written once (the score matrix stays on chip)."""
    s, b, d = spec.seq_len, spec.micro_batch, spec.head_dim
    hl, kvl = spec.heads // spec.tp, spec.kv_heads // spec.tp
    eb = DTYPE_BYTES[spec.dtype]
    causal = 0.5 if spec.causal else 1.0
    flops = causal * 4.0 * s * s * d * hl * b * (ATTENTION_BWD_FLOP_RATIO if backward else 1.0)
    blk = min(ATTENTION_BLOCK, s)
    wgs = b * hl * math.ceil(s / blk)
    unique = (2 * hl + 2 * kvl) * s * b * d * eb * (2.0 if backward else 1.0)  # backward also reads/writes grads
    traffic = (2 * blk * d + 2 * causal * s * d) * eb * (2.0 if backward else 1.0)
    return KernelWork("gemm", wgs, flops / wgs, unique / wgs, spec.dtype, "compute",
                      (("m", s * b * hl), ("n", int(causal * s)), ("k", d)), traffic_bytes_per_wg=traffic)


def _phase(name: str) -> str:
    """Breakdown label of a node: its name without the layer index (``qkv_fwd3`` -> ``qkv_fwd``)."""
    return name.rstrip("0123456789")


def _check(spec: LLMSpec, g: int, nodes: int) -> None:
    if nodes < 1:
        raise SpecError("<argument>", "nodes", f"must be >= 1, got {nodes}")
    if g % spec.tp:
        raise SpecError(spec.source, "tp", f"tp {spec.tp} must divide the {g} GPUs per node (TP stays inside a "
                                           f"node)")


def build_llm_graph(spec: LLMSpec, system, nodes: int, mode: str, *, gpus_per_node: int | None = None,
                    execution: ExecutionSpec | None = None) -> Graph:
    """The operator graph of one training step (nodes only); ``mode``: ``baseline`` or ``fused``."""
    if mode not in ("baseline", "fused"):
        raise SpecError("<argument>", "mode", f"unknown mode {mode!r}; expected baseline or fused")
    ex = execution or ExecutionSpec()
    g = gpus_per_node or system.gpus_per_node
    _check(spec, g, nodes)
    n, tp = nodes * g, spec.tp
    dp = n // tp
    fuse = set(spec.fuse) if mode == "fused" else set()
    sym = symmetric_ok(ex.knobs, "full" if ex.sim_mode == "full" else "auto")
    graph = Graph(nodes, g, name=spec.name)
    graph.meta.update({"tp": tp, "dp": dp, "classes": 1})
    tp_groups = blocks(n, tp, "tp")
    dp_groups = [Group(f"dp{p}", tuple(range(p, n, tp))) for p in range(tp)]
    for grp in (tp_groups[:1] + dp_groups[:1]) if sym else (tp_groups + dp_groups):
        graph.add_group(grp)

    T, h, f = spec.tokens, spec.hidden, spec.ffn
    dt, eb, geb = spec.dtype, DTYPE_BYTES[spec.dtype], DTYPE_BYTES[spec.grad_dtype]
    q, vl = qkv_local(spec), padded_vocab_local(spec)
    sp = spec.sequence_parallel and tp > 1
    act_bytes = float(T * h * eb)  # one TP collective's buffer (nccl-tests convention for all three ops)
    layout = Layout(nodes, g)
    ops: dict[tuple, object] = {}

    def op(cls, m, nn, k):
        key = (cls.__name__, m, nn, k)
        if key not in ops:
            ops[key] = cls({"m": m, "n": nn, "k": k, "tp": tp, "dtype": dt}, layout, spec.source)
        return ops[key]

    counts = param_counts(spec)
    # DP gradient units in backward order and their bytes
    units = [counts["lm_head"]] + [counts["layer"]] * spec.layers + [counts["embedding"]]
    buckets, closes = _buckets([float(c * geb) for c in units], spec.bucket_bytes)
    closing = {last: k for k, last in closes.items()}
    graph.meta["buckets"] = buckets

    attn_f, attn_b = attention_work(spec), attention_work(spec, backward=True)
    for r in ([0] if sym else range(n)):
        rg = graph.program(r)
        tpg, dpg = f"tp{r // tp}", f"dp{r % tp}"

        def comp(work, name, deps=(), rg=rg):
            return rg.add(ComputeNode(name=name, work=work, phase=_phase(name), deps=tuple(d for d in deps if
                                                                                          d is not None)))

        def coll(kind, name, dep, rg=rg, tpg=tpg):
            return rg.add(CollectiveNode(name=name, op=kind, group=tpg, size_bytes=act_bytes, phase=f"tp_{kind}",
                                         deps=(dep,) if dep is not None else ()))

        def col_parallel(name, nn, k, ready, rg=rg, tpg=tpg):
            """[all-gather +] ``T x nn x k`` GEMM reading the (gathered) activation ``ready``; returns the
            GEMM's id (its output is local)."""
            if sp and "ag_gemm" in fuse:
                return rg.add(FusedNode(name=name, op=op(AllGatherGemm, T, nn * tp, k), group=tpg,
                                        knobs=ex.knobs, phase=f"{_phase(name)}+ag",
                                        wait_phase=f"{_phase(name)}+ag_exposed",
                                        deps=(ready,) if ready is not None else ()))
            if sp:
                ready = coll("all_gather", f"{name}:all_gather", ready)
            return comp(gemm_work(name, T, nn, k, dt), name, (ready,))

        def row_parallel(name, nn, k_local, ready, rg=rg, tpg=tpg):
            """``T x nn x k_local`` GEMM whose partial output is summed over TP: all-reduce, or reduce-scatter
            with sequence parallelism (fused: GEMM + ReduceScatter).  Returns the id whose completion means the
            reduced output is there."""
            if tp == 1:
                return comp(gemm_work(name, T, nn, k_local, dt), name, (ready,))
            if sp and "gemm_rs" in fuse:
                return rg.add(FusedNode(name=name, op=op(GemmReduceScatter, T, nn, k_local * tp), group=tpg,
                                        knobs=ex.knobs, phase=f"{_phase(name)}+rs",
                                        wait_phase=f"{_phase(name)}+rs_exposed",
                                        deps=(ready,) if ready is not None else ()))
            c = comp(gemm_work(name, T, nn, k_local, dt), name, (ready,))
            return coll("reduce_scatter" if sp else "all_reduce", f"{name}:{'rs' if sp else 'ar'}", c)

        def grads_done(unit: int, dep: int, rg=rg, dpg=dpg):
            k = closing.get(unit)
            if k is not None and dp > 1:
                rg.add(CollectiveNode(name=f"ddp_allreduce{k}", op="all_reduce", group=dpg, size_bytes=buckets[k],
                                      stream="comm_dp", phase=f"allreduce_bucket{k}", deps=(dep,)))

        # ---------------- forward
        e = comp(elementwise_work("embedding_fwd", 2.0 * T * h * eb, 0.0, dt), "embedding_fwd")
        x = coll("reduce_scatter" if sp else "all_reduce", "embedding_fwd:tp", e) if tp > 1 else e
        for li in range(spec.layers):
            col_parallel(f"qkv_fwd{li}", q, h, x)
            comp(attn_f, f"attn_fwd{li}")
            x = row_parallel(f"o_proj_fwd{li}", h, h // tp, None)
            col_parallel(f"gate_up_fwd{li}", 2 * f // tp, h, x)
            x = row_parallel(f"down_fwd{li}", h, f // tp, None)
        col_parallel("lm_head_fwd", vl, h, x)
        comp(elementwise_work("cross_entropy_fwd", 2.0 * T * vl * eb, 5.0 * T * vl, dt), "cross_entropy_fwd")
        # ---------------- backward
        comp(elementwise_work("cross_entropy_bwd", 2.0 * T * vl * eb, 3.0 * T * vl, dt), "cross_entropy_bwd")
        dy = row_parallel("lm_head_dgrad", h, vl, None)
        w = comp(gemm_work("lm_head_wgrad", h, vl, T, dt), "lm_head_wgrad")
        grads_done(0, w)
        for li in reversed(range(spec.layers)):
            col_parallel(f"down_dgrad{li}", f // tp, h, dy)
            comp(gemm_work(f"down_wgrad{li}", f // tp, h, T, dt), f"down_wgrad{li}")
            dy = row_parallel(f"gate_up_dgrad{li}", h, 2 * f // tp, None)
            comp(gemm_work(f"gate_up_wgrad{li}", h, 2 * f // tp, T, dt), f"gate_up_wgrad{li}")
            col_parallel(f"o_proj_dgrad{li}", h // tp, h, dy)
            comp(gemm_work(f"o_proj_wgrad{li}", h // tp, h, T, dt), f"o_proj_wgrad{li}")
            comp(attn_b, f"attn_bwd{li}")
            dy = row_parallel(f"qkv_dgrad{li}", h, q, None)
            w = comp(gemm_work(f"qkv_wgrad{li}", h, q, T, dt), f"qkv_wgrad{li}")
            grads_done(1 + spec.layers - 1 - li, w)
        if sp:
            dy = coll("all_gather", "embedding_bwd:tp", dy)
        w = comp(elementwise_work("embedding_bwd", 2.0 * T * h * geb, T * h, spec.grad_dtype), "embedding_bwd",
                 (dy,))
        grads_done(spec.layers + 1, w)
    return graph


def simulate_llm(spec: LLMSpec, system, nodes: int, *, gpus_per_node: int | None = None,
                 execution: ExecutionSpec | None = None, record: bool = False) -> dict[str, IterationResult]:
    """One training step in the modes ``execution.mode`` asks for: ``{"baseline": ..., "fused": ...}``."""
    from .models import simulate_workload_graph

    return simulate_workload_graph(spec, system, nodes, gpus_per_node=gpus_per_node, execution=execution,
                                   record=record)


@register_workload("llm_tp_dp")
class LLMWorkload(Workload):
    """One training step with tensor + data parallelism (:func:`build_llm_graph`)."""

    spec_type = LLMSpec

    def build_graph(self, system, nodes, mode, *, gpus_per_node, execution, plan=None):
        return build_llm_graph(self.spec, system, nodes, mode, gpus_per_node=gpus_per_node, execution=execution)

    def estimate(self, pricing, topology, nodes, gpus_per_node, sim_mode, execution, workers):
        """Per layer 4 TP GEMMs (+ their fused collectives) of 128 x 128 tiles."""
        sp = self.spec
        w = sp.tokens * max(sp.hidden, sp.ffn) / max(1, sp.tp) / (128.0 * 128.0)
        return self.kernel_estimate(pricing, topology, nodes, gpus_per_node, w, 4 * sp.layers)

    def min_simulation_s(self, pricing) -> float:
        return pricing.LLM_SECONDS_PER_LAYER * self.spec.layers
