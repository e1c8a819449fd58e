"""Shared state of one exchange (an uneven all-to-all, bulk or pushed by a fused kernel) across simulated ranks.

An exchange instance is created once per (group, sequence number) by the executor.  Every simulated rank
(*entity*: a rank in full simulation, a class representative otherwise) takes part:

* bulk (:meth:`ExchangeInstance.bulk_member`): after the launch gap the rank is *entered*; its flows to the ranks
  of each entity start once that entity has entered (a send/recv pair progresses when both sides have posted);
  the rank is *started* once all its flows are in flight;
* pushed (fused kernels): the rank enters when its kernel starts and is started when the kernel ends (every push
  issued); :meth:`register` files each push under the entities it is addressed to;
* a rank's data is *ready* when every participant has started and every flow addressed to its entity has
  arrived (:meth:`ready`); the bulk variant adds the completion signalling ``sync_s``.

Protocol costs of the bulk variant (``collectives.protocol_model: nccl``): a bulk exchange runs with the protocol
the tuner picks for a direct all-to-all of the group with the rank's mean per-peer size
(:class:`BulkProtocols`), and pays it exactly as :func:`~simfuse.collectives.runner.collective_process` does for
its all-to-all (the same :class:`~simfuse.collectives.runner.ProtocolGroups`): bytes on the wire x the wire
factor, each flow's last byte after ``max(fabric latency, NCCL hop latency)``, the base-latency offset from
Simple's added to the launch gap, and ``collectives.net_overhead_us`` per off-node peer for the proxy's posts.
The posts of one rank are serial (one proxy): those to an entity's ranks are made once that entity has entered,
after the posts already queued; the rank is *started* when its last post is done.  With every rank entering
together (a uniform exchange) this is ``collective_process``'s direct all-to-all: posting overlaps the flows,
the exchange ends no sooner than the last post.  ``protocol_model: none`` (the default) keeps Simple at no
extra cost.
"""

from __future__ import annotations

import numpy as np
import simpy

from .groups import Group
from .posting import bulk_rule
from .protocols import ProtocolCost
from .runner import ProtocolGroups, protocol_cost, start_groups
from .tuner import GroupAlgorithms


class BulkProtocols:
    """The protocol cost of each bulk exchange of one run (memoised per group and per-peer size).

    A rank's exchange is priced as the tuner's ``direct/<protocol>`` all-to-all on ``group`` at the rank's mean
    per-peer size (the mean of its positive ``send_bytes`` to other ranks, times the group size: what a uniform
    all-to-all of that per-peer size sends): NCCL picks a protocol per size, and a uniform all-to-all-v then
    costs what ``simfuse collective all_to_all --algorithm direct`` costs.  None (no extra cost) when the rank
    sends nothing to others.  ``algorithms``: the run's :class:`~simfuse.collectives.groups.GroupAlgorithms`
    (the tuner's choice, restricted here to the direct algorithm)."""

    def __init__(self, algorithms: GroupAlgorithms, fabric):
        self.algorithms, self.fabric = algorithms, fabric
        self._memo: dict = {}

    def cost(self, group: Group, send_bytes: np.ndarray, rank: int) -> ProtocolCost | None:
        sizes = np.asarray(send_bytes, dtype=float)
        peer = sizes > 0
        peer[group.index(rank)] = False
        if not peer.any():
            return None
        per_peer = float(sizes[peer].mean())
        key = (group.name, group.ranks[0], group.size, per_peer)
        hit = self._memo.get(key)
        if hit is None:
            _name, algo = self.algorithms.get("all_to_all", group, per_peer * group.size, restrict_to="direct")
            hit = self._memo[key] = protocol_cost(self.fabric, algo)
        return hit


class ExchangeInstance:
    def __init__(self, env: simpy.Environment, entities: list[int], ent_of_rank: np.ndarray):
        self.env = env
        self.entities = list(entities)  # entity ids taking part
        self.ent_of_rank = ent_of_rank
        self.entered = {e: env.event() for e in self.entities}
        self.started = {e: env.event() for e in self.entities}
        self.store: dict[int, list] = {e: [] for e in self.entities}
        #: state the members of one fused node share, by name (:meth:`shared`)
        self.op_state: dict[str, dict] = {}

    def shared(self, name: str) -> dict:
        """The mapping the members of this exchange share under ``name`` (a fused operator's reducers, the
        arrivals of its shards), created empty on first use."""
        return self.op_state.setdefault(name, {})

    def _entity_event(self, table: dict, e: int):
        ev = table.get(e)
        if ev is None:
            ev = table[e] = self.env.event()
            self.store.setdefault(e, [])
        return ev

    def enter(self, e: int) -> None:
        self._entity_event(self.entered, e).succeed()

    def start(self, e: int) -> None:
        self._entity_event(self.started, e).succeed()

    def register(self, grp, done_ev) -> None:
        """File a started flow group under every entity it is addressed to."""
        for c in sorted({int(x) for x in self.ent_of_rank[np.asarray(grp.dsts)]}):
            self.store.setdefault(c, []).append(done_ev)

    def bulk_member(self, e: int, rank: int, fabric, net, dsts: np.ndarray, sizes: np.ndarray, *,
                    launch_s: float, tag: str, cost: ProtocolCost | None = None):
        """simpy process: launch gap, enter, start the flows to each entity once it has entered; then started.

        ``cost``: the protocol's costs (:class:`BulkProtocols`; None: Simple, nothing extra).  The proxy posts
        the flows to one entity's ranks once that entity has entered, after the posts already queued; the rank
        is started when its flows are all in flight and its last post is done."""
        env = self.env
        pg = None
        if cost is not None and cost.active:
            pg = ProtocolGroups(fabric.flow_groups, cost, per_peer=True, rule=bulk_rule(fabric.topology.collectives),
                                n_ranks=fabric.n_ranks)
            launch_s = cost.launch_gap_s(launch_s)
        if launch_s > 0:
            yield env.timeout(launch_s)
        self.enter(e)
        keep = (dsts != rank) & (sizes > 0)
        dsts, sizes = dsts[keep], sizes[keep]
        procs = []
        dst_ent = self.ent_of_rank[dsts]

        for c in sorted({int(x) for x in dst_ent}):
            sel = dst_ent == c

            def start(c=c, sel=sel):
                yield self._entity_event(self.entered, c)
                if pg is None:
                    groups = fabric.flow_groups(rank, dsts[sel], sizes[sel])
                    self.store.setdefault(c, []).extend(start_groups(net, groups, tag=tag))
                    return
                started = pg.start(net, rank, pg(rank, dsts[sel], sizes[sel]), tag=tag)
                self.store.setdefault(c, []).extend(ev for _g, ev in started)
                if pg.posted_until > env.now:  # this exchange's own posts (the queue may hold earlier ones)
                    yield env.timeout(pg.posted_until - env.now)
            procs.append(env.process(start()))
        if procs:
            yield simpy.AllOf(env, procs)
        self.start(e)

    def ready(self, e: int, sync_s: float = 0.0):
        """simpy process: every participant started and every flow addressed to ``e`` arrived; then ``sync_s``."""
        env = self.env
        yield simpy.AllOf(env, [self._entity_event(self.started, c) for c in self.entities])
        if self.store.get(e):
            yield simpy.AllOf(env, self.store[e])
        if sync_s > 0:
            yield env.timeout(sync_s)
