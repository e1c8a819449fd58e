"""One bulk-synchronous collective on the whole system, nccl-tests style (``simfuse collective``): the tuner's
choice (or a named algorithm) driven by the runner."""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..engine import Simulation
from ..errors import SpecError
from ..network import Fabric, FlowNetwork
from ..spec import TopologySpec
from .algorithms import BUSBW_FACTOR, Layout, make_algorithm
from .groups import world
from .protocols import ProtocolCost, canonical_protocol
from .quotient import make_quotient
from .runner import check_hardware, collective_process, relabelling
from .tuner import Tuner


@dataclass
class CollectiveResult:
    op: str
    algorithm: str
    protocol: str
    size_bytes: float
    nodes: int
    gpus_per_node: int
    ranks: int
    time_s: float
    algbw_gbps: float
    busbw_gbps: float
    mode: str
    events: int
    wall_s: float
    #: bytes the whole collective's flows put on the fabric and delivered (every rank, in every mode; the bytes on
    #: the wire, a protocol's flags and pipeline fill included): equal when the collective completes
    injected_bytes: float
    delivered_bytes: float

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def run_collective(topology: TopologySpec, nodes: int, op: str, size_bytes: float, *, algorithm: str | None = None,
                   gpus_per_node: int | None = None, mode: str = "auto", seed: int = 0,
                   include_overheads: bool = True, record_usage: bool = False, record: bool = False,
                   return_sim: bool = False, protocol: str | None = None):
    """Simulate one bulk collective; returns a :class:`CollectiveResult` (and the simulation objects when
    ``return_sim``).  ``mode``: ``auto`` (symmetric fast path when exact; on a
    fabric whose nodes differ, a schedule invariant under node shifts runs the ranks of one shift unit,
    :mod:`.quotient`, reported as mode ``quotient``), ``symmetric`` or ``full``.
    ``algorithm=None``: the tuner's choice (:class:`~simfuse.collectives.tuner.Tuner`, the one the workloads
    use).  ``protocol``: LL, LL128 or Simple (default: the tuner's, or Simple for a named algorithm under
    ``protocol_model: none``).  A collective on one rank moves nothing and costs nothing."""
    protocol = canonical_protocol(protocol, "<argument>", "protocol")
    wall0 = time.perf_counter()
    g = gpus_per_node or topology.scale_up.gpus_per_node
    if mode not in ("auto", "symmetric", "full"):
        raise SpecError("<argument>", "mode", f"unknown mode {mode!r}; expected auto, symmetric or full")
    layout = Layout(nodes, g)
    if op not in BUSBW_FACTOR:
        make_algorithm(op, algorithm, layout, size_bytes)  # raises the unknown-op error
    if layout.n > 1 and (algorithm is None or (protocol is None and "/" not in algorithm
                                               and topology.collectives.protocol_model == "nccl")):
        algorithm = Tuner(topology, nodes, g).choose(op, world(layout.n), size_bytes,
                                                     symmetric_only=mode != "full", algorithm=algorithm,
                                                     protocol=protocol)
        protocol = None
    algo = make_algorithm(op, algorithm, layout, size_bytes, topology.collectives.channels, protocol)
    check_hardware(algo, topology)
    ProtocolCost(algo.family, algo.protocol, topology.collectives.protocol_model)  # raises on a bad pair
    if mode == "symmetric" and not algo.symmetric:
        raise SpecError("<argument>", "mode", f"{op}:{algo.name} is not symmetric with these channels")
    symmetric = algo.symmetric if mode == "auto" else mode == "symmetric"
    quotient = None
    if mode == "auto" and relabelling(algo) == "shift":
        # a fabric whose nodes differ (fat_tree_3tier, several leaves): the ranks of one shift unit, exactly
        quotient = make_quotient(topology, nodes, g)
        symmetric = symmetric and quotient is None
    if symmetric:
        # fabrics whose nodes are not all alike (fat_tree_3tier) check the schedule itself; None elsewhere
        problem = Fabric.symmetry_problem(topology, nodes, gpus_per_node=g, steps_of_rank=algo.steps,
                                          relabelling=relabelling(algo))
        if problem is not None:
            if mode == "symmetric":
                raise SpecError("<argument>", "mode", f"{op}:{algo.name} is not symmetric here: {problem}")
            symmetric = False
    fabric = quotient.fabric if quotient is not None else Fabric(topology, nodes, gpus_per_node=g,
                                                                 symmetric=symmetric)
    sim = Simulation(seed=seed, record=record)
    net = (quotient.network(sim, record_usage) if quotient is not None
           else FlowNetwork(sim, fabric.capacities, fabric.names, record_usage=record_usage))
    co = topology.collectives
    if layout.n > 1:
        # alone on the network: repeated steps are collapsed, unless every link's load over time is asked for
        proc = sim.process(collective_process(sim, fabric, net, algo,
                                              launch_s=co.launch_s if include_overheads else 0.0,
                                              sync_s=co.sync_s if include_overheads else 0.0,
                                              alone=not record_usage, quotient=quotient))
        sim.run(until=proc)
    t = sim.now
    n = layout.n
    # bytes of the whole collective, whatever was simulated: the symmetric mode runs one representative rank, the
    # quotient mode the ranks of one shift unit, and every rank of a symmetric schedule moves the same bytes
    simulated = 1 if symmetric else quotient.unit_ranks if quotient is not None else n
    scale = n / simulated if layout.n > 1 else 1.0
    algbw = size_bytes / t / 1e9 if t > 0 else 0.0
    res = CollectiveResult(op=op, algorithm=algo.name, protocol=algo.protocol, size_bytes=float(size_bytes), nodes=nodes,
                           gpus_per_node=g, ranks=n, time_s=t, algbw_gbps=algbw,
                           busbw_gbps=algbw * BUSBW_FACTOR[op](n) if n > 1 else 0.0,
                           mode="quotient" if quotient is not None else "symmetric" if symmetric else "full",
                           events=sim.events,
                           wall_s=time.perf_counter() - wall0, injected_bytes=net.injected_bytes * scale,
                           delivered_bytes=net.delivered_bytes * scale)
    if return_sim:  # in the quotient mode the network has the links of one shift unit, as the Quotient has
        return res, sim, quotient if quotient is not None else fabric, net
    return res
