"""Flow-level network: concurrent flows share link bandwidth max-min fairly (fluid model).

A *flow group* stands for ``count`` identical flows (same size, same start, same path *class*).  Its path is a
list of ``(link, weight)`` entries: the group adds ``weight * rate`` to that link's load, where ``rate`` is the
rate of one of its flows.  In full simulation every group has ``count = 1`` and weights 1; under symmetry a
group of ``count`` flows from the representative rank crosses class links with weight ``count``.

Rates are recomputed (progressive filling, vectorised with numpy) only when a group starts or finishes; all
starts and finishes at the same simulated instant are coalesced into one recomputation.  A flow's last byte
arrives ``latency_s`` after it leaves (so an uncongested transfer takes ``latency_s + size_bytes / bw``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import simpy

_EPS_BYTES = 1e-6  # bytes; a group with less remaining is complete (guards float round-off)


class FlowNetwork:
    """Links with capacities (bytes/s) carrying flow groups.

    ``record_usage=True`` keeps the piecewise-constant load of every link (``usage`` list of
    ``(t_start_s, t_end_s, loads_bytes_per_s)``) for invariant checks; ``carried_bytes`` always integrates
    the bytes each link carried.

    Implementation: flows with the same path and per-flow weights (a *bundle*) always get the same max-min
    rate, so rates are solved per bundle (few) and applied to the groups (many) with numpy.
    """

    def __init__(self, sim, capacities_bytes_per_s: Sequence[float], names: Sequence[str] | None = None,
                 record_usage: bool = False):
        self.sim = sim
        self.env: simpy.Environment = sim.env
        self.capacity = np.asarray(capacities_bytes_per_s, dtype=float)
        if np.any(self.capacity <= 0) or not np.all(np.isfinite(self.capacity)):
            raise ValueError("link capacities must be positive and finite")
        self.names = list(names) if names is not None else [f"link{i}" for i in range(len(self.capacity))]
        self.n_links = len(self.capacity)
        self.record_usage = record_usage
        self.usage: list[tuple[float, float, np.ndarray]] = []
        self.carried_bytes = np.zeros(self.n_links)
        self.delivered_bytes = 0.0  # sum over completed flows of size (count * size)
        self.injected_bytes = 0.0
        self.completed_groups = 0
        # bundles: distinct (links, per-flow weights)
        self._bundle_ids: dict = {}
        # bundle b's (link, unit weight) entries are _flat_links/_flat_w[_b_start[b] : _b_start[b] + _b_len[b]]
        # (growable arrays, so that building the rate problem is vectorised over bundles)
        self._nb = 0
        self._b_start = np.zeros(16, dtype=np.int64)
        self._b_len = np.zeros(16, dtype=np.int64)
        self._flat_links = np.zeros(64, dtype=np.int64)
        self._flat_w = np.zeros(64)
        self._flat_n = 0
        # active groups as parallel numpy arrays
        self._rem = np.zeros(0)
        self._rate = np.zeros(0)
        self._size = np.zeros(0)
        self._lat = np.zeros(0)
        self._cnt = np.zeros(0)
        self._bid = np.zeros(0, dtype=np.int64)
        # completion events of the active groups (an object array: filtered with the same mask as the numbers)
        self._done = np.empty(0, dtype=object)
        # groups started since the last recomputation: (remaining, size, latency, count, bundle, event); merged
        # into the arrays once per recomputation instead of growing every array at every start
        self._new: list[tuple] = []
        self._last_t = 0.0
        self._version = 0
        self._pending = False
        self._loads = np.zeros(self.n_links)

    # -- public API -------------------------------------------------------------------------------------
    def transfer(self, links: Sequence[int], size_bytes: float, latency_s: float = 0.0, *, count: int = 1,
                 weights: Sequence[float] | None = None, tag=None) -> simpy.Event:
        """Start ``count`` identical flows of ``size_bytes`` each over ``links``; returns an event that fires
        when the last byte of every flow has arrived (``latency_s`` after it left).

        ``weights[i]`` is the multiplicity on ``links[i]`` (default ``count`` on every link).
        """
        if size_bytes < 0 or latency_s < 0 or count < 1:
            raise ValueError("size_bytes and latency_s must be >= 0 and count >= 1")
        done = self.env.event()
        links_t = tuple(int(x) for x in links)
        if weights is None:
            unitw = (1.0,) * len(links_t)
        else:
            if len(weights) != len(links_t):
                raise ValueError("weights must match links")
            unitw = tuple(float(w) / count for w in weights)
        self.injected_bytes += size_bytes * count
        if size_bytes <= 0 or len(links_t) == 0:
            # nothing crosses a link (local copy or empty message): only the latency
            self._finish_later(done, latency_s, size_bytes * count)
            return done
        key = (links_t, unitw)
        bid = self._bundle_ids.get(key)
        if bid is None:
            bid = self._add_bundle(links_t, unitw)
            self._bundle_ids[key] = bid
        # rates are recomputed at this same instant (zero-delay wake-up) before any time passes, so the new group
        # waits in ``_new`` with no bytes moved
        self._new.append((float(size_bytes), float(latency_s), float(count), bid, done))
        self._request_recompute()
        return done

    @property
    def active_groups(self) -> int:
        return len(self._done) + len(self._new)

    def link_loads(self) -> np.ndarray:
        """Current load of every link (bytes/s)."""
        return self._loads.copy()

    # -- internals --------------------------------------------------------------------------------------
    def _add_bundle(self, links: tuple, unitw: tuple) -> int:
        bid, k = self._nb, len(links)
        if bid == len(self._b_start):
            self._b_start = np.concatenate([self._b_start, np.zeros(bid, dtype=np.int64)])
            self._b_len = np.concatenate([self._b_len, np.zeros(bid, dtype=np.int64)])
        need = self._flat_n + k
        if need > len(self._flat_links):
            cap = max(need, 2 * len(self._flat_links))
            self._flat_links = np.concatenate([self._flat_links, np.zeros(cap - len(self._flat_links), np.int64)])
            self._flat_w = np.concatenate([self._flat_w, np.zeros(cap - len(self._flat_w))])
        self._flat_links[self._flat_n:need] = links
        self._flat_w[self._flat_n:need] = unitw
        self._b_start[bid], self._b_len[bid] = self._flat_n, k
        self._flat_n = need
        self._nb += 1
        return bid

    def _finish_later(self, done: simpy.Event, latency_s: float, nbytes: float) -> None:
        def fire(_ev, done=done, b=nbytes):
            self.delivered_bytes += b
            self.completed_groups += 1
            done.succeed()

        if latency_s > 0:
            self.env.timeout(latency_s).callbacks.append(fire)
        else:
            fire(None)

    def _advance(self) -> None:
        """Move every active group forward to ``now`` at its current rate."""
        now = float(self.env.now)
        dt = now - self._last_t
        if dt > 0 and len(self._done):
            self._rem -= self._rate * dt
            self.carried_bytes += self._loads * dt
            if self.record_usage:
                self.usage.append((self._last_t, now, self._loads.copy()))
        self._last_t = now

    def _request_recompute(self) -> None:
        if not self._pending:
            self._pending = True
            self.env.timeout(0).callbacks.append(self._on_wakeup_now)

    def _on_wakeup_now(self, _ev) -> None:
        self._pending = False
        self._update()

    def _on_timer(self, version: int) -> None:
        if version != self._version:
            return  # superseded by a later recomputation
        self._update()

    def _merge_new(self) -> None:
        if not self._new:
            return
        size, lat, cnt, bid, done = zip(*self._new, strict=True)
        size_arr = np.asarray(size)
        self._rem = np.concatenate([self._rem, size_arr])
        self._rate = np.concatenate([self._rate, np.zeros(len(size_arr))])
        self._size = np.concatenate([self._size, size_arr])
        self._lat = np.concatenate([self._lat, np.asarray(lat)])
        self._cnt = np.concatenate([self._cnt, np.asarray(cnt)])
        self._bid = np.concatenate([self._bid, np.asarray(bid, dtype=np.int64)])
        new_done = np.empty(len(done), dtype=object)
        new_done[:] = done
        self._done = np.concatenate([self._done, new_done])
        self._new = []

    def _update(self) -> None:
        self._advance()
        self._merge_new()
        if len(self._done):
            now = float(self.env.now)
            t_tol = 1e-13 + 1e-12 * now  # below float resolution of the clock: treat as done
            with np.errstate(divide="ignore", invalid="ignore"):
                fin = (self._rem <= _EPS_BYTES + 1e-9 * self._size) | (
                    (self._rate > 0) & (self._rem / np.where(self._rate > 0, self._rate, 1.0) <= t_tol))
            if fin.any():
                for i in np.flatnonzero(fin).tolist():
                    self._finish_later(self._done[i], float(self._lat[i]), float(self._size[i] * self._cnt[i]))
                keep = ~fin
                self._done = self._done[keep]
                self._rem, self._rate, self._size = self._rem[keep], self._rate[keep], self._size[keep]
                self._lat, self._cnt, self._bid = self._lat[keep], self._cnt[keep], self._bid[keep]
        self._compute_rates()
        self._version += 1
        if len(self._done):
            if np.any(self._rate <= 0):
                raise RuntimeError("flow network stalled: an active flow group has zero rate")
            t_next = float(np.min(self._rem / self._rate))
            version = self._version
            self.env.timeout(max(t_next, 0.0)).callbacks.append(lambda _ev, v=version: self._on_timer(v))

    def _compute_rates(self) -> None:
        self._loads = np.zeros(self.n_links)
        if not len(self._done):
            return
        nb = self._nb
        bcount = np.bincount(self._bid, weights=self._cnt, minlength=nb)
        active = np.flatnonzero(bcount > 0)
        lens = self._b_len[active]
        e_group = np.repeat(np.arange(len(active)), lens)
        # entry j of active bundle a sits at _b_start[a] + j
        first = np.cumsum(lens) - lens
        idx = np.repeat(self._b_start[active] - first, lens) + np.arange(int(lens.sum()))
        e_link = self._flat_links[idx]
        e_w = self._flat_w[idx] * bcount[active][e_group]
        rates = max_min_rates(self.capacity, e_group, e_link, e_w, len(active))
        brate = np.zeros(nb)
        brate[active] = rates
        self._rate = brate[self._bid]
        self._loads = np.bincount(e_link, weights=e_w * rates[e_group], minlength=self.n_links)


def max_min_rates(capacity: np.ndarray, e_group: np.ndarray, e_link: np.ndarray, e_w: np.ndarray,
                  n_groups: int) -> np.ndarray:
    """Weighted max-min fair rates by progressive filling.

    Entry ``i`` says group ``e_group[i]`` loads link ``e_link[i]`` with ``e_w[i] * rate``.  Every group's rate
    rises together until a link saturates; the groups on it freeze; repeat.  Returns one rate per group.
    The loop works on the links the entries touch (renumbered) and drops a frozen group's entries, so an
    iteration costs the entries still rising, not the whole network.
    """
    rates = np.zeros(n_groups)
    if not len(e_group):
        return rates
    links, e_l = np.unique(e_link, return_inverse=True)
    n_links = len(links)
    remaining = capacity[links].astype(float)
    frozen = np.zeros(n_groups, dtype=bool)
    g, lk, w = e_group, e_l, e_w
    level = 0.0
    for _ in range(n_groups + 1):
        if not len(g):
            break
        denom = np.bincount(lk, weights=w, minlength=n_links)
        used = denom > 0
        share = np.full(n_links, np.inf)
        share[used] = remaining[used] / denom[used]
        inc = share.min()
        if not np.isfinite(inc):
            break
        inc = max(inc, 0.0)
        level += inc
        remaining[used] -= inc * denom[used]
        bottleneck = used & (share <= inc * (1 + 1e-9) + 1e-300)
        newly = g[bottleneck[lk]]  # repeated group ids assign the same level
        rates[newly] = level
        frozen[newly] = True
        keep = ~frozen[g]
        g, lk, w = g[keep], lk[keep], w[keep]
        remaining = np.maximum(remaining, 0.0)
    return rates
