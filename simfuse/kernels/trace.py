"""Per-program kernel traces in the format of ``docs/trace_format.md`` (v1).

This module is plain Python (csv, gzip): writing and reading traces needs neither torch nor a GPU.
:class:`TraceRecorder` is what the operators fill when called with ``trace=``; the launch side
(marker kernels, per-program timestamps) lives with the operators.

Timers: ``globaltimer`` (GPU ``%globaltimer`` in ns and ``%smid``, through inline PTX) or
``sequence`` (a global atomic counter: start/end values are ticks that order events, not
nanoseconds; ``smid`` is -1).  ``auto`` picks ``globaltimer`` on CUDA and ``sequence`` elsewhere,
because the Triton interpreter cannot run inline asm.
"""

from __future__ import annotations

import csv
import gzip
import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..spec.trace_format import (  # noqa: F401  (the record, re-exported)
    BACKENDS,
    COLUMNS,
    FLOAT_COLUMNS,
    FORMAT_LINE,
    INT_COLUMNS,
    KERNELS,
    VARIANTS,
)

TIMERS = ("auto", "globaltimer", "sequence")
_INT_COLS = set(INT_COLUMNS)
_FLOAT_COLS = set(FLOAT_COLUMNS)


def format_shape(params: dict) -> str:
    """``{'bags': 4096, 'dim': 128}`` -> ``'bags=4096;dim=128'`` (keys sorted)."""
    for k, v in params.items():
        if any(c in str(k) + str(v) for c in ";=,\n"):
            raise ValueError(f"shape: key or value {k}={v} contains a reserved character")
    return ";".join(f"{k}={params[k]}" for k in sorted(params))


def parse_shape(text: str) -> dict[str, str]:
    out = {}
    for part in filter(None, text.split(";")):
        if "=" not in part:
            raise ValueError(f"shape: '{part}' is not key=value")
        k, v = part.split("=", 1)
        out[k] = v
    return out


@dataclass
class KernelTrace:
    """One traced kernel launch: metadata plus one (start, end, smid) per program."""

    run_id: str
    kernel: str
    variant: str
    backend: str
    world_size: int
    rank: int
    dtype: str
    shape: str
    num_warps: int
    launch_ns: int
    kernel_end_ns: int
    start_ns: Sequence[int]
    end_ns: Sequence[int]
    smid: Sequence[int]
    flops_per_program: Sequence[float] | float = 0.0
    bytes_per_program: Sequence[float] | float = 0.0
    timer: str = field(default="globaltimer")

    def __post_init__(self):
        if self.kernel not in KERNELS:
            raise ValueError(f"kernel: {self.kernel!r} not one of {KERNELS}")
        if self.variant not in VARIANTS:
            raise ValueError(f"variant: {self.variant!r} not one of {VARIANTS}")
        if self.backend not in BACKENDS:
            raise ValueError(f"backend: {self.backend!r} not one of {BACKENDS}")
        n = len(self.start_ns)
        if len(self.end_ns) != n or len(self.smid) != n:
            raise ValueError("start_ns/end_ns/smid: lengths differ")
        for name in ("flops_per_program", "bytes_per_program"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) and len(v) != n:
                raise ValueError(f"{name}: expected {n} values (one per program), got {len(v)}")

    @property
    def grid(self) -> int:
        return len(self.start_ns)

    def rows(self) -> Iterable[list]:
        fl, by = self.flops_per_program, self.bytes_per_program
        for p in range(self.grid):
            yield [
                self.run_id, self.kernel, self.variant, self.backend, self.world_size, self.rank, self.dtype,
                self.shape, self.grid, self.num_warps, self.launch_ns, self.kernel_end_ns, p,
                int(self.start_ns[p]), int(self.end_ns[p]), int(self.smid[p]),
                float(fl if isinstance(fl, (int, float)) else fl[p]),
                float(by if isinstance(by, (int, float)) else by[p]),
            ]


def _open_text(path: Path, mode: str):
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, mode + "b"), encoding="utf-8", newline="")
    return open(path, mode, encoding="utf-8", newline="")


def write_trace(path: str | Path, traces: Iterable[KernelTrace]) -> int:
    """Write ``traces`` to ``path`` (gzip when it ends in ``.gz``); returns the number of rows."""
    path = Path(path)
    n = 0
    with _open_text(path, "w") as f:
        f.write(FORMAT_LINE + "\n")
        w = csv.writer(f, lineterminator="\n")
        w.writerow(COLUMNS)
        for tr in traces:
            for row in tr.rows():
                w.writerow(row)
                n += 1
    return n


def read_trace(path: str | Path) -> list[dict]:
    """Read a trace file back into dicts with typed values (``#`` lines skipped)."""
    path = Path(path)
    with _open_text(path, "r") as f:
        lines = [ln for ln in f if not ln.startswith("#")]
    reader = csv.DictReader(lines)
    if reader.fieldnames is None or tuple(reader.fieldnames) != COLUMNS:
        raise ValueError(f"{path}: header {reader.fieldnames} is not the simfuse trace v1 header")
    out = []
    for row in reader:
        for k in _INT_COLS:
            row[k] = int(row[k])
        for k in _FLOAT_COLS:
            row[k] = float(row[k])
        out.append(row)
    return out


class TraceRecorder:
    """Collects :class:`KernelTrace` objects from operator calls made with ``trace=recorder``.

    ``rank``: only the launch of this rank is traced (one launch per call).  ``timer``: ``auto``,
    ``globaltimer`` (CUDA only) or ``sequence``.
    """

    def __init__(self, timer: str = "auto", rank: int = 0, prefix: str = "run"):
        if timer not in TIMERS:
            raise ValueError(f"timer: {timer!r} not one of {TIMERS}")
        self.timer = timer
        self.rank = rank
        self.prefix = prefix
        self.traces: list[KernelTrace] = []

    def resolve_timer(self, device_type: str, interpreting: bool) -> str:
        if self.timer == "auto":
            return "globaltimer" if device_type == "cuda" and not interpreting else "sequence"
        if self.timer == "globaltimer" and (device_type != "cuda" or interpreting):
            raise ValueError(
                "timer: 'globaltimer' needs a CUDA device and a compiled kernel (inline asm raises in the "
                "Triton interpreter); use timer='sequence' or 'auto'"
            )
        return self.timer

    def next_run_id(self, kernel: str) -> str:
        return f"{self.prefix}-{kernel}-{len(self.traces):04d}"

    def add(self, trace: KernelTrace) -> None:
        self.traces.append(trace)

    def write(self, path: str | Path) -> int:
        return write_trace(path, self.traces)
