"""A Chakra execution trace as a :class:`~simfuse.workloads.base.Workload` (``simfuse run --chakra DIR``): the
imported graph runs as recorded, one result labelled ``chakra``, priced by the guard's graph estimate.  Not a
model-file kind: :func:`simfuse.graph.chakra.import_et` makes the spec."""

from __future__ import annotations

from dataclasses import dataclass

from .base import Workload, register_workload


@dataclass(frozen=True)
class ChakraSpec:
    """An imported operator graph (:class:`~simfuse.graph.Graph`, every rank's program)."""

    graph: object
    name: str
    kind: str = "chakra"
    source: str = "<chakra>"


@register_workload("chakra")
class ChakraWorkload(Workload):
    """The trace runs as recorded: one mode (``chakra``), no scaling, no prediction interval."""

    spec_type = ChakraSpec
    intervals = False

    @classmethod
    def of(cls, graph) -> ChakraSpec:
        return ChakraSpec(graph, graph.name)

    def modes(self, execution) -> tuple[str, ...]:
        return ("chakra",)

    def check(self, system, nodes, gpus_per_node, execution, modes=("chakra",)) -> None:
        return None

    def build_graph(self, system, nodes, mode, *, gpus_per_node, execution, plan=None):
        return self.spec.graph

    def simulate(self, system, nodes, gpus_per_node, modes, execution, *, record=False, chosen=None, pool=None,
                 progress=None) -> dict:
        from .run import simulate_graph

        return simulate_graph(self.spec.graph, system, execution=execution, record=record, label="chakra",
                              progress=progress)

    def estimate(self, pricing, topology, nodes, gpus_per_node, sim_mode, execution, workers):
        """Every rank simulated when the graph has send/recv nodes or its ranks differ, rank 0 alone otherwise
        (:func:`~simfuse.guard.estimate_graph`)."""
        return pricing.estimate_graph(self.spec.graph, topology, sim_mode)

    def estimate_run(self, pricing, topology, nodes, gpus_per_node, sim_mode, execution, workers):
        return self.estimate(pricing, topology, nodes, gpus_per_node, sim_mode, execution, workers)
