"""Run a workload at one node count in one or both modes; tables for ``simfuse run`` and ``simfuse sweep``."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pandas as pd

from ..errors import SpecError
from ..fused.knobs import ExecutionSpec
from ..spec import load_workload
from ..system import System, as_system
from .base import workload_for
from .dlrm_candidates import TUNE_GRID, _tuning_matters  # noqa: F401  (re-exported)
from .op import bound_envelope
from .result import IterationResult

MODES = ("both", "fused", "baseline")


def scaled_spec(spec, nodes: int, gpus_per_node: int, execution: ExecutionSpec):
    """``spec`` as a run at ``nodes`` simulates it (its workload's :meth:`~simfuse.workloads.base.Workload.scaled`:
    DLRM's scaling modes and settings; every kind refuses the settings of another)."""
    return workload_for(spec).scaled(nodes, gpus_per_node, execution).spec


def check_point(spec, system, nodes: int, gpus_per_node: int, execution: ExecutionSpec, modes=("baseline",)):
    """The input errors a run of ``spec`` on ``nodes`` nodes would raise, found without simulating (a sweep checks
    every node count before it starts): the settings, then the workload's own check
    (:meth:`~simfuse.workloads.base.Workload.check`)."""
    system = as_system(system)
    workload_for(spec).scaled(nodes, gpus_per_node, execution).check(system, nodes, gpus_per_node, execution, modes)


def simulate_workload(spec, system, nodes: int, *, mode: str | None = None, gpus_per_node=None,
                      sim_mode: str | None = None, record: bool = False, seed: int | None = None,
                      execution: ExecutionSpec | None = None, workers: int = 1, progress=None,
                      expected_s: float | None = None) -> dict:
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
    any number.  ``progress``: a :class:`~simfuse.progress.Progress` told each simulation (default: nobody).
    ``expected_s``: the cost guard's estimate of the run's wall time, where the caller has it (a long run sends
    its first simulations to the workers at once: :data:`~simfuse.workloads.parallel.MIN_PARALLEL_RUN_S`)."""
    from ..progress import Progress
    from .parallel import Pool

    progress = progress or Progress()
    system = as_system(system)
    ex = execution or ExecutionSpec()
    with Pool(workers, expected_s) as pool:
        res = _simulate_once(spec, system, nodes, mode=mode, gpus_per_node=gpus_per_node, sim_mode=sim_mode,
                             record=record, seed=seed, execution=ex, pool=pool, progress=progress)
        if not workload_for(spec).intervals:
            return res
        method, why = _interval_method(ex, spec, system)
        wl = workload_for(spec)
        chosen = {m: wl.chosen(r) for m, r in res.items()}
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
    ex = dataclasses.replace(ex, mode=mode, sim_mode=sim_mode, seed=seed)  # what this simulation runs
    g = gpus_per_node or system.gpus_per_node
    wl = workload_for(spec).scaled(nodes, g, ex)
    modes = wl.modes(ex)
    launch = wl.launch
    system = system.with_launch(launch)  # CUDA graph: every kernel at the device's in-graph launch latency
    system = system.with_rate_resolution(ex.rate_resolution_ns * 1e-9)
    res = wl.simulate(system, nodes, g, modes, ex, record=record, chosen=chosen, pool=pool, progress=progress)
    for m in modes:
        res[m].launch = launch
    return {m: res[m] for m in modes}


def workload_graph(spec, system, nodes: int, mode: str, *, gpus_per_node=None,
                   execution: ExecutionSpec | None = None, plan=None):
    """The operator graph a workload builder emits for ``mode`` (``baseline`` or ``fused``), without running it.
    ``plan``: a DLRM sharding plan to use (e.g. the one a run chose), over ``plan_file`` and the planner."""
    system = as_system(system)
    ex = execution or ExecutionSpec()
    g = gpus_per_node or system.gpus_per_node
    wl = workload_for(spec).scaled(nodes, g, ex)  # the batch, placement and dense kernels the run simulates
    return wl.build_graph(system, nodes, mode, gpus_per_node=g, execution=ex, plan=plan)


def simulate_graph(graph, system, *, execution: ExecutionSpec | None = None, record: bool = False,
                   label: str = "graph", progress=None) -> dict:
    """Run an operator graph (e.g. imported from Chakra ET) on ``system``: ``{label: IterationResult}``.  A
    graph with a program per rank whose programs are relabellings of rank 0's runs on the exact fast path."""
    from ..graph.executor import Executor
    from ..graph.symmetry import fold

    system = as_system(system)
    ex = execution or ExecutionSpec()
    system = system.with_rate_resolution(ex.rate_resolution_ns * 1e-9)
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
                         len(res.entities), res.events, time.perf_counter() - t0, phases=list(res.critical.phases),
                         repeat=res.repeat)
    if record:
        ir.sim, ir.net = res.sim, res.net
    return {label: ir}


def _has_point_to_point(graph) -> bool:
    from ..graph.ir import RecvNode, SendNode

    return any(isinstance(nd, (SendNode, RecvNode)) for rg in graph.programs.values() for nd in rg.nodes)


def summary_rows(model: str, topology: str, nodes: int, gpus: int, results: dict,
                 execution: ExecutionSpec | None = None, workload=None) -> list[dict]:
    """One row per mode: the shared columns, then the workload's own (:meth:`~simfuse.workloads.base.Workload.
    row_columns`: DLRM's batch, plan and fused knobs), the speedup and the interval.  ``workload``: the run's
    :class:`~simfuse.workloads.base.Workload` (None: a graph run, e.g. a Chakra trace, with no columns of its
    own)."""
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
        row["scaling"] = workload.scaling(ex) if workload is not None else "model"
        row["launch"] = r.launch
        if workload is not None:
            row.update(workload.row_columns(r, gpus))
        if m == "fused":
            row["speedup"] = base.iteration_time_s / r.iteration_time_s if base is not None else float("nan")
        elif m != "baseline":
            row["speedup"] = float("nan")
        iv = r.interval
        if iv is not None:
            row["uncertainty"] = r.uncertainty
            row["uncertainty_note"] = interval_note(r.uncertainty, ex) if r.uncertainty != "none" or not \
                r.uncertainty_note else f"no interval: {r.uncertainty_note}"
            none = r.uncertainty == "none"  # no interval: empty (NaN) quantiles, never a collapsed "exact" one
            for k in ("p10", "p50", "p90"):
                row[f"iteration_time_{k}_s"] = float("nan") if none else iv[k]
            siv = r.speedup_interval
            if siv is not None:
                row["speedup_p10"], row["speedup_p50"], row["speedup_p90"] = (
                    (float("nan"),) * 3 if none else (siv["p10"], siv["p50"], siv["p90"]))
        an = r.input_analysis
        if an is not None and (m == "fused" or len(results) == 1):
            _driver_columns(row, an)
        rows.append(row)
    return rows


def _driver_columns(row: dict, analysis) -> None:
    """The three inputs that move a run's speedup (or time) most (:meth:`~simfuse.uncertainty.InputAnalysis.
    sensitivity_rows`: one at a time, or the draws' conditional ends), as flat columns, and the
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
    """Per mode and phase of the critical rank: total time, number of intervals, start of the first one, over one
    step of the iteration; ``repeat``: the identical steps (transformer layers) the iteration is made of, so a
    phase takes ``repeat x time_s`` of it.  All-reduce buckets are summed into one ``allreduce`` phase."""
    rows = []
    for m, r in results.items():
        agg: dict[str, dict] = {}  # phase -> row, in order of first appearance
        rep = r.repeat
        for name, t0, t1 in r.phases:
            key = name.split("_bucket")[0] if name.startswith("allreduce") else name
            row = agg.setdefault(key, {"mode": m, "phase": key, "time_s": 0.0, "count": 0, "first_start_s": t0,
                                       "repeat": rep})
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
    _res, rows = run_workload(spec, system, nodes, gpus_per_node=g, execution=ex, workers=workers,
                              progress=progress)
    for r in rows:
        r["wall_s"] = time.perf_counter() - t0  # the sweep's own timing column (not in results.csv)
    return rows


def run_workload(spec, system, nodes: int, *, gpus_per_node: int | None = None,
                 execution: ExecutionSpec | None = None, workers: int = 1, record: bool = False,
                 progress=None, expected_s: float | None = None) -> tuple[dict, list[dict]]:
    """The one run pipeline behind ``simfuse run``, :func:`simfuse.api.run` and every sweep point
    (:func:`run_point`): ``(results, rows)``, the results of :func:`simulate_workload` and their
    :func:`summary_rows`.  The callers check their arguments first (:func:`simfuse.arguments.check_run`, a
    sweep every point before the first); ``expected_s``: the guard's estimate of the run (:func:`simulate_workload`)."""
    system = as_system(system)
    ex = execution or ExecutionSpec()
    g = gpus_per_node or system.gpus_per_node
    res = simulate_workload(spec, system, nodes, gpus_per_node=g, execution=ex, record=record, workers=workers,
                            progress=progress, expected_s=expected_s)
    return res, summary_rows(spec.name, system.name, nodes, nodes * g, res, ex, workload_for(spec))


def write_run_outputs(out: Path, results: dict, summary: list[dict], trace: bool, workload=None) -> list[Path]:
    """``summary.csv``, ``breakdown.csv``, the workload's plans (``plan.csv``: :meth:`~simfuse.workloads.base.
    Workload.plan_of`), the input analysis of an ``uncertainty=inputs`` run and the Perfetto trace."""
    from ..results.io import atomic_write_df

    out.mkdir(parents=True, exist_ok=True)
    written = []
    atomic_write_df(pd.DataFrame(summary), out / "summary.csv")
    written.append(out / "summary.csv")
    atomic_write_df(pd.DataFrame(breakdown_rows(results)), out / "breakdown.csv")
    written.append(out / "breakdown.csv")
    plans = {m: p for m, r in results.items() if workload is not None and (p := workload.plan_of(r)) is not None}
    if plans:
        from .plan_file import write_plans

        written.append(write_plans(out, plans))
    analysis = next((r.input_analysis for r in results.values() if r.input_analysis is not None), None)
    if analysis is not None:
        written += write_input_analysis(out, analysis)
    if trace:
        from ..results.perfetto import write_chrome_trace

        # a trace shows one step of an iteration of identical steps: the process name says so
        runs = [(m if r.repeat <= 1 else f"{m} (one of {r.repeat} identical steps)", r.sim, r.net)
                for m, r in results.items() if r.sim is not None]
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
