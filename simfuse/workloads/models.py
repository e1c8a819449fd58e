"""Graph builders for tensor-parallel decode and MoE layers (built from the fused operators).

Layers are identical and run back to back, so the graph holds one layer and ``Graph.repeat`` multiplies it.
"""

from __future__ import annotations

import time

from ..collectives.groups import world
from ..collectives.tuner import Tuner
from ..errors import SpecError
from ..fused import make_op
from ..fused.knobs import DTYPE_BYTES, ExecutionSpec, modes_of
from ..graph import CollectiveNode, ComputeNode, Graph
from ..graph.executor import Executor
from ..spec import MoESpec, TransformerDecodeSpec
from ..system import as_system
from .dense import gemm_work
from .dlrm import IterationResult
from .op import add_op, symmetric_ok


def _ranks(symmetric: bool, n: int):
    return [0] if symmetric else range(n)


def build_decode_graph(spec: TransformerDecodeSpec, system, nodes: int, mode: str, *, gpus_per_node=None,
                       execution: ExecutionSpec | None = None) -> Graph:
    """One decode layer over all GPUs (tensor parallel): column-parallel QKV GEMV, row-parallel output projection
    + AllReduce, column-parallel gate/up GEMV, row-parallel down projection + AllReduce."""
    ex = execution or ExecutionSpec()
    g = gpus_per_node or system.gpus_per_node
    n = nodes * g
    h, f, m = spec.hidden, spec.ffn, spec.tokens
    sym = symmetric_ok(ex.knobs, "full" if ex.sim_mode == "full" else "auto")
    graph = Graph(nodes, g, repeat=spec.layers, name=spec.name)
    graph.add_group(world(n))
    if h % n:  # the projections' output rows (hidden) split over the ranks: name the model file's field
        raise SpecError(spec.source, "hidden", f"{h} does not split over {n} ranks (tensor parallel over every GPU)")
    o_op = make_op("gemv_all_reduce", {"n": h, "k": h, "tokens": m, "dtype": spec.dtype}, nodes, g, spec.source)
    d_op = make_op("gemv_all_reduce", {"n": h, "k": f, "tokens": m, "dtype": spec.dtype}, nodes, g, spec.source)
    for r in _ranks(sym, n):
        rg = graph.program(r)
        q = rg.add(ComputeNode(name="qkv", work=gemm_work("qkv", m, max(1, 3 * h // n), h, spec.dtype),
                               phase="qkv_gemv"))
        o = add_op(rg, o_op, mode, ex.knobs, "world", deps=(q,), label="o_proj+allreduce")
        u = rg.add(ComputeNode(name="gate_up", work=gemm_work("gate_up", m, max(1, 2 * f // n), h, spec.dtype),
                               phase="gate_up_gemv", deps=(o,)))
        add_op(rg, d_op, mode, ex.knobs, "world", deps=(u,), label="down_proj+allreduce")
    return graph


def build_moe_graph(spec: MoESpec, system, nodes: int, mode: str, *, gpus_per_node=None,
                    execution: ExecutionSpec | None = None) -> Graph:
    """One MoE layer with expert parallelism over all GPUs: dispatch All-to-All (bulk in both modes), expert up
    projection GEMM, expert down projection GEMM + combine All-to-All (the fused operator)."""
    ex = execution or ExecutionSpec()
    g = gpus_per_node or system.gpus_per_node
    n = nodes * g
    rows = spec.tokens_per_gpu * spec.top_k
    eb = DTYPE_BYTES[spec.dtype]  # fp8 dispatch tokens are 1 byte (they were counted as 4)
    sym = symmetric_ok(ex.knobs, "full" if ex.sim_mode == "full" else "auto")
    graph = Graph(nodes, g, repeat=spec.layers, name=spec.name)
    graph.add_group(world(n))
    op = make_op("gemm_all_to_all", {"tokens": spec.tokens_per_gpu, "hidden": spec.hidden, "ffn": spec.ffn,
                                     "experts_per_gpu": spec.experts_per_gpu, "top_k": spec.top_k,
                                     "dtype": spec.dtype}, nodes, g, spec.source)
    for r in _ranks(sym, n):
        rg = graph.program(r)
        d = rg.add(CollectiveNode(name="dispatch_a2a", op="all_to_all", group="world",
                                  size_bytes=float(rows * spec.hidden * eb), phase="dispatch_a2a"))
        u = rg.add(ComputeNode(name="expert_up", work=gemm_work("expert_up", rows, 2 * spec.ffn, spec.hidden,
                                                                spec.dtype), phase="expert_up_gemm", deps=(d,)))
        add_op(rg, op, mode, ex.knobs, "world", deps=(u,), label="expert_down_gemm+combine_a2a")
    return graph


def run_builder(builder, spec, system, nodes, *, gpus_per_node=None, execution=None, record=False, cost=None,
                knobs=None) -> dict[str, IterationResult]:
    """Build and run a workload graph per mode (``execution.mode``) with one tuner shared by the modes."""
    import dataclasses

    from ..system import System

    system = as_system(system)
    if cost is not None:
        system = System(system.topology, cost, system.profile, system.nominal)
    ex = execution or ExecutionSpec()
    if knobs is not None:
        ex = dataclasses.replace(ex, knobs=knobs)
    g = gpus_per_node or system.gpus_per_node
    modes = modes_of(ex.mode)
    tuner = Tuner(system.topology, nodes, g, ex.forced_algorithms())
    out = {}
    for m in modes:
        wall0 = time.perf_counter()
        graph = builder(spec, system, nodes, m, gpus_per_node=g, execution=ex)
        res = Executor(system, graph, seed=ex.seed, record=record, record_usage=record, tuner=tuner).run()
        ir = IterationResult(m, res.time_s, res.compute_time_s, res.exposed_comm_time_s, res.sim_mode, 1,
                             res.events, time.perf_counter() - wall0, phases=list(res.critical.phases))
        if record:  # the trace shows one layer
            ir.sim, ir.net = res.sim, res.net
        out[m] = ir
    return out


def simulate_decode(spec: TransformerDecodeSpec, system, nodes: int, **kw) -> dict[str, IterationResult]:
    """One decode step (every layer); ``{"baseline": ..., "fused": ...}``."""
    return run_builder(build_decode_graph, spec, system, nodes, **kw)


def simulate_moe(spec: MoESpec, system, nodes: int, **kw) -> dict[str, IterationResult]:
    """The MoE layers of one step; ``{"baseline": ..., "fused": ...}``."""
    return run_builder(build_moe_graph, spec, system, nodes, **kw)
