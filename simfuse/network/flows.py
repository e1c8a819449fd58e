"""Flow-level network: concurrent flows share link bandwidth max-min fairly (fluid model).

A *flow group* stands for ``count`` identical flows (same size, same start, same path *class*).  Its path is a
list of ``(link, weight)`` entries: the group adds ``weight * rate`` to that link's load, where ``rate`` is the
rate of one of its flows.  In full simulation every group has ``count = 1`` and weights 1; under symmetry a
group of ``count`` flows from the representative rank crosses class links with weight ``count``.

Rates are recomputed (max-min fair) only when a group starts or finishes; all starts and finishes at the
same simulated instant are coalesced into one recomputation.  A flow's last byte arrives ``latency_s`` after it
leaves (so an uncongested transfer takes ``latency_s + size_bytes / bw``).  With a resolution (``resolution_s``, workload runs:
:data:`RATE_RESOLUTION_S`) and many flows in flight (:data:`GRID_MIN_ENTRIES`), recomputations happen only at
multiples of it: a group posted in between starts at the next one; a group whose bytes run out in between lands
at its own time (``latency_s`` after its last byte, no earlier than the next grid point) and frees its bandwidth
there.

Speed (issue 11).  The rate problems of a simulation are small (tens of bundles and links, under ten fill levels
at 1,024 DLRM nodes) and many (tens of thousands), so numpy's per-call overhead dominated a vectorised solver.
:func:`progressive_fill` is plain Python over per-link entry lists: a fill level costs the links still rising,
and a link's denominator is re-summed only when a group on it freezes.  Large problems (many entries) go to
:func:`_fill_numpy`, which reaches the same allocation vectorised in fewer passes (:func:`_fill_bottleneck`:
every locally minimal link stops in one round, where filling stops one level a pass; 55 levels against 8 rounds
on the problems of 64 fully simulated GPUs); the two agree within 1e-9 relative (round-off, and shares within
1e-9 of each other).  The network keeps each bundle's flow count as groups come and go, and the layout of every
set of active bundles it has solved (the Python path's with its links of identical entries pruned,
:class:`_Layout`; the vectorised path's gathered from flat per-bundle arrays).
``tests/network/test_flow_solver.py`` checks the solver and the network against plainly written references.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import simpy

_EPS_BYTES = 1e-6  # bytes; a group with less remaining is complete (guards float round-off)
_INF = float("inf")
#: from this many (group, link) entries on, a rate problem is solved vectorised (:func:`_fill_numpy`), below it in
#: plain Python (:func:`_fill`); :func:`_solve` is the one place that picks.  On large problems Python's
#: per-element cost outgrows numpy's per-call overhead (~15 calls a fill level).  Source: random problems of 3
#: links a group, ``experiments/bench_fill_threshold.py`` on the 2-core dev VM (results/bench_fill_threshold_*.csv):
#: numpy no slower than Python from 770-960 entries with the layout kept and 480-580 with it built each time over
#: 40 links, 380-580 and 290-380 over 200 links (runs of 5-10 problems a size; first measured when the solver was
#: written, issue 11: about 600 and 450).  Both solvers give the same rates within 1e-9 relative (the measurements
#: below predate the vectorised path's bottleneck rounds, which made it faster still), so the threshold moves
#: only wall time and round-off.  The simulator's own problems favour numpy earlier than random ones (many groups on few
#: links: Python's fill loops over the groups at every level).  Stop 24, `simfuse run` on the 2-core VM, two
#: interleaved runs each: DLRM-DCNv2 8 nodes 4.5 s at 512 -> 3.6-4.3 s at 128; DLRM-DCNv2 MLPerf 128 nodes
#: 5.6-6.8 -> 4.9-5.1 s; the MoE layer at 128 nodes 0.47-0.52 s at both; the 1,024-node weak-scaling run 8.5 ->
#: 7.7 s (15.7 -> 13.2 s with ``bound``).  So 128.
NUMPY_MIN_ENTRIES = 128
#: the re-sharing grid of workload simulations (s; ``FlowNetwork(resolution_s=...)``, the run setting
#: ``rate_resolution_ns``; standalone collectives run exact).  The fluid model re-shares bandwidth the instant a
#: flow starts or ends; a fabric cannot: credit-based flow control and congestion control react over a round trip,
#: and one network hop costs 3 us in the shipped files (scale_out.latency_us; NCCL's own hop latencies are
#: 2.7-14 us, NVIDIA/nccl src/graph/tuning.cc).  250 ns is a twelfth of that.  Measured effect
#: (experiments/results/bench_resolution.csv, every shipped model at 1-64 nodes against the exact model): iteration
#: times +0.12% at most, speedups within 0.0011; the MLPerf-family runs at 4-64 nodes 1.2-3.6x faster.
RATE_RESOLUTION_S = 250e-9
#: the grid applies only while the flows in flight make a large rate problem (this many path entries or more: the
#: problems the vectorised solver takes, each re-sharing a solve of hundreds to thousands of flows); with fewer,
#: every start and finish re-shares at once (a latency-bound step, e.g. a decode step's all-reduce of a few
#: microseconds, keeps exact timing, and its solves are cheap)
GRID_MIN_ENTRIES = NUMPY_MIN_ENTRIES
#: entries of the rate-problem layouts a network keeps (about 150 bytes each); all are dropped when it is exceeded
_MAX_LAYOUT_ENTRIES = 100_000
#: entries of the vectorised path's kept layouts (about 40 bytes each: 8 MB at the bound)
_MAX_NP_LAYOUT_ENTRIES = 200_000


class FlowNetwork:
    """Links with capacities (bytes/s) carrying flow groups.

    ``record_usage=True`` keeps the piecewise-constant load of every link (``usage`` list of
    ``(t_start_s, t_end_s, loads_bytes_per_s)``) for invariant checks; ``carried_bytes`` always integrates
    the bytes each link carried.

    Implementation: flows with the same path and per-flow weights (a *bundle*) always get the same max-min
    rate, so rates are solved per bundle (few) and applied to the groups (many) with numpy.  The flow count of
    every active bundle is kept up to date as groups start and finish (integer-valued floats: exact in any
    order), so a recomputation starts from the active bundles, not from the groups.
    """

    def __init__(self, sim, capacities_bytes_per_s: Sequence[float], names: Sequence[str] | None = None,
                 record_usage: bool = False, resolution_s: float = 0.0):
        self.sim = sim
        if not resolution_s >= 0.0 or not np.isfinite(resolution_s):
            raise ValueError("resolution_s must be finite and >= 0")
        #: rates are re-shared only at multiples of this (s); 0: at every start and finish (exact fluid model)
        self.resolution_s = float(resolution_s)
        self._grid_min = GRID_MIN_ENTRIES
        self.env: simpy.Environment = sim.env
        self.capacity = np.asarray(capacities_bytes_per_s, dtype=float)
        if np.any(self.capacity <= 0) or not np.all(np.isfinite(self.capacity)):
            raise ValueError("link capacities must be positive and finite")
        self._cap = self.capacity.tolist()
        self.names = list(names) if names is not None else [f"link{i}" for i in range(len(self.capacity))]
        self.n_links = len(self.capacity)
        self.record_usage = record_usage
        self.usage: list[tuple[float, float, np.ndarray]] = []
        self.carried_bytes = np.zeros(self.n_links)
        self.delivered_bytes = 0.0  # sum over completed flows of size (count * size)
        self.injected_bytes = 0.0
        self.completed_groups = 0
        # bundles: distinct (links, per-flow weights); bundle b crosses _b_links[b] with unit weights _b_w[b]
        self._bundle_ids: dict = {}
        self._raw_ids: dict = {}  # (links, weights, count) as passed to transfer -> bundle
        self._b_links: list[tuple] = []
        self._b_w: list[tuple] = []
        # every bundle's entries in one flat array pair (bundle b: ``_f_link/_f_w[_f_start[b]:][:_f_len[b]]``, grown
        # by doubling): the vectorised path gathers a set of active bundles' entries without a loop over them
        self._f_link = np.zeros(256, dtype=np.int64)
        self._f_w = np.zeros(256)
        self._f_start = np.zeros(64, dtype=np.int64)
        self._f_len = np.zeros(64, dtype=np.int64)
        self._f_used = 0
        self._np_layouts: dict = {}  # active bundles -> their entries as arrays (the vectorised path)
        self._np_layout_entries = 0
        self._bcount: dict[int, float] = {}  # active bundle -> flows in it (sum of its groups' counts)
        self._bc_arr = np.zeros(64)  # the same counts by bundle id (the vectorised path reads them at once)
        self._active: tuple | None = None  # sorted active bundles, kept until a bundle joins or leaves
        self._b_entries = 0  # entries (links) of the active bundles: picks the solver without a pass over them
        self._layouts: dict = {}  # active bundles (sorted ids) -> their rate problem's layout
        self._layout_entries = 0  # entries in the kept layouts
        # active groups, in start order, as numpy rows: remaining bytes, completion threshold (bytes), latency,
        # bytes delivered (count x size), count, earliest completion (s; ``not_before_s``, -inf: none); their bundle
        # ids and completion events (an object array: filtered with the same mask as the numbers)
        self._g = np.zeros((6, 0))
        self._bid = np.zeros(0, dtype=np.int64)
        self._done = np.empty(0, dtype=object)
        self._rate = np.zeros(0)
        # groups started since the last recomputation: (size, latency, count, bundle, event); merged into the
        # arrays once per recomputation instead of growing every array at every start
        self._new: list[tuple] = []
        self._last_t = 0.0
        self._version = 0
        self._pending = False
        self._loads = np.zeros(self.n_links)
        self._loaded = False  # any link with a non-zero load

    # -- public API -------------------------------------------------------------------------------------
    def transfer(self, links: Sequence[int], size_bytes: float, latency_s: float = 0.0, *, count: int = 1,
                 weights: Sequence[float] | None = None, tag=None, not_before_s: float | None = None) -> simpy.Event:
        """Start ``count`` identical flows of ``size_bytes`` each over ``links``; returns an event that fires
        when the last byte of every flow has arrived (``latency_s`` after it left), and not before the simulated
        time ``not_before_s`` (a gate known at the start, e.g. when the transfer's last message is posted plus its
        latency, :mod:`simfuse.collectives.posting`: one event where a wait on both would take three).

        ``weights[i]`` is the multiplicity on ``links[i]`` (default ``count`` on every link).
        """
        if size_bytes < 0 or latency_s < 0 or count < 1:
            raise ValueError("size_bytes and latency_s must be >= 0 and count >= 1")
        done = self.env.event()
        self.injected_bytes += size_bytes * count
        nb = -math.inf if not_before_s is None else float(not_before_s)
        if size_bytes <= 0 or len(links) == 0:
            # nothing crosses a link (local copy or empty message): only the latency
            if weights is not None and len(weights) != len(links):
                raise ValueError("weights must match links")
            self._finish_later(done, max(latency_s, nb - float(self.env.now)), size_bytes * count)
            return done
        # the bundle of a path as the caller gave it (flow groups hand over tuples): no conversion when seen before
        raw = (links, weights, count) if type(links) is tuple and type(weights) in (tuple, type(None)) else None
        bid = self._raw_ids.get(raw) if raw is not None else None
        if bid is None:
            links_t = tuple(map(int, links))
            if weights is None:
                unitw = (1.0,) * len(links_t)
            else:
                if len(weights) != len(links_t):
                    raise ValueError("weights must match links")
                unitw = tuple([float(w) / count for w in weights])
            key = (links_t, unitw)
            bid = self._bundle_ids.get(key)
            if bid is None:
                bid = self._bundle_ids[key] = len(self._b_links)
                self._b_links.append(links_t)
                self._b_w.append(unitw)
                self._add_flat(bid, links_t, unitw)
            if raw is not None:
                self._raw_ids[raw] = bid
        # rates are recomputed at this same instant (zero-delay wake-up) before any time passes, so the new group
        # waits in ``_new`` with no bytes moved
        self._new.append((float(size_bytes), float(latency_s), float(count), bid, done, nb))
        if not self._pending:
            self._pending = True
            self.env.timeout(self._to_grid(float(self.env.now))).callbacks.append(self._on_wakeup_now)
        return done

    def _to_grid(self, t: float, after: float = 0.0) -> float:
        """The delay from now until the first re-sharing instant at or after ``t + after`` (``t``: now): that
        instant itself without a resolution or while the flows in flight make a small problem
        (:data:`GRID_MIN_ENTRIES`), else the next multiple of :attr:`resolution_s`."""
        res = self.resolution_s
        if res <= 0.0 or self._b_entries < self._grid_min:
            return after
        return max(math.ceil((t + after) / res) * res - t, after)

    def _add_flat(self, bid: int, links_t: tuple, unitw: tuple) -> None:
        """Append bundle ``bid``'s entries to the flat arrays (and make room for its count)."""
        if bid >= len(self._bc_arr):
            self._bc_arr = np.concatenate([self._bc_arr, np.zeros(len(self._bc_arr))])
        if bid >= len(self._f_start):
            self._f_start = np.concatenate([self._f_start, np.zeros(len(self._f_start), dtype=np.int64)])
            self._f_len = np.concatenate([self._f_len, np.zeros(len(self._f_len), dtype=np.int64)])
        k, n = self._f_used, len(links_t)
        while k + n > len(self._f_link):
            self._f_link = np.concatenate([self._f_link, np.zeros(len(self._f_link), dtype=np.int64)])
            self._f_w = np.concatenate([self._f_w, np.zeros(len(self._f_w))])
        self._f_link[k:k + n] = links_t
        self._f_w[k:k + n] = unitw
        self._f_start[bid], self._f_len[bid] = k, n
        self._f_used = k + n

    @property
    def active_groups(self) -> int:
        return len(self._done) + len(self._new)

    def link_loads(self) -> np.ndarray:
        """Current load of every link (bytes/s)."""
        return self._loads.copy()

    # -- internals --------------------------------------------------------------------------------------
    def _finish_later(self, done: simpy.Event, latency_s: float, nbytes: float) -> None:
        def fire(_ev, done=done, b=nbytes):
            self.delivered_bytes += b
            self.completed_groups += 1
            done.succeed()

        if latency_s > 0:
            self.env.timeout(latency_s).callbacks.append(fire)
        else:
            fire(None)

    def _on_wakeup_now(self, _ev) -> None:
        self._pending = False
        if not self._new and self._last_t == float(self.env.now):
            return  # a recomputation at this instant already took the new groups in: the rates are current
        self._update()

    def _on_timer(self, version: int) -> None:
        if version != self._version:
            return  # superseded by a later recomputation
        self._update()

    def _update(self) -> None:
        now = float(self.env.now)
        n = len(self._done)
        g = self._g
        # move every active group forward to ``now`` at its current rate
        dt = now - self._last_t
        if dt > 0 and n:
            g[0] -= self._rate * dt
            if self._loaded:
                self.carried_bytes += self._loads * dt
            if self.record_usage:
                self.usage.append((self._last_t, now, self._loads.copy()))
        self._last_t = now
        bcount = self._bcount
        if n:
            t_tol = 1e-13 + 1e-12 * now  # below float resolution of the clock: treat as done
            rem = g[0]
            fin = (rem <= g[1]) | (rem / self._rate <= t_tol)
            if fin.any():
                idx = np.flatnonzero(fin)
                fg = g[:, idx]
                done = self._done
                over = np.maximum(-fg[0], 0.0)  # bytes a group "moved" past its end (re-sharing waits for the grid)
                early = (over / self._rate[idx]).tolist() if self.resolution_s > 0 else [0.0] * len(idx)
                if self.resolution_s > 0 and self._loaded:
                    self._uncarry(self._bid[idx], over * fg[4])
                for i, lat, nbytes, cnt, b, e, gate in zip(idx.tolist(), fg[2].tolist(), fg[3].tolist(),
                                                           fg[4].tolist(), self._bid[idx].tolist(), early,
                                                           fg[5].tolist(), strict=True):
                    self._finish_later(done[i], max(lat - e, gate - now, 0.0), nbytes)
                    left = bcount[b] - cnt
                    if left > 0:
                        bcount[b] = self._bc_arr[b] = left
                    else:
                        del bcount[b]
                        self._active = None
                        self._b_entries -= len(self._b_links[b])
                keep = ~fin
                self._g, self._bid, self._done = g[:, keep], self._bid[keep], done[keep]
        if self._new:
            # a new group has moved no bytes: it is complete at once only when it is below the byte tolerance
            new, fresh = self._new, []
            self._new = []
            for item in new:
                sz, lat, cnt, b, done, gate = item
                thr = _EPS_BYTES + 1e-9 * sz
                if sz <= thr:
                    self._finish_later(done, max(lat, gate - now), sz * cnt)
                else:
                    fresh.append((sz, thr, lat, sz * cnt, cnt, gate, b, done))
                    had = bcount.get(b)
                    if had is None:
                        bcount[b] = self._bc_arr[b] = cnt
                        self._active = None
                        self._b_entries += len(self._b_links[b])
                    else:
                        bcount[b] = self._bc_arr[b] = had + cnt
            if fresh:
                size_l, thr_l, lat_l, nb_l, cnt_l, gate_l, bid_l, done_l = zip(*fresh, strict=True)
                self._g = np.concatenate([self._g, np.array([size_l, thr_l, lat_l, nb_l, cnt_l, gate_l])], axis=1)
                self._bid = np.concatenate([self._bid, np.array(bid_l, dtype=np.int64)])
                new_done = np.empty(len(done_l), dtype=object)
                new_done[:] = done_l
                self._done = np.concatenate([self._done, new_done])
        self._version += 1
        if len(self._done):
            rate = self._rate = self._compute_rates()[self._bid]
            t_next = max(float((self._g[0] / rate).min()), 0.0)
            version = self._version
            self.env.timeout(self._to_grid(now, t_next)).callbacks.append(lambda _ev, v=version: self._on_timer(v))
        else:
            self._rate = np.zeros(0)
            if self._loaded:
                self._loads = np.zeros(self.n_links)
                self._loaded = False

    def _uncarry(self, bids: np.ndarray, flows_bytes: np.ndarray) -> None:
        """Take back from ``carried_bytes`` what finished groups were counted as carrying after their last byte
        left (``flows_bytes``: the overrun of one flow x the group's flow count, per group of bundle ``bids``)."""
        for b, nb in zip(bids.tolist(), flows_bytes.tolist(), strict=True):
            if nb > 0.0:
                for lk, w in zip(self._b_links[b], self._b_w[b], strict=True):
                    self.carried_bytes[lk] -= w * nb

    def _compute_rates(self) -> np.ndarray:
        """Max-min rates of the active bundles (indexed by bundle id; 0 for inactive ones) and the link loads.

        Entries are laid out as the vectorised solver laid them out (active bundles by id, each bundle's links in
        path order), so every per-link sum adds the same terms in the same order.  The layout of a set of
        active bundles is kept (sets recur: 82% of the recomputations at 1,024 DLRM nodes); only the weights
        (unit weight x the bundle's flow count) are new.  (Solutions themselves recur for 11%: not worth their
        memory.)"""
        bcount = self._bcount
        active = self._active
        if active is None:
            active = self._active = tuple(sorted(bcount))
        if self._b_entries >= NUMPY_MIN_ENTRIES:  # (layouts are kept for the plain-Python path only below it)
            return self._compute_rates_numpy(active)
        kept = self._layouts.get(active)
        if kept is not None:
            e_group, e_link, e_uw, lay = kept

            def layout(lay=lay):
                return lay
        else:
            b_links, b_w = self._b_links, self._b_w
            e_group, e_link, e_uw = [], [], []
            for a, b in enumerate(active):
                ls = b_links[b]
                e_link.extend(ls)
                e_group.extend([a] * len(ls))
                e_uw.extend(b_w[b])

            def layout():  # asked for by _solve only for a problem it solves in plain Python: kept for next time
                return self._keep_layout(active, e_group, e_link, e_uw)
        cs = [bcount[b] for b in active]
        e_w = [w * cs[a] for w, a in zip(e_uw, e_group, strict=True)]
        rates = _solve(self.capacity, e_group, e_link, e_w, len(active), layout)
        if min(rates) <= 0:
            raise RuntimeError("flow network stalled: an active flow group has zero rate")
        loads = [0.0] * self.n_links
        for g, lk, w in zip(e_group, e_link, e_w, strict=True):
            loads[lk] += w * rates[g]
        self._loads = np.array(loads)
        self._loaded = True
        brate = [0.0] * len(self._b_links)
        for b, r in zip(active, rates, strict=True):
            brate[b] = r
        return np.array(brate)

    def _compute_rates_numpy(self, active: tuple) -> np.ndarray:
        """:meth:`_compute_rates` for a problem the vectorised solver takes (:data:`NUMPY_MIN_ENTRIES` entries or
        more): the same entries in the same order (:meth:`_np_layout`, kept per set of active bundles, with their
        :func:`_group_columns`), the same products (``w x count``) and the loads summed in entry order
        (``bincount``); the rates within 1e-9 of the list path's (:func:`_fill_bottleneck`)."""
        b_links = self._b_links
        lay = self._np_layouts.get(active)
        if lay is None:  # the entries of this set of active bundles, kept (sets recur) up to a memory bound
            lay = self._np_layout(active)
            n_e = len(lay[0])
            self._np_layout_entries += n_e
            if self._np_layout_entries > _MAX_NP_LAYOUT_ENTRIES:
                self._np_layouts.clear()
                self._np_layout_entries = n_e
            self._np_layouts[active] = lay
        e_link, e_uw, e_group, active_idx, e_local, cap_local, cols = lay
        cs = self._bc_arr[active_idx]
        e_w = e_uw * cs[e_group]
        rates = _fill_local(cap_local, e_group, e_local, e_w, len(active), cols)
        if rates.min() <= 0:
            raise RuntimeError("flow network stalled: an active flow group has zero rate")
        self._loads = np.bincount(e_link, weights=e_w * rates[e_group], minlength=self.n_links)
        self._loaded = True
        brate = np.zeros(len(b_links))
        brate[active_idx] = rates
        return brate

    def _np_layout(self, active: tuple) -> tuple:
        """The entries of the active bundles ``active`` (sorted ids), gathered from the flat arrays: links, unit
        weights and group of every entry (bundles in order, each in path order), the bundle ids, and the links
        renumbered ``0 ..`` in increasing physical order with their capacities (what ``np.unique`` gives)."""
        act = np.array(active, dtype=np.int64)
        lens = self._f_len[act]
        ends = np.cumsum(lens)
        total = int(ends[-1]) if len(ends) else 0
        idx = np.arange(total, dtype=np.int64) + np.repeat(self._f_start[act] - (ends - lens), lens)
        e_link = self._f_link[idx]
        present = np.zeros(self.n_links, dtype=bool)
        present[e_link] = True
        links = np.flatnonzero(present)
        local = np.cumsum(present) - 1
        e_group = np.repeat(np.arange(len(act), dtype=np.int64), lens)
        return (e_link, self._f_w[idx], e_group, act, local[e_link], self.capacity[links],
                _group_columns(e_group, len(act)))

    def _keep_layout(self, active: tuple, e_group, e_link, e_uw) -> _Layout:
        """The layout of the rate problem of the bundles ``active`` (unit weights ``e_uw``), kept for the next time
        that set is active; every kept layout is dropped once they exceed :data:`_MAX_LAYOUT_ENTRIES` entries."""
        self._layout_entries += len(e_link)
        if self._layout_entries > _MAX_LAYOUT_ENTRIES:
            self._layouts.clear()
            self._layout_entries = len(e_link)
        lay = _Layout(self._cap, e_group, e_link, e_uw, len(active))
        self._layouts[active] = (e_group, e_link, e_uw, lay)
        return lay


class _Layout:
    """The structure of a rate problem (which group crosses which link with which unit weight), kept for the
    fill: the links that can decide a level, their entries, and each group's entries on them.

    Links whose entries are the same (groups and unit weights, in entry order) always have the same
    denominators; the one with the lower capacity has the lower share at every level (subtraction, the clamp at
    0 and division by the same denominator are monotonic in floating point), so it saturates no later and the
    others decide nothing: only it is kept (at 1,024 DLRM nodes a third of the links)."""

    __slots__ = ("caps", "members", "by_group", "link_of", "n_kept")

    def __init__(self, capacity, e_group, e_link, e_key, n_groups):
        on_link: dict = {}
        sig_of: dict = {}
        for i, (link, g, k) in enumerate(zip(e_link, e_group, e_key, strict=True)):
            lst = on_link.get(link)
            if lst is None:
                on_link[link] = [i]
                sig_of[link] = [g, k]
            else:
                lst.append(i)
                sig = sig_of[link]
                sig.append(g)
                sig.append(k)
        best: dict = {}
        for link, ents in on_link.items():
            sig = tuple(sig_of[link])
            c = capacity[link]
            cur = best.get(sig)
            if cur is None or c < cur[0]:
                best[sig] = (c, ents)
        self.caps = [c for c, _ in best.values()]
        self.members = [ents for _, ents in best.values()]
        self.link_of: dict = {}  # entry (on a kept link) -> kept link index
        self.by_group: list[list[int]] = [[] for _ in range(n_groups)]
        for j, ents in enumerate(self.members):
            for i in ents:
                self.link_of[i] = j
                self.by_group[e_group[i]].append(i)
        self.n_kept = len(self.link_of)


def _fill(lay: _Layout, e_group, e_w, n_groups: int) -> list[float]:
    """Progressive filling on a :class:`_Layout` with entry weights ``e_w`` (see :func:`progressive_fill`)."""
    rates = [0.0] * n_groups
    members = list(lay.members)  # pruned per link as groups freeze (rebound, never mutated in place)
    by_group, link_of = lay.by_group, lay.link_of
    remaining = list(lay.caps)
    n_l = len(remaining)
    denom = [0.0] * n_l
    for j in range(n_l):
        d = 0.0
        for i in members[j]:
            d += e_w[i]
        denom[j] = d
    live = [j for j in range(n_l) if denom[j] > 0]  # links offering a share (rising entries of positive weight)
    alive = [True] * len(e_w)
    frozen = [False] * n_groups
    left = lay.n_kept
    level = 0.0
    share = [0.0] * n_l
    for _ in range(n_groups + 1):
        if not left:
            break
        inc = _INF
        for j in live:
            s = share[j] = remaining[j] / denom[j]
            if s < inc:
                inc = s
        if inc == _INF:  # no link offers a share (a group whose weights are all zero): it stays at 0
            break
        if inc < 0.0:
            inc = 0.0
        level += inc
        thr = inc * (1 + 1e-9) + 1e-300
        saturated = []
        for j in live:
            r = remaining[j] - inc * denom[j]
            remaining[j] = r if r >= 0.0 else 0.0
            if share[j] <= thr:
                saturated.append(j)
        dirty = set()
        for j in saturated:
            for i in members[j]:
                if alive[i]:
                    g = e_group[i]
                    if not frozen[g]:
                        frozen[g] = True
                        rates[g] = level
                        ents = by_group[g]
                        for k in ents:
                            alive[k] = False
                            dirty.add(link_of[k])
                        left -= len(ents)
        if dirty:
            for j in dirty:
                m = members[j]
                if len(m) == 1:  # its one entry froze
                    members[j] = ()
                    continue
                m = members[j] = [i for i in m if alive[i]]
                d = 0.0
                for i in m:
                    d += e_w[i]
                denom[j] = d
            live = [j for j in live if members[j] and denom[j] > 0]
    return rates


def _solve(capacity, e_group, e_link, e_w, n_groups: int, layout=None) -> list[float]:
    """Max-min rates of one rate problem (the arguments of :func:`progressive_fill`): the one place that picks
    the solver.  Problems of :data:`NUMPY_MIN_ENTRIES` entries or more run vectorised (:func:`_fill_numpy`),
    smaller ones in plain Python (:func:`_fill`) on ``layout()`` (default: the problem's :class:`_Layout`, built
    here); both reach the same allocation, so the choice moves no number beyond 1e-9 relative."""
    if len(e_link) >= NUMPY_MIN_ENTRIES:
        return _fill_numpy(np.asarray(capacity, dtype=float), np.asarray(e_group, dtype=np.int64),
                           np.asarray(e_link, dtype=np.int64), np.asarray(e_w, dtype=float), n_groups).tolist()
    if not len(e_link):
        return [0.0] * n_groups
    lay = layout() if layout is not None else _Layout(capacity, e_group, e_link, e_w, n_groups)
    return _fill(lay, e_group, e_w, n_groups)


def progressive_fill(capacity: Sequence[float], e_group: Sequence[int], e_link: Sequence[int],
                     e_w: Sequence[float], n_groups: int) -> list[float]:
    """Weighted max-min fair rates by progressive filling, on plain Python sequences (see
    :func:`max_min_rates`); returns a list of ``n_groups`` rates.

    Every fill level: each link still carrying rising groups offers ``share = remaining / denom`` (``denom``: the
    weights of its rising entries, summed in entry order); the smallest share ``inc`` raises every rising group;
    every link loses ``inc * denom`` (clamped at 0); the links with ``share <= inc (1 + 1e-9)`` are saturated and
    their groups freeze at the level reached.  Problems of :data:`NUMPY_MIN_ENTRIES` entries or more are solved
    vectorised by bottleneck rounds (:func:`_solve`, :func:`_fill_bottleneck`): the same rates within 1e-9."""
    return _solve(capacity, e_group, e_link, e_w, n_groups)


def max_min_rates(capacity: np.ndarray, e_group: np.ndarray, e_link: np.ndarray, e_w: np.ndarray,
                  n_groups: int) -> np.ndarray:
    """Weighted max-min fair rates by progressive filling.

    Entry ``i`` says group ``e_group[i]`` loads link ``e_link[i]`` with ``e_w[i] * rate``.  Every group's rate
    rises together until a link saturates; the groups on it freeze; repeat.  Returns one rate per group (a group
    with no entry, or only zero weights, gets 0).  See :func:`progressive_fill`."""
    return np.array(progressive_fill(np.asarray(capacity, dtype=float).tolist(),
                                     np.asarray(e_group, dtype=np.int64).tolist(),
                                     np.asarray(e_link, dtype=np.int64).tolist(),
                                     np.asarray(e_w, dtype=float).tolist(), n_groups), dtype=float)


def _fill_numpy(capacity: np.ndarray, e_group: np.ndarray, e_link: np.ndarray, e_w: np.ndarray,
                n_groups: int) -> np.ndarray:
    """The max-min rates of :func:`progressive_fill`, vectorised (:func:`_fill_bottleneck`) on the links the
    entries touch (renumbered, so a round costs the entries still rising, not the whole network)."""
    links, e_l = np.unique(e_link, return_inverse=True)
    return _fill_local(capacity[links], e_group, e_l.reshape(-1), e_w, n_groups)


def _group_columns(e_group: np.ndarray, n_groups: int) -> list[np.ndarray]:
    """Each group's entries by position: column ``c`` holds, for every group, the index of its ``c``-th entry (in
    entry order), or ``len(e_group)`` (a padding entry) for a group with fewer entries.  Columns of one entry per
    group make the per-group steps of :func:`_fill_bottleneck` element-wise operations (a reduction over rows of a
    few entries is slow in numpy)."""
    n_e = len(e_group)
    order = np.argsort(e_group, kind="stable")
    gs = e_group[order]
    cnt = np.bincount(gs, minlength=n_groups)
    pos = np.arange(n_e) - (np.cumsum(cnt) - cnt)[gs]
    cols = []
    for c in range(int(cnt.max()) if n_e else 0):
        col = np.full(n_groups, n_e, dtype=np.int64)
        sel = pos == c
        col[gs[sel]] = order[sel]
        cols.append(col)
    return cols


def _fill_local(cap_local: np.ndarray, e_group: np.ndarray, e_l: np.ndarray, e_w: np.ndarray,
                n_groups: int, cols: list[np.ndarray] | None = None) -> np.ndarray:
    """Max-min rates on links numbered ``0 .. len(cap_local) - 1`` (entry ``i`` loads link ``e_l[i]``), solved
    vectorised by :func:`_fill_bottleneck`; ``cols``: :func:`_group_columns` of ``e_group`` (kept by the network
    with its layouts)."""
    rates = np.zeros(n_groups)
    if not len(e_group):
        return rates
    if cols is None:
        cols = _group_columns(e_group, n_groups)
    n_links = len(cap_local)
    l_ext = np.append(e_l, n_links)  # the padding entry: a link of its own that never limits (share inf)
    w_ext = np.append(e_w, 0.0)
    return _fill_bottleneck(cap_local, [l_ext[c] for c in cols], [w_ext[c] for c in cols], n_groups)


def _fill_bottleneck(cap_local: np.ndarray, lc: list[np.ndarray], wc: list[np.ndarray],
                     n_groups: int) -> np.ndarray:
    """Max-min fair rates by bottleneck rounds (the allocation :func:`progressive_fill` reaches, in fewer passes).

    ``lc[c][g]`` / ``wc[c][g]``: the link and weight of group ``g``'s ``c``-th entry (link ``len(cap_local)``,
    weight 0: none).  Every round, each link offers ``share = remaining / denom`` (``denom``: the weights of its
    rising groups); a group's *offer* is the smallest share among its links; a link whose share is within 1e-9
    of the smallest offer among its rising groups is a bottleneck: no group on it can stop below its share, so
    it saturates exactly there (shares only rise as other groups stop), and every group on a bottleneck stops at
    its offer.  Progressive filling stops one level a pass (the global minimum share); this stops every local
    minimum at once: at 1,024 DLRM nodes 4 rounds where filling takes 20 levels, at 64 GPUs fully simulated 8
    where it takes 55.  The two differ only by float round-off (different sums) and where two shares lie within
    1e-9 of each other (both stop together at their own shares here, at the lower one there): within 1e-9
    relative.  A group whose links offer no share (weights all 0, alone) stays at 0."""
    rates = np.zeros(n_groups)
    n_links = len(cap_local)
    pad = n_links
    remaining = np.append(np.asarray(cap_local, dtype=float), 0.0)
    rows = np.arange(n_groups)
    lmin = np.empty(n_links + 1)
    n_cols = len(lc)
    # 0/0 (a link whose groups all stopped) is NaN and x/0 inf: neither an offer (fmin skips NaN) nor a bottleneck
    with np.errstate(divide="ignore", invalid="ignore"):
        while len(rows):
            denom = np.bincount(np.concatenate(lc) if n_cols > 1 else lc[0],
                                weights=np.concatenate(wc) if n_cols > 1 else wc[0], minlength=n_links + 1)
            share = remaining / denom
            share[pad] = _INF
            offer = share[lc[0]]
            for c in range(1, n_cols):
                np.fmin(offer, share[lc[c]], out=offer)
            lmin.fill(_INF)
            for c in range(n_cols):
                np.minimum.at(lmin, lc[c], offer)
            bott = share <= lmin * (1 + 1e-9)
            bott[pad] = False
            stop = bott[lc[0]]
            for c in range(1, n_cols):
                stop |= bott[lc[c]]
            stop &= offer < _INF
            idx = np.flatnonzero(stop)
            if not len(idx):
                break  # no link offers a share
            got = offer[idx]
            rates[rows[idx]] = got
            # the stopped groups' loads leave every link they cross
            remaining -= np.bincount(np.concatenate([a[idx] for a in lc]),
                                     weights=np.concatenate([a[idx] * got for a in wc]), minlength=n_links + 1)
            np.maximum(remaining, 0.0, out=remaining)
            keep = ~stop
            rows = rows[keep]
            lc = [a[keep] for a in lc]
            wc = [a[keep] for a in wc]
    return rates
