"""Table-row-wise embedding pooling with a hierarchical fused push (:class:`TwrwEmbeddingPush`), its closed-form
stage-1 schedule (:class:`_TwrwStage1`, :class:`_Coverage`), and the table-row-wise traffic formula that the
planner's estimator, the DLRM graph builder and the operator share (:func:`twrw_stage1_bytes`,
:func:`twrw_rail_bytes`)."""

from __future__ import annotations

import bisect

import numpy as np
import simpy

from ..collectives import Layout
from ..costs import KernelWork
from ..errors import SpecError
from ..network import INTRA, SELF
from .base import MemberOp, fused_work, largest_divisor_at_most, start_puts


def twrw_stage1_bytes(nodes, bags_per_rank, dim, elem_bytes, tables=1):
    """Table-row-wise stage 1 (the reduce-scatter inside a holder node): the bytes a holder sends each local
    peer, ``N x b x D x e`` per table (the partial sums of every rank's ``b`` bags whose reducer is that peer).
    ``tables``: a count or an array of counts per rank (then an array)."""
    return tables * nodes * bags_per_rank * dim * elem_bytes


def twrw_rail_bytes(bags_per_rank, dim, elem_bytes, tables=1):
    """Table-row-wise stage 2 (on the rails): the bytes a reducer sends each rank of its rail on another node,
    ``b x D x e`` per table (that rank's reduced bags).  ``tables``: a count or an array of counts per rank."""
    return tables * bags_per_rank * dim * elem_bytes


class _Coverage:
    """Arrival counts over one reducer's slice positions ``[0, K)`` as a piecewise-constant function (sorted
    segment starts and counts, full segments marked done): :class:`TwrwEmbeddingPush`'s reducer, whose positions
    arrive as contiguous ranges from each of the ``g`` partial senders.  O(segments) per update; segments stay
    few (ranges arrive roughly in order, and done ones merge)."""

    DONE = -1

    def __init__(self, K: int, g: int):
        self.starts, self.vals, self.K, self.g = [0], [0], int(K), int(g)

    def _split(self, x: int) -> int:
        """Index of the segment starting at ``x`` (created if needed); ``x`` in ``[0, K]``."""
        st = self.starts
        if x >= self.K:
            return len(st)
        i = bisect.bisect_right(st, x) - 1
        if st[i] == x:
            return i
        st.insert(i + 1, x)
        self.vals.insert(i + 1, self.vals[i])
        return i + 1

    def add(self, ranges) -> list[tuple[int, int]]:
        """One more arrival on each ``[a, b)`` of ``ranges`` (one landing); returns the ranges that reached ``g``
        arrivals with it (in position order), which are then done."""
        lo, hi = self.K, 0
        for a, b in ranges:
            if b <= a:
                continue
            i, j = self._split(a), self._split(b)
            for k in range(i, j):
                self.vals[k] += 1
            lo, hi = min(lo, a), max(hi, b)
        if hi <= lo:
            return []
        st, vals, g = self.starts, self.vals, self.g
        i = bisect.bisect_right(st, lo) - 1
        full = []
        k = i
        while k < len(st) and st[k] < hi:
            if vals[k] == g:
                vals[k] = self.DONE
                end = st[k + 1] if k + 1 < len(st) else self.K
                if full and full[-1][1] == st[k]:
                    full[-1] = (full[-1][0], end)
                else:
                    full.append((st[k], end))
            k += 1
        # merge equal neighbours over the touched span (segments starting past ``hi`` were not touched)
        k = max(1, i)
        while k < len(st) and st[k] <= hi:
            if vals[k] == vals[k - 1]:
                del st[k], vals[k]
            else:
                k += 1
        return full


class _TwrwStage1:
    """Closed form of one rank's stage-1 schedule in :class:`TwrwEmbeddingPush` (no per-workgroup arrays).

    Slices are numbered, per destination reducer (offset ``h`` from this rank's local index), in execution
    order; a reducer's slice ``kappa`` covers the same positions of its range for every sender of the node, so
    the reducer counts arrivals per slice number.  ``F(kappa)``: positions covered by the reducer's slices
    ``< kappa`` (cumulative).  Three shapes:

    * ``remote_first``: chunks ``c`` of ``s`` positions (the last one ``Q - (C - 1) s``); execution runs chunk
      ``c`` for offsets ``0, 1, ..., g - 1`` before chunk ``c + 1``; slice ``sigma = c g + h``, ``kappa = c``,
      covering positions ``[c s, min((c + 1) s, Q))``;
    * ``natural``, ``g > 1``: blocks ``beta = tau n + o`` of ``kb`` workgroups (table ``tau``, owner ``o``, one
      reducer ``o mod g``), each cut every ``s`` (``J`` slices); a reducer's slices are those of its blocks,
      ``kappa = (beta // g) J + j``;
    * ``natural``, ``g == 1``: the whole grid is one run to this rank, cut every ``s``; ``kappa`` = slice.
    """

    def __init__(self, op, rank: int, fabric, topology, knobs):
        lay = op.layout
        self.g, self.N, self.n = lay.gpus_per_node, lay.nodes, lay.n
        g = self.g
        self.rank, self.k, self.l = rank, rank // g, rank % g
        self.s = max(1, int(knobs.slice_wgs))
        self.t, self.kb, self.Q = op.t, op.kb, op.Q
        self.W = g * self.Q
        self.shape = "remote_first" if knobs.tile_order != "natural" else ("natural" if g > 1 else "natural1")
        self.reducers = np.array([self.k * g + (self.l + h) % g for h in range(g)], dtype=np.int64)
        cls = fabric.route_class(rank, self.reducers)
        gi = topology.gpu_initiated
        self.issue = np.where(cls == SELF, 0.0, np.where(cls == INTRA, gi.store_issue_s, gi.put_issue_s)).tolist()
        s, Q, kb = self.s, self.Q, self.kb
        if self.shape == "remote_first":
            self.C = -(-Q // s)
            self.L_last = Q - (self.C - 1) * s
            self.P_last = (self.C - 1) * g * s
            self.K = self.C
        elif self.shape == "natural":
            self.J = -(-kb // s)
            self.K = self.t * self.N * self.J
        else:
            self.K = -(-self.W // s)
        self.hold_all = self.s >= self.W > 0
        # a window of this many positions holds the last workgroup of a slice to every reducer: slices are at
        # most s long and cycle through the g reducers (remote_first), or g consecutive blocks of kb have g
        # different reducers (natural)
        self.span = g * s if self.shape == "remote_first" else g * kb if self.shape == "natural" else s
        self.max_issue = max(self.issue)

    def F(self, kappa: int) -> int:
        """Positions of a reducer's range covered by its slices ``< kappa``."""
        if self.shape == "natural":
            return (kappa // self.J) * self.kb + min((kappa % self.J) * self.s, self.kb)
        return min(kappa * self.s, self.Q)

    def _F_arr(self, kappa: np.ndarray) -> np.ndarray:
        """:meth:`F` of an array (``natural``, ``g > 1``)."""
        return (kappa // self.J) * self.kb + np.minimum((kappa % self.J) * self.s, self.kb)

    def kappas(self, pos: int) -> list[int]:
        """Per offset ``h``: how many of that reducer's slices have completed once positions ``< pos`` ran."""
        g, s = self.g, self.s
        if self.shape == "remote_first":
            if pos <= self.P_last:
                n = pos // s
            else:
                n = (self.C - 1) * g + min(g, (pos - self.P_last) // self.L_last)
            return [(n - h + g - 1) // g for h in range(g)]
        if self.shape == "natural":
            kb, J = self.kb, self.J
            b0, part = divmod(pos, kb)
            out = []
            for h in range(g):
                lr = (self.l + h) % g
                out.append(((b0 - lr + g - 1) // g) * J + ((part // s) if b0 % g == lr else 0))
            return out
        return [pos // s + (1 if pos >= self.W and self.W % s else 0)]

    def wave_overhead_s(self, lo: int, hi: int) -> float:
        """The costliest issue among the slices whose last workgroup runs in positions ``[lo, hi)``."""
        if hi - lo >= self.span:  # the window holds a slice end of every reducer (called once per wave: cheap)
            return self.max_issue
        a, b = self.kappas(lo), self.kappas(hi)
        best = 0.0
        for h in range(self.g):
            if b[h] > a[h] and self.issue[h] > best:
                best = self.issue[h]
        return best

    def owner_counts(self, ranges) -> np.ndarray:
        """Positions per owner node (length ``N``) among a reducer's slice ranges ``[(k0, k1), ...)``."""
        N = self.N
        nodes, counts = [], []
        for k0, k1 in ranges:
            if self.shape == "natural":
                J = self.J
                bb = np.arange(k0 // J, (k1 - 1) // J + 1, dtype=np.int64)
                lo = np.maximum(k0, bb * J)
                hi = np.minimum(k1, (bb + 1) * J)
                nodes.append(bb % N)
                counts.append(self._F_arr(hi) - self._F_arr(lo))
                continue
            a, b = self.F(k0), self.F(k1)
            # remote_first: positions q, owner node offset q // (kb t); natural1: execution positions, owner node
            # (i // kb) mod N (one GPU per node)
            blk = self.kb * self.t if self.shape == "remote_first" else self.kb
            bb = np.arange(a // blk, (b - 1) // blk + 1, dtype=np.int64)
            cnt = np.minimum(b, (bb + 1) * blk) - np.maximum(a, bb * blk)
            nodes.append((self.k + bb + 1) % N if self.shape == "remote_first" else bb % N)
            counts.append(cnt)
        if not nodes:
            return np.zeros(N, dtype=np.int64)
        return np.bincount(np.concatenate(nodes), weights=np.concatenate(counts), minlength=N).astype(np.int64)


#: most stage-2 (rail) put batches a reducer issues per kernel (see TwrwEmbeddingPush)
MAX_STAGE2_PUTS = 64
#: most stage-1 push points (macro-waves, :func:`~simfuse.engine.compute.run_kernel_waves`) of a
#: TwrwEmbeddingPush kernel: the resolution of stage 2, which already leaves in MAX_STAGE2_PUTS batches of
#: ``Q / MAX_STAGE2_PUTS`` reduced positions (a macro-wave of 1/64 of the kernel completes about one batch).  Each
#: push point starts NVLink flows, and every flow start and end re-solves the flow network with the long rail puts
#: in flight: at 1,024 nodes x 1,056 bags per GPU (MLPerf DLRM-DCNv2, planned) 256 points took 14.9 s for both
#: modes, 64 took 6.0 s (2-core VM), and the fused iteration moved by +0.2% (0.061472 -> 0.061598 s; +0.11% at
#: 64 nodes, +0.17% at 128; unchanged at 16 nodes, whose kernels have fewer waves).  Kernels of at most this many
#: waves push once per wave (exact).
MAX_TWRW_PUSH_WAVES = MAX_STAGE2_PUTS


class TwrwEmbeddingPush(MemberOp):
    """Table-row-wise embedding pooling with a hierarchical fused push (DLRM, planned sharding).

    A table-row-wise table has ``g`` row shards on the GPUs of one node; each shard pools all ``B`` bags at its
    share of the lookups (one kernel for the ``tables[r]`` shards of rank ``r``; every GPU of a holder node holds
    the same number).  Bag ``x`` belongs to rank ``x // b``; its *reducer* is the GPU of the holder node with that
    rank's local index.  The bulk path reduces inside the node (stage 1: ``N * b * D`` per table to each local
    peer) and then sends on the rails (stage 2: ``b * D`` per table to each rank of the rail).  Fused:

    * stage 1: each workgroup (``bags`` bags of one table) pushes its partial sums to the bags' reducer over
      NVLink as its slice completes (:class:`~simfuse.fused.base.PushEngine`: slices of ``slice_wgs``, store
      issue, flag latency; the reducer's own share stays local);
    * stage 2: once all ``g`` partials of a workgroup's bags have landed at the reducer, it adds them (``g`` x the
      slice's bytes at one workgroup's HBM share, the convention of :class:`GemmReduceScatter`), then puts the
      reduced bags on its rail to their owner (``put_issue_s``, then proxy and flag latency per put); the bags of
      its own node stay there.  Reductions and puts are issued by the reducer as partials complete, whatever
      its own kernel is doing (a communication workgroup or proxy, as the two-phase operators assume).

    ``remote_first`` order (interleaved and shifted, symmetric): a reducer's bag range is ordered by owner node
    offset from the holder node (other nodes first, its own node last), then bag block, then table, and cut in
    chunks of ``slice_wgs`` workgroups; GPU ``l`` runs chunk ``c`` for reducers ``l, l + 1, ...`` (mod ``g``)
    before chunk ``c + 1``, so at each step every reducer gets one GPU's chunk (no incast) and all ``g`` partials
    of a chunk land within ``g`` steps.  ``natural``: the index order (table, bag), the same on every GPU.

    A rank counts as started (its stage 2 complete) when its kernel has ended and its reducer has pushed every
    reduced slice; a rank's data is ready when every push addressed to it has landed.  Full simulation counts
    each reducer's partials; the fast paths (one simulated rank per class) count, by relabelling inside the
    node, a rank's own pushes of a slice position to all ``g`` reducers as the ``g`` partials it receives."""

    name = "embedding_twrw_push"
    collective = "all_to_all"

    def __init__(self, work: KernelWork | None, layout: Layout, tables, rank: int, global_batch: int, bags: int,
                 dim, elem_bytes: int, source: str = "<table_row_wise>"):
        self.layout, self.source, self.params = layout, source, {}
        n, g = layout.n, layout.gpus_per_node
        self.tables = np.asarray(tables, dtype=np.int64)
        if self.tables.shape != (n,) or np.any(self.tables < 0):
            raise SpecError(source, "tables", f"needs a shard count >= 0 for each of the {n} ranks")
        by_node = self.tables.reshape(layout.nodes, g)
        if np.any(by_node != by_node[:, :1]):
            raise SpecError(source, "tables", "table-row-wise shards must fill every GPU of their node alike")
        self.rank = int(rank)
        self.t = int(self.tables[self.rank])
        # the column-equivalent width: one for every rank, or per rank (the gcd of the widths each rank holds;
        # alike on the GPUs of a node, as the tables)
        dims = np.asarray(dim, dtype=np.int64)
        if dims.shape not in ((), (n,)):
            raise SpecError(source, "dim", f"needs one width or one for each of the {n} ranks")
        dims = np.broadcast_to(dims, (n,))
        if np.any(dims < 1):
            raise SpecError(source, "dim", "needs a width >= 1 for every rank")
        if np.any(dims.reshape(layout.nodes, g) != dims.reshape(layout.nodes, g)[:, :1]):
            raise SpecError(source, "dim", "table-row-wise shards must have one width on every GPU of their node")
        self.dims = dims
        self.B, self.D, self.eb = int(global_batch), int(dims[self.rank]), int(elem_bytes)
        if self.B % n:
            raise SpecError(source, "global_batch", f"{self.B} is not divisible by the {n} ranks")
        self.b = self.B // n
        self.bags = int(bags)
        if self.bags < 1 or self.b % self.bags:
            raise SpecError(source, "bags", f"{bags} bags per workgroup do not divide the {self.b} bags per rank")
        self.kernel = work if self.t > 0 else None
        if self.t > 0 and (work is None or work.num_workgroups != self.t * self.B // self.bags):
            raise SpecError(source, "work", f"the pooling kernel needs {self.t * self.B // self.bags} workgroups "
                                            f"({self.t} tables x {self.B // self.bags} blocks of {self.bags} bags)")
        self.kb = self.b // self.bags                       # blocks per owner
        self.Q = layout.nodes * self.kb * self.t            # workgroups per reducer range
        self.wg_bytes = self._wg_bytes(self.rank)

    @staticmethod
    def bags_for(b: int, bags_per_wg: int) -> int:
        """Bags per workgroup: the largest divisor of ``b`` up to ``bags_per_wg`` (a workgroup has one owner)."""
        return largest_divisor_at_most(b, bags_per_wg)

    def work(self, variant: str) -> KernelWork | None:
        import dataclasses

        return None if self.kernel is None else dataclasses.replace(self.kernel, variant=variant)

    def collective_size_bytes(self) -> float:
        return float(self.t * self.B * self.D * self.eb)

    def _wg_bytes(self, rank: int) -> float:
        """Bytes of one of ``rank``'s workgroups (its node's width)."""
        return float(self.bags * int(self.dims[rank]) * self.eb)

    def _wgs(self, rank: int):
        """Per workgroup of ``rank``: reducer rank, position in the reducer's range (``q``)."""
        g, N, t = self.layout.gpus_per_node, self.layout.nodes, int(self.tables[rank])
        per_table = self.B // self.bags
        i = np.arange(t * per_table, dtype=np.int64)
        tau, beta = i // per_table, i % per_table
        owner = beta // self.kb
        w = beta % self.kb
        k = rank // g
        reducer = k * g + owner % g
        sp = ((owner // g - k) % N - 1) % N                # owner node offset, other nodes first
        q = (sp * self.kb + w) * t + tau
        return reducer, q

    def wg_destinations(self, rank: int):
        reducer, _q = self._wgs(rank)
        return reducer, np.full(len(reducer), self._wg_bytes(rank))

    def order(self, rank: int, fabric, tile_order: str, slice_wgs: int = 1) -> np.ndarray:
        reducer, q = self._wgs(rank)
        if tile_order == "natural":
            return np.arange(len(q), dtype=np.int64)
        g = self.layout.gpus_per_node
        shift = (reducer % g - rank % g) % g
        return np.lexsort((q, shift, q // max(1, int(slice_wgs)))).astype(np.int64)

    def owners(self, reducer: int, q: np.ndarray) -> np.ndarray:
        """The bags' owners of positions ``q`` of ``reducer``'s range."""
        g, N = self.layout.gpus_per_node, self.layout.nodes
        sig = (q // (self.kb * self.t) + 1) % N
        return ((reducer // g + sig) % N) * g + reducer % g

    def output_by_destination(self, rank: int, fabric, tile_order: str):
        """:meth:`bytes_by_destination` (order-free)."""
        return self.bytes_by_destination(rank)

    def bytes_by_destination(self, rank: int) -> tuple[np.ndarray, np.ndarray]:
        """``(dst[], bytes[])``: what ``rank``'s kernel sends each node-local reducer (``Q`` workgroups' outputs
        each; for :func:`~simfuse.fused.base.fused_work`, without the per-workgroup arrays)."""
        g = self.layout.gpus_per_node
        t = int(self.tables[rank])
        dst = np.arange((rank // g) * g, (rank // g + 1) * g, dtype=np.int64)
        return dst, np.full(g, twrw_stage1_bytes(self.layout.nodes, self.b, int(self.dims[rank]), self.eb, t))

    def destination_summary(self, rank: int):
        """Closed form: ``Q`` workgroups (``nodes x kb x tables[rank]``) to each node-local reducer, none without
        tables."""
        g = self.layout.gpus_per_node
        Q = self.layout.nodes * self.kb * int(self.tables[rank])
        if Q == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0)
        return (np.arange((rank // g) * g, (rank // g + 1) * g, dtype=np.int64), np.full(g, Q, dtype=np.int64),
                np.full(g, self._wg_bytes(rank)))

    def member_process(self, ctx, inst, entity: int, rank: int, knobs):
        """simpy process of one rank: pooling kernel with stage-1 pushes; its reducer's stage 2 runs on after the
        kernel (the rank is started when it is done).  Returns the kernel's end (s).

        Closed form (:class:`_TwrwStage1`): each wave (macro-wave beyond :data:`MAX_TWRW_PUSH_WAVES` waves, as
        :class:`~simfuse.fused.base.RunPushEngine` beyond :data:`~simfuse.fused.base.MAX_PUSH_WAVES`) completes
        a contiguous range of every reducer's slices; they leave as one flow per reducer, and the reducer counts
        arrivals on slice ranges (:class:`_Coverage`) instead of per workgroup.  ``tests/fused/test_twrw_closed_form.py``
        checks it against the per-workgroup model (:class:`~simfuse.fused.base.PushEngine`)."""
        from ..engine.compute import run_kernel_waves
        from . import base as _base

        env = ctx.sim.env
        inst.enter(entity)
        if self.t == 0:
            inst.start(entity)
            return env.now
        topology, g = ctx.topology, self.layout.gpus_per_node
        gi = topology.gpu_initiated
        # a push to reducer h is credited to h's simulated stand-in: h in full simulation, the representative of
        # h's class with orbit classes; rank 0's own state in the symmetric mode (relabelling)
        rep_of = ctx.rep_of
        symmetric = ctx.fabric.symmetric and not ctx.orbit_classes
        reduce_s = ctx.cost.reduction_time_s(g * max(1, int(knobs.slice_wgs)) * self.wg_bytes)
        tag = f"{self.name}:rail"
        batch = -(-self.Q // MAX_STAGE2_PUTS)
        st = inst.shared("twrw_state")  # reducer rank -> its coverage, reductions and puts
        sched = _TwrwStage1(self, rank, ctx.fabric, topology, knobs)

        def reducer_state(r: int):
            s = st.get(r)
            if s is None:
                s = st[r] = {"cov": _Coverage(sched.K, g), "reduced": 0, "procs": [], "done": env.event(),
                             "ready": [], "n_ready": 0}
            return s

        def stage2(r: int, ranges):
            yield env.timeout(reduce_s)
            cnt = sched.owner_counts(ranges)
            cnt[r // g] = 0                                  # the bags of the reducer's own node stay there
            away = np.flatnonzero(cnt)
            if len(away):
                yield env.timeout(gi.put_issue_s)
                uo = away * g + r % g
                for grp, done in start_puts(ctx.net, ctx.fabric, gi, r, uo, cnt[away] * self.wg_bytes, tag):
                    inst.register(grp, done)

        def land(entries):
            """Partials landed: ``entries`` = [(reducer, kappa0, kappa1), ...] (one landing)."""
            by_r: dict[int, list] = {}
            for r, k0, k1 in entries:
                by_r.setdefault(r, []).append((k0, k1))
            for r in sorted(by_r):
                rs = reducer_state(r)
                full = rs["cov"].add(by_r[r])
                if not full:
                    continue
                nq = sum(sched.F(b) - sched.F(a) for a, b in full)
                rs["reduced"] += nq
                rs["ready"].extend(full)
                rs["n_ready"] += nq
                # reduced slices go out in at most MAX_STAGE2_PUTS batches per reducer (as the pushes are
                # coalesced to at most MAX_PUSH_WAVES waves): the event count stays bounded at any scale
                if rs["n_ready"] >= batch or rs["reduced"] == self.Q:
                    rs["procs"].append(env.process(stage2(r, rs["ready"])))
                    rs["ready"], rs["n_ready"] = [], 0
                if rs["reduced"] == self.Q:
                    env.process(_all_then(env, list(rs["procs"]), rs["done"]))

        def arrived(entries):
            return lambda _ev: land(entries)

        def on_wave(lo: int, hi: int, _t: float) -> None:
            if sched.hold_all:
                if hi < sched.W:
                    return
                lo = 0
            a, b = sched.kappas(lo), sched.kappas(hi)
            local, remote = [], []
            for h in range(g):
                if b[h] > a[h]:
                    (local if h == 0 else remote).append(h)
            if local:
                land([(rank, a[0], b[0])])
            if not remote:
                return
            remote.sort(key=lambda h: sched.reducers[h])
            dsts = sched.reducers[remote]
            sizes = np.array([(sched.F(b[h]) - sched.F(a[h])) * self.wg_bytes for h in remote])
            for grp, ev in start_puts(ctx.net, ctx.fabric, gi, rank, dsts, sizes, self.name):
                gd = set(np.asarray(grp.dsts).tolist())
                entries = [(rank if symmetric else rep_of(int(sched.reducers[h])), a[h], b[h]) for h in remote
                           if int(sched.reducers[h]) in gd]
                ev.callbacks.append(arrived(entries))
                inst.register(grp, ev)

        occ = knobs.effective_occupancy_loss(topology)
        kernel_end = yield env.process(run_kernel_waves(
            ctx.sim, fused_work(self, knobs, ctx.fabric, rank), ctx.cost, rank=rank, on_wave=on_wave,
            wave_overhead_s=sched.wave_overhead_s, occupancy_loss=occ,
            persistent_grid=knobs.persistent_grid or None,
            max_events=min(_base.MAX_PUSH_WAVES, MAX_TWRW_PUSH_WAVES)))
        done = reducer_state(rank)["done"]

        def finish():
            yield done
            inst.start(entity)

        env.process(finish())
        return kernel_end


def _all_then(env, events, done):
    """simpy process: wait for ``events``, then fire ``done``."""
    if events:
        yield simpy.AllOf(env, events)
    done.succeed()
