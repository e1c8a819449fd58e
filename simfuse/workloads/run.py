"""Run a workload at one node count in one or both modes; tables for ``simfuse run`` and ``simfuse sweep``."""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd

from ..costs import cost_model_for, resolve_topology
from ..errors import SpecError
from ..spec import DLRMSpec, MoESpec, TopologySpec, TransformerDecodeSpec, load_topology, load_workload
from .dlrm import simulate_dlrm
from .models import simulate_decode, simulate_moe

MODES = ("both", "fused", "baseline")


def simulate_workload(spec, topology: TopologySpec, nodes: int, *, mode: str = "both", gpus_per_node=None,
                      sim_mode: str = "auto", record: bool = False, seed: int = 0) -> dict:
    """``{"baseline": IterationResult, "fused": IterationResult}`` (the modes asked for)."""
    if mode not in MODES:
        raise SpecError("<argument>", "--mode", f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
    if nodes < 1:
        raise SpecError("<argument>", "--nodes", f"must be >= 1, got {nodes}")
    modes = ("baseline", "fused") if mode == "both" else (mode,)
    cost = cost_model_for(topology)
    if isinstance(spec, DLRMSpec):
        return {m: simulate_dlrm(spec, topology, nodes, gpus_per_node=gpus_per_node, mode=m, sim_mode=sim_mode,
                                 cost=cost, seed=seed, record=record, record_usage=record) for m in modes}
    if isinstance(spec, TransformerDecodeSpec):
        res = simulate_decode(spec, topology, nodes, gpus_per_node=gpus_per_node, cost=cost, record=record)
    elif isinstance(spec, MoESpec):
        res = simulate_moe(spec, topology, nodes, gpus_per_node=gpus_per_node, cost=cost, record=record)
    else:  # pragma: no cover - load_workload only returns the kinds above
        raise SpecError(getattr(spec, "source", "<model>"), "kind", "unsupported workload")
    return {m: res[m] for m in modes}


def summary_rows(model: str, topology: str, nodes: int, gpus: int, results: dict) -> list[dict]:
    rows = []
    base = results.get("baseline")
    for m in ("baseline", "fused"):
        if m not in results:
            continue
        r = results[m]
        row = {"model": model, "topology": topology, "nodes": nodes, "gpus": gpus, "mode": m,
               "iteration_time_s": r.iteration_time_s, "compute_time_s": r.compute_time_s,
               "exposed_comm_time_s": r.exposed_comm_time_s, "sim_mode": r.sim_mode, "rank_classes": r.classes,
               "events": r.events}
        if m == "fused":
            row["speedup"] = base.iteration_time_s / r.iteration_time_s if base is not None else float("nan")
        rows.append(row)
    return rows


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


def run_point(model_path: str, topology_path: str, nodes: int, gpus_per_node: int | None = None,
              mode: str = "both", sim_mode: str = "auto") -> list[dict]:
    """One sweep point (picklable entry point for process pools and Dask)."""
    spec = load_workload(model_path)
    topo = resolve_topology(load_topology(topology_path))
    g = gpus_per_node or topo.scale_up.gpus_per_node
    t0 = time.perf_counter()
    res = simulate_workload(spec, topo, nodes, mode=mode, gpus_per_node=g, sim_mode=sim_mode)
    rows = summary_rows(spec.name, topo.name, nodes, nodes * g, res)
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
    if trace:
        from ..results.perfetto import write_chrome_trace

        runs = [(m, r.sim, r.net) for m, r in results.items() if r.sim is not None]
        write_chrome_trace(out / "trace.json", runs)
        written.append(out / "trace.json")
    return written
