"""Leave-source-out validation of the scale-out terms no data sheet gives, on the public network corpus.

The corpus (``data/network_corpus/``, docs/network_corpus.md) holds multi-node nccl-tests (and RCCL) runs from
independent public sources.  Four scale-out terms are calibrated by simulation:

* ``scale_out.efficiency``: the achievable fraction of the NIC line rate (IB / RoCE / EFA efficiency);
* ``scale_out.latency_s``: the per-step latency of an inter-node hop (NCCL's network latency, proxy included);
* ``collectives.net_overhead_s``: the proxy's cost to post one network message, charged per off-node peer of an
  all-to-all (NCCL's ``getNetOverhead``): the all-to-all-specific term, growing with the peer count; it is also
  the floor of a multi-node ring's NVLink hop latency (NCCL's model), so every run's time moves with it;
* ``scale_out.full_node_efficiency``: the efficiency in place of ``scale_out.efficiency`` for runs whose GPUs drive
  every NIC of their nodes with NCCL's default connections on InfiniBand / RoCE (:func:`takes_full_node`, decided
  from the run's hardware and settings); its range also spans its fit on each training source alone.

None of them changes a single-node collective.  Each run is simulated on the base topology (``--topology``) with
the run's own hardware (:func:`simfuse.calibrate.corpus.topology_for_run`: GPUs and NICs per node, NIC rate,
NVLink rate, SHARP) and the algorithm the run forced, if any (else the tuner's choice).  The simulated time of
every (run, size) is computed once on a grid of the four terms; a fit picks the grid point with the smallest
training loss: the mean over training sources of the mean over their runs of the mean |log(simulated /
measured)| at sizes >= 1 MiB (each independent source weighs the same, however many runs it published).  Only
runs whose NIC line rate is known train (:func:`trains`): elsewhere the simulation runs on the base topology's
NICs and a fit would turn the unknown hardware into efficiency or per-message cost; every run is tested.  A term
the training points do not move keeps the base topology's value (the full-node efficiency: the fitted efficiency).  Runs on GCP's GPUDirect-TCPXO fabric have their
own efficiency and latency (:func:`fabric_class`, :func:`fit_classes`), fitted only on TCPXO runs of other
sources.  The split is leave-source-out: each source in turn is held out whole, the terms are fitted on the others
and the held-out source's runs are predicted.  The spread of the refits gives the terms' ranges
(``fitted_ranges.csv``: low / high = the smallest / largest value any leave-one-source-out refit chose, one grid
step further each way for the grid's resolution; nominal = the fit on every source).

Every point is reported in one evaluation set (:func:`evaluation_set`): the target set, H100 / H200 runs whose NIC
rate is known; one set per other GPU; and ``hardware unknown`` for runs whose NIC rate is not known
(``summary_by_evaluation_set.csv``; ``summary.json`` holds the target's verdict).

Runs not simulated: ``quality = anomalous`` (the source reports a broken setup), single-node runs, GPUs without a
known NVLink rate (AMD).  They stay in the corpus and are listed in ``skipped.csv``.

Usage: ``python experiments/validation/network_validation.py [--out DIR] [--jobs N] [--smoke]``
(``--smoke``: three sources, a 2 x 2 x 2 x 3 grid, seconds; used by tests/experiments/test_network_validation.py).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import platform
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from simfuse.calibrate.corpus import (  # noqa: E402
    CorpusRun,
    default_connections,
    load_corpus,
    simulation_problem,
    topology_for_run,
)
from simfuse.collectives import run_collective  # noqa: E402
from simfuse.spec import load_topology  # noqa: E402

MiB = 2**20
#: grid of the three terms (full run); bounds from physics and sources: efficiency <= 1 (line rate); NCCL's own
#: network latency constants are 2.7-14 us per step (hwLat NET, src/graph/tuning.cc); the proxy's cost per
#: network message at most NCCL's getNetOverhead on AMD hosts, 2 us (1 us on Intel; NVIDIA/nccl
#: 5067397c2676d5aed50042fc39e5c8ee96eb0027:src/graph/tuning.cc).  The base topologies' values (0.92, 3 us,
#: 1 us) are grid points: a term the training points do not move keeps its value (:func:`fit`).
#: The full-node efficiency (``scale_out.full_node_efficiency``: runs whose GPUs drive every NIC of their nodes with
#: NCCL's default connections on InfiniBand / RoCE, :func:`takes_full_node`) has a finer grid where the corpus puts
#: it (0.80-0.92 of line rate) and every value of the efficiency's grid: a fold whose training runs do not move it
#: gives it the fitted efficiency (:data:`FOLLOWS`), the simulator's behaviour without it.
FULL_NODE = "scale_out.full_node_efficiency"
GRID = {"scale_out.efficiency": (0.60, 0.70, 0.80, 0.88, 0.92, 0.96, 1.0),
        "scale_out.latency_s": (1e-6, 3e-6, 6e-6, 12e-6),
        "collectives.net_overhead_s": (0.0, 0.5e-6, 1e-6, 2e-6),
        FULL_NODE: (0.60, 0.70, 0.76, 0.80, 0.82, 0.84, 0.86, 0.88, 0.90, 0.92, 0.96, 1.0)}
SMOKE_GRID = {"scale_out.efficiency": (0.92, 1.0), "scale_out.latency_s": (3e-6, 6e-6),
              "collectives.net_overhead_s": (0.5e-6, 1e-6), FULL_NODE: (0.88, 0.92, 1.0)}
#: a term the training points do not move takes the fitted value of the term it refines
FOLLOWS = {FULL_NODE: "scale_out.efficiency"}
SMOKE_SOURCES = ("gcp_a3mega_fork", "dstack_a3mega", "nccl_tests_152")
MAX_SIZES_PER_RUN = 5
MIN_FIT_BYTES = MiB
LARGE_BYTES = 64 * MiB
#: the GPUs of the target set (issue 35): H100 and H200 only; H20, H800, GH200, B200, A100 ... are reported in
#: their own rows of the evaluation table, never dropped
TARGET_GPUS = ("H100", "H200")
TARGET_SET = "H100/H200"
UNKNOWN_HARDWARE = "hardware unknown"
#: GPU names as the corpus writes them (``H100 80GB HBM3``, ``A100-SXM4-80GB``, ``V100 (DGX-2 class, ...)``) ->
#: the GPU; ``H20`` must not match ``H200``, nor ``H200`` ``GH200``
_GPU_RE = re.compile(r"(?<![A-Z0-9])(GH200|GB200|H200|H100|H800|H20|B200|B100|A100|A800|V100|MI\d+X?)(?![0-9])")


def gpu_name(gpu: str) -> str:
    """The GPU model of a corpus run's ``gpu`` field (``H100 80GB HBM3`` -> ``H100``); the field itself where no
    known model is named."""
    m = _GPU_RE.search(gpu.upper())
    return m.group(1) if m else gpu


def evaluation_set(run: CorpusRun) -> str:
    """The row of the evaluation table a run's points go to: ``hardware unknown`` where its NIC line rate is not
    known (:func:`trains`: the simulation runs on the base file's NICs, so its error says nothing about the
    network model), else :data:`TARGET_SET` for H100 / H200 runs, else the GPU (``H20``, ``B200``, ``A100``, ...)."""
    if not trains(run):
        return UNKNOWN_HARDWARE
    g = gpu_name(run.gpu)
    return TARGET_SET if g in TARGET_GPUS else g


def _sizes(run: CorpusRun, smoke: bool) -> list[tuple[int, float]]:
    """(size, measured time) pairs simulated for a run: its sizes >= 1 MiB spread evenly in log, the largest
    always kept."""
    rows = [r for r in run.rows if r.size_bytes >= MIN_FIT_BYTES]
    k = 2 if smoke else MAX_SIZES_PER_RUN
    if len(rows) > k:
        idx = np.unique(np.round(np.linspace(0, len(rows) - 1, k)).astype(int))
        rows = [rows[i] for i in idx]
    return [(r.size_bytes, r.time_s) for r in rows]


#: fabrics whose network terms are fitted apart (each its own class, trained only on that fabric's runs from other
#: sources): GCP's GPUDirect-TCPXO moves GPU memory over TCP on Ethernet (A3 Mega's 8 x 200 Gb/s NICs, the
#: NCCL FasTrak plugin), a different transport from the InfiniBand / RoCE / EFA RDMA of every other run, with a
#: latency floor far above NCCL's network constants (a 64 KiB all-reduce of the A3 Mega log takes ~160 us).  Its
#: latency grid reaches that floor.
TCPXO = "gpudirect_tcpxo"
RDMA = "rdma"
TCPXO_LATENCY_S = (25e-6, 50e-6, 100e-6, 200e-6)


def fabric_class(run: CorpusRun) -> str:
    """The class of fabric whose terms predict a run: :data:`TCPXO` where ``runs.csv`` names GPUDirect-TCPXO, else
    :data:`RDMA` (InfiniBand, RoCE, EFA, or not stated)."""
    return TCPXO if "TCPXO" in run.fabric.upper() else RDMA


def grid_for(run: CorpusRun, grid: dict, smoke: bool) -> dict:
    """The grid a run is simulated on: :data:`TCPXO` runs add :data:`TCPXO_LATENCY_S` to the latency (full run)."""
    if smoke or fabric_class(run) != TCPXO:
        return grid
    key = "scale_out.latency_s"
    return {**grid, key: tuple(sorted(set(grid[key]) | set(TCPXO_LATENCY_S)))}


def takes_full_node(run: CorpusRun, topo) -> bool:
    """Whether ``scale_out.full_node_efficiency`` applies to a run (on ``topo``, its topology): NCCL's default
    connections on an InfiniBand / RoCE fabric (:func:`~simfuse.calibrate.corpus.default_connections`: no raised
    QPs per connection or channel count in its settings, not EFA / Slingshot / TCPXO) and GPUs that drive every
    NIC of their nodes across nodes (:meth:`~simfuse.spec.topology.ScaleOutSpec.applies_full_node`).  From the
    run's hardware and settings only, never from its numbers or its source."""
    return default_connections(run) and topo.scale_out.nics_per_node <= run.gpus_per_node and run.nodes > 1


def static_terms(run: CorpusRun, topo, grid: dict) -> set[str]:
    """The grid's terms that do not move a run's simulated time: the full-node efficiency where it does not apply
    (:func:`takes_full_node`), else the efficiency it replaces.  (The per-message overhead moves every run: an
    all-to-all's posts, and a multi-node ring's NVLink hops, whose NCCL latency is at least the network post
    overhead, :meth:`~simfuse.collectives.protocols.ProtocolCost.hop_latency_s`.)"""
    out = set()
    if FULL_NODE in grid:
        out.add("scale_out.efficiency" if takes_full_node(run, topo) else FULL_NODE)
    return out & set(grid)


def _job(args):
    """Simulated times of one run at every grid point of the terms that move it (a worker process); a term that
    does not (:func:`static_terms`) is simulated at its first value only, and not set where it is the full-node
    efficiency."""
    run, base_path, sizes, grid = args
    base = load_topology(base_path)
    topo, _ = topology_for_run(run, base)
    keys = list(grid)
    static = static_terms(run, topo, grid)
    out = []
    for values in itertools.product(*(grid[k][:1] if k in static else grid[k] for k in keys)):
        over = {k: v for k, v in zip(keys, values, strict=True) if not (k == FULL_NODE and k in static)}
        t = topo.with_overrides(over)
        for size, _meas in sizes:
            res = run_collective(t, run.nodes, run.collective, float(size), algorithm=run.algorithm,
                                 protocol=run.protocol if run.algorithm else None, gpus_per_node=run.gpus_per_node)
            out.append((run.run_id, size, *values, float(res.time_s), str(getattr(res, "algorithm", ""))))
    return out, static


def simulate_grid(runs, base_path: str, grid: dict, smoke: bool, jobs: int) -> pd.DataFrame:
    """Simulated time of every (run, size) at every point of its grid (:func:`grid_for`); a term that does not
    move a run (:func:`static_terms`) holds its first value's time at every value."""
    grids = [grid_for(r, grid, smoke) for r in runs]
    tasks = [(r, base_path, _sizes(r, smoke), g) for r, g in zip(runs, grids, strict=True)]
    if jobs > 1:
        with ProcessPoolExecutor(max_workers=jobs) as ex:
            results = list(ex.map(_job, tasks))
    else:
        results = [_job(t) for t in tasks]
    cols = ["run_id", "size_bytes", *grid, "simulated_s", "algorithm"]
    parts = []
    for g, (rows, static) in zip(grids, results, strict=True):
        df = pd.DataFrame(rows, columns=cols)
        for k in static:
            df = pd.concat([df.assign(**{k: v}) for v in g[k]], ignore_index=True)
        parts.append(df)
    return pd.concat(parts, ignore_index=True)


#: algorithms whose points train the network terms (``--fit-on``): the wire efficiency, the per-step latency
#: and the proxy's per-message cost are properties of the network, best seen where the algorithm's data movement
#: is plain -- a ring's (and the all-to-all's direct sends); algorithms whose own simfuse model is less certain
#: (trees, NVLS, CollNet) would absorb their modelling error into the network terms.  Every algorithm is tested.
FIT_ON = {"plain": ("ring", "direct"), "all": None}


def _loss(sim: pd.DataFrame, meas: dict, run_ids, source_of: dict, algorithms=None) -> pd.Series:
    """Training loss at every grid point: the mean over training sources of the mean over their runs of the mean
    |log(sim / measured)| of the run's sizes (each independent source weighs the same, however many runs it
    published); ``algorithms``: only points simulated with these."""
    s = sim[sim["run_id"].isin(run_ids)].copy()
    if algorithms is not None and s["algorithm"].isin(algorithms).any():  # else: every point (said in the fold)
        s = s[s["algorithm"].isin(algorithms)]
    s["err"] = np.abs(np.log(s["simulated_s"].to_numpy() / np.array([meas[(r, z)] for r, z in
                                                                     zip(s["run_id"], s["size_bytes"], strict=True)])))
    keys = [c for c in sim.columns if "." in c]
    per_run = s.groupby([*keys, "run_id"])["err"].mean().reset_index()
    per_run["source"] = per_run["run_id"].map(source_of)
    per_source = per_run.groupby([*keys, "source"])["err"].mean().reset_index()
    return per_source.groupby(keys)["err"].mean()


def fit(sim: pd.DataFrame, meas: dict, run_ids, source_of: dict, algorithms=None,
        nominal: dict[str, float] | None = None) -> dict[str, float]:
    """The grid point of least training loss.  A term the training points do not move (the loss is the same at
    each of its values, the others at their best: no training all-to-all for the per-message cost) keeps its
    ``nominal`` value (the base topology's, a grid point) instead of the grid's first; a term of :data:`FOLLOWS`
    the fitted value of the term it refines."""
    loss = _loss(sim, meas, run_ids, source_of, algorithms)
    keys = list(loss.index.names)
    best = loss.idxmin()
    out = dict(zip(keys, (float(v) for v in (best if isinstance(best, tuple) else (best,))), strict=True))
    nominal = dict(nominal or {})
    for k, ref in FOLLOWS.items():  # without its own training points, a refinement is the term it refines
        if k in out and ref in out:
            nominal[k] = out[ref]
    for k, v in nominal.items():
        if k not in out:
            continue
        others = [c for c in keys if c != k]
        sl = loss
        for c in others:
            sl = sl[np.isclose(sl.index.get_level_values(c), out[c])]
        vals = sl.to_numpy()
        if len(vals) > 1 and float(vals.max() - vals.min()) <= 1e-12 and np.isclose(
                sl.index.get_level_values(k), v).any():
            out[k] = float(v)
    return out


def _nominal(base, grid: dict) -> dict[str, float]:
    """The base topology's values of the fitted terms (used where the training points do not move a term)."""
    vals = {"scale_out.efficiency": base.scale_out.efficiency, "scale_out.latency_s": base.scale_out.latency_s,
            "collectives.net_overhead_s": base.collectives.net_overhead_s,
            FULL_NODE: base.scale_out.full_node_efficiency or base.scale_out.efficiency}
    return {k: v for k, v in vals.items() if k in grid}


def trains(run: CorpusRun) -> bool:
    """Whether a run's points may train the network terms: its NIC line rate is known (stated by the source,
    or pinned by its own numbers, as ``runs.csv`` records).  Where it is not, the simulation runs on the base
    topology's NICs, and a fit would turn the unknown hardware into efficiency or per-message cost; such runs
    are predicted (tested), never trained on."""
    return run.nic_gbps is not None


def fit_classes(sim: pd.DataFrame, meas: dict, train_ids, class_of: dict, source_of: dict, algorithms,
                nominal: dict) -> tuple[dict[str, dict[str, float]], dict[str, list[str]]]:
    """The terms of each fabric class, fitted on ``train_ids``: :data:`RDMA` on its own training runs; :data:`TCPXO`
    on the training runs of that fabric whose every simulated point ran a plain algorithm (``algorithms``; a run
    NCCL prices with a tree or NVLS would turn its modelling error into TCPXO terms), a term they do not move
    keeping the RDMA fit's value; a class with no training run takes the RDMA terms (RDMA: ``nominal``).  Returns
    ``({class: terms}, {class: the sources it was trained on})``."""
    rdma = [r for r in train_ids if class_of[r] == RDMA]
    out = {RDMA: fit(sim, meas, rdma, source_of, algorithms, nominal) if rdma else dict(nominal)}
    plain = [r for r in train_ids if class_of[r] == TCPXO and (
        algorithms is None or sim.loc[sim["run_id"] == r, "algorithm"].isin(algorithms).all())]
    if plain:
        out[TCPXO] = fit(sim, meas, plain, source_of, None, out[RDMA])
    else:
        out[TCPXO] = dict(out[RDMA])
    return out, {RDMA: sorted({source_of[r] for r in rdma}), TCPXO: sorted({source_of[r] for r in plain})}


def predict(sim: pd.DataFrame, params: dict[str, float]) -> pd.DataFrame:
    sel = np.ones(len(sim), dtype=bool)
    for k, v in params.items():
        sel &= np.isclose(sim[k].to_numpy(), v)
    return sim[sel]


def _stats(e: np.ndarray) -> dict:
    e = np.abs(e)
    return {"points": int(e.size), "median_abs_pct": float(np.median(e)) if e.size else math.nan,
            "max_abs_pct": float(np.max(e)) if e.size else math.nan}


def _held_out_rows(sim, meas, held_runs, params: dict, held: str, full_node: dict) -> list[dict]:
    """The points of a held-out source's runs, each predicted with its fabric class's terms (``full_node``: run
    id -> whether the full-node efficiency applies to it, :func:`takes_full_node`)."""
    rows = []
    for run in held_runs:
        terms = params[fabric_class(run)]
        pred = predict(sim[sim["run_id"] == run.run_id], terms)
        for _, p in pred.iterrows():
            m = meas[(run.run_id, p["size_bytes"])]
            rows.append({"held_out_source": held, "run_id": run.run_id, "gpu": run.gpu, "collective": run.collective,
                         "nodes": run.nodes, "gpus_per_node": run.gpus_per_node, "forced_algorithm": run.nccl_algo,
                         "trains": trains(run), "full_node": full_node[run.run_id],
                         "evaluation_set": evaluation_set(run),
                         "fabric_class": fabric_class(run), "simulated_algorithm": p["algorithm"],
                         "size_bytes": int(p["size_bytes"]), "measured_s": m, "simulated_s": p["simulated_s"],
                         "pct_error": 100.0 * (p["simulated_s"] / m - 1.0), **terms})
    return rows


def _full_node_sources(sim, train, full_node: dict, class_of: dict, source_of: dict, algorithms) -> list[str]:
    """The sources whose training points move the full-node efficiency: RDMA training runs it applies to, with
    points of the trained algorithms."""
    plain = set(sim["run_id"] if algorithms is None else sim.loc[sim["algorithm"].isin(algorithms), "run_id"])
    return sorted({source_of[r] for r in train if full_node[r] and class_of[r] == RDMA and r in plain})


def full_node_per_source(sim, meas, train, full_node: dict, class_of: dict, source_of: dict, algorithms,
                         fitted: dict) -> dict[str, float]:
    """The full-node efficiency fitted on each training source alone (its runs the term applies to), the other
    terms held at ``fitted``: how far the sources that train it disagree (:func:`ranges_table`)."""
    out = {}
    for src in _full_node_sources(sim, train, full_node, class_of, source_of, algorithms):
        ids = [r for r in train if source_of[r] == src and full_node[r] and class_of[r] == RDMA]
        loss = _loss(sim, meas, ids, source_of, algorithms)
        for k, v in fitted.items():
            if k != FULL_NODE and k in loss.index.names:
                loss = loss[np.isclose(loss.index.get_level_values(k), v)]
        out[src] = float(loss.index.get_level_values(FULL_NODE)[int(np.argmin(loss.to_numpy()))])
    return out


def ranges_table(fold: pd.DataFrame, all_fit: dict, grid: dict, smoke: bool,
                 per_source: dict[str, float] | None = None) -> pd.DataFrame:
    """``fitted_ranges.csv``: per term, low / high = the smallest / largest leave-one-source-out refit widened by one
    grid step each way (the grid's resolution), nominal = the fit on every source; each class's terms from the
    folds that trained them (none: no row; the full-node efficiency from the folds whose training runs it applies
    to, its range also spanning ``per_source``, its fit on each source alone, where the sources disagree more
    than the refits show)."""
    src = ("experiments/validation/network_validation.py: nominal = fit on every corpus source; low/high = the range "
           "of the leave-one-source-out refits widened by one grid step each way (the grid's resolution)")
    rows = []
    trained = {c: fold[fold[f"{p}_trained_on"].fillna("").astype(str).str.len() > 0] for c, p in
               ((RDMA, "rdma"), (TCPXO, "tcpxo"))}
    tgrid = {k: v for k, v in grid.items() if k not in ("collectives.net_overhead_s", FULL_NODE)}
    tgrid["scale_out.latency_s"] = tuple(sorted(set(grid["scale_out.latency_s"]) | set(
        () if smoke else TCPXO_LATENCY_S)))
    for prefix, folds, g_all, nominal in (("", trained[RDMA], grid, all_fit[RDMA]),
                                          ("tcpxo.", trained[TCPXO], tgrid, all_fit[TCPXO])):
        if not len(folds):
            continue
        for k, values in g_all.items():
            fk = folds if k != FULL_NODE else folds[folds["full_node_trained_on"].fillna("").astype(str).str.len() > 0]
            if not len(fk):
                continue
            g = list(values)
            vals = [*fk[prefix + k].astype(float), *((per_source or {}).values() if k == FULL_NODE else ())]
            lo_i, hi_i = g.index(min(vals)), g.index(max(vals))
            name = prefix + (k.replace("_s", "_us") if k.endswith("_s") else k)
            scale = 1e6 if name.endswith("_us") else 1.0
            rows.append({"parameter": name, "low": g[max(0, lo_i - 1)] * scale, "nominal": nominal[k] * scale,
                         "high": g[min(len(g) - 1, hi_i + 1)] * scale,
                         "source": src + ("; GPUDirect-TCPXO runs only" if prefix else _RANGE_SCOPE.get(
                             k, "; InfiniBand / RoCE / EFA / Slingshot runs"))})
    return pd.DataFrame(rows)


#: what a range row covers, where not every InfiniBand / RoCE / EFA / Slingshot run
_RANGE_SCOPE = {FULL_NODE: " and of the fits on each training source alone; collectives across nodes whose GPUs "
                           "drive every NIC with NCCL's default connections (one QP per connection, default "
                           "channels) on InfiniBand / RoCE"}


def evaluation_table(table: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """|error| statistics of the held-out points per ``keys`` (every size, and sizes >= 64 MiB), with the signed
    median at >= 64 MiB (+: simulated too slow)."""
    rows = []
    for key, g in table.groupby(keys):
        key = key if isinstance(key, tuple) else (key,)
        big = g[g["size_bytes"] >= LARGE_BYTES]
        rows.append({**dict(zip(keys, key, strict=True)), "runs": g["run_id"].nunique(),
                     **{f"all_{k}": v for k, v in _stats(g["pct_error"].to_numpy()).items()},
                     **{f"ge64MiB_{k}": v for k, v in _stats(big["pct_error"].to_numpy()).items()},
                     "ge64MiB_median_signed_pct": float(np.median(big["pct_error"])) if len(big) else math.nan})
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    from simfuse.arguments import script_main

    return script_main(_main, argv, "network_validation.py")


def _main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default=str(ROOT / "data/network_corpus"))
    ap.add_argument("--topology", default=str(ROOT / "topologies/h100_nvl8_ib_ndr.yaml"))
    ap.add_argument("--out", default=None, help="default experiments/results/network_validation (with --smoke: "
                    "runs/network_validation_smoke, so a smoke run leaves the committed results alone)")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--smoke", action="store_true", help="three sources, a 2x2x2x3 grid (seconds)")
    ap.add_argument("--fit-on", choices=tuple(FIT_ON), default="plain",
                    help="train on the points of plain algorithms (ring, direct all-to-all; default) or on all")
    args = ap.parse_args(argv)
    t0 = time.time()
    from simfuse.arguments import check_out_writable, check_workers

    check_workers(args.jobs, {"workers": "--jobs"})
    out = Path(args.out or ROOT / ("runs/network_validation_smoke" if args.smoke else
                                   "experiments/results/network_validation"))
    check_out_writable(out)
    corpus = load_corpus(args.corpus)
    base = load_topology(args.topology)
    grid = SMOKE_GRID if args.smoke else GRID
    runs, skipped = [], []
    for r in corpus.runs:
        if args.smoke and r.source_id not in SMOKE_SOURCES:
            continue
        why = simulation_problem(r, base) or ("no sizes >= 1 MiB" if not _sizes(r, args.smoke) else None)
        (skipped.append({"run_id": r.run_id, "source_id": r.source_id, "reason": why}) if why else runs.append(r))
    sim = simulate_grid(runs, args.topology, grid, args.smoke, args.jobs)
    meas = {(r.run_id, s): t for r in runs for s, t in _sizes(r, args.smoke)}
    source_of = {r.run_id: r.source_id for r in runs}
    sources = sorted({r.source_id for r in runs})
    rows, fits = [], []
    nominal = _nominal(base, grid)
    full_node = {r.run_id: takes_full_node(r, topology_for_run(r, base)[0]) for r in runs}
    class_of = {r.run_id: fabric_class(r) for r in runs}
    algos = FIT_ON[args.fit_on]
    for held in sources:
        train = [r.run_id for r in runs if r.source_id != held and trains(r)]
        params, trained_on = fit_classes(sim, meas, train, class_of, source_of, algos, nominal)
        fits.append({"held_out_source": held, **params[RDMA],
                     **{f"tcpxo.{k}": v for k, v in params[TCPXO].items() if k != FULL_NODE},
                     "rdma_trained_on": ";".join(trained_on[RDMA]), "tcpxo_trained_on": ";".join(trained_on[TCPXO]),
                     "full_node_trained_on": ";".join(_full_node_sources(sim, train, full_node, class_of,
                                                                         source_of, algos))})
        rows.extend(_held_out_rows(sim, meas, [r for r in runs if r.source_id == held], params, held, full_node))
    table = pd.DataFrame(rows)
    all_fit, all_trained_on = fit_classes(sim, meas, [r.run_id for r in runs if trains(r)], class_of, source_of,
                                          algos, nominal)
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "leave_source_out.csv", index=False, float_format="%.6g")
    pd.DataFrame(fits).to_csv(out / "fits_per_fold.csv", index=False, float_format="%.6g")
    pd.DataFrame(skipped, columns=["run_id", "source_id", "reason"]).to_csv(out / "skipped.csv", index=False)
    if len(table):
        evaluation_table(table, ["evaluation_set", "collective", "nodes"]).to_csv(
            out / "summary_by_collective_nodes.csv", index=False, float_format="%.4g")
        sets = evaluation_table(table, ["evaluation_set"])
        sets.to_csv(out / "summary_by_evaluation_set.csv", index=False, float_format="%.4g")
        target = table[(table["evaluation_set"] == TARGET_SET) & (table["size_bytes"] >= LARGE_BYTES)]
        st = _stats(target["pct_error"].to_numpy())
        by_set = {r["evaluation_set"]: {k: r[f"ge64MiB_{k}"] for k in ("points", "median_abs_pct", "max_abs_pct")}
                  for _, r in sets.iterrows()}
    else:
        st, by_set = _stats(np.array([])), {}
    all_train = [r.run_id for r in runs if trains(r)]
    per_source = full_node_per_source(sim, meas, all_train, full_node, class_of, source_of, algos, all_fit[RDMA])
    ranges_table(pd.DataFrame(fits), all_fit, grid, args.smoke, per_source).to_csv(
        out / "fitted_ranges.csv", index=False, float_format="%.6g")
    summary = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "machine": platform.node(),
               "smoke": args.smoke, "fit_on": args.fit_on, "runs_simulated": len(runs),
               "runs_skipped": len(skipped),
               "sources": sources, "fit_all_sources": all_fit[RDMA],
               "fit_all_sources_tcpxo": {**{k: v for k, v in all_fit[TCPXO].items() if k != FULL_NODE},
                                         "trained_on": all_trained_on[TCPXO]},
               "full_node_efficiency_per_source": per_source,
               "full_node_runs": sorted(r for r, v in full_node.items() if v),
               "target": {"set": f"{TARGET_SET} points >= 64 MiB of runs whose NIC line rate is known",
                          "median_abs_pct_max": 10.0, "max_abs_pct_max": 25.0},
               "target_set_ge64MiB": st, "evaluation_sets_ge64MiB": by_set,
               "target_met": bool(st["points"]) and st["median_abs_pct"] <= 10.0 and st["max_abs_pct"] <= 25.0,
               "wall_s": round(time.time() - t0, 1)}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
