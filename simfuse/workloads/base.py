"""Workloads behind one interface: :class:`Workload`, registered under the model file's ``kind:``.

A workload kind is one class that owns everything the run pipeline (:mod:`simfuse.workloads.run`) and the cost
guard (:mod:`simfuse.guard`) need to know of it:

* ``parse(root, source)``: its model file's fields, validated (``kind: <name>`` is then accepted by
  :func:`simfuse.spec.load_workload`);
* ``settings``: a dataclass of the run settings only it reads (``--set key=value``; :mod:`simfuse.spec.settings`);
* :meth:`Workload.scaled`: the spec a run at ``nodes`` simulates (strong / weak scaling, settings applied);
* :meth:`Workload.build_graph`: its operator graph (nodes only; :mod:`simfuse.graph`);
* :meth:`Workload.simulate`: every mode of one run (the default builds and runs the graph per mode; DLRM tries
  its candidate plans and knob grid);
* :meth:`Workload.estimate`: what a run costs, for the guard, in the guard's prices;
* :meth:`Workload.row_columns`: its own result columns.

To add a workload: write a module with a :class:`Workload` subclass decorated ``@register_workload("<kind>")``
that sets ``spec_type`` and implements ``parse``, ``build_graph`` and ``estimate``; import it where it is used
(the built-in kinds are imported by :mod:`simfuse.workloads`); add its tests (docs/extending.md).
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from typing import ClassVar

from ..errors import SpecError

_REGISTRY: dict[str, type[Workload]] = {}


def register_workload(kind: str):
    """Class decorator: ``cls`` runs model files of ``kind:`` (its ``parse`` is registered with the spec loader,
    its ``settings`` with the ``--set`` parser)."""
    from ..spec.settings import register_settings
    from ..spec.workload import register_kind

    def deco(cls):
        cls.kind = kind
        _REGISTRY[kind] = cls
        if cls.parse is not Workload.parse:
            register_kind(kind, cls.parse)
        if cls.settings is not None:
            register_settings(kind, cls.settings)
        return cls

    return deco


def registered_workloads() -> dict[str, type[Workload]]:
    return dict(_REGISTRY)


def workload_for(spec) -> Workload:
    """The registered :class:`Workload` of ``spec`` (by its ``kind``), wrapping it."""
    cls = _REGISTRY.get(getattr(spec, "kind", None))
    if cls is None:
        raise SpecError(getattr(spec, "source", "<model>"), "kind",
                        f"no workload registered for kind {getattr(spec, 'kind', None)!r}; known: "
                        f"{', '.join(_REGISTRY)}")
    return cls(spec)


class Workload(ABC):
    """One workload kind; an instance wraps one validated spec (``self.spec``)."""

    kind: ClassVar[str] = ""
    #: the spec dataclass ``parse`` returns
    spec_type: ClassVar[type | None] = None
    #: the dataclass of this kind's own run settings (:mod:`simfuse.spec.settings`), or None
    settings: ClassVar[type | None] = None
    #: whether a run gets a prediction interval (``uncertainty``: repeated runs on drawn cost models or inputs)
    intervals: ClassVar[bool] = True
    def __init__(self, spec):
        self.spec = spec

    # ----------------------------------------------------------------------------------------------- the spec
    @staticmethod
    def parse(root, source: str):
        """The spec of a model file's mapping (``root``: :class:`~simfuse.spec._fields.Fields`); built-in kinds
        are parsed by :mod:`simfuse.spec.workload` itself."""
        raise NotImplementedError

    def scaled(self, nodes: int, gpus_per_node: int, execution) -> Workload:
        """The workload a run at ``nodes`` simulates: ``launch`` over the file's, and every setting of another
        kind refused (a setting must never be silently ignored).  Kinds with scaling modes override this."""
        self.refuse_foreign_settings(execution)
        spec = self.spec
        if execution.launch is not None and hasattr(spec, "launch"):
            spec = dataclasses.replace(spec, launch=execution.launch)
        return type(self)(spec)

    def refuse_foreign_settings(self, execution) -> None:
        from ..spec.settings import given_settings

        for kind, _value, f in given_settings(execution.settings):
            if kind != self.kind:
                raise SpecError("<argument>", f.name, (f.metadata.get("elsewhere") or
                                                       "applies to {owner} workloads, not {kind}").format(
                    kind=self.spec.kind, owner=kind))
        # execution knobs that only some kinds act on, set away from their defaults
        from ..fused.knobs import ExecutionSpec, FusedKnobs

        ex0, kn0 = ExecutionSpec(), FusedKnobs()
        for name, value, default, owners in (
                ("twrw_push", execution.knobs.twrw_push, kn0.twrw_push, ("dlrm",)),
                ("tune_knobs", execution.tune_knobs, ex0.tune_knobs, ("dlrm",)),
                ("baseline_kernel", execution.knobs.baseline_kernel, kn0.baseline_kernel, ())):
            if value != default and self.kind not in owners:
                where = f"{' / '.join(owners)} workloads" if owners else "`simfuse op` (one fused operator)"
                raise SpecError("<argument>", name, f"{value}: applies to {where}, not {self.spec.kind}")

    def modes(self, execution) -> tuple[str, ...]:
        """The results a run makes: ``baseline`` and / or ``fused`` as ``execution.mode`` asks."""
        from ..fused.knobs import modes_of

        return modes_of(execution.mode)

    def scaling(self, execution) -> str:
        """The scaling mode a result row reports: ``model`` (the model file's size) unless the kind has modes."""
        return "model"

    def precheck(self, nodes: int, gpus_per_node: int) -> None:
        """The input errors found from sizes alone, reported before the guard prices the run (nothing by
        default; DLRM: a global batch that does not split over the GPUs)."""
        return None

    def check(self, system, nodes: int, gpus_per_node: int, execution, modes=("baseline",)) -> None:
        """The input errors a run would raise, found without simulating (a sweep checks every node count before
        it starts): by default the baseline graph is built (builders are cheap for symmetric workloads)."""
        self.build_graph(system, nodes, "baseline", gpus_per_node=gpus_per_node, execution=execution)

    # -------------------------------------------------------------------------------------------- simulating
    @abstractmethod
    def build_graph(self, system, nodes: int, mode: str, *, gpus_per_node: int, execution, plan=None):
        """The operator graph of ``mode`` (``baseline`` or ``fused``), nodes only (:class:`simfuse.graph.Graph`)."""

    def simulate(self, system, nodes: int, gpus_per_node: int, modes, execution, *, record: bool = False,
                 chosen: dict | None = None, pool=None, progress=None) -> dict:
        """``{mode: IterationResult}`` of one run, every mode of ``modes`` (``chosen``: an interval run keeps
        each mode's choices of the point estimate, the ``extras`` of its results).  The default builds and runs
        the graph per mode with one collective tuner shared by the modes."""
        import time

        from ..collectives.tuner import Tuner
        from ..graph.executor import Executor
        from .result import IterationResult

        ex = execution
        tuner = Tuner(system.topology, nodes, gpus_per_node, ex.forced_algorithms())
        out = {}
        for m in modes:
            wall0 = time.perf_counter()
            graph = self.build_graph(system, nodes, m, gpus_per_node=gpus_per_node, execution=ex)
            res = Executor(system, graph, seed=ex.seed, record=record, record_usage=record, tuner=tuner).run()
            ir = IterationResult(m, res.time_s, res.compute_time_s, res.exposed_comm_time_s, res.sim_mode, 1,
                                 res.events, time.perf_counter() - wall0, phases=list(res.critical.phases),
                                 repeat=res.repeat)
            if record:
                ir.sim, ir.net = res.sim, res.net
            out[m] = ir
        return out

    # ----------------------------------------------------------------------------------------- cost and rows
    @abstractmethod
    def estimate(self, pricing, topology, nodes: int, gpus_per_node: int, sim_mode: str, execution,
                 workers: int):
        """The guard's :class:`~simfuse.guard.CostEstimate` of one simulation of a run (``pricing``: the
        :mod:`simfuse.guard` module, which prices it: workloads sit below the guard and never import it)."""

    def kernel_estimate(self, pricing, topology, nodes: int, gpus_per_node: int, workgroups: float,
                        kernels: int, route_classes: int | None = None):
        """An :meth:`estimate` for a symmetric graph (one simulated rank) of ``kernels`` kernels of about
        ``workgroups`` workgroups each (the fused ones price their pushes by it); ``route_classes``: flow groups a
        wave where the pushes collapse by route class (None: one a peer, up to the workgroups)."""
        return pricing._estimate(f"{self.spec.name} on {nodes} x {gpus_per_node} GPUs", nodes * gpus_per_node, 1,
                                 workgroups, pricing._slots(topology), kernels=kernels, route_classes=route_classes)

    def estimate_run(self, pricing, topology, nodes: int, gpus_per_node: int, sim_mode: str, execution,
                     workers: int):
        """Every simulation of a run counted: by default :func:`~simfuse.guard.simulations_of_run` simulations
        of at least ``pricing.SIM_FLOOR_S`` (or :meth:`min_simulation_s`) each."""
        est = self.estimate(pricing, topology, nodes, gpus_per_node, sim_mode, execution, workers)
        per_sim = max(pricing.SIM_FLOOR_S, est.seconds, self.min_simulation_s(pricing))
        n = pricing.simulations_of_run(self.spec, topology, execution)
        extra = n * per_sim - est.seconds + self.array_seconds(pricing, nodes * gpus_per_node)
        return dataclasses.replace(est, what=f"{est.what}, {n} simulation(s)",
                                   extra_seconds=est.extra_seconds + extra)

    def min_simulation_s(self, pricing) -> float:
        """The least wall time one simulation of this workload takes (s; the guard's measured floor)."""
        return 0.0

    def array_seconds(self, pricing, gpus: int) -> float:
        """Wall time of the run's per-rank arrays, once per run (s; 0 where the guard has not measured one)."""
        return 0.0

    def row_columns(self, result, gpus: int) -> dict:
        """This kind's own columns of a result row (after the shared ones, before ``speedup``)."""
        return {}

    def plan_of(self, result):
        """The sharding plan a result used, written to ``plan.csv`` (DLRM); None for workloads without one."""
        return None

    @property
    def launch(self) -> str:
        """How the spec's kernels are launched (``eager`` for a spec without a ``launch`` field)."""
        return getattr(self.spec, "launch", "eager")

    def chosen(self, result):
        """What an interval's runs keep of the point estimate's ``result`` (DLRM: its plan and knobs)."""
        return result.extras
