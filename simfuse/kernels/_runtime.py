"""Shared helpers of :mod:`simfuse.kernels`: interpreter detection, dtype names, input validation.

Every check raises :class:`ValueError` naming the offending argument, before any kernel is launched.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch

DTYPE_NAMES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}
NAME_DTYPES = {v: k for k, v in DTYPE_NAMES.items()}
FLOAT_DTYPES = tuple(DTYPE_NAMES)


def interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter (``TRITON_INTERPRET=1``, read at import)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def dtype_name(dtype: torch.dtype) -> str:
    """Short trace name of a floating dtype (``fp32``, ``fp16``, ``bf16``)."""
    try:
        return DTYPE_NAMES[dtype]
    except KeyError:
        raise ValueError(f"dtype {dtype} is not supported; use one of {sorted(DTYPE_NAMES.values())}") from None


def check_device(name: str, t: torch.Tensor, device: torch.device) -> None:
    if t.device != device:
        raise ValueError(f"{name}: tensor is on {t.device}, expected {device}")


def check_tensor(
    name: str,
    t: object,
    *,
    ndim: int | None = None,
    dtypes: Sequence[torch.dtype] | None = None,
    device: torch.device | None = None,
) -> torch.Tensor:
    """Validate one tensor argument; returns it. Raises ValueError naming ``name``."""
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if ndim is not None and t.dim() != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {tuple(t.shape)}")
    if dtypes is not None and t.dtype not in dtypes:
        raise ValueError(f"{name}: dtype {t.dtype} not allowed, expected one of {list(dtypes)}")
    if device is not None:
        check_device(name, t, device)
    if not t.is_contiguous():
        raise ValueError(f"{name}: tensor must be contiguous")
    return t


def check_int(name: str, v: object, *, minimum: int | None = None, maximum: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{name}: expected an int, got {v!r}")
    if minimum is not None and v < minimum:
        raise ValueError(f"{name}: {v} is below the minimum {minimum}")
    if maximum is not None and v > maximum:
        raise ValueError(f"{name}: {v} is above the maximum {maximum}")
    return v


def check_index_range(name: str, idx: torch.Tensor, low: int | torch.Tensor, high: int | torch.Tensor) -> None:
    """All of ``idx`` must lie in ``[low, high)`` (elementwise if tensors)."""
    if idx.numel() == 0:
        return
    bad = (idx < low) | (idx >= high)
    if bool(bad.any()):
        first = int(bad.nonzero()[0, 0])
        raise ValueError(
            f"{name}: index {int(idx[first])} at position {first} is out of range"
            f" [{int(low) if not isinstance(low, torch.Tensor) else int(low[first])},"
            f" {int(high) if not isinstance(high, torch.Tensor) else int(high[first])})"
        )


def check_list(name: str, items: object, length: int | None = None) -> list:
    if not isinstance(items, (list, tuple)):
        raise ValueError(f"{name}: expected a list (one entry per local rank), got {type(items).__name__}")
    if length is not None and len(items) != length:
        raise ValueError(f"{name}: expected {length} entries (one per local rank), got {len(items)}")
    return list(items)


def next_pow2(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


#: Dynamic shared memory one program may use on an H100/H200 (227 KiB); the device's own limit is used on CUDA.
DEFAULT_SHARED_LIMIT = 232448
#: Most accumulator/tile elements per thread a configuration may ask for: beyond it Triton spends minutes
#: compiling a kernel that spills everything (a 1024x1024 tile at 4 warps is 8192 per thread).
MAX_TILE_ELEMS_PER_THREAD = 1024


def shared_memory_limit(device: torch.device) -> int:
    if device.type != "cuda":
        return 1 << 62
    props = torch.cuda.get_device_properties(device)
    return int(getattr(props, "shared_memory_per_block_optin", 0) or DEFAULT_SHARED_LIMIT)


def pipelined_shared_bytes(stage_bytes: int, num_stages: int) -> int:
    """Shared memory of a ``tl.dot`` loop with fp32 (IEEE) operands that Triton pipelines: ``num_stages - 1``
    buffers of one K step's operand tiles, at least one (measured with Triton 3.9 for sm_90: GEMV fp32 128x256
    tiles 294,912 bytes at 3 stages, 147,456 at 2 and 1, as Triton 3.6 reported on the H200)."""
    return max(1, num_stages - 1) * stage_bytes
