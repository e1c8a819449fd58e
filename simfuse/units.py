"""Unit parsing and formatting.  Inside the engine everything is seconds and bytes.

Unit names in outputs (CSV/Parquet columns, JSON fields) are unambiguous: ``*_s`` seconds, ``*_bytes`` bytes,
``*_bytes_per_s`` bytes per second, ``*_gbyte_per_s`` 1e9 **bytes** per second (GB/s, as nccl-tests prints), and
``*_gbit_per_s`` 1e9 **bits** per second (Gb/s, NIC line rates).  ``gbps`` is never used in outputs (people read
it as gigabits); :data:`OUTPUT_RENAMES` maps the engine's older field names.  Spec YAML keeps its documented keys
(``bw_gbps`` = GB/s, ``nic_bw_gbit`` = Gb/s) and also accepts the unambiguous spellings ``bw_gbyte_per_s`` /
``hbm_bw_gbyte_per_s`` / ``nic_bw_gbit_per_s``.
"""

from __future__ import annotations

import math
import re

from .errors import SpecError, short_repr

_SIZE_UNITS = {
    "": 1, "B": 1,
    "K": 1024, "KIB": 1024, "KB": 1000,
    "M": 1024**2, "MIB": 1024**2, "MB": 1000**2,
    "G": 1024**3, "GIB": 1024**3, "GB": 1000**3,
    "T": 1024**4, "TIB": 1024**4, "TB": 1000**4,
    "P": 1024**5, "PIB": 1024**5, "PB": 1000**5,
}
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")

GB = 1e9  # nccl-tests and datasheets use decimal GB/s

#: Older output field names -> unambiguous ones (see the module docstring).
OUTPUT_RENAMES = {"algbw_gbps": "algbw_gbyte_per_s", "busbw_gbps": "busbw_gbyte_per_s"}

#: Bytes per element of each simfuse dtype name: the one table (kernel works, spec ``dtype`` fields, fused
#: operators, calibration profiles and the trace readers all read it).  Sizes from the IEEE 754 / OCP FP8 formats.
DTYPE_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "fp64": 8}
#: Index and mask element types the trace readers meet beside them (token ids, offsets, masks).
INDEX_DTYPE_BYTES = {"int64": 8, "int32": 4, "bool": 1}
#: torch / NCCL dtype spellings (``Tensor.dtype`` names, profiler ``Input type`` strings, NCCL ``datatype``)
#: -> simfuse dtype names; bytes from :data:`DTYPE_BYTES` and :data:`INDEX_DTYPE_BYTES`.
TORCH_DTYPE_NAMES = {"float": "fp32", "float32": "fp32", "fp32": "fp32", "half": "fp16", "float16": "fp16",
                     "fp16": "fp16", "bfloat16": "bf16", "bf16": "bf16", "double": "fp64", "float64": "fp64",
                     "int": "int32", "int32": "int32", "long": "int64", "int64": "int64", "char": "int8",
                     "int8": "int8", "uint8": "int8", "byte": "int8", "float8_e4m3fn": "fp8", "float8_e5m2": "fp8"}


def element_bytes(dtype: str, default: int = 0) -> int:
    """Bytes of one element of a simfuse or torch dtype name (:data:`TORCH_DTYPE_NAMES`); ``default`` when
    unknown."""
    name = TORCH_DTYPE_NAMES.get(dtype, dtype)
    return DTYPE_BYTES.get(name) or INDEX_DTYPE_BYTES.get(name) or default


#: Largest buffer a size argument may name (1 PiB; per rank buffers beyond are not a real configuration).
MAX_SIZE_BYTES = 2**50


def parse_size_bytes(text: str | int | float, source: str = "<argument>", field: str = "size",
                     max_bytes: int = MAX_SIZE_BYTES) -> int:
    """Parse ``64MiB``, ``1GB``, ``4096`` ... into bytes (KiB/MiB/GiB/TiB/PiB binary, KB/MB/GB/TB/PB decimal).

    Sizes must be finite, non-negative and at most ``max_bytes`` (default 1 PiB)."""
    if isinstance(text, bool):
        raise SpecError(source, field, f"expected a size, got {text!r}")
    if isinstance(text, (int, float)):
        try:
            value = float(text)
        except OverflowError:
            value = math.inf
    else:
        m = _SIZE_RE.match(str(text)) if len(str(text)) <= 64 else None
        if not m or m.group(2).upper() not in _SIZE_UNITS:
            raise SpecError(source, field, f"cannot parse size {short_repr(text)} (use e.g. 64MiB, 1GB, 4096)")
        value = float(m.group(1)) * _SIZE_UNITS[m.group(2).upper()]
    if not math.isfinite(value):
        raise SpecError(source, field, f"size must be a finite number of bytes, got {short_repr(text)}")
    if value > max_bytes:
        raise SpecError(source, field, f"size must be at most {format_size(max_bytes)}, got {short_repr(text)}")
    if value < 0:
        raise SpecError(source, field, f"size must be non-negative, got {short_repr(text)}")
    if abs(value - round(value)) > 1e-6:  # 1.5 (bytes) was silently rounded; 1.5KB = 1500 stays fine
        raise SpecError(source, field, f"size {short_repr(text)} is not a whole number of bytes")
    return int(round(value))


def format_size(size_bytes: float) -> str:
    """Human-readable binary size (``64MiB``)."""
    for unit, factor in (("PiB", 1024**5), ("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size_bytes >= factor and size_bytes % factor == 0:
            return f"{int(size_bytes // factor)}{unit}"
    return f"{int(size_bytes)}B"


def gbps_to_bytes_per_s(bw_gbps: float) -> float:
    """GB/s (decimal, 1e9 bytes) to bytes/s."""
    return float(bw_gbps) * GB


def gbit_to_bytes_per_s(bw_gbit_per_s: float) -> float:
    """Gb/s (link rate, 1e9 bits) to bytes/s."""
    return float(bw_gbit_per_s) * 1e9 / 8.0


def int_arg(minimum: int):
    """An argparse type: an integer of at least ``minimum``, refused with a one-line message otherwise."""
    import argparse

    what = "a non-negative integer" if minimum == 0 else f"an integer >= {minimum}"

    def parse(value: str) -> int:
        try:
            n = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {value[:60]!r}") from None
        if n < minimum:
            raise argparse.ArgumentTypeError(f"expected {what}, got {n}")
        return n

    return parse


#: argparse type of ``--seed``: a non-negative integer (numpy's generators take no negative seed)
seed_arg = int_arg(0)
