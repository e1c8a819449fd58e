"""One fused operator against its bulk-synchronous baseline, as two small operator graphs on the executor.

Fused: one :class:`~simfuse.graph.ir.FusedNode`.  Baseline: the compute kernel unfused (``knobs.baseline_kernel``:
``same``, the default, is the fused operator's own kernel; ``library`` prices it as a vendor-library kernel --
cuBLAS's measured model where the topology has one), then the bulk collective on the comm stream (launch gap and completion signalling included; the tuner picks the algorithm unless
``knobs.baseline_algorithm`` names one).
"""

from __future__ import annotations

import dataclasses
import time

from ..collectives.groups import world
from ..collectives.tuner import Tuner
from ..errors import SpecError
from ..fused.base import FusedOp, OpResult
from ..fused.knobs import FusedKnobs
from ..graph import CollectiveNode, ComputeNode, FusedNode, Graph
from ..graph.executor import Executor
from ..system import System, as_system


def bound_envelope(values, point: float) -> dict[str, float]:
    """p10/p50/p90 of a ``bound`` interval from the runs of the p10, p50 and p90 cost models: sorted (contention
    can make the p10 model's run the longer one) and widened to hold the point estimate, whose model (every
    factor 1) lies between the quantile models; a ratio such as the speedup is not monotone in them."""
    lo, mid, hi = sorted(values)
    return {"p10": min(lo, point), "p50": mid, "p90": max(hi, point)}


def add_op(rg, op: FusedOp, mode: str, knobs: FusedKnobs, group: str, deps=(), label: str | None = None) -> int:
    """Append ``op`` to a rank program: fused (one node) or baseline (kernel, then the collective).  Returns the
    id of the node whose completion means the result is at its consumers."""
    label = label or op.name
    if mode == "fused":
        return rg.add(FusedNode(name=label, op=op, group=group, knobs=knobs, deps=tuple(deps), phase=label,
                                wait_phase=f"{label}_exposed"))
    work = op.work("compute")
    if knobs.baseline_kernel == "library" and work.impl != "library":  # what a user runs unfused: the library's
        work = dataclasses.replace(work, impl="library")
    c = rg.add(ComputeNode(name=f"{label}:compute", work=work, deps=tuple(deps),
                           phase=f"{label}_compute"))
    return rg.add(CollectiveNode(name=f"{label}:baseline", op=op.collective, group=group,
                                 size_bytes=op.collective_size_bytes(), algorithm=knobs.baseline_algorithm,
                                 deps=(c,), phase=f"{label}_collective"))


def symmetric_ok(knobs: FusedKnobs, mode: str) -> bool:
    """Whether the representative-rank path is exact: ``remote_first`` tile order (shifted destinations)."""
    if mode not in ("auto", "symmetric", "full"):
        raise SpecError("<argument>", "mode", f"unknown mode {mode!r}")
    if mode == "symmetric" and knobs.tile_order != "remote_first":
        raise SpecError("<knobs>", "tile_order", "natural order is not symmetric (incast); use --mode full")
    return mode == "symmetric" or (mode == "auto" and knobs.tile_order == "remote_first")


def op_graph(op: FusedOp, mode: str, knobs: FusedKnobs, symmetric: bool) -> Graph:
    L = op.layout
    graph = Graph(L.nodes, L.gpus_per_node, name=op.name)
    graph.add_group(world(L.n))
    for r in ([0] if symmetric else range(L.n)):
        add_op(graph.program(r), op, mode, knobs, "world")
    return graph


def run_op(op: FusedOp, topology, nodes: int, *, knobs: FusedKnobs | None = None, cost=None, mode: str = "auto",
           seed: int = 0, record: bool = False, record_usage: bool = False, return_sims: bool = False,
           uncertainty: str = "bound", launch: str = "eager", progress=None):
    """Simulate baseline and fused execution of ``op``; returns an :class:`~simfuse.fused.OpResult` (and
    ``{mode: (sim, fabric, net)}`` with ``return_sims``).  ``topology``: a System or a topology spec.
    ``uncertainty="bound"``: ``OpResult.intervals`` from runs with every kernel family at the p10/p50/p90 of its
    cross-validated residuals (empty when the cost model has none).  ``launch``: ``eager`` or ``graph`` (both
    modes' kernels replayed from a CUDA graph, as decode servers run them: :meth:`System.with_launch`).
    ``progress``: a :class:`~simfuse.progress.Progress` told each simulation and the events inside it."""
    from ..progress import Progress

    progress = progress or Progress()
    knobs = knobs or FusedKnobs()
    knobs.validate()
    system = as_system(topology)
    if cost is not None:
        system = System(system.topology, cost, system.profile, system.nominal, system.rate_resolution_s)
    system = system.with_launch(launch)
    symmetric = symmetric_ok(knobs, mode)
    L = op.layout
    tuner = Tuner(system.topology, L.nodes, L.gpus_per_node)
    t_wall = time.perf_counter()
    out, sims, events = {}, {}, 0
    bound = uncertainty == "bound" and system.has_residuals
    progress.begin("simulation", 8 if bound else 2)
    for m in ("baseline", "fused"):
        progress.doing(m)
        res = Executor(system, op_graph(op, m, knobs, symmetric), seed=seed, record=record,
                       record_usage=record_usage, tuner=tuner, progress=progress).run()
        progress.advance()
        out[m] = res
        sims[m] = (res.sim, res.fabric, res.net)
        events += res.events
    b, f = out["baseline"], out["fused"]
    alg = next(iter(b.algorithms.values()), None) or "none (one rank)"
    if f.sim is not None:
        f.sim.recorder.add("fused", op.name, "fused_ops", 0, 0.0, f.time_s)
    res = OpResult(op=op.name, ranks=L.n, nodes=nodes, gpus_per_node=L.gpus_per_node, baseline_time_s=b.time_s,
                   fused_time_s=f.time_s, baseline_compute_s=b.kernel_end_s,
                   baseline_exposed_comm_s=b.time_s - b.kernel_end_s, fused_compute_s=f.kernel_end_s,
                   fused_exposed_comm_s=max(0.0, f.time_s - f.kernel_end_s), comm_bytes_per_rank=op.collective_size_bytes(),
                   mode="symmetric" if symmetric else "full", events=events,
                   params={**op.params, "baseline_algorithm": alg, "baseline_kernel": knobs.baseline_kernel,
                           "launch": launch, "wall_s": time.perf_counter() - t_wall})
    if bound:
        runs = []
        for q in (0.1, 0.5, 0.9):
            sq = system.at_quantile(q)
            pair = []
            for m in ("baseline", "fused"):
                progress.doing(f"{m}, kernels at their residuals' p{round(q * 100)}")
                pair.append(Executor(sq, op_graph(op, m, knobs, symmetric), seed=seed, tuner=tuner,
                                     progress=progress).run().time_s)
                progress.advance()
            runs.append(tuple(pair))
        res.intervals = {
            "baseline_time_s": bound_envelope([r[0] for r in runs], res.baseline_time_s),
            "fused_time_s": bound_envelope([r[1] for r in runs], res.fused_time_s),
            "speedup": bound_envelope([r[0] / r[1] for r in runs], res.baseline_time_s / res.fused_time_s)}
    if return_sims:
        return res, sims
    return res
