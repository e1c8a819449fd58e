"""One DLRM training iteration, bulk-synchronous (baseline) or with fused embedding + All-to-All.

Operator graph per rank (``b = global_batch / ranks`` samples; tables model-parallel, the rest data-parallel):

forward   bottom MLP -> embedding pooling (own tables, all ``B`` bags) -> All-to-All of pooled rows
          -> interaction (dot or DCN) -> top MLP
backward  top MLP (dgrad + wgrad) -> interaction backward -> All-to-All of embedding gradients to the table
          owners -> bottom MLP backward -> embedding update (sparse, rows + optimizer state)
          dense gradients are bucketed (``ddp_bucket_mib``) in backward order and all-reduced as soon as a bucket
          is full, on the network while backward compute goes on (as DDP does); a bucket's all-reduce starts when
          every rank has produced it, one at a time (one communication stream).

Baseline: each All-to-All is a bulk collective after its producer kernel and a launch gap; a pair of ranks
exchanges data once both have launched it.  Fused: the forward embedding kernel pushes pooled rows as its
workgroups finish (:class:`~simfuse.fused.EmbeddingAllToAll`); with ``fuse_backward`` the interaction-backward
kernel pushes each wave's share of the embedding gradients as it completes.

Simulation modes: ``classes``: ranks with the same table load (and node composition) form a class, one
representative per class is simulated (exact for even placements, where there is one class; see
:meth:`~simfuse.network.Fabric.set_rank_classes` for the uneven case); ``full``: every rank is simulated on the
physical links; ``auto`` (default): ``classes`` when exact, ``full`` for uneven placements up to
``FULL_SIM_MAX_RANKS`` ranks, ``classes`` beyond.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ..collectives import Layout
from ..collectives.groups import world
from ..errors import SpecError
from ..fused.knobs import DTYPE_BYTES, FusedKnobs
from ..fused.ops import EmbeddingAllToAll, PushKernel
from ..graph import AllToAllVNode, CollectiveNode, ComputeNode, FusedNode, Graph
from ..spec import DLRMSpec
from .dense import elementwise_work, gemm_work
from .placement import place_tables, rank_classes

#: ``sim_mode="auto"`` simulates every rank when placement is uneven and there are at most this many ranks.
FULL_SIM_MAX_RANKS = 64


@dataclass
class IterationResult:
    mode: str
    iteration_time_s: float
    compute_time_s: float
    exposed_comm_time_s: float
    sim_mode: str
    classes: int
    events: int
    wall_s: float
    phases: list = field(default_factory=list)  # (phase, start_s, end_s) of the critical rank
    sim: object = None
    net: object = None


def _dense_layers(spec: DLRMSpec, b: int):
    """Forward GEMMs (label, m, n, k) of the data-parallel part, and the interaction's extra element-wise work."""
    dt = spec.dense_dtype
    T, D = len(spec.tables), spec.dim
    bottom = []
    d_in = spec.dense_features
    for i, out in enumerate(spec.bottom_mlp):
        bottom.append((f"bottom{i}", b, out, d_in))
        d_in = out
    inter = []
    F = T + 1
    eb = DTYPE_BYTES[dt]
    if spec.interaction == "dcn":
        x = F * D
        for i in range(spec.dcn_layers):
            inter.append((f"dcn{i}_v", b, spec.dcn_low_rank, x))
            inter.append((f"dcn{i}_u", b, x, spec.dcn_low_rank))
        inter_ew = elementwise_work("dcn_ew", 3 * b * x * eb * max(1, spec.dcn_layers), 3 * b * x, dt)
        top_in = x
    else:
        inter_ew = elementwise_work("dot", b * F * D * eb + b * F * F * eb, 2.0 * b * F * F * D, dt)
        top_in = F * (F - 1) // 2 + D
    top = []
    d_in = top_in
    for i, out in enumerate(spec.top_mlp):
        top.append((f"top{i}", b, out, d_in))
        d_in = out
    return bottom, inter, inter_ew, top


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
                     sim_mode: str = "auto", knobs: FusedKnobs | None = None) -> Graph:
    """The operator graph of one training iteration (a graph builder: nodes only, no simulation).

    ``sim_mode``: ``classes`` emits one program per class of alike ranks (same table load and node
    composition); ``full`` one per rank; ``auto``: ``classes`` when there is one class (exact), ``full`` for
    uneven placements up to ``FULL_SIM_MAX_RANKS`` ranks, ``classes`` beyond."""
    if mode not in ("fused", "baseline"):
        raise SpecError("<argument>", "mode", f"unknown mode {mode!r}; expected fused or baseline")
    if sim_mode not in ("auto", "classes", "full"):
        raise SpecError("<argument>", "sim_mode", f"unknown {sim_mode!r}")
    topology = system.topology
    g = gpus_per_node or topology.scale_up.gpus_per_node
    n = nodes * g
    B, D = spec.global_batch, spec.dim
    if B % n:
        raise SpecError(spec.source, "global_batch", f"{B} is not divisible by the {n} GPUs")
    b = B // n
    knobs = knobs or FusedKnobs()
    eb = DTYPE_BYTES[spec.embedding_dtype]
    per_rank = place_tables(spec, n, topology.device.memory_bytes)
    cls_of_rank, sigs = rank_classes(per_rank, g)
    full = sim_mode == "full" or (sim_mode == "auto" and len(sigs) > 1 and n <= FULL_SIM_MAX_RANKS)
    graph = Graph(nodes, g, name=spec.name)
    graph.add_group(world(n))
    if full:
        ranks = list(range(n))
    else:
        graph.class_of_rank = cls_of_rank
        first = {}
        for r, c in enumerate(cls_of_rank.tolist()):
            first.setdefault(c, r)
        ranks = [first[c] for c in sorted(first)]
    graph.meta["classes"] = len(sigs)
    layout = Layout(nodes, g)
    units_per_rank = np.array([len(u) for u in per_rank], dtype=float)

    bottom, inter, inter_ew, top = _dense_layers(spec, b)
    dt = spec.dense_dtype
    grad_eb = 4

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
    buckets, closes = _buckets(top_grads + inter_grads + bot_grads, spec.bucket_bytes)
    closing = {last: k for k, last in closes.items()}
    fuse_bwd = mode == "fused" and spec.fuse_backward
    bwd_sizes = units_per_rank * b * D * eb

    for r in ranks:
        units = per_rank[r]
        rg = graph.program(r)
        U = len(units)
        psum = sum(u.pooling for u in units)

        def comp(work, phase, deps=(), rg=rg):
            return rg.add(ComputeNode(name=work.name, work=work, phase=phase, deps=tuple(deps)))

        def grad_done(layer_idx: int, dep: int, rg=rg):
            k = closing.get(layer_idx)
            if k is not None:
                rg.add(CollectiveNode(name=f"ddp_allreduce{k}", op="all_reduce", group="world",
                                      size_bytes=buckets[k], stream="comm_dp", phase=f"allreduce_bucket{k}",
                                      deps=(dep,)))

        # ---------------- forward
        last = -1
        for w in fwd(bottom):
            last = comp(w, "bottom_mlp_fwd")
        if U > 0:
            op = EmbeddingAllToAll({"tables_per_gpu": U, "rows": max(u.rows for u in units), "dim": D,
                                    "pooling": psum / U, "global_batch": B, "dtype": spec.embedding_dtype,
                                    "bags_per_wg": spec.bags_per_wg}, layout, spec.source)
        fwd_sizes = np.full(n, U * b * D * eb, dtype=float)
        if mode == "baseline" or U == 0:
            if U > 0:
                last = comp(op.work("compute"), "embedding_fwd")
            a2a = rg.add(AllToAllVNode(name="a2a_fwd", group="world", send_bytes=fwd_sizes, stream="comm",
                                       deps=(last,)))
        else:
            a2a = rg.add(FusedNode(name="embedding_fwd_fused", op=op, group="world", knobs=knobs, deps=(last,),
                                   wait_phase="a2a_fwd_exposed"))
        first = True
        for w in fwd(inter):
            comp(w, "interaction_fwd", deps=(a2a,) if first else ())
            first = False
        comp(inter_ew, "interaction_fwd", deps=(a2a,) if first else ())
        for w in fwd(top):
            last = comp(w, "top_mlp_fwd")
        # ---------------- backward
        li = 0
        for pair in top_bwd:
            for w in pair:
                last = comp(w, "top_mlp_bwd")
            grad_done(li, last)
            li += 1
        # interaction backward: the element-wise part, then per layer dgrad + wgrad; the kernel producing
        # d(embeddings) is the last dgrad, or the element-wise kernel for a dot interaction
        seq = [([inter_ew], -1)] + [(pair, j) for j, pair in enumerate(inter_bwd)]
        producer = len(seq) - 1
        bwd_x = None
        for si, (pair, j) in enumerate(seq):
            if fuse_bwd and si == producer:
                push = PushKernel(pair[0], np.arange(n), bwd_sizes, tag="a2a_bwd_fused", layout=layout)
                bwd_x = last = rg.add(FusedNode(name="interaction_bwd_fused", op=push, group="world", knobs=knobs,
                                                wait_phase="a2a_bwd_wait"))
                for w in pair[1:]:
                    last = comp(w, "interaction_bwd")
            else:
                for w in pair:
                    last = comp(w, "interaction_bwd")
            if j >= 0:
                grad_done(li, last)
                li += 1
        if not fuse_bwd:
            bwd_x = rg.add(AllToAllVNode(name="a2a_bwd", group="world", send_bytes=bwd_sizes, stream="comm",
                                         deps=(last,)))
        for pair in bot_bwd:
            for w in pair:
                last = comp(w, "bottom_mlp_bwd")
            grad_done(li, last)
            li += 1
        if U > 0:
            upd_bytes = B * psum * D * eb * (2.0 + 2.0 * spec.optimizer_state_factor) + U * B * D * eb
            comp(elementwise_work("emb_update", upd_bytes, B * psum * D * 3.0, spec.embedding_dtype,
                                  wgs=max(1, U * B // 64)), "embedding_update", deps=(bwd_x,))
    return graph


def simulate_dlrm(spec: DLRMSpec, topology, nodes: int, *, gpus_per_node: int | None = None,
                  mode: str = "fused", sim_mode: str = "auto", cost=None, seed: int = 0,
                  record: bool = False, record_usage: bool = False, allreduce_algorithm: str | None = None,
                  knobs: FusedKnobs | None = None, tuner=None) -> IterationResult:
    """Simulate one training iteration; ``mode`` is ``fused`` or ``baseline``.  ``topology``: a
    :class:`~simfuse.system.System` (or a topology spec, resolved here)."""
    from ..graph.executor import Executor
    from ..system import System, as_system

    wall0 = time.perf_counter()
    system = as_system(topology)
    if cost is not None:
        system = System(system.topology, cost, system.profile, system.nominal)
    graph = build_dlrm_graph(spec, system, nodes, gpus_per_node=gpus_per_node, mode=mode, sim_mode=sim_mode,
                             knobs=knobs)
    forced = {"all_reduce": allreduce_algorithm} if allreduce_algorithm else None
    res = Executor(system, graph, seed=seed, record=record, record_usage=record_usage, tuner=tuner,
                   forced_algorithms=forced).run()
    return IterationResult(mode=mode, iteration_time_s=res.time_s, compute_time_s=res.compute_time_s,
                           exposed_comm_time_s=res.exposed_comm_time_s,
                           sim_mode="full" if res.sim_mode == "full" else "classes",
                           classes=graph.meta["classes"], events=res.events, wall_s=time.perf_counter() - wall0,
                           phases=list(res.critical.phases), sim=res.sim, net=res.net)
