"""Kernel launch with optional per-program tracing (marker kernels around the launch)."""

from __future__ import annotations

import math

import torch

from . import _triton as K
from ._runtime import interpreting
from .trace import KernelTrace, TraceRecorder

# The last compiled kernel launched per kernel name: registers, shared memory, warps (GPU only; the
# interpreter compiles nothing).  Read by experiments/gpu_campaigns/gpu_check.py to compute occupancy per configuration.
LAST_COMPILED: dict[str, dict] = {}


class KernelConfigError(ValueError):
    """A configuration the device cannot run (too much shared memory, too many registers, a compile error),
    raised before anything was launched."""


def _guarded(kernel, grid, args, kw):
    try:
        return kernel[grid](*args, **kw)
    except Exception as e:  # triton.runtime.errors.OutOfResources, CompilationError, MLIR verifier errors
        name = type(e).__name__
        if name in ("OutOfResources", "CompilationError") or any(
                m in str(e) for m in ("out of resource", "PassManager", "failed to verify")):
            cfg = {k: v for k, v in kw.items() if k.isupper() or k in ("num_warps", "num_stages")}
            hint = ""
            if "shared memory" in str(e).lower() and kw.get("num_stages", 1) > 1:
                hint = f"; lower num_stages (now {kw['num_stages']}) or the tile size"
            raise KernelConfigError(f"{getattr(kernel, '__name__', kernel)}: configuration {cfg} cannot run on this "
                                    f"device: {name}: {str(e).splitlines()[0][:300]}{hint}") from e
        raise


def _record(kernel, compiled, consts) -> None:
    if compiled is None or interpreting():
        return
    md = getattr(compiled, "metadata", None)
    LAST_COMPILED[getattr(kernel, "__name__", str(kernel))] = {
        "n_regs": getattr(compiled, "n_regs", None), "n_spills": getattr(compiled, "n_spills", None),
        "shared": getattr(md, "shared", None), "num_warps": consts.get("num_warps", 4),
        "num_stages": consts.get("num_stages", 3)}


def launch(kernel, grid: tuple[int, ...], args: list, consts: dict, *, dummy: torch.Tensor,
           trace: TraceRecorder | None, meta: dict | None, flops_per_program=0.0, bytes_per_program=0.0) -> None:
    """Launch ``kernel[grid](*args, trace_buf, counter, **consts)``.

    When ``trace`` is given (and ``meta`` describes the launch), per-program start/end/SM are recorded
    into a :class:`KernelTrace` together with marker-kernel timestamps just before and after.
    ``dummy`` is any int64 tensor on the device (passed as the trace buffer when not tracing).
    """
    if trace is None or meta is None:
        _record(kernel, _guarded(kernel, grid, args + [dummy, dummy], dict(TIMER=0, **consts)), consts)
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
    _record(kernel, _guarded(kernel, grid, args + [buf, counter], dict(TIMER=code, **consts)), consts)
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
