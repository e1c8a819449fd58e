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
"""

from __future__ import annotations

import numpy as np
import simpy

from .runner import start_groups


class ExchangeInstance:
    def __init__(self, env: simpy.Environment, entities: list[int], ent_of_rank: np.ndarray):
        self.env = env
        self.entities = list(entities)  # entity ids taking part
        self.ent_of_rank = ent_of_rank
        self.entered = {e: env.event() for e in self.entities}
        self.started = {e: env.event() for e in self.entities}
        self.store: dict[int, list] = {e: [] for e in self.entities}

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
                    launch_s: float, tag: str):
        """simpy process: launch gap, enter, start the flows to each entity once it has entered; then started."""
        env = self.env
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
                self.store.setdefault(c, []).extend(
                    start_groups(net, fabric.flow_groups(rank, dsts[sel], sizes[sel]), tag=tag))
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
