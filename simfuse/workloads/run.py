"""Run a workload at one node count in one or both modes; tables for ``simfuse run`` and ``simfuse sweep``."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pandas as pd

from ..errors import SpecError
from ..fused.knobs import ExecutionSpec, modes_of
from ..spec import DLRMSpec, LLMSpec, MoESpec, TransformerDecodeSpec, load_workload
from ..system import System, as_system
from .dlrm import simulate_dlrm
from .llm import simulate_llm
from .models import simulate_decode, simulate_moe
from .op import bound_envelope

MODES = ("both", "fused", "baseline")
#: fused knobs tried when ``tune_knobs=auto`` and the placement is planned (only knobs left at their defaults are
#: varied).  slice_wgs 1 (every workgroup puts its own output) vs 8 (one put per 8 workgroups: fewer, larger
#: puts, less issue overhead, later first byte); tile_order and persistent_grid keep the paper's choices
#: (remote-first, docs/sources.md S49; one program per tile) to hold the tuning to two extra simulations per run.
TUNE_GRID = ({"slice_wgs": 1}, {"slice_wgs": 8})


def _tuning_matters(res) -> bool:
    """Whether the rest of :data:`TUNE_GRID` is worth simulating after its first point gave ``res``.  Not when the
    fused embedding kernel has more waves than :data:`~simfuse.fused.base.MAX_PUSH_WAVES`: it then pushes once
    per macro-wave of at least two waves (>= 2 x 1,056 workgroups on an H200), and a slice of at most
    ``max(slice_wgs)`` = 8 workgroups changes only what a macro-wave boundary holds back (< 8 workgroups per run
    crossing it), far below the coarsening's own resolution -- while each grid point is a full simulation (the
    cost that kept 1,024 nodes from finishing)."""
    from ..fused.base import MAX_PUSH_WAVES

    return res.fused_waves <= MAX_PUSH_WAVES


def scaled_spec(spec, nodes: int, gpus_per_node: int, execution: ExecutionSpec):
    """``spec`` with the global batch the scaling mode asks for: ``batch_per_gpu`` x GPUs (weak scaling),
    ``global_batch`` (strong scaling), or the model file's.  Non-DLRM workloads refuse both settings."""
    if execution.placement is not None:
        if not isinstance(spec, DLRMSpec):
            raise SpecError("<argument>", "placement", f"applies to DLRM workloads, not {spec.kind}")
        spec = dataclasses.replace(spec, placement=execution.placement)
    if execution.dense_fusion is not None:
        if not isinstance(spec, DLRMSpec):
            raise SpecError("<argument>", "dense_fusion", f"applies to DLRM workloads, not {spec.kind}")
        spec = dataclasses.replace(spec, dense_fusion=execution.dense_fusion)
    if execution.plan_file and not isinstance(spec, DLRMSpec):
        raise SpecError("<argument>", "plan_file", f"a sharding plan applies to DLRM workloads, not {spec.kind}")
    if execution.launch is not None:
        spec = dataclasses.replace(spec, launch=execution.launch)
    if execution.scaling == "model":
        return spec
    if not isinstance(spec, DLRMSpec):
        raise SpecError("<argument>", "batch_per_gpu" if execution.batch_per_gpu else "global_batch",
                        f"scaling modes apply to DLRM workloads, not {spec.kind}")
    n = nodes * gpus_per_node
    B = execution.batch_per_gpu * n if execution.batch_per_gpu else execution.global_batch
    return dataclasses.replace(spec, global_batch=int(B))


def check_point(spec, system, nodes: int, gpus_per_node: int, execution: ExecutionSpec, modes=("baseline",)):
    """The input errors a run of ``spec`` on ``nodes`` nodes would raise, found without simulating (a sweep checks
    every node count before it starts): the scaling settings, a DLRM global batch that does not split over the
    GPUs, a forced plan made for another rank count; other workloads build their (small) graph."""
    system = as_system(system)
    s = scaled_spec(spec, nodes, gpus_per_node, execution)
    if isinstance(s, DLRMSpec):
        from .planner import check_batch_split, load_plan

        check_batch_split(s, nodes, gpus_per_node)
        if execution.plan_file:

            for m in modes:
                load_plan(execution.plan_file, s, system, nodes, gpus_per_node, m)
        return
    workload_graph(spec, system, nodes, "baseline", gpus_per_node=gpus_per_node, execution=execution)


def _dlrm_one(spec, system, nodes, g, mode, sim_mode, seed, knobs, tuner, plan, progress=None):
    """One DLRM simulation in a worker process (:mod:`~simfuse.workloads.parallel`): the result without its
    simulator objects, which do not cross processes (a run that records a trace does not use workers)."""
    r = simulate_dlrm(spec, system, nodes, gpus_per_node=g, mode=mode, sim_mode=sim_mode, seed=seed, knobs=knobs,
                      tuner=tuner, plan=plan, progress=progress)
    r.sim = r.net = None
    return r


def _plan_key(plan) -> tuple:
    """What a plan places where (two plans with equal keys simulate alike)."""
    return tuple((t.table, t.sharding, tuple(t.ranks), t.dim_per_shard) for t in plan.tables)


def _simulate_dlrm_modes(spec, system, nodes, g, modes, ex, sim_mode, seed, record, tuner, chosen=None,
                         pool=None, progress=None) -> dict:
    """Each mode with the faster of two plans (forced from ``plan_file``, else the planner's plan for that mode and
    the one for the other mode) and, in fused mode with ``tune_knobs=auto`` and a planned placement, the fastest
    knobs of :data:`TUNE_GRID`.  ``chosen``: results of
    an earlier run whose plan and knobs each mode reuses as they are (no planning, no tuning).  ``pool``: a
    :class:`~simfuse.workloads.parallel.Pool` for the fused candidates (the same choice as the serial loop).
    ``progress``: a :class:`~simfuse.progress.Progress` told each simulation (and, within one, its events)."""
    from ..progress import Progress
    from .planner import load_plan, plan_tables

    progress = progress or Progress()
    out = {}
    own_plans: dict = {}  # mode -> the planner's plan for it (planned once, shared by both modes' candidates)

    def planned(mode):
        if mode not in own_plans:
            own_plans[mode] = plan_tables(spec, system, nodes, g, mode)
        return own_plans[mode]

    if chosen is not None:  # an interval's run: each mode's plan and knobs as the point estimate chose them
        for m in modes:
            c = chosen[m]
            out[m] = simulate_dlrm(spec, system, nodes, gpus_per_node=g, mode=m, sim_mode=sim_mode, seed=seed,
                                   record=record, record_usage=record, knobs=c.knobs, tuner=tuner, plan=c.plan,
                                   progress=progress)
            out[m].tuned = getattr(c, "tuned", False)
        return out

    cands = {}  # mode -> (candidate plans, knob grid, knobs per grid point)
    for m in modes:
        plan = load_plan(ex.plan_file, spec, system, nodes, g, m) if ex.plan_file else None
        grid = [{}]
        if m == "fused" and ex.tune_knobs == "auto" and spec.placement == "planned":
            defaults = type(ex.knobs)()
            grid = [{k: v for k, v in pt.items() if getattr(ex.knobs, k) == getattr(defaults, k)} for pt in TUNE_GRID]
            grid = [dict(t) for t in dict.fromkeys(tuple(sorted(pt.items())) for pt in grid)]
        # each mode also tries the other mode's plan: plans are chosen on estimates, so the plan made for one
        # mode can simulate faster in the other.  Both modes get the same two candidates (a fair comparison:
        # fusing must not win for want of a plan, nor lose for want of one), whichever modes were asked for.
        plans = [plan]
        if plan is None and spec.placement == "planned":
            other_mode = "fused" if m == "baseline" else "baseline"
            own, other = planned(m), planned(other_mode)
            plans = [own]
            if _plan_key(other) != _plan_key(own):
                plans.append(dataclasses.replace(other, mode=m, candidate=f"{other_mode}:{other.candidate}"))
        cands[m] = (plans, grid, [dataclasses.replace(ex.knobs, **pt) for pt in grid])

    def what(m, i, j):
        plans, grid, _knobs = cands[m]
        return m + (f", plan {i + 1}/{len(plans)}" if len(plans) > 1 else "") + "".join(
            f", {k} {v}" for k, v in grid[j].items())

    def one(m, i, j):
        plans, _grid, knobs = cands[m]
        progress.doing(what(m, i, j))
        r = simulate_dlrm(spec, system, nodes, gpus_per_node=g, mode=m, sim_mode=sim_mode, seed=seed,
                          record=record, record_usage=record, knobs=knobs[j], tuner=tuner, plan=plans[i],
                          progress=progress)
        progress.advance()
        return r

    # an upper bound: the knob grid stops early where tuning cannot matter (_tuning_matters)
    progress.begin("simulation", sum(len(c[0]) * len(c[1]) for c in cands.values()), up_to=True)

    done: dict = {}  # (mode, plan index, grid index) -> result, computed ahead in workers
    first_s = 0.0  # wall time of this run's first simulation: whether the rest is worth shipping to workers
    n_first = sum(len(c[0]) for c in cands.values())
    if pool is not None and not record and pool.workers > 1 and n_first > 1:
        # the first candidate here (its time says whether workers pay), then every mode's other first-grid
        # candidates together, then the knob points of the plans whose first result says tuning matters: exactly
        # what the selection below asks for when the plans agree (the usual case); it computes any it misses
        m0 = modes[0]
        done[(m0, 0, 0)] = r0 = one(m0, 0, 0)
        first_s = r0.wall_s
        first = [(m, i, 0) for m in modes for i in range(len(cands[m][0])) if (m, i, 0) not in done]
        for stage in (first, None):
            keys = stage if stage is not None else [
                (m, i, j) for m in modes for i in range(len(cands[m][0])) for j in range(1, len(cands[m][1]))
                if _tuning_matters(done[(m, i, 0)])]
            if not keys or not pool.parallel(len(keys), first_s):
                break
            tasks = [(spec, system, nodes, g, m, sim_mode, seed, cands[m][2][j], tuner, cands[m][0][i])
                     for m, i, j in keys]
            progress.doing(f"{len(keys)} in {min(pool.workers, len(keys))} worker processes")
            done.update(zip(keys, pool.map(_dlrm_one, tasks, progress=progress), strict=True))
    for m in modes:
        plans, grid, _knobs = cands[m]
        best = None
        n_grid = len(grid)
        for i in range(len(plans)):
            for j in range(len(grid)):
                if j and not _tuning_matters(best):
                    n_grid = min(n_grid, j)
                    break
                r = done.get((m, i, j))
                if r is None:
                    r = one(m, i, j)
                if plans[i] is None:  # plan once per mode, reuse for every grid point
                    plans[i] = r.plan
                if best is None or r.iteration_time_s < best.iteration_time_s:
                    best = r
                first_s = first_s or r.wall_s
        best.tuned = n_grid > 1
        out[m] = best
    return out


def simulate_workload(spec, system, nodes: int, *, mode: str | None = None, gpus_per_node=None,
                      sim_mode: str | None = None, record: bool = False, seed: int | None = None,
                      execution: ExecutionSpec | None = None, workers: int = 1, progress=None) -> dict:
    """``{"baseline": IterationResult, "fused": IterationResult}`` (the modes asked for).

    ``system``: a :class:`~simfuse.system.System` (a topology spec is resolved here once).  ``execution`` carries
    every knob; ``mode``/``sim_mode``/``seed`` given here override it.

    Prediction intervals (``execution.uncertainty``): each result gets ``interval`` (iteration time p10/p50/p90,
    s) and the fused one ``speedup_interval``.  ``bound``: the whole run repeated with every kernel family at
    the p10, p50 and p90 of its cross-validated residuals (perfectly correlated errors: an analytic bound, wider
    than independent errors would give); ``mc``: ``uncertainty_draws`` runs with cost models drawn from the
    residuals (seeded by ``seed``); baseline and fused share each draw, so the speedup interval keeps their
    correlation.  Without residuals (roofline, or a perfect fit) the interval collapses onto the point.  The
    runs of an interval keep the configuration the point estimate chose (DLRM: each mode's sharding plan and
    fused knobs): the interval is that configuration's iteration time under the cost model's uncertainty, not a
    re-planning per draw (which would mix the planner's choice into the spread and cost a planning per run).

    ``workers``: processes for the simulations that do not depend on each other (the fused candidates of a DLRM
    point estimate, the runs of an interval; :mod:`~simfuse.workloads.parallel`); the results are the same for
    any number.  ``progress``: a :class:`~simfuse.progress.Progress` told each simulation (default: nobody)."""
    from ..progress import Progress
    from .parallel import Pool

    progress = progress or Progress()
    system = as_system(system)
    ex = execution or ExecutionSpec()
    with Pool(workers) as pool:
        res = _simulate_once(spec, system, nodes, mode=mode, gpus_per_node=gpus_per_node, sim_mode=sim_mode,
                             record=record, seed=seed, execution=ex, pool=pool, progress=progress)
        method, why = _interval_method(ex, spec, system)
        chosen = {m: _Chosen(getattr(r, "plan", None), getattr(r, "knobs", None), getattr(r, "tuned", False))
                  for m, r in res.items()}
        run_seed = ex.seed if seed is None else seed
        design = _input_design(spec, system, ex.uncertainty_draws, run_seed, ex.sensitivity == "oat") \
            if method == "inputs" else None
        runs_in = _interval_runs(method, spec, system, ex.uncertainty_draws, run_seed, design)
        tasks = [(sp, s, nodes, mode, gpus_per_node, sim_mode, seed, ex, chosen) for sp, s in runs_in]
        if tasks:
            progress.begin("interval run", len(tasks))
        runs = pool.map(_interval_times, tasks, pool.parallel(len(tasks), max(r.wall_s for r in res.values())),
                        progress=progress)
    if method == "inputs":
        _attach_input_analysis(res, design, runs)
        runs = runs[:ex.uncertainty_draws]
    _attach_intervals(res, runs, method)
    for r in res.values():
        r.uncertainty_note = why
    return res


def _interval_method(ex: ExecutionSpec, spec, system) -> tuple[str, str]:
    """The interval method a run can use, and (when it gives no interval) why: ``bound`` and ``mc`` need
    cross-validated kernel residuals in the calibration profile; ``inputs`` needs input ranges or residuals."""
    from ..uncertainty import run_inputs

    method = ex.uncertainty
    if method == "none":
        return "none", "not asked (uncertainty=none)"
    if method == "inputs":
        if run_inputs(spec, system):
            return "inputs", ""
        if system.has_residuals:
            return "mc", "no input ranges declared (uncertain: blocks); kernel residuals only"
        return "none", "no input ranges declared in the model or topology file, and no calibrated kernel residuals"
    if not system.has_residuals:
        return "none", (f"uncertainty={method} covers only kernel-model residuals, and this topology has no "
                        "calibration profile with residuals (the figures are a point estimate); --set "
                        "uncertainty=inputs samples the files' input ranges")
    return method, ""


def _input_seed(seed: int):
    import numpy as np

    return np.random.default_rng([int(seed), 0x1A7E])  # a stream of its own: the LHS never shares draws


def _input_design(spec, system, draws: int, seed: int, oat: bool) -> tuple[list, list, list]:
    """``(inputs, joint draws, one-at-a-time runs)`` of ``uncertainty=inputs``, made once: the interval's runs
    and its analysis both read them."""
    from ..uncertainty import lhs_design, oat_design, run_inputs

    inputs = run_inputs(spec, system)
    return inputs, lhs_design(inputs, draws, _input_seed(seed)), (oat_design(inputs) if oat else [])


def _interval_runs(method: str, spec, system, draws: int, seed: int, design=None) -> list[tuple]:
    """The (spec, system) of every run an interval makes (``inputs``: the Latin hypercube draws of ``design``,
    each joint with a residual draw where the profile has residuals, then the one-at-a-time runs at nominal
    residuals)."""
    import numpy as np

    if method == "bound":
        return [(spec, system.at_quantile(q)) for q in (0.1, 0.5, 0.9)]
    if method == "mc":
        rng = np.random.default_rng(seed)
        return [(spec, system.draw(rng)) for _ in range(draws)]
    if method != "inputs":
        return []
    from ..uncertainty import apply_values

    _inputs, joint, one_at_a_time = design
    out = []
    resid = np.random.default_rng([int(seed), 0x2E51])
    for values in joint:
        sp, sy = apply_values(spec, system, values)
        out.append((sp, sy.draw(resid) if system.has_residuals else sy))
    for name, v in one_at_a_time:
        out.append(apply_values(spec, system, {name: v}))
    return out


def _attach_input_analysis(res: dict, design, runs: list[dict]) -> None:
    """An :class:`~simfuse.uncertainty.InputAnalysis` on every result (``input_analysis``) from the runs
    :func:`_interval_runs` made of ``design`` (:func:`_input_design`)."""
    from ..uncertainty import InputAnalysis

    inputs, joint, one_at_a_time = design
    draws = len(joint)
    lhs = [{"values": v, "times": t} for v, t in zip(joint, runs[:draws], strict=True)]
    one = [{"input": n, "value": v, "times": t} for (n, v), t in zip(one_at_a_time, runs[draws:], strict=True)]
    analysis = InputAnalysis(inputs, lhs, one, {m: r.iteration_time_s for m, r in res.items()})
    for r in res.values():
        r.input_analysis = analysis


@dataclasses.dataclass(frozen=True)
class _Chosen:
    """What the runs of an interval keep from the point estimate's result of a mode (DLRM: its plan and knobs)."""

    plan: object
    knobs: object
    tuned: bool


def _interval_times(spec, system, nodes, mode, gpus_per_node, sim_mode, seed, ex, chosen,
                    progress=None) -> dict[str, float]:
    """The iteration time of every mode on the cost model ``system``, with the choices of ``chosen``."""
    res = _simulate_once(spec, system, nodes, mode=mode, gpus_per_node=gpus_per_node, sim_mode=sim_mode,
                         seed=seed, execution=ex, chosen=chosen, progress=progress)
    return {m: r.iteration_time_s for m, r in res.items()}


def _quantiles(values: list[float]) -> dict[str, float]:
    import numpy as np

    v = np.asarray(values, dtype=float)
    return {f"p{q}": float(np.quantile(v, q / 100)) for q in (10, 50, 90)}


def _attach_intervals(res: dict, runs: list[dict], method: str) -> None:
    """``interval`` / ``speedup_interval`` on every result (see :func:`simulate_workload`); ``runs``: the iteration
    time of every mode in each run of the interval."""
    for m, r in res.items():
        r.uncertainty = method if runs else "none"
        times = [run[m] for run in runs] or [r.iteration_time_s]
        if method == "bound" and runs:  # the three runs are the p10, p50 and p90 cost models
            r.interval = bound_envelope(times, r.iteration_time_s)
        else:
            r.interval = _quantiles(times)
    if "baseline" in res and "fused" in res:
        point = res["baseline"].iteration_time_s / res["fused"].iteration_time_s
        pairs = [(run["baseline"], run["fused"]) for run in runs] or [
            (res["baseline"].iteration_time_s, res["fused"].iteration_time_s)]
        ratios = [b / f for b, f in pairs]
        if method == "bound" and runs:
            res["fused"].speedup_interval = bound_envelope(ratios, point)
        else:
            res["fused"].speedup_interval = _quantiles(ratios)


def _simulate_once(spec, system, nodes: int, *, mode: str | None = None, gpus_per_node=None,
                   sim_mode: str | None = None, record: bool = False, seed: int | None = None,
                   execution: ExecutionSpec | None = None, chosen: dict | None = None, pool=None,
                   progress=None) -> dict:
    """One simulation of every mode asked for, on ``system``'s cost model as it is (DLRM: with the plans and
    knobs of ``chosen``'s results when given)."""
    ex = execution or ExecutionSpec()
    mode = ex.mode if mode is None else mode
    sim_mode = ex.sim_mode if sim_mode is None else sim_mode
    seed = ex.seed if seed is None else seed
    if mode not in MODES:
        raise SpecError("<argument>", "--mode", f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
    if nodes < 1:
        raise SpecError("<argument>", "--nodes", f"must be >= 1, got {nodes}")
    modes = modes_of(mode)
    g = gpus_per_node or system.gpus_per_node
    spec = scaled_spec(spec, nodes, g, ex)
    system = system.with_launch(spec.launch)  # CUDA graph: every kernel at the device's in-graph launch latency
    if isinstance(spec, DLRMSpec):
        from ..collectives.tuner import Tuner

        tuner = Tuner(system.topology, nodes, g, ex.forced_algorithms())  # shared by both modes
        res = _simulate_dlrm_modes(spec, system, nodes, g, modes, ex, sim_mode, seed, record, tuner, chosen, pool,
                                   progress)
    elif isinstance(spec, TransformerDecodeSpec):
        res = simulate_decode(spec, system, nodes, gpus_per_node=gpus_per_node, execution=ex, record=record)
    elif isinstance(spec, MoESpec):
        res = simulate_moe(spec, system, nodes, gpus_per_node=gpus_per_node, execution=ex, record=record)
    elif isinstance(spec, LLMSpec):
        res = simulate_llm(spec, system, nodes, gpus_per_node=gpus_per_node, execution=ex, record=record)
    else:  # pragma: no cover - load_workload only returns the kinds above
        raise SpecError(getattr(spec, "source", "<model>"), "kind", "unsupported workload")
    for m in modes:
        res[m].launch = spec.launch
    return {m: res[m] for m in modes}


def workload_graph(spec, system, nodes: int, mode: str, *, gpus_per_node=None,
                   execution: ExecutionSpec | None = None, plan=None):
    """The operator graph a workload builder emits for ``mode`` (``baseline`` or ``fused``), without running it.
    ``plan``: a DLRM sharding plan to use (e.g. the one a run chose), over ``plan_file`` and the planner."""
    from .dlrm import build_dlrm_graph
    from .models import build_decode_graph, build_moe_graph

    system = as_system(system)
    ex = execution or ExecutionSpec()
    g = gpus_per_node or system.gpus_per_node
    spec = scaled_spec(spec, nodes, g, ex)  # the batch, placement and dense kernels the run itself simulates
    if isinstance(spec, DLRMSpec):
        from .planner import load_plan

        if plan is None and ex.plan_file:
            plan = load_plan(ex.plan_file, spec, system, nodes, g, mode)
        return build_dlrm_graph(spec, system, nodes, gpus_per_node=g, mode=mode, sim_mode=ex.sim_mode,
                                knobs=ex.knobs, plan=plan)
    from .llm import build_llm_graph

    builder = {TransformerDecodeSpec: build_decode_graph, MoESpec: build_moe_graph,
               LLMSpec: build_llm_graph}.get(type(spec))
    if builder is None:
        raise SpecError(getattr(spec, "source", "<model>"), "kind", "no graph builder for this workload kind")
    return builder(spec, system, nodes, mode, gpus_per_node=gpus_per_node, execution=ex)


def simulate_graph(graph, system, *, execution: ExecutionSpec | None = None, record: bool = False,
                   label: str = "graph", progress=None) -> dict:
    """Run an operator graph (e.g. imported from Chakra ET) on ``system``: ``{label: IterationResult}``.  A
    graph with a program per rank whose programs are relabellings of rank 0's runs on the exact fast path."""
    from ..graph.executor import Executor
    from ..graph.symmetry import fold
    from .dlrm import IterationResult

    system = as_system(system)
    ex = execution or ExecutionSpec()
    if _has_point_to_point(graph):  # a send pairs two given ranks: every rank runs its own program
        if ex.sim_mode == "classes":
            raise SpecError("<argument>", "--sim-mode", "the trace has send/recv nodes, which need a program per "
                                                        "rank: use --sim-mode full (or auto)")
    elif ex.sim_mode != "full" and graph.full and graph.n_ranks <= 4096:
        graph = fold(graph)
    t0 = time.perf_counter()
    try:
        res = Executor(system, graph, seed=ex.seed, record=record, record_usage=record,
                       forced_algorithms=ex.forced_algorithms(), progress=progress).run()
    except RuntimeError as exc:  # simpy ran out of events before every node finished (import_et checks first)
        if "until" not in str(exc):
            raise
        raise SpecError(graph.name, "", "the graph deadlocks: some nodes never finish (a send without its "
                                        "receive, or a cycle across ranks)") from None
    ir = IterationResult(label, res.time_s, res.compute_time_s, res.exposed_comm_time_s, res.sim_mode,
                         len(res.entities), res.events, time.perf_counter() - t0, phases=list(res.critical.phases))
    if record:
        ir.sim, ir.net = res.sim, res.net
    return {label: ir}


def _has_point_to_point(graph) -> bool:
    from ..graph.ir import RecvNode, SendNode

    return any(isinstance(nd, (SendNode, RecvNode)) for rg in graph.programs.values() for nd in rg.nodes)


def summary_rows(model: str, topology: str, nodes: int, gpus: int, results: dict,
                 execution: ExecutionSpec | None = None) -> list[dict]:
    """One row per mode; DLRM rows also carry the batch, the scaling mode, the plan and the fused knobs used."""
    ex = execution or ExecutionSpec()
    rows = []
    base = results.get("baseline")
    for m in [k for k in ("baseline", "fused") if k in results] + [k for k in results if k not in
                                                                    ("baseline", "fused")]:
        r = results[m]
        row = {"model": model, "topology": topology, "nodes": nodes, "gpus": gpus, "mode": m,
               "iteration_time_s": r.iteration_time_s, "compute_time_s": r.compute_time_s,
               "exposed_comm_time_s": r.exposed_comm_time_s, "sim_mode": r.sim_mode, "rank_classes": r.classes,
               "events": r.events}
        row["scaling"] = ex.scaling
        row["launch"] = getattr(r, "launch", "eager")
        plan = getattr(r, "plan", None)
        kn = getattr(r, "knobs", None)
        if kn is not None:  # DLRM
            row["global_batch"] = r.global_batch
            row["batch_per_gpu"] = r.global_batch // gpus
            row["placement"] = "forced" if plan is not None and plan.candidate == "forced" else \
                "planned" if plan is not None else "table_wise"
            row["dense_fusion"] = getattr(r, "dense_fusion", "")
            row["plan_candidate"] = plan.candidate if plan is not None else ""
            row["plan_estimated_s"] = plan.estimated_critical_s if plan is not None else float("nan")
            row["slice_wgs"], row["tile_order"], row["persistent_grid"] = (kn.slice_wgs, kn.tile_order,
                                                                           kn.persistent_grid)
            row["knobs_tuned"] = bool(getattr(r, "tuned", False))
        if m == "fused":
            row["speedup"] = base.iteration_time_s / r.iteration_time_s if base is not None else float("nan")
        elif m != "baseline":
            row["speedup"] = float("nan")
        iv = getattr(r, "interval", None)
        if iv is not None:
            row["uncertainty"] = r.uncertainty
            row["uncertainty_note"] = interval_note(r.uncertainty, ex) if r.uncertainty != "none" or not \
                getattr(r, "uncertainty_note", "") else f"no interval: {r.uncertainty_note}"
            none = r.uncertainty == "none"  # no interval: empty (NaN) quantiles, never a collapsed "exact" one
            for k in ("p10", "p50", "p90"):
                row[f"iteration_time_{k}_s"] = float("nan") if none else iv[k]
            siv = getattr(r, "speedup_interval", None)
            if siv is not None:
                row["speedup_p10"], row["speedup_p50"], row["speedup_p90"] = (
                    (float("nan"),) * 3 if none else (siv["p10"], siv["p50"], siv["p90"]))
        an = getattr(r, "input_analysis", None)
        if an is not None and (m == "fused" or len(results) == 1):
            _driver_columns(row, an)
        rows.append(row)
    return rows


def _driver_columns(row: dict, analysis) -> None:
    """The three inputs that move a run's speedup (or time) most, one at a time, as flat columns, and the
    whole sensitivity table as JSON text (``sensitivity_json``: a sweep gathers it into ``sensitivity.csv``)."""
    import json

    sens = analysis.sensitivity_rows()
    for i in range(3):
        r = sens[i] if i < len(sens) else None
        row[f"driver{i + 1}"] = r["input"] if r else ""
        row[f"driver{i + 1}_min"] = r["metric_min"] if r else float("nan")
        row[f"driver{i + 1}_max"] = r["metric_max"] if r else float("nan")
    row["sensitivity_json"] = json.dumps([{k: (v if not isinstance(v, float) or v == v else None)
                                           for k, v in r.items()} for r in sens], default=str)


def interval_note(method: str, execution: ExecutionSpec | None = None) -> str:
    """Why a run's row has the interval it has (``uncertainty_note``): what a ``bound`` / ``mc`` interval covers,
    or why there is none."""
    asked = (execution or ExecutionSpec()).uncertainty
    if method in ("bound", "mc"):
        return (f"prediction interval from the kernel cost model's cross-validated residuals ({method}; "
                "--set uncertainty=none to skip); the other inputs (fabric, model settings) are taken as exact")
    if method == "inputs":
        return ("prediction interval: Latin hypercube draws of the input ranges the model and topology files "
                "declare, joint with the kernel residuals where the profile has them (docs/uncertainty.md)")
    if method != "none":
        return f"prediction interval ({method})"
    if asked == "none":
        return "no interval: not asked (uncertainty=none)"
    return ("no interval: it would cover only the kernel cost model's cross-validated residuals, and this "
            "topology has none (no calibration profile with residuals); the figures are a point estimate")


def breakdown_rows(results: dict) -> list[dict]:
    """Per mode and phase of the critical rank: total time, number of intervals, start of the first one.
    All-reduce buckets are summed into one ``allreduce`` phase."""
    rows = []
    for m, r in results.items():
        agg: dict[str, dict] = {}  # phase -> row, in order of first appearance
        for name, t0, t1 in r.phases:
            key = name.split("_bucket")[0] if name.startswith("allreduce") else name
            row = agg.setdefault(key, {"mode": m, "phase": key, "time_s": 0.0, "count": 0, "first_start_s": t0})
            row["time_s"] += t1 - t0
            row["count"] += 1
        rows.extend(agg.values())
    return rows


def run_point(model, topology, nodes: int, gpus_per_node: int | None = None,
              mode: str = "both", sim_mode: str = "auto", settings: dict | None = None, workers: int = 1,
              progress=None) -> list[dict]:
    """One sweep point (picklable entry point for process pools and Dask).  ``model``: a workload spec or a
    path; ``topology``: a :class:`~simfuse.system.System` or a path; ``settings``: ``--set`` pairs; ``workers``:
    processes for the point's own simulations (a sweep whose points run in parallel gives each 1); ``progress``: a
    :class:`~simfuse.progress.Progress` for the point's simulations (in this process only)."""
    from ..fused.knobs import parse_execution

    spec = load_workload(model) if isinstance(model, (str, Path)) else model
    system = topology if isinstance(topology, System) else System.load(topology)
    g = gpus_per_node or system.gpus_per_node
    ex = parse_execution({**(settings or {}), "mode": mode, "sim_mode": sim_mode})
    t0 = time.perf_counter()
    res = simulate_workload(spec, system, nodes, gpus_per_node=g, execution=ex, workers=workers, progress=progress)
    rows = summary_rows(spec.name, system.name, nodes, nodes * g, res, ex)
    for r in rows:
        r["wall_s"] = time.perf_counter() - t0
    return rows


def write_run_outputs(out: Path, results: dict, summary: list[dict], trace: bool) -> list[Path]:
    from ..results.io import atomic_write_df

    out.mkdir(parents=True, exist_ok=True)
    written = []
    atomic_write_df(pd.DataFrame(summary), out / "summary.csv")
    written.append(out / "summary.csv")
    atomic_write_df(pd.DataFrame(breakdown_rows(results)), out / "breakdown.csv")
    written.append(out / "breakdown.csv")
    plans = {m: r.plan for m, r in results.items() if getattr(r, "plan", None) is not None}
    if plans:
        from .planner import write_plans

        written.append(write_plans(out, plans))
    analysis = next((r.input_analysis for r in results.values() if getattr(r, "input_analysis", None)), None)
    if analysis is not None:
        written += write_input_analysis(out, analysis)
    if trace:
        from ..results.perfetto import write_chrome_trace

        runs = [(m, r.sim, r.net) for m, r in results.items() if r.sim is not None]
        write_chrome_trace(out / "trace.json", runs)
        written.append(out / "trace.json")
    return written


def write_input_analysis(out: Path, analysis, title: str | None = None) -> list[Path]:
    """``uncertainty_draws.csv`` (every joint draw: input values, iteration times, speedup),
    ``sensitivity.csv`` (one row per input, ranked) and ``tornado.png`` of an ``uncertainty=inputs`` run."""
    from ..results.io import atomic_write_df
    from ..results.tornado import plot_tornado

    sens = pd.DataFrame(analysis.sensitivity_rows())
    atomic_write_df(pd.DataFrame(analysis.draw_rows()), out / "uncertainty_draws.csv")
    atomic_write_df(sens, out / "sensitivity.csv")
    written = [out / "uncertainty_draws.csv", out / "sensitivity.csv"]
    if len(sens) and (sens["method"] != "rank").any():  # one-at-a-time runs, or enough draws for conditional ends
        written.append(plot_tornado(sens, out / "tornado.png", title=title))
    return written
