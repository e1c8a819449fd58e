"""Graph builders for tensor-parallel decode and MoE layers (built from the fused operators).

Layers are identical and run back to back, so the graph holds one layer and ``Graph.repeat`` multiplies it.
"""

from __future__ import annotations

from ..collectives.groups import world
from ..errors import SpecError
from ..fused import make_op
from ..fused.knobs import DTYPE_BYTES, ExecutionSpec, modes_of
from ..graph import CollectiveNode, ComputeNode, Graph
from ..spec import MoESpec, TransformerDecodeSpec
from ..system import as_system
from .base import Workload, register_workload
from .dense import gemm_work
from .op import add_op, symmetric_ok
from .result import IterationResult


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
    if f % n:  # the down projection's input columns (ffn) split over the ranks (the operator calls them k)
        raise SpecError(spec.source, "ffn", f"{f} does not split over {n} ranks (tensor parallel over every GPU)")
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
    experts = spec.experts_per_gpu * n  # name the model file's fields, not the operator's parameters
    if spec.top_k > experts:
        raise SpecError(spec.source, "top_k", f"{spec.top_k} exceeds the {experts} experts of {n} GPUs "
                        f"({spec.experts_per_gpu} per GPU): every token goes to top_k distinct experts")
    if rows % experts:
        raise SpecError(spec.source, "tokens_per_gpu", f"tokens_per_gpu*top_k ({rows}) must divide evenly over "
                        f"the {experts} experts of {n} GPUs (experts_per_gpu*GPUs)")
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


def simulate_workload_graph(spec, system, nodes: int, *, gpus_per_node=None, execution=None, record=False,
                            cost=None) -> dict[str, IterationResult]:
    """Every mode ``execution.mode`` asks for of a workload whose run is its graph per mode
    (:meth:`~simfuse.workloads.base.Workload.simulate`); ``cost``: a cost model replacing the system's."""
    from ..system import System
    from .base import workload_for

    system = as_system(system)
    if cost is not None:
        system = System(system.topology, cost, system.profile, system.nominal, system.rate_resolution_s)
    ex = execution or ExecutionSpec()
    g = gpus_per_node or system.gpus_per_node
    return workload_for(spec).simulate(system, nodes, g, modes_of(ex.mode), ex, record=record)


def simulate_decode(spec: TransformerDecodeSpec, system, nodes: int, **kw) -> dict[str, IterationResult]:
    """One decode step (every layer); ``{"baseline": ..., "fused": ...}``."""
    return simulate_workload_graph(spec, system, nodes, **kw)


def simulate_moe(spec: MoESpec, system, nodes: int, **kw) -> dict[str, IterationResult]:
    """The MoE layers of one step; ``{"baseline": ..., "fused": ...}``."""
    return simulate_workload_graph(spec, system, nodes, **kw)


@register_workload("transformer_tp_decode")
class DecodeWorkload(Workload):
    """Tensor-parallel decode (:func:`build_decode_graph`)."""

    spec_type = TransformerDecodeSpec

    def build_graph(self, system, nodes, mode, *, gpus_per_node, execution, plan=None):
        return build_decode_graph(self.spec, system, nodes, mode, gpus_per_node=gpus_per_node, execution=execution)

    def estimate(self, pricing, topology, nodes, gpus_per_node, sim_mode, execution, workers):
        """Per layer two GEMV + AllReduce operators of ``max(hidden, ffn) / 64`` workgroups."""
        sp = self.spec
        # the GEMV + AllReduce pushes collapse by route class: the run's wall time stays 0.07-0.08 s from 1 to 64
        # nodes (bench_guard_fit.csv)
        return self.kernel_estimate(pricing, topology, nodes, gpus_per_node, max(sp.hidden, sp.ffn) / 64.0,
                                    2 * sp.layers, route_classes=pricing.SYMMETRIC_ROUTE_CLASSES)

    def array_seconds(self, pricing, gpus):
        return pricing.DECODE_SECONDS_PER_GPU * gpus


@register_workload("moe_layer")
class MoEWorkload(Workload):
    """MoE layers with expert parallelism (:func:`build_moe_graph`)."""

    spec_type = MoESpec

    def build_graph(self, system, nodes, mode, *, gpus_per_node, execution, plan=None):
        return build_moe_graph(self.spec, system, nodes, mode, gpus_per_node=gpus_per_node, execution=execution)

    def estimate(self, pricing, topology, nodes, gpus_per_node, sim_mode, execution, workers):
        """Per layer two expert GEMMs of ``tokens x top_k x max(hidden, ffn)`` in 128 x 128 tiles; their pushes
        count one flow a peer up to the tiles (the run's wall time grows from 0.076 s on 1 node to 0.166 s on 64,
        bench_guard_fit.csv), the per-rank arrays beyond (:meth:`array_seconds`)."""
        sp = self.spec
        w = sp.tokens_per_gpu * sp.top_k * max(sp.hidden, sp.ffn) / (128.0 * 128.0)
        return self.kernel_estimate(pricing, topology, nodes, gpus_per_node, w, 2 * sp.layers)

    def array_seconds(self, pricing, gpus):
        return pricing.MOE_SECONDS_PER_GPU * gpus
