"""DLRM as a registered :class:`~simfuse.workloads.base.Workload`: its scaling modes, its candidates (the
sharding plans each mode tries and the fused knob grid), its cost estimate and its result columns.  The graph
itself is built by :mod:`simfuse.workloads.dlrm`."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..spec import DLRMSpec
from ..spec.workload import DLRMSettings
from ..units import DTYPE_BYTES
from .base import Workload, register_workload
from .dlrm_candidates import TUNE_GRID

#: the cost guard's stand-in for the knob grid's screen (:func:`~simfuse.workloads.dlrm_candidates._tuning_matters`:
#: the first point's post queues busy for at least KNOB_SCREEN_POST_SHARE of the step), :meth:`DLRMWorkload.post_share`:
#: the fused embedding kernel posts one put per workgroup bound off the node (slice_wgs 1), on top of a step of
#: KNOB_GUARD_STEP_FLOOR_S plus KNOB_GUARD_STEP_S_PER_SAMPLE per sample of the GPU's batch.  Measured (2-core VM,
#: 2026-12-07, the bench_targets points of commit 175522b rerun with one worker: each fused simulation's
#: put_post_share and iteration time, 5 ns posts):
#: the posting time is the kernel's off-node workgroups x put_post_s (0.143 ms for 28,672 workgroups at 512 nodes:
#: measured 0.146 ms); the step beside it, iteration x (1 - share), for the HugeCTR-execution files: 0.89-1.09 ms
#: at up to 528 samples per GPU, 1.3-1.5 ms at 1,056, 1.6-1.7 ms at 2,112, 2.7-3.2 ms at 4,224 and 4.2-4.9 ms at
#: 8,448 (the dense layers, ~0.37 us a sample; the TorchRec-execution files' steps are 30-60% longer: the floor is
#: the smallest, so the estimate leans to pricing the grid)
KNOB_GUARD_STEP_FLOOR_S = 1.0e-3
KNOB_GUARD_STEP_S_PER_SAMPLE = 0.37e-6

#: up to this many ranks (and on up to ORBIT_MAX_CLASSES nodes) the guard reads a placement itself, planned or not
#: (its classes, busiest units and posts: a table-wise placement 0.05 s at 8,192 ranks and 0.5 s at 131,072, a
#: planned one 0.1-0.6 s at 8,192 and 0.3-0.5 s at 16,384, 2-core VM 2026-12-07); beyond, a table-wise placement
#: from the part of it that holds tables (:meth:`DLRMWorkload._placed_load_classes`), a planned one from a guess,
#: which takes every pushed unit as posted (the planned MLPerf placements at 2,048 nodes post little: read, their
#: knob grid is one point; guessed, two: with the limit at 8,192 ranks the estimate was 2.2x the wall time there)
PLACED_CLASS_MAX_RANKS = 16384


@register_workload("dlrm")
class DLRMWorkload(Workload):
    """One DLRM training iteration (:mod:`simfuse.workloads.dlrm`)."""

    spec_type = DLRMSpec
    settings = DLRMSettings

    def _settings(self, execution) -> DLRMSettings:
        return execution.settings_of(DLRMSettings)

    def scaled(self, nodes: int, gpus_per_node: int, execution) -> DLRMWorkload:
        """The spec with the settings' placement and dense kernels, and the global batch the scaling mode asks
        for: ``batch_per_gpu`` x GPUs (weak scaling), ``global_batch`` (strong scaling), or the model file's."""
        self.refuse_foreign_settings(execution)
        st, spec = self._settings(execution), self.spec
        if st.placement is not None:
            spec = dataclasses.replace(spec, placement=st.placement)
        if st.dense_fusion is not None:
            spec = dataclasses.replace(spec, dense_fusion=st.dense_fusion)
        if execution.launch is not None:
            spec = dataclasses.replace(spec, launch=execution.launch)
        if st.scaling != "model":
            n = nodes * gpus_per_node
            spec = dataclasses.replace(spec, global_batch=int(st.batch_per_gpu * n if st.batch_per_gpu
                                                              else st.global_batch))
        return DLRMWorkload(spec)

    def scaling(self, execution) -> str:
        return self._settings(execution).scaling

    def precheck(self, nodes: int, gpus_per_node: int) -> None:
        from .planner import check_batch_split

        check_batch_split(self.spec, nodes, gpus_per_node)

    def check(self, system, nodes: int, gpus_per_node: int, execution, modes=("baseline",)) -> None:
        """A global batch that does not split over the GPUs, a forced plan made for another rank count."""
        from .plan_file import load_plan
        from .planner import check_batch_split

        check_batch_split(self.spec, nodes, gpus_per_node)
        plan_file = self._settings(execution).plan_file
        if plan_file:
            for m in modes:
                load_plan(plan_file, self.spec, system, nodes, gpus_per_node, m)

    def build_graph(self, system, nodes: int, mode: str, *, gpus_per_node: int, execution, plan=None):
        """``plan``: a sharding plan to use (e.g. the one a run chose), over ``plan_file`` and the planner."""
        from .dlrm import build_dlrm_graph
        from .plan_file import load_plan

        plan_file = self._settings(execution).plan_file
        if plan is None and plan_file:
            plan = load_plan(plan_file, self.spec, system, nodes, gpus_per_node, mode)
        return build_dlrm_graph(self.spec, system, nodes, gpus_per_node=gpus_per_node, mode=mode,
                                sim_mode=execution.sim_mode, knobs=execution.knobs, plan=plan)

    def simulate(self, system, nodes: int, gpus_per_node: int, modes, execution, *, record: bool = False,
                 chosen: dict | None = None, pool=None, progress=None) -> dict:
        from ..collectives.tuner import Tuner
        from .dlrm_candidates import simulate_modes

        tuner = Tuner(system.topology, nodes, gpus_per_node, execution.forced_algorithms())  # shared by the modes
        return simulate_modes(self.spec, system, nodes, gpus_per_node, modes, execution, execution.sim_mode,
                              execution.seed, record, tuner, chosen, pool, progress)

    # ----------------------------------------------------------------------------------------- cost and rows
    def knob_grid(self, mode: str, execution, waves: int | None = None, share: float | None = None) -> int:
        """Simulations per plan for ``mode``: the fused knob grid's points when it is tuned and tuning matters,
        else 1.  As :func:`~simfuse.workloads.dlrm_candidates._tuning_matters` decides it: not beyond
        :data:`~simfuse.fused.base.MAX_PUSH_WAVES` waves of the fused kernel (``waves``, estimated), and not where
        the first point kept the GPU-initiated post queues busy for less than
        :data:`~simfuse.workloads.dlrm_candidates.KNOB_SCREEN_POST_SHARE` of the step, which only a simulation
        tells: ``share`` stands for it (:meth:`post_share`; None: priced)."""
        from ..fused.base import MAX_PUSH_WAVES
        from .dlrm_candidates import KNOB_SCREEN_POST_SHARE

        ex, spec = execution, self.spec
        planned = spec.placement == "planned" and not (ex is not None and self._settings(ex).plan_file)
        tuned = mode == "fused" and planned and (ex is None or ex.tune_knobs == "auto")
        busy = share is None or share >= KNOB_SCREEN_POST_SHARE
        return len(TUNE_GRID) if tuned and busy and (waves is None or waves <= MAX_PUSH_WAVES) else 1

    @staticmethod
    def post_share(topology, nodes: int, ranks: int, global_batch: int, workgroups: float) -> float:
        """The guard's estimate of a fused step's post share (``DLRMExtras.put_post_share``): its embedding kernel
        posts one put per workgroup bound off the node (``workgroups`` in all, spread over the ranks' batch
        blocks: ``1 - 1 / nodes`` of them leave the node), ``gpu_initiated.put_post_s`` each, in a step of that
        posting plus :data:`KNOB_GUARD_STEP_FLOOR_S` and :data:`KNOB_GUARD_STEP_S_PER_SAMPLE` per sample of a
        GPU's batch."""
        post = workgroups * (1.0 - 1.0 / max(1, nodes)) * topology.gpu_initiated.put_post_s
        rest = KNOB_GUARD_STEP_FLOOR_S + global_batch / max(1, ranks) * KNOB_GUARD_STEP_S_PER_SAMPLE
        return post / (post + rest) if post > 0 else 0.0

    @staticmethod
    def simulated_ranks(mode: str, sim_mode: str, uneven: bool, nodes: int, ranks: int, tables: int = 4) -> int:
        """Ranks a simulation runs (:func:`~simfuse.workloads.dlrm.build_dlrm_graph`): every rank in full mode;
        one for an even placement; for an uneven one up to ``FULL_SIM_MAX_RANKS`` ranks its orbit classes (or
        every rank, where the fabric has none), counted as every rank for a fused graph (whose classes merge a
        node's GPUs only by local shifts: few placements have any) and two a node for a baseline graph (GPUs of
        equal placement columns merge); beyond (or with ``sim_mode="classes"``), its rank classes, counted as half
        the tables (the MLPerf files' planned placements have 10-19 classes at 16-16,384 nodes).  Where the guard
        reads the placement (:meth:`estimate`) it counts them instead."""
        from .dlrm import FULL_SIM_MAX_RANKS

        if sim_mode == "full":
            return ranks
        if not uneven:
            return 1
        if ranks <= FULL_SIM_MAX_RANKS and sim_mode != "classes":
            return ranks if mode == "fused" else min(ranks, 2 * nodes)
        return min(ranks, max(2, math.ceil(tables / 2)))

    def _placed_load_classes(self, system, nodes: int, g: int) -> tuple[int, tuple[int, int]] | None:
        """``(load classes, (1, 1))`` (one table pushed and posted by its busiest rank) of a table-wise placement on more
        ranks than it has units: :func:`~simfuse.workloads.placement.place_tables` puts its units, heaviest
        first, one on each of the first ranks (all empty ranks tie at load 0; the lowest index wins), so the
        classes are those of the nodes holding units plus one of the empty nodes, counted on those nodes and one
        empty node (:func:`~simfuse.workloads.placement.rank_classes`; the simulation's load classes).  None where
        the placement does not have that shape."""
        from .placement import place_tables, rank_classes

        spec = self.spec
        budget = system.topology.device.memory_bytes * spec.embedding_memory_fraction
        row_bytes = spec.dim * DTYPE_BYTES[spec.embedding_dtype] * (1.0 + spec.optimizer_state_factor)
        units = sum(max(1, math.ceil(t.rows * row_bytes / budget)) for t in spec.tables)
        part = (math.ceil(units / g) + 1) * g
        if spec.placement != "table_wise" or nodes * g < part:
            return None
        per_rank = place_tables(spec, part, system.topology.device.memory_bytes)
        return len(rank_classes(per_rank, g)[1]), (1, 1)

    def _busiest_units(self, per_rank) -> tuple[int, int]:
        """``(pushed, posted)``: column-equivalent tables (a shard's columns over the common column count, as
        :meth:`~simfuse.workloads.dlrm_program.RankProgram._a2a_op` sizes its fused kernel) on a placement's
        busiest rank: of every sharded unit its fused kernels push (the All-to-All shards and the table-row-wise
        ones, which push to their node's reducers), and of the All-to-All shards alone, whose kernel puts every
        workgroup's output to its destination rank (the table-row-wise kernel stores into the node; its reducers
        put)."""
        from .dlrm_kernels import _A2A_KINDS, _HIER_KINDS
        from .dlrm_program import column_equivalent_tables
        from .planner import RankUnits

        D = self.spec.dim
        if isinstance(per_rank, RankUnits):
            def units(kinds):  # per rank: columns over the greatest common column count of its units
                return per_rank.columns(kinds, D) // np.maximum(per_rank.gcd_dims(kinds, D), 1)

            ua = units(_A2A_KINDS)
            return (int((ua + units(_HIER_KINDS)).max()), int(ua.max())) if per_rank.n else (0, 0)
        pushed = posted = 0
        for us in per_rank:
            ua = column_equivalent_tables([u.dim or D for u in us if u.kind in _A2A_KINDS])
            uh = column_equivalent_tables([u.dim or D for u in us if u.kind in _HIER_KINDS])
            pushed, posted = max(pushed, ua + uh), max(posted, ua)
        return pushed, posted

    def estimate(self, pricing, topology, nodes: int, gpus_per_node: int, sim_mode: str, execution,
                 workers: int):
        """The engine runs a DLRM embedding kernel wave by wave without per-workgroup arrays (run_kernel_waves,
        RunPushEngine: at most MAX_PUSH_WAVES push points, each starting flows): its cost grows with the waves,
        so a wave is one record; every simulation of the run pays its flow solves, each mode and candidate plan
        with its own simulated ranks, and the run its work per rank outside the simulations."""
        from ..fused.base import MAX_PUSH_WAVES, largest_divisor_at_most
        from ..fused.knobs import modes_of
        from ..system import System
        from .dlrm import ORBIT_MAX_CLASSES, _classes, _placement
        from .dlrm_candidates import _plan_key
        from .plan_file import load_plan
        from .planner import RankUnits

        spec, ranks, g = self.spec, nodes * gpus_per_node, gpus_per_node
        slots = pricing._slots(topology)
        tables = len(spec.tables)
        per_rank = tables if spec.placement == "row_wise" else math.ceil(tables / ranks)
        uneven = spec.placement != "row_wise" and tables % ranks != 0
        # the fused kernel's workgroups per table: a block of bags is a divisor of the GPU's batch
        # (simfuse.fused.ops.EmbeddingAllToAll: 7 samples a GPU make blocks of 1, four times the blocks of 4)
        B = spec.global_batch
        bags = largest_divisor_at_most(B // ranks, spec.bags_per_wg) if B >= ranks and B % ranks == 0 \
            else max(1, spec.bags_per_wg)
        blocks = B / bags
        modes = modes_of("both" if execution is None else execution.mode)
        planned = spec.placement == "planned"
        plan_file = self._settings(execution).plan_file if execution is not None else None
        # each mode tries its own plan and the other mode's (dlrm_candidates.simulate_modes), unless forced
        two = planned and not plan_file
        plan_modes = list(dict.fromkeys([*modes, *(("fused", "baseline") if two else ())]))
        placed = {}  # mode -> (plan, per-rank units): the placement itself, where the guard reads it
        if uneven and sim_mode != "full" and (nodes <= ORBIT_MAX_CLASSES or ranks <= PLACED_CLASS_MAX_RANKS):
            # ask the placement, as the graph builder will (each plan the run tries; two planner calls, 0.1-0.3 s
            # at 8,192 ranks: not beyond): its classes (orbit classes may hold up to one a node, a planned MLPerf
            # placement at 32 and 64 nodes has 32 and 64, the guess 13; DLRM v1's table-wise one has 6), its busiest
            # rank's units and what it posts (a plan of hierarchical shards posts little, its reducers batch the
            # puts: the knob grid's screen skips its second point; a replicated-tables plan of column shards posts
            # every workgroup: the screen runs it), up to 64 ranks too (the busiest rank's units, 1-7, where the
            # guess was 1-2)
            system = System.from_topology(topology)
            for m in plan_modes:
                plan = load_plan(plan_file, spec, system, nodes, g, m) if plan_file else None
                placed[m] = _placement(spec, system, nodes, g, m, plan)
        guess = None  # (simulated ranks, (pushed, posted) units) of every candidate where the placement is not read
        if not placed and uneven and sim_mode != "full" and not planned and ranks > PLACED_CLASS_MAX_RANKS:
            guess = self._placed_load_classes(System.from_topology(topology), nodes, g)

        def shape(per_rank_units, mode):
            _cls, n_cls, _orbit, full = _classes(per_rank_units, isinstance(per_rank_units, RankUnits), topology,
                                                 nodes, g, mode, sim_mode)
            return (ranks if full else n_cls), self._busiest_units(per_rank_units)

        shapes = {}  # mode -> [(simulated ranks, (column-equivalent tables pushed, posted)) per candidate plan]
        for mode in modes:
            if placed:
                own = placed[mode]
                other = placed["baseline" if mode == "fused" else "fused"] if two else None
                shapes[mode] = [shape(own[1], mode)] + (
                    [shape(other[1], mode)] if other is not None and _plan_key(other[0]) != _plan_key(own[0]) else [])
            else:
                one = guess or (self.simulated_ranks(mode, sim_mode, uneven, nodes, ranks, tables),
                                (per_rank, per_rank))
                shapes[mode] = [one] * (2 if two else 1)
        simulated = flows = events = max_waves = 0
        flow_s = pricing.DLRM_SECONDS_FIXED
        parallel = pricing.interval_runs(spec, topology, execution)  # per mode, shared by the workers
        peers = min(max(0, ranks - 1), 64)
        # the exact fluid model (no re-sharing grid) re-solves rates at every flow start and finish
        exact = pricing.DLRM_EXACT_RATE_FACTOR if execution is not None and execution.rate_resolution_ns == 0 else 1.0
        cands = []  # (candidate simulations, seconds each), in the order the run makes them
        for mode in modes:
            for i, (sim_m, (pushed, posted)) in enumerate(shapes[mode]):
                waves = math.ceil(pushed * blocks / max(1, slots))
                grid = self.knob_grid(mode, execution, waves,
                                      self.post_share(topology, nodes, ranks, B, posted * blocks))
                # the simulated ranks that push embeddings: every one with a planned or row-wise placement, at
                # most one per table with a table-wise one (the others hold no table)
                pushers = sim_m if spec.placement in ("planned", "row_wise") else min(sim_m, tables)
                # a fused kernel's flows grow as its push points ** DLRM_PUSH_EXPONENT (grouped per peer class);
                # a bulk exchange starts its flows once
                points = min(waves, MAX_PUSH_WAVES) ** pricing.DLRM_PUSH_EXPONENT if mode == "fused" else 1.0
                flows_m = pushers * 2 * points * peers
                events_m = sim_m * 2 * waves + 2 * flows_m
                one_s = _simulation_s(pricing, sim_m, ranks, pushers, peers, points, events_m, exact)
                if i == 0 and parallel:  # the interval's runs: the chosen plan (here its own), shared by workers
                    flow_s += parallel * grid * one_s / max(1, min(workers, parallel * grid))
                cands.append((grid, one_s))
                simulated, max_waves = max(simulated, sim_m), max(max_waves, waves)
                flows, events = max(flows, int(flows_m)), max(events, int(events_m))
        flow_s += _candidates_wall_s(cands, workers)
        flow_s += ranks * tables * (pricing.DLRM_SECONDS_PER_RANK_TABLE
                                    + (pricing.DLRM_PLANNED_SECONDS_PER_RANK_TABLE if two else 0.0))
        full = simulated == ranks and ranks > 1
        return pricing.CostEstimate(f"{spec.name} on {nodes} x {gpus_per_node} GPUs ({'full' if full else 'classes'})",
                                    ranks, simulated, 2 * max_waves, 2 * max_waves, flows, events, flow_s)

    def estimate_run(self, pricing, topology, nodes: int, gpus_per_node: int, sim_mode: str, execution,
                     workers: int):
        """:meth:`estimate` counts every simulation of the run already."""
        return self.estimate(pricing, topology, nodes, gpus_per_node, sim_mode, execution, workers)

    def row_columns(self, result, gpus: int) -> dict:
        """The batch, the placement, the plan and the fused knobs used."""
        x = result.extras
        plan, kn = x.plan, x.knobs
        return {"global_batch": x.global_batch, "batch_per_gpu": x.global_batch // gpus,
                "placement": "forced" if plan is not None and plan.candidate == "forced" else
                "planned" if plan is not None else "table_wise",
                "dense_fusion": x.dense_fusion,
                "plan_candidate": plan.candidate if plan is not None else "",
                "plan_estimated_s": plan.estimated_critical_s if plan is not None else float("nan"),
                "slice_wgs": kn.slice_wgs, "tile_order": kn.tile_order, "persistent_grid": kn.persistent_grid,
                "knobs_tuned": bool(x.tuned), "knob_points": int(x.knob_points)}

    def plan_of(self, result):
        return result.extras.plan


def _simulation_s(pricing, sim_m: int, ranks: int, pushers: int, peers: int, points: float, events: float,
                  exact: float) -> float:
    """Seconds of one simulation of ``sim_m`` of ``ranks`` ranks, ``pushers`` of them pushing to ``peers`` peer
    groups at ``points`` push points (``** DLRM_PUSH_EXPONENT``), ``events`` estimated events; ``exact``: the
    exact fluid model's factor (:data:`~simfuse.guard.DLRM_EXACT_RATE_FACTOR`)."""
    if sim_m == ranks or sim_m == 1:  # every rank (or the one of an even placement) simulated
        # an event re-solves the rates of the flows in flight: a problem that grows with pushers x peers
        # (64 fully simulated GPUs pushing to 63 peers: scale 1)
        scale = min(1.0, pushers * max(1, peers) / (64 * 63))
        return events * pricing.DLRM_SECONDS_PER_EVENT * scale ** pricing.DLRM_EVENT_PAIR_EXPONENT * exact
    # rank classes: each runs its program; those holding tables exchange with every peer group at every push point,
    # and each event re-solves the rates of the flows in flight, which grow with those classes x peers
    pair = (pushers * max(1, peers) / (64 * 63)) ** pricing.DLRM_CLASS_PAIR_EXPONENT
    return sim_m * pricing.DLRM_SECONDS_PER_CLASS + pushers * pricing.DLRM_SECONDS_PER_CLASS_FLOW * points * peers \
        * pair * exact


def _candidates_wall_s(cands: list, workers: int) -> float:
    """Wall time of a run's candidate simulations (``[(count, seconds each)]`` per mode, in run order), as
    :func:`~simfuse.workloads.dlrm_candidates.simulate_modes` schedules them: the first alone, the rest shared by
    the workers when a simulation is worth shipping (:data:`~simfuse.workloads.parallel.MIN_PARALLEL_SIM_S`),
    every one of them shared where that makes a long run (:data:`~simfuse.workloads.parallel.MIN_PARALLEL_RUN_S`:
    the run's estimate, of which these simulations are the bulk, sends them to the workers at once; where the
    schedule would hinge on this very figure, the geometric mean of the two)."""
    from .parallel import MIN_PARALLEL_RUN_S, MIN_PARALLEL_SIM_S

    n = sum(c for c, _s in cands)
    total = sum(c * s for c, s in cands)
    if workers <= 1 or n <= 1 or max(s for _c, s in cands) < MIN_PARALLEL_SIM_S:
        return total
    first = next(s for c, s in cands if c > 0)
    staged = first + (total - first) / min(workers, n - 1)
    at_once = total / min(workers, n)
    # the run sends its simulations to the workers at once where the guard's estimate -- this figure -- reaches
    # MIN_PARALLEL_RUN_S (simfuse.workloads.parallel.Pool), so the schedule follows the estimate: at once where even
    # that estimate reaches it, staged where even the staged one does not; in between either figure would send the
    # run to the other schedule, and their geometric mean is within sqrt(staged / at once) <= sqrt(2) of whichever
    # the run then takes
    if at_once >= MIN_PARALLEL_RUN_S:
        return at_once
    return staged if staged < MIN_PARALLEL_RUN_S else math.sqrt(staged * at_once)
