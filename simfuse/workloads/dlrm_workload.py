"""DLRM as a registered :class:`~simfuse.workloads.base.Workload`: its scaling modes, its candidates (the
sharding plans each mode tries and the fused knob grid), its cost estimate and its result columns.  The graph
itself is built by :mod:`simfuse.workloads.dlrm`."""

from __future__ import annotations

import dataclasses
import math

from ..spec import DLRMSpec
from ..spec.workload import DLRMSettings
from .base import Workload, register_workload
from .dlrm_candidates import TUNE_GRID

#: the cost guard's stand-in for the knob grid's screen: the grid's further points are priced where a put's post
#: cost is at least this (s).  Measured (experiments/results/knob_screen.csv, MLPerf DLRM-DCNv2 files on H100):
#: at the shipped 5 ns the first point's post share stayed below the screen at 1-256 nodes (0.0003-0.10); from
#: 10 ns it reached it at 2-16 nodes (0.10-0.16); the HugeCTR file at 512-1,024 nodes crosses it at 5 ns already
KNOB_GUARD_POST_S = 0.01e-6

#: up to this many ranks the guard counts a table-wise (not planned) placement's rank classes from the placement
#: itself (:func:`~simfuse.workloads.dlrm.simulated_rank_count`: 0.05 s at 8,192 ranks, 0.5 s at 131,072)
PLACED_CLASS_MAX_RANKS = 8192


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
    def simulations_by_mode(self, pricing, topology, execution, waves: int | None = None) -> dict[str, int]:
        """How many simulations a run makes per mode: each candidate plan (two with a planned placement and no
        forced plan) times the fused knob grid (``tune_knobs: auto``; ``waves``: the fused kernel's estimated
        waves, beyond :data:`~simfuse.fused.base.MAX_PUSH_WAVES` of which the grid stops after its first point, as
        :func:`~simfuse.workloads.dlrm_candidates._tuning_matters` does), and with a calibration profile the
        interval's runs (``bound``: 3 per mode, ``mc``: the draws), each as many as the knob grid."""
        from ..fused.knobs import modes_of

        ex, spec = execution, self.spec
        modes = modes_of("both" if ex is None else ex.mode)
        planned = spec.placement == "planned" and not (ex is not None and self._settings(ex).plan_file)
        out = {}
        for m in modes:
            grid = self.knob_grid(m, ex, waves, topology)
            # an interval's run tunes the knobs again on its own inputs (dlrm_candidates.simulate_modes)
            out[m] = ((2 if planned else 1) + pricing.interval_runs(spec, topology, ex)) * grid
        return out

    def knob_grid(self, mode: str, execution, waves: int | None = None, topology=None) -> int:
        """Simulations per plan for ``mode``: the fused knob grid's points when it is tuned and tuning matters
        (``waves``: the fused kernel's estimated waves, see :meth:`simulations_by_mode`), else 1.  Whether the
        run's screen lets the grid run depends on how busy its first point keeps the post queues
        (:func:`~simfuse.workloads.dlrm_candidates._tuning_matters`), which only a simulation tells: here the
        topology's put post cost stands for it (:data:`KNOB_GUARD_POST_S`)."""
        from ..fused.base import MAX_PUSH_WAVES

        ex, spec = execution, self.spec
        planned = spec.placement == "planned" and not (ex is not None and self._settings(ex).plan_file)
        tuned = mode == "fused" and planned and (ex is None or ex.tune_knobs == "auto")
        dear = topology is None or topology.gpu_initiated.put_post_s >= KNOB_GUARD_POST_S
        return len(TUNE_GRID) if tuned and dear and (waves is None or waves <= MAX_PUSH_WAVES) else 1

    @staticmethod
    def simulated_ranks(mode: str, sim_mode: str, uneven: bool, nodes: int, ranks: int, tables: int = 4) -> int:
        """Ranks a simulation runs (:func:`~simfuse.workloads.dlrm.build_dlrm_graph`): every rank in full mode;
        one for an even placement; for an uneven one up to ``FULL_SIM_MAX_RANKS`` ranks its orbit classes (or
        every rank, where the fabric has none), counted as every rank for a fused graph (whose classes merge a
        node's GPUs only by local shifts: few placements have any) and two a node for a baseline graph (GPUs of
        equal placement columns merge); beyond (or with ``sim_mode="classes"``), its rank classes, counted as half the tables (the MLPerf files'
        planned placements have 10-19 classes at 16-16,384 nodes, the table-wise one 17, DLRM v1 6)."""
        from .dlrm import FULL_SIM_MAX_RANKS

        if sim_mode == "full":
            return ranks
        if not uneven:
            return 1
        if ranks <= FULL_SIM_MAX_RANKS and sim_mode != "classes":
            return ranks if mode == "fused" else min(ranks, 2 * nodes)
        return min(ranks, max(2, math.ceil(tables / 2)))

    def estimate(self, pricing, topology, nodes: int, gpus_per_node: int, sim_mode: str, execution,
                 workers: int):
        """The engine runs a DLRM embedding kernel wave by wave without per-workgroup arrays (run_kernel_waves,
        RunPushEngine: at most MAX_PUSH_WAVES push points, each starting flows): its cost grows with the waves,
        so a wave is one record; every simulation of the run pays its flow solves, each mode with its own
        simulated ranks, and the run its work per rank outside the simulations."""
        from ..fused.base import MAX_PUSH_WAVES
        from ..system import System
        from .dlrm import FULL_SIM_MAX_RANKS, ORBIT_MAX_CLASSES, simulated_rank_count
        from .plan_file import load_plan

        spec, ranks = self.spec, nodes * gpus_per_node
        slots = pricing._slots(topology)
        tables = len(spec.tables)
        per_rank = tables if spec.placement == "row_wise" else math.ceil(tables / ranks)
        uneven = spec.placement != "row_wise" and tables % ranks != 0
        w = per_rank * spec.global_batch / max(1, spec.bags_per_wg)
        waves = math.ceil(w / max(1, slots))
        push = min(waves, MAX_PUSH_WAVES)
        simulated = flows = events = 0
        flow_s = pricing.DLRM_SECONDS_FIXED
        parallel = pricing.interval_runs(spec, topology, execution)  # per mode, shared by the workers
        peers = min(max(0, ranks - 1), 64)
        # the exact fluid model (no re-sharing grid) re-solves rates at every flow start and finish
        exact = pricing.DLRM_EXACT_RATE_FACTOR if execution is not None and execution.rate_resolution_ns == 0 else 1.0
        # a fused kernel's flows grow as its push points ** DLRM_PUSH_EXPONENT (grouped per peer class)
        push_eff = push ** pricing.DLRM_PUSH_EXPONENT
        system = None  # built once, where a placement is asked for
        cands = []  # (mode's candidate simulations, seconds each), in the order the run makes them
        for mode, n_sims in self.simulations_by_mode(pricing, topology, execution, waves).items():
            sim_m = self.simulated_ranks(mode, sim_mode, uneven, nodes, ranks, tables)
            if uneven and sim_mode != "full" and FULL_SIM_MAX_RANKS < ranks and (
                    nodes <= ORBIT_MAX_CLASSES or (spec.placement != "planned" and ranks <= PLACED_CLASS_MAX_RANKS)):
                # orbit classes may hold up to one class a node here (a planned MLPerf placement at 32 and 64 nodes
                # has 32 and 64, the estimate above 13): ask the placement, as the graph builder will (its plan
                # for this mode; a planner call, 0.1 s at 64 nodes); a table-wise placement's load classes too
                # (DLRM v1 has 6, the estimate 13; 0.05 s at 8,192 ranks, 0.5 s at 131,072: not beyond)
                system = system or System.from_topology(topology)
                plan_file = self._settings(execution).plan_file
                plan = load_plan(plan_file, spec, system, nodes, gpus_per_node, mode) if plan_file else None
                sim_m = simulated_rank_count(spec, system, nodes, gpus_per_node, mode, sim_mode, plan)[0]
            # the simulated ranks that push embeddings: every one with a planned or row-wise placement, at most
            # one per table with a table-wise one (the others hold no table)
            pushers = sim_m if spec.placement in ("planned", "row_wise") else min(sim_m, tables)
            # a fused kernel pushes at each of its push points; a bulk exchange starts its flows once
            points = push_eff if mode == "fused" else 1.0
            flows_m = pushers * 2 * points * peers
            events_m = sim_m * 2 * waves + 2 * flows_m
            if sim_m == ranks or sim_m == 1:  # every rank (or the one of an even placement) simulated
                # an event re-solves the rates of the flows in flight: a problem that grows with pushers x peers
                # (64 fully simulated GPUs pushing to 63 peers: scale 1)
                scale = min(1.0, pushers * max(1, peers) / (64 * 63))
                per_event = pricing.DLRM_SECONDS_PER_EVENT * scale ** pricing.DLRM_EVENT_PAIR_EXPONENT
                one_s = events_m * per_event * exact
            else:  # rank classes
                one_s = sim_m * (pricing.DLRM_SECONDS_PER_CLASS
                                 + pricing.DLRM_SECONDS_PER_CLASS_FLOW * push_eff * peers * exact)
            par_m = parallel * self.knob_grid(mode, execution, waves, topology)  # the interval's runs, shared by workers
            flow_s += par_m * one_s / max(1, min(workers, par_m or 1))
            cands.append((n_sims - par_m, one_s))
            simulated, flows, events = max(simulated, sim_m), max(flows, int(flows_m)), max(events, int(events_m))
        flow_s += _candidates_wall_s(cands, workers)
        planned = spec.placement == "planned" and not (execution is not None and
                                                        self._settings(execution).plan_file)
        flow_s += ranks * tables * (pricing.DLRM_SECONDS_PER_RANK_TABLE
                                    + (pricing.DLRM_PLANNED_SECONDS_PER_RANK_TABLE if planned else 0.0))
        full = simulated == ranks and ranks > 1
        return pricing.CostEstimate(f"{spec.name} on {nodes} x {gpus_per_node} GPUs ({'full' if full else 'classes'})",
                                    ranks, simulated, 2 * waves, 2 * waves, flows, events, flow_s)

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


def _candidates_wall_s(cands: list, workers: int) -> float:
    """Wall time of a run's candidate simulations (``[(count, seconds each)]`` per mode, in run order), as
    :func:`~simfuse.workloads.dlrm_candidates.simulate_modes` schedules them: the first alone, the rest shared by
    the workers when a simulation is worth shipping (:data:`~simfuse.workloads.parallel.MIN_PARALLEL_SIM_S`),
    every one of them shared where that makes a long run (:data:`~simfuse.workloads.parallel.MIN_PARALLEL_RUN_S`:
    the run's estimate, of which these simulations are the bulk, sends them to the workers at once)."""
    from .parallel import MIN_PARALLEL_RUN_S, MIN_PARALLEL_SIM_S

    n = sum(c for c, _s in cands)
    total = sum(c * s for c, s in cands)
    if workers <= 1 or n <= 1 or max(s for _c, s in cands) < MIN_PARALLEL_SIM_S:
        return total
    first = next(s for c, s in cands if c > 0)
    staged = first + (total - first) / min(workers, n - 1)
    return total / min(workers, n) if staged >= MIN_PARALLEL_RUN_S else staged
