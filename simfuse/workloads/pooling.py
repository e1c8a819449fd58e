"""The embedding-bag pooling kernel as the simulator runs it, shared by the DLRM program (:mod:`.dlrm_kernels`)
and the sharding planner (:mod:`.planner`), which prices a shard's pooling as the simulator does."""

from __future__ import annotations

import math


def pool_work(label: str, bags: int, lookups: float, dim: int, eb: int, tables: int = 1, bags_per_wg: int = 4,
               rows: int | None = None, out_eb: int | None = None):
    """An embedding-bag pooling kernel: ``bags`` bags of ``lookups`` rows (summed over ``tables``), int64 ids;
    ``rows``: rows per table when known (the calibrated model's L2-hit term; None: a table far beyond the L2);
    ``out_eb``: bytes per element of the pooled rows written (the All-to-All payload's dtype, HugeCTR's fp16
    outputs of fp32 tables; None: the table's ``eb``)."""
    from ..costs import KernelWork

    wgs = max(1, tables * math.ceil(bags / bags_per_wg))
    total = bags * lookups * (dim * eb + 8) + tables * bags * dim * (eb if out_eb is None else out_eb)
    # one workgroup pools ``bags_per_wg`` bags of one table: the FLOP (and rows gathered) are split over all of them
    return KernelWork("embedding_bag", wgs, bags * lookups * dim / wgs, total / wgs,
                      "fp32" if eb == 4 else "fp16", "compute", (("bags", bags), ("dim", dim),
                                                                ("pooling", lookups / tables), ("tables", tables))
                      + ((("rows", rows),) if rows else ()))


def pool_kernel_s(cost, bags: int, lookups: float, dim: int, eb: int, out_eb: int, bags_per_wg: int,
                  rows: int | None) -> float:
    """Seconds of one shard's forward pooling kernel alone on a GPU under ``cost`` (launch excluded)."""
    from ..engine.compute import kernel_time_s

    return kernel_time_s(cost, pool_work("embedding_bag", bags, lookups, dim, eb, bags_per_wg=bags_per_wg, rows=rows,
                                         out_eb=out_eb))
