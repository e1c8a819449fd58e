"""Dense kernels (GEMMs, element-wise) as :class:`KernelWork` grids."""

from __future__ import annotations

import math

from ..costs import KernelWork
from ..units import DTYPE_BYTES


def gemm_work(label: str, m: int, n: int, k: int, dtype: str, tile: int = 128) -> KernelWork:
    """``[m, k] x [k, n]`` as tiles of up to ``tile`` x ``tile`` outputs; HBM bytes assume full L2 reuse
    (every operand read once, the output written once), split evenly over the tiles."""
    eb = DTYPE_BYTES[dtype]
    bm, bn = min(tile, m), min(tile, n)
    tiles = math.ceil(m / bm) * math.ceil(n / bn)
    unique = (m * k + k * n + m * n) * eb
    return KernelWork("gemm", tiles, 2.0 * bm * bn * k, unique / tiles, dtype, "compute",
                      (("m", m), ("n", n), ("k", k)),
                      traffic_bytes_per_wg=(bm * k + k * bn + bm * bn) * eb)


def elementwise_work(label: str, nbytes: float, flops: float, dtype: str, wgs: int = 1024,
                     strided: bool = False) -> KernelWork:
    """A bandwidth-bound kernel moving ``nbytes`` with ``flops`` of arithmetic; ``strided``: a copy into or out of
    column slices (priced at the device's measured ``strided_copy`` rate beyond the L2)."""
    wgs = max(1, int(wgs))
    shape = (("bytes", nbytes), ("strided", 1.0)) if strided else (("bytes", nbytes),)
    return KernelWork("elementwise", wgs, flops / wgs, nbytes / wgs, dtype, "compute", shape)
