"""Timing kernel launches the way the simulator predicts them: back to back, replayed from one CUDA graph.

One implementation for every measurement script (``experiments/gpu_campaigns/kernel_bench.py``, ``trace_campaign.py``,
``gpu_check.py``, ``gemm_small_m.py``).  :func:`graph_bench` captures ``run`` (which launches ``per_call``
calls, typically one per input set, so that together they exceed the L2) in a CUDA graph once, replays it
``reps`` times between CUDA events, and returns per-call seconds: the launch latency plus the makespan of each
call with no host gaps.  On a machine without CUDA it times ``run`` on the host (the Triton interpreter): the
numbers then only show that the path runs.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Timing:
    """Seconds per call: median and the 10th / 90th percentiles of the replays; ``method`` is ``graph``
    (CUDA-graph replays), ``events`` (direct launches between events, when capture failed) or ``host``."""

    median_s: float
    p10_s: float
    p90_s: float
    method: str
    replays: int

    def as_tuple(self) -> tuple[float, float, float]:
        return self.median_s, self.p10_s, self.p90_s


def quantiles(ts: list[float]) -> tuple[float, float, float]:
    """(median, p10, p90) of ``ts``, the percentiles by nearest rank."""
    if not ts:
        raise ValueError("no timings")
    s = sorted(ts)

    def q(p: float) -> float:
        return s[min(len(s) - 1, int(p * (len(s) - 1) + 0.5))]

    return statistics.median(s), q(0.1), q(0.9)


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _capture(run: Callable[[], None]):
    """Warm ``run`` on a side stream (as capture requires), then capture it in a CUDA graph."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        run()
    torch.cuda.current_stream().wait_stream(s)
    _sync()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        run()
    g.replay()
    _sync()
    return g


def graph_bench(run: Callable[[], None], *, reps: int = 20, per_call: int = 1, warm_s: float = 0.0,
                fallback: bool = False, host_reps: int = 1, on_fallback: Callable[[str], None] | None = None,
                graph: bool = True) -> Timing:
    """Time ``run`` (``per_call`` launches) ``reps`` times from a CUDA graph; seconds per launch.

    ``warm_s``: keep launching ``run`` for this long first (an idle H200 sits at 345 MHz until its clocks ramp
    up).  ``fallback``: when graph capture fails, time direct launches between events instead of raising
    (``on_fallback`` receives the error text); ``graph=False`` times direct launches from the start.  Without
    CUDA: ``host_reps`` host-timed runs."""
    if reps < 1 or per_call < 1:
        raise ValueError(f"reps and per_call must be >= 1, got {reps}, {per_call}")
    run()
    _sync()
    if not torch.cuda.is_available():
        ts = []
        for _ in range(max(1, host_reps)):
            t0 = time.perf_counter()
            run()
            ts.append((time.perf_counter() - t0) / per_call)
        return Timing(*quantiles(ts), "host", len(ts))
    t_warm = time.perf_counter()
    while time.perf_counter() - t_warm < warm_s:
        run()
        _sync()
    g = None
    try:
        g = _capture(run) if graph else None
    except Exception as e:  # noqa: BLE001 - capture failures vary by op; optionally time direct launches
        if not fallback:
            raise
        if on_fallback is not None:
            on_fallback(repr(e)[:200])
        _sync()
    ts = []
    for _ in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        if g is not None:
            g.replay()
        else:
            run()
        e1.record()
        e1.synchronize()
        ts.append(e0.elapsed_time(e1) / 1e3 / per_call)
    return Timing(*quantiles(ts), "graph" if g is not None else "events", reps)
