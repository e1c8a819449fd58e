"""Drive collective algorithms over a :class:`~simfuse.network.FlowNetwork` as simpy processes."""

from __future__ import annotations

import dataclasses

import numpy as np
import simpy

from ..engine import Simulation
from ..errors import SpecError
from ..network import INTRA, SELF, Fabric, FlowNetwork
from ..spec import TopologySpec
from .algorithms import Algorithm, _Ring, missing_hardware
from .posting import PostRule, bulk_rule, post_gates, post_queue
from .protocols import ProtocolCost, algorithm_rate_factors, ring_steps


class FlowGroupCache:
    """Memoises ``fabric.flow_groups`` for repeated identical steps (rings repeat one step ``2(n-1)`` times)."""

    def __init__(self, fabric: Fabric):
        self.fabric = fabric
        self._cache: dict = {}
        # collectives are rank-symmetric: with rank classes, a rank's partners receive as much as it does
        self.same_class = True

    def __call__(self, src: int, dsts: np.ndarray, sizes: np.ndarray, via: tuple[str, ...] = ()):
        key = (src, dsts.tobytes(), np.asarray(sizes, dtype=float).tobytes(), via)
        hit = self._cache.get(key)
        if hit is None:
            hit = self.fabric.flow_groups(src, dsts, sizes, same_class=self.same_class, via=via)
            if len(self._cache) < 4096:
                self._cache[key] = hit
        return hit


def start_groups(net: FlowNetwork, groups, tag=None) -> list[simpy.Event]:
    """Start flow groups on the network; returns their completion events."""
    return [net.transfer(g.links, g.size_bytes, g.latency_s, count=g.count, weights=g.weights, tag=tag)
            for g in groups]


def protocol_cost(fabric: Fabric, algo) -> ProtocolCost:
    """The protocol costs of ``algo`` (an Algorithm or GroupAlgorithm) on ``fabric``'s topology; a ring across
    nodes carries NCCL's step counts (:func:`~.protocols.ring_steps`) for its latency accounting."""
    co = fabric.topology.collectives
    fill, net = algorithm_rate_factors(fabric.topology, algo)
    L = algo.layout
    ring = ring_steps(algo.op, L.n, L.nodes) if isinstance(getattr(algo, "algo", algo), _Ring) and L.nodes > 1 \
        else (0, 0)
    return ProtocolCost(getattr(algo, "family", "ring"), getattr(algo, "protocol", "Simple"), co.protocol_model,
                        multi_node=L.nodes > 1, net_overhead_s=co.net_overhead_s,
                        p2p=getattr(algo, "op", "") == "all_to_all", rate_factor=fill, net_rate_factor=net,
                        ring=ring, fabric_latency_s=(fabric.intra_latency_s, fabric.inter_latency_s))


class ProtocolGroups:
    """Wraps a flow-group function with a protocol's costs: bytes on the wire ``x wire_factor``, each flow's last
    byte after ``max(fabric latency, NCCL hop latency)`` -- in a multi-node ring every flow of a step after the
    mean hop latency of one chunk's path, NCCL's ring latency spread evenly over the steps
    (:meth:`~.protocols.ProtocolCost.ring_step_latency_s`; the inter-node wire latency is the larger of the
    fabric's and the step's own off-node flows') -- routed through the algorithm's switch reductions
    (``via``).  ``per_peer`` (point-to-point steps: all-to-all): the proxy posts every off-node send by the
    per-destination rule of :mod:`.posting` (``collectives.net_overhead_us`` per message, one message per
    128 KiB chunk, one serial queue per GPU), overlapped with the flows; :meth:`start` starts a step's flows
    and gates each off-node one by its post."""

    def __init__(self, groups_fn, cost: ProtocolCost, via: tuple[str, ...] = (), per_peer: bool = False,
                 rule: PostRule | None = None, n_ranks: int = 0):
        self.groups_fn, self.cost, self.via, self.per_peer = groups_fn, cost, tuple(via), per_peer
        self._lat = {False: cost.hop_latency_s(False), True: cost.hop_latency_s(True)}
        self.rule = rule if (per_peer and cost.active and rule is not None and rule.active) else None
        self.n_ranks = n_ranks

    def __call__(self, src, dsts, sizes):
        wf = self.cost.wire_factor
        sizes = np.asarray(sizes, dtype=float) * wf if wf != 1.0 else sizes
        gs = self.groups_fn(src, dsts, sizes, via=self.via) if self.via else self.groups_fn(src, dsts, sizes)
        if not self.cost.active:
            return gs
        out, nf = [], self.cost.net_rate_factor
        ring_lat = None
        if self.cost.ring[0]:
            fab_intra, fab_inter = self.cost.fabric_latency_s
            off = [g.latency_s for g in gs if g.route_class not in (SELF, INTRA)]
            ring_lat = self.cost.ring_step_latency_s(fab_intra, max([fab_inter, *off]))
        for g in gs:
            if g.route_class == SELF:
                out.append(g)
                continue
            lat = ring_lat if ring_lat is not None else max(g.latency_s, self._lat[g.route_class != INTRA])
            size = g.size_bytes * nf if g.route_class != INTRA else g.size_bytes
            out.append(g if (lat, size) == (g.latency_s, g.size_bytes) else
                       dataclasses.replace(g, latency_s=lat, size_bytes=size))
        return out

    def start(self, net: FlowNetwork, src: int, groups, tag=None) -> list:
        """Start ``groups`` (from :meth:`__call__`) on ``net``; ``[(group, completion event)]``, each off-node
        group's event no sooner than its last message's post plus its latency."""
        remote = [g.route_class not in (SELF, INTRA) for g in groups]
        gates = [None] * len(groups)
        if self.rule is not None and any(remote):
            wf, rule = self.cost.wire_factor, self.rule
            queue = post_queue(net, src, rule, tag)
            gates = post_gates(queue, float(net.env.now), src, self.n_ranks, list(zip(groups, remote, strict=True)),
                               lambda g: rule.messages(g.size_bytes / wf))
            self.posted_until = max(self.posted_until, queue.free_at)
        return [(g, net.transfer(g.links, g.size_bytes, g.latency_s, count=g.count, weights=g.weights, tag=tag,
                                 not_before_s=None if gate is None else gate + g.latency_s))
                for g, gate in zip(groups, gates, strict=True)]

    #: when the last message this wrapper's :meth:`start` posted is posted (s; 0 before any post)
    posted_until = 0.0


def _step_events(net, pg: ProtocolGroups, src, groups, label):
    return [ev for _g, ev in pg.start(net, src, groups, tag=label)]


def collective_process(sim: Simulation, fabric: Fabric, net: FlowNetwork, algo: Algorithm, *,
                       launch_s: float = 0.0, sync_s: float = 0.0, name: str | None = None,
                       rank: int = 0, groups_fn=None, record: bool = True, alone: bool = False,
                       quotient=None):
    """A simpy process running ``algo`` from start to finish (all ranks, or the representative under symmetry).

    Timing assumptions: ``launch_s`` (plus the protocol's base-latency offset from Simple's, see
    :mod:`.protocols`) elapses before the first step (kernel launch); each rank's step ``s`` starts when its step
    ``s-1`` sends are done and its step ``s-1`` receives have arrived; ``sync_s`` is added at the end
    (completion signalling).  The protocol scales the bytes on the wire and sets each hop's latency; in an
    all-to-all each off-node send is posted by the proxy at ``collectives.net_overhead_us`` per message
    (:mod:`.posting`; ``protocol_model: nccl``).  Returns the finishing time (s).

    ``alone``: the collective has the network to itself (a standalone run, nothing else in the simulation).
    Then, in symmetric mode, a run of identical steps (a ring's ``2(n-1)`` or ``n-1``) is simulated once and
    repeated: each of its steps starts on an idle network with the same flows, so each lasts as long as the
    first (:func:`_symmetric_steps`).  Inside a workload other flows share the links: leave it False.
    ``quotient``: a :class:`~.quotient.Quotient` (a fabric in full mode whose ranks of one shift unit are
    simulated, :mod:`.quotient`); ``fabric`` is then its full fabric.
    """
    env = sim.env
    t0 = env.now
    label = name or f"{algo.op}:{algo.name}"
    if groups_fn is None:
        groups_fn = quotient.flow_groups if quotient is not None else FlowGroupCache(fabric)
    cost = protocol_cost(fabric, algo)
    pg = ProtocolGroups(groups_fn, cost, getattr(algo, "via", ()), per_peer=algo.op == "all_to_all",
                        rule=bulk_rule(fabric.topology.collectives), n_ranks=fabric.n_ranks)
    launch_s = cost.launch_gap_s(launch_s)
    if launch_s > 0:
        yield env.timeout(launch_s)
    if quotient is not None:
        yield from quotient.run(sim, net, algo, pg, label, alone=alone)
    elif fabric.symmetric:
        if not algo.symmetric:
            raise RuntimeError(f"{label} is not symmetric on this layout; use a full fabric")
        yield from _symmetric_steps(env, net, pg, rank, algo.steps(rank), label, collapse=alone and pg.rule is None)
    else:
        yield from _full_mode(sim, fabric, net, algo, pg, label)
    if sync_s > 0:
        yield env.timeout(sync_s)
    if record:
        sim.recorder.add("collective", label, f"gpu{rank}/comm", rank, t0, env.now, size_bytes=algo.size_bytes,
                         ranks=fabric.n_ranks)
    return env.now


def same_step(a, b) -> bool:
    """Whether two steps ``(dsts, sizes)`` are the same (the same object, or equal arrays)."""
    if a is b:
        return True
    return np.array_equal(a[0], b[0]) and np.array_equal(np.broadcast_to(a[1], np.shape(a[0])),
                                                          np.broadcast_to(b[1], np.shape(b[0])))


def _bytes_moved(net) -> tuple:
    return net.injected_bytes, net.delivered_bytes, net.carried_bytes.copy()


def repeat_bytes(net, before: tuple, times: int) -> None:
    """Count the bytes ``net`` moved since ``before`` (:func:`_bytes_moved`) ``times`` more times: the steps a
    collapse does not simulate move them too (injected, delivered and each link's carried bytes)."""
    inj, dlv, car = before
    net.injected_bytes += times * (net.injected_bytes - inj)
    net.delivered_bytes += times * (net.delivered_bytes - dlv)
    net.carried_bytes += times * (net.carried_bytes - car)


def _symmetric_steps(env, net, pg, rank, steps, label, collapse: bool):
    """The representative rank's steps, one after the other.  ``collapse``: the network carries nothing but this
    collective, and a step that equals the one before starts, like it, on an idle network (every flow of the
    step before has arrived) with the same flows, so it lasts as long: the rest of a run of equal steps is one
    timeout of (count x the first one's duration)."""
    i, n = 0, len(steps)
    while i < n:
        dsts, sizes = steps[i]
        j = i + 1
        if collapse:
            while j < n and same_step(steps[j], steps[i]):
                j += 1
        idle = net.active_groups == 0
        t_start, before = env.now, _bytes_moved(net)
        evs = _step_events(net, pg, rank, pg(rank, dsts, sizes), label)
        if evs:
            yield simpy.AllOf(env, evs)
        if j - i > 1 and idle and net.active_groups == 0:
            repeat_bytes(net, before, j - i - 1)
            yield env.timeout((j - i - 1) * (env.now - t_start))
        else:
            j = i + 1
        i = j


def _full_mode(sim, fabric, net, algo, groups_fn, label, simulated: int | None = None, schedules=None):
    """Every rank of ``algo`` as its own process.  ``simulated``: only ranks ``0 .. simulated-1`` run (the
    quotient mode, :mod:`.quotient`), each standing for its translates ``r + k simulated``: a flow to ``d`` is
    received by ``d mod simulated``; ``schedules``: their steps, when already built."""
    env = sim.env
    n = fabric.n_ranks if simulated is None else simulated
    members = list(range(n)) if simulated is not None else (getattr(algo, "members", None) or list(range(n)))
    if schedules is None:
        schedules = [[] for _ in range(n)]
        for r in members:
            schedules[r] = algo.steps(r)
    n_steps = max((len(s) for s in schedules), default=0)
    if n_steps == 0:
        return
    incoming = np.zeros((n, n_steps), dtype=np.int64)
    for steps in schedules:
        for s, (dsts, _sizes) in enumerate(steps):
            np.add.at(incoming[:, s], np.asarray(dsts) % n, 1)
    remaining = incoming.copy()
    recv = [[env.event() for _ in range(n_steps)] for _ in range(n)]
    for r in range(n):
        for s in range(n_steps):
            if incoming[r, s] == 0:
                recv[r][s].succeed()

    def arrived(dst_ranks, s):
        def cb(_ev):
            for d in dst_ranks:
                remaining[d, s] -= 1
                if remaining[d, s] == 0:
                    recv[d][s].succeed()
        return cb

    def rank_proc(r):
        steps = schedules[r]
        for s, (dsts, sizes) in enumerate(steps):
            if s > 0:
                yield recv[r][s - 1]
            evs = []
            for grp, ev in groups_fn.start(net, r, groups_fn(r, dsts, sizes), tag=label):
                ev.callbacks.append(arrived((grp.dsts % n).tolist(), s))
                evs.append(ev)
            if evs:
                yield simpy.AllOf(env, evs)
        yield recv[r][n_steps - 1]

    procs = [env.process(rank_proc(r)) for r in members]
    yield simpy.AllOf(env, procs)


def simulate_group_collective(topology: TopologySpec, nodes: int, gpus_per_node: int, op: str, algorithm: str,
                              group, size_bytes: float) -> float:
    """Time (s) of one collective on ``group`` with every group of its shape doing the same at once (symmetric
    fast path) when the algorithm is symmetric there, else on the physical links with only this group active.
    Launch and completion overheads included."""
    from .groups import make_group_algorithm

    algo = make_group_algorithm(op, algorithm, group, gpus_per_node, size_bytes, topology.collectives.channels)
    check_hardware(algo, topology)
    ProtocolCost(algo.family, algo.protocol, topology.collectives.protocol_model)  # raises on a bad pair
    symmetric = algo.symmetric
    if symmetric and group.size == nodes * gpus_per_node <= 64:
        # fabrics whose nodes differ (fat_tree_3tier) check the schedule; None on node-transitive fabrics.  On
        # bigger systems the tuner ranks candidates on the representative-rank approximation (a full simulation
        # of every candidate would dominate the run), which is also what the executor's fast path runs
        symmetric = Fabric.symmetry_problem(topology, nodes, gpus_per_node=gpus_per_node,
                                            steps_of_rank=algo.steps, relabelling=relabelling(algo)) is None
    elif symmetric:
        # a fabric with no symmetric form at this size (fat_tree_3tier with a partly filled leaf or pod): ranking
        # the candidates by full simulation of each would take minutes (384 GPUs: ~10 min on 2 cores)
        problem = Fabric.symmetry_problem(topology, nodes, gpus_per_node=gpus_per_node)
        if problem is not None:
            raise SpecError(topology.source, "nodes",
                            f"{nodes} nodes leave a leaf or pod partly filled, so the fabric has no symmetric form "
                            "to rank the tuner's candidates on: use whole leaves and pods, or (simfuse collective) "
                            "name --algorithm and --protocol to simulate every rank")
    fabric = Fabric(topology, nodes, gpus_per_node=gpus_per_node, symmetric=symmetric)
    sim = Simulation(seed=0, record=False)
    net = FlowNetwork(sim, fabric.capacities, fabric.names)
    co = topology.collectives
    proc = sim.process(collective_process(sim, fabric, net, algo, launch_s=co.launch_s, sync_s=co.sync_s,
                                          rank=group.ranks[0], record=False, alone=True))
    sim.run(until=proc)
    return sim.now


def relabelling(algo) -> str:
    """The node relabellings ``algo``'s schedule is invariant under (:data:`simfuse.network.RELABELLINGS`); an
    algorithm on a group is taken as ``shift`` (the group's own numbering is not the fabric's)."""
    if hasattr(algo, "group"):
        return "shift"
    return getattr(algo, "relabelling", "shift")


def check_hardware(algo, topology) -> None:
    """SpecError when ``algo`` needs an in-network reduction the topology does not declare."""
    missing = missing_hardware(algo, topology)
    if missing:
        where = {"nvls": "scale_up.nvls", "sharp": "scale_out.sharp"}
        raise SpecError(topology.source, where[missing[0]],
                        f"{algo.op}:{algo.name} needs {missing[0]} (in-network reduction); the topology does not "
                        f"declare it ({where[missing[0]]}: true)")
