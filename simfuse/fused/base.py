"""Fused computation-collective operators and their bulk-synchronous baselines.

A fused operator is a compute kernel whose workgroups push their output to peer GPUs as soon as they finish.
The model (see docs/design.md):

* compute: the kernel's grid runs in waves (:mod:`simfuse.engine.compute`); the fused variant may lose
  occupancy to communication state and pays HBM traffic for what NICs read back (``hbm_comm_factor``);
* slices: consecutive workgroups (in execution order) with the same destination form slices of ``slice_wgs``
  workgroups; the last workgroup of a slice issues the transfer: intra-node a direct store burst over NVLink
  (``store_issue_s`` of that workgroup's time), inter-node a NIC put (``put_issue_s``, then the doorbell/proxy
  latency ``nic_proxy_latency_s`` before the wire); then a completion flag (``flag_latency_s``);
* tile order: ``remote_first`` runs the workgroups whose output leaves the node first, then other GPUs of the
  node, then the local ones; ``natural`` keeps the operator's index order;
* the consumer is ready when every slice addressed to it has arrived and its flag is visible.

The baseline is the same kernel unfused, the collective's launch gap, then the bulk collective.

Symmetric mode simulates the representative rank 0 (its peers are relabellings of it) on class links; full
mode simulates every rank on physical links.  Both are checked against each other in the tests.
"""

from __future__ import annotations

import bisect
import dataclasses
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np
import simpy

from ..collectives import Layout
from ..collectives.posting import post_gates, post_queue, put_rule
from ..costs import CostModel, KernelWork
from ..engine import Simulation, run_kernel
from ..errors import SpecError
from ..network import INTRA, SELF, Fabric, FlowNetwork
from ..spec import TopologySpec
from ..units import DTYPE_BYTES  # noqa: F401  (re-exported)
from .knobs import FusedKnobs


def largest_divisor_at_most(n: int, cap: int) -> int:
    """The largest divisor of ``n`` up to ``cap`` (1 at least): a tile or bag block with one owner."""
    for d in range(min(cap, n), 0, -1):
        if n % d == 0:
            return d
    return 1


@dataclass
class OpResult:
    """Baseline and fused times of one operator instance, with a breakdown (seconds)."""

    op: str
    ranks: int
    nodes: int
    gpus_per_node: int
    baseline_time_s: float
    fused_time_s: float
    baseline_compute_s: float
    baseline_exposed_comm_s: float
    fused_compute_s: float
    fused_exposed_comm_s: float
    comm_bytes_per_rank: float
    mode: str
    events: int
    params: dict = field(default_factory=dict)
    #: prediction intervals from the calibration's residuals: {"baseline_time_s": {"p10":..}, "fused_time_s": ..,
    #: "speedup": ..}; empty without residuals
    intervals: dict = field(default_factory=dict)

    @property
    def speedup(self) -> float:
        return self.baseline_time_s / self.fused_time_s if self.fused_time_s > 0 else float("nan")

    @property
    def time_reduction(self) -> float:
        return 1.0 - self.fused_time_s / self.baseline_time_s if self.baseline_time_s > 0 else 0.0

    def as_dict(self) -> dict:
        d = {k: v for k, v in dataclasses.asdict(self).items() if k not in ("params", "intervals")}
        d["speedup"] = self.speedup
        d["time_reduction"] = self.time_reduction
        d["breakdown"] = {
            "baseline": {"compute_s": self.baseline_compute_s, "exposed_comm_s": self.baseline_exposed_comm_s},
            "fused": {"compute_s": self.fused_compute_s, "exposed_comm_s": self.fused_exposed_comm_s},
        }
        d["params"] = dict(self.params)
        d["intervals"] = {k: dict(v) for k, v in self.intervals.items()}
        return d


class FusedOp(ABC):
    """Base class.  Subclasses describe the compute kernel and where each workgroup's output goes.

    Execution contract (how :mod:`simfuse.graph.executor` runs a :class:`~simfuse.graph.ir.FusedNode`), one of
    two, chosen by the base class (``exchange`` says which):

    * :class:`MemberOp` (``exchange = True``): per rank, :meth:`MemberOp.member_process` against a shared
      exchange instance (each rank's data is ready when everything addressed to it has landed); :class:`PushOp`
      implements it for operators whose workgroups push their output to one peer each;
    * :class:`GroupOp` (``exchange = False``): :meth:`GroupOp.fused_process` runs once for all simulated ranks
      when every one of them has reached the node (operators with phases across ranks).
    """

    exchange = False

    name = "fused_op"
    collective = "all_to_all"
    defaults: dict = {}

    def __init__(self, params: dict, layout: Layout, source: str = "<params>"):
        self.layout = layout
        self.source = source
        self.params = {**self.defaults, **params}

    # --- to implement ---------------------------------------------------------------------------------
    @abstractmethod
    def work(self, variant: str) -> KernelWork:
        """The kernel (``variant``: ``compute`` for the baseline's, ``fused`` for the fused one's)."""

    def wg_destinations(self, rank: int) -> tuple[np.ndarray, np.ndarray]:
        """``(dst_rank[W], out_bytes[W])``: where workgroup ``i`` of ``rank`` sends its output."""
        raise NotImplementedError

    @abstractmethod
    def collective_size_bytes(self) -> float:
        """Per-rank buffer of the baseline's bulk collective (nccl-tests convention)."""

    # --- closed forms an operator may give (the defaults read the per-workgroup arrays) -----------------
    def wg_runs(self, rank: int, fabric, tile_order: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The workgroups of ``rank`` in execution order as runs of alike workgroups (:func:`wg_runs`)."""
        return _runs_of_workgroups(self, rank, fabric, tile_order)

    def output_by_destination(self, rank: int, fabric, tile_order: str) -> tuple[np.ndarray, np.ndarray]:
        """``(dst[], bytes[])``: what ``rank``'s kernel sends (order-free; :func:`fused_work` prices the NIC's
        reads of what leaves the node).  Default: per workgroup (:meth:`wg_destinations`)."""
        return self.wg_destinations(rank)

    def destination_summary(self, rank: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Where ``rank``'s output goes, order-free: ``(dst[R], count[R], bytes_each[R])``, ``count[i]`` outputs
        of ``bytes_each[i]`` bytes each to rank ``dst[i]`` (workgroup outputs for an operator whose workgroups push;
        rows need not be distinct).  What :func:`simfuse.graph.symmetry.relative_signature` compares across ranks.

        The default reads it off :meth:`wg_destinations` (per-workgroup arrays: ``W`` entries); the operators here
        give it in closed form (one row per destination; the embedding operator's ``W`` reaches tens of
        millions), checked against this default in ``tests/fused/test_destination_summary.py``."""
        dst, out = self.wg_destinations(rank)
        dst, out = np.asarray(dst, dtype=np.int64), np.asarray(out, dtype=float)
        order = np.lexsort((out, dst))
        d, o = dst[order], out[order]
        new = np.ones(len(d), dtype=bool)
        new[1:] = (d[1:] != d[:-1]) | (o[1:] != o[:-1])
        starts = np.flatnonzero(new)
        return d[starts], np.diff(np.append(starts, len(d))).astype(np.int64), o[starts]

    # --- shared ---------------------------------------------------------------------------------------
    def order(self, rank: int, fabric: Fabric, tile_order: str, slice_wgs: int = 1) -> np.ndarray:
        """Execution order of the workgroups of ``rank`` (``slice_wgs``: the knob, for operators whose order
        interleaves slices, :class:`~simfuse.fused.ops.TwrwEmbeddingPush`; unused here).

        ``remote_first``: workgroups bound for other nodes first, then other GPUs of the node, then local ones;
        destinations are visited in *shifted* order (node offset, then local offset from this rank), so at every
        moment each receiver is targeted by one sender per position: rank r's schedule is a relabelling of rank
        0's, which makes the representative-rank simulation exact.  ``natural``: the operator's index order,
        the same for every rank (every rank starts with rank 0's slice: incast; simulated in full mode).
        """
        dst, _ = self.wg_destinations(rank)
        W = len(dst)
        if tile_order == "natural":
            return np.arange(W, dtype=np.int64)
        g, N = self.layout.gpus_per_node, self.layout.nodes
        node_shift = (dst // g - rank // g) % N
        local_shift = (dst % g - rank % g) % g
        prio = np.where(node_shift != 0, 0, np.where(local_shift != 0, 1, 2))
        return np.lexsort((np.arange(W), local_shift, node_shift, prio)).astype(np.int64)

def dtype_bytes(dtype: str, source: str, field_name: str = "dtype") -> int:
    if dtype not in DTYPE_BYTES:
        raise SpecError(source, field_name, f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPE_BYTES)}")
    return DTYPE_BYTES[dtype]


def _slices(order: np.ndarray, dst: np.ndarray, slice_wgs: int) -> np.ndarray:
    """Slice id of each workgroup: runs of equal destination in execution order, cut every ``slice_wgs``."""
    W = len(order)
    slice_of = np.empty(W, dtype=np.int64)
    if W == 0:
        return slice_of
    d_in_order = dst[order]
    new_run = np.ones(W, dtype=bool)
    new_run[1:] = d_in_order[1:] != d_in_order[:-1]
    run_id = np.cumsum(new_run) - 1
    run_start = np.flatnonzero(new_run)
    pos_in_run = np.arange(W) - run_start[run_id]
    cut = new_run | (pos_in_run % slice_wgs == 0)
    slice_of[order] = np.cumsum(cut) - 1
    return slice_of


def start_puts(net: FlowNetwork, fabric: Fabric, gi, src: int, dsts: np.ndarray, sizes_bytes: np.ndarray,
               tag: str, messages: np.ndarray | None = None) -> list:
    """GPU-initiated transfers ``src -> dsts[i]`` of ``sizes_bytes[i]`` (one batch: the puts one GPU issues
    at one moment); ``gi``: the topology's ``gpu_initiated``; ``messages[i]``: how many puts the transfer to
    ``dsts[i]`` stands for (default one: a wave's slices to one destination leave as one flow, but each slice is
    its own put).  Returns ``[(flow group, completion event), ...]``.

    * Every flow group pays the flag latency and, off the node, the NIC doorbell/proxy latency.
    * Off-node puts pay the per-destination post rule the bulk exchange pays too
      (:mod:`simfuse.collectives.posting`): ``gi.put_post_s`` per put on the GPU's post queue for this operation
      (``tag``), serial across its batches, in shifted destination order; a put lands at ``max(drain, its post) + latency``.  NVLink stores
      (inside the node) post nothing.
    """
    dsts = np.asarray(dsts, dtype=np.int64)
    groups = fabric.flow_groups(src, dsts, sizes_bytes)
    rule = put_rule(gi)
    remote = [grp.route_class not in (SELF, INTRA) for grp in groups]
    if rule.active and any(remote):
        if messages is None:
            def messages_of(_grp):
                return 1
        else:
            by_id = np.argsort(dsts, kind="stable")
            sd, sm = dsts[by_id], np.asarray(messages, dtype=np.int64)[by_id]

            def messages_of(grp):
                return sm[np.searchsorted(sd, np.asarray(grp.dsts, dtype=np.int64))]

        gates = post_gates(post_queue(net, src, rule, tag), float(net.env.now), src, fabric.n_ranks,
                           list(zip(groups, remote, strict=True)), messages_of)
    else:
        gates = [None] * len(groups)
    started = []
    for grp, off, gate in zip(groups, remote, gates, strict=True):
        lat = grp.latency_s + gi.flag_latency_s + (gi.nic_proxy_latency_s if off else 0.0)
        ev = net.transfer(grp.links, grp.size_bytes, lat, count=grp.count, weights=grp.weights, tag=tag,
                          not_before_s=None if gate is None else gate + lat)
        started.append((grp, ev))
    return started


class PushEngine:
    """Runs the fused kernel of one rank and pushes completed slices into the network (a simpy process)."""

    def __init__(self, sim: Simulation, fabric: Fabric, net: FlowNetwork, op: FusedOp, cost: CostModel,
                 knobs: FusedKnobs, topology: TopologySpec, rank: int, on_arrival=None, on_transfer=None):
        self.sim, self.fabric, self.net, self.op, self.cost = sim, fabric, net, op, cost
        self.knobs, self.topo, self.rank = knobs, topology, rank
        self.on_arrival = on_arrival  # callback(dsts ndarray, wg slice ids, time) when a slice's data lands
        self.on_transfer = on_transfer  # callback(flow group spec, completion event) for every transfer started
        dst, out_bytes = op.wg_destinations(rank)
        self.dst, self.out_bytes = dst, out_bytes
        self.order = op.order(rank, fabric, knobs.tile_order, knobs.slice_wgs)
        self.slice_of = _slices(self.order, dst, knobs.slice_wgs)
        n_slices = int(self.slice_of.max()) + 1 if len(self.slice_of) else 0
        self.slice_left = np.bincount(self.slice_of, minlength=n_slices)
        self.slice_bytes = np.bincount(self.slice_of, weights=out_bytes, minlength=n_slices)
        self.slice_dst = np.zeros(n_slices, dtype=np.int64)
        self.slice_dst[self.slice_of] = dst
        self.slice_cls = fabric.route_class(rank, self.slice_dst)
        # the last workgroup (in execution order) of each slice pays the issue overhead
        pos = np.empty(len(self.order), dtype=np.int64)
        pos[self.order] = np.arange(len(self.order))
        last_pos = np.full(n_slices, -1, dtype=np.int64)
        np.maximum.at(last_pos, self.slice_of, pos)
        gi = topology.gpu_initiated
        issue = np.where(self.slice_cls == SELF, 0.0, np.where(self.slice_cls == INTRA, gi.store_issue_s,
                                                               gi.put_issue_s))
        self.wg_overhead = np.zeros(len(self.order))
        self.wg_overhead[self.order[last_pos]] = issue
        self.pending: list[simpy.Event] = []
        # a slice as large as the kernel: every output leaves after the last workgroup (bulk, no launch gap)
        self.hold_all = knobs.slice_wgs >= len(self.order) > 0
        self._held: list[np.ndarray] = []
        self._left_total = len(self.order)

    def _complete(self, indices: np.ndarray, t: float) -> None:
        if self.hold_all:
            self._held.append(indices)
            self._left_total -= len(indices)
            if self._left_total > 0:
                return
            indices = np.concatenate(self._held)
        sl = self.slice_of[indices]
        np.subtract.at(self.slice_left, sl, 1)
        done = np.unique(sl[self.slice_left[sl] == 0])
        if len(done) == 0:
            return
        gi = self.topo.gpu_initiated
        # slices finishing together and bound for the same rank leave as one flow (same path, same start)
        dsts_all = self.slice_dst[done]
        local = dsts_all == self.rank
        if self.on_arrival is not None and local.any():
            self.on_arrival(dsts_all[local], done[local], t, self.rank)
        if local.all():
            return
        rdone, rdst = done[~local], dsts_all[~local]
        udst, inv = np.unique(rdst, return_inverse=True)
        usize = np.bincount(inv.reshape(-1), weights=self.slice_bytes[rdone])
        nputs = np.bincount(inv.reshape(-1))  # one put per slice
        for grp, ev in start_puts(self.net, self.fabric, gi, self.rank, udst, usize, self.op.name, nputs):
            members = rdone[np.isin(rdst, grp.dsts)] if self.on_arrival is not None else None
            ev.callbacks.append(self._arrived(members))
            self.pending.append(ev)
            if self.on_transfer is not None:
                self.on_transfer(grp, ev)

    def _arrived(self, slices):
        def cb(_ev):
            if self.on_arrival is not None:
                self.on_arrival(self.slice_dst[slices], slices, self.sim.now, self.rank)
        return cb

    def process(self, work: KernelWork, occupancy_loss: float, record_track: str | None = None,
                wait: bool = True):
        """Run the kernel and (``wait``) wait for every push to land.  Returns (kernel_end_s, all_arrived_s)."""
        env = self.sim.env
        kernel_end = yield env.process(run_kernel(
            self.sim, work, self.cost, rank=self.rank, order=self.order, on_complete=self._complete,
            wg_overhead_s=lambda idx: self.wg_overhead[idx], occupancy_loss=occupancy_loss,
            persistent_grid=self.knobs.persistent_grid or None, track=record_track))
        if wait and self.pending:
            yield simpy.AllOf(env, self.pending)
        return kernel_end, env.now


def wg_runs(op: FusedOp, rank: int, fabric: Fabric, tile_order: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The workgroups of ``rank`` in execution order as runs of alike workgroups: ``(dst[R], count[R],
    out_bytes_per_wg[R])``.  An operator with a closed form (``op.wg_runs``, e.g. the embedding operator, whose
    grid has ``tables x global_batch / bags_per_wg`` workgroups but only ``tables x ranks`` runs) gives it
    without per-workgroup arrays; otherwise the runs are read off :meth:`FusedOp.wg_destinations` and
    :meth:`FusedOp.order`."""
    return op.wg_runs(rank, fabric, tile_order)


def _runs_of_workgroups(op: FusedOp, rank: int, fabric: Fabric, tile_order: str):
    """:meth:`FusedOp.wg_runs` read off the per-workgroup :meth:`FusedOp.wg_destinations` and :meth:`FusedOp.order`."""
    dst, out = op.wg_destinations(rank)
    order = op.order(rank, fabric, tile_order)
    d, o = dst[order], np.asarray(out, dtype=float)[order]
    if len(d) == 0:
        return d, np.zeros(0, dtype=np.int64), o
    new = np.ones(len(d), dtype=bool)
    new[1:] = (d[1:] != d[:-1]) | (o[1:] != o[:-1])
    starts = np.flatnonzero(new)
    counts = np.diff(np.append(starts, len(d)))
    return d[starts], counts.astype(np.int64), o[starts]


#: most push points (macro-waves, :func:`~simfuse.engine.compute.run_kernel_waves`) of one fused kernel in
#: :class:`RunPushEngine`.  Kernels with fewer waves run wave by wave (exact, the same numbers as
#: :class:`PushEngine`); bigger ones (the embedding operator pools the whole global batch: 2,048 waves per holder
#: at 8,192 GPUs, 32,768 at 131,072) push once per macro-wave, at most 1/256 of the kernel late.  Each push
#: point starts flows that stay active while the NICs drain them, so the flow network's work grows with
#: (push points)^2: 2,048 waves x 19 holder classes took 220 s at 1,024 nodes.  With 256 the last arrival moves
#: by about one macro-wave at most (1.3 macro-waves in a comm-bound test, tests/fused/test_run_push_engine.py),
#: i.e. < 0.6% of the kernel; at 1,024 nodes (DLRM-DCNv2, planned, fused) the iteration changed by 1.4e-6.
MAX_PUSH_WAVES = 256


class RunPushEngine:
    """:class:`PushEngine` over runs of alike workgroups (:func:`wg_runs`), for operators whose grid is too large
    for per-workgroup arrays (the embedding operator at thousands of GPUs has millions of workgroups).

    Same model, same numbers: slices are runs cut every ``slice_wgs`` workgroups; the last workgroup of a slice
    pays the issue overhead of its destination's route class; a wave lasts its base time plus the largest
    overhead among its workgroups (:func:`~simfuse.engine.compute.run_kernel_waves`); when a wave ends, the
    slices it completed leave, one flow per destination; a slice as large as the kernel holds every output until
    the kernel ends.  Each wave costs O(runs it touches), not O(workgroups).  ``tests/fused`` checks it against
    :class:`PushEngine`.  No ``on_arrival`` (slice ids): the reduction operators keep :class:`PushEngine`."""

    def __init__(self, sim: Simulation, fabric: Fabric, net: FlowNetwork, op: FusedOp, cost: CostModel,
                 knobs: FusedKnobs, topology: TopologySpec, rank: int, on_transfer=None):
        self.sim, self.fabric, self.net, self.op, self.cost = sim, fabric, net, op, cost
        self.knobs, self.topo, self.rank = knobs, topology, rank
        self.on_transfer = on_transfer
        self.run_dst, run_len, self.run_wg_bytes = wg_runs(op, rank, fabric, knobs.tile_order)
        self.run_end = np.cumsum(run_len)
        self.run_start = self.run_end - run_len
        self.W = int(self.run_end[-1]) if len(run_len) else 0
        self.s = max(1, int(knobs.slice_wgs))
        cls = fabric.route_class(rank, self.run_dst)
        gi = topology.gpu_initiated
        self.run_issue = np.where(cls == SELF, 0.0, np.where(cls == INTRA, gi.store_issue_s, gi.put_issue_s))
        self.hold_all = self.s >= self.W > 0
        self.pending: list[simpy.Event] = []
        # scalar look-ups per wave without numpy call overhead: run bounds as lists, and per distinct issue cost
        # (at most three: self, NVLink store, NIC put) the sorted indices of the runs that pay it
        self._end_l, self._start_l = self.run_end.tolist(), self.run_start.tolist()
        self._issue_runs = [(float(v), np.flatnonzero(self.run_issue == v).tolist())
                            for v in sorted(set(self.run_issue.tolist()), reverse=True) if v > 0]

    def _span(self, lo: int, hi: int) -> slice:
        """The runs overlapping execution positions ``[lo, hi)``."""
        return slice(bisect.bisect_right(self._end_l, lo), bisect.bisect_left(self._start_l, hi))

    def wave_overhead_s(self, lo: int, hi: int) -> float:
        sp = self._span(lo, hi)
        if self.s == 1:  # every workgroup ends a slice: the costliest issue among the runs the wave touches
            for v, idx in self._issue_runs:
                j = bisect.bisect_left(idx, sp.start)
                if j < len(idx) and idx[j] < sp.stop:
                    return v
            return 0.0
        st, en, s = self.run_start[sp], self.run_end[sp], self.s
        x = np.maximum(lo, st) - st                       # first position of the wave inside each run
        first_end = np.minimum(st + -(-(x + 1) // s) * s - 1, en - 1)  # first slice end at or after it
        has = first_end < hi
        return float(self.run_issue[sp][has].max()) if has.any() else 0.0

    def _done_wgs(self, sp: slice, pos: int) -> np.ndarray:
        """Workgroups of each run in ``sp`` whose slice has completed once positions ``< pos`` have run."""
        st, en = self.run_start[sp], self.run_end[sp]
        part = (np.clip(pos - st, 0, None) // self.s) * self.s
        return np.where(pos >= en, en - st, np.minimum(part, en - st))

    def on_wave(self, lo: int, hi: int, _t: float) -> None:
        if self.hold_all:
            if hi < self.W:
                return
            lo = 0
        sp = self._span(max(0, lo - self.s), hi)
        done_hi, done_lo = self._done_wgs(sp, hi), self._done_wgs(sp, lo)
        delta = done_hi - done_lo
        dst = self.run_dst[sp]
        keep = (delta > 0) & (dst != self.rank)
        if not keep.any():
            return
        s = self.s
        puts = -(-done_hi // s) - -(-done_lo // s)  # slices (one put each) the wave completed, per run
        udst, inv = np.unique(dst[keep], return_inverse=True)
        usize = np.bincount(inv.reshape(-1), weights=delta[keep] * self.run_wg_bytes[sp][keep])
        nputs = np.bincount(inv.reshape(-1), weights=puts[keep]).astype(np.int64)
        for grp, ev in start_puts(self.net, self.fabric, self.topo.gpu_initiated, self.rank, udst, usize,
                                  self.op.name, nputs):
            self.pending.append(ev)
            if self.on_transfer is not None:
                self.on_transfer(grp, ev)

    def process(self, work: KernelWork, occupancy_loss: float, record_track: str | None = None,
                wait: bool = True):
        """Run the kernel and (``wait``) wait for every push to land.  Returns (kernel_end_s, all_arrived_s)."""
        from ..engine.compute import run_kernel_waves

        env = self.sim.env
        kernel_end = yield env.process(run_kernel_waves(
            self.sim, work, self.cost, rank=self.rank, on_wave=self.on_wave, wave_overhead_s=self.wave_overhead_s,
            occupancy_loss=occupancy_loss, persistent_grid=self.knobs.persistent_grid or None, track=record_track,
            max_events=MAX_PUSH_WAVES))
        if wait and self.pending:
            yield simpy.AllOf(env, self.pending)
        return kernel_end, env.now

    def inter_bytes(self) -> float:
        """Bytes this rank's kernel sends off the node."""
        cls = self.fabric.route_class(self.rank, self.run_dst)
        off = (cls != SELF) & (cls != INTRA)
        return float(np.sum((self.run_end - self.run_start)[off] * self.run_wg_bytes[off]))


def fused_work(op: FusedOp, knobs: FusedKnobs, fabric: Fabric, rank: int = 0) -> KernelWork:
    """The fused kernel's work: the compute work (variant ``fused``) plus HBM bytes that NIC puts read back."""
    base = op.work("fused")
    dst, out = op.output_by_destination(rank, fabric, knobs.tile_order)
    cls = fabric.route_class(rank, dst)
    inter = float(np.sum(out[(cls != SELF) & (cls != INTRA)]))
    extra = knobs.hbm_comm_factor * inter / max(1, base.num_workgroups)
    return dataclasses.replace(base, bytes_per_wg=base.bytes_per_wg + extra)


class MemberOp(FusedOp):
    """A fused operator each simulated rank runs on its own, against the node's shared exchange instance."""

    exchange = True

    @abstractmethod
    def member_process(self, ctx, inst, entity: int, rank: int, knobs: FusedKnobs):
        """simpy process of rank ``rank`` (simulated entity ``entity``): ``inst.enter(entity)`` when it reaches
        the node, ``inst.start(entity)`` once its data may be consumed, flows filed with ``inst.register``.
        Returns the kernel's end (s)."""


class GroupOp(FusedOp):
    """A fused operator run once for every simulated rank of the node (phases across ranks)."""

    exchange = False

    @abstractmethod
    def fused_process(self, sim, fabric, net, cost, knobs, topology, ranks, occupancy_loss):
        """simpy process over ``ranks`` (each reached the node).  Returns ``(kernel_end_s, end_s)``."""


class PushOp(MemberOp):
    """A fused operator whose collective is an all-to-all of each workgroup's output (embedding, MoE GEMM).

    In an operator graph (:class:`~simfuse.graph.ir.FusedNode`) each simulated rank runs
    :meth:`member_process` against a shared :class:`~simfuse.collectives.exchange.ExchangeInstance`: the kernel
    pushes completed slices (:class:`PushEngine`); the rank's data is ready when every rank's pushes to it
    have landed."""

    def member_process(self, ctx, inst, entity: int, rank: int, knobs: FusedKnobs):
        """simpy process of one rank: enter, run the pushing kernel, started.  Returns the kernel's end (s)."""
        topology = ctx.topology
        occ = knobs.effective_occupancy_loss(topology)
        inst.enter(entity)
        eng = RunPushEngine(ctx.sim, ctx.fabric, ctx.net, self, ctx.cost, knobs, topology, rank,
                            on_transfer=inst.register)
        res = yield ctx.sim.env.process(eng.process(fused_work(self, knobs, ctx.fabric, rank), occ, wait=False))
        inst.start(entity)
        return res[0]
