"""The Python API: every CLI subcommand as a function returning pandas DataFrames.

``topology`` arguments accept a path, a :class:`~simfuse.spec.TopologySpec` or a :class:`~simfuse.system.System`
(resolved once); ``model`` arguments a path or a loaded workload spec.  ``settings`` are the same keys as the
CLI's ``--set`` (:mod:`simfuse.fused.knobs`).
"""

from __future__ import annotations

import numbers
import os

import pandas as pd

from .errors import SpecError, short_repr
from .spec.workload import LAUNCHES


def _path(value, field: str, what: str):
    """``value`` as a path, or a :class:`SpecError` naming the argument (None, a number, a list...)."""
    if isinstance(value, (str, os.PathLike)):
        return value
    raise SpecError("<argument>", field, f"expected a path to {what}, got {short_repr(value)}")


def _int(value):
    """A numpy or other integral number as a Python ``int`` (a DataFrame's ``np.int64`` node count); anything
    else unchanged, for the argument's own check to refuse."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    return value


def _seed(value) -> int:
    """``seed`` as the command line's ``--seed`` takes it: a non-negative whole number (numpy's generators take no
    negative seed)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) < 0:
        raise SpecError("<argument>", "seed", f"expected a non-negative integer, got {short_repr(value)}")
    return int(value)


def _flag(value, field: str) -> bool:
    if not isinstance(value, bool):
        raise SpecError("<argument>", field, f"must be True or False, got {short_repr(value)}")
    return value


def load_topology(path) -> object:
    """A :class:`~simfuse.system.System` from a topology YAML file (calibration profile applied)."""
    from .system import System

    return System.load(_path(path, "path", "a topology YAML file"))


def load_workload(path):
    """A validated workload spec from a model YAML file."""
    from .spec import load_workload as _load

    return _load(_path(path, "path", "a model YAML file"))


def _system(topology):
    from .spec import TopologySpec
    from .system import System

    if isinstance(topology, System):
        return topology
    if isinstance(topology, TopologySpec):
        return System.from_topology(topology)
    return System.load(_path(topology, "topology", "a topology YAML file, a TopologySpec or a System"))


def _workload(model):
    if isinstance(model, (str, os.PathLike)):
        return load_workload(model)
    if getattr(model, "kind", None) is None:
        raise SpecError("<argument>", "model", f"expected a path to a model YAML file or a loaded workload spec, "
                        f"got {short_repr(model)}")
    return model


def run(model, topology, nodes: int = 1, *, gpus_per_node: int | None = None, mode: str = "both",
        sim_mode: str = "auto", workers: int = 1, force: bool = False, **settings) -> pd.DataFrame:
    """One iteration of a workload (``simfuse run``): one row per mode with iteration, compute and exposed
    communication time (s) and the speedup.  ``workers``: processes for the run's independent simulations
    (``simfuse run --workers``; the results do not depend on it).  Checked as the command line checks it
    (:mod:`simfuse.arguments`): a :class:`~simfuse.errors.SpecError` names the argument; ``force`` runs what the
    cost guard would refuse."""
    from .arguments import API, check_run, check_workers
    from .fused.knobs import parse_execution
    from .workloads.run import run_workload

    nodes, gpus_per_node, workers = _int(nodes), _int(gpus_per_node), _int(workers)
    check_workers(workers, API)
    force = _flag(force, "force")
    spec = _workload(model)
    system = _system(topology)
    ex = parse_execution({**settings, "mode": mode, "sim_mode": sim_mode}, source="<api>")
    g, est = check_run(spec, system.topology, nodes, gpus_per_node, ex, sim_mode=sim_mode, force=force, names=API,
                       workers=workers)
    _res, rows = run_workload(spec, system, nodes, gpus_per_node=g, execution=ex, workers=workers,
                              expected_s=est.seconds)
    return pd.DataFrame(rows)


def sweep(model, topology, nodes, out, *, gpus_per_node: int | None = None, mode: str = "both",
          sim_mode: str = "auto", workers: int = 1, force: bool = False, **settings) -> pd.DataFrame:
    """A node-count sweep (``simfuse sweep``); ``nodes`` is a list or a string like ``"8..1024"``.  Writes
    ``out/results.csv`` and the figures; returns the table.  ``model`` and ``topology`` are file paths here (the
    sweep's resumable points are keyed on the files' contents), not loaded objects."""
    from .arguments import API, check_out_writable, check_run, check_workers
    from .checks import check_nodes
    from .fused.knobs import parse_execution
    from .sweeps import parse_nodes, run_sweep

    gpus_per_node, workers = _int(gpus_per_node), _int(workers)
    check_workers(workers, API)
    force = _flag(force, "force")
    model = _path(model, "model", "a model YAML file (a sweep keys its points on the file)")
    topology = _path(topology, "topology", "a topology YAML file (a sweep keys its points on the file)")
    out = _path(out, "out", "the output directory")
    check_out_writable(out, "out")  # an unwritable place refused before any work
    node_list = _node_list(nodes, parse_nodes, check_nodes)
    spec = load_workload(model)
    topo = _system(topology).topology
    ex = parse_execution({**settings, "mode": mode, "sim_mode": sim_mode}, source="<api>")
    for n in node_list:  # every point priced before the first one runs, as the command line does
        check_run(spec, topo, n, gpus_per_node, ex, sim_mode=sim_mode, force=force, names=API)
    return run_sweep(str(model), str(topology), node_list, out, gpus_per_node=gpus_per_node, mode=mode,
                     sim_mode=sim_mode, workers=workers, progress=False,
                     settings={k: str(v) for k, v in settings.items()})


def _node_list(nodes, parse_nodes, check_nodes) -> list[int]:
    """``sweep``'s ``nodes``: ``"8..1024"``/``"1,2,4"`` or a list of whole numbers, duplicates dropped."""
    if isinstance(nodes, str):
        return parse_nodes(nodes, "nodes")
    from collections.abc import Iterable, Mapping

    from .checks import MAX_SWEEP_POINTS

    if isinstance(nodes, (bytes, Mapping)) or not isinstance(nodes, Iterable):
        raise SpecError("<argument>", "nodes", f"expected a list of node counts or a string like '8..1024', "
                        f"got {short_repr(nodes)}")
    node_list = sorted({check_nodes(_int(n), "nodes") for n in nodes})
    if not node_list:
        raise SpecError("<argument>", "nodes", "no node counts")
    if len(node_list) > MAX_SWEEP_POINTS:
        raise SpecError("<argument>", "nodes", f"{len(node_list):,} node counts (at most {MAX_SWEEP_POINTS})")
    return node_list


def collective(topology, nodes: int, op: str, size_bytes: float, *, algorithm: str | None = None,
               protocol: str | None = None, gpus_per_node: int | None = None, mode: str = "auto",
               force: bool = False, seed: int = 0) -> pd.DataFrame:
    """One bulk collective (``simfuse collective``): time, algbw and busbw (nccl-tests definitions; the columns
    the command writes, ``algbw_gbyte_per_s`` and ``busbw_gbyte_per_s``), ``protocol`` as ``--protocol``.  Checked as
    the command line checks it (a finite whole size up to 1 PiB, nodes in range, the cost guard unless
    ``force``); a :class:`~simfuse.errors.SpecError` names the argument.  ``seed``: as ``--seed``."""
    from .arguments import API, check_collective, collective_size
    from .collectives import run_collective
    from .names import canonical_collective

    nodes, gpus_per_node, force, seed = _int(nodes), _int(gpus_per_node), _flag(force, "force"), _seed(seed)
    topo = _system(topology).topology
    op = canonical_collective(op, "<argument>", "op") if isinstance(op, str) else op
    size = collective_size(size_bytes, API)
    from .units import OUTPUT_RENAMES

    g = check_collective(topo, nodes, op, [size], algorithm=algorithm, gpus_per_node=gpus_per_node, mode=mode,
                         protocol=protocol, force=force, names=API)
    r = run_collective(topo, nodes, op, size, algorithm=algorithm, gpus_per_node=g, mode=mode, protocol=protocol,
                       seed=seed)
    return pd.DataFrame([r.as_dict()]).drop(columns=["wall_s"]).rename(columns=OUTPUT_RENAMES)


def op(name: str, topology, nodes: int = 1, *, gpus_per_node: int | None = None, mode: str = "auto",
       launch: str = "eager", force: bool = False, seed: int = 0, **params_and_knobs) -> pd.DataFrame:
    """One fused operator against its baseline (``simfuse op``): one row with both times and the speedup.
    ``launch``: ``eager`` | ``graph`` (kernels replayed from a CUDA graph); ``seed``: as ``--seed``."""
    from .arguments import split_knobs
    from .checks import check_nodes, resolve_gpus_per_node
    from .fused.knobs import fused_knob_names
    from .fused.ops import OPS, make_op
    from .guard import check_cost, estimate_op
    from .workloads.op import run_op

    nodes, gpus_per_node, force = check_nodes(_int(nodes), "nodes"), _int(gpus_per_node), _flag(force, "force")
    if not isinstance(name, str) or name not in OPS:
        raise SpecError("<argument>", "name", f"unknown fused operator {short_repr(name)}; expected one of "
                        f"{', '.join(OPS)}")
    system = _system(topology)
    g = resolve_gpus_per_node(system.topology, gpus_per_node, "gpus_per_node")
    params, knobs = split_knobs({k: str(v) for k, v in params_and_knobs.items()}, source=None)
    unknown = sorted(set(params) - set(OPS[name].defaults))
    if unknown:  # as ``simfuse op --set`` refuses it: a misspelt parameter must not run the default silently
        raise SpecError("<argument>", unknown[0], f"unknown parameter for {name}; known: "
                        f"{', '.join(list(OPS[name].defaults) + fused_knob_names())}")
    if launch not in LAUNCHES:
        raise SpecError("<argument>", "launch", f"expected one of {', '.join(LAUNCHES)}, got {short_repr(launch)}")
    op_ = make_op(name, params, nodes, g)
    check_cost(estimate_op(name, params, system.topology, nodes, g, mode, knobs.slice_wgs, knobs.tile_order),
               force, field="force", command="op")
    res = run_op(op_, system, nodes, knobs=knobs, mode=mode, launch=launch, seed=_seed(seed))
    d = res.as_dict()
    d.pop("breakdown")
    params_out = d.pop("params")
    params_out.pop("wall_s", None)
    return pd.DataFrame([{**d, **params_out}])
