"""The :class:`System`: a resolved topology, its calibration profile and its cost model, built once at the edge.

Everything below the CLI/API takes a ``System``: the topology with the profile's fabric and launch overrides
already applied (so no caller applies calibration twice, or forgets it), and the cost model that prices kernels
(calibrated where the profile covers them, the roofline elsewhere).  ``simfuse.costs`` never imports
``simfuse.calibrate``; this module is where the two meet.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .costs import CostModel, RooflineCostModel
from .costs.base import FusedFloor
from .errors import SpecError, short_repr
from .network.flows import RATE_RESOLUTION_S
from .spec import TopologySpec, load_topology
from .spec.workload import LAUNCHES


@dataclass(frozen=True)
class System:
    """``topology``: resolved (calibration applied); ``cost``: the kernel cost model (a fused kernel's workgroup
    is never priced below the plain kernel's: :class:`~simfuse.costs.base.FusedFloor`); ``profile``: the loaded
    calibration profile or None; ``nominal``: the topology as written in its file.

    Every construction goes through :meth:`__post_init__`, which wraps a bare cost model in ``FusedFloor``: a
    ``System`` built by hand (``System(topology, cost)``) keeps the floor too."""

    topology: TopologySpec
    cost: CostModel
    profile: object | None = None
    nominal: TopologySpec | None = None
    #: the flow model's re-sharing grid (s; 0: exact; :data:`~simfuse.network.flows.RATE_RESOLUTION_S`), set per
    #: run from the execution's ``rate_resolution_ns``
    rate_resolution_s: float = RATE_RESOLUTION_S

    def __post_init__(self):
        if not isinstance(self.cost, FusedFloor):
            object.__setattr__(self, "cost", FusedFloor(self.cost))

    def with_cost(self, cost: CostModel) -> System:
        """This system with another kernel cost model (wrapped in ``FusedFloor``; the launch mode kept)."""
        from dataclasses import replace

        return replace(self, cost=FusedFloor(getattr(cost, "inner", cost))).with_launch(self.launch)

    @classmethod
    def from_topology(cls, topology: TopologySpec, *, calibrated: bool = True) -> System:
        """Resolve ``topology``: apply its calibration profile (if it names one and ``calibrated``)."""
        if calibrated and topology.calibration:
            from .profile.load import apply_to_topology, cost_model_for, load_profile

            if not Path(topology.calibration).is_file():
                # name the topology's field, not only the missing file (a relative path is read from the
                # topology's folder: a copied topology file loses its profile)
                raise SpecError(topology.source, "calibration",
                                f"profile {short_repr(topology.calibration)} not found (a relative path is read from "
                                "the topology file's folder); fix the path or drop the field")
            profile = load_profile(topology.calibration)
            return cls(apply_to_topology(topology, profile), FusedFloor(cost_model_for(topology, profile=profile)),
                       profile, topology)
        nominal = topology.replace(calibration=None) if topology.calibration else topology
        return cls(nominal, FusedFloor(RooflineCostModel(topology.device)), None, topology)

    @classmethod
    def load(cls, path: str | Path, *, calibrated: bool = True) -> System:
        """Load a topology YAML file and resolve it."""
        return cls.from_topology(load_topology(path), calibrated=calibrated)

    def with_nominal(self, topology: TopologySpec) -> System:
        """This system rebuilt from a changed file topology (an input-range draw), with the same calibration
        profile (not read again) and the same kernel launch mode."""
        if self.profile is not None:
            from .profile.load import apply_to_topology, cost_model_for

            inner = cost_model_for(topology, profile=self.profile)
            resolved = apply_to_topology(topology, self.profile)
        else:
            resolved = topology.replace(calibration=None) if topology.calibration else topology
            inner = RooflineCostModel(resolved.device)
        sys = System(resolved, inner, self.profile, topology, self.rate_resolution_s)
        return sys.with_launch(self.launch)

    @property
    def name(self) -> str:
        return self.topology.name

    # -- uncertainty ---------------------------------------------------------------------------------------
    @property
    def has_residuals(self) -> bool:
        """Whether the cost model knows cross-validated residuals (a calibrated profile with wave models)."""
        inner = getattr(self.cost, "inner", self.cost)
        return any(getattr(w, "residual_logs", ()) for w in getattr(inner, "wave_fits", {}).values())

    def _with_inner(self, inner) -> System:
        from dataclasses import replace

        return replace(self, cost=FusedFloor(inner, getattr(self.cost, "launch_override_s", None)))

    # -- how kernels are launched --------------------------------------------------------------------------
    @property
    def launch(self) -> str:
        """``graph`` when every kernel is charged the device's CUDA-graph launch latency, else ``eager``."""
        return "eager" if getattr(self.cost, "launch_override_s", None) is None else "graph"

    def with_launch(self, launch: str) -> System:
        """This system with kernels launched ``eager`` (each kernel's launch latency from the cost model: the
        topology's ``kernel_launch_latency_us`` or the calibration profile's) or replayed from a CUDA ``graph``
        (every kernel charged ``device.graph_launch_latency_us``, the per-kernel gap measured inside a graph)."""
        from dataclasses import replace

        if launch not in LAUNCHES:
            raise ValueError(f"launch must be one of {', '.join(LAUNCHES)}, got {launch!r}")
        if launch == self.launch:
            return self
        inner = getattr(self.cost, "inner", self.cost)
        override = self.topology.device.graph_launch_s if launch == "graph" else None
        return replace(self, cost=FusedFloor(inner, override))

    def with_rate_resolution(self, resolution_s: float) -> System:
        """This system with the flow model re-sharing bandwidth on a grid of ``resolution_s`` (0: exact)."""
        from dataclasses import replace

        return self if resolution_s == self.rate_resolution_s else replace(self, rate_resolution_s=resolution_s)

    def at_quantile(self, q: float) -> System:
        """This system with every kernel family priced at quantile ``q`` of its cross-validated residuals (the
        same quantile for all families: perfectly correlated errors, an analytic bound).  Unchanged when the
        cost model has no residuals."""
        inner = getattr(self.cost, "inner", self.cost)
        return self._with_inner(inner.quantile_model(q)) if hasattr(inner, "quantile_model") else self

    def draw(self, rng) -> System:
        """This system with a cost model drawn from the residuals (Monte Carlo; ``rng``: numpy Generator)."""
        inner = getattr(self.cost, "inner", self.cost)
        return self._with_inner(inner.draw(rng)) if hasattr(inner, "draw") else self

    @property
    def gpus_per_node(self) -> int:
        return self.topology.scale_up.gpus_per_node


def as_system(obj) -> System:
    """Accept a :class:`System` or a :class:`TopologySpec` (resolved here, once)."""
    if isinstance(obj, System):
        return obj
    if isinstance(obj, TopologySpec):
        return System.from_topology(obj)
    raise TypeError(f"expected a System or TopologySpec, got {type(obj).__name__}")
