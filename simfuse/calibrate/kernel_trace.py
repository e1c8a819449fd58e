"""Reader of per-program kernel traces written by ``simfuse.kernels`` (docs/trace_format.md, CSV or CSV.gz).

The file is read in chunks (``pandas.read_csv(chunksize=...)`` over a streamed, possibly gzip, input); only
the numeric columns needed per program (start, end, FLOP, bytes) are kept, grouped by launch (``run_id``), and
each launch is then reduced to a :class:`KernelRun` summary.  Bad input raises :class:`TraceError` naming the
file and the physical line.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import TraceError
from ..spec.trace_format import COLUMNS, FLOAT_COLUMNS, FORMAT_LINE, INT_COLUMNS, STRING_COLUMNS
from ._io import GZIP_ERRORS, open_text

#: ``launch_ns`` below this with no SM ids marks a ``sequence``-timer trace (ticks; %globaltimer is Unix-epoch ns).
SEQUENCE_TIMER_MAX = 10**12

#: Integer columns must stay below this magnitude (int64, with room for float rounding).
INT64_LIMIT = 2.0**62

#: Rows read per chunk.
CHUNK_ROWS = 200_000


def parse_shape(text: str, source: str = "<shape>", where: str = "shape") -> tuple[tuple[str, float | str], ...]:
    """``"bags=16384;dim=128;mode=sum"`` -> ``(("bags", 16384.0), ("dim", 128.0), ("mode", "sum"))``, sorted by key.

    Numeric values become floats; others (``mode=sum``) stay text."""
    items: dict[str, float | str] = {}
    text = str(text).strip()
    if not text:
        return ()
    for part in text.split(";"):
        part = part.strip()
        if not part:
            continue
        key, sep, value = part.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise TraceError(source, where, f"bad shape item {part!r} (expected key=value)")
        value = value.strip()
        try:
            items[key.strip()] = float(value)
        except ValueError:
            items[key.strip()] = value
    return tuple(sorted(items.items()))


def format_shape(shape: tuple[tuple[str, float | str], ...]) -> str:
    """Canonical ``key=value;...`` text (integral numbers without a decimal point)."""
    def fmt(v: float | str) -> str:
        if isinstance(v, str):
            return v
        return str(int(v)) if float(v).is_integer() else repr(float(v))
    return ";".join(f"{k}={fmt(v)}" for k, v in shape)


@dataclass
class KernelRun:
    """One kernel launch reduced from its per-program rows.  Times in seconds, sizes in bytes and FLOP."""

    run_id: str
    kernel: str
    variant: str
    backend: str
    world_size: int
    rank: int
    dtype: str
    shape: str  # canonical key=value;...
    grid: int
    num_warps: int
    programs: int
    launch_latency_s: float  # min(start_ns) - launch_ns (includes the host's launch path: see end_gap_s)
    end_gap_s: float  # kernel_end_ns - max(end_ns): kernel end -> next queued kernel (end marker) running
    kernel_time_s: float  # max(end_ns) - launch_ns (what the simulator's launch latency + makespan models)
    kernel_end_time_s: float  # kernel_end_ns - launch_ns (includes the end marker)
    makespan_s: float  # max(end_ns) - min(start_ns)
    dispatch_gap_s: float  # median idle time of a slot between one program's end and the next start on its SM
    max_concurrency: int  # most programs resident at once (from timestamps)
    compute_units_seen: int  # distinct smid values (0 if unknown)
    max_smid: int
    wg_duration_median_s: float
    wg_duration_p10_s: float
    wg_duration_p90_s: float
    flops_per_program: float  # mean over programs
    bytes_per_program: float  # mean over programs
    #: Per concurrency level (programs resident at a program's midpoint): (concurrency, programs, median
    #: duration s, mean FLOP, mean bytes).  These are the rows the per-workgroup cost fit uses.
    bins: list[tuple[int, int, float, float, float]] = field(default_factory=list)
    source: str = ""  # the trace file

    @property
    def group_key(self) -> tuple:
        return (self.kernel, self.variant, self.backend, self.world_size, self.dtype, self.shape, self.grid,
                self.num_warps)


def _physical_line(path: Path, data_row: int) -> int:
    """1-based physical line of the ``data_row``-th (0-based) data row, skipping the header, '#' and blank lines."""
    seen = -1  # header is the first non-comment line
    with open_text(path) as fh:
        for lineno, line in enumerate(fh, start=1):
            s = line.strip()
            if not s or s.startswith("#"):
                continue
            if seen == data_row:
                return lineno
            seen += 1
    return lineno + 1 if "lineno" in locals() else 1


def _header_line(path: Path) -> tuple[int, list[str]]:
    with open_text(path) as fh:
        for lineno, line in enumerate(fh, start=1):
            s = line.strip()
            if not s or s.startswith("#"):
                continue
            return lineno, [c.strip() for c in s.split("#", 1)[0].split(",")]  # '#' starts a comment
    raise TraceError(str(path), "", "empty kernel trace (no header line)")


class _RunAccumulator:
    def __init__(self, meta: dict):
        self.meta = meta
        self.parts: list[tuple[np.ndarray, ...]] = []

    def add(self, start: np.ndarray, end: np.ndarray, smid: np.ndarray, flops: np.ndarray,
            nbytes: np.ndarray) -> None:
        self.parts.append((start, end, smid, flops, nbytes))


def iter_kernel_runs(path: str | Path, chunk_rows: int = CHUNK_ROWS) -> Iterator[KernelRun]:
    """Stream ``path`` and yield one :class:`KernelRun` per launch (sorted by ``run_id``)."""
    p = Path(path)
    src = str(p)
    try:
        header_lineno, header = _header_line(p)
    except GZIP_ERRORS as exc:
        raise TraceError(src, "line 1", f"corrupt or truncated gzip stream ({exc})") from None
    except UnicodeDecodeError:
        raise TraceError(src, "line 1", "not UTF-8 text (not a kernel trace)") from None
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise TraceError(src, f"line {header_lineno}",
                         f"not a simfuse kernel trace: missing column(s) {', '.join(missing)}")
    runs: dict[str, _RunAccumulator] = {}
    row0 = 0
    try:
        with open_text(p) as fh:
            # Numeric columns are typed by the C parser (fast path); a column with a bad value comes back as
            # text and is checked value by value in _check_chunk.
            reader = pd.read_csv(fh, comment="#", dtype=dict.fromkeys(STRING_COLUMNS, str), chunksize=chunk_rows,
                                 skip_blank_lines=True,
                                 keep_default_na=False, na_values=[""], engine="c")
            for chunk in reader:
                _check_chunk(p, chunk, row0)
                _accumulate(runs, chunk)
                row0 += len(chunk)
    except TraceError:
        raise
    except GZIP_ERRORS as exc:
        raise TraceError(src, f"line {_readable_lines(p) + 1}",
                         f"corrupt or truncated gzip stream ({exc})") from None
    except pd.errors.ParserError as exc:
        raise TraceError(src, f"line >= {_physical_line_safe(p, row0)}", f"malformed CSV ({exc})") from None
    except UnicodeDecodeError:
        raise TraceError(src, f"line >= {_physical_line_safe(p, row0)}", "not UTF-8 text") from None
    if not runs:
        raise TraceError(src, f"line {header_lineno}", "kernel trace has a header but no rows")
    for run_id in sorted(runs):
        yield _summarise(src, runs[run_id])


def _readable_lines(path: Path) -> int:
    """Number of complete lines that can be read before a (gzip) stream error."""
    count = 0
    try:
        with open_text(path) as fh:
            for _line in fh:
                count += 1
    except (*GZIP_ERRORS, UnicodeDecodeError, OSError):
        pass
    return max(0, count - 1)  # the last line read may itself be cut


def _physical_line_safe(path: Path, data_row: int) -> int:
    try:
        return _physical_line(path, data_row)
    except (*GZIP_ERRORS, UnicodeDecodeError, OSError):
        return data_row + 2


def _check_chunk(path: Path, chunk: pd.DataFrame, row0: int) -> None:
    src = str(path)
    missing = [c for c in COLUMNS if c not in chunk.columns]
    if missing:
        raise TraceError(src, "header", f"not a simfuse kernel trace: missing column(s) {', '.join(missing)}")
    bad_rows: list[tuple[int, str]] = []
    for col in STRING_COLUMNS:
        null = chunk[col].isna().to_numpy()
        if null.any():
            bad_rows.append((int(np.argmax(null)), f"empty {col!r}"))
    for col in INT_COLUMNS + FLOAT_COLUMNS:
        values = chunk[col]
        if values.dtype.kind not in "iuf":
            values = pd.to_numeric(values, errors="coerce")
        bad = values.isna().to_numpy()
        if col in INT_COLUMNS and not bad.all():
            if values.dtype.kind in "fu":  # fractional, or beyond int64
                as_float = values.to_numpy(dtype=float, na_value=np.nan)
                with np.errstate(invalid="ignore"):
                    fits = (np.abs(as_float) < INT64_LIMIT) & (np.mod(as_float, 1.0) == 0)
                bad = bad | ~fits
        if col in FLOAT_COLUMNS and not bad.all():
            bad = bad | ~np.isfinite(values.to_numpy(dtype=float, na_value=np.nan)) | (values.to_numpy(dtype=float, na_value=0.0) < 0)
        if bad.any():
            i = int(np.argmax(bad))
            v = chunk[col].iloc[i]
            # a short row leaves its last columns empty (NaN); numpy scalars print as np.float64(...) otherwise
            shown = "empty (a row with too few fields?)" if pd.isna(v) else repr(v.item() if hasattr(v, "item") else v)
            bad_rows.append((i, f"column {col!r}: {shown} is not a valid "
                                f"{'integer' if col in INT_COLUMNS else 'non-negative number'}"))
        chunk[col] = values
    if not bad_rows:
        start = chunk["start_ns"].to_numpy()
        end = chunk["end_ns"].to_numpy()
        neg = end < start
        if neg.any():
            bad_rows.append((int(np.argmax(neg)), "end_ns is before start_ns"))
        early = start < chunk["launch_ns"].to_numpy()
        if early.any():
            bad_rows.append((int(np.argmax(early)), "start_ns is before launch_ns"))
        grid = chunk["grid"].to_numpy()
        pid = chunk["program_id"].to_numpy()
        oob = (pid < 0) | (pid >= grid) | (grid < 1)
        if oob.any():
            bad_rows.append((int(np.argmax(oob)), "program_id outside [0, grid)"))
        ws, rank = chunk["world_size"].to_numpy(), chunk["rank"].to_numpy()
        bad_rank = (ws < 1) | (rank < 0) | (rank >= ws)
        if bad_rank.any():
            i = int(np.argmax(bad_rank))
            bad_rows.append((i, f"rank {int(rank[i])} outside [0, world_size = {int(ws[i])})"))
    if bad_rows:
        i, message = min(bad_rows)
        raise TraceError(src, f"line {_physical_line_safe(path, row0 + i)}", message)


def _accumulate(runs: dict[str, _RunAccumulator], chunk: pd.DataFrame) -> None:
    for run_id, g in chunk.groupby("run_id", sort=False):
        acc = runs.get(run_id)
        if acc is None:
            first = g.iloc[0]
            acc = runs[run_id] = _RunAccumulator({c: first[c] for c in COLUMNS if c not in
                                                  ("program_id", "start_ns", "end_ns", "smid",
                                                   "flops_per_program", "bytes_per_program")})
        acc.add(g["start_ns"].to_numpy(np.int64), g["end_ns"].to_numpy(np.int64), g["smid"].to_numpy(np.int64),
                g["flops_per_program"].to_numpy(float), g["bytes_per_program"].to_numpy(float))


#: one past the largest SM id a trace may hold: GPUs have 132 (H100 SXM), 148 (B200) or 304 (MI300X compute units)
#: SMs; 1,024 leaves room for larger parts while an id beyond it (it would become ``device.compute_units``) is a
#: corrupt trace
MAX_SMID = 1024


def _summarise(src: str, acc: _RunAccumulator) -> KernelRun:
    m = acc.meta
    start = np.concatenate([p[0] for p in acc.parts])
    end = np.concatenate([p[1] for p in acc.parts])
    smid = np.concatenate([p[2] for p in acc.parts])
    flops = np.concatenate([p[3] for p in acc.parts])
    nbytes = np.concatenate([p[4] for p in acc.parts])
    launch = int(m["launch_ns"])
    if start.size != int(m["grid"]):
        raise TraceError(src, f"run {m['run_id']}", f"{start.size} program rows for grid {int(m['grid'])} "
                                                     "(truncated or merged trace?)")
    if launch < SEQUENCE_TIMER_MAX and not (smid >= 0).any():
        raise TraceError(src, f"run {m['run_id']}", "recorded with the 'sequence' timer (event order ticks, not "
                                                     "nanoseconds: smid is -1, timestamps tiny): cannot fit times")
    if smid.size and int(smid.max()) >= MAX_SMID:
        raise TraceError(src, f"run {m['run_id']} smid", f"{int(smid.max())} is not a streaming multiprocessor id "
                                                          f"(at most {MAX_SMID - 1}: no GPU has more SMs/CUs)")
    dur_s = (end - start).astype(float) * 1e-9
    s_sorted = np.sort(start)
    e_sorted = np.sort(end)
    # Resident programs at time t: started at or before t and not yet ended (an end at t frees the slot first).
    at_start = np.searchsorted(s_sorted, s_sorted, side="right") - np.searchsorted(e_sorted, s_sorted, side="right")
    mid = start + (end - start) // 2
    at_mid = np.searchsorted(s_sorted, mid, side="right") - np.searchsorted(e_sorted, mid, side="right")
    at_mid = np.maximum(at_mid, 1)
    bins: list[tuple[int, int, float, float, float]] = []
    order = np.argsort(at_mid, kind="stable")
    levels, first_idx, counts = np.unique(at_mid[order], return_index=True, return_counts=True)
    for level, i0, cnt in zip(levels, first_idx, counts, strict=True):
        idx = order[i0:i0 + cnt]
        bins.append((int(level), int(cnt), float(np.median(dur_s[idx])), float(np.mean(flops[idx])),
                     float(np.mean(nbytes[idx]))))
    try:
        shape = parse_shape(m["shape"], src, f"run {m['run_id']} shape")
    except TraceError:
        raise
    known_sm = smid[smid >= 0]
    return KernelRun(
        run_id=str(m["run_id"]), kernel=str(m["kernel"]), variant=str(m["variant"]), backend=str(m["backend"]),
        world_size=int(m["world_size"]), rank=int(m["rank"]), dtype=str(m["dtype"]),
        shape=format_shape(shape), grid=int(m["grid"]), num_warps=int(m["num_warps"]), programs=int(start.size),
        launch_latency_s=float(start.min() - launch) * 1e-9,
        kernel_time_s=float(end.max() - launch) * 1e-9,
        kernel_end_time_s=float(int(m["kernel_end_ns"]) - launch) * 1e-9,
        makespan_s=float(end.max() - start.min()) * 1e-9,
        end_gap_s=max(0.0, float(int(m["kernel_end_ns"]) - end.max()) * 1e-9),
        dispatch_gap_s=_dispatch_gap_s(start, end, smid),
        max_concurrency=int(at_start.max()),
        compute_units_seen=int(np.unique(known_sm).size),
        max_smid=int(known_sm.max()) if known_sm.size else -1,
        wg_duration_median_s=float(np.median(dur_s)),
        wg_duration_p10_s=float(np.percentile(dur_s, 10)),
        wg_duration_p90_s=float(np.percentile(dur_s, 90)),
        flops_per_program=float(np.mean(flops)), bytes_per_program=float(np.mean(nbytes)),
        bins=bins,
        source=src,
    )


def _dispatch_gap_s(start: np.ndarray, end: np.ndarray, smid: np.ndarray) -> float:
    """Median slot idle time: on each SM the programs started before the first end (``c``) fill its slots, and the
    k-th later start reuses the slot freed by the k-th end (first in, first out).  0 when no slot was reused or SMs
    are unknown."""
    gaps = []
    order = np.lexsort((start, smid))
    sm_sorted = smid[order]
    bounds = np.flatnonzero(np.diff(sm_sorted)) + 1
    for idx in np.split(order, bounds):
        if smid[idx[0]] < 0 or idx.size < 2:
            continue
        s = start[idx]  # sorted by start within the SM
        e = np.sort(end[idx])
        c = int(np.searchsorted(s, e[0], side="left"))  # a start at the first end already refills
        if idx.size > c:
            gaps.append(s[c:] - e[: idx.size - c])
    if not gaps:
        return 0.0
    return max(0.0, float(np.median(np.concatenate(gaps)))) * 1e-9


def read_kernel_runs(path: str | Path, chunk_rows: int = CHUNK_ROWS) -> list[KernelRun]:
    """All launches in one kernel trace file (see :func:`iter_kernel_runs`)."""
    return list(iter_kernel_runs(path, chunk_rows))


def write_kernel_trace(path: str | Path, rows: list[dict]) -> None:
    """Write per-program rows (dicts with the :data:`COLUMNS` keys) in the v1 format (helper for tests/tools)."""
    df = pd.DataFrame(rows, columns=list(COLUMNS))
    p = Path(path)
    text = FORMAT_LINE + "\n" + df.to_csv(index=False)
    if p.suffix == ".gz":
        import gzip
        with gzip.open(p, "wt", encoding="utf-8") as fh:
            fh.write(text)
    else:
        p.write_text(text, encoding="utf-8")
