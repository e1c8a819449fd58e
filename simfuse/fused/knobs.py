"""Execution knobs: one dataclass per concern, with metadata that drives YAML/``--set`` validation and CLI help.

* :class:`FusedKnobs`: how a fused operator executes (slice size, tile order, persistent grid, ...);
* :class:`ExecutionSpec`: how a run executes (which modes, simulation mode, seed, forced collective algorithms)
  plus the fused knobs and the settings of one workload kind (``settings``: e.g. DLRM's batch, plan and
  placement, declared with the workload's spec, :mod:`simfuse.spec.settings`).

``simfuse op``, ``simfuse run`` and ``simfuse sweep`` all take ``--set key=value`` for every field below (and
``execution:`` in a workload YAML gives defaults); :func:`parse_execution` is the one parser.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from ..errors import SpecError
from ..network.flows import RATE_RESOLUTION_S
from ..spec.workload import LAUNCHES


def modes_of(mode: str) -> tuple[str, ...]:
    """The executions a ``mode`` setting runs: ``both`` -> baseline and fused, otherwise that one."""
    return ("baseline", "fused") if mode == "both" else (mode,)


DTYPE_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "fp64": 8}


#: Largest magnitude of an integer setting without its own maximum (exact in a float, fits an int64).
MAX_INT_SETTING = 2**53


#: default of ``rate_resolution_ns`` (why 250 ns: :data:`simfuse.network.flows.RATE_RESOLUTION_S`)
RATE_RESOLUTION_NS = RATE_RESOLUTION_S * 1e9


def _meta(help_text: str, *, choices=None, minimum=None, maximum=None, optional=False):
    return {"help": help_text, "choices": choices, "min": minimum, "max": maximum, "optional": optional}


@dataclass(frozen=True)
class FusedKnobs:
    """Parameters of the fused execution (defaults follow the paper's description, docs/sources.md S49)."""

    slice_wgs: int = field(default=1, metadata=_meta("workgroups per put (1 = every workgroup pushes its own "
                                                     "output)", minimum=1, maximum=2**31))
    tile_order: str = field(default="remote_first", metadata=_meta(
        "remote_first: workgroups whose output leaves the node run first; natural: index order (incast)",
        choices=("remote_first", "natural")))
    persistent_grid: int = field(default=0, metadata=_meta("0 = one program per tile; else resident programs",
                                                           minimum=0, maximum=2**31))
    occupancy_loss: float | None = field(default=None, metadata=_meta(
        "fraction of workgroup slots lost to communication state (default: the topology's)", minimum=0.0,
        maximum=0.99, optional=True))
    hbm_comm_factor: float = field(default=1.0, metadata=_meta(
        "HBM bytes read per byte put over the NIC (NIC reads the staged output)", minimum=0.0))
    baseline_algorithm: str | None = field(default=None, metadata=_meta(
        "bulk collective algorithm of the baseline (default: the tuner's choice)", optional=True))
    baseline_kernel: str = field(default="same", metadata=_meta(
        "the baseline's compute kernel: same = the fused operator's own kernel unfused (isolates the effect of "
        "fusion), library = a vendor-library kernel (cuBLAS: the profile's dense fit or the device's small-M "
        "GEMM curve where the topology has them)", choices=("same", "library")))
    twrw_push: str = field(default="hierarchical", metadata=_meta(
        "table-row-wise shards in fused mode (DLRM): hierarchical = the pooling kernel pushes partial sums to the "
        "node-local reducer, which puts each reduced slice on the rail as it completes (backward: the gradient "
        "push goes over the rail and the reducer forwards it inside the node); bulk = a plain kernel and two bulk "
        "exchanges (the behaviour before issue 11)", choices=("hierarchical", "bulk")))

    def validate(self, source: str = "<knobs>") -> None:
        _validate(self, source)

    def effective_occupancy_loss(self, topology) -> float:
        """The knob's occupancy loss, or the topology's ``gpu_initiated.occupancy_loss`` when unset."""
        return topology.gpu_initiated.occupancy_loss if self.occupancy_loss is None else self.occupancy_loss


@dataclass(frozen=True)
class ExecutionSpec:
    """How a run executes.  ``mode``: both | fused | baseline; ``sim_mode``: auto | classes | full."""

    mode: str = field(default="both", metadata=_meta("which executions to simulate",
                                                     choices=("both", "fused", "baseline")))
    sim_mode: str = field(default="auto", metadata=_meta(
        "auto: exact fast path where it applies; classes: one representative per class of alike ranks; "
        "full: every rank", choices=("auto", "classes", "full")))
    seed: int = field(default=0, metadata=_meta("seed of the run's numpy Generator", minimum=0))
    rate_resolution_ns: float = field(default=RATE_RESOLUTION_NS, metadata=_meta(
        "the flow model re-shares link bandwidth at multiples of this (ns): a flow starts, and a finished flow's "
        "bandwidth returns to the others, at the next multiple (its own bytes arrive on time); 0: at every start "
        "and finish (the exact fluid model, slower; docs/design.md)", minimum=0, maximum=10_000))
    allreduce_algorithm: str | None = field(default=None, metadata=_meta(
        "all-reduce algorithm for collectives that name none (default: the tuner's)", optional=True))
    alltoall_algorithm: str | None = field(default=None, metadata=_meta(
        "all-to-all algorithm for collectives that name none (default: the tuner's)", optional=True))
    launch: str | None = field(default=None, metadata=_meta(
        "kernel launches over the model file's: eager (queued by the host; device.kernel_launch_latency_us) | "
        "graph (replayed from a CUDA graph; device.graph_launch_latency_us)", optional=True,
        choices=LAUNCHES))
    tune_knobs: str = field(default="auto", metadata=_meta(
        "auto: with placement planned, fused knobs left at their defaults are tuned over a small grid "
        "(simfuse.workloads.dlrm_workload.TUNE_GRID); off: keep them", choices=("auto", "off")))
    uncertainty: str = field(default="bound", metadata=_meta(
        "prediction intervals: inputs (Latin hypercube draws of the input ranges the model and topology files "
        "declare, joint with the kernel residuals, plus one-at-a-time runs for the sensitivity table: "
        "uncertainty_draws + 2 per input more runs), bound (every kernel family at the p10/p50/p90 of the "
        "calibration's cross-validated residuals: 3 more runs), mc (Monte Carlo over cost-model draws), none",
        choices=("bound", "mc", "inputs", "none")))
    uncertainty_draws: int = field(default=16, metadata=_meta(
        "draws of uncertainty=mc or uncertainty=inputs", minimum=2, maximum=1000))
    sensitivity: str = field(default="oat", metadata=_meta(
        "with uncertainty=inputs: oat (one-at-a-time runs at each end of every range for the tornado, 2 more "
        "runs per input) or rank (only the rank correlations of the joint draws: no extra runs)",
        choices=("oat", "rank")))
    knobs: FusedKnobs = field(default_factory=FusedKnobs)
    #: the settings of one workload kind given for this run (instances of the classes registered with
    #: :func:`simfuse.spec.settings.register_settings`, e.g. DLRM's batch and placement), at most one per class
    settings: tuple = ()

    def settings_of(self, cls):
        """The run's settings of class ``cls`` (its defaults when none were given)."""
        return next((s for s in self.settings if isinstance(s, cls)), None) or cls()

    def validate(self, source: str = "<execution>") -> None:
        _validate(self, source)
        self.knobs.validate(source)
        for s in self.settings:
            _validate(s, source)
            if hasattr(s, "validate"):
                s.validate(source)
        from ..collectives.algorithms import REGISTRY

        # names checked here, whether or not the run meets that collective (a typo must not pass silently)
        # settings that only act with another setting: refused without it (a setting is never silently ignored)
        default = ExecutionSpec()
        if self.sensitivity != default.sensitivity and self.uncertainty != "inputs":
            raise SpecError(source, "sensitivity", f"{self.sensitivity}: applies with uncertainty=inputs, not "
                                                   f"{self.uncertainty}")
        if self.uncertainty_draws != default.uncertainty_draws and self.uncertainty not in ("mc", "inputs"):
            raise SpecError(source, "uncertainty_draws", f"{self.uncertainty_draws}: applies with uncertainty=mc "
                                                         f"or inputs, not {self.uncertainty}")
        for key, ops in (("allreduce_algorithm", ("all_reduce",)), ("alltoall_algorithm", ("all_to_all",)),
                         ("baseline_algorithm", tuple(REGISTRY))):
            name = getattr(self.knobs if key == "baseline_algorithm" else self, key)
            known = sorted({a for op in ops for a in REGISTRY[op]})
            if name is not None and name not in known:
                raise SpecError(source, key, f"unknown algorithm {name!r}; expected one of {', '.join(known)}")

    def forced_algorithms(self) -> dict[str, str]:
        out = {}
        if self.allreduce_algorithm:
            out["all_reduce"] = self.allreduce_algorithm
        if self.alltoall_algorithm:
            out["all_to_all"] = self.alltoall_algorithm
        return out


def _scalar_fields(cls) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(cls) if f.name not in ("knobs", "settings")}


def _settings_classes() -> list[type]:
    from ..spec.settings import settings_classes

    return list(settings_classes().values())


def _base_type(f: dataclasses.Field):
    t = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    if t.startswith("int"):
        return int
    if t.startswith("float"):
        return float
    return str


def _validate(obj, source: str) -> None:
    for name, f in _scalar_fields(type(obj)).items():
        v = getattr(obj, name)
        m = f.metadata
        if v is None:
            if not m.get("optional"):
                raise SpecError(source, name, "must be given")
            continue
        typ = _base_type(f)
        if typ in (int, float):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or (typ is int and int(v) != v):
                raise SpecError(source, name, f"expected {'an integer' if typ is int else 'a number'}, got {v!r}")
            if not math.isfinite(float(v)):
                raise SpecError(source, name, f"must be finite, got {v!r}")
            if m.get("min") is not None and v < m["min"]:
                raise SpecError(source, name, f"must be >= {m['min']}, got {v!r}")
            if m.get("max") is not None and v > m["max"]:
                raise SpecError(source, name, f"must be <= {m['max']}, got {v!r}")
            if typ is int and abs(v) > MAX_INT_SETTING:  # engine arrays are int64: 1e19 must not reach them
                raise SpecError(source, name, f"must be at most {MAX_INT_SETTING:g} in magnitude, got {v!r}")
        elif m.get("choices") and v not in m["choices"]:
            raise SpecError(source, name, f"unknown {v!r}; expected one of {', '.join(m['choices'])}")


def fused_knob_names() -> list[str]:
    return list(_scalar_fields(FusedKnobs))


def knob_names() -> list[str]:
    return list(_scalar_fields(ExecutionSpec)) + [n for c in _settings_classes() for n in _scalar_fields(c)] + \
        list(_scalar_fields(FusedKnobs))


def knob_help() -> str:
    """One line per settable key (for ``--set`` help)."""
    lines = []
    for cls in (ExecutionSpec, *_settings_classes(), FusedKnobs):
        for name, f in _scalar_fields(cls).items():
            ch = f.metadata.get("choices")
            lines.append(f"{name}: {f.metadata.get('help', '')}" + (f" [{'|'.join(ch)}]" if ch else ""))
    return "\n".join(lines)


def _convert(f: dataclasses.Field, value, source: str):
    choices = f.metadata.get("choices") or ()
    if isinstance(value, str) and value.strip() in choices:
        return value.strip()  # a choice spelled like a null ("none", "auto") is that choice
    if value is None or (isinstance(value, str) and value.strip().lower() in ("none", "null", "auto", "")):
        if f.metadata.get("optional"):
            return None
        if f.default is not dataclasses.MISSING and isinstance(value, str) and value.strip().lower() == "auto":
            return f.default
        raise SpecError(source, f.name, "must be given")
    typ = _base_type(f)
    if typ is str:
        return str(value).strip()
    if isinstance(value, bool):
        raise SpecError(source, f.name, f"expected a number, got {value!r}")
    try:
        num = float(value)
    except (TypeError, ValueError):
        raise SpecError(source, f.name, f"expected a number, got {str(value)[:40]!r}") from None
    if not math.isfinite(num):
        raise SpecError(source, f.name, f"must be finite, got {str(value)[:40]!r}")
    if typ is int:
        if num != int(num):
            raise SpecError(source, f.name, f"expected an integer, got {value!r}")
        return int(num)
    return num


def parse_execution(values: dict, source: str = "<argument>", base: ExecutionSpec | None = None) -> ExecutionSpec:
    """An :class:`ExecutionSpec` from ``{key: value}`` (YAML ``execution:`` mapping or ``--set`` pairs) over
    ``base``; unknown keys raise :class:`SpecError` naming the key and listing the known ones."""
    base = base or ExecutionSpec()
    ex_fields, kn_fields = _scalar_fields(ExecutionSpec), _scalar_fields(FusedKnobs)
    wl_fields = {c: _scalar_fields(c) for c in _settings_classes()}
    ex_kw, kn_kw, wl_kw = {}, {}, {}
    for key, value in values.items():
        cls = next((c for c, fs in wl_fields.items() if key in fs), None)
        if key in ex_fields:
            ex_kw[key] = _convert(ex_fields[key], value, source)
        elif key in kn_fields:
            kn_kw[key] = _convert(kn_fields[key], value, source)
        elif cls is not None:
            wl_kw.setdefault(cls, {})[key] = _convert(wl_fields[cls][key], value, source)
        else:
            raise SpecError(source, str(key)[:60], f"unknown setting; known: {', '.join(knob_names())}")
    settings = [s for s in base.settings if type(s) not in wl_kw]
    settings += [dataclasses.replace(base.settings_of(c), **kw) for c, kw in wl_kw.items()]
    spec = dataclasses.replace(base, knobs=dataclasses.replace(base.knobs, **kn_kw), settings=tuple(settings),
                               **ex_kw)
    spec.validate(source)
    return spec


def parse_set_pairs(pairs: list[str] | None, source: str = "--set") -> dict:
    """``["key=value", ...]`` into a mapping (values stay strings; :func:`parse_execution` converts them)."""
    out: dict = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise SpecError("<argument>", source, f"expected key=value, got {pair[:60]!r}")
        key, value = pair.split("=", 1)
        out[key.strip()] = value.strip()
    return out
