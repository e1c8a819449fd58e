"""nccl-tests logs written for the hostile-input suite (our own text, in the nccl-tests output format)."""

from __future__ import annotations

import numpy as np

HEADER = """# nThread 1 nGpus 1 minBytes {lo} maxBytes {hi} step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
{ranks}#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
"""


def all_reduce_log(rows: int, nodes: int = 2, gpus: int = 8, busbw_gbps: float = 180.0, lo: int = 1 << 20,
                   hi: int = 8 << 30) -> str:
    """A 2-node all-reduce log with ``rows`` distinct sizes between ``lo`` and ``hi`` (multiples of 4 bytes), at
    ``busbw_gbps`` plus 30 us."""
    n = nodes * gpus
    ranks = "".join(f"#  Rank {r:2d} Group  0 Pid {1000 + r:6d} on {'node-' + str(r // gpus):>10s} device {r % gpus:2d} "
                    f"[0x{r:02x}] NVIDIA H100 80GB HBM3\n" for r in range(n))
    sizes = np.unique((np.geomspace(lo, hi, rows) // 4 * 4).astype(np.int64))
    out = [HEADER.format(lo=lo, hi=hi, ranks=ranks)]
    factor = 2 * (n - 1) / n
    for s in sizes.tolist():
        t_us = 30.0 + s / (busbw_gbps * 1e9 / factor) * 1e6
        algbw = s / (t_us * 1e-6) / 1e9
        out.append(f"{s:12d} {s // 4:13d}     float     sum      -1 {t_us:8.1f} {algbw:7.2f} {algbw * factor:7.2f}"
                   f"      0 {t_us:8.1f} {algbw:7.2f} {algbw * factor:7.2f}      0\n")
    out.append("# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 180.0\n#\n")
    return "".join(out)
