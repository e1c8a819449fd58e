"""NCCL kernels of a PyTorch profiler (Kineto) trace as nccl-tests rows, for ``simfuse fit-fabric``.

Each NCCL kernel (``ncclKernel_AllReduce_RING_LL_Sum_float``, ``ncclDevKernel_AllGather_...``) is one measured
collective.  Its message size comes from the kernel's own args (Kineto >= 2.4 copies ``record_param_comms``'s
``Collective name``, ``In msg nelems``, ``Out msg nelems``, ``dtype``, ``Group size`` onto the kernel) or from the
``record_param_comms`` CPU op with the same ``External id``.  Sizes follow nccl-tests' convention (the ``size``
column: the larger of the send and receive buffers of one rank -- the buffer for all-reduce, the gathered output
for all-gather, the full input for reduce-scatter and all-to-all): ``max(In, Out msg nelems) x element bytes``.
The time is the kernel's ``dur`` (GPU time, as nccl-tests' out-of-place ``time``); kernels of one size are reduced
to their median (one row per size, like one nccl-tests line).  ``algbw = size / time`` and ``busbw = algbw x``
nccl-tests' bus factor (``2(n-1)/n`` all-reduce, ``(n-1)/n`` all-gather / reduce-scatter / all-to-all, 1 others).

The trace does not say how many nodes the ranks span: pass ``nodes`` (``--nodes``), otherwise 1 is assumed and a
note says so.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import numpy as np

from ..errors import TraceError, short_repr
from ..names import canonical_collective, collective_or_none
from .nccl_tests import NcclRow, NcclTestLog
from .torch_trace import _DTYPE_BYTES, bad_duration, iter_trace_events, nccl_collective

_BUS = {"all_reduce": lambda n: 2.0 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
        "reduce_scatter": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n}


def kineto_nccl_samples(path: str | Path) -> list[tuple[str, int, int, str, float]]:
    """(collective, ranks, size_bytes, dtype, time_s) of every NCCL kernel whose message size is known."""
    src = str(path)
    comms: dict[int, dict] = {}
    kernels: list[tuple[str, dict, float, int | None]] = []
    for i, ev in enumerate(iter_trace_events(path)):
        if ev.get("ph") != "X":
            continue
        cat, name = ev.get("cat"), ev.get("name")
        args = ev.get("args") or {}
        if not isinstance(args, dict) or not isinstance(name, str):
            continue
        ext = args.get("External id")
        if cat == "cpu_op" and name == "record_param_comms" and isinstance(ext, int):
            comms[ext] = args
        elif cat == "kernel" and nccl_collective(name):
            dur = ev.get("dur")
            if bad_duration(dur):
                raise TraceError(src, f"key traceEvents[{i}].dur", f"expected a finite non-negative number, got {dur!r}")
            kernels.append((name, args, float(dur) * 1e-6, ext if isinstance(ext, int) else None))
    out = []
    for name, args, dur_s, ext in kernels:
        a = {**comms.get(ext, {}), **args} if ext is not None else args
        coll = collective_or_none(str(a.get("Collective name", ""))) or collective_or_none(nccl_collective(name))
        dtype = str(a.get("dtype", "")).lower().replace("torch.", "")
        eb = _DTYPE_BYTES.get(dtype, 0)
        nelems = max(_count(a, "In msg nelems", src, name), _count(a, "Out msg nelems", src, name))
        ranks = int(_count(a, "Group size", src, name))
        if "Group size" in a and a["Group size"] not in (None, "") and ranks < 1:
            raise TraceError(src, "key args.Group size", f"expected a group of at least one rank for NCCL kernel "
                                                         f"{short_repr(name)}, got {a['Group size']!r}")
        if not coll or nelems <= 0 or eb <= 0 or ranks < 1 or dur_s <= 0:
            continue
        out.append((coll, ranks, int(nelems * eb), dtype, dur_s))
    return out


def _count(args: dict, key: str, src: str, kernel: str) -> float:
    """A count PyTorch records on an NCCL kernel (``In msg nelems``, ``Group size``): 0 where absent; a value that
    is not a finite non-negative whole number is a corrupt trace (named with its key)."""
    v = args.get(key)
    if v is None or v == "":
        return 0.0
    try:
        f = float(v)
    except (TypeError, ValueError):
        f = math.nan
    if isinstance(v, bool) or not math.isfinite(f) or f < 0 or f != int(f):
        raise TraceError(src, f"key args.{key}", f"expected a non-negative whole number for NCCL kernel "
                                                 f"{short_repr(kernel)}, got {v!r}")
    return f


def read_kineto_nccl(path: str | Path, collective: str | None = None, *, ranks: int | None = None,
                     nodes: int | None = None) -> NcclTestLog:
    """The NCCL kernels of one collective (``collective``, default: the one with the most distinct sizes) and one
    group size (``ranks``, default: the most common) as an :class:`~simfuse.calibrate.nccl_tests.NcclTestLog`."""
    src = str(path)
    samples = kineto_nccl_samples(path)
    if not samples:
        raise TraceError(src, "traceEvents", "no NCCL kernels with message sizes (Kineto records them with "
                                             "record_param_comms on PyTorch >= 2.1 with a NCCL process group)")
    if collective is not None:
        collective = canonical_collective(collective)
        samples = [s for s in samples if s[0] == collective]
        if not samples:
            raise TraceError(src, "traceEvents", f"no {collective} NCCL kernels with message sizes")
    else:
        sizes = Counter(c for c, _, _ in {(s[0], s[2], s[3]) for s in samples})  # distinct sizes per collective
        collective = sorted(sizes, key=lambda c: (-sizes[c], c))[0]
        samples = [s for s in samples if s[0] == collective]
    if ranks is None:
        cnt = Counter(s[1] for s in samples)
        ranks = sorted(cnt, key=lambda r: (-cnt[r], r))[0]
    samples = [s for s in samples if s[1] == ranks]
    if not samples:
        raise TraceError(src, "traceEvents", f"no {collective} NCCL kernels over {ranks} ranks")
    by_size: dict[tuple[int, str], list[float]] = {}
    for _, _, size, dtype, t in samples:
        by_size.setdefault((size, dtype), []).append(t)
    bus = _BUS.get(collective, lambda n: 1.0)(ranks) if ranks > 1 else 1.0
    rows = []
    for (size, dtype), ts in sorted(by_size.items()):
        t = float(np.median(ts))
        eb = _DTYPE_BYTES.get(dtype, 1)
        algbw = size / t / 1e9
        rows.append(NcclRow(size_bytes=size, count=size // eb, dtype=dtype, redop="sum", time_s=t,
                            algbw_gbyte_per_s=algbw, busbw_gbyte_per_s=algbw * bus, time_inplace_s=None, line=0))
    notes = [f"{len(samples)} NCCL kernel(s) of {collective} over {ranks} ranks from a Kineto trace, "
             f"{len(rows)} distinct size(s) (median time per size)"]
    if nodes is None:
        notes.append("the trace does not say how many nodes the ranks span: 1 assumed (pass --nodes)")
    return NcclTestLog(source=src, collective=collective, ranks=int(ranks), hosts=[], devices=[], rows=rows,
                       nodes=int(nodes or 1), notes=notes)


__all__ = ["kineto_nccl_samples", "read_kineto_nccl"]
