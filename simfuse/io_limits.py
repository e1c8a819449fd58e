"""Bounded reading of user input files: the one place every reader opens what a user hands it.

Every input (YAML specs, sharding plans, Chakra ET files, nccl-tests logs, profiler and kernel traces, campaign
and measurement CSVs, calibration profiles) is opened through :func:`open_bounded` (or the helpers built on it),
which

* refuses what is not a regular file before reading a byte: a directory, a FIFO (opened non-blocking, so it
  never waits for a writer), a device such as ``/dev/zero``, a socket, or a symbolic link to any of these;
* decompresses gzip (recognised by its magic bytes, whatever the name) and caps the **decompressed** bytes at the
  reader's limit, and the **ratio** of decompressed to compressed bytes at :data:`MAX_GZIP_RATIO` once past
  :data:`GZIP_RATIO_FLOOR_BYTES` (a 2 MB gzip of zeros that inflates to 4 GiB stops after a few MB);
* caps the **compressed** (on-disk) size too, before opening it;
* bounds line lengths for line-oriented formats (:func:`bounded_lines`), so a regular expression never sees a
  300 kB line.

A breach raises :class:`~simfuse.errors.SpecError` (or the caller's subclass, e.g. ``TraceError``): one line naming
the file and the limit, CLI exit code 2.  Limits are per kind of input (:data:`LIMITS`); they are far above what a
real file of that kind holds (sources in the comments) and far below what exhausts memory.
"""

from __future__ import annotations

import errno
import gzip
import io
import os
import stat
import zlib
from collections.abc import Iterator
from pathlib import Path

from .errors import SpecError, short_repr

MiB = 1 << 20
GiB = 1 << 30

#: Largest decompressed-to-compressed ratio accepted once :data:`GZIP_RATIO_FLOOR_BYTES` are out.  Text traces,
#: logs and CSVs compress 5-30x (measured on the repository's fixtures and gzip's own corpus: JSON ~10x, CSV of
#: numbers ~4x, a log of repeated lines ~40x); a run of zeros compresses ~1000x.
MAX_GZIP_RATIO = 200
#: Below this many decompressed bytes the ratio is not checked (a tiny file of repeated text may compress well).
GZIP_RATIO_FLOOR_BYTES = 8 * MiB
#: Errors a truncated or corrupt gzip stream raises while being read (streaming callers name the line).
GZIP_ERRORS = (EOFError, gzip.BadGzipFile, zlib.error)
#: Longest line a line-oriented reader accepts (nccl-tests rows are < 200 characters, kernel-trace rows < 2 kB).
MAX_LINE_CHARS = 64 * 1024

#: Per kind of input: (largest on-disk size, largest decompressed size), bytes.  Whole-file readers (YAML, JSON
#: plans, ET files, campaign CSVs) hold the text in memory and build objects several times its size, so their
#: limit is lower than the streaming readers' (nccl-tests logs, profiler and kernel traces are read in chunks).
LIMITS: dict[str, tuple[int, int]] = {
    "yaml": (64 * MiB, 64 * MiB),       # a topology / model / profile spec is a few kB
    "plan": (64 * MiB, 64 * MiB),       # a plan of 100k tables x 1k ranks in TorchRec's printed form is ~30 MB
    "chakra": (512 * MiB, 1 * GiB),     # one rank's ET file (a large training step: ~10^6 nodes of ~100 bytes)
    "json": (64 * MiB, 64 * MiB),       # comm-group files and other small JSON
    "campaign": (256 * MiB, 512 * MiB),  # a kernel timing campaign: ~1 kB a row
    "stream": (4 * GiB, 8 * GiB),       # streamed traces and logs: memory stays bounded, time is priced
}


def _error(error: type[SpecError], source: str, message: str, field: str = "") -> SpecError:
    return error(source, field, message)


def check_regular(path: str | Path, *, what: str = "file", error: type[SpecError] = SpecError) -> os.stat_result:
    """The ``stat`` of ``path`` after following links, refusing anything but a regular file (named in the error)."""
    src = str(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise _error(error, src, f"{what} not found" if not os.path.islink(path) else
                     "a symbolic link to nothing") from None
    except OSError as exc:
        raise _error(error, src, f"cannot read the {what}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(st.st_mode):
        raise _error(error, src, f"is a directory, expected a {what}")
    if not stat.S_ISREG(st.st_mode):
        kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a device" if stat.S_ISCHR(st.st_mode)
                or stat.S_ISBLK(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file")
        raise _error(error, src, f"is {kind}, not a regular file; give the {what} itself")
    return st


class _Counted(io.RawIOBase):
    """Raw bytes of the file, counted (the compressed side of a gzip stream)."""

    def __init__(self, fh):
        self.fh, self.n = fh, 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = self.fh.readinto(b)
        self.n += n or 0
        return n

    def close(self) -> None:
        self.fh.close()
        super().close()


class _Capped(io.RawIOBase):
    """The (decompressed) bytes of the file, refusing more than ``limit`` of them or a runaway gzip ratio."""

    def __init__(self, inner, counted: _Counted | None, limit: int, source: str, error: type[SpecError]):
        self.inner, self.counted, self.limit = inner, counted, limit
        self.source, self.error, self.n = source, error, 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = self.inner.readinto(b) or 0  # a corrupt gzip stream raises GZIP_ERRORS: the caller names the line
        self.n += n
        if self.n > self.limit:
            raise _error(self.error, self.source, f"more than {_size(self.limit)} of "
                         f"{'decompressed ' if self.counted else ''}data: larger than an input of this kind can be")
        if self.counted is not None and self.n > GZIP_RATIO_FLOOR_BYTES and \
                self.n > MAX_GZIP_RATIO * max(1, self.counted.n):
            raise _error(self.error, self.source, f"gzip stream inflates more than {MAX_GZIP_RATIO}x "
                         f"({_size(self.counted.n)} -> over {_size(self.n)}): refusing a decompression bomb")
        return n

    def close(self) -> None:
        self.inner.close()
        super().close()


def _size(n: int) -> str:
    return f"{n / GiB:.0f} GiB" if n >= GiB else f"{n / MiB:.0f} MiB" if n >= MiB else f"{n} bytes"


def open_bounded(path: str | Path, kind: str = "stream", *, what: str = "file",
                 error: type[SpecError] = SpecError, max_bytes: int | None = None) -> io.BufferedReader:
    """A binary stream over ``path`` (gzip decompressed), within the limits of ``kind`` (:data:`LIMITS`; or
    ``max_bytes`` decompressed).  Refuses non-regular files without blocking on them (see the module doc)."""
    disk_max, data_max = LIMITS[kind]
    data_max = data_max if max_bytes is None else max_bytes
    src = str(path)
    check_regular(path, what=what, error=error)
    try:  # non-blocking: a FIFO swapped in after the check still cannot hang the open
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise _error(error, src, f"cannot read the {what}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _error(error, src, f"not a regular file; give the {what} itself")
        if st.st_size > disk_max:
            raise _error(error, src, f"{_size(st.st_size)} on disk, over the {_size(disk_max)} an input of this "
                         "kind may be")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        raw = os.fdopen(fd, "rb", buffering=0)
    except BaseException:
        os.close(fd)
        raise
    try:
        magic = os.pread(raw.fileno(), 2, 0) if hasattr(os, "pread") else b""
    except OSError as exc:
        raw.close()
        err = exc.strerror or exc
        raise _error(error, src, f"cannot read the {what}: {err}" if exc.errno != errno.EISDIR else
                     f"is a directory, expected a {what}") from None
    if magic == b"\x1f\x8b":
        counted = _Counted(raw)
        inner = gzip.GzipFile(fileobj=io.BufferedReader(counted, 1 << 16), mode="rb")
        return io.BufferedReader(_Capped(inner, counted, data_max, src, error), 1 << 16)
    return io.BufferedReader(_Capped(raw, None, data_max, src, error), 1 << 16)


def read_bytes(path: str | Path, kind: str, *, what: str = "file", error: type[SpecError] = SpecError) -> bytes:
    """The whole (decompressed) content of ``path`` within the limits of ``kind``."""
    with open_bounded(path, kind, what=what, error=error) as fh:
        try:
            return fh.read()
        except GZIP_ERRORS as exc:
            raise _error(error, str(path), f"corrupt or truncated gzip stream ({exc})") from None
        except OSError as exc:
            raise _error(error, str(path), f"cannot read the {what}: {exc.strerror or exc}") from None


def read_text(path: str | Path, kind: str, *, what: str = "file", error: type[SpecError] = SpecError,
              errors: str = "strict") -> str:
    """The whole content as UTF-8 text (``errors`` as for :meth:`bytes.decode`; strict: a one-line error)."""
    data = read_bytes(path, kind, what=what, error=error)
    try:
        return data.decode("utf-8", errors=errors)
    except UnicodeDecodeError as exc:
        raise _error(error, str(path), f"not UTF-8 text (byte {exc.start})") from None


def open_text(path: str | Path, kind: str = "stream", *, what: str = "file",
              error: type[SpecError] = SpecError) -> io.TextIOWrapper:
    """A UTF-8 text stream (universal newlines) over :func:`open_bounded`."""
    return io.TextIOWrapper(open_bounded(path, kind, what=what, error=error), encoding="utf-8", newline=None)


def bounded_lines(fh, source: str, *, max_chars: int = MAX_LINE_CHARS,
                  error: type[SpecError] = SpecError) -> Iterator[str]:
    """The lines of text stream ``fh`` (with their newline), refusing one longer than ``max_chars`` without
    reading it whole (line numbers from 1 in the error)."""
    n = 0
    while True:
        line = fh.readline(max_chars + 1)
        if not line:
            return
        n += 1
        if len(line) > max_chars and not line.endswith("\n"):
            raise _error(error, source, f"longer than {max_chars:,} characters: not a line of this format",
                         f"line {n}")
        yield line


def check_count(value, limit: int, source: str, field: str, what: str) -> int:
    """An integer count checked against ``limit`` before anything is built from it."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= limit:
        raise SpecError(source, field, f"{what} must be an integer in 0..{limit:,}, got {short_repr(value)}")
    return value


__all__ = ["GZIP_ERRORS", "GZIP_RATIO_FLOOR_BYTES", "LIMITS", "MAX_GZIP_RATIO", "MAX_LINE_CHARS", "bounded_lines", "check_count",
           "check_regular", "open_bounded", "open_text", "read_bytes", "read_text"]
