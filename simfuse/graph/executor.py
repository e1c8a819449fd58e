"""The one executor: runs any operator graph (:mod:`simfuse.graph.ir`) on a system's fabric with simpy.

Simulated ranks (*entities*):

* every rank, on the physical links (``Graph.full``: a program per rank);
* class representatives on class links (``Graph.class_of_rank`` given): each class's links carry one member's
  share; exact when a class's members run relabellings of the representative's program and spread their
  traffic evenly (:meth:`simfuse.network.Fabric.set_rank_classes`);
* rank 0 alone (a single program, no classes): every rank runs a relabelling of rank 0's program (symmetric
  fast path, exact under that assumption; :func:`simfuse.graph.symmetry.check_symmetric` verifies it).

Timing assumptions per node kind (the executor is the only place that turns nodes into simpy processes):

* a stream runs its nodes in program order; a node starts when its stream is free and its deps are done;
* ``ComputeNode``: the kernel's waves on the GPU (:func:`simfuse.engine.run_kernel`, launch latency included) or
  a fixed ``time_s``; the stream is released and the node done when it ends;
* ``CollectiveNode``: a rendezvous of the group's simulated members (a collective starts when every member
  has launched it), then the algorithm (tuner's choice unless named) with its launch gap and completion
  signalling; full simulation runs the whole group once, the fast paths run the representative's schedule on
  class links; a group of one rank costs nothing;
* ``AllToAllVNode``: launch gap, then each flow starts once its receiver has launched too; done when every
  flow addressed to this rank has arrived, plus the completion signalling; with the protocol the tuner picks
  for a direct all-to-all of that per-peer size (:class:`~simfuse.collectives.exchange.BulkProtocols`);
* ``FusedNode``: the fused operator's kernel (pushes as workgroups finish); the stream is released when the
  kernel ends, the node is done when the data addressed to this rank has arrived;
* ``SendNode``/``RecvNode``: the send starts when both sides have posted; both are done when it arrives;
* ``DelayNode``: a fixed wait.

Group operations are matched across ranks by (group, position among that group's operations in the program),
as communicators require.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import simpy

from ..collectives.exchange import BulkProtocols, ExchangeInstance
from ..collectives.posting import bulk_rule
from ..collectives.runner import (
    FlowGroupCache,
    ProtocolGroups,
    collective_process,
    protocol_cost,
    start_groups,
)
from ..collectives.tuner import GroupAlgorithms, Tuner
from ..engine import Simulation, run_kernel
from ..errors import SpecError
from ..fused.knobs import FusedKnobs
from ..network import Fabric, FlowNetwork
from .ir import AllToAllVNode, CollectiveNode, ComputeNode, DelayNode, FusedNode, Graph, RecvNode, SendNode


@dataclass
class EntityResult:
    """One simulated rank: ``end_s``, ``busy_s`` (time on compute streams), ``phases`` (label, start_s, end_s)."""

    rank: int
    members: int
    end_s: float = 0.0
    busy_s: float = 0.0
    phases: list = field(default_factory=list)
    #: kernels of several compute streams ran side by side (their GPU shared: engine.share)
    concurrent_compute: bool = False
    busy_intervals: list = field(default_factory=list)  # (start_s, end_s) of busy nodes, when concurrent_compute


#: ranks whose end is within this fraction of the step's end tie for the critical rank (the busiest of them is
#: reported): 0.1%, far above the sub-microsecond differences of ranks a collective releases together
CRITICAL_TIE_REL = 1e-3


@dataclass
class GraphResult:
    """Outcome of one graph run.  Times are per step times ``graph.repeat``."""

    time_s: float
    compute_time_s: float
    exposed_comm_time_s: float
    sim_mode: str
    entities: list[EntityResult]
    critical: EntityResult
    events: int
    wall_s: float
    algorithms: dict = field(default_factory=dict)  # (node name) -> algorithm chosen
    kernel_end_s: float = 0.0  # latest end of a compute-stream node (one step)
    repeat: int = 1  # the identical back-to-back steps the times cover (``Graph.repeat``); phases are one step's
    sim: object = None
    net: object = None
    fabric: object = None


class _Ctx:
    """What node implementations see: the simulation, fabric, network, cost model and topology; with orbit
    classes (``orbit_classes``) ``rep_of(rank)``, the simulated rank standing for ``rank`` (identity otherwise)."""

    def __init__(self, sim, fabric, net, cost, topology, rep_of=int, orbit_classes: bool = False):
        self.sim, self.fabric, self.net, self.cost, self.topology = sim, fabric, net, cost, topology
        self.rep_of, self.orbit_classes = rep_of, orbit_classes


def _is_compute_stream(stream: str) -> bool:
    return stream.startswith("compute")


def _union_s(intervals) -> float:
    """Total length of the union of ``(start, end)`` intervals (s)."""
    total, end = 0.0, float("-inf")
    for t0, t1 in sorted(intervals):
        if t1 <= end:
            continue
        total += t1 - max(t0, end)
        end = t1
    return total


class Executor:
    """Run ``graph`` on ``system`` (a :class:`simfuse.system.System`).

    ``tuner``: a shared :class:`~simfuse.collectives.tuner.Tuner` (reuse one across runs of the same system and
    node count to keep its memo); ``forced_algorithms``: ``{op: algorithm}`` for collectives that name none."""

    def __init__(self, system, graph: Graph, *, seed: int = 0, record: bool = False, record_usage: bool = False,
                 tuner: Tuner | None = None, forced_algorithms: dict | None = None, progress=None):
        graph.validate()
        self.progress = progress  # told the events and simulated time while running (simfuse.progress)
        self.system = system
        self.graph = graph
        self.topology = system.topology
        self.cost = system.cost
        self.seed = seed
        self.record = record
        self.record_usage = record_usage
        g, N = graph.gpus_per_node, graph.nodes
        self.tuner = tuner or Tuner(self.topology, N, g, forced_algorithms)
        n = graph.n_ranks
        if graph.full and n > 1:
            self.sim_mode = "full"
            self.fabric = Fabric(self.topology, N, gpus_per_node=g, symmetric=False)
            self.ent_ranks = sorted(graph.programs)
            self.ent_of_rank = np.arange(n, dtype=np.int64)
            self.members = [1] * n
        elif graph.class_of_rank is not None:
            self.sim_mode = "classes"
            self.fabric = Fabric(self.topology, N, gpus_per_node=g, symmetric=True)
            cls = np.asarray(graph.class_of_rank, dtype=np.int64)
            n_cls = self.fabric.set_rank_classes(cls)
            self.ent_ranks = [self.fabric.representative(c) for c in range(n_cls)]
            missing = [r for r in self.ent_ranks if r not in graph.programs]
            if missing:
                raise SpecError("<graph>", "programs", f"class representative rank {missing[0]} has no program")
            self.ent_of_rank = cls
            self.members = np.bincount(cls).tolist()
            # classes that are orbits of automorphisms of the graph and the fabric (graph.meta["orbit_classes"],
            # e.g. :func:`simfuse.graph.symmetry.shift_classes`): collectives then run as in full simulation
            # (:meth:`_class_collective`), and the run equals full simulation
            self.exact_classes = bool(graph.meta.get("orbit_classes", False))
        else:
            self.sim_mode = "symmetric"
            self.fabric = Fabric(self.topology, N, gpus_per_node=g, symmetric=True)
            self.ent_ranks = [0]
            self.ent_of_rank = np.zeros(n, dtype=np.int64)
            self.members = [n]
        self.entity_of = {r: i for i, r in enumerate(self.ent_ranks)}
        self.exact_classes = getattr(self, "exact_classes", False)

    # -- run ------------------------------------------------------------------------------------------------
    def run(self) -> GraphResult:
        wall0 = time.perf_counter()
        sim = Simulation(seed=self.seed, record=self.record, progress=self.progress)
        net = FlowNetwork(sim, self.fabric.capacities, self.fabric.names, record_usage=self.record_usage,
                          resolution_s=self.system.rate_resolution_s)
        self.sim, self.net, self.env = sim, net, sim.env
        orbit = self.sim_mode == "classes" and self.exact_classes
        if orbit:
            reps, ent = self.ent_ranks, self.ent_of_rank

            def rep_of(rank: int) -> int:
                return reps[int(ent[rank])]
        else:
            rep_of = int
        self.ctx = _Ctx(sim, self.fabric, net, self.cost, self.topology, rep_of, orbit)
        self._instances: dict = {}
        self._parts: dict = {}
        self._group_ranks: dict = {}
        self._p2p: dict = {}
        self._algorithms: dict = {}
        self._flow_cache = FlowGroupCache(self.fabric)
        self._class_flow_cache = FlowGroupCache(self.fabric)
        self._class_flow_cache.same_class = False  # classes: a flow loads its destination's class links
        # one memo of the tuner's choices for the run: collectives and bulk exchanges (direct only) share it
        self._group_algorithms = GroupAlgorithms(self.tuner, self.graph.gpus_per_node,
                                                 self.topology.collectives.channels,
                                                 symmetric_only=self.fabric.symmetric)
        self._bulk_protocols = BulkProtocols(self._group_algorithms, self.fabric)
        env = self.env
        results, all_done = [], []
        for e, rank in enumerate(self.ent_ranks):
            rg = self.graph.programs[rank]
            er = EntityResult(rank, self.members[e])
            results.append(er)
            done = [env.event() for _ in rg.nodes]
            all_done.extend(done)
            seq: dict[str, int] = {}
            keys = []
            for nd in rg.nodes:
                gname = getattr(nd, "group", None)
                if gname is None:
                    keys.append(None)
                else:
                    k = seq.get(gname, 0)
                    seq[gname] = k + 1
                    keys.append((gname, k))
            by_stream: dict[str, list] = {}
            for nd in rg.nodes:
                by_stream.setdefault(nd.stream, []).append(nd)
            kernel_streams = [st for st, nodes in by_stream.items() if _is_compute_stream(st) and any(
                isinstance(nd, FusedNode) or (isinstance(nd, ComputeNode) and nd.work is not None) for nd in nodes)]
            if len(kernel_streams) > 1:  # kernels of several compute streams share the GPU (engine.share)
                sim.enable_share(rank)
                er.concurrent_compute = True
            for nodes in by_stream.values():
                env.process(self._stream(e, er, nodes, done, keys))
        if all_done:
            sim.run(until=simpy.AllOf(env, all_done))
        for r in results:  # overlapping compute streams: busy is the union of their intervals, not the sum
            if r.concurrent_compute:
                r.busy_s = _union_s(r.busy_intervals)
        rep = max(1, int(self.graph.repeat))
        t = max((r.end_s for r in results), default=0.0)
        # the critical rank: the busiest of the ranks that end with the step (within CRITICAL_TIE_REL of its
        # end: collectives finish every rank together, so the last to end by a fraction of a microsecond is a tie,
        # and picking it by that fraction made the compute / exposed split flip with the simulation mode)
        tied = [r for r in results if r.end_s >= t * (1.0 - CRITICAL_TIE_REL)]
        crit = max(tied or results, key=lambda x: (x.busy_s, x.end_s))
        kend = max((t1 for r in results for (lbl, t0, t1, s) in r.phases if _is_compute_stream(s)), default=0.0)
        for r in results:
            r.phases = [(lbl, t0, t1) for (lbl, t0, t1, _s) in r.phases]
        return GraphResult(time_s=rep * t, compute_time_s=rep * crit.busy_s,
                           exposed_comm_time_s=max(0.0, rep * (t - crit.busy_s)), sim_mode=self.sim_mode,
                           entities=results, critical=crit, events=sim.events,
                           wall_s=time.perf_counter() - wall0, algorithms=dict(self._algorithms),
                           kernel_end_s=kend, sim=sim, net=net, fabric=self.fabric, repeat=rep)

    def _stream(self, e: int, er: EntityResult, nodes, done, keys):
        env = self.env
        for nd in nodes:
            deps = [done[d] for d in nd.deps if not done[d].processed]
            if deps:
                yield simpy.AllOf(env, deps)
            released = env.event()
            env.process(self._node(e, er, nd, released, done[nd.id], keys[nd.id]))
            yield released

    # -- node kinds -----------------------------------------------------------------------------------------
    def _node(self, e, er, nd, released, done, key):
        env = self.env
        t0 = env.now
        rank = self.ent_ranks[e]
        compute = _is_compute_stream(nd.stream)
        if isinstance(nd, ComputeNode):
            if nd.work is not None:
                yield env.process(run_kernel(self.sim, nd.work, self.cost, rank=rank))
            elif nd.time_s > 0:
                yield env.timeout(nd.time_s)
            self._finish(er, nd, t0, env.now, compute)
            released.succeed()
        elif isinstance(nd, DelayNode):
            if nd.time_s > 0:
                yield env.timeout(nd.time_s)
            self._finish(er, nd, t0, env.now, False)
            released.succeed()
        elif isinstance(nd, CollectiveNode):
            yield from self._collective(e, nd, key)
            self._finish(er, nd, t0, env.now, False)
            released.succeed()
        elif isinstance(nd, AllToAllVNode):
            yield from self._alltoallv(e, nd, key)
            self._finish(er, nd, t0, env.now, False)
            released.succeed()
        elif isinstance(nd, FusedNode):
            yield from self._fused(e, er, nd, key, released, t0)
        elif isinstance(nd, SendNode):
            yield from self._send(e, rank, nd, released)
            self._finish(er, nd, t0, env.now, False)
        elif isinstance(nd, RecvNode):
            yield from self._recv(rank, nd, released)
            self._finish(er, nd, t0, env.now, False)
        else:  # pragma: no cover - the IR has no other kinds
            raise SpecError("<graph>", nd.name, f"unsupported node kind {type(nd).__name__}")
        if not released.triggered:
            released.succeed()
        er.end_s = max(er.end_s, env.now)
        done.succeed()

    def _finish(self, er, nd, t0, t1, busy: bool):
        er.phases.append((nd.label(), t0, t1, nd.stream))
        if busy:
            er.busy_s += t1 - t0
            if er.concurrent_compute:
                er.busy_intervals.append((t0, t1))

    def _participants(self, gname: str) -> list[int]:
        """Simulated entities taking part in group ``gname``'s operations (memoised per group)."""
        hit = self._parts.get(gname)
        if hit is None:
            g = self.graph.groups[gname]
            ents = np.unique(self.ent_of_rank[np.asarray(g.ranks, dtype=np.int64)]).tolist()
            # only entities whose representative is a member take part (others are covered by symmetry)
            hit = self._parts[gname] = [c for c in ents if self.ent_ranks[c] in g]
        return hit

    def _rendezvous(self, key, n_parts: int):
        """simpy sub-process: wait until all ``n_parts`` simulated members reached group operation ``key``;
        returns the operation's shared state (``finished`` event, ``value`` slot for the first member)."""
        env = self.env
        inst = self._instance(key, lambda: {"joined": 0, "go": env.event(), "finished": env.event(), "value": None})
        inst["joined"] += 1
        if inst["joined"] == n_parts:
            inst["go"].succeed()
        yield inst["go"]
        return inst

    def _instance(self, key, factory):
        inst = self._instances.get(key)
        if inst is None:
            inst = self._instances[key] = factory()
        return inst

    def _collective(self, e, nd: CollectiveNode, key):
        env = self.env
        group = self.graph.groups[nd.group]
        if group.size == 1:
            return  # nothing to exchange: a collective on one rank costs nothing
        symmetric = self.fabric.symmetric
        name, algo = self._group_algorithms.get(nd.op, group, nd.size_bytes, algorithm=nd.algorithm)
        self._algorithms[nd.name] = name
        if symmetric and not algo.symmetric:
            raise SpecError("<graph>", nd.name, f"{nd.op}:{name} is not symmetric on group {nd.group}; "
                                                f"simulate every rank (full mode)")
        parts = self._participants(nd.group)

        inst = yield from self._rendezvous(("coll",) + key, len(parts))
        co = self.topology.collectives
        if self.sim_mode == "classes" and self.exact_classes:
            if e == parts[0]:
                yield env.process(self._class_collective(algo, parts, nd.name))
                inst["finished"].succeed()
            else:
                yield inst["finished"]
        elif symmetric:
            yield env.process(collective_process(self.sim, self.fabric, self.net, algo, launch_s=co.launch_s,
                                                 sync_s=co.sync_s, rank=self.ent_ranks[e], name=nd.name,
                                                 groups_fn=self._flow_cache, record=self.record))
        else:
            if e == parts[0]:
                yield env.process(collective_process(self.sim, self.fabric, self.net, algo, launch_s=co.launch_s,
                                                     sync_s=co.sync_s, rank=self.ent_ranks[e], name=nd.name,
                                                     groups_fn=self._flow_cache, record=self.record))
                inst["finished"].succeed()
            else:
                yield inst["finished"]

    def _class_collective(self, algo, parts: list[int], label: str):
        """simpy process: ``algo`` run by the representatives of the entities ``parts`` on class links, as full
        simulation runs it for every rank (:func:`~simfuse.collectives.runner.collective_process`'s full mode):
        launch gap, then each representative's step ``s`` starts once its step ``s-1`` flows are done and every
        flow group addressed to its class in step ``s-1`` has arrived; the collective ends when every
        representative is done, plus ``sync_s``.  Flows go to their destinations' classes (a class's receive
        links see what its members receive).  With classes that are orbits of automorphisms of the program and
        the fabric (``exact_classes``) each representative's flows are those of every member, relabelled, so
        this equals full simulation."""
        env = self.env
        t0 = env.now
        co = self.topology.collectives
        cost = protocol_cost(self.fabric, algo)
        pg = ProtocolGroups(self._class_flow_cache, cost, getattr(algo, "via", ()), per_peer=algo.op == "all_to_all",
                            rule=bulk_rule(co), n_ranks=self.fabric.n_ranks)
        launch_s = cost.launch_gap_s(co.launch_s)
        if launch_s > 0:
            yield env.timeout(launch_s)
        reps = [self.ent_ranks[c] for c in parts]
        groups = [[pg(r, dsts, sizes) for dsts, sizes in algo.steps(r)] for r in reps]
        n_steps = max((len(x) for x in groups), default=0)
        if n_steps:
            ent = self.ent_of_rank
            remaining: dict = {}
            for steps in groups:
                for s, grps in enumerate(steps):
                    for grp in grps:
                        k = (int(ent[grp.dsts[0]]), s)
                        remaining[k] = remaining.get(k, 0) + 1
            recv = {k: env.event() for k in remaining}

            def arrived(k):
                def cb(_ev):
                    remaining[k] -= 1
                    if remaining[k] == 0:
                        recv[k].succeed()
                return cb

            def member(c, r, steps):
                for s, grps in enumerate(steps):
                    if s > 0 and (c, s - 1) in recv:
                        yield recv[(c, s - 1)]
                    evs = []
                    for grp, ev in pg.start(self.net, r, grps, tag=label):  # off-node sends gated by their posts
                        ev.callbacks.append(arrived((int(ent[grp.dsts[0]]), s)))
                        evs.append(ev)
                    if evs:
                        yield simpy.AllOf(env, evs)
                if (c, n_steps - 1) in recv:
                    yield recv[(c, n_steps - 1)]

            yield simpy.AllOf(env, [env.process(member(c, r, st)) for c, r, st in zip(parts, reps, groups,
                                                                                       strict=True)])
        if co.sync_s > 0:
            yield env.timeout(co.sync_s)
        if self.record:
            self.sim.recorder.add("collective", label, f"gpu{reps[0]}/comm", reps[0], t0, env.now,
                                  size_bytes=algo.size_bytes, ranks=self.fabric.n_ranks)

    def _exchange(self, gname, key):
        return self._instance(("x",) + key, lambda: ExchangeInstance(self.env, self._participants(gname),
                                                                      self.ent_of_rank))

    def _alltoallv(self, e, nd: AllToAllVNode, key):
        group = self.graph.groups[nd.group]
        if len(nd.send_bytes) != group.size:
            raise SpecError("<graph>", nd.name, f"send_bytes has {len(nd.send_bytes)} entries, group "
                                                f"{nd.group} has {group.size} ranks")
        inst = self._exchange(nd.group, key)
        co = self.topology.collectives
        dsts = self._group_ranks.get(nd.group)
        if dsts is None:  # one array per group (a world group of 131,072 ranks costs ms to convert)
            dsts = self._group_ranks[nd.group] = np.asarray(group.ranks, dtype=np.int64)
        rank = self.ent_ranks[e]
        cost = self._bulk_protocols.cost(group, nd.send_bytes, rank)
        t0 = self.env.now
        yield self.env.process(inst.bulk_member(e, rank, self.fabric, self.net, dsts, nd.send_bytes,
                                                launch_s=co.launch_s, tag=nd.name, cost=cost))
        yield self.env.process(inst.ready(e, co.sync_s))
        # on the timeline's collectives track, like the collectives (the bytes this rank sends)
        self.sim.recorder.add("collective", nd.name, f"gpu{rank}/comm", rank, t0, self.env.now,
                              size_bytes=float(np.sum(nd.send_bytes)), ranks=group.size, op="all_to_all_v")

    def _fused(self, e, er, nd: FusedNode, key, released, t0):
        env = self.env
        op = nd.op
        knobs = nd.knobs or FusedKnobs()
        rank = self.ent_ranks[e]
        wait_label = getattr(nd, "wait_phase", "") or f"{nd.label()}_wait"
        if op.exchange:
            inst = self._exchange(nd.group, key)
            kernel_end = yield env.process(op.member_process(self.ctx, inst, e, rank, knobs))
            self._finish(er, nd, t0, kernel_end, _is_compute_stream(nd.stream))
            released.succeed()
            t1 = env.now
            yield env.process(inst.ready(e))
            if env.now > t1:
                er.phases.append((wait_label, t1, env.now, "comm"))
            return
        parts = self._participants(nd.group)

        inst = yield from self._rendezvous(("fused",) + key, len(parts))
        if e == parts[0]:
            occ = knobs.effective_occupancy_loss(self.topology)
            ranks = [self.ent_ranks[c] for c in parts]
            val = yield env.process(op.fused_process(self.sim, self.fabric, self.net, self.cost, knobs,
                                                     self.topology, ranks, occ))
            inst["value"] = val
            inst["finished"].succeed()
        else:
            yield inst["finished"]
        kernel_end, end = inst["value"]
        self._finish(er, nd, t0, kernel_end, _is_compute_stream(nd.stream))
        if end > kernel_end:
            er.phases.append((wait_label, kernel_end, end, "comm"))

    # -- point to point -------------------------------------------------------------------------------------
    def _p2p_state(self, src, dst, tag):
        k = (src, dst, tag)
        st = self._p2p.get(k)
        if st is None:
            st = self._p2p[k] = {"posted": self.env.event(), "arrived": self.env.event()}
        return st

    def _send(self, e, rank, nd: SendNode, released):
        if self.fabric.symmetric:
            raise SpecError("<graph>", nd.name, "send/recv needs a program per rank (full simulation)")
        st = self._p2p_state(rank, nd.dst, nd.tag)
        yield st["posted"]
        evs = start_groups(self.net, self.fabric.flow_groups(rank, np.array([nd.dst]), np.array([nd.size_bytes])),
                           tag=nd.name)
        if evs:
            yield simpy.AllOf(self.env, evs)
        if not st["arrived"].triggered:
            st["arrived"].succeed()
        released.succeed()

    def _recv(self, rank, nd: RecvNode, released):
        if self.fabric.symmetric:
            raise SpecError("<graph>", nd.name, "send/recv needs a program per rank (full simulation)")
        st = self._p2p_state(nd.src, rank, nd.tag)
        if not st["posted"].triggered:
            st["posted"].succeed()
        yield st["arrived"]
        released.succeed()


def execute(system, graph: Graph, **kw) -> GraphResult:
    """Run ``graph`` on ``system``; see :class:`Executor`."""
    return Executor(system, graph, **kw).run()
