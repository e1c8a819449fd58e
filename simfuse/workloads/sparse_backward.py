"""The model-parallel embedding backward's formulas (``embedding.sparse_backward: sorted``), shared by the DLRM graph
builder (:func:`simfuse.workloads.dlrm_kernels.sparse_update_works`) and the sharding planner's estimator.

Real implementations (HugeCTR's index calculation + local reduce + update; FBGEMM's fused TBE backward) sort the
lookups' ids with their positions (CUB radix sort over the bits the key space needs, 8-bit digits), run-length
encode the sorted ids, then one kernel reduces each distinct id's gradients and applies the optimizer to its row.
Ids are uniform over a shard's rows (simfuse's id model), so the rows touched are the expected distinct ids.
Checked against CUB and a Triton segment-reduce + Adagrad on an H100 and an H200 (experiments/gpu_campaigns/embedding_backward.py,
experiments/results/embedding_backward/README.md); nothing here is fitted."""

from __future__ import annotations

import math

#: one sorted (id, position) pair: uint32 id offset into the rank's key space (HugeCTR's keys are uint32 unless
#: i64_input_key) and int32 position
SORT_PAIR_BYTES = 8
#: CUB onesweep radix sort: 8-bit digits, one scatter pass each
RADIX_DIGIT_BITS = 8


def expected_distinct_rows(rows: float, lookups: float) -> float:
    """Expected distinct ids among ``lookups`` ids drawn uniformly from ``rows``:
    ``rows (1 - (1 - 1/rows)^lookups)``, at most ``lookups`` (an expected count may be fractional)."""
    if rows <= 0 or lookups <= 0:
        return 0.0
    if rows <= 1:
        return min(1.0, lookups)
    return min(lookups, rows * -math.expm1(lookups * math.log1p(-1.0 / rows)))


def radix_digits(key_rows: float) -> int:
    """8-bit digits a radix sort needs for ids in ``[0, key_rows)`` (at least one)."""
    bits = max(1, int(math.ceil(key_rows)) - 1).bit_length()
    return max(1, math.ceil(bits / RADIX_DIGIT_BITS))


def sort_bytes(lookups: float, key_rows: float, distinct: float) -> tuple[float, float, float]:
    """HBM bytes of the index calculation over ``lookups`` pairs: the histogram pass (ids read), each scatter pass
    (pairs read and written), the run-length encode (ids read, ``distinct`` ids and run lengths written)."""
    return (lookups * SORT_PAIR_BYTES / 2, 2.0 * lookups * SORT_PAIR_BYTES,
            lookups * SORT_PAIR_BYTES / 2 + 2.0 * distinct * 4)


def sparse_update_bytes(eb: float, ceb: float, opt: float, bags: int, rows: float, lookups: float,
                        cols: float) -> float:
    """HBM bytes of the fused segment-reduce + optimizer update of one shard (``rows`` rows, ``lookups`` per bag
    over ``cols`` columns; ``eb`` the table's element bytes, ``ceb`` the gradients', ``opt`` the optimizer state
    per element): each distinct row and its state read and written once, each lookup's bag gradient gathered,
    each sorted (id, position) pair read."""
    n = bags * lookups
    return expected_distinct_rows(rows, n) * cols * eb * (2.0 + 2.0 * opt) + n * cols * ceb + n * SORT_PAIR_BYTES


def index_bytes(bags: int, rows: float, lookups: float) -> float:
    """All HBM bytes of one shard's index calculation alone (its own key space): the planner's estimate."""
    n = bags * lookups
    hist, per_pass, enc = sort_bytes(n, rows, expected_distinct_rows(rows, n))
    return hist + radix_digits(rows) * per_pass + enc
