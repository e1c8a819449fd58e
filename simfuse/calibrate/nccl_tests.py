"""Reader of nccl-tests standard output (``all_reduce_perf``, ``alltoall_perf``, ...) as users have it.

The table: ``#`` header lines (``# nThread 1 nGpus 8 ...``, ``#  Rank  0 Group  0 Pid 123 on host device 0 [0x18]
NVIDIA H100 80GB HBM3``, the column header ``#  size  count  type  redop  root  time  algbw  busbw  #wrong ...``),
then one row per message size with out-of-place and in-place columns.  Times are microseconds, bandwidths GB/s
(1e9 bytes).  Only the out-of-place block is used.

What real logs look like and what this reader accepts (fixtures: ``tests/data/nccl_tests/``):

* launcher prefixes on every line: OpenMPI ``--tag-output`` (``[1,0]<stdout>:``), Slurm ``srun --label``
  (``0: ``), MPICH/Intel MPI ``-prepend-rank`` (``[0] ``, also in the middle of a line when writes were split),
  pdsh-style ``host: `` prefixes;
* preambles before the table: OpenMPI ``[host:pid]`` warnings and ``----`` help boxes, NCCL ``NCCL INFO`` lines,
  the command line, ``NCCL version ...``;
* column layouts of nccl-tests 1.x (``bytes N type op time algbw busbw res``), 2.x before 2.10 (``size count type
  redop time algbw busbw error``, ``N/A`` when checks are off), 2.10+ (``... redop root time algbw busbw #wrong``),
  layouts without ``redop`` (all-gather of old versions), an empty redop column (all-to-all), rows that hold only
  one (the out-of-place) block;
* rank lines of every version (``Rank 0 Group 0 Pid P on H``, ``Rank 0 Pid P on H``, ``Rank 0 on H``) or none:
  the rank count then comes from ``ranks=`` (``--ranks``), ``nranks`` in NCCL INFO lines, or the launcher's
  command line (``-np``, ``--ntasks``); the node count from ``nodes=`` (``--nodes``), the rank lines' hosts, the
  NCCL INFO lines' hosts or the command line (``-npernode``, ``--nodes``, ``-H a,b``);
* crashed or truncated runs: rows up to the failure are kept (the failure is noted); a run without result rows
  raises a one-line :class:`TraceError` saying "this run produced no results" and why.

The collective comes from the ``--collective`` override, the ``# Collective test starting:`` line, the file name,
the command line, or ``busbw / algbw`` (2(n-1)/n for all-reduce, (n-1)/n for all-to-all) and the redop column.
Names are canonical (:mod:`simfuse.names`: ``all_to_all``, ``all_reduce``, ...).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import SpecError, TraceError
from ..io_limits import bounded_lines
from ..names import collective_or_none
from ._io import GZIP_ERRORS, open_text

_RANK_RE = re.compile(r"^#?\s*Rank\s+(\d+)(?:\s+Group\s+\d+)?(?:\s+Pid\s+(\d+))?\s+on\s+(\S+)\s+device\s+(\d+)"
                      r"\s*(?:\[[^\]]*\])?\s*(.*)$")
#: NCCL settings a log may state (a command line's ``NCCL_X=v``, or NCCL's own "NCCL_X set by environment to v")
#: that simfuse prices: the algorithm and protocol forced, and the channel minimums (``collectives.min_ctas``,
#: ``collectives.min_nchannels``)
LOG_SETTINGS = ("NCCL_ALGO", "NCCL_PROTO", "NCCL_MIN_CTAS", "NCCL_MIN_NCHANNELS", "NCCL_MIN_NRINGS")
_ENV_RE = re.compile(r"\b(" + "|".join(LOG_SETTINGS) + r")=(\S+)")
_ENV_INFO_RE = re.compile(r"\b(" + "|".join(LOG_SETTINGS) + r") set by environment to (\S+?)\.?$")
#: the channel minimums among them -> the topology fields that price them (``NCCL_MIN_NRINGS`` is the older name of
#: ``NCCL_MIN_NCHANNELS``)
CHANNEL_SETTINGS = {"NCCL_MIN_CTAS": "collectives.min_ctas", "NCCL_MIN_NCHANNELS": "collectives.min_nchannels",
                    "NCCL_MIN_NRINGS": "collectives.min_nchannels"}


_SETTING_WORD_RE = re.compile(r"(?:^|\s)(" + "|".join(LOG_SETTINGS) + r")=(\S*)")


def settings_in(text: str) -> dict[str, str]:
    """The :data:`LOG_SETTINGS` a line of settings (``NCCL_X=v NCCL_Y=w``, space-separated words) states, as
    written (an empty value included, so that it is refused, not skipped)."""
    return {m.group(1): m.group(2) for m in _SETTING_WORD_RE.finditer(text or "")}


def channel_minimums(settings: dict[str, str], source: str, field_of=lambda name: name) -> dict[str, int]:
    """``{topology field: value}`` of the channel minimums in ``settings`` (``{NCCL_X: value}``; the larger where
    two names set one field).  A value that is not an integer of 1..:data:`~simfuse.spec.topology.MAX_CHANNELS`
    raises :class:`SpecError` naming ``source`` and ``field_of(name)``."""
    from ..spec.topology import MAX_CHANNELS

    out: dict[str, int] = {}
    for name, field_name in CHANNEL_SETTINGS.items():
        raw = settings.get(name)
        if raw is None:
            continue
        if not (raw.isdigit() and 1 <= int(raw) <= MAX_CHANNELS):
            raise SpecError(source, field_of(name), f"{name}={raw[:20]!r}: expected an integer from 1 to "
                                                    f"{MAX_CHANNELS} (NCCL's channel limit)")
        out[field_name] = max(int(raw), out.get(field_name, 0))
    return out


_NTHREAD_RE = re.compile(r"nThread\s+(\d+)\s+nGpus\s+(\d+)")
_NRANKS_RE = re.compile(r"\bnranks\s+(\d+)")
_INFO_HOST_RE = re.compile(r"^([A-Za-z0-9_.\-]+):\d+:\d+\s+\[\d+\]\s+NCCL\s+(?:INFO|WARN)")
_STARTING_RE = re.compile(r"Collective test starting:\s*(\S+)")
#: the NCCL library's version: an ``NCCL version 2.21.5+cuda12.4`` line, else nccl-tests' ``nccl-library=22105``
#: header field (nccl-tests' own ``nccl-tests version 2.17.8`` is the test suite's, not NCCL's)
_VERSION_RE = re.compile(r"NCCL version\s+(\S+)|nccl-library=(\d{5})")
_BINARY_RE = re.compile(r"(?:^|[/\s])([a-z_]+?)_perf(?:_mpi)?(?![a-z])")
_FAIL_RE = re.compile(r"NCCL failure|Test CUDA failure|Test failure|CUDA failure|NCCL WARN|Segmentation fault|"
                      r"segfault|Aborted|core dumped|mpirun noticed|exited on signal|srun: error|"
                      r"CANCELLED|DUE TO TIME LIMIT|Killed|terminate called|out of memory", re.I)
_ROW_RE = re.compile(r"^\d+\s+\d+(\s|$)")
# a result row, possibly malformed (not "host:pid" or "12:"); "-8 ..." too (a corrupt size, refused, not skipped)
_ROW_START_RE = re.compile(r"^-?\d[^\s:]*(\s|$)")
# Launcher prefixes, tried in order; each is removed once from the start of the line.
_PREFIXES = (
    re.compile(r"^\[\d+,\d+\]<(?:stdout|stderr)>:\s?"),  # OpenMPI --tag-output
    re.compile(r"^\[\d+,\d+\]:\s?"),                      # OpenMPI with a custom tag
    re.compile(r"^\s*\d+:\s"),                            # srun --label
    re.compile(r"^\[\d+\]\s?"),                           # MPICH / Intel MPI -prepend-rank
)
_HOST_PREFIX = re.compile(r"^[A-Za-z][A-Za-z0-9_.\-]*:\s+")  # pdsh / clush: "node01: ..."
_INLINE_RANK = re.compile(r"\[\d+\]")
#: ``error`` (nccl-tests before 2.10) is the largest numeric deviation of the result (1e-07 is float rounding, not a
#: wrong result); ``#wrong`` / ``res`` count wrong elements
_COL_ALIASES = {"bytes": "size", "n": "count", "op": "redop", "res": "wrong", "error": "error", "#wrong": "wrong",
                "wrong": "wrong", "errors": "error"}
#: an ``error`` value above this is a wrong result, below it numeric rounding (sums of 1e3-1e9 floats in fp32 / fp16)
MAX_NUMERIC_ERROR = 1e-2
#: element types of nccl-tests' result rows (rows-only pastes are recognised by them)
_TYPES = {"int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bfloat16", "fp8_e4m3",
          "fp8_e5m2", "f8e4m3", "f8e5m2", "int", "char", "byte", "float16", "float32", "float64"}
_PREFIX_COLS = ("size", "count", "type", "redop", "root")
_REDUCTIONS = {"sum", "prod", "min", "max", "avg", "mulsum", "premulsum", "none", "-"}
_CMD_NP = re.compile(r"(?:^|\s)(?:-np|-n|--np|--ntasks(?:=|\s))\s*(\d+)")
_CMD_PERNODE = re.compile(r"(?:-npernode|--npernode|-ppn|--ntasks-per-node(?:=|\s)|ppr:)\s*(\d+)")
_CMD_NODES = re.compile(r"(?:--nodes(?:=|\s)|^srun\b.*?\s-N\s*)(\d+)")
_CMD_HOSTS = re.compile(r"(?:^|\s)(?:-H|--host|-host)\s+(\S+)")
_CMD_G = re.compile(r"\s(?:-g|--ngpus)\s+(\d+)")


@dataclass
class NcclRow:
    size_bytes: int
    count: int
    dtype: str
    redop: str
    time_s: float  # out-of-place
    algbw_gbyte_per_s: float | None
    busbw_gbyte_per_s: float | None
    time_inplace_s: float | None
    line: int
    wrong: str = "0"
    error: str | None = None  # the ``error`` column of old nccl-tests (max numeric deviation), when the log has it


@dataclass
class NcclTestLog:
    """One nccl-tests run: collective, ranks, hosts, devices and the measured rows."""

    source: str
    collective: str
    ranks: int
    hosts: list[str]
    devices: list[str]
    rows: list[NcclRow] = field(default_factory=list)
    nodes: int | None = None
    notes: list[str] = field(default_factory=list)
    nccl_version: str | None = None
    #: the NCCL settings the log states that simfuse prices (:data:`LOG_SETTINGS`), as written
    env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.nodes is None:
            self.nodes = max(1, len(self.hosts))

    @property
    def level(self) -> str:
        """``scale_up`` (one node) or ``scale_out`` (several)."""
        return "scale_out" if (self.nodes or 1) > 1 else "scale_up"

    @property
    def gpus_per_node(self) -> int:
        return max(1, self.ranks // max(1, self.nodes or 1))


def strip_launcher_prefix(line: str) -> str:
    """The line without the launcher's per-line prefix (see the module docstring)."""
    for rx in _PREFIXES:
        m = rx.match(line)
        if m:
            line = line[m.end():]
            break
    if _INLINE_RANK.search(line) and _ROW_RE.match(_INLINE_RANK.sub(" ", line).strip()):
        line = _INLINE_RANK.sub(" ", line)  # "-1[0]    1626.5": -prepend-rank on split writes
    if not line.lstrip().startswith("#") and not _ROW_RE.match(line.strip()):
        m = _HOST_PREFIX.match(line)
        if m and (line[m.end():].lstrip().startswith("#") or _ROW_RE.match(line[m.end():].strip())):
            line = line[m.end():]
    return line


def _column_header(s: str) -> list[str] | None:
    toks = [t.lower() for t in s.lstrip("#").split()]
    if len(toks) < 4 or toks[0] not in ("size", "bytes") or toks[1] not in ("count", "n"):
        return None
    cols = [_COL_ALIASES.get(t, t) for t in toks]
    if not {"time", "algbw", "busbw"} <= set(cols):
        return None
    return cols


def looks_like_nccl_tests(text: str) -> bool:
    """True if the start of a file looks like nccl-tests output (launcher prefixes allowed)."""
    for raw in text.splitlines():
        s = strip_launcher_prefix(raw).strip()
        if _NTHREAD_RE.search(s) and s.lstrip("#").lstrip().startswith("nThread"):
            return True
        if s.startswith("#") and _column_header(s) is not None:
            return True
        if "Collective test starting:" in s:
            return True
    return False


def _collective_hint(text: str) -> str | None:
    m = _BINARY_RE.search(text.lower())
    if m:
        return collective_or_none(m.group(1))
    return None


@dataclass
class _Layout:
    cols: list[str]
    prefix: list[str]          # prefix columns present (size, count, type, redop, root)
    block: list[str]           # one block's columns (time, algbw, busbw[, wrong])
    nblocks: int
    out_of_place: int          # index of the out-of-place block
    time_ends: list[int]       # character offset of the end of each block's "time" header


def _layout(src: str, lineno: int, cols: list[str], header_line: str, label_line: str | None) -> _Layout:
    n_prefix = 0
    while n_prefix < len(cols) and cols[n_prefix] in _PREFIX_COLS:
        n_prefix += 1
    rest = cols[n_prefix:]
    if not rest or rest[0] != "time":
        raise TraceError(src, f"line {lineno}", f"unrecognised nccl-tests column header: {' '.join(cols)}")
    try:
        bs = rest.index("time", 1)
    except ValueError:
        bs = len(rest)
    block = rest[:bs]
    if "algbw" not in block or "busbw" not in block or len(rest) % bs:
        raise TraceError(src, f"line {lineno}", f"unrecognised nccl-tests column header: {' '.join(cols)}")
    nblocks = len(rest) // bs
    oop = 0
    if label_line is not None:
        low = label_line.lower()
        i_oop, i_in = low.find("out-of-place"), low.replace("out-of-place", " " * 12).find("in-place")
        if i_oop >= 0 and 0 <= i_in < i_oop and nblocks == 2:
            oop = 1  # mscclpp-test prints in-place first
    ends = [m.end() for m in re.finditer(r"\btime\b", header_line.lower())]
    return _Layout(cols, cols[:n_prefix], block, nblocks, oop, ends)


def _headerless_layout(s: str) -> _Layout | None:
    """The layout of a result row pasted without its column header (``size count type [redop] [root] time algbw
    busbw wrong|error [time algbw busbw wrong|error]``), or None if the line is not such a row.  A ``root`` column
    marks nccl-tests 2.10+ (a ``#wrong`` count); without it the last column of a block is the old ``error``."""
    t = s.split()
    if len(t) < 7 or not t[0].isdigit() or not t[1].isdigit() or t[2].lower() not in _TYPES:
        return None
    prefix = ["size", "count", "type"]
    i = 3
    if t[i].lower() in _REDUCTIONS - {"-"} and not _looks_numeric(t[i]):
        prefix.append("redop")
        i += 1
    rest = t[i:]
    root = len(rest) in (5, 9) and rest[0].lstrip("-").isdigit()
    if root:
        prefix.append("root")
        rest = rest[1:]
    if len(rest) not in (4, 8) or not all(_looks_numeric(x) for x in rest[:3]):
        return None
    block = ["time", "algbw", "busbw", "wrong" if root else "error"]
    nblocks = len(rest) // 4
    return _Layout(prefix + block * nblocks, prefix, block, nblocks, 0, [])


def _num(src: str, lineno: int, name: str, tok: str) -> float | None:
    if tok.upper() in ("N/A", "NA", "-"):
        return None
    try:
        value = float(tok)
    except ValueError:
        raise TraceError(src, f"line {lineno}", f"column {name!r}: {tok!r} is not a number") from None
    if not math.isfinite(value):
        raise TraceError(src, f"line {lineno}", f"column {name!r}: {tok!r} is not a finite number")
    return value


def _parse_row(src: str, lineno: int, s: str, lay: _Layout) -> NcclRow | None:
    """One result row (``None`` when it holds no out-of-place time, e.g. ``N/A``)."""
    toks = s.split()
    i = 0
    vals: dict[str, str] = {}
    for c in lay.prefix:
        if i >= len(toks):
            raise TraceError(src, f"line {lineno}", "truncated result row")
        if c == "redop" and _looks_numeric(toks[i]) and toks[i].lower() not in _REDUCTIONS:
            vals["redop"] = "none"  # empty redop column (all-to-all, all-gather)
            continue
        if c == "type" and _looks_numeric(toks[i]):
            raise TraceError(src, f"line {lineno}", f"column 'type': {toks[i]!r} is not a data type")
        vals[c] = toks[i]
        i += 1
    rest = toks[i:]
    bs = len(lay.block)
    if len(rest) == bs * lay.nblocks:
        blocks = [rest[k * bs:(k + 1) * bs] for k in range(lay.nblocks)]
        oop = blocks[lay.out_of_place]
        inplace = blocks[1 - lay.out_of_place] if lay.nblocks == 2 else None
    elif len(rest) == bs and lay.nblocks == 2:
        # One block only: which one is told by where it sits under the header (right-aligned columns).
        pos = _token_end(s, i + lay.block.index("time") if "time" in lay.block else i)
        which = lay.out_of_place
        if len(lay.time_ends) == 2 and pos is not None:
            which = min((0, 1), key=lambda k: abs(lay.time_ends[k] - pos))
        if which != lay.out_of_place:
            return None  # only the in-place block was measured
        oop, inplace = rest, None
    else:
        raise TraceError(src, f"line {lineno}", f"expected {len(lay.cols)} columns ({' '.join(lay.cols)}), got "
                                                f"{len(toks)} (truncated?)")
    b = dict(zip(lay.block, oop, strict=True))
    size = _num(src, lineno, "size", vals["size"])
    count = _num(src, lineno, "count", vals["count"])
    t_us = _num(src, lineno, "time", b["time"])
    if size is None or count is None:
        raise TraceError(src, f"line {lineno}", "size and count must be numbers")
    if t_us is None:
        return None
    if size < 0 or t_us <= 0 or not size.is_integer():
        raise TraceError(src, f"line {lineno}", f"size must be a whole number of bytes >= 0 and time > 0 (got "
                                                f"{vals['size']}, {t_us} us)")
    t_in = None
    if inplace is not None:
        v = _num(src, lineno, "time", dict(zip(lay.block, inplace, strict=True))["time"])
        t_in = None if v is None or v <= 0 else v * 1e-6
    return NcclRow(int(size), int(count), vals.get("type", "-"), vals.get("redop", "none"), t_us * 1e-6,
                   _num(src, lineno, "algbw", b["algbw"]), _num(src, lineno, "busbw", b["busbw"]), t_in, lineno,
                   b.get("wrong", "0"), b.get("error"))


def _looks_numeric(tok: str) -> bool:
    try:
        float(tok)
    except ValueError:
        return tok.upper() == "N/A"
    return True


def _token_end(line: str, index: int) -> int | None:
    ms = list(re.finditer(r"\S+", line))
    return ms[index].end() if index < len(ms) else None


@dataclass
class _Scan:
    """What :func:`read_nccl_tests` collects line by line before it checks the log as a whole."""

    rank_lines: dict[int, tuple[str, str, str | None]] = field(default_factory=dict)
    duplicate_rank0: bool = False
    threads: int | None = None
    gpus: int | None = None
    nranks_info: set[int] = field(default_factory=set)
    info_hosts: set[str] = field(default_factory=set)
    lay: _Layout | None = None
    label_line: str | None = None
    rows: list[NcclRow] = field(default_factory=list)
    cmdlines: list[str] = field(default_factory=list)
    starting: str | None = None
    version: str | None = None
    failures: list[str] = field(default_factory=list)
    malformed: tuple[int, str] | None = None
    env: dict[str, str] = field(default_factory=dict)
    more_tests: str | None = None

    def feed(self, src: str, lineno: int, raw: str, headerless: bool) -> bool:
        """Take one line; False once a second test starts in the same file (only the first is read)."""
        line = strip_launcher_prefix(raw.rstrip("\n"))
        s = line.strip()
        if not s:
            return True
        for m in _ENV_RE.finditer(s):
            self.env[m.group(1)] = m.group(2).strip("'\"")
        m = _ENV_INFO_RE.search(s)
        if m:  # NCCL's own report of a setting: "NCCL INFO NCCL_MIN_CTAS set by environment to 24."
            self.env[m.group(1)] = m.group(2)
        m = _NTHREAD_RE.search(s)
        if m and s.lstrip("#").lstrip().startswith("nThread"):
            self.threads, self.gpus = int(m.group(1)), int(m.group(2))
            return True
        if s.startswith("#") or _RANK_RE.match(s):
            return self._comment(src, lineno, line, s)
        m = _INFO_HOST_RE.match(s)
        if m:
            self._info(s, m)
            return True
        if self.lay is None and headerless and _ROW_START_RE.match(s):
            self.lay = _headerless_layout(s)
        if self.lay is not None and _ROW_START_RE.match(s):
            self._row(src, lineno, s)
            return True
        m = _VERSION_RE.search(s)
        if m:
            self.version = _better_version(self.version, m)
            return True
        if "_perf" in s:
            self.cmdlines.append(s)
            return True
        if _FAIL_RE.search(s):
            self.failures.append(s)
        return True

    def _comment(self, src: str, lineno: int, line: str, s: str) -> bool:
        """A ``#`` line or a ``Rank`` line: header fields, the test's name, the column header."""
        body = s.lstrip("#").strip()
        m = _NTHREAD_RE.search(body)
        if m and body.startswith("nThread"):
            self.threads, self.gpus = int(m.group(1)), int(m.group(2))
            return True
        m = _RANK_RE.match(s)
        if m:
            r = int(m.group(1))
            entry = (m.group(3), m.group(5).strip(), m.group(2))
            if r in self.rank_lines and self.rank_lines[r] != entry:
                self.duplicate_rank0 = self.duplicate_rank0 or r == 0
            self.rank_lines.setdefault(r, entry)
            return True
        m = _STARTING_RE.search(body)
        if m:
            if self.starting is not None and self.rows:  # a second test in the same file: read the first
                self.more_tests = m.group(1)
                return False
            self.starting = m.group(1)
            return True
        m = _VERSION_RE.search(body)
        if m:
            self.version = _better_version(self.version, m)
        cols = _column_header(s)
        if cols is not None:
            if self.lay is None:
                self.lay = _layout(src, lineno, cols, line, self.label_line)
            return True
        if "out-of-place" in body or "in-place" in body:
            self.label_line = line
        return True

    def _info(self, s: str, m: re.Match) -> None:
        """An ``NCCL INFO`` / ``WARN`` line: its host, the NCCL version, the rank count, a warning."""
        self.info_hosts.add(m.group(1))
        mv = _VERSION_RE.search(s)
        if mv:
            self.version = _better_version(self.version, mv)
        m2 = _NRANKS_RE.search(s)
        if m2:
            self.nranks_info.add(int(m2.group(1)))
        if "NCCL WARN" in s:
            self.failures.append(s)

    def _row(self, src: str, lineno: int, s: str) -> None:
        """A result row; a malformed one is fatal only if more rows follow (else the log was cut off)."""
        if self.malformed is not None:
            raise TraceError(src, f"line {self.malformed[0]}", self.malformed[1])
        try:
            row = _parse_row(src, lineno, s, self.lay)
        except TraceError as exc:
            self.malformed = (lineno, exc.message)
            return
        if row is not None:
            self.rows.append(row)


def read_nccl_tests(path: str | Path, collective: str | None = None, *, ranks: int | None = None,
                    nodes: int | None = None, headerless: bool = False) -> NcclTestLog:
    """Parse one nccl-tests log.  ``collective``, ``ranks`` and ``nodes`` override what the log says.
    ``headerless``: accept result rows pasted without their column header (issue pastes; the caller said the
    file is nccl-tests output, e.g. ``calibrate --kind nccl-tests``): the layout is inferred from the rows."""
    p = Path(path)
    src = str(p)
    st = _Scan()
    lineno = 0
    try:
        with open_text(p) as fh:
            for lineno, raw in enumerate(bounded_lines(fh, src, error=TraceError), start=1):
                if not st.feed(src, lineno, raw, headerless):
                    break
    except GZIP_ERRORS as exc:
        raise TraceError(src, f"line {lineno + 1}", f"corrupt or truncated gzip stream ({exc})") from None
    except UnicodeDecodeError:
        raise TraceError(src, f"line {lineno + 1}", "not UTF-8 text (not an nccl-tests log)") from None
    rows, lay, failures, malformed, starting = st.rows, st.lay, st.failures, st.malformed, st.starting
    rank_lines, threads, gpus, cmdlines, version = st.rank_lines, st.threads, st.gpus, st.cmdlines, st.version
    nranks_info, info_hosts, more_tests, env = st.nranks_info, st.info_hosts, st.more_tests, st.env
    duplicate_rank0 = st.duplicate_rank0
    notes: list[str] = []
    if malformed is not None:
        notes.append(f"line {malformed[0]}: last row cut off ({malformed[1]}); dropped")
    if lay is None and not rank_lines and threads is None and starting is None:
        if headerless:
            raise TraceError(src, "", "no nccl-tests result rows found (neither a column header nor rows like "
                                      "'size count type redop root time algbw busbw #wrong ...')")
        raise TraceError(src, "", "not an nccl-tests log: no '#  size  count  type ...' column header found")
    if not rows:
        why = (f"it failed: {_clip(failures[0])}" if failures else
               "the log ends before the first result row (crashed or truncated?)" if lay is not None else
               "the log ends before the column header (crashed or truncated?)")
        raise TraceError(src, "", f"this run produced no results: {why}")
    if failures:
        notes.append(f"the run reported a failure after {len(rows)} row(s): {_clip(failures[0])}")
    wrong = [r for r in rows if r.wrong not in ("0", "N/A", "0e+00") and _nonzero(r.wrong)]
    if wrong:
        notes.append(f"{len(wrong)} row(s) with wrong results (#wrong column): timings kept")
    bad = [r for r in rows if r.error is not None and _float_or_zero(r.error) > MAX_NUMERIC_ERROR]
    if bad:
        notes.append(f"{len(bad)} row(s) with a numeric error above {MAX_NUMERIC_ERROR:g} (error column; "
                     "smaller values are float rounding): timings kept")
    if headerless and lay is not None and not lay.time_ends:
        notes.append("rows-only paste: no column header; the layout was inferred from the rows")
    if more_tests is not None:
        notes.append(f"the file holds several tests: read the first ({starting}); {more_tests} and any later ones "
                     "were not read (split the file to read them)")
    # Launcher options come before the binary (nccl-tests' own "-n" is the iteration count), "-g" after it.
    launch = " ".join(re.split(r"\S*_perf(?:_mpi)?\b", c, maxsplit=1)[0] for c in cmdlines)
    cmd = " ".join(cmdlines)
    if duplicate_rank0 and ranks is None:
        raise TraceError(src, "", "this log holds several independent 1-rank runs (every process printed its own "
                                  "'Rank 0' header: nccl-tests built without MPI=1?); no collective over several "
                                  "ranks was measured")
    n, how = _rank_count(ranks, rank_lines, nranks_info, threads, gpus, launch, cmd)
    if n < 2:
        raise TraceError(src, "", f"nccl-tests log covers {n} rank(s) ({how}); need at least 2 to fit a fabric "
                                  "(pass --ranks N if the log does not list its ranks)")
    complete = bool(rank_lines) and len(rank_lines) == n and max(rank_lines) == n - 1
    hosts = sorted({h for h, _, _ in rank_lines.values()}) if complete else sorted(info_hosts)
    if complete and nodes is None and len(hosts) > 1:
        per_host = {h: sum(1 for hh, _, _ in rank_lines.values() if hh == h) for h in hosts}
        if len(set(per_host.values())) > 1:
            shown = ", ".join(f"{h}: {c}" for h, c in list(per_host.items())[:4]) + (", ..." if len(hosts) > 4 else "")
            raise TraceError(src, "", f"the hosts ran unequal numbers of ranks ({shown}): simfuse simulates nodes "
                                      "of equal size, so no simulated layout is the one measured (pass --nodes M to "
                                      "read it anyway)")
    k = nodes or (len(hosts) if complete else None) or _nodes_from_cmd(launch, n)
    if k is None:
        if how == "nThread x nGpus":
            k = 1  # one process drives every GPU: one node
        elif info_hosts:
            k = len(info_hosts)
            notes.append(f"node count {k} taken from the hosts of NCCL INFO lines")
        else:
            raise TraceError(src, "", f"cannot tell how many nodes the {n} ranks ran on (no complete 'Rank' lines, "
                                      "no launcher options in the log): pass --nodes M")
    if k < 1 or n % k:
        raise TraceError(src, "", f"{n} ranks do not spread evenly over {k} node(s): check --ranks/--nodes")
    devices = sorted({d for _, d, _ in rank_lines.values() if d})
    coll = (collective_or_none(collective) if collective else None) or \
        (collective_or_none(starting) if starting else None) or _collective_hint(p.name) or \
        _collective_hint(cmd) or _infer_collective(src, rows, n, p.name)
    return NcclTestLog(src, coll, n, hosts if hosts else ["localhost"], devices, rows, nodes=k, notes=notes,
                       nccl_version=version.removeprefix("library ") if version else None, env=env)


def _better_version(current: str | None, m: re.Match) -> str | None:
    """An ``NCCL version`` line wins over the ``nccl-library=`` code (decoded: 22105 -> 2.21.5)."""
    if m.group(1):
        return current if current and not current.startswith("library ") else m.group(1)
    code = m.group(2)
    return current or f"library {int(code[0])}.{int(code[1:3])}.{int(code[3:])}"


def _clip(s: str, width: int = 160) -> str:
    s = " ".join(s.split())
    return s if len(s) <= width else s[:width - 3] + "..."


def _float_or_zero(tok: str) -> float:
    try:
        return abs(float(tok))
    except ValueError:
        return 0.0


def _nonzero(tok: str) -> bool:
    try:
        return float(tok) != 0.0
    except ValueError:
        return False


def _rank_count(ranks, rank_lines, nranks_info, threads, gpus, launch, cmd) -> tuple[int, str]:
    if ranks is not None:
        return int(ranks), "--ranks"
    if nranks_info:
        return max(nranks_info), "nranks in NCCL INFO lines"
    if rank_lines and len(rank_lines) == max(rank_lines) + 1 and (len(rank_lines) > 1 or not launch.strip()):
        return len(rank_lines), "Rank lines"
    per_proc = (threads or 1) * (gpus or 1)
    m = _CMD_NP.search(launch)
    if m:
        g = _CMD_G.search(cmd)
        return int(m.group(1)) * (int(g.group(1)) if g else per_proc), "launcher -np"
    m_nodes, m_per = _CMD_NODES.search(launch), _CMD_PERNODE.search(launch)
    if m_nodes and m_per:
        return int(m_nodes.group(1)) * int(m_per.group(1)) * per_proc, "launcher --nodes x --ntasks-per-node"
    if rank_lines:
        return max(len(rank_lines), max(rank_lines) + 1), "Rank lines"
    if threads is None:
        return 1, "the log has no 'Rank' lines, nThread/nGpus header, nranks or launcher options"
    return per_proc, "nThread x nGpus"


def _nodes_from_cmd(cmd: str, ranks: int) -> int | None:
    m = _CMD_NODES.search(cmd)
    if m:
        return int(m.group(1))
    m = _CMD_PERNODE.search(cmd)
    if m and int(m.group(1)) > 0:
        return max(1, ranks // int(m.group(1)))
    m = _CMD_HOSTS.search(cmd)
    if m:
        return len([h for h in m.group(1).split(",") if h])
    return None


#: words in a file name that tell an all-gather from an all-to-all when the table cannot (``msccl_alltoall_2x8.log``)
_NAME_WORDS = {"all_to_all": re.compile(r"all_?to_?all|a2a", re.I), "all_gather": re.compile(r"all_?gather", re.I)}


def _infer_collective(src: str, rows: list[NcclRow], n: int, name: str = "") -> str:
    big = [r for r in rows if r.algbw_gbyte_per_s is not None and r.busbw_gbyte_per_s is not None and r.algbw_gbyte_per_s >= 1.0]
    if not big:
        raise TraceError(src, "", "cannot tell the collective (name the file e.g. all_reduce_perf.log, or pass "
                                  "--collective)")
    ratio = sorted(r.busbw_gbyte_per_s / r.algbw_gbyte_per_s for r in big)[len(big) // 2]
    ar, a2a = 2.0 * (n - 1) / n, (n - 1) / n
    reduces = any(r.redop not in ("none", "-") for r in rows)
    if abs(ratio - ar) < 0.02 * ar and reduces:
        return "all_reduce"
    if abs(ratio - a2a) < 0.02 * a2a:
        if reduces:
            return "reduce_scatter"
        # all-gather and all-to-all print the same ratio, count column and "none" reduction: the file's name may
        # tell them apart, nothing else does
        named = [c for c, rx in _NAME_WORDS.items() if rx.search(name)]
        if len(named) == 1:
            return named[0]
        raise TraceError(src, "", f"busbw/algbw = (n-1)/n at {n} ranks with no reduction: an all_gather or an "
                                  "alltoall log, which its table cannot tell apart (name the file e.g. "
                                  "all_gather_perf.log or alltoall_perf.log, or pass --collective)")
    if abs(ratio - 1.0) < 0.02:
        raise TraceError(src, "", "busbw = algbw: a sendrecv, broadcast or reduce log (point-to-point or rooted "
                                  "results, which no collective model fits), or name the file e.g. "
                                  "alltoall_perf.log, or pass --collective")
    raise TraceError(src, "", f"cannot tell the collective from busbw/algbw = {ratio:.3f} at {n} ranks "
                              "(name the file e.g. alltoall_perf.log, or pass --collective)")
