"""One DLRM training iteration, bulk-synchronous (baseline) or with fused embedding + All-to-All.

Operator graph per rank (``b = global_batch / ranks`` samples; tables model-parallel, the rest data-parallel):

forward   bottom MLP -> embedding pooling (own tables, all ``B`` bags) -> All-to-All of pooled rows
          -> interaction (dot or DCN) -> top MLP
backward  top MLP (dgrad + wgrad) -> interaction backward -> All-to-All of embedding gradients to the table
          owners -> bottom MLP backward -> embedding update (sparse, rows + optimizer state)
          dense gradients are bucketed (``ddp_bucket_mib``) in backward order and all-reduced as soon as a bucket
          is full, on the network while backward compute goes on (as DDP does); a bucket's all-reduce starts when
          every rank has produced it, one at a time (one communication stream).

Input distribution (``embedding.input_dist``, both modes): before a shard can pool, the ids of every rank's
``b`` bags for that shard must reach it: an All-to-All-v (``a2a_input``) in which each rank sends each holder
``b x (ids per bag the holder serves x key bytes + shards it holds x 4)`` (ids of its rows for a row shard, all
of the table's for a column shard; one int32 length per bag and shard: TorchRec's KJT input_dist, HugeCTR's data
distributor); with ``embedding.ids_dedup`` each distinct bag once plus an index per bag
(:func:`simfuse.workloads.ids.ids_bytes`).  ``prefetch`` (default) runs the next batch's on its own stream (``comm_input``) from the
iteration's start -- it shares the links with everything else and the step ends no sooner than it; ``inline``
runs this batch's first on the communication stream and the model-parallel lookups wait for it; ``none`` leaves
it out (the model before 2026-12-04).  Data-parallel tables need no ids from other ranks.

Baseline: each All-to-All is a bulk collective after its producer kernel and a launch gap; a pair of ranks
exchanges data once both have launched it.  Fused: the forward embedding kernel pushes pooled rows as its
workgroups finish (:class:`~simfuse.fused.EmbeddingAllToAll`); with ``fuse_backward`` the interaction-backward
kernel pushes each wave's share of the embedding gradients as it completes.

Hierarchical shards (``table_row_wise`` and ``grid``: row shards over the ``g`` GPUs of a node, all ``D`` columns
or ``D / k`` of them) share one path: a rank's volumes scale with the columns it holds in such shards (stage 1
``N b w e`` to each local peer, stage 2 ``b w e`` on the rail, ``w`` those columns).  A rank's kernel counts a
shard of ``w`` columns as ``w / dim_h`` tables of ``dim_h`` columns, ``dim_h`` the gcd of the widths *that rank*
holds in such shards (the convention of the All-to-All shards' kernel, which pools one width: the bundled Triton
kernel takes one ``dim`` per launch); hierarchical shards fill every GPU of their node alike, so the width is the
same on the GPUs of a node.  Exact where a rank's shards have one width; where one rank mixes widths, its wide
shards are priced as ``w / dim_h`` narrower tables: their index reads count once per column-equivalent table and a
calibrated kernel model sees ``w / dim_h`` times the programs, each on a narrower layout (on the H200 profile a
128-column fp32 shard priced as four of 32 pools 2.5-3x slower: the planner prices each shard at its own width, so
it does not see this).

Simulation modes: ``classes``: one representative per class of alike ranks is simulated: one class for even
placements (exact); for uneven ones the *orbit classes* (:func:`~simfuse.graph.symmetry.orbit_classes`: ranks
that see the same placement at every node offset, on their rail and on their node) when the fabric allows them
and there are at most ``ORBIT_MAX_CLASSES``, which the executor runs as full simulation runs every rank (exact
up to the local order of fused pushes, measured in the tests), else the ranks with the same table load (and node
composition), an approximation (:meth:`~simfuse.network.Fabric.set_rank_classes`); ``full``: every rank is
simulated on the physical links; ``auto`` (default): ``classes``, except ``full`` for uneven placements without
orbit classes up to ``FULL_SIM_MAX_RANKS`` ranks.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..collectives.groups import world
from ..errors import SpecError
from ..fused.knobs import FusedKnobs
from ..graph import Graph
from ..spec import DLRMSpec
from .placement import place_tables, rank_classes
from .planner import RankUnits, check_batch_split
from .result import IterationResult

#: ``sim_mode="auto"`` simulates every rank when placement is uneven, its orbit classes are not available and
#: there are at most this many ranks.
FULL_SIM_MAX_RANKS = 64
#: uneven placements simulate one representative per orbit class (:func:`simfuse.graph.symmetry.orbit_classes`,
#: the executor's exact class mode) when there are at most this many; else the load classes (approximate)
ORBIT_MAX_CLASSES = 64


@dataclass
class DLRMExtras:
    """What a DLRM result carries beyond the shared :class:`~simfuse.workloads.result.IterationResult`."""

    plan: object = None   # the sharding Plan used (None: placement table_wise / row_wise)
    knobs: object = None  # the FusedKnobs used
    global_batch: int = 0
    tuned: bool = False   # knobs chosen by tuning (simfuse.workloads.dlrm_workload.TUNE_GRID)
    knob_points: int = 1  # the knob grid's points the chosen plan simulated (dlrm_candidates._tuning_matters)
    fused_waves: int = 0  # most waves of a simulated rank's fused embedding kernel (0: none)
    dense_fusion: str = ""  # the dense element-wise kernel inventory used (DLRMSpec.dense_fusion)
    #: how busy the GPU-initiated post queues were, as a share of the iteration: the busiest simulated rank's
    #: posting time for each fused operation, summed over the operations (0: no fused puts off the node).
    #: What decides whether the rest of the knob grid is simulated (dlrm_candidates._tuning_matters)
    put_post_share: float = 0.0


def build_dlrm_graph(spec: DLRMSpec, system, nodes: int, *, gpus_per_node: int | None = None, mode: str = "fused",
                     sim_mode: str = "auto", knobs: FusedKnobs | None = None, plan=None) -> Graph:
    """The operator graph of one training iteration (a graph builder: nodes only, no simulation).

    ``sim_mode``: ``classes`` emits one program per class of alike ranks (orbit classes where available, else
    same table load and node composition; see the module docstring); ``full`` one per rank; ``auto``:
    ``classes``, except ``full`` for uneven placements without orbit classes up to ``FULL_SIM_MAX_RANKS`` ranks.

    ``plan``: a :class:`~simfuse.workloads.planner.Plan` (forced or planned elsewhere); without one,
    ``placement: planned`` plans here for ``mode`` and the other placements use :func:`place_tables`.  The plan
    used is in ``graph.meta["plan"]``.  Traffic per sharding type: see :mod:`simfuse.workloads.planner`.

    The stages: the placement (:func:`_placement`), the ranks to simulate (:func:`_simulated_ranks`), what every
    rank's program shares (:func:`~simfuse.workloads.dlrm_program.make_context`: traffic, dense schedule,
    replicated tables) and each rank's program (:class:`~simfuse.workloads.dlrm_program.RankProgram`)."""
    from .dlrm_program import RankProgram, make_context

    if mode not in ("fused", "baseline"):
        raise SpecError("<argument>", "mode", f"unknown mode {mode!r}; expected fused or baseline")
    if sim_mode not in ("auto", "classes", "full"):
        raise SpecError("<argument>", "sim_mode", f"unknown {sim_mode!r}")
    g = gpus_per_node or system.topology.scale_up.gpus_per_node
    check_batch_split(spec, nodes, g)
    plan, per_rank = _placement(spec, system, nodes, g, mode, plan)
    vec = isinstance(per_rank, RankUnits)  # a planned placement: per-rank summaries without per-rank lists
    graph = Graph(nodes, g, name=spec.name)
    ranks = _simulated_ranks(graph, system.topology, per_rank, vec, mode, sim_mode)
    graph.add_group(world(nodes * g))
    graph.meta.update({"fused_waves": 0, "plan": plan})
    ctx = make_context(spec, system, graph, nodes, g, mode, knobs or FusedKnobs(), per_rank, vec)
    graph.meta["input_dist_bytes"] = float(ctx.traffic.key_sizes.sum())  # per rank, self included
    for r in ranks:
        RankProgram(ctx, r).build()
    return graph


def _placement(spec: DLRMSpec, system, nodes: int, g: int, mode: str, plan):
    """``(plan, per-rank units)``: the plan given, the planner's (``placement: planned``) or none (the other
    placements, :func:`place_tables`)."""
    n = nodes * g
    if plan is None and spec.placement == "planned":
        from .planner import plan_tables

        plan = plan_tables(spec, system, nodes, g, mode)
    if plan is not None:
        if plan.n_ranks != n:
            raise SpecError(plan.source, "ranks", f"the plan is for {plan.n_ranks} ranks, the run has {n}")
        return plan, plan.per_rank
    return None, place_tables(spec, n, system.topology.device.memory_bytes)


def _classes(per_rank, vec: bool, topology, nodes: int, g: int, mode: str, sim_mode: str):
    """``(class of every rank, classes, orbit classes or None, full)``: the rank classes of a placement, merged
    into orbit classes where few enough (exact), and whether every rank is simulated instead."""
    n = nodes * g
    cls_of_rank, sigs = per_rank.rank_classes(g) if vec else rank_classes(per_rank, g)
    n_cls = len(sigs)
    orbit = None
    if n_cls > 1 and sim_mode != "full":
        from ..graph.symmetry import orbit_classes

        # fused kernels push to a node's GPUs by local offset (and reduce TWRW partials by it): their classes merge
        # locals only by local shifts; the bulk exchanges of the baseline treat every local alike (equal columns)
        orbit = orbit_classes(cls_of_rank, topology, nodes, g, "shift" if mode == "fused" else "columns")
        if orbit is not None and int(orbit.max()) + 1 > ORBIT_MAX_CLASSES:
            orbit = None
        if orbit is not None:
            cls_of_rank, n_cls = orbit, int(orbit.max()) + 1
    full = sim_mode == "full" or (sim_mode == "auto" and n_cls > 1 and orbit is None and n <= FULL_SIM_MAX_RANKS)
    return cls_of_rank, n_cls, orbit, full


def simulated_rank_count(spec: DLRMSpec, system, nodes: int, g: int, mode: str, sim_mode: str = "auto",
                         plan=None) -> tuple[int, bool]:
    """``(ranks a simulation of mode runs, whether its classes are orbits)``: what :func:`build_dlrm_graph`
    decides, without building the graph (the placement, its rank classes and their orbits; the planner's plan
    for ``mode`` unless ``plan`` is given).  The cost guard asks (:mod:`simfuse.workloads.dlrm_workload`)."""
    _plan, per_rank = _placement(spec, system, nodes, g, mode, plan)
    _cls, n_cls, orbit, full = _classes(per_rank, isinstance(per_rank, RankUnits), system.topology, nodes, g, mode,
                                        sim_mode)
    return (nodes * g if full else n_cls), orbit is not None


def _simulated_ranks(graph: Graph, topology, per_rank, vec: bool, mode: str, sim_mode: str) -> list[int]:
    """The ranks whose programs the graph holds: every rank (``full``), else one per class of alike ranks
    (``graph.class_of_rank``): orbit classes for uneven placements, when few enough (exact), else the load
    classes.  Sets ``graph.meta`` ``classes`` and ``orbit_classes``."""
    n = graph.nodes * graph.gpus_per_node
    cls_of_rank, n_cls, orbit, full = _classes(per_rank, vec, topology, graph.nodes, graph.gpus_per_node, mode,
                                               sim_mode)
    graph.meta["orbit_classes"] = orbit is not None
    graph.meta["classes"] = n_cls
    if full:
        return list(range(n))
    graph.class_of_rank = cls_of_rank
    first = {}
    for r, c in enumerate(cls_of_rank.tolist()):
        first.setdefault(c, r)
    return [first[c] for c in sorted(first)]


def simulate_dlrm(spec: DLRMSpec, topology, nodes: int, *, gpus_per_node: int | None = None,
                  mode: str = "fused", sim_mode: str = "auto", cost=None, seed: int = 0,
                  record: bool = False, record_usage: bool = False, allreduce_algorithm: str | None = None,
                  knobs: FusedKnobs | None = None, tuner=None, plan=None, progress=None) -> IterationResult:
    """Simulate one training iteration; ``mode`` is ``fused`` or ``baseline``.  ``topology``: a
    :class:`~simfuse.system.System` (or a topology spec, resolved here).  ``progress``: a
    :class:`~simfuse.progress.Progress` told the events and simulated time while it runs."""
    from ..graph.executor import Executor
    from ..system import System, as_system

    wall0 = time.perf_counter()
    system = as_system(topology)
    if cost is not None:
        system = System(system.topology, cost, system.profile, system.nominal, system.rate_resolution_s)
    graph = build_dlrm_graph(spec, system, nodes, gpus_per_node=gpus_per_node, mode=mode, sim_mode=sim_mode,
                             knobs=knobs, plan=plan)
    forced = {"all_reduce": allreduce_algorithm} if allreduce_algorithm else None
    res = Executor(system, graph, seed=seed, record=record, record_usage=record_usage, tuner=tuner,
                   forced_algorithms=forced, progress=progress).run()
    from ..collectives.posting import PUT_TRANSPORT

    busiest: dict = {}  # fused operation (its post queue's scope) -> its busiest rank's posting time (s)
    for (_rank, transport, scope), q in res.sim.post_queues.items():
        if transport == PUT_TRANSPORT:
            busiest[scope] = max(busiest.get(scope, 0.0), q.busy_s)
    return IterationResult(mode=mode, iteration_time_s=res.time_s, compute_time_s=res.compute_time_s,
                           exposed_comm_time_s=res.exposed_comm_time_s,
                           sim_mode="full" if res.sim_mode == "full" else "classes",
                           classes=graph.meta["classes"], events=res.events, wall_s=time.perf_counter() - wall0,
                           phases=list(res.critical.phases), sim=res.sim, net=res.net,
                           extras=DLRMExtras(plan=graph.meta.get("plan"), knobs=knobs or FusedKnobs(),
                                             global_batch=spec.global_batch, fused_waves=graph.meta["fused_waves"],
                                             dense_fusion=spec.dense_fusion,
                                             put_post_share=sum(busiest.values()) / res.time_s if res.time_s > 0
                                             else 0.0))
