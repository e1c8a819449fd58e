"""The corpus of public multi-node collective measurements (``data/network_corpus/``, docs/network_corpus.md).

Three CSV files in one folder:

* ``runs.csv``: one row per measured run (a collective on one machine at one node count with one setting):
  ``run_id, source_id, collective, gpu, gpus_per_node, nodes, ranks, nics_per_node, nic_gbps, fabric,
  nccl_version, nccl_algo, nccl_proto, collnet_sharp, nvls, env, quality, unknowns``; empty = not stated by the
  source (``unknowns`` says what is missing);
* ``points.csv``: the numbers, one row per message size: ``run_id, size_bytes, time_us, algbw_gbyte_per_s,
  busbw_gbyte_per_s, time_inplace_us, algbw_inplace_gbyte_per_s, busbw_inplace_gbyte_per_s, time_source``
  (``measured``: the out-of-place time as the source printed it; ``derived_from_busbw``: the source published only
  the bus bandwidth, the time is ``size x busbw factor / busbw``);
* ``sources.csv``: ``source_id, kind, citation, hardware, where`` -- where exactly each number was read.

:func:`load_corpus` reads and checks them (one-line :class:`~simfuse.errors.SpecError` naming the file, line and
column); :meth:`CorpusRun.as_log` hands a run to the fabric fit as an nccl-tests log;
:func:`topology_for_run` builds the topology a run was measured on from a base topology file and the run's
hardware (GPUs and NICs per node, NIC line rate, the GPU's NVLink rate, SHARP).
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..collectives.protocols import nccl_generation
from ..errors import SpecError
from ..names import collective_or_none
from .nccl_tests import NcclRow, NcclTestLog, channel_minimums, settings_in

RUN_COLUMNS = ("run_id", "source_id", "collective", "gpu", "gpus_per_node", "nodes", "ranks", "nics_per_node",
               "nic_gbps", "fabric", "nccl_version", "nccl_algo", "nccl_proto", "collnet_sharp", "nvls", "env",
               "quality", "unknowns")
POINT_COLUMNS = ("run_id", "size_bytes", "time_us", "algbw_gbyte_per_s", "busbw_gbyte_per_s", "time_inplace_us",
                 "algbw_inplace_gbyte_per_s", "busbw_inplace_gbyte_per_s", "time_source")
SOURCE_COLUMNS = ("source_id", "kind", "citation", "hardware", "where")
TIME_SOURCES = ("measured", "derived_from_busbw")
QUALITIES = ("ok", "anomalous")
#: A measured point's time and its printed algbw (size / time) may differ by this much (rounding of the printout).
ALGBW_TOLERANCE = 0.05
#: NCCL_ALGO names a run may carry -> simfuse algorithm (None: NCCL's default choice, or not one algorithm)
RUN_ALGOS = {"ring": "ring", "tree": "tree", "nvls": "nvls", "nvlstree": "nvls_tree", "collnetdirect": "collnet",
             "collnetchain": "collnet", "collnet": "collnet"}
#: NVLink rate per GPU and direction (GB/s) by GPU name prefix, from the data sheets: H100/H200/H20 SXM NVLink 4,
#: 18 links x 25 GB/s = 450; H800 NVLink 400 GB/s bidirectional = 200; A100 SXM NVLink 3, 12 x 25 = 300;
#: A800 400 GB/s bidirectional = 200; V100 SXM2 NVLink 2, 6 x 25 = 150; B200 NVLink 5, 18 x 50 = 900.
#: Checked longest prefix first.  AMD GPUs have no entry: their runs are not simulated (the topology files
#: model NVSwitch nodes).
NVLINK_GBYTE_PER_S = {"H100": 450.0, "H200": 450.0, "H20": 450.0, "H800": 200.0, "A100": 300.0, "A800": 200.0,
                      "V100": 150.0, "B200": 900.0}


@dataclass
class CorpusRun:
    """One run of the corpus: its setting (``runs.csv``) and its points (``points.csv``)."""

    run_id: str
    source_id: str
    collective: str
    gpu: str
    gpus_per_node: int
    nodes: int
    ranks: int
    nics_per_node: int | None
    nic_gbps: float | None
    fabric: str
    nccl_version: str
    nccl_algo: str
    nccl_proto: str
    collnet_sharp: str
    nvls: str
    env: str
    quality: str
    unknowns: str
    rows: list[NcclRow] = field(default_factory=list)
    time_sources: list[str] = field(default_factory=list)
    source: str = ""

    @property
    def algorithm(self) -> str | None:
        """The simfuse algorithm the run forced (``NCCL_ALGO``), None for NCCL's own choice."""
        return RUN_ALGOS.get(self.nccl_algo.strip().lower().split(" ")[0]) if self.nccl_algo else None

    @property
    def protocol(self) -> str | None:
        p = self.nccl_proto.strip()
        return p if p in ("LL", "LL128", "Simple") else None

    def as_log(self) -> NcclTestLog:
        """The run as an nccl-tests log (``NCCL_ALGO`` / ``NCCL_PROTO`` in ``env`` when the run forced them)."""
        env = {}
        if self.algorithm is not None:
            env["NCCL_ALGO"] = self.nccl_algo.split(" ")[0]
        if self.protocol is not None:
            env["NCCL_PROTO"] = self.protocol
        notes = [f"corpus run {self.run_id} (source {self.source_id})"]
        if "derived_from_busbw" in self.time_sources:
            notes.append("some times derived from the published bus bandwidth")
        return NcclTestLog(f"{self.source}#{self.run_id}", self.collective, self.ranks,
                           [f"node{i}" for i in range(self.nodes)], [self.gpu], list(self.rows), nodes=self.nodes,
                           notes=notes, nccl_version=self.nccl_version or None, env=env)


@dataclass
class Corpus:
    runs: list[CorpusRun]
    sources: dict[str, dict[str, str]]
    folder: str

    def run(self, run_id: str) -> CorpusRun:
        for r in self.runs:
            if r.run_id == run_id:
                return r
        raise SpecError(self.folder, "--run", f"no run {run_id!r} in the corpus; runs: "
                                              f"{', '.join(r.run_id for r in self.runs[:8])}, ...")


def corpus_folder(path: str | Path) -> Path | None:
    """The corpus folder ``path`` names (the folder itself or one of its three CSV files), else None."""
    p = Path(path)
    if p.is_dir() and (p / "runs.csv").is_file():
        return p
    if p.is_file() and p.name in ("runs.csv", "points.csv", "sources.csv") and (p.parent / "runs.csv").is_file():
        return p.parent
    return None


def _rows(path: Path, columns: tuple[str, ...]) -> list[tuple[int, dict[str, str]]]:
    src = str(path)
    if not path.is_file():
        raise SpecError(src, "", "file not found (a corpus folder holds runs.csv, points.csv and sources.csv)")
    try:
        with open(path, encoding="utf-8-sig", newline="") as fh:  # a spreadsheet's byte-order mark is fine
            reader = csv.DictReader(fh)
            header = reader.fieldnames or []
            missing = [c for c in columns if c not in header]
            if missing:
                raise SpecError(src, "line 1", f"missing column(s) {', '.join(missing)}")
            out = []
            for row in reader:
                if None in row or any(row.get(c) is None for c in header):
                    raise SpecError(src, f"line {reader.line_num}", f"expected {len(header)} fields")
                out.append((reader.line_num, row))
    except UnicodeDecodeError:
        raise SpecError(src, "", "not UTF-8 text") from None
    except csv.Error as exc:
        raise SpecError(src, "", f"malformed CSV ({exc})") from None
    return out


def _num(src: str, line: int, row: dict, key: str, *, integer: bool = False, optional: bool = False,
         positive: bool = True, max_value: float = math.inf) -> float | None:
    text = (row.get(key) or "").strip()
    if not text:
        if optional:
            return None
        raise SpecError(src, f"line {line} column {key}", "is empty")
    try:
        v = float(text)
    except ValueError:
        raise SpecError(src, f"line {line} column {key}", f"{text[:40]!r} is not a number") from None
    if not math.isfinite(v) or v < 0 or (positive and v <= 0) or (integer and not v.is_integer()) or v > max_value:
        top = f" (at most {max_value:g})" if math.isfinite(max_value) else ""
        raise SpecError(src, f"line {line} column {key}", f"{text[:40]!r} out of range{top}")
    return int(v) if integer else v


#: the collectives a corpus run may hold: those simfuse simulates
CORPUS_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
#: sanity bounds of a run's hardware columns: GPUs per node (the topology files' limit), nodes, NICs per node, and
#: a NIC's line rate (Gb/s; today's fastest ports are 800 Gb/s, 1.6 Tb/s announced: 3,200 leaves room)
MAX_GPUS_PER_NODE = 1024
MAX_NODES = 1_000_000
MAX_NICS_PER_NODE = 128
MAX_NIC_GBPS = 3200.0
def load_corpus(path: str | Path) -> Corpus:
    """Read and check a corpus folder (or one of its CSV files); see the module doc."""
    folder = corpus_folder(path)
    if folder is None:
        raise SpecError(str(path), "", "not a network corpus (a folder with runs.csv, points.csv, sources.csv)")
    runs_path, points_path, sources_path = folder / "runs.csv", folder / "points.csv", folder / "sources.csv"
    sources = {}
    for line, row in _rows(sources_path, SOURCE_COLUMNS):
        sid = row["source_id"].strip()
        if not sid or not row["citation"].strip():
            raise SpecError(str(sources_path), f"line {line}", "source_id and citation must not be empty")
        sources[sid] = row
    runs: dict[str, CorpusRun] = {}
    src = str(runs_path)
    for line, row in _rows(runs_path, RUN_COLUMNS):
        rid = row["run_id"].strip()
        where = f"line {line}"
        if not rid or rid in runs:
            raise SpecError(src, f"{where} column run_id", f"{rid!r} is empty or repeated")
        if row["source_id"].strip() not in sources:
            raise SpecError(src, f"{where} column source_id", f"{row['source_id']!r} is not in sources.csv")
        coll = collective_or_none(row["collective"].strip())
        if coll not in CORPUS_COLLECTIVES:
            raise SpecError(src, f"{where} column collective", f"{row['collective']!r}: expected one of "
                            f"{', '.join(CORPUS_COLLECTIVES)} (the collectives simfuse simulates)")
        if row["quality"].strip() not in QUALITIES:
            raise SpecError(src, f"{where} column quality", f"expected one of {', '.join(QUALITIES)}")
        g = _num(src, line, row, "gpus_per_node", integer=True, max_value=MAX_GPUS_PER_NODE)
        nodes = _num(src, line, row, "nodes", integer=True, max_value=MAX_NODES)
        ranks = _num(src, line, row, "ranks", integer=True)
        if g * nodes != ranks:
            raise SpecError(src, f"{where} column ranks", f"{ranks} ranks != {nodes} nodes x {g} GPUs")
        # the channel minimums simfuse prices (collectives.min_ctas / min_nchannels): checked here, read later
        channel_minimums(settings_in(row["env"]), src, lambda _name, where=where: f"{where} column env")
        runs[rid] = CorpusRun(
            rid, row["source_id"].strip(), coll, row["gpu"].strip(), g, nodes, ranks,
            _num(src, line, row, "nics_per_node", integer=True, optional=True, max_value=MAX_NICS_PER_NODE),
            _num(src, line, row, "nic_gbps", optional=True, max_value=MAX_NIC_GBPS),
            *(row[c].strip() for c in RUN_COLUMNS[9:]),
            source=str(folder))
    src = str(points_path)
    seen: set[tuple[str, int]] = set()
    for line, row in _rows(points_path, POINT_COLUMNS):
        run = runs.get(row["run_id"].strip())
        if run is None:
            raise SpecError(src, f"line {line} column run_id", f"{row['run_id']!r} is not in runs.csv")
        ts = row["time_source"].strip()
        if ts not in TIME_SOURCES:
            raise SpecError(src, f"line {line} column time_source", f"expected one of {', '.join(TIME_SOURCES)}")
        size = _num(src, line, row, "size_bytes", integer=True)
        t_us = _num(src, line, row, "time_us")
        t_in = _num(src, line, row, "time_inplace_us", optional=True)
        algbw = _num(src, line, row, "algbw_gbyte_per_s", optional=True, positive=False)
        if (run.run_id, size) in seen:
            raise SpecError(src, f"line {line} column size_bytes", f"{size} is repeated for run {run.run_id}")
        if ts == "measured" and algbw is not None and algbw >= 1.0 and \
                abs(size / (t_us * 1e3) - algbw) > ALGBW_TOLERANCE * algbw + 0.01:
            raise SpecError(src, f"line {line} column time_us", f"{t_us:g} us for {size} B is "
                            f"{size / (t_us * 1e3):.4g} GB/s, but algbw_gbyte_per_s says {algbw:g} (a typo?)")
        seen.add((run.run_id, size))
        run.rows.append(NcclRow(int(size), 0, "-", "none", t_us * 1e-6, algbw,
                                _num(src, line, row, "busbw_gbyte_per_s", optional=True, positive=False),
                                None if t_in is None else t_in * 1e-6, line))
        run.time_sources.append(ts)
    for run in runs.values():
        if not run.rows:
            raise SpecError(str(runs_path), f"run {run.run_id}", "has no points in points.csv")
        run.rows.sort(key=lambda r: r.size_bytes)
    return Corpus(list(runs.values()), sources, str(folder))


def nvlink_gbyte_per_s(gpu: str) -> float | None:
    """The GPU's NVLink rate per direction (GB/s) from :data:`NVLINK_GBYTE_PER_S`, None if unknown."""
    name = gpu.upper()
    for key in sorted(NVLINK_GBYTE_PER_S, key=len, reverse=True):
        if key in name:
            return NVLINK_GBYTE_PER_S[key]
    return None


#: GPU generations whose NVSwitch reduces in the switch (NVLS: third-generation NVSwitch, HGX H100 and later)
NVLS_GENERATIONS = ("hopper", "blackwell")


#: settings that raise NCCL's QPs per connection or its channel (CTA) count above its defaults
_CONNECTION_TUNING = re.compile(r"NCCL_IB_QPS_PER_CONNECTION=(?!1\b)\d+|NCCL_MIN_CTAS=|NCCL_MIN_NCHANNELS=|"
                                r"NCCL_NCHANNELS_PER_NET_PEER=")
#: fabrics that spread one connection's packets over many paths (AWS EFA's SRD), route adaptively (HPE
#: Slingshot), move data over TCP (GCP GPUDirect-TCPXO) or run Google's own network and tuner plugins over RoCE
#: (GCP's NCCL/gIB on A3 Ultra / A4: "improved load balancing on Google's networks" and "a custom tuner plugin",
#: https://cloud.google.com/ai-hypercomputer/docs/nccl/overview): unlike InfiniBand / RoCE RDMA with NCCL's own
#: transport, whose one QP per connection follows one path
_MULTIPATH_FABRICS = ("EFA", "SLINGSHOT", "TCPXO", "GIB")


def channel_overrides(run: CorpusRun) -> dict[str, int]:
    """The topology fields the run's channel minimums set (``collectives.min_ctas`` / ``min_nchannels``, from
    ``NCCL_MIN_CTAS`` / ``NCCL_MIN_NCHANNELS`` / ``NCCL_MIN_NRINGS`` in its ``env``; :func:`topology_for_run`)."""
    return channel_minimums(settings_in(run.env), run.source, lambda _name: f"run {run.run_id} env")


def min_ctas(run: CorpusRun) -> int:
    """The run's ``NCCL_MIN_CTAS``, 0 where it did not set it."""
    return channel_overrides(run).get("collectives.min_ctas", 0)


def min_nchannels(run: CorpusRun) -> int:
    """The run's ``NCCL_MIN_NCHANNELS`` (or the older ``NCCL_MIN_NRINGS``), 0 where it did not set it."""
    return channel_overrides(run).get("collectives.min_nchannels", 0)


def default_connections(run: CorpusRun) -> bool:
    """Whether a run used NCCL's default connections on an InfiniBand / RoCE fabric (or one not stated, taken as
    the base topology's InfiniBand): one QP per connection and NCCL's own channel count -- no
    ``NCCL_IB_QPS_PER_CONNECTION`` above 1, no ``NCCL_MIN_CTAS`` / ``NCCL_MIN_NCHANNELS`` / ... in its settings
    (``env``), and a fabric other than EFA, Slingshot, TCPXO or GCP's gIB plugin.  Decided from the run's settings and hardware
    only; where ``scale_out.full_node_efficiency`` applies (:func:`topology_for_run`)."""
    words = set(re.findall(r"[A-Z0-9]+", (run.fabric or "").upper()))
    return not _CONNECTION_TUNING.search(run.env or "") and not words.intersection(_MULTIPATH_FABRICS)


def topology_for_run(run: CorpusRun, base):
    """``(topology, assumptions)``: ``base`` (a :class:`~simfuse.spec.TopologySpec`) with the run's hardware:
    NVLink rate of its GPU, GPUs per node (at least the run's), NICs per node and their line rate where the source
    states them (else the base file's, said in ``assumptions``), SHARP when the run used CollNet, no NVLS
    for GPUs before Hopper or runs that turned it off.  Raises
    :class:`SpecError` for a GPU whose NVLink rate is not known (AMD: not simulated)."""
    nv = nvlink_gbyte_per_s(run.gpu)
    if nv is None:
        raise SpecError(run.source, f"run {run.run_id}", f"GPU {run.gpu!r}: no NVLink rate known, not simulated "
                                                         "(the topology files model NVSwitch nodes)")
    assumptions = []
    over: dict = {"device.name": run.gpu,  # NCCL's per-generation constants follow the GPU (collectives.protocols)
                  "scale_up.bw_bytes_per_s": nv * 1e9,
                  "scale_up.gpus_per_node": max(run.gpus_per_node, base.scale_up.gpus_per_node)
                  if run.gpus_per_node > 1 else base.scale_up.gpus_per_node}
    rate = run.nic_gbps / 8 * 1e9 if run.nic_gbps is not None else None
    nics = run.nics_per_node
    g = run.gpus_per_node
    if nics is not None and g > 1 and nics > g and nics % g == 0 and rate is not None:
        # several NICs per GPU, rail-aligned (AWS p5: 32 x 100 Gb/s EFA for 8 GPUs): the simulator gives each GPU
        # one NIC, so each GPU's NICs become one of their summed rate
        assumptions.append(f"{nics} NICs of {run.nic_gbps:g} Gb/s for {g} GPUs simulated as {g} NICs of "
                           f"{run.nic_gbps * nics / g:g} Gb/s")
        rate *= nics // g
        nics = g
    if nics is not None:
        over["scale_out.nics_per_node"] = int(nics)
    else:
        assumptions.append(f"NICs per node not stated: {base.scale_out.nics_per_node} (the base topology's)")
    if rate is not None:
        over["scale_out.nic_bw_bytes_per_s"] = rate
    else:
        assumptions.append(f"NIC rate not stated: {base.scale_out.nic_bw_bytes_per_s * 8 / 1e9:g} Gb/s "
                           "(the base topology's)")
    if run.collnet_sharp.lower().startswith("yes"):
        over["scale_out.sharp"] = True
    if base.scale_up.nvls and (nccl_generation(run.gpu) not in NVLS_GENERATIONS
                               or run.nvls.strip().lower().startswith(("no", "disabled"))):
        # NVLink SHARP needs a third-generation NVSwitch (Hopper and later); a run that turned it off ran without
        over["scale_up.nvls"] = False
    # NCCL_MIN_CTAS / NCCL_MIN_NCHANNELS raise the channels NCCL runs on (collectives.min_ctas, min_nchannels)
    over.update(channel_overrides(run))
    if base.scale_out.full_node_efficiency is not None and not default_connections(run):
        # the full-node efficiency is that of NCCL's default connections on an InfiniBand / RoCE fabric
        over["scale_out.full_node_efficiency"] = None
        assumptions.append("more QPs or channels than NCCL's defaults, or a multipath fabric: "
                           "scale_out.full_node_efficiency not applied")
    return base.with_overrides(over), assumptions


def simulation_problem(run: CorpusRun, base) -> str | None:
    """Why a run is not simulated on ``base`` (None: it is): the source reports a broken setup, one node (no
    network), a GPU without a known NVLink rate, or a forced algorithm simfuse does not model for the collective."""
    from ..collectives import REGISTRY

    if run.quality != "ok":
        return f"quality {run.quality} (the source reports a broken setup)"
    if run.nodes < 2:
        return "single node"
    if "NVL72" in run.gpu.upper():
        return "a multi-node NVLink domain (NVL72): GPUs of several trays share NVLink, which the topology files " \
               "do not model across nodes"
    if run.algorithm is not None and run.algorithm not in REGISTRY.get(run.collective, {}):
        return (f"forced algorithm {run.nccl_algo} is not modelled for {run.collective} (simfuse: "
                f"{', '.join(REGISTRY.get(run.collective, {}))})")
    try:
        topology_for_run(run, base)
    except SpecError as exc:
        return exc.message
    return None
