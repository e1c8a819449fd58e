"""Kernel launch with optional per-program tracing (marker kernels around the launch)."""

from __future__ import annotations

import math

import torch

from . import _triton as K
from ._runtime import interpreting
from .trace import KernelTrace, TraceRecorder


def launch(kernel, grid: tuple[int, ...], args: list, consts: dict, *, dummy: torch.Tensor,
           trace: TraceRecorder | None, meta: dict | None, flops_per_program=0.0, bytes_per_program=0.0) -> None:
    """Launch ``kernel[grid](*args, trace_buf, counter, **consts)``.

    When ``trace`` is given (and ``meta`` describes the launch), per-program start/end/SM are recorded
    into a :class:`KernelTrace` together with marker-kernel timestamps just before and after.
    ``dummy`` is any int64 tensor on the device (passed as the trace buffer when not tracing).
    """
    if trace is None or meta is None:
        kernel[grid](*args, dummy, dummy, TIMER=0, **consts)
        return
    dev = dummy.device
    timer = trace.resolve_timer(dev.type, interpreting())
    code = 1 if timer == "globaltimer" else 2
    n = math.prod(grid)
    buf = torch.full((n * 3,), -1, dtype=torch.int64, device=dev)
    marks = torch.zeros(2, dtype=torch.int64, device=dev)
    counter = torch.zeros(1, dtype=torch.int64, device=dev)
    if dev.type == "cuda":  # compile first, so that no JIT compilation falls between the marker and the kernel
        K.marker_kernel.warmup(marks, counter, 0, TIMER=code, grid=(1,))
        kernel.warmup(*args, buf, counter, TIMER=code, grid=grid, **consts)
    K.marker_kernel[(1,)](marks, counter, 0, TIMER=code)
    kernel[grid](*args, buf, counter, TIMER=code, **consts)
    K.marker_kernel[(1,)](marks, counter, 1, TIMER=code)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    b = buf.view(n, 3).cpu()
    m = marks.cpu()
    trace.add(KernelTrace(
        run_id=trace.next_run_id(meta["kernel"]), kernel=meta["kernel"], variant=meta["variant"],
        backend=meta["backend"], world_size=meta["world_size"], rank=meta["rank"], dtype=meta["dtype"],
        shape=meta["shape"], num_warps=consts.get("num_warps", 4), launch_ns=int(m[0]), kernel_end_ns=int(m[1]),
        start_ns=b[:, 0].tolist(), end_ns=b[:, 1].tolist(), smid=b[:, 2].tolist(),
        flops_per_program=flops_per_program, bytes_per_program=bytes_per_program, timer=timer,
    ))
