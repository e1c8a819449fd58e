"""End-to-end workloads built from the fused operators: tensor-parallel decode and MoE layers.

Layers are identical and run one after another, so one layer is simulated and multiplied by the layer count.
"""

from __future__ import annotations

import time

from ..collectives import run_collective
from ..costs import CostModel, cost_model_for
from ..engine import simulate_kernel
from ..fused import FusedKnobs, make_op, run_op
from ..spec import MoESpec, TopologySpec, TransformerDecodeSpec
from .dense import gemm_work
from .dlrm import IterationResult


def _kernel_s(work, cost) -> float:
    return simulate_kernel(work, cost).time_s


def simulate_decode(spec: TransformerDecodeSpec, topology: TopologySpec, nodes: int, *, gpus_per_node=None,
                    cost: CostModel | None = None, knobs: FusedKnobs | None = None,
                    record: bool = False) -> dict[str, IterationResult]:
    """One decode step: per layer a column-parallel QKV GEMV, the row-parallel output projection + AllReduce,
    a column-parallel gate/up GEMV and the row-parallel down projection + AllReduce, over all GPUs."""
    wall0 = time.perf_counter()
    g = gpus_per_node or topology.scale_up.gpus_per_node
    n = nodes * g
    cost = cost or cost_model_for(topology)
    h, f, m = spec.hidden, spec.ffn, spec.tokens
    qkv = _kernel_s(gemm_work("qkv", m, max(1, 3 * h // n), h, spec.dtype), cost)
    up = _kernel_s(gemm_work("gate_up", m, max(1, 2 * f // n), h, spec.dtype), cost)
    o = run_op(make_op("gemv_all_reduce", {"n": h, "k": h, "tokens": m, "dtype": spec.dtype}, nodes, g, spec.source),
               topology, nodes, knobs=knobs, cost=cost)
    down, sims = run_op(make_op("gemv_all_reduce", {"n": h, "k": f, "tokens": m, "dtype": spec.dtype}, nodes, g,
                                spec.source), topology, nodes, knobs=knobs, cost=cost, record=record,
                        record_usage=record, return_sims=True)
    out = {}
    for mode in ("baseline", "fused"):
        comp = qkv + up + sum(getattr(r, f"{mode}_compute_s") for r in (o, down))
        total = qkv + up + sum(getattr(r, f"{mode}_time_s") for r in (o, down))
        L = spec.layers
        out[mode] = IterationResult(mode, L * total, L * comp, L * (total - comp), "symmetric", 1,
                                    o.events + down.events, time.perf_counter() - wall0,
                                    phases=[("qkv_gemv", 0.0, qkv), ("o_proj+allreduce", qkv, qkv + getattr(o, f"{mode}_time_s")),
                                            ("gate_up_gemv", 0.0, up), ("down_proj+allreduce", 0.0,
                                                                          getattr(down, f"{mode}_time_s"))])
        if record:  # the trace shows one layer's down projection + AllReduce
            out[mode].sim, out[mode].net = sims[mode][0], sims[mode][2]
    return out


def simulate_moe(spec: MoESpec, topology: TopologySpec, nodes: int, *, gpus_per_node=None,
                 cost: CostModel | None = None, knobs: FusedKnobs | None = None,
                 record: bool = False) -> dict[str, IterationResult]:
    """MoE layers: dispatch All-to-All (bulk in both modes), expert up projection GEMM, expert down projection
    GEMM + combine All-to-All (the fused operator)."""
    wall0 = time.perf_counter()
    g = gpus_per_node or topology.scale_up.gpus_per_node
    cost = cost or cost_model_for(topology)
    rows = spec.tokens_per_gpu * spec.top_k
    eb = 2 if spec.dtype in ("bf16", "fp16") else 4
    dispatch = run_collective(topology, nodes, "all_to_all", rows * spec.hidden * eb, gpus_per_node=g).time_s
    up = _kernel_s(gemm_work("expert_up", rows, 2 * spec.ffn, spec.hidden, spec.dtype), cost)
    op = run_op(make_op("gemm_all_to_all", {"tokens": spec.tokens_per_gpu, "hidden": spec.hidden, "ffn": spec.ffn,
                                            "experts_per_gpu": spec.experts_per_gpu, "top_k": spec.top_k,
                                            "dtype": spec.dtype}, nodes, g, spec.source),
                topology, nodes, knobs=knobs, cost=cost, record=record, record_usage=record, return_sims=True)
    op, sims = op
    out = {}
    for mode in ("baseline", "fused"):
        t_op = getattr(op, f"{mode}_time_s")
        comp = up + getattr(op, f"{mode}_compute_s")
        total = dispatch + up + t_op
        L = spec.layers
        out[mode] = IterationResult(mode, L * total, L * comp, L * (total - comp), "symmetric", 1, op.events,
                                    time.perf_counter() - wall0,
                                    phases=[("dispatch_a2a", 0.0, dispatch), ("expert_up_gemm", dispatch, dispatch + up),
                                            ("expert_down_gemm+combine_a2a", dispatch + up, total)])
        if record:  # the trace shows one layer's down projection GEMM + combine All-to-All
            out[mode].sim, out[mode].net = sims[mode][0], sims[mode][2]
    return out
