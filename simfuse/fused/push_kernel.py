"""Fused operators that a workload builder assembles from its own kernels: :class:`PushKernel` (a kernel whose
workgroups push their output to peers as they finish; DLRM's fused backward) and :class:`RelayWait` (the wait for
data a :class:`PushKernel` relays through this rank)."""

from __future__ import annotations

import numpy as np
import simpy

from ..collectives import Layout
from ..costs import KernelWork
from ..errors import SpecError
from ..network import INTRA, SELF
from .base import MemberOp, start_puts


class PushKernel(MemberOp):
    """Any compute kernel whose waves push their share of a per-destination payload as they complete.

    ``send_bytes[i]`` goes to ``dst_ranks[i]`` over the whole kernel; a wave of ``w`` of the kernel's ``W``
    workgroups pushes ``w / W`` of every destination's bytes as GPU-initiated puts the moment it ends (flag and,
    off the node, proxy latency per put).  Used for gradients produced by a GEMM (DLRM's interaction backward
    pushing embedding gradients to the table owners).

    Relay (the transpose of :class:`TwrwEmbeddingPush`'s two stages): ``relay_bytes[i]`` of ``send_bytes[i]``
    are forwarded by ``dst_ranks[i]`` to each of its node-local peers as soon as the wave's push has landed there
    (its store issue, then NVLink stores with their flag latency); ``relay_in_bytes`` is what this rank itself
    receives for relaying from each of the ``layout.nodes`` ranks of its rail (itself included).  DLRM: the
    table-row-wise gradients, ``b * D`` per table, go over the rail to the holder node's GPU of the same local
    index, which passes them to the other row shards.  The relayed data is a second exchange, waited for by a
    :class:`RelayWait` node sharing ``relay_channel`` (so the consumers of the direct pushes do not wait for the
    relays); a relaying rank counts as started in it once every push addressed to it has landed and its relays
    are issued.  Full simulation relays each
    landed push; the fast paths (one simulated rank per class) relay, by relabelling, what every rail rank sends
    this rank when this rank's own pushes of that wave to its rail have landed (the wave's end for its own share)."""

    name = "push_kernel"
    collective = "all_to_all"

    def __init__(self, work: KernelWork, dst_ranks, send_bytes, tag: str = "push_kernel",
                 layout: Layout | None = None, relay_bytes=None, relay_in_bytes: float = 0.0,
                 relay_channel: str = ""):
        self.kernel = work
        self.dst_ranks = np.asarray(dst_ranks, dtype=np.int64)
        self.send_bytes = np.asarray(send_bytes, dtype=float)
        if self.dst_ranks.shape != self.send_bytes.shape:
            raise SpecError("<push_kernel>", "send_bytes", "needs one entry per destination rank")
        self.relay_bytes = None if relay_bytes is None else np.asarray(relay_bytes, dtype=float)
        if self.relay_bytes is not None:
            if self.relay_bytes.shape != self.send_bytes.shape:
                raise SpecError("<push_kernel>", "relay_bytes", "needs one entry per destination rank")
            if np.any(self.relay_bytes < 0) or np.any(self.relay_bytes > self.send_bytes * (1 + 1e-12)):
                raise SpecError("<push_kernel>", "relay_bytes", "must lie between 0 and send_bytes")
            if layout is None:
                raise SpecError("<push_kernel>", "layout", "a relaying push needs the layout (node-local peers)")
        if not relay_in_bytes >= 0:
            raise SpecError("<push_kernel>", "relay_in_bytes", f"must be >= 0, got {relay_in_bytes!r}")
        if self.relay_bytes is not None and not relay_channel:
            raise SpecError("<push_kernel>", "relay_channel", "a relaying push needs the channel of its RelayWait")
        self.relay_in_bytes = float(relay_in_bytes)
        self.relay_channel = relay_channel
        self.tag = tag
        self.layout = layout
        self.params = {}

    def work(self, variant: str) -> KernelWork:
        import dataclasses

        return dataclasses.replace(self.kernel, variant=variant)

    def collective_size_bytes(self) -> float:
        return float(self.send_bytes.sum())

    def destination_summary(self, rank: int):
        """``send_bytes[i]`` to ``dst_ranks[i]`` over the whole kernel (each wave pushes its share of every row)."""
        return self.dst_ranks, np.ones(len(self.dst_ranks), dtype=np.int64), self.send_bytes

    def _peers(self, rank: int) -> np.ndarray:
        g = self.layout.gpus_per_node
        p = np.arange((rank // g) * g, (rank // g + 1) * g, dtype=np.int64)
        return p[p != rank]

    def member_process(self, ctx, inst, entity: int, rank: int, knobs):
        env = ctx.sim.env
        inst.enter(entity)
        W = self.kernel.num_workgroups
        keep = (self.dst_ranks != rank) & (self.send_bytes > 0)
        dsts, sizes = self.dst_ranks[keep], self.send_bytes[keep]
        gi = ctx.topology.gpu_initiated
        relaying = self.relay_bytes is not None
        # orbit classes (the executor's exact class mode) relay as full simulation does, at the representative of
        # each receiver's class (``ctx.rep_of``; the identity in full simulation)
        symmetric = ctx.fabric.symmetric and not ctx.orbit_classes
        rep_of = ctx.rep_of
        relay_tag = f"{self.tag}:relay"
        if relaying:
            st = relay_channel(ctx.sim, self.relay_channel, env)
            issued = st["issued"].setdefault(entity, env.event())
            relay_of = dict(zip(self.dst_ranks.tolist(), self.relay_bytes.tolist(), strict=True))
            own_relay = relay_of.get(rank, 0.0)

        def relay(src: int, nbytes: float, after=None):
            """simpy process: ``src`` forwards ``nbytes`` to each node-local peer (once ``after`` has fired)."""
            if after:
                yield simpy.AllOf(env, after)
            peers = self._peers(src)
            if len(peers) == 0 or nbytes <= 0:
                return
            yield env.timeout(gi.store_issue_s)
            for grp, done in start_puts(ctx.net, ctx.fabric, gi, src, peers, np.full(len(peers), nbytes), relay_tag):
                st["flows"].append((grp, done))
                if st["inst"] is not None:
                    st["inst"].register(grp, done)

        def spawn(src: int, nbytes: float, after=None):
            st["procs"].setdefault(src, []).append(env.process(relay(src, nbytes, after)))

        if relaying:  # the relayed part travels as flows of its own, waited for by the RelayWait node
            rsz = self.relay_bytes[keep]
            direct = sizes - rsz
            d_dsts, d_sizes = dsts[direct > 0], direct[direct > 0]
            r_dsts, r_sizes = dsts[rsz > 0], rsz[rsz > 0]
        else:
            d_dsts, d_sizes = dsts, sizes

        def on_complete(idx, _t):
            f = len(idx) / W
            puts = start_puts(ctx.net, ctx.fabric, gi, rank, d_dsts, d_sizes * f, self.tag) if len(d_dsts) else []
            for grp, done in puts:
                inst.register(grp, done)
            if not relaying:
                return
            rputs = start_puts(ctx.net, ctx.fabric, gi, rank, r_dsts, r_sizes * f, self.tag) if len(r_dsts) else []
            for grp, done in rputs:
                st["flows"].append((grp, done))
                if st["inst"] is not None:
                    st["inst"].register(grp, done)
            g = self.layout.gpus_per_node
            if symmetric:
                # relabelling: this rank's pushes to its rail peers stand for theirs to it
                if self.relay_in_bytes > 0:
                    spawn(rank, self.relay_in_bytes * f)  # its own share: at the wave's end
                    rail = [done for grp, done in (rputs or puts)
                            if grp.route_class not in (SELF, INTRA) and np.any(np.asarray(grp.dsts) % g == rank % g)]
                    if self.layout.nodes > 1:
                        spawn(rank, (self.layout.nodes - 1) * self.relay_in_bytes * f, rail)
                return
            if own_relay > 0:
                spawn(rank, own_relay * f)
            for grp, done in rputs:
                for d in np.asarray(grp.dsts).tolist():
                    rb = relay_of.get(int(d), 0.0) * f
                    st["land"].setdefault(rep_of(int(d)), []).append(done)
                    done.callbacks.append(lambda _ev, d=rep_of(int(d)), rb=rb: spawn(d, rb))

        from ..engine import run_kernel

        t = yield env.process(run_kernel(ctx.sim, self.work("fused"), ctx.cost, rank=rank, on_complete=on_complete))
        inst.start(entity)
        if not relaying:
            return t
        issued.succeed()

        def finish():
            if not symmetric and self.relay_in_bytes > 0:
                # every simulated rank has issued its pushes; wait for those addressed to this rank, whose landing
                # callbacks have spawned the relays by then
                yield simpy.AllOf(env, [st["issued"].setdefault(c, env.event()) for c in inst.entities])
                yield simpy.AllOf(env, st["land"].get(rank, []))
            yield simpy.AllOf(env, st["procs"].get(rank, []))
            st["relayed"].setdefault(entity, env.event()).succeed()

        env.process(finish())
        return t


def relay_channel(sim, name: str, env) -> dict:
    """The state a relaying :class:`PushKernel` shares with its :class:`RelayWait` nodes in one simulation (kept
    on the simulation object: nothing outlives the run)."""
    chans = sim.relay_channels
    st = chans.get(name)
    if st is None:
        st = chans[name] = {"issued": {}, "land": {}, "procs": {}, "relayed": {}, "flows": [], "inst": None}
    return st


class RelayWait(MemberOp):
    """The receiving side of a relaying :class:`PushKernel` (same ``channel``): no kernel; the node is done when
    every relayed flow addressed to this rank has landed (an exchange of its own on the group, so the direct
    pushes' consumers do not wait for it).  Put it on a communication stream after the push kernel's node."""

    name = "relay_wait"
    collective = "all_to_all"

    def __init__(self, channel: str, relay_in_bytes: float, nodes: int, gpus_per_node: int):
        self.channel, self.params = channel, {}
        self.relay_in_bytes = float(relay_in_bytes)
        self.nodes, self.g = int(nodes), int(gpus_per_node)

    def work(self, variant: str):
        return None

    def collective_size_bytes(self) -> float:
        return float(self.nodes * self.relay_in_bytes * (self.g - 1))

    def destination_summary(self, rank: int):
        """Nothing: a relay wait sends nothing (the relays are its :class:`PushKernel`'s)."""
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0)

    def member_process(self, ctx, inst, entity: int, rank: int, knobs):
        env = ctx.sim.env
        st = relay_channel(ctx.sim, self.channel, env)
        if st["inst"] is None:
            st["inst"] = inst
            for grp, done in st["flows"]:
                inst.register(grp, done)
        inst.enter(entity)
        t = env.now

        def started():
            if self.relay_in_bytes > 0:
                yield st["relayed"].setdefault(entity, env.event())
            inst.start(entity)

        env.process(started())
        yield env.timeout(0)  # a simpy process: no kernel, the stream is free at once
        return t
