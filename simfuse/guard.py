"""Cost guard: estimate what a simulation will cost from sizes alone, before building anything.

The estimate (order of magnitude, documented so that users can reason about it):

* ``R = nodes x gpus_per_node`` ranks; ``R_sim`` simulated ranks: 1 in the symmetric / class modes (a few classes
  for uneven DLRM placements, counted as 2), ``R`` in full mode.
* ``W``: workgroups of the heaviest fused kernel per rank (embedding bags: ``tables_per_rank x global_batch /
  bags_per_wg``, for DLRM with the bags of a workgroup a divisor of a GPU's batch as the kernel cuts them, twice
  for DLRM's forward and backward; GEMM/GEMV tiles for the other operators); ``waves =
  ceil(W / slots)`` with ``slots = compute_units x max_workgroups_per_cu``.  A DLRM workload (its batch after
  ``--global-batch`` / ``--batch-per-gpu``) counts one record per *wave*: its kernels run without per-workgroup
  arrays; its flows are at most ``MAX_PUSH_WAVES`` push points x 64 destination groups per kernel.
* ``workgroup records = R_sim x W``: every simulated rank keeps per-workgroup arrays (order, slice, destination,
  overhead), about :data:`BYTES_PER_WG_RECORD` bytes each, and touches each once per step.  Measured on the
  reference machine (``op --op embedding_all_to_all --mode full --nodes 4``, global batch 16,384 to 262,144:
  2.1 M to 33.5 M records, 1.1 s to 11 s, 0.12 to 1.2 GB): ~0.33 us and ~40 bytes per record.
* ``flows <= R_sim x min(W / slice_wgs, waves x (R - 1))``: a slice's put leaves when its last workgroup ends;
  slices of one wave bound for one rank share a flow.  ``events ~ R_sim x waves + 2 x flows``.

* DLRM runs also pay their flow solves (:data:`DLRM_SECONDS_PER_EVENT` per estimated event in full simulation,
  :data:`DLRM_SECONDS_PER_CLASS` and :data:`DLRM_SECONDS_PER_CLASS_FLOW` with rank classes; measured) in every
  simulation of the run (``DLRMWorkload.estimate``: the modes asked for, two candidate plans each with a planned
  placement, the fused knob grid where its screen would let it run, the interval's runs), each mode and plan with
  its own simulated ranks (read off the placement where cheap, else ``DLRMWorkload.simulated_ranks``,
  :mod:`simfuse.workloads.dlrm_workload`), and their work per rank outside the simulations
  (:data:`DLRM_SECONDS_PER_RANK_TABLE`, more with a planned placement); a run's candidate simulations after its
  first, and its interval's runs, are shared by its workers.  A run estimated above :data:`NOTE_SECONDS` gets a one-line note (``run``) with what is cheaper.

A run whose estimate exceeds :data:`MAX_WG_RECORDS` workgroup records, :data:`MAX_EVENTS` events or
:data:`MAX_SECONDS` seconds is refused with
a message saying what it would cost and how to make it cheaper (a symmetric / class mode, fewer nodes, a smaller
batch, larger slices), unless ``force`` is given (``--force`` on ``run``, ``op`` and ``sweep``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .errors import SpecError

#: Refuse (without ``force``) above this many simulated workgroup records (~8 s and ~1 GB measured).
MAX_WG_RECORDS = 25_000_000
#: Refuse (without ``force``) above this many estimated simpy events (~60 s at 0.3 M events/s).
MAX_EVENTS = 20_000_000
#: Measured cost of one workgroup record (see the module docstring).
SECONDS_PER_WG_RECORD = 0.33e-6
BYTES_PER_WG_RECORD = 40
SECONDS_PER_EVENT = 1 / 300_000
#: A DLRM simulation's events cost far more than an operator's: each starts or ends flows that the flow network
#: re-solves with every flow in flight.  Full simulation (every rank, up to FULL_SIM_MAX_RANKS = 64):
#: :data:`DLRM_SECONDS_PER_EVENT` per *estimated* event at 64 pushing ranks x 63 peers, times
#: ``(pushers x peers / 4032) ** DLRM_EVENT_PAIR_EXPONENT`` (pushers: the simulated ranks holding tables); a fused
#: simulation's flows grow as its push points ``** DLRM_PUSH_EXPONENT`` (its flows are grouped per peer class, so
#: 128 push points cost 1.1-1.6x what 53 do, not 2.4x; a baseline's bulk exchange starts its flows once).  The
#: estimate is of wall time: a run's candidate simulations after its first are shared by its workers, as
#: simfuse.workloads.dlrm_candidates schedules them.  Fit (experiments/bench/fit_guard_dlrm.py --push-exponent 0.5:
#: squared log ratio plus a penalty beyond 1.9x) to the wall time of `simfuse run` (two workers) on every shipped
#: DLRM file at 1-16,384 nodes (2-core VM, 2026-12-07, bench_targets run at commit 83f7c09, 19:31-19:39 UTC:
#: experiments/results/bench_guard_fit.csv; the guard reading the placement of every planned run up to 8,192 ranks,
#: each candidate plan's classes, busiest units and knob-grid screen): 36 of 36 fully simulated points within 2x,
#: 0.50-1.89.  Checked on later runs (experiments/results/bench_targets.csv, bc90685, 23:02-23:10 UTC, its guard
#: columns re-priced at 7dc977e): 201 of 201 run points within 2x, 0.51-1.95, after the guard came to read
#: placements up to 16,384 ranks and to price the candidates' schedule the run takes from the estimate.
DLRM_SECONDS_PER_EVENT = 2.95e-5
DLRM_EVENT_PAIR_EXPONENT = 0.0
DLRM_PUSH_EXPONENT = 0.5
#: A run with ``rate_resolution_ns=0`` (the exact fluid model: rates re-shared at every flow start and finish)
#: pays its flow solves this many times over the default grid's (simfuse.network.flows.RATE_RESOLUTION_S): the
#: median wall-time ratio of the MLPerf-family files at 4, 8 and 64 nodes, 1.2-3.6x
#: (experiments/results/bench_resolution.csv, one worker, 2026-12-07).
DLRM_EXACT_RATE_FACTOR = 2.1
#: Rank classes (uneven placements beyond 64 ranks; up to 16,384 ranks and 64 nodes counted from the placement
#: itself, one orbit class a node for a planned MLPerf placement, and a table-wise placement's at any size), per
#: simulation:
#: :data:`DLRM_SECONDS_PER_CLASS` per simulated class (its program), plus, per class holding tables (the others
#: only receive), :data:`DLRM_SECONDS_PER_CLASS_FLOW` per peer group (at most 64) and push point
#: ``** DLRM_PUSH_EXPONENT`` (a baseline's bulk exchange: one), times ``(those classes x peers / 4032) **
#: DLRM_CLASS_PAIR_EXPONENT`` (an event re-solves the flows in flight, which grow with them: a 64-class baseline
#: simulation of an MLPerf plan took 0.7-2.3 s, a 13-class one 0.13 s); a run's work outside its simulations
#: (placement, the planner's candidates, per-rank arrays) is :data:`DLRM_SECONDS_PER_RANK_TABLE` per rank and table
#: (:data:`DLRM_PLANNED_SECONDS_PER_RANK_TABLE` more with a planned placement), and :data:`DLRM_SECONDS_FIXED`
#: once.  The class and rank-table constants: the same fit on the same CSV's runs that simulate classes (113 of 114
#: within 2x, 0.48-1.82); the planned and fixed terms: a least-squares fit (relative error, non-negative) to the
#: CPU time of `simfuse run` on the ten shipped DLRM files at 1, 2, 16, 128 and 16,384 nodes (2026-12-07 01:45 UTC).
DLRM_SECONDS_PER_CLASS = 1.06e-3
DLRM_SECONDS_PER_CLASS_FLOW = 1.19e-4
DLRM_CLASS_PAIR_EXPONENT = 0.3
DLRM_SECONDS_PER_RANK_TABLE = 0.562e-6
DLRM_PLANNED_SECONDS_PER_RANK_TABLE = 1.0e-6
DLRM_SECONDS_FIXED = 0.09
#: A run estimated above this many seconds is refused (without ``force``) whatever its records and events.
MAX_SECONDS = 1800.0
#: A run estimated above this many seconds runs, with a note saying so and what would be cheaper.
NOTE_SECONDS = 60.0


@dataclass(frozen=True)
class CostEstimate:
    """What a simulation will cost (see the module docstring for how each number is estimated)."""

    what: str
    ranks: int
    simulated_ranks: int
    workgroups_per_rank: int
    waves_per_rank: int
    flows: int
    events: int
    #: wall time beyond the per-record / per-event terms (DLRM: its flow solves, over all its simulations)
    extra_seconds: float = 0.0

    @property
    def wg_records(self) -> int:
        return self.simulated_ranks * self.workgroups_per_rank

    @property
    def seconds(self) -> float:
        """Wall time, from the workgroup records (flows and events are upper bounds: puts of one wave to one
        rank share a flow group, so they count for less)."""
        return self.wg_records * SECONDS_PER_WG_RECORD + self.events * SECONDS_PER_EVENT * 0.1 + self.extra_seconds

    @property
    def memory_bytes(self) -> float:
        return float(self.wg_records * BYTES_PER_WG_RECORD)

    @property
    def too_expensive(self) -> bool:
        return self.wg_records > MAX_WG_RECORDS or self.events > MAX_EVENTS or self.seconds > MAX_SECONDS

    def describe(self) -> str:
        return (f"{self.what}: ~{self.wg_records:.2g} workgroup records on {self.simulated_ranks} of {self.ranks} "
                f"ranks, <= {self.events:.2g} events (~{self.seconds:,.0f} s, ~{self.memory_bytes / 1e9:,.1f} GB)")


#: A symmetric simulation (one rank) groups its flows of a wave by route class, not by peer: on a rail fabric
#: inside the node, the same rail, another rail; a 3-tier fabric adds its pod levels.  So a symmetric graph's
#: kernel costs at most this many flow groups a wave, however many ranks it pushes to: the TP decode's runs stay
#: within 0.071-0.076 s from 1 to 64 nodes while their peers grow 64-fold (bench_guard_fit.csv).  The MoE layer's
#: runs grow with their peers up to 64 nodes there, so its pushes keep one flow a peer.
SYMMETRIC_ROUTE_CLASSES = 4
#: Per-GPU wall time of the symmetric graph workloads' per-rank arrays, once per run (the fused operators'
#: destination and ordering arrays of every workgroup, :func:`simfuse.fused.ops` ``wg_destinations``,
#: :mod:`simfuse.fused.base` ``order``: 0.47 of 1.5 s at 8,192 GPUs under cProfile): slopes of the run's wall
#: time against GPUs at 64-1,024 nodes, least squares on experiments/results/bench_guard_fit.csv (2-core VM, idle,
#: 2026-12-07, 83f7c09): MoE layer 49 us a GPU (intercept 0.13 s), TP decode 12 us a GPU (0.07 s); checked on a
#: later bench_targets.py run
MOE_SECONDS_PER_GPU = 49e-6
DECODE_SECONDS_PER_GPU = 12e-6


def _estimate(what: str, ranks: int, simulated: int, w: int, slots: int, slice_wgs: int = 1,
              kernels: int = 1, route_classes: int | None = None) -> CostEstimate:
    """``route_classes``: a symmetric simulation's flow groups per wave (None: one per peer)."""
    w = max(1, int(w))
    slots = max(1, int(slots))
    waves = math.ceil(w / slots)
    peers = max(1, ranks - 1) if route_classes is None else min(max(1, ranks - 1), route_classes)
    per_rank_flows = min(math.ceil(w / max(1, slice_wgs)), waves * peers) if ranks > 1 else 0
    flows = simulated * per_rank_flows * kernels
    events = simulated * waves * kernels + 2 * flows
    return CostEstimate(what, ranks, simulated, w * kernels, waves * kernels, flows, events)


def _slots(topology) -> int:
    return int(topology.device.compute_units) * int(topology.device.max_workgroups_per_cu)


def _op_workgroups(op_name: str, params: dict, nodes: int, g: int) -> int:
    """Workgroups of the operator's fused kernel per rank, from its parameters (no arrays built)."""
    from .fused.ops import OPS

    p = {**OPS[op_name].defaults, **params} if op_name in OPS else dict(params)

    def num(key, default=1.0):
        try:
            v = float(p.get(key, default))
        except (TypeError, ValueError):
            return default
        return v if math.isfinite(v) and v > 0 else default

    if op_name == "embedding_all_to_all":
        return int(num("tables_per_gpu") * num("global_batch") / num("bags_per_wg", 4))
    # GEMM / GEMV: output tiles; every size-like parameter bounds the tile count
    sizes = [num(k) for k in p if isinstance(p.get(k), (int, float)) and not isinstance(p.get(k), bool)]
    big = sorted(sizes, reverse=True)[:2]
    return int(max(1.0, math.prod(big) / (128.0 * 128.0)))


def estimate_op(op_name: str, params: dict, topology, nodes: int, gpus_per_node: int, mode: str = "auto",
                slice_wgs: int = 1, tile_order: str = "remote_first") -> CostEstimate:
    """Estimate ``simfuse op`` (baseline and fused runs)."""
    ranks = nodes * gpus_per_node
    symmetric = mode == "symmetric" or (mode == "auto" and tile_order == "remote_first")
    w = _op_workgroups(op_name, params, nodes, gpus_per_node)
    return _estimate(f"{op_name} on {nodes} x {gpus_per_node} GPUs ({'symmetric' if symmetric else 'full'})",
                     ranks, 1 if symmetric else ranks, w, _slots(topology), slice_wgs, kernels=2)


def interval_runs(spec, topology, execution) -> int:
    """How many more simulations (of every mode) a run's interval makes: ``bound`` 3 and ``mc`` its draws
    (with a calibration profile), ``inputs`` its draws plus two one-at-a-time runs per declared input range."""
    ex = execution
    method = "bound" if ex is None else ex.uncertainty
    draws = 16 if ex is None else ex.uncertainty_draws
    if method == "inputs":
        n_in = sum(len(getattr(getattr(o, "inputs", None), "ranges", ())) for o in (spec, topology))
        if n_in:
            extra = 0 if ex is not None and ex.sensitivity == "rank" else sum(
                len(r.extremes) for o in (spec, topology) for r in getattr(getattr(o, "inputs", None), "ranges", ()))
            return draws + extra
        method = "mc"
    if not topology.calibration:
        return 0
    return {"bound": 3, "mc": draws}.get(method, 0)


def estimate_workload(spec, topology, nodes: int, gpus_per_node: int, sim_mode: str = "auto",
                      execution=None, workers: int = 1) -> CostEstimate:
    """Estimate one simulation of a workload spec (DLRM: its whole run; ``execution``: the run's settings, for how
    many simulations it makes; None: the defaults).  ``workers``: processes the run's interval runs share (they
    run in parallel, :mod:`~simfuse.workloads.parallel`).  The workload counts what it simulates
    (:meth:`~simfuse.workloads.base.Workload.estimate`); this module's constants price it."""
    from .fused.knobs import ExecutionSpec
    from .workloads import workload_for

    return workload_for(spec).estimate(_pricing(), topology, nodes, gpus_per_node, sim_mode,
                                       execution if execution is not None else ExecutionSpec(), workers)


def _pricing():
    """This module: the prices (constants and helpers) a workload's estimate is made in."""
    import sys

    return sys.modules[__name__]


#: what makes each command's simulation cheaper (its own flags only)
CHEAPER = {"run": "--sim-mode classes, one --mode, --set uncertainty=none, fewer nodes, a smaller batch, larger "
                  "slices (slice_wgs)",
           "op": "fewer nodes, a smaller problem, larger slices (slice_wgs)",
           "collective": "fewer nodes or sizes"}
#: the symmetric mode, suggested to ``op`` / ``collective`` only when the estimate simulates every rank
SYMMETRIC = {"op": "--mode symmetric (with tile_order remote_first)",
             "collective": "--mode auto (one rank, or one pod of a 3-tier fabric, where the schedule allows)"}


def cheaper(estimate: CostEstimate, command: str = "run") -> str:
    """What makes ``command``'s run cheaper, its own flags only (:data:`CHEAPER`, :data:`SYMMETRIC`)."""
    hint = CHEAPER.get(command, CHEAPER["run"])
    full = estimate.ranks > 1 and estimate.simulated_ranks == estimate.ranks
    return f"{SYMMETRIC[command]}, {hint}" if full and command in SYMMETRIC else hint


def check_cost(estimate: CostEstimate, force: bool = False, field: str = "--force",
               command: str = "run") -> CostEstimate:
    """Raise :class:`SpecError` when ``estimate`` is beyond the limits and ``force`` is not set; the message names
    what makes ``command``'s run cheaper (:func:`cheaper`)."""
    if force or not estimate.too_expensive:
        return estimate
    raise SpecError("<argument>", field, f"{estimate.describe()} exceeds the cost guard ({MAX_WG_RECORDS:.2g} "
                    f"records, {MAX_EVENTS:.2g} events, {MAX_SECONDS:.0f} s); cheaper: "
                    f"{cheaper(estimate, command)}; or pass --force")


def cost_note(estimate: CostEstimate, command: str = "run") -> str | None:
    """A one-line note for a run the guard lets through that will still take a while (over :data:`NOTE_SECONDS`
    estimated), naming what is cheaper; None otherwise."""
    if estimate.seconds <= NOTE_SECONDS:
        return None
    return f"{estimate.describe()}; cheaper: {cheaper(estimate, command)}"


def estimate_collective(op: str, nodes: int, gpus_per_node: int, mode: str = "auto", sizes: int = 1) -> CostEstimate:
    """Estimate ``simfuse collective``: about ``2 (R - 1)`` flows per simulated rank and size (ring steps, or one
    flow per peer for direct algorithms); ``R_sim`` is 1 unless ``mode`` is ``full``."""
    ranks = nodes * gpus_per_node
    simulated = ranks if mode == "full" else 1
    flows = simulated * 2 * max(0, ranks - 1) * max(1, sizes)
    return CostEstimate(f"{op} on {nodes} x {gpus_per_node} GPUs ({mode})", ranks, simulated, 0, 0, flows,
                        3 * flows)


# ------------------------------------------------------------------------------------------------------------
# Pricing of the commands beyond one operator or DLRM run: collectives by their schedule, the simulations a run
# makes (its modes and interval draws), Chakra traces, fabric fits and sharding plans.  Measured 2026-12-06 on the
# 2-core dev VM (contended; h200_nvl8_ib_ndr, 8 GPUs a node), the ranges are what the measurements spanned.

#: Wall time per flow of a fully simulated collective (flows = simulated ranks x rank 0's flows in the tuner's
#: schedule): 21-68 us on the idle VM, 92-256 us under the load of other jobs, over all_to_all / all_reduce /
#: all_gather / reduce_scatter at 8-32 nodes, 4 KiB-64 MiB (ring flows are the cheap end).
COLLECTIVE_SECONDS_PER_FLOW = 60e-6
#: Relative cost of a flow in a schedule of more than 8 steps (rings): 21 us against 52-68 us for direct schedules.
RING_FLOW_WEIGHT = 0.5
#: Wall time of one node of a Chakra graph that is not a collective (compute, delay, send/recv), per simulated rank
#: (64-256 tiny ranks, full simulation, loaded VM: 50-60 us per event, about one event per node).
GRAPH_SECONDS_PER_NODE = 40e-6
#: Wall time of one send of a Chakra graph (its flow, the receive's rendezvous): 257-450 us measured on
#: send/recv rings of 64-256 ranks x 16-64 steps on the loaded VM (about a third of that idle).
P2P_SECONDS_PER_SEND = 200e-6
#: One simulation of an LLM workload, per layer: `simfuse run` (both modes, two simulations) takes 0.5-0.7 s of CPU
#: for Llama 3 8B (32 layers) and 2.5-2.9 s for 70B (80 layers) at 1-16,384 nodes (experiments/results/
#: bench_targets.csv, 2026-12-07 01:45 UTC run): 0.008-0.018 s a layer; other non-DLRM workloads: at least
#: SIM_FLOOR_S a simulation (MoE layer, TP decode: 0.035-0.045 s).
LLM_SECONDS_PER_LAYER = 0.014
SIM_FLOOR_S = 0.04
#: Above this many ranks a schedule is priced without being built (its arrays would be the cost).
MAX_SCHEDULE_RANKS = 1 << 16
#: Sizes priced one by one for a -b/-e range (the rest scaled from them).
PRICED_SIZES = 16
CHEAPER.update({"chakra": "--sim-mode auto (a trace whose ranks are alike runs one), fewer ranks",
                "fit-fabric": "a log with fewer distinct sizes, or fewer ranks"})


def _collective_flows(topology, op: str, nodes: int, g: int, size: float, mode: str, algorithm, protocol,
                      tuner=None) -> tuple[int, bool]:
    """Flows of rank 0 in the schedule the collective will run (the tuner's choice; no simulation), and whether
    that schedule is symmetric."""
    from .collectives.algorithms import Layout, make_algorithm
    from .collectives.groups import world
    from .collectives.runner import relabelling
    from .collectives.tuner import Tuner

    layout = Layout(nodes, g)
    if layout.n < 2:
        return 0, True
    if layout.n > MAX_SCHEDULE_RANKS:  # no schedule built: a ring's 2 (n - 1) steps of one flow per channel
        return 2 * (layout.n - 1) * max(1, int(topology.collectives.channels or g)), False
    if algorithm is None or "/" not in algorithm:
        tuner = tuner or Tuner(topology, nodes, g)
        algorithm = tuner.choose(op, world(layout.n), float(size), symmetric_only=mode != "full",
                                 algorithm=algorithm, protocol=protocol)
        protocol = None
    algo = make_algorithm(op, algorithm, layout, float(size), topology.collectives.channels, protocol)
    steps = algo.steps(0)
    flows = sum(len(peers) for peers, _ in steps)
    # a schedule of many small steps (rings) costs about half as much a flow as one of few wide steps (measured:
    # ring reduce_scatter 21 us a flow idle, direct all_gather / all_to_all 52-68 us)
    symmetric = algo.symmetric
    if symmetric and relabelling(algo) == "shift":
        # a schedule over neighbouring nodes (rings, neighbour trees) on a fabric whose nodes differ (fat_tree_3tier
        # with several leaves) is not symmetric: a standalone run takes the quotient mode (:func:`_run_cost`), a
        # collective inside a workload or a Chakra trace every rank
        from .network import Fabric

        try:
            symmetric = Fabric(topology, nodes, gpus_per_node=g, symmetric=True).node_transitive
        except SpecError:
            symmetric = False
    return int(flows * (RING_FLOW_WEIGHT if len(steps) > 8 else 1.0)), symmetric


#: A standalone collective's schedule is read step by step (built, scanned for repeated steps, by the tuner's
#: candidates and the run): about 2 us a step over all passes (2-core dev VM, 2026-12-07: a 1,024-node ring
#: reduce-scatter on the rail fabrics, 8,191 steps, 0.035-0.046 s in all).
COLLECTIVE_SECONDS_PER_STEP = 2e-6
#: The max-plus recursion of the quotient mode (simfuse.collectives.quotient), per step: 13 us at 256 simulated
#: ranks (1,024-node ring on h200_3tier_pods, 2-core dev VM, 2026-12-07).
MAX_PLUS_SECONDS_PER_STEP = 13e-6
#: A standalone collective's fixed cost (the tuner's set-up, the fabric): 0.010-0.017 s for a 512-1,024-node direct
#: all-to-all, one candidate (2-core dev VM, contended, 2026-12-07: experiments/results/bench_collectives.csv)
COLLECTIVE_FLOOR_S = 0.012
#: Each candidate the tuner simulates on the symmetric path at 512-1,024 nodes, beyond its flows: about 0.005 s (a
#: 512-1,024-node tree all-reduce with three candidates: 0.02-0.05 s in all, same VM)
COLLECTIVE_SECONDS_PER_CANDIDATE = 0.005
#: Relative cost of a flow of the quotient mode simulated step by step: 37-55 us a flow (a 1,024-node tree
#: all-reduce on h200_3tier_pods, 256 ranks x 30 flows, 0.28-0.41 s; same VM) against COLLECTIVE_SECONDS_PER_FLOW
QUOTIENT_FLOW_WEIGHT = 0.7
#: Building the full fabric a quotient run keeps one shift unit of, per rank: 0.1 s at 8,192 ranks (same run).
QUOTIENT_SECONDS_PER_RANK = 12e-6
#: Building and checking the schedules of a quotient run's simulated ranks, per rank and step (a ring's steps
#: are one shared object): 0.05-0.1 s for 256 ranks x 8,191 steps (same run).
QUOTIENT_SECONDS_PER_RANK_STEP = 4e-8


def _run_cost(topology, op: str, nodes: int, g: int, size: float, mode: str, algorithm, protocol,
              tuner) -> tuple[int, int, float, str]:
    """``(flows, simulated ranks, further seconds, path)`` of one standalone collective as :func:`simfuse.collectives.run
    .run_collective` runs it: ``full`` every rank; the symmetric path one rank whose repeated steps are simulated
    once (the collapse of a standalone run); on a fabric whose nodes differ, a schedule over neighbouring nodes
    the ranks of one shift unit (quotient mode), a ring of repeated steps by one simulated step and the max-plus
    recursion."""
    import numpy as np

    from .collectives.algorithms import Layout, make_algorithm
    from .collectives.groups import candidate_algorithms, world
    from .collectives.quotient import make_quotient
    from .collectives.runner import relabelling, same_step
    from .network import Fabric

    ranks = nodes * g
    f, symmetric = _collective_flows(topology, op, nodes, g, size, mode, algorithm, protocol, tuner)
    if mode == "full" or ranks > MAX_SCHEDULE_RANKS:
        sim = ranks if mode == "full" or not symmetric else 1
        return f * sim, sim, 0.0, "every rank" if sim > 1 else "one rank"
    floor = COLLECTIVE_FLOOR_S
    if algorithm is None or "/" not in algorithm:
        group = world(ranks)
        if algorithm is None:
            cands = candidate_algorithms(op, group, g, symmetric_only=True, topology=topology, size_bytes=float(size))
            if len(cands) > 1 and tuner.nccl_choice(op, group, float(size), cands) is None:
                floor += COLLECTIVE_SECONDS_PER_CANDIDATE * len(cands)  # the tuner simulates each
        algorithm = tuner.choose(op, group, float(size), symmetric_only=True, algorithm=algorithm, protocol=protocol)
        protocol = None
    algo = make_algorithm(op, algorithm, Layout(nodes, g), float(size), topology.collectives.channels, protocol)
    steps = algo.steps(0)
    runs = [st for i, st in enumerate(steps) if i == 0 or not same_step(st, steps[i - 1])]
    try:  # the symmetric path starts one flow group per route class and size of a step
        sym = Fabric(topology, nodes, gpus_per_node=g, symmetric=True)
        collapsed = sum(len({(c, z) for c, z in zip(sym.route_class(0, peers).tolist(),
                                                        np.broadcast_to(sz, np.shape(peers)).tolist(), strict=True)})
                        for peers, sz in runs)
    except SpecError:
        collapsed = sum(len(peers) for peers, _ in runs)
    quotient = make_quotient(topology, nodes, g) if mode == "auto" and relabelling(algo) == "shift" else None
    if quotient is not None:
        u = quotient.unit_ranks
        extra = (ranks * QUOTIENT_SECONDS_PER_RANK + u * len(steps) * QUOTIENT_SECONDS_PER_RANK_STEP
                 + len(steps) * COLLECTIVE_SECONDS_PER_STEP)
        if len(runs) == 1 and op != "all_to_all":
            return (u * len(steps[0][0]), u, floor + extra + len(steps) * MAX_PLUS_SECONDS_PER_STEP,
                    "one shift unit, one step")
        # a schedule of distinct steps, or a ring whose links several senders can fill (oversubscribed leaves,
        # GPUs sharing a NIC; known only once its first step is built): every step of one shift unit
        return (int(QUOTIENT_FLOW_WEIGHT * u * sum(len(peers) for peers, _ in steps)), u, floor + extra,
                "one shift unit, every step")
    if not symmetric:
        return ranks * f, ranks, floor, "every rank"
    return collapsed, 1, floor + len(steps) * COLLECTIVE_SECONDS_PER_STEP, "one rank"


def estimate_collective_run(topology, op: str, nodes: int, gpus_per_node: int, sizes, mode: str = "auto",
                            algorithm: str | None = None, protocol: str | None = None) -> CostEstimate:
    """Estimate ``simfuse collective`` from the schedule it will run (:func:`_run_cost`): every rank is simulated
    in ``full`` mode (and in ``auto`` when the chosen algorithm is neither symmetric nor invariant under the
    fabric's node shifts), one shift unit in the quotient mode, one rank on the symmetric path;
    :data:`COLLECTIVE_SECONDS_PER_FLOW` a flow plus the per-step terms.  Above :data:`PRICED_SIZES` sizes, an even
    sample is priced and scaled."""
    from .collectives.tuner import Tuner

    ranks = nodes * gpus_per_node
    sizes = list(sizes)
    sample = sizes if len(sizes) <= PRICED_SIZES else [sizes[round(i * (len(sizes) - 1) / (PRICED_SIZES - 1))]
                                                        for i in range(PRICED_SIZES)]
    tuner = Tuner(topology, nodes, gpus_per_node) if ranks > 1 else None
    flows = 0
    extra = 0.0
    simulated = 1
    paths = []
    for s in sample:
        if ranks < 2:
            break
        f, sim, x, path = _run_cost(topology, op, nodes, gpus_per_node, s, mode, algorithm, protocol, tuner)
        simulated = max(simulated, sim)
        flows += f
        extra += x
        paths.append(path)
    scale = len(sizes) / max(1, len(sample))
    flows = int(flows * scale)
    how = ", ".join(dict.fromkeys(paths)) or "nothing to simulate"
    return CostEstimate(f"{op} on {nodes} x {gpus_per_node} GPUs ({mode}: {how}; {len(sizes)} size(s))", ranks,
                        simulated, 0, 0, flows, 2 * flows, flows * COLLECTIVE_SECONDS_PER_FLOW + extra * scale)


def simulations_of_run(spec, topology, execution) -> int:
    """How many simulations a non-DLRM run makes: one per mode asked for, plus the interval's runs per mode
    (:func:`interval_runs`)."""
    from .fused.knobs import modes_of

    ex = execution
    modes = len(modes_of("both" if ex is None else ex.mode))
    return modes * (1 + interval_runs(spec, topology, ex))


def estimate_run(spec, topology, nodes: int, gpus_per_node: int, sim_mode: str = "auto",
                 execution=None, workers: int = 1) -> CostEstimate:
    """:func:`estimate_workload` with every simulation of the run counted (``simfuse run`` / a sweep point): DLRM
    counts its own; other workloads pay :func:`simulations_of_run` simulations of at least :data:`SIM_FLOOR_S`
    (:data:`LLM_SECONDS_PER_LAYER` a layer for LLMs; :meth:`~simfuse.workloads.base.Workload.estimate_run`)."""
    from .fused.knobs import ExecutionSpec
    from .workloads import workload_for

    return workload_for(spec).estimate_run(_pricing(), topology, nodes, gpus_per_node, sim_mode,
                                           execution if execution is not None else ExecutionSpec(), workers)


def estimate_graph(graph, topology, sim_mode: str = "auto") -> CostEstimate:
    """Estimate a Chakra trace run (``run --chakra``): every rank simulated when the graph has send/recv nodes,
    under ``--sim-mode full`` or when its ranks are not relabellings of one another; rank 0 alone otherwise.
    Each collective node costs its schedule's flows (:func:`estimate_collective_run`), other nodes
    :data:`GRAPH_SECONDS_PER_NODE`."""
    from .collectives.tuner import Tuner
    from .graph.ir import AllToAllVNode, CollectiveNode, RecvNode, SendNode
    from .graph.symmetry import fold

    g, ranks = graph.gpus_per_node, graph.n_ranks
    p2p = any(isinstance(nd, (SendNode, RecvNode)) for rg in graph.programs.values() for nd in rg.nodes)
    if p2p or sim_mode == "full" or not graph.full or ranks > 4096:
        simulated = ranks if graph.full else len(graph.programs)
    else:
        simulated = len(fold(graph, allow_classes=sim_mode != "full").programs)
    programs = list(graph.programs.values())
    # price rank 0's program (every simulated rank runs one like it: an estimate, not a count)
    rg0 = programs[0] if programs else None
    memo: dict = {}
    flows = other = sends = 0
    for nd in (rg0.nodes if rg0 is not None else []):
        if isinstance(nd, (CollectiveNode, AllToAllVNode)):
            members = len(graph.groups[nd.group].ranks)
            op = nd.op if isinstance(nd, CollectiveNode) else "all_to_all"
            key = (op, members, float(nd.size_bytes))
            if key not in memo:
                n_nodes = max(1, -(-members // g))
                gg = min(g, members)
                if n_nodes * gg != members or members < 2:
                    memo[key] = max(0, members - 1)  # a group that is not whole nodes: about one flow a peer
                else:
                    memo[key] = _collective_flows(topology, op, n_nodes, gg, nd.size_bytes, "full",
                                                  getattr(nd, "algorithm", None), None,
                                                  memo.setdefault(("tuner", n_nodes, gg),
                                                                  Tuner(topology, n_nodes, gg)))[0]
            flows += memo[key]
        elif isinstance(nd, SendNode):
            sends += 1
        else:
            other += 1
    flows *= simulated
    other *= simulated
    sends *= simulated
    return CostEstimate(f"Chakra trace {graph.name} on {graph.nodes} x {g} GPUs ({simulated} simulated ranks)",
                        ranks, simulated, 0, 0, flows + sends, 2 * (flows + sends) + other,
                        flows * COLLECTIVE_SECONDS_PER_FLOW + sends * P2P_SECONDS_PER_SEND
                        + other * GRAPH_SECONDS_PER_NODE)


#: fit-fabric, measured on a 2-node all-reduce log (2-core dev VM, idle, 2026-12-07, NCCL's algorithm set):
#: 12 / 50 / 200 distinct sizes took 0.92 / 2.19 / 10.3 s.  The fit's search costs ~75 simulations at its (at most
#: 12) sizes; each distinct size of the log ~7 more (the tuner's candidates in every refit round); each row one
#: tenth of one (the residuals; repeated sizes are memoised by the tuner).  A simulation of a small
#: collective on the symmetric path costs about FIT_SECONDS_PER_SIMULATION (measured, 2 x 8 all-reduce); one that
#: simulates every rank costs what its flows say (:data:`COLLECTIVE_SECONDS_PER_FLOW`).
FIT_SEARCH_SIMULATIONS = 75
FIT_SIMULATIONS_PER_SIZE = 7
FIT_SIMULATIONS_PER_ROW = 0.1
FIT_SECONDS_PER_SIMULATION = 0.006


def estimate_fit_fabric(log, topology) -> CostEstimate:
    """Estimate ``simfuse fit-fabric`` on ``log`` (see the constants above for the counts)."""
    ranks = int(log.ranks)
    nodes = int(log.nodes or 1)
    g = max(1, ranks // max(1, nodes))
    rows = [r for r in log.rows if r.size_bytes > 0 and r.time_s > 0]
    distinct = sorted({float(r.size_bytes) for r in rows})
    per_sim = FIT_SECONDS_PER_SIMULATION
    if distinct and ranks >= 2 and nodes * g == ranks:
        from .names import canonical_collective

        try:
            op = canonical_collective(log.collective, log.source)
            mid = distinct[len(distinct) // 2]
            est = estimate_collective_run(topology, op, nodes, g, [mid], "auto")
            if est.simulated_ranks > 1:  # every rank simulated: the flow model (measured on such runs) applies
                per_sim = max(per_sim, est.seconds)
        except Exception:  # noqa: BLE001 - pricing never decides validity; fit_fabric reports the problem itself
            per_sim = FIT_SECONDS_PER_SIMULATION
    sims = FIT_SEARCH_SIMULATIONS + FIT_SIMULATIONS_PER_SIZE * len(distinct) + FIT_SIMULATIONS_PER_ROW * len(rows)
    return CostEstimate(f"fit-fabric of {log.source} ({len(rows):,} rows, {len(distinct):,} sizes, {ranks} ranks)",
                        ranks, 1, 0, 0, 0, int(sims), sims * per_sim)
