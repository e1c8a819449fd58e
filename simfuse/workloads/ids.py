"""The sparse ids' exchange (``embedding.input_dist``): bytes a rank sends a shard holder, with or without
deduplication, shared by the DLRM graph builder and the sharding planner's estimator.

**Without deduplication** (``embedding.ids_dedup: false``, the default) a rank sends each holder, per own bag, the
ids the shard serves (``lookups`` per bag, ``key_bytes`` each: ``embedding.key_dtype``) and one length per bag:
``bags (lookups key_bytes + LENGTH_BYTES)``.  This is what the frameworks the model files follow send for pooled
embedding bags: TorchRec's ``EmbeddingBagCollection`` input_dist all-to-alls the KeyedJaggedTensor as it is
(index deduplication exists only for ``EmbeddingCollection``, ``use_index_dedup``, off by default:
pytorch/torchrec ``torchrec/distributed/embedding.py`` ``EC_INDEX_DEDUP = False``); HugeCTR's data distributor
buckets every key to its holder (``embedding/data_distributor/``) and deduplicates on the holder for the lookup,
not on the wire.

**With deduplication** (``ids_dedup: true``, a what-if) a rank sends each *distinct bag* once plus one 4-byte
index per bag into the distinct list: ``D (lookups key_bytes + LENGTH_BYTES) + bags INDEX_BYTES``, ``D`` the
expected number of distinct bags among the rank's ``bags``.  Bags are the unit because in the MLPerf DLRM-DCNv2
data a bag is a fixed function of the sample's one-hot Criteo id (mlcommons/training
``recommendation_v2/torchrec_dlrm/scripts/materialize_synthetic_multihot_dataset.py`` with
``--multi_hot_distribution_type uniform``: every one-hot id maps to itself plus ``P - 1`` fixed random ids), so two
samples share a bag exactly when they share that id.  ``D`` is the expected distinct ids among ``bags`` draws
from a Zipf law of exponent ``s`` (``embedding.ids_zipf_s``) over the table's rows: :func:`expected_distinct`.
"""

from __future__ import annotations

import math

import numpy as np

from ..spec.workload import KEY_DTYPE_BYTES, LENGTH_BYTES

#: bytes of one bag's index into the distinct bags a rank sends (int32), under ``ids_dedup``
INDEX_BYTES = 4
#: ranks summed exactly by :func:`expected_distinct`; beyond them the sum is an integral (relative error < 1e-4
#: against the exact sum, ``tests/workloads/test_ids.py``)
_HEAD = 4096
_NODES, _WEIGHTS = np.polynomial.legendre.leggauss(48)


def _uniform(rows: float, draws: float) -> float:
    if rows <= 1:
        return min(1.0, draws)
    return min(draws, rows * -math.expm1(draws * math.log1p(-1.0 / rows)))


def _tail_integral(f, lo: float, hi: float, panels: int = 16) -> float:
    """``integral of f(x) dx`` over ``[lo, hi]`` by Gauss-Legendre on ``log x`` (``f`` smooth there)."""
    if hi <= lo:
        return 0.0
    edges = np.linspace(math.log(lo), math.log(hi), panels + 1)
    total = 0.0
    for a, c in zip(edges[:-1], edges[1:], strict=True):
        u = 0.5 * (c - a) * _NODES + 0.5 * (c + a)
        x = np.exp(u)
        total += 0.5 * (c - a) * float(np.sum(_WEIGHTS * f(x) * x))
    return total


def expected_distinct(rows: float, draws: float, zipf_s: float = 0.0) -> float:
    """Expected number of distinct values among ``draws`` independent draws from ``rows`` values with
    probability ``p_i = i^-s / H`` (``H = sum_i i^-s``; ``s = 0``: uniform):

    ``E = sum_i (1 - (1 - p_i)^draws)``.  Uniform: the closed form ``rows (1 - (1 - 1/rows)^draws)``.  Zipf: the
    first 4,096 terms exactly, the rest (and the rest of ``H``) as integrals over ``[4096.5, rows + 0.5]`` (the
    midpoint rule; the terms vary slowly there).
    At most ``min(rows, draws)``; 0 for no draws."""
    if rows <= 0 or draws <= 0:
        return 0.0
    if zipf_s == 0.0 or rows <= 1:
        return _uniform(rows, draws)
    R = float(rows)
    k = int(min(R, _HEAD))
    i = np.arange(1, k + 1, dtype=float)
    w = i ** -zipf_s
    lo, hi = k + 0.5, R + 0.5
    tail_h = 0.0
    if R > k:
        tail_h = (math.log(hi / lo) if abs(zipf_s - 1.0) < 1e-12 else
                  (hi ** (1.0 - zipf_s) - lo ** (1.0 - zipf_s)) / (1.0 - zipf_s))
    H = float(w.sum()) + tail_h
    p = w / H
    head = float(-np.expm1(draws * np.log1p(-np.minimum(p, 1.0 - 1e-300))).sum())
    tail = 0.0
    if R > k:
        tail = _tail_integral(lambda x: -np.expm1(draws * np.log1p(-(x ** -zipf_s) / H)), lo, hi)
    return min(draws, R, head + tail)


def ids_bytes(bags: int, lookups: float, rows: float, key_dtype: str, dedup: bool = False,
              zipf_s: float = 0.0) -> float:
    """Bytes one rank sends one holder of a shard serving ``lookups`` ids per bag of a table of ``rows`` rows,
    for the rank's ``bags`` bags (see the module docstring; 0 without lookups)."""
    if bags <= 0 or lookups <= 0:
        return 0.0
    per_bag = lookups * KEY_DTYPE_BYTES[key_dtype] + LENGTH_BYTES
    if not dedup:
        return bags * per_bag
    return expected_distinct(rows, bags, zipf_s) * per_bag + bags * INDEX_BYTES


def spec_ids_bytes(spec, bags: int, lookups: float, table: int) -> float:
    """:func:`ids_bytes` with the spec's key width, dedup setting and Zipf exponent for table ``table``."""
    return ids_bytes(bags, lookups, spec.tables[table].rows, spec.key_dtype, spec.ids_dedup, spec.ids_zipf_s)
