"""The quotient mode: a collective on a fabric whose nodes are not all alike, simulated on the ranks of one
shift unit.

On ``fat_tree_3tier`` with more than one leaf, shifting the nodes by one is no automorphism (the last node of a
leaf has its successor under another leaf), so a ring or a tree over neighbouring nodes is not symmetric in the
representative-rank sense, and full simulation runs every rank.  Shifting by whole pods (by whole leaves within
one pod) is an automorphism (:meth:`~simfuse.network.Fabric.node_shift_unit`), and a schedule invariant under
every node shift (``relabelling == "shift"``: rings, neighbour trees) is invariant under it too.  The full
simulation is then invariant under that shift at every moment: the max-min rates are unique, so translated
flows get equal rates and translated ranks reach each step at the same time.  So it suffices to simulate the
``U`` ranks of the first unit (rank ``r`` stands for every ``r + k U``) on the links of the first unit
(every link stands for its translates, :meth:`~simfuse.network.Fabric.shift_representatives`): a flow from a
simulated rank to ``d`` loads the representatives of the links it crosses and is received, for the step
bookkeeping, by ``d mod U``.  Every link's load is then what its load is in full simulation (it carries
exactly the translates of the simulated flows that cross it), and so are the rates and times: the same as full
simulation, to float rounding (``tests/collectives/test_quotient.py``).

Why not the rank classes of :meth:`~simfuse.network.Fabric.set_rank_classes` (the DLRM runs' quotient): those
give each class its own per-rank share of a shared link, which is exact only when every rank sharing a physical
link behaves alike.  Under a ring on the 3-tier fabric a leaf's uplink is used by the ranks of its last node
only, not by a per-rank share of all of them, so class links would misprice it (``orbit_classes`` refuses such
classes).  The quotient keeps the physical links of one unit instead.

Repeated steps (:func:`max_plus_times`).  With the collective alone on the network, a schedule whose ranks
repeat one step (a ring's ``n-1`` or ``2(n-1)``) and whose links are *private*, which is to say that every link
is either crossed by the flows of one sending rank only or cannot be filled (the sum over the flows crossing it
of each flow's top rate, the least capacity on its path, is within its capacity), needs no simulation beyond
one step: a link that cannot be filled never limits a rate, so the max-min rates split into one independent
problem per sending rank, and a rank's step lasts the same whenever it starts.  Simulating one step of every
simulated rank at once gives each flow's duration ``d_f`` (its own latency included); then rank ``r`` starts
step ``s`` at ``t_r(s) = max(t_r(s-1) + max_{f from r} d_f, max_{f to r} t_src(f)(s-1) + d_f)``
(its sends of step ``s-1`` done and its receives arrived, as :func:`~.runner._full_mode` waits), a max-plus
recursion over ``U`` ranks, and the collective ends at ``max_r t_r(S)``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import simpy

from ..engine import Simulation
from ..errors import SpecError
from ..network import Fabric, FlowNetwork
from .runner import _full_mode, same_step

#: a link with several senders counts as unfillable when the top rates of its flows sum to at most this factor of
#: its capacity (float slack on an exact equality)
_FILL_SLACK = 1.0 + 1e-9


@dataclass
class Quotient:
    """The links and ranks of one shift unit of a full fabric."""

    fabric: Fabric  # full mode, every node
    unit_nodes: int
    unit_ranks: int
    link_rep: np.ndarray  # full link id -> id among the unit's links (``capacities``)
    capacities: np.ndarray
    names: list[str]

    def __post_init__(self):
        self._cache: dict = {}

    def __getattr__(self, name):
        # anything else (geometry, families, n_ranks ...) is the full fabric's: a Quotient stands for the fabric
        # of a quotient run, with the unit's links as its ``capacities`` and ``names``
        if name in ("fabric", "_cache") or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.fabric, name)

    def flow_groups(self, src: int, dsts, sizes, via: tuple[str, ...] = ()):
        """The full fabric's flow groups of ``src`` with their links replaced by the unit's representatives."""
        dsts = np.asarray(dsts, dtype=np.int64)
        key = (src, dsts.tobytes(), np.asarray(sizes, dtype=float).tobytes(), via)
        hit = self._cache.get(key)
        if hit is None:
            rep = self.link_rep
            hit = [dataclasses.replace(g, links=tuple(rep[list(g.links)].tolist()))
                   for g in self.fabric.flow_groups(src, dsts, sizes, via=via)]
            if len(self._cache) < 4096:
                self._cache[key] = hit
        return hit

    def run(self, sim: Simulation, net: FlowNetwork, algo, pg, label: str, alone: bool = False):
        """simpy process body: ``algo`` on the simulated ranks (:func:`quotient_mode`); the runner calls it, so
        the runner never imports this module."""
        return quotient_mode(sim, self, net, algo, pg, label, alone=alone)

    def network(self, sim: Simulation, record_usage: bool = False) -> FlowNetwork:
        return FlowNetwork(sim, self.capacities, self.names, record_usage=record_usage)


def make_quotient(topology, nodes: int, gpus_per_node: int) -> Quotient | None:
    """The quotient of the full fabric of ``nodes`` nodes by its node shift unit, or ``None`` where it would be
    the whole system (a node-transitive fabric has the symmetric mode; one unit is full simulation) or the shift
    is no automorphism of this run (a partly filled leaf or pod)."""
    try:
        fabric = Fabric(topology, nodes, gpus_per_node=gpus_per_node, symmetric=False)
    except SpecError:
        return None
    if fabric.node_transitive:
        return None
    unit = fabric.node_shift_unit()
    if unit >= fabric.nodes:
        return None
    try:  # the shift is an automorphism only where the symmetric mode's whole leaves and pods are there
        Fabric(topology, nodes, gpus_per_node=gpus_per_node, symmetric=True)
    except SpecError:
        return None
    rep = fabric.shift_representatives(unit)
    if rep is None:
        return None
    keep = np.flatnonzero(rep == np.arange(len(rep)))
    compact = np.full(len(rep), -1, dtype=np.int64)
    compact[keep] = np.arange(len(keep))
    return Quotient(fabric, unit, unit * fabric.gpus_per_node, compact[rep], fabric.capacities[keep],
                    [fabric.names[i] for i in keep])


def quotient_mode(sim, q: Quotient, net, algo, pg, label, alone: bool = False):
    """simpy process body: ``algo`` on the simulated ranks of ``q`` (see the module)."""
    schedules = [algo.steps(r) for r in range(q.unit_ranks)]
    # same_step answers a repeated step object by identity, without comparing arrays
    if alone and pg.rule is None and all(same_step(st, sch[0]) for sch in schedules for st in sch):
        end = max_plus_times(q, pg, label, schedules, net)
        if end is not None:
            if end > 0:
                yield sim.env.timeout(end)
            return
    yield from _full_mode(sim, q.fabric, net, algo, pg, label, simulated=q.unit_ranks, schedules=schedules)


def probe_step(q: Quotient, pg, label, steps, pnet: FlowNetwork | None = None):
    """Every simulated rank's ``steps[r]`` at once from time 0 on an idle network (``pnet``, a fresh quotient
    network by default): ``(src, dst_rep, duration_s, links)`` of each flow."""
    if pnet is None:
        pnet = q.network(Simulation(seed=0, record=False))
    psim = pnet.sim
    env = psim.env
    src, dst, links, evs = [], [], [], []
    for r, (dsts, sizes) in enumerate(steps):
        for g, ev in pg.start(pnet, r, pg(r, dsts, sizes), tag=label):
            for d in np.asarray(g.dsts).tolist():
                src.append(r)
                dst.append(d % q.unit_ranks)
                links.append((g.links, g.size_bytes > 0))
                evs.append(ev)
    done = np.zeros(len(evs))
    for i, ev in enumerate(evs):
        ev.callbacks.append(lambda _e, i=i: done.__setitem__(i, env.now))
    if evs:
        psim.run(until=simpy.AllOf(env, list(dict.fromkeys(evs))))
    return np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64), done, links


def private_links(q: Quotient, src: np.ndarray, links: list) -> bool:
    """Whether every link is crossed by one sending rank's flows only, or cannot be filled (module docstring)."""
    cap = q.capacities
    senders: dict[int, set] = {}
    top: dict[int, float] = {}
    for s, (ls, moves) in zip(src.tolist(), links, strict=True):
        if not moves or not ls:
            continue
        u = float(min(cap[list(ls)]))
        for link in ls:
            senders.setdefault(link, set()).add(s)
            top[link] = top.get(link, 0.0) + u
    return all(len(senders[link]) == 1 or top[link] <= cap[link] * _FILL_SLACK for link in senders)


def max_plus_times(q: Quotient, pg, label, schedules, net: FlowNetwork | None = None) -> float | None:
    """End (s, from the first step's start) of a schedule of repeated steps by the max-plus recursion of the
    module docstring, or ``None`` when its links are not private (then it must be simulated).  ``net``: the
    run's network, credited with the bytes of every step (injected, delivered, carried by each link)."""
    n_steps = len(schedules[0])
    if any(len(s) != n_steps for s in schedules):
        return None
    if n_steps == 0:
        return 0.0
    pnet = q.network(Simulation(seed=0, record=False))
    src, dst, d, links = probe_step(q, pg, label, [s[0] for s in schedules], pnet)
    if not private_links(q, src, links):
        return None
    if net is not None:
        net.injected_bytes += n_steps * pnet.injected_bytes
        net.delivered_bytes += n_steps * pnet.delivered_bytes
        net.carried_bytes += n_steps * pnet.carried_bytes
    U = q.unit_ranks
    d_out = np.zeros(U)
    np.maximum.at(d_out, src, d)
    order = np.argsort(dst, kind="stable")
    src_o, d_o, dst_o = src[order], d[order], dst[order]
    starts = np.flatnonzero(np.r_[True, dst_o[1:] != dst_o[:-1]]) if len(dst_o) else np.zeros(0, dtype=np.int64)
    receivers = dst_o[starts]
    t = np.zeros(U)
    for _ in range(n_steps):
        nxt = t + d_out
        if len(starts):
            arrive = np.maximum.reduceat(t[src_o] + d_o, starts)
            nxt[receivers] = np.maximum(nxt[receivers], arrive)
        t = nxt
    return float(t.max())
