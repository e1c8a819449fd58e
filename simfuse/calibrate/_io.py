"""Shared input helpers: open plain or gzip files by content (magic bytes), peek at the start of a file.

Every open goes through :mod:`simfuse.io_limits` (regular files only, capped sizes and gzip ratios)."""

from __future__ import annotations

import gzip
import io
import zlib
from pathlib import Path

from ..errors import TraceError
from ..io_limits import check_regular, open_bounded

GZIP_MAGIC = b"\x1f\x8b"

#: Errors a truncated or corrupt gzip stream raises while being read.
GZIP_ERRORS = (EOFError, gzip.BadGzipFile, zlib.error)


def is_gzip(path: str | Path) -> bool:
    check_regular(path, error=TraceError)
    with open(path, "rb") as fh:
        return fh.read(2) == GZIP_MAGIC


def not_a_file(path) -> str:
    """Why ``path`` cannot be read as a file: a directory, a special file (FIFO, device), or nothing there."""
    p = Path(path)
    if p.is_dir():
        return "is a directory, expected a file"
    return "not a regular file (a FIFO, device or socket)" if p.exists() else "file not found"


def open_binary(path: str | Path) -> io.BufferedIOBase:
    """Open ``path`` for streaming reads, transparently decompressing gzip (detected by content)."""
    p = Path(path)
    if not p.exists():
        raise TraceError(str(p), "", not_a_file(str(p)))
    return open_bounded(p, "stream", error=TraceError)


def open_text(path: str | Path) -> io.TextIOBase:
    """Text stream (UTF-8, universal newlines) over a plain or gzip file; iterate it with
    :func:`simfuse.io_limits.bounded_lines` where lines are parsed one by one."""
    return io.TextIOWrapper(open_binary(path), encoding="utf-8", newline=None)


def peek_text(path: str | Path, max_bytes: int = 65536) -> str:
    """First ``max_bytes`` of the (decompressed) file as text; undecodable bytes replaced."""
    try:
        with open_binary(path) as fh:
            data = fh.read(max_bytes)
    except GZIP_ERRORS as exc:
        raise TraceError(str(path), "", f"corrupt gzip stream ({exc})") from None
    return data.decode("utf-8", errors="replace")
