"""Reader of PyTorch profiler traces (Chrome/Kineto JSON from ``torch.profiler``'s ``export_chrome_trace``).

The ``traceEvents`` array is parsed incrementally (:func:`iter_trace_events`): the file is read in blocks
and each event is decoded on its own with ``json.JSONDecoder.raw_decode``, so memory stays bounded by the
largest single event plus one block, whatever the file size (plain or gzip).  Other top-level keys
(``deviceProperties``, ``distributedInfo`` ...) are decoded whole; they are small.

Kept: complete events (``ph == "X"``) of category ``kernel`` (GPU kernels; NCCL kernels recognised by name)
and ``cpu_op`` (operators; ``args["Input Dims"]`` with ``record_shapes=True``).  GPU kernels inherit the input
shapes of the CPU operator that launched them (linked by ``args["External id"]``).
"""

from __future__ import annotations

import json
import math
import re
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import TraceError
from ..units import TORCH_DTYPE_NAMES, element_bytes
from ._io import GZIP_ERRORS, open_text

BLOCK_CHARS = 1 << 20
MAX_EVENT_CHARS = 64 << 20  # an event larger than this is treated as corrupt input
_WS = " \t\r\n"
#: element bytes of each torch / NCCL dtype spelling (simfuse.units: one table)
_DTYPE_BYTES = {name: element_bytes(name) for name in TORCH_DTYPE_NAMES}
_NCCL_RE = re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z]+)")
#: NCCL < 2.12 kernel names: ``ncclAllReduceRingLLKernel_sum_f32(ncclWorkElem)``, ``ncclSendRecvKernel_copy_i8``
_NCCL_OLD_RE = re.compile(r"^nccl(AllReduce|AllGather|ReduceScatter|Broadcast|Reduce|SendRecv|AllToAll)"
                          r"(?:Ring|Tree|CollNet\w*)?(?:LL128|LL|Simple)?Kernel")
#: PyTorch 1.8-1.9 Kineto traces (before the categories were renamed in 1.10): legacy category -> current one
LEGACY_CATEGORIES = {"Operator": "cpu_op", "Kernel": "kernel", "Runtime": "cuda_runtime", "Memcpy": "gpu_memcpy",
                     "Memset": "gpu_memset", "Python": "python_function"}


def normalize_event(ev):
    """An event of a PyTorch 1.8-1.9 trace in today's spelling: the legacy categories (:data:`LEGACY_CATEGORIES`)
    and the GPU events' lower-case ``external id`` (read as ``External id``); other events unchanged."""
    if not isinstance(ev, dict):
        return ev
    cat = ev.get("cat")
    args = ev.get("args")
    fix_args = isinstance(args, dict) and "external id" in args and "External id" not in args
    if cat not in LEGACY_CATEGORIES and not fix_args:
        return ev
    ev = dict(ev)
    if cat in LEGACY_CATEGORIES:
        ev["cat"] = LEGACY_CATEGORIES[cat]
    if fix_args:
        ev["args"] = {**args, "External id": args["external id"]}
    return ev
_NCCL_COLL = {"allreduce": "all_reduce", "alltoall": "alltoall", "sendrecv": "alltoall",
              "allgather": "all_gather", "reducescatter": "reduce_scatter", "broadcast": "broadcast",
              "reduce": "reduce"}


class _Stream:
    """Character buffer over a text stream that tracks line numbers of consumed text."""

    def __init__(self, fh, src: str):
        self.fh = fh
        self.src = src
        self.buf = ""
        self.pos = 0
        self.line = 1
        self.eof = False

    def fill(self) -> bool:
        if self.eof:
            return False
        chunk = self.fh.read(BLOCK_CHARS)
        if not chunk:
            self.eof = True
            return False
        self.line += self.buf.count("\n", 0, self.pos)
        self.buf = self.buf[self.pos:] + chunk
        self.pos = 0
        return True

    def where(self) -> str:
        return f"line {self.line + self.buf.count(chr(10), 0, self.pos)}"

    def skip_ws(self) -> str:
        """Skip whitespace; return the next char ('' at end of input) without consuming it."""
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in _WS:
                self.pos += 1
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.fill():
                return ""

    def expect(self, chars: str, what: str) -> str:
        c = self.skip_ws()
        if not c:
            raise TraceError(self.src, self.where(), f"unexpected end of file (truncated?) while expecting {what}")
        if c not in chars:
            raise TraceError(self.src, self.where(), f"expected {what}, found {c!r}")
        self.pos += 1
        return c

    def value(self, decoder: json.JSONDecoder, key: str):
        """Decode one JSON value starting at the current position, reading more input as needed."""
        self.skip_ws()
        while True:
            try:
                obj, end = decoder.raw_decode(self.buf, self.pos)
            except RecursionError:
                raise TraceError(self.src, f"key {key} (line {self.line})", "JSON nested too deeply") from None
            except json.JSONDecodeError as exc:
                # Incomplete value at the end of the buffer: read more and retry; otherwise corrupt.
                if not self.eof and len(self.buf) - self.pos < MAX_EVENT_CHARS:
                    self.fill()
                    continue
                truncated = self.eof and not self.buf.rstrip().endswith(("}", "]"))
                msg = f"invalid JSON ({exc.msg})" + ("; the file ends early (truncated?)" if truncated else "")
                line = self.line + self.buf.count("\n", 0, exc.pos)
                raise TraceError(self.src, f"key {key} (line {line})", msg) from None
            except ValueError as exc:  # not a JSONDecodeError: an integer of more than 4,300 digits
                raise TraceError(self.src, f"key {key} (line {self.line})", f"invalid JSON ({str(exc)[:80]})") from None
            if end >= len(self.buf) and not self.eof:
                # A number may continue in the next block: make sure the token ended.
                if self.fill():
                    continue
            self.pos = end
            return obj


def iter_trace_events(path: str | Path, meta: dict | None = None) -> Iterator[dict]:
    """Yield the events of a Chrome trace (``{"traceEvents": [...], ...}`` or a bare ``[...]``) one by one.

    Other top-level keys go into ``meta`` if given.  Raises :class:`TraceError` naming the key
    (``traceEvents[12]``) and line of corrupt or truncated input.
    """
    p = Path(path)
    src = str(p)
    decoder = json.JSONDecoder()
    seen_events = False
    try:
        with open_text(p) as fh:
            st = _Stream(fh, src)
            first = st.skip_ws()
            if first == "[":
                st.pos += 1
                yield from map(normalize_event, _iter_array(st, decoder, "traceEvents"))
                seen_events = True
            elif first == "{":
                st.pos += 1
                if st.skip_ws() == "}":
                    st.pos += 1
                else:
                    while True:
                        key = st.value(decoder, "<top-level key>")
                        if not isinstance(key, str):
                            raise TraceError(src, st.where(), "expected a string key in the top-level object")
                        st.expect(":", f"':' after key {key!r}")
                        if key == "traceEvents":
                            st.expect("[", "'[' opening traceEvents")
                            yield from map(normalize_event, _iter_array(st, decoder, "traceEvents"))
                            seen_events = True
                        else:
                            val = st.value(decoder, key)
                            if meta is not None:
                                meta[key] = val
                        if st.expect(",}", "',' or '}' in the top-level object") == "}":
                            break
            elif first == "":
                raise TraceError(src, "line 1", "empty file")
            else:
                raise TraceError(src, "line 1", f"not a JSON trace (starts with {first!r})")
            if st.skip_ws():
                raise TraceError(src, st.where(), "trailing data after the JSON document")
    except GZIP_ERRORS as exc:
        raise TraceError(src, "", f"corrupt or truncated gzip stream ({exc})") from None
    except UnicodeDecodeError:
        raise TraceError(src, "", "not UTF-8 text (not a JSON trace)") from None
    if not seen_events:
        raise TraceError(src, "traceEvents", "missing: not a Chrome/PyTorch profiler trace")


def _iter_array(st: _Stream, decoder: json.JSONDecoder, name: str) -> Iterator[dict]:
    i = 0
    if st.skip_ws() == "]":
        st.pos += 1
        return
    while True:
        key = f"{name}[{i}]"
        ev = st.value(decoder, key)
        if not isinstance(ev, dict):
            raise TraceError(st.src, f"key {key}", f"expected an event object, got {type(ev).__name__}")
        yield ev
        i += 1
        c = st.skip_ws()
        if not c:
            raise TraceError(st.src, f"key {name}[{i}]", "unexpected end of file (truncated?)")
        st.pos += 1
        if c == "]":
            return
        if c != ",":
            raise TraceError(st.src, f"key {name}[{i}]", f"expected ',' or ']' between events, found {c!r}")


@dataclass
class OpStat:
    """Durations of one (category, name, input shapes) group."""

    cat: str
    name: str
    input_dims: str  # JSON text of args["Input Dims"] ("" when not recorded)
    count: int
    median_s: float
    p10_s: float
    p90_s: float
    collective: str = ""  # for NCCL kernels: all_reduce, alltoall, ...
    size_bytes: float = 0.0  # message size when the trace carries it
    group_size: int = 0

    def to_dict(self) -> dict:
        d = {"cat": self.cat, "name": self.name, "input_dims": self.input_dims, "count": self.count,
             "median_s": _g(self.median_s), "p10_s": _g(self.p10_s), "p90_s": _g(self.p90_s)}
        if self.collective:
            d.update(collective=self.collective, size_bytes=float(self.size_bytes), group_size=self.group_size)
        return d


def _g(x: float) -> float:
    return float(f"{x:.6g}")


def nccl_collective(name: str) -> str:
    """``ncclDevKernel_AllReduce_Sum_f32_RING_LL(...)`` (or NCCL < 2.12's ``ncclAllReduceRingLLKernel_sum_f32``)
    -> ``all_reduce``; '' if not an NCCL kernel."""
    m = _NCCL_RE.match(name) or _NCCL_OLD_RE.match(name)
    if not m:
        return ""
    word = m.group(1).lower()
    for key in sorted(_NCCL_COLL, key=len, reverse=True):
        if word.startswith(key):
            return _NCCL_COLL[key]
    return word


def bad_duration(dur) -> bool:
    """True unless ``dur`` (an event's ``dur``) is a finite non-negative number (JSON ``NaN`` and ``Infinity``
    parse as floats)."""
    return isinstance(dur, bool) or not isinstance(dur, (int, float)) or not math.isfinite(dur) or dur < 0


def _size_bytes(args: dict) -> float:
    nelems = args.get("In msg nelems", args.get("In msg size"))
    dtype = str(args.get("dtype", "")).lower().replace("torch.", "")
    try:
        n = float(nelems)
    except (TypeError, ValueError):
        return 0.0
    return n * _DTYPE_BYTES.get(dtype, 0)


def read_torch_trace(path: str | Path) -> list[OpStat]:
    """Kernel and operator durations grouped by (category, name, input shapes); NCCL kernels tagged."""
    src = str(path)
    groups: dict[tuple, array] = {}  # durations (s) per group, 8 bytes each
    extra: dict[tuple, tuple[str, float, int]] = {}
    dims_by_ext: dict[int, str] = {}
    comm_by_ext: dict[int, dict] = {}
    # Kernels seen before the CPU op that launched them wait here for its shapes (memory: one tuple per such
    # kernel event; Kineto usually writes CPU ops first, so this stays small).
    pending: list[tuple[tuple, float, int | None]] = []
    n_events = 0
    for i, ev in enumerate(iter_trace_events(path)):
        n_events += 1
        if ev.get("ph") != "X":
            continue
        cat = str(ev.get("cat", ""))
        if cat not in ("kernel", "cpu_op", "gpu_user_annotation", "user_annotation"):
            continue
        name = ev.get("name")
        dur = ev.get("dur")
        if not isinstance(name, str):
            raise TraceError(src, f"key traceEvents[{i}].name", f"expected a string, got {name!r}")
        if bad_duration(dur):
            raise TraceError(src, f"key traceEvents[{i}].dur", f"expected a finite non-negative number, got {dur!r}")
        args = ev.get("args") or {}
        if not isinstance(args, dict):
            raise TraceError(src, f"key traceEvents[{i}].args", "expected an object")
        ext = args.get("External id")
        dims = args.get("Input Dims")
        dims_text = json.dumps(dims, separators=(",", ":")) if dims is not None else ""
        if cat == "cpu_op" and isinstance(ext, int) and dims_text:
            dims_by_ext[ext] = dims_text
        if cat == "cpu_op" and isinstance(ext, int) and "Collective name" in args:
            comm_by_ext[ext] = args  # record_param_comms: message size, dtype, group size of a collective
        coll = nccl_collective(name) if cat == "kernel" else ""
        if coll and "In msg nelems" not in args and isinstance(ext, int) and ext in comm_by_ext:
            args = {**comm_by_ext[ext], **args}
        if cat == "user_annotation" or cat == "gpu_user_annotation":
            if not name.startswith("nccl:"):
                continue
            coll = {"all_reduce": "all_reduce", "all_to_all": "alltoall", "_allgather_base": "all_gather",
                    "all_gather": "all_gather", "reduce_scatter": "reduce_scatter"}.get(name[5:], name[5:])
        size = _size_bytes(args) if coll else 0.0
        group = int(args.get("Group size", 0) or 0) if coll else 0
        if cat == "kernel" and not dims_text and isinstance(ext, int) and ext in dims_by_ext:
            dims_text = dims_by_ext[ext]
        if cat == "kernel" and not dims_text:
            pending.append(((cat, name, coll, size, group), dur * 1e-6, ext if isinstance(ext, int) else None))
            continue
        key = (cat, name, dims_text)
        groups.setdefault(key, array("d")).append(dur * 1e-6)
        if coll:
            extra[key] = (coll, size, group)
    for (cat, name, coll, size, group), dur_s, ext in pending:
        key = (cat, name, dims_by_ext.get(ext, "") if ext is not None else "")
        groups.setdefault(key, array("d")).append(dur_s)
        if coll:
            extra[key] = (coll, size, group)
    if n_events == 0:
        raise TraceError(src, "traceEvents", "trace has no events")
    stats = []
    for key in sorted(groups):
        d = np.frombuffer(groups[key], dtype=float)
        coll, size, group = extra.get(key, ("", 0.0, 0))
        stats.append(OpStat(key[0], key[1], key[2], int(d.size), float(np.median(d)), float(np.percentile(d, 10)),
                            float(np.percentile(d, 90)), coll, size, group))
    return stats
