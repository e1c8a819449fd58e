"""Argument checks shared by the command line and the Python API (:mod:`simfuse.api`).

Both call these functions with the same values, so a bound holds on both (a NaN size, ``nodes=10**9``, a run the
cost guard refuses).  Errors are :class:`~simfuse.errors.SpecError` naming the argument as the caller spells it
(``--nodes`` on the command line, ``nodes`` in Python): :data:`CLI` and :data:`API` give the spellings.
"""

from __future__ import annotations

from .errors import SpecError, short_repr

#: how each interface spells an argument
CLI = {"nodes": "--nodes", "gpus_per_node": "--gpus-per-node", "size": "--size", "algorithm": "--algorithm",
       "mode": "--mode", "workers": "--workers", "force": "--force", "op": "--op", "protocol": "--protocol"}
API = {k: k for k in CLI} | {"size": "size_bytes"}

COLLECTIVE_MODES = ("auto", "symmetric", "full")


def check_workers(workers, names: dict = CLI) -> None:
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or
                                not 1 <= workers <= 1024):
        raise SpecError("<argument>", names["workers"], f"must be an integer in 1..1024, got {short_repr(workers)}")


def check_collective(topology, nodes, op: str, sizes: list[int], *, algorithm: str | None,
                     gpus_per_node: int | None, mode: str, protocol: str | None = None, force: bool = False,
                     names: dict = CLI) -> int:
    """Everything ``simfuse collective`` checks before it simulates (nodes, the algorithm's name, the mode, GPUs
    per node against the topology, the cost guard); returns the GPUs per node."""
    from .checks import check_nodes, resolve_gpus_per_node
    from .collectives import REGISTRY
    from .guard import check_cost, estimate_collective_run

    check_nodes(nodes, names["nodes"])
    if op not in REGISTRY:
        raise SpecError("<argument>", names["op"], f"unknown collective {short_repr(op)}; expected one of "
                        f"{', '.join(REGISTRY)}")
    if algorithm is not None and algorithm not in REGISTRY.get(op, {}):
        raise SpecError("<argument>", names["algorithm"], f"unknown algorithm {short_repr(algorithm)} for {op}; "
                        f"expected one of {', '.join(REGISTRY.get(op, {}))}")
    if mode not in COLLECTIVE_MODES:
        raise SpecError("<argument>", names["mode"], f"unknown mode {short_repr(mode)}; expected one of "
                        f"{', '.join(COLLECTIVE_MODES)}")
    from .collectives.protocols import canonical_protocol

    canonical_protocol(protocol, "<argument>", names["protocol"])  # ll128 is LL128; an unknown name is refused
    g = resolve_gpus_per_node(topology, gpus_per_node, names["gpus_per_node"])
    check_cost(estimate_collective_run(topology, op, nodes, g, sizes, mode, algorithm, protocol), force,
               field=names["force"], command="collective")
    return g


def collective_size(size, names: dict = CLI) -> int:
    """One message size in bytes (a number or ``64MiB``): finite, whole, in 0..1 PiB."""
    from .units import parse_size_bytes

    return parse_size_bytes(size, "<argument>", names["size"])


def check_run(spec, topology, nodes, gpus_per_node, execution, *, sim_mode: str = "auto", force: bool = False,
              names: dict = CLI, workers: int = 1):
    """What ``simfuse run`` checks of a workload run before simulating it (nodes, GPUs per node, the cost guard,
    every simulation of the run counted); returns ``(gpus_per_node, estimate)``."""
    from .checks import check_nodes, resolve_gpus_per_node
    from .guard import check_cost, estimate_run
    from .workloads import workload_for

    check_nodes(nodes, names["nodes"])
    g = resolve_gpus_per_node(topology, gpus_per_node, names["gpus_per_node"])
    scaled = workload_for(spec).scaled(nodes, g, execution)
    scaled.precheck(nodes, g)  # an input error is reported before any note on the run's cost
    est = check_cost(estimate_run(scaled.spec, topology, nodes, g, sim_mode, execution, workers), force,
                     field=names["force"])
    return g, est


__all__ = ["API", "CLI", "check_collective", "check_out_writable", "check_run", "check_setting", "check_workers",
           "collective_size", "script_main"]


def script_main(run, argv, script: str) -> int:
    """An experiment script's command line: ``run(argv)``, with a :class:`SpecError` printed as one line
    ``<script>: error: <source>: <field>: <message>`` on stderr and exit code 2 (a user's mistake, no traceback)."""
    import sys

    try:
        return run(argv)
    except SpecError as exc:
        print(f"{script}: error: {exc}", file=sys.stderr)
        return 2


def check_setting(key: str, value, flag: str) -> None:
    """Validate one execution setting (``key``, as ``--set`` takes it) given by a script's own ``flag``: the
    setting's rules, with the error naming ``flag``."""
    from .fused.knobs import parse_execution

    # settings that act only beside another are checked beside it (ExecutionSpec.validate refuses them alone)
    context = {"uncertainty_draws": {"uncertainty": "inputs"}, "sensitivity": {"uncertainty": "inputs"}}
    try:
        parse_execution({**context.get(key, {}), key: str(value)})
    except SpecError as exc:
        raise SpecError("<argument>", flag, exc.message) from None


def check_out_writable(path, field: str = "--out", *, is_dir: bool = True) -> None:
    """Refuse an output path no file can be created under (a read-only file system, ``/proc``) before any work:
    probes the deepest existing directory of ``path`` (``is_dir``: ``path`` is the output directory itself, else
    a file in it) with an anonymous temporary file."""
    import tempfile
    from pathlib import Path

    if path is None:
        return
    p = Path(path)
    base = p if is_dir else p.parent
    while not base.exists() and base != base.parent:
        base = base.parent
    if not base.is_dir():
        return  # a file in the way: check_out_dir / check_out_file name it
    try:
        with tempfile.TemporaryFile(dir=base):
            pass
    except OSError as exc:
        raise SpecError("<argument>", field, f"cannot write under {short_repr(str(base))} "
                        f"({exc.strerror or exc}); choose a writable location") from None


def refuse_repeated_keys(pairs: list[str] | None, source: str = "--set") -> None:
    """A key given twice in ``key=value`` pairs is an error (the later value would hide the first), and so is an
    empty key (``--set =3``)."""
    seen: set[str] = set()
    for pair in pairs or []:
        key = pair.split("=", 1)[0].strip()
        if "=" in pair and not key:
            raise SpecError("<argument>", source, f"empty key in {short_repr(pair)}; expected key=value")
        if "=" in pair and key in seen:
            raise SpecError("<argument>", f"{source} {short_repr(key)}", "given twice")
        seen.add(key)


def split_knobs(sets: dict, source: str | None = "--set"):
    """Split ``key=value`` settings (``simfuse op --set``, parsed by :func:`simfuse.fused.knobs.parse_set_pairs`,
    or the API's keyword arguments) into operator parameters and validated fused-operator knobs.  Parameters
    become int/float where they parse (finite, magnitude <= 2**53); knobs go through ``parse_execution``.
    ``source``: how an error names a parameter (``--set 'n'``; None: the bare name, as the API spells it)."""
    import dataclasses

    from .checks import check_finite_number
    from .fused.knobs import FusedKnobs, parse_execution

    knob_names = {f.name for f in dataclasses.fields(FusedKnobs)}
    params = {k: v for k, v in sets.items() if k not in knob_names}
    knobs = parse_execution({k: v for k, v in sets.items() if k in knob_names}).knobs
    for k, v in params.items():  # operator parameters: numbers where they parse
        for conv in (int, float):
            try:
                params[k] = conv(v)
                break
            except (TypeError, ValueError):
                continue
        params[k] = check_finite_number(params[k], f"{source} {short_repr(k)}" if source else k)
    return params, knobs
