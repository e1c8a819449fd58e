"""Embedding-table placement across ranks (model parallel).

``table_wise`` (default): tables whose rows and optimizer state exceed the per-GPU embedding budget are first
split row-wise into the fewest equal shards that fit (each shard serves ``pooling / shards`` lookups per bag on
average and still sends a full pooled row per bag: the partial sums are added at the receiver); then units are
placed largest-first onto the least-loaded rank (LPT; ties to the lowest rank).  ``row_wise``: every table is
split into one shard per rank.  The load of a unit is the bytes its pooling reads plus the bytes it sends.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

from ..errors import SpecError
from ..spec import DLRMSpec
from ..units import DTYPE_BYTES


@dataclass(frozen=True)
class Unit:
    """A table or a shard of one held by a rank.  ``pooling``: expected lookups per bag this unit serves;
    ``kind``: the sharding type (:data:`simfuse.workloads.planner.SHARDINGS`); ``dim``: columns held (0 = the
    table's full dim)."""

    table: int
    rows: int
    pooling: float
    shard: int
    shards: int
    kind: str = "table_wise"
    dim: int = 0


def place_tables(spec: DLRMSpec, n_ranks: int, gpu_memory_bytes: float) -> list[list[Unit]]:
    """Units (tables or row shards) held by each rank."""
    eb = DTYPE_BYTES[spec.embedding_dtype]
    row_bytes = spec.dim * eb * (1.0 + spec.optimizer_state_factor)
    budget = gpu_memory_bytes * spec.embedding_memory_fraction
    units: list[Unit] = []
    for t, tab in enumerate(spec.tables):
        if spec.placement == "row_wise":
            shards = n_ranks
        else:
            shards = max(1, math.ceil(tab.rows * row_bytes / budget))
        if shards > n_ranks:
            raise SpecError(spec.source, f"embedding.rows[{t}]",
                            f"table of {tab.rows} rows needs {shards} GPUs' embedding memory, only {n_ranks} GPUs")
        for s in range(shards):
            units.append(Unit(t, math.ceil(tab.rows / shards), tab.pooling / shards, s, shards))
    B, D = spec.global_batch, spec.dim

    def load(u: Unit) -> float:
        return B * u.pooling * D * eb + B * D * eb

    per_rank: list[list[Unit]] = [[] for _ in range(n_ranks)]
    mem = np.zeros(n_ranks)
    heap = [(0.0, r) for r in range(n_ranks)]
    order = sorted(range(len(units)), key=lambda i: (-load(units[i]), i))
    if spec.placement == "row_wise":
        for i in order:
            u = units[i]
            per_rank[u.shard].append(u)
        return per_rank
    for i in order:
        u = units[i]
        skipped = []
        while True:
            if not heap:
                raise SpecError(spec.source, "embedding", "tables do not fit in the GPUs' embedding memory")
            ld, r = heapq.heappop(heap)
            if mem[r] + u.rows * row_bytes <= budget * (1 + 1e-9) and not any(x.table == u.table for x in per_rank[r]):
                break
            skipped.append((ld, r))
        per_rank[r].append(u)
        mem[r] += u.rows * row_bytes
        heapq.heappush(heap, (ld + load(u), r))
        for item in skipped:
            heapq.heappush(heap, item)
    return per_rank


def rank_classes(per_rank: list[list[Unit]], gpus_per_node: int | None = None) -> tuple[np.ndarray, list]:
    """Group ranks that behave alike: same load signature (sorted (kind, pooling, dim) of their units) and, when
    ``gpus_per_node`` is given, the same composition of their node (the multiset of its ranks' signatures), so
    that a class's intra- and inter-node traffic split is the same for all its members.  Returns
    ``class_of_rank`` (classes numbered by first appearance) and the key of each class."""
    own = [tuple(sorted((u.kind, round(u.pooling, 9), u.dim) for u in units)) for units in per_rank]
    keys = []
    for r, sig in enumerate(own):
        if gpus_per_node:
            node = r // gpus_per_node
            comp = tuple(sorted(own[node * gpus_per_node:(node + 1) * gpus_per_node]))
            keys.append((sig, comp))
        else:
            keys.append((sig, ()))
    key_to_class: dict = {}
    out: list = []
    cls = np.empty(len(per_rank), dtype=np.int64)
    for r, key in enumerate(keys):
        if key not in key_to_class:
            key_to_class[key] = len(out)
            out.append(key)
        cls[r] = key_to_class[key]
    return cls, out


def format_ranks(ranks, n_ranks: int) -> str:
    """``0-7;16`` (ranges of consecutive ranks); ``all`` when every rank in order."""
    rs = np.asarray(list(ranks), dtype=np.int64)
    if n_ranks > 1 and len(rs) == n_ranks and bool((rs == np.arange(n_ranks)).all()):
        return "all"
    if not len(rs):
        return ""
    breaks = np.flatnonzero(np.diff(rs) != 1)  # a run of consecutive ranks ends at each break
    starts, ends = np.r_[0, breaks + 1].tolist(), np.r_[breaks, len(rs) - 1].tolist()
    vals = rs.tolist()
    return ";".join(str(vals[i]) if i == j else f"{vals[i]}-{vals[j]}" for i, j in zip(starts, ends, strict=True))


def parse_ranks(text, n_ranks: int, source: str, fld: str) -> tuple[int, ...]:
    """The ranks of :func:`format_ranks`'s text (``0-7;16``, ``all``); a SpecError naming ``source`` and ``fld``."""
    text = str(text).strip()
    if text == "all":
        return tuple(range(n_ranks))
    out: list[int] = []
    for part in text.split(";"):
        part = part.strip()
        bounds = part.split("-") if "-" in part else [part]
        # ASCII digits of sane length only (int() takes '²'-free unicode digits and raises beyond 4,300 digits)
        if len(bounds) > 2 or not all(b.strip().isascii() and b.strip().isdigit() and len(b.strip()) <= 18
                                      for b in bounds):
            raise SpecError(source, fld, f"cannot parse ranks {part[:40]!r} (use 0-7;16 or all)")
        lo, hi = int(bounds[0]), int(bounds[-1])
        if hi < lo:
            raise SpecError(source, fld, f"cannot parse ranks {part[:40]!r} (use 0-7;16 or all)")
        # checked before the range is expanded (0-1000000000 must not build a billion ranks)
        if hi >= n_ranks:
            raise SpecError(source, fld, f"rank {max(lo, n_ranks)} is out of range 0..{n_ranks - 1}")
        out.extend(range(lo, hi + 1))
        if len(out) > n_ranks:
            raise SpecError(source, fld, "a rank is listed twice")
    if len(set(out)) != len(out):
        raise SpecError(source, fld, "a rank is listed twice")
    return tuple(out)
