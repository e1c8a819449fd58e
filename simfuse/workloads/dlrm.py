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

import dataclasses
import time
from dataclasses import dataclass, field

import numpy as np
import simpy

from ..collectives import Layout, collective_process, make_algorithm, run_collective, start_groups
from ..costs import CostModel, KernelWork, cost_model_for
from ..engine import Simulation, run_kernel
from ..errors import SpecError
from ..fused.base import DTYPE_BYTES, FusedKnobs, PushEngine, fused_work, start_puts
from ..fused.ops import EmbeddingAllToAll
from ..network import Fabric, FlowNetwork
from ..spec import DLRMSpec, TopologySpec
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


class _Entity:
    """A simulated rank (a class representative, or every rank in full mode)."""

    def __init__(self, rank: int, cls: int, units: list):
        self.rank = rank
        self.cls = cls
        self.units = units
        self.busy_s = 0.0
        self.phases: list[tuple[str, float, float]] = []
        self.end_s = 0.0


def simulate_dlrm(spec: DLRMSpec, topology: TopologySpec, nodes: int, *, gpus_per_node: int | None = None,
                  mode: str = "fused", sim_mode: str = "auto", cost: CostModel | None = None, seed: int = 0,
                  record: bool = False, record_usage: bool = False, allreduce_algorithm: str | None = None,
                  knobs: FusedKnobs | None = None) -> IterationResult:
    """Simulate one training iteration; ``mode`` is ``fused`` or ``baseline``."""
    wall0 = time.perf_counter()
    if mode not in ("fused", "baseline"):
        raise SpecError("<argument>", "mode", f"unknown mode {mode!r}; expected fused or baseline")
    if sim_mode not in ("auto", "classes", "full"):
        raise SpecError("<argument>", "sim_mode", f"unknown {sim_mode!r}")
    g = gpus_per_node or topology.scale_up.gpus_per_node
    n = nodes * g
    B, D = spec.global_batch, spec.dim
    if B % n:
        raise SpecError(spec.source, "global_batch", f"{B} is not divisible by the {n} GPUs")
    b = B // n
    cost = cost or cost_model_for(topology)
    knobs = knobs or FusedKnobs()
    eb = DTYPE_BYTES[spec.embedding_dtype]
    per_rank = place_tables(spec, n, topology.device.memory_bytes)
    cls_of_rank, sigs = rank_classes(per_rank, g)
    # auto: the class fast path where it is exact (one class), full simulation of every rank where it is not and
    # the system is small enough, the class approximation beyond (validated against full simulation in tests)
    full = sim_mode == "full" or (sim_mode == "auto" and len(sigs) > 1 and n <= FULL_SIM_MAX_RANKS)
    fabric = Fabric(topology, nodes, gpus_per_node=g, symmetric=not full)
    if full:
        entities = [_Entity(r, r, per_rank[r]) for r in range(n)]
        ent_cls = np.arange(n)
    else:
        n_cls = fabric.set_rank_classes(cls_of_rank)
        entities = [_Entity(fabric.representative(c), c, per_rank[fabric.representative(c)]) for c in range(n_cls)]
        ent_cls = cls_of_rank
    {e.cls: e for e in entities}
    n_ent = len(entities)
    units_per_rank = np.array([len(u) for u in per_rank], dtype=float)
    sim = Simulation(seed=seed, record=record)
    net = FlowNetwork(sim, fabric.capacities, fabric.names, record_usage=record_usage)
    env = sim.env
    co = topology.collectives
    layout = Layout(nodes, g)

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
    # buckets in backward order
    grads_order = top_grads + inter_grads + bot_grads
    buckets: list[float] = []
    layer_bucket: list[int] = []
    acc = 0.0
    for gb in grads_order:
        acc += gb
        layer_bucket.append(len(buckets))
        if acc >= spec.bucket_bytes:
            buckets.append(acc)
            acc = 0.0
    if acc > 0:
        buckets.append(acc)
    # a layer's gradient closes its bucket when it is the last layer of that bucket
    closes = {}
    for i, bk in enumerate(layer_bucket):
        closes[bk] = i
    ar_algo = {}
    for size in sorted(set(buckets)):
        if allreduce_algorithm:
            ar_algo[size] = allreduce_algorithm
        else:
            best = None
            # like NCCL's tuner, pick the fastest; flat rings beyond 16 nodes are latency-bound (NCCL switches to
            # trees there) and costly to simulate, so they are not considered
            names = ("ring", "direct", "hierarchical", "hierarchical_rhd") if nodes <= 16 else (
                "direct", "hierarchical", "hierarchical_rhd")
            for name in names:
                algo = make_algorithm("all_reduce", name, layout, size)
                if not algo.symmetric:
                    continue
                t = run_collective(topology, nodes, "all_reduce", size, algorithm=name, gpus_per_node=g).time_s
                if best is None or t < best[0]:
                    best = (t, name)
            ar_algo[size] = best[1]

    # ---- shared synchronisation state -------------------------------------------------------------------
    def ev():
        return env.event()

    fwd_entered = {e.cls: ev() for e in entities}
    fwd_started = {e.cls: ev() for e in entities}
    bwd_entered = {e.cls: ev() for e in entities}
    bwd_started = {e.cls: ev() for e in entities}
    incoming_fwd: dict[int, list] = {e.cls: [] for e in entities}
    incoming_bwd: dict[int, list] = {e.cls: [] for e in entities}
    bucket_count = np.zeros(len(buckets), dtype=np.int64)
    bucket_ready = [ev() for _ in buckets]
    ar_done = {e.cls: ev() for e in entities}

    def register(store):
        def on_transfer(grp, done_ev):
            dcls = {int(ent_cls[d]) for d in np.asarray(grp.dsts).tolist()}
            for c in dcls:
                store[c].append(done_ev)
        return on_transfer

    def kernel(e: _Entity, work: KernelWork, phase: str, **kw):
        t0 = env.now
        t_end = yield env.process(run_kernel(sim, work, cost, rank=e.rank, **kw))
        e.busy_s += t_end - t0
        e.phases.append((phase, t0, t_end))
        return t_end

    def send_to_all(e: _Entity, sizes: np.ndarray, entered: dict, store: dict, tag: str):
        """Bulk exchange: flows to the ranks of each class start once that class has launched the collective."""
        dsts = np.arange(n)
        keep = (dsts != e.rank) & (sizes > 0)
        dsts, sizes = dsts[keep], sizes[keep]
        procs = []
        for c in sorted({int(x) for x in ent_cls[dsts]}):
            sel = ent_cls[dsts] == c

            def start(c=c, sel=sel):
                yield entered[c]
                store[c].extend(start_groups(net, fabric.flow_groups(e.rank, dsts[sel], sizes[sel]), tag=tag))
            procs.append(env.process(start()))
        return procs

    def bulk_send(e: _Entity, sizes: np.ndarray, entered: dict, started: dict, store: dict, tag: str):
        """Launch gap, then the bulk exchange; marks this class as entered and as having started all its flows."""
        yield env.timeout(co.launch_s)
        entered[e.cls].succeed()
        yield simpy.AllOf(env, send_to_all(e, sizes, entered, store, tag))
        started[e.cls].succeed()

    def wait_incoming(e: _Entity, started: dict, store: dict):
        yield simpy.AllOf(env, [started[c] for c in started])
        if store[e.cls]:
            yield simpy.AllOf(env, store[e.cls])

    def allreduce_stream(e: _Entity):
        """One communication stream per rank: bucket all-reduces in order, each once every rank produced it."""
        for k, size in enumerate(buckets):
            yield bucket_ready[k]
            t0 = env.now
            algo = make_algorithm("all_reduce", ar_algo[size], layout, size, co.channels)
            if full:
                if e.rank == 0:
                    yield env.process(collective_process(sim, fabric, net, algo, launch_s=co.launch_s,
                                                         sync_s=co.sync_s, name="ddp_allreduce", record=False))
                    ar_shared[k].succeed()
                else:
                    yield ar_shared[k]
            else:
                yield env.process(collective_process(sim, fabric, net, algo, launch_s=co.launch_s,
                                                     sync_s=co.sync_s, rank=e.rank, name="ddp_allreduce",
                                                     record=False))
            e.phases.append((f"allreduce_bucket{k}", t0, env.now))
        ar_done[e.cls].succeed()

    ar_shared = [ev() for _ in buckets]

    def grad_produced(layer_idx: int):
        for k, last in closes.items():
            if last == layer_idx:
                bucket_count[k] += 1
                if bucket_count[k] == n_ent:
                    bucket_ready[k].succeed()

    def entity_proc(e: _Entity):
        U = len(e.units)
        psum = sum(u.pooling for u in e.units)
        # ---------------- forward
        for w in fwd(bottom):
            yield from kernel(e, w, "bottom_mlp_fwd")
        fwd_sizes = np.full(n, U * b * D * eb, dtype=float)
        if U > 0:
            op = EmbeddingAllToAll({"tables_per_gpu": U, "rows": max(u.rows for u in e.units), "dim": D,
                                    "pooling": psum / U, "global_batch": B, "dtype": spec.embedding_dtype,
                                    "bags_per_wg": spec.bags_per_wg}, layout, spec.source)
        if mode == "baseline" or U == 0:
            if U > 0:
                yield from kernel(e, op.work("compute"), "embedding_fwd")
            t0 = env.now
            yield from bulk_send(e, fwd_sizes, fwd_entered, fwd_started, incoming_fwd, "a2a_fwd")
            yield from wait_incoming(e, fwd_started, incoming_fwd)
            yield env.timeout(co.sync_s)
            e.phases.append(("a2a_fwd", t0, env.now))
        else:
            fwd_entered[e.cls].succeed()
            eng = PushEngine(sim, fabric, net, op, cost, knobs, topology, e.rank,
                             on_transfer=register(incoming_fwd))
            occ = topology.gpu_initiated.occupancy_loss if knobs.occupancy_loss is None else knobs.occupancy_loss
            t0 = env.now
            res = yield env.process(eng.process(fused_work(op, knobs, fabric, e.rank), occ))
            e.busy_s += res[0] - t0
            e.phases.append(("embedding_fwd_fused", t0, res[0]))
            fwd_started[e.cls].succeed()
            t1 = env.now
            yield from wait_incoming(e, fwd_started, incoming_fwd)
            e.phases.append(("a2a_fwd_exposed", t1, env.now))
        for w in fwd(inter):
            yield from kernel(e, w, "interaction_fwd")
        yield from kernel(e, inter_ew, "interaction_fwd")
        for w in fwd(top):
            yield from kernel(e, w, "top_mlp_fwd")
        # ---------------- backward
        li = 0
        for pair in top_bwd:
            for w in pair:
                yield from kernel(e, w, "top_mlp_bwd")
            grad_produced(li)
            li += 1
        # embedding gradients: rank e sends b*D*U_o to every owner o
        bwd_sizes = units_per_rank * b * D * eb
        fuse_bwd = mode == "fused" and spec.fuse_backward
        # interaction backward: (element-wise part, then per layer dgrad + wgrad); the kernel producing
        # d(embeddings) is the last dgrad, or the element-wise kernel for a dot interaction
        seq = [("ew", [inter_ew], -1)] + [("gemm", pair, j) for j, pair in enumerate(inter_bwd)]
        producer = len(seq) - 1
        for si, (_kind, pair, j) in enumerate(seq):
            if fuse_bwd and si == producer:
                work = pair[0]
                W = work.num_workgroups
                bwd_entered[e.cls].succeed()
                on_bwd_transfer = register(incoming_bwd)

                def on_complete(idx, t, sizes=bwd_sizes, W=W, on_bwd_transfer=on_bwd_transfer):
                    dsts = np.arange(n)
                    keep = (dsts != e.rank) & (sizes > 0)
                    for grp, done in start_puts(net, fabric, topology.gpu_initiated, e.rank, dsts[keep],
                                                sizes[keep] * (len(idx) / W), "a2a_bwd_fused"):
                        on_bwd_transfer(grp, done)
                yield from kernel(e, dataclasses.replace(work, variant="fused"), "interaction_bwd_fused",
                                  on_complete=on_complete)
                bwd_started[e.cls].succeed()
                for w in pair[1:]:
                    yield from kernel(e, w, "interaction_bwd")
            else:
                for w in pair:
                    yield from kernel(e, w, "interaction_bwd")
            if j >= 0:
                grad_produced(li)
                li += 1
        if not fuse_bwd:
            yield from bulk_send(e, bwd_sizes, bwd_entered, bwd_started, incoming_bwd, "a2a_bwd")
        for pair in bot_bwd:
            for w in pair:
                yield from kernel(e, w, "bottom_mlp_bwd")
            grad_produced(li)
            li += 1
        t1 = env.now
        yield from wait_incoming(e, bwd_started, incoming_bwd)
        if not fuse_bwd:
            yield env.timeout(co.sync_s)
        e.phases.append(("a2a_bwd_wait", t1, env.now))
        if U > 0:
            upd_bytes = B * psum * D * eb * (2.0 + 2.0 * spec.optimizer_state_factor) + U * B * D * eb
            yield from kernel(e, elementwise_work("emb_update", upd_bytes, B * psum * D * 3.0,
                                                  spec.embedding_dtype, wgs=max(1, U * B // 64)),
                              "embedding_update")
        yield ar_done[e.cls]
        e.end_s = env.now

    procs = [env.process(entity_proc(e)) for e in entities]
    for e in entities:
        env.process(allreduce_stream(e))
    sim.run(until=simpy.AllOf(env, procs))
    for e in entities:
        for name, t0, t1 in e.phases:
            if name.startswith(("a2a", "allreduce")):
                sim.recorder.add("collective", name, f"gpu{e.rank}/comm", e.rank, t0, t1)
    crit = max(entities, key=lambda x: (x.end_s, x.busy_s))
    t_iter = max(e.end_s for e in entities)
    return IterationResult(mode=mode, iteration_time_s=t_iter, compute_time_s=crit.busy_s,
                           exposed_comm_time_s=max(0.0, t_iter - crit.busy_s),
                           sim_mode="full" if full else "classes", classes=len(sigs), events=sim.events,
                           wall_s=time.perf_counter() - wall0, phases=list(crit.phases), sim=sim, net=net)
