"""The units every rank holds under a planned placement, stored once per placed table
(:class:`RankUnits`; the planner's output to the DLRM graph builder)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..units import DTYPE_BYTES
from .placement import Unit


class RankUnits(Sequence):
    """The units every rank holds, stored once per placed table (O(tables), not O(ranks x tables) objects).

    Entry ``i`` is one table's option and its holder ranks (shard ``s`` on ``holders[s]``); ``self[r]`` builds
    rank ``r``'s list of :class:`~simfuse.workloads.placement.Unit` in placement order, the order the per-rank
    lists of the straightforward construction have.  The per-rank summaries the DLRM builder needs
    (:meth:`rank_classes`, :meth:`columns`, :meth:`dims`, :meth:`lookups`, :meth:`count`, :meth:`tables_of`,
    :meth:`memory_bytes`) are computed per entry with numpy and equal those of the materialised lists
    (``tests/workloads/test_planner_vectorised.py`` checks it against the per-rank construction)."""

    def __init__(self, n_ranks: int):
        self.n = n_ranks
        self.entries: list[tuple[Unit, np.ndarray]] = []  # (unit of shard 0, holders)
        self._pos: list[dict | None] = []                  # rank -> shard index (None: holders are 0..n-1)

    def add(self, table: int, opt, holders) -> None:
        h = np.asarray(holders, dtype=np.int64).reshape(-1)
        self.entries.append((Unit(table, opt.rows, opt.pooling, 0, opt.shards, opt.kind, opt.dim), h))
        every = len(h) == self.n and bool((h == np.arange(self.n)).all())
        self._pos.append(None if every else {int(r): i for i, r in enumerate(h.tolist())})

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, r):
        if isinstance(r, slice):
            return [self[i] for i in range(*r.indices(self.n))]
        r = int(r)
        if r < 0:
            r += self.n
        if not 0 <= r < self.n:
            raise IndexError(r)
        out = []
        for (u, _h), pos in zip(self.entries, self._pos, strict=True):
            i = r if pos is None else pos.get(r)
            if i is not None:
                out.append(Unit(u.table, u.rows, u.pooling, i, u.shards, u.kind, u.dim))
        return out

    def per_rank_sum(self, value) -> np.ndarray:
        """``sum(value(u) for u in self[r])`` for every rank (``value`` of a unit of shard 0: it must not depend on
        the shard index)."""
        return self._per_rank_sum(value)

    def _per_rank_sum(self, value) -> np.ndarray:
        """``sum(value(u) for u in self[r])`` for every rank, accumulated in placement order (exact)."""
        acc = np.zeros(self.n)
        for u, h in self.entries:
            v = value(u)
            if v:
                acc[h] += v
        return acc

    def columns(self, kinds, dim: int) -> np.ndarray:
        """Columns each rank holds in units of ``kinds`` (``u.dim or dim`` summed)."""
        return self._per_rank_sum(lambda u: (u.dim or dim) if u.kind in kinds else 0)

    def dims(self, kinds, dim: int) -> list[int]:
        """Sorted distinct column counts (``u.dim or dim``) of the units of ``kinds`` some rank holds."""
        return sorted({u.dim or dim for u, h in self.entries if u.kind in kinds and len(h)})

    def gcd_dims(self, kinds, dim: int) -> np.ndarray:
        """Per rank the greatest common column count (``u.dim or dim``) of its units of ``kinds``; 0 where it
        holds none."""
        acc = np.zeros(self.n, dtype=np.int64)
        for u, h in self.entries:
            if u.kind in kinds and len(h):
                np.gcd.at(acc, h, int(u.dim or dim))
        return acc

    def lookups(self, kinds) -> np.ndarray:
        """Lookups per bag each rank serves in units of ``kinds`` (``u.pooling`` summed)."""
        return self._per_rank_sum(lambda u: u.pooling if u.kind in kinds else 0)

    def count(self, kind: str) -> np.ndarray:
        """Units of ``kind`` on each rank."""
        return self._per_rank_sum(lambda u: 1 if u.kind == kind else 0)

    def tables_of(self, kind: str) -> list[int]:
        """Sorted tables with a unit of ``kind`` on some rank."""
        return sorted({u.table for u, h in self.entries if u.kind == kind and len(h)})

    def memory_bytes(self, spec) -> np.ndarray:
        """Embedding storage per rank (bytes), as ``simfuse.workloads.planner._memory_per_rank`` on the lists."""
        eb = DTYPE_BYTES[spec.embedding_dtype]
        return self._per_rank_sum(lambda u: u.rows * (u.dim or spec.dim) * eb * (1.0 + spec.optimizer_state_factor))

    def rank_classes(self, gpus_per_node: int | None = None) -> tuple[np.ndarray, list]:
        """:func:`~simfuse.workloads.placement.rank_classes` of the per-rank lists, without building them.  A
        rank's signature is the multiset of its units' ``(kind, round(pooling, 9), dim)``; entries held by every
        rank add the same to all, so two ranks' signatures are equal iff their counts over the other entries'
        signatures are: only the holders of those entries (a few ranks per table) get a signature of their own,
        every other rank has the empty one.  A node's composition is likewise the sorted tuple of its ranks'
        signature ids, computed for the nodes that hold such a rank.  Classes are numbered by first appearance;
        the key of each class is built from its first rank's lists (and its node's)."""
        from .placement import rank_classes

        n = self.n
        atoms: dict = {}
        special: dict[int, list[int]] = {}  # rank -> atoms of its entries held by a subset of the ranks
        for (u, h), pos in zip(self.entries, self._pos, strict=True):
            if pos is None:
                continue
            a = atoms.setdefault((u.kind, round(u.pooling, 9), u.dim), len(atoms))
            for r in h.tolist():
                special.setdefault(r, []).append(a)
        sig_id: dict = {(): 0}
        sig = np.zeros(n, dtype=np.int64)
        for r, al in special.items():
            sig[r] = sig_id.setdefault(tuple(sorted(al)), len(sig_id))
        if gpus_per_node:
            comp = np.zeros(n // gpus_per_node, dtype=np.int64)
            comp_id: dict = {(0,) * gpus_per_node: 0}
            for node in sorted({r // gpus_per_node for r in special}):
                row = tuple(sorted(sig[node * gpus_per_node:(node + 1) * gpus_per_node].tolist()))
                comp[node] = comp_id.setdefault(row, len(comp_id))
            comp = np.repeat(comp, gpus_per_node)
        else:
            comp = np.zeros(n, dtype=np.int64)
        _, first, inv = np.unique(sig * (int(comp.max()) + 1) + comp, return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")
        renum = np.empty(len(order), dtype=np.int64)
        renum[order] = np.arange(len(order))
        cls = renum[inv.reshape(-1)]
        keys = []
        for r in first[order].tolist():  # the key of each class, from its first rank's lists (and its node's)
            if gpus_per_node:
                lo = r // gpus_per_node * gpus_per_node
                sub, _k = rank_classes([self[i] for i in range(lo, lo + gpus_per_node)], gpus_per_node)
                keys.append(_k[int(sub[r - lo])])
            else:
                keys.append(rank_classes([self[r]])[1][0])
        return cls, keys
