"""Reader of nccl-tests standard output (``all_reduce_perf``, ``alltoall_perf``, ...).

Format: ``#`` header lines (``# nThread 1 nGpus 8 ...``, ``#  Rank  0 Group  0 Pid 123 on host device 0 [0x18]
NVIDIA H100 80GB HBM3``, the column header ``#  size  count  type  redop  root  time  algbw  busbw  #wrong ...``),
then one row per message size with out-of-place and in-place columns.  Times are microseconds, bandwidths GB/s
(1e9 bytes).  The collective is taken from the file name or the command line when present (``all_reduce_perf``,
``alltoall_perf``, ...) and otherwise inferred from ``busbw / algbw`` (2(n-1)/n for all-reduce, (n-1)/n for
all-to-all) and the ``redop`` column.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import TraceError
from ._io import GZIP_ERRORS, open_text

_RANK_RE = re.compile(r"^#\s*Rank\s+(\d+)\s+Group\s+(\d+)\s+Pid\s+(\d+)(?:\s+on\s+(\S+))?\s+device\s+(\d+)\s*(?:\[[^\]]*\])?\s*(.*)$")
_NTHREAD_RE = re.compile(r"nThread\s+(\d+)\s+nGpus\s+(\d+)")
_BINARIES = {
    "all_reduce": "all_reduce", "allreduce": "all_reduce",
    "alltoall": "alltoall", "all_to_all": "alltoall", "a2a": "alltoall",
    "all_gather": "all_gather", "allgather": "all_gather",
    "reduce_scatter": "reduce_scatter", "reducescatter": "reduce_scatter",
}
_HEADER_COLS = ("size", "count", "type")


@dataclass
class NcclRow:
    size_bytes: int
    count: int
    dtype: str
    redop: str
    time_s: float  # out-of-place
    algbw_gbps: float
    busbw_gbps: float
    time_inplace_s: float | None
    line: int


@dataclass
class NcclTestLog:
    """One nccl-tests run: collective, ranks, hosts, devices and the measured rows."""

    source: str
    collective: str
    ranks: int
    hosts: list[str]
    devices: list[str]
    rows: list[NcclRow] = field(default_factory=list)

    @property
    def level(self) -> str:
        """``scale_up`` (one host) or ``scale_out`` (several)."""
        return "scale_out" if len(self.hosts) > 1 else "scale_up"


def looks_like_nccl_tests(text: str) -> bool:
    """True if the start of a file looks like nccl-tests output."""
    return bool(re.search(r"^#\s*nThread\s+\d+", text, re.M)) or bool(
        re.search(r"^#\s+size\s+count\s+type", text, re.M))


def _collective_hint(text: str) -> str | None:
    low = text.lower()
    for key in sorted(_BINARIES, key=len, reverse=True):
        if re.search(rf"(^|[^a-z]){key}(_perf|[^a-z]|$)", low):
            return _BINARIES[key]
    return None


def read_nccl_tests(path: str | Path, collective: str | None = None) -> NcclTestLog:
    """Parse one nccl-tests log.  ``collective`` overrides the detection."""
    p = Path(path)
    src = str(p)
    ranks: dict[int, tuple[str, str]] = {}
    threads = gpus = None
    columns: list[str] | None = None
    rows: list[NcclRow] = []
    cmdline_hint: str | None = None
    lineno = 0
    try:
        with open_text(p) as fh:
            for lineno, raw in enumerate(fh, start=1):
                line = raw.rstrip("\n")
                s = line.strip()
                if not s:
                    continue
                if s.startswith("#"):
                    m = _NTHREAD_RE.search(s)
                    if m:
                        threads, gpus = int(m.group(1)), int(m.group(2))
                        continue
                    m = _RANK_RE.match(s)
                    if m:
                        ranks[int(m.group(1))] = (m.group(4) or "localhost", m.group(6).strip())
                        continue
                    toks = s.lstrip("#").split()
                    if len(toks) >= 3 and tuple(toks[:3]) == _HEADER_COLS:
                        columns = toks
                    continue
                if columns is None:
                    if "_perf" in s and cmdline_hint is None:
                        cmdline_hint = _collective_hint(s)
                    continue  # e.g. a command line or an MPI banner before the table
                rows.append(_parse_row(src, lineno, s, columns))
    except GZIP_ERRORS as exc:
        raise TraceError(src, f"line {lineno + 1}", f"corrupt or truncated gzip stream ({exc})") from None
    except UnicodeDecodeError:
        raise TraceError(src, f"line {lineno + 1}", "not UTF-8 text (not an nccl-tests log)") from None
    if columns is None:
        raise TraceError(src, "", "not an nccl-tests log: no '#  size  count  type ...' column header found")
    if not rows:
        raise TraceError(src, f"line {lineno}", "nccl-tests log has no result rows (truncated?)")
    n = len(ranks) if ranks else (threads or 1) * (gpus or 1)
    if n < 2:
        raise TraceError(src, "", f"nccl-tests log covers {n} rank(s); need at least 2 to fit a fabric")
    hosts = sorted({h for h, _ in ranks.values()}) or ["localhost"]
    devices = sorted({d for _, d in ranks.values() if d})
    coll = collective or _collective_hint(p.name) or cmdline_hint or _infer_collective(src, rows, n)
    return NcclTestLog(src, coll, n, hosts, devices, rows)


def _num(src: str, lineno: int, name: str, tok: str) -> float:
    try:
        value = float(tok)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise TraceError(src, f"line {lineno}", f"column {name!r}: {tok!r} is not a finite number")
    return value


def _parse_row(src: str, lineno: int, s: str, columns: list[str]) -> NcclRow:
    toks = s.split()
    if len(toks) != len(columns):
        raise TraceError(src, f"line {lineno}",
                         f"expected {len(columns)} columns ({' '.join(columns)}), got {len(toks)} (truncated?)")
    idx = {}
    for i, c in enumerate(columns):
        idx.setdefault(c, []).append(i)
    if "time" not in idx or "algbw" not in idx or "busbw" not in idx:
        raise TraceError(src, f"line {lineno}", "column header lacks time/algbw/busbw")
    size = _num(src, lineno, "size", toks[idx["size"][0]])
    count = _num(src, lineno, "count", toks[idx["count"][0]])
    t_us = _num(src, lineno, "time", toks[idx["time"][0]])
    algbw = _num(src, lineno, "algbw", toks[idx["algbw"][0]])
    busbw = _num(src, lineno, "busbw", toks[idx["busbw"][0]])
    t_in = None
    if len(idx["time"]) > 1:
        t_in = _num(src, lineno, "time", toks[idx["time"][1]]) * 1e-6
    if size < 0 or t_us <= 0:
        raise TraceError(src, f"line {lineno}", f"size must be >= 0 and time > 0 (got {size}, {t_us} us)")
    redop = toks[idx["redop"][0]] if "redop" in idx else "none"
    return NcclRow(int(size), int(count), toks[idx["type"][0]], redop, t_us * 1e-6, algbw, busbw, t_in, lineno)


def _infer_collective(src: str, rows: list[NcclRow], n: int) -> str:
    big = [r for r in rows if r.algbw_gbps >= 1.0]
    if not big:
        raise TraceError(src, "", "cannot tell the collective (name the file e.g. all_reduce_perf.log)")
    ratio = sorted(r.busbw_gbps / r.algbw_gbps for r in big)[len(big) // 2]
    ar, a2a = 2.0 * (n - 1) / n, (n - 1) / n
    reduces = any(r.redop not in ("none", "-") for r in rows)
    if abs(ratio - ar) < 0.02 * ar and reduces:
        return "all_reduce"
    if abs(ratio - a2a) < 0.02 * a2a:
        return "reduce_scatter" if reduces else "alltoall"
    raise TraceError(src, "", f"cannot tell the collective from busbw/algbw = {ratio:.3f} at {n} ranks "
                              "(name the file e.g. alltoall_perf.log)")
