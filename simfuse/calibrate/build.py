"""``simfuse calibrate``: read measured inputs, fit the cost models, produce a calibration profile mapping."""

from __future__ import annotations

import datetime as _dt
import hashlib
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from ..costs.analytic import PER_CU_BW_HEADROOM
from ..costs.calibrated import occupancy_scales
from ..errors import TraceError
from ..profile.fit import COLLECTIVE_FACTORS, fit_alpha_beta, nnls_relative, profile_collective, quality
from ..profile.load import FORMAT_VERSION, profile_from_dict
from ..version import __version__
from ._io import not_a_file
from .detect import CAMPAIGN, HELDOUT_CSV, KERNEL_TRACE, NCCL_TESTS, TORCH_PROFILER, detect_format
from .kernel_trace import KernelRun, iter_kernel_runs
from .nccl_tests import NcclTestLog, read_nccl_tests
from .torch_trace import OpStat, read_torch_trace

#: Preferred collective for a fabric level's latency/bandwidth (the fused operators' point-to-point pattern).
FABRIC_PREFERENCE = ("alltoall", "all_reduce", "all_gather", "reduce_scatter")
#: Concurrency bins holding fewer than this fraction of a launch's programs are ignored by the fit (ramps).
MIN_BIN_FRACTION = 0.02
#: When the traces cannot tell terms apart (every program does the same work), credit the time to work rather
#: than to a constant overhead (so it scales with the work of other shapes), and to bytes rather than FLOP:
#: drop the overhead (column 0) first, then the FLOP term (column 2).
DROP_PREFERENCE = (0, 2)
#: End-marker gaps within this factor of the smallest are device-bound (see queued_launch_latency_s).
DEVICE_GAP_WINDOW = 2.0
#: Per-CU bandwidth headrooms tried for partial waves (see simfuse.costs.calibrated.occupancy_scales).
HEADROOM_CANDIDATES = (1.0, 1.25, 1.5, 1.75, 2.5, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0)


def _g(x: float | None) -> float | None:
    """Round to 6 significant digits for a readable profile (None and inf stay None)."""
    if x is None or not math.isfinite(x):
        return None
    return float(f"{float(x):.6g}")


@dataclass
class Inputs:
    """Everything read from the calibration inputs."""

    runs: list[KernelRun] = field(default_factory=list)
    nccl: list[NcclTestLog] = field(default_factory=list)
    torch_ops: list[OpStat] = field(default_factory=list)
    sources: list[dict] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    campaign: list[dict] = field(default_factory=list)  # rows of kernel timing campaigns (wave models)
    dense: list = field(default_factory=list)  # DenseSample of profiler traces (simfuse.calibrate.dense)
    dense_sources: list[str] = field(default_factory=list)
    dense_skipped: dict = field(default_factory=dict)
    #: what each input gave and lacked (PyTorch profiler traces), and logs no model fits (sendrecv): printed as notes
    notes: list[str] = field(default_factory=list)
    unfitted: list[NcclTestLog] = field(default_factory=list)  # logs of collectives no model fits (sendrecv)


def _sha256(path: Path) -> str:
    from ..io_limits import check_regular

    check_regular(path, error=TraceError)  # never hash a FIFO or /dev/zero
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def expand_inputs(paths: Sequence[str | Path]) -> list[tuple[Path, bool]]:
    """(file, named explicitly) for the files named and the files inside named directories (sorted,
    recursive, hidden files skipped)."""
    out: list[tuple[Path, bool]] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            files = sorted(q for q in p.rglob("*") if q.is_file()
                           and not any(part.startswith(".") for part in q.relative_to(p).parts))
            if not files:
                raise TraceError(str(p), "", "directory has no files")
            out.extend((q, False) for q in files)
        elif p.is_file():
            out.append((p, True))
        else:
            raise TraceError(str(p), "", not_a_file(str(p)))
    return out


#: ``simfuse calibrate --kind`` -> detected format
KINDS = {"kineto": TORCH_PROFILER, "torch-profiler": TORCH_PROFILER, "nccl-tests": NCCL_TESTS,
         "kernel-trace": KERNEL_TRACE, "campaign": CAMPAIGN}


def read_inputs(paths: Sequence[str | Path], collective: str | None = None, *, ranks: int | None = None,
                nodes: int | None = None, kind: str | None = None) -> Inputs:
    """Read every input, detecting its format by content.

    A file named explicitly must be a calibration input; files found inside a named directory whose format is
    not recognised (or that are held-out measurement tables) are skipped and listed in ``Inputs.skipped``.
    ``collective``, ``ranks`` and ``nodes`` apply to nccl-tests logs that do not tell (see
    :func:`~simfuse.calibrate.nccl_tests.read_nccl_tests`).
    """
    inp = Inputs()
    want = KINDS[kind] if kind and kind != "auto" else None
    for p, explicit in expand_inputs(paths):
        try:
            fmt = detect_format(p)
        except TraceError as exc:
            fmt = None
            if want != NCCL_TESTS:  # --kind nccl-tests: result rows pasted without their header are read below
                if explicit:
                    raise
                inp.skipped.append(f"{p}: {exc.message}")
                continue
        if want == NCCL_TESTS and fmt != NCCL_TESTS and fmt in (None, KERNEL_TRACE, HELDOUT_CSV, CAMPAIGN):
            fmt = NCCL_TESTS  # the user said so: read_nccl_tests(headerless=True) refuses what has no result rows
        if want is not None and fmt != want:
            if explicit:
                raise TraceError(str(p), "", f"--kind {kind}: this file is a {fmt} input, not a {want} one")
            inp.skipped.append(f"{p}: {fmt} input, not --kind {kind}")
            continue
        if fmt == HELDOUT_CSV:
            if explicit:
                raise TraceError(str(p), "line 1", "this is a kernel measurement table (held-out points): pass it "
                                                   "to `simfuse validate --measurements`, not to calibrate")
            inp.skipped.append(f"{p}: held-out measurement table (use with simfuse validate --measurements)")
            continue
        if fmt == KERNEL_TRACE:
            runs = list(iter_kernel_runs(p))
            inp.runs.extend(runs)
            items = len(runs)
        elif fmt == CAMPAIGN:
            from .campaign import read_campaign

            rows = read_campaign(p)
            inp.campaign.extend(rows)
            items = len(rows)
        elif fmt == NCCL_TESTS:
            log = read_nccl_tests(p, collective, ranks=ranks, nodes=nodes, headerless=want == NCCL_TESTS)
            if profile_collective(log.collective) not in COLLECTIVE_FACTORS:
                inp.notes.append(f"{p}: a {log.collective} log ({len(log.rows)} rows over {log.ranks} ranks): "
                                 "point-to-point or rooted results, which no collective model of the profile "
                                 "fits; not used")
                inp.unfitted.append(log)
            else:
                inp.nccl.append(log)
            items = len(log.rows)
        elif fmt == TORCH_PROFILER:
            items = _read_profiler_trace(inp, p, collective, ranks, nodes)
        else:  # pragma: no cover - detect_format returns only the formats above
            raise TraceError(str(p), "", f"unsupported format {fmt}")
        inp.sources.append({"path": str(p), "format": fmt, "sha256": _sha256(p), "items": int(items)})
    return inp


#: a trace's NCCL kernels are fitted as a collective log with at least this many distinct sizes (2 per parameter)
MIN_TRACE_SIZES = 4
#: ranks a trace may span without --nodes (one 8-GPU node); more: the node count must be given
MAX_RANKS_WITHOUT_NODES = 8


def _read_profiler_trace(inp: Inputs, p: Path, collective, ranks, nodes) -> int:
    """A PyTorch profiler trace feeds what it holds: operator / kernel statistics, GEMM and other dense calls with
    shapes (the dense section), NCCL kernels with message sizes (``record_param_comms``) as a collective log (the
    fabric section); a note says what the trace gave and what it lacked."""
    from .dense import read_dense_samples
    from .kineto_nccl import read_kineto_nccl

    stats = read_torch_trace(p)
    inp.torch_ops.extend(stats)
    skipped: dict[str, int] = {}
    dense = read_dense_samples(p, skipped)
    for k, v in skipped.items():
        inp.dense_skipped[k] = inp.dense_skipped.get(k, 0) + v
    inp.dense.extend(dense)
    inp.dense_sources.append(str(p))
    gave, lacked = [], []
    fams: dict[str, int] = {}
    for d in dense:
        fams[d.family] = fams.get(d.family, 0) + 1
    if dense:
        gave.append("dense calls with shapes: " + ", ".join(f"{n} {f}" for f, n in sorted(fams.items())))
    if skipped:
        lacked.append("dense calls without what the fit needs: " +
                      "; ".join(f"{n} x {why}" for why, n in sorted(skipped.items())))
    n_nccl = sum(s.count for s in stats if s.collective)
    if n_nccl:
        try:
            log = read_kineto_nccl(p, collective, ranks=ranks, nodes=nodes)
        except TraceError:
            lacked.append(f"{n_nccl} NCCL kernel(s) without message sizes (the record_param_comms args of PyTorch "
                          ">= 2.1 with a NCCL process group)")
        else:
            n_sizes = len({r.size_bytes for r in log.rows if r.size_bytes > 0})
            if n_sizes < MIN_TRACE_SIZES:
                lacked.append(f"enough message sizes: {n_sizes} distinct size(s) of {log.collective} over {log.ranks} "
                              f"ranks (a latency and bandwidth fit needs {MIN_TRACE_SIZES}); not fitted")
            elif nodes is None and log.ranks > MAX_RANKS_WITHOUT_NODES:
                lacked.append(f"the node count of its {log.ranks} ranks (pass --nodes): NCCL kernels not fitted")
            elif log.ranks >= 2 and profile_collective(log.collective) in COLLECTIVE_FACTORS:
                inp.nccl.append(log)
                gave.append(f"{len(log.rows)} size(s) of {log.collective} over {log.ranks} ranks from NCCL kernels "
                            "with record_param_comms args (collective fit)")
            else:
                lacked.append(f"NCCL kernels of {log.collective} over {log.ranks} rank(s): no collective fit")
    else:
        lacked.append("no NCCL kernels")
    if not any(s.cat == "kernel" for s in stats):
        lacked.append("no GPU kernels (a CPU-only trace)")
    inp.notes.append(f"{p}: gave {'; '.join(gave) or 'operator and kernel statistics only'}; lacked "
                     f"{'; '.join(lacked) or 'nothing the calibration uses'}")
    return sum(s.count for s in stats)


def _median(values: Sequence[float]) -> float:
    return float(np.median(np.asarray(values, dtype=float)))


def compute_units_seen(runs: Sequence[KernelRun]) -> int | None:
    """CUs (SMs) seen in the traces: max smid + 1 (``None`` if no trace recorded SMs)."""
    top = max((r.max_smid for r in runs), default=-1)
    return top + 1 if top >= 0 else None


def queued_launch_latency_s(end_gaps_s) -> float:
    """Launch latency of a kernel queued behind another, from ``kernel_end_ns - max(end_ns)`` of several launches.

    The end marker starts right after the kernel when it was enqueued while the kernel still ran (the device-side
    gap between back-to-back kernels, about 2 us on the H200); after a short kernel the host is still busy
    launching and the gap is host-bound (tens of us).  The estimate is the median of the gaps within
    :data:`DEVICE_GAP_WINDOW` times the smallest one (the device-bound cluster).  ``min(start_ns) - launch_ns`` is not
    used: the kernel is enqueued after the start marker ran, so that gap always includes the host's launch path
    (and JIT compilation on a shape's first call).
    """
    gaps = np.asarray(end_gaps_s, dtype=float)
    lowest = float(gaps.min())
    return float(np.median(gaps[gaps <= DEVICE_GAP_WINDOW * lowest])) if lowest > 0 else 0.0


def _spread(values) -> dict:
    v = np.asarray(values, dtype=float)
    return {"median_s": _g(float(np.median(v))), "p10_s": _g(float(np.percentile(v, 10))),
            "p90_s": _g(float(np.percentile(v, 90))), "points": int(v.size)}


def _program_rows(runs: Sequence[KernelRun], slots: int, compute_units: int | None, headroom: float):
    """Per-program durations: one row per (launch, concurrency) bin, every launch weighing the same."""
    rows, ys, ws = [], [], []
    for r in runs:
        total = sum(b[1] for b in r.bins)
        for conc, count, med_s, flops, nbytes in r.bins:
            if count < MIN_BIN_FRACTION * total or med_s <= 0:
                continue
            s_b, s_f = occupancy_scales(conc, slots, compute_units, headroom)
            rows.append((1.0, nbytes * s_b, flops * s_f))
            ys.append(med_s)
            ws.append(count / total)
    return np.asarray(rows, dtype=float).reshape(-1, 3), np.asarray(ys, dtype=float), np.asarray(ws, dtype=float)


def wave_sizes(grid: int, slots: int) -> list[int]:
    """Workgroups per wave when ``grid`` workgroups run on ``slots`` (the engine's compute model)."""
    full, rem = divmod(int(grid), int(slots))
    return [int(slots)] * full + ([rem] if rem else [])


def median_launches(runs: Sequence[KernelRun]) -> list[KernelRun]:
    """The median launch of every (kernel, variant, backend, world size, dtype, shape, grid, warps, rank).

    Traces hold several launches per shape (and, for emulated groups, the launches of every rank); per shape and
    rank the launch with the median makespan is kept (the lower middle one for an even count; ties by ``run_id``),
    so one slow (cold, disturbed) launch does not move the fit.  With one launch per shape and rank this is the
    identity."""
    groups: dict[tuple, list[KernelRun]] = {}
    for r in runs:
        groups.setdefault((r.group_key, r.rank), []).append(r)
    out = []
    for key in sorted(groups):
        rs = sorted(groups[key], key=lambda r: (r.makespan_s, r.run_id))
        out.append(rs[(len(rs) - 1) // 2])
    return out


def shape_groups(runs: Sequence[KernelRun]) -> dict[tuple, list[KernelRun]]:
    """Launches grouped by shape (``KernelRun.group_key``; the ranks of one shape together), in key order."""
    groups: dict[tuple, list[KernelRun]] = {}
    for r in runs:
        groups.setdefault(r.group_key, []).append(r)
    return {k: groups[k] for k in sorted(groups)}


def _makespan_rows(runs: Sequence[KernelRun], slots: int, compute_units: int | None, headroom: float):
    """Makespans, one row per shape (the mean over the ranks of the given launches, normally the per-rank median
    launches of :func:`median_launches`): the engine's wave model is linear in (overhead, 1/bw, 1/flops):
    ``makespan = sum over waves of overhead + bytes * s_b(n) / bw + flops * s_f(n) / flops_per_s``."""
    rows, ys = [], []
    for rs in shape_groups(runs).values():
        rs = [r for r in rs if r.makespan_s > 0]
        if not rs:
            continue
        grid = rs[0].grid
        waves = wave_sizes(grid, slots)
        scales = [occupancy_scales(n, slots, compute_units, headroom) for n in waves]
        nbytes = float(np.mean([r.bytes_per_program for r in rs]))
        flops = float(np.mean([r.flops_per_program for r in rs]))
        rows.append((float(len(waves)), nbytes * sum(sb for sb, _ in scales), flops * sum(sf for _, sf in scales)))
        ys.append(float(np.mean([r.makespan_s for r in rs])))
    return np.asarray(rows, dtype=float).reshape(-1, 3), np.asarray(ys, dtype=float), np.ones(len(ys))


def _fit_over_headroom(rows_fn, runs, slots, compute_units, what: str):
    best = None
    for headroom in (PER_CU_BW_HEADROOM, *HEADROOM_CANDIDATES):
        x, y, w = rows_fn(runs, slots, compute_units, headroom)
        if y.size == 0:
            raise TraceError(runs[0].source or "<trace>", f"run {runs[0].run_id}", f"no usable {what} (all zero?)")
        c = nnls_relative(x, y, w, drop_preference=DROP_PREFERENCE)
        cost = float(np.sum(w * ((x @ c - y) / y) ** 2))
        if best is None or cost < best[0] * (1 - 1e-6):
            best = (cost, headroom, c, quality(x @ c, y, w))
    _, headroom, c, q = best
    return {
        "overhead_s": _g(c[0]) or 0.0,
        "bw_bytes_per_s": _g(1.0 / c[1]) if c[1] > 0 else None,
        "flops_per_s": _g(1.0 / c[2]) if c[2] > 0 else None,
        "bw_headroom": float(headroom),
        "fit": q.to_dict(),
    }


def fit_kernel_group(runs: Sequence[KernelRun], compute_units: int | None) -> dict:
    """Fit one (kernel, variant, dtype): per-workgroup model, slots, launch latency (profile entry mapping).

    The model used by the simulator is fitted to the launches' **makespans** through the engine's wave model
    (so dispatch gaps, tails and imperfect slot refill are folded into the per-workgroup time); the per-program
    durations are fitted as well and kept as ``program_fit`` (a diagnostic: their difference is the cost of
    dispatch).  The per-CU bandwidth headroom of partial waves is chosen from :data:`HEADROOM_CANDIDATES` by
    least relative residual; it stays at the roofline's default when the data cannot tell.
    """
    launches = len(runs)
    runs = median_launches(runs)
    first = runs[0]
    slots = max(r.max_concurrency for r in runs)
    model = _fit_over_headroom(_makespan_rows, runs, slots, compute_units, "makespans")
    program = _fit_over_headroom(_program_rows, runs, slots, compute_units, "program durations")
    lat = np.asarray([r.end_gap_s for r in runs])
    host = np.asarray([r.launch_latency_s for r in runs])
    conc = np.asarray([r.max_concurrency for r in runs if r.grid >= slots] or [slots])
    return {
        "kernel": first.kernel, "variant": first.variant, "dtype": first.dtype,
        **model,
        "program_fit": program,
        "slots": int(slots),
        "slots_fit": {"max": int(slots), "median_at_full_grid": int(np.median(conc)), "points": int(conc.size)},
        "launch_latency_s": _g(queued_launch_latency_s(lat)),
        "launch_latency_fit": {"p10_s": _g(float(np.percentile(lat, 10))), "p90_s": _g(float(np.percentile(lat, 90))),
                               "points": int(lat.size)},
        "host_launch_overhead_s": _spread(host),
        "dispatch_gap_s": _spread([r.dispatch_gap_s for r in runs]),
        "runs": launches,
    }


def kernel_points(runs: Sequence[KernelRun]) -> list[dict]:
    """Calibration points, one per (kernel, variant, backend, world size, dtype, shape, grid, warps): the makespan
    of the median launch of each rank (:func:`median_launches`), averaged over the ranks traced (the held-out
    tables time the ranks' launches back to back and divide by the number of ranks: the same mean)."""
    launches: dict[tuple, int] = {}
    for r in runs:
        launches[r.group_key] = launches.get(r.group_key, 0) + 1
    points = []
    for key, rs in shape_groups(median_launches(runs)).items():
        kernel, variant, backend, world_size, dtype, shape, grid, num_warps = key
        points.append({
            "kind": "kernel", "kernel": kernel, "variant": variant, "backend": backend, "world_size": world_size,
            "dtype": dtype, "shape": shape, "grid": grid, "num_warps": num_warps,
            "flops": _g(_median([r.flops_per_program for r in rs]) * grid),
            "bytes": _g(_median([r.bytes_per_program for r in rs]) * grid),
            "quantity": "makespan",
            "measured_s": _g(float(np.mean([r.makespan_s for r in rs]))),
            "end_gap_s": _g(_median([r.end_gap_s for r in rs])),
            "host_launch_overhead_s": _g(_median([r.launch_latency_s for r in rs])),
            "dispatch_gap_s": _g(_median([r.dispatch_gap_s for r in rs])),
            "wg_duration_median_s": _g(_median([r.wg_duration_median_s for r in rs])),
            "wg_duration_p10_s": _g(_median([r.wg_duration_p10_s for r in rs])),
            "wg_duration_p90_s": _g(_median([r.wg_duration_p90_s for r in rs])),
            "max_concurrency": int(max(r.max_concurrency for r in rs)),
            "traced_ranks": sorted({int(r.rank) for r in rs}),
            "measured_by_rank_s": [_g(r.makespan_s) for r in sorted(rs, key=lambda r: r.rank)],
            "runs": launches[key],
        })
    return points


def fused_slowdown(points: Sequence[dict]) -> list[dict]:
    """Fused vs compute variant at the same (kernel, backend, world size, dtype, shape)."""
    by = {}
    for p in points:
        by.setdefault((p["kernel"], p["backend"], p["world_size"], p["dtype"], p["shape"]), {})[p["variant"]] = p
    out = []
    for key in sorted(by):
        v = by[key]
        if "fused" in v and "compute" in v:
            f, c = v["fused"], v["compute"]
            if c["wg_duration_median_s"] and c["measured_s"]:
                out.append({"kernel": key[0], "backend": key[1], "world_size": key[2], "dtype": key[3],
                            "shape": key[4],
                            "wg_time_ratio": _g(f["wg_duration_median_s"] / c["wg_duration_median_s"]),
                            "makespan_ratio": _g(f["measured_s"] / c["measured_s"])})
    return out


def fabric_section(logs: Sequence[NcclTestLog]) -> tuple[dict, list[dict]]:
    """Alpha-beta fits per level and collective (several logs of one level/collective/ranks are pooled)."""
    groups: dict[tuple[str, str, int], list[NcclTestLog]] = {}
    for log in logs:
        key = profile_collective(log.collective)
        if key not in COLLECTIVE_FACTORS:
            continue
        groups.setdefault((log.level, key, log.ranks), []).append(log)
    fabric: dict[str, dict] = {}
    points: list[dict] = []
    for level, coll, ranks in sorted(groups):
        ls = groups[(level, coll, ranks)]
        size = np.asarray([r.size_bytes for lg in ls for r in lg.rows], dtype=float)
        t = np.asarray([r.time_s for lg in ls for r in lg.rows], dtype=float)
        f = fit_alpha_beta(coll, ranks, size, t)
        lv = fabric.setdefault(level, {"ranks": ranks, "hosts": max(int(lg.nodes or 1) for lg in ls),
                                       "collectives": {}})
        if coll in lv["collectives"] and lv["collectives"][coll]["ranks"] >= ranks:
            continue  # keep the largest rank count per collective and level
        lv["collectives"][coll] = {
            "alpha_s": _g(f.alpha_s), "beta_bytes_per_s": _g(f.beta_bytes_per_s), "ranks": ranks,
            "fit": f.quality.to_dict(), "sources": sorted({lg.source for lg in ls}),
        }
        lv["ranks"] = max(lv["ranks"], ranks)
        for s, tt in zip(size, t, strict=True):
            points.append({"kind": "collective", "level": level, "collective": coll, "ranks": ranks,
                           "size_bytes": float(s), "measured_s": _g(float(tt))})
    for lv in fabric.values():
        lv["use"] = next(c for c in FABRIC_PREFERENCE if c in lv["collectives"])
        lv["collectives"] = {k: lv["collectives"][k] for k in sorted(lv["collectives"])}
    return fabric, points


def _created_utc() -> str:
    """Now, or ``SOURCE_DATE_EPOCH`` when set (byte-identical profiles from identical inputs)."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    when = (_dt.datetime.fromtimestamp(int(epoch), _dt.timezone.utc) if epoch and epoch.isdigit()
            else _dt.datetime.now(_dt.timezone.utc))
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def build_profile(inp: Inputs, compute_units: int | None = None) -> dict:
    """The profile mapping (format version :data:`FORMAT_VERSION`, see docs/calibration.md)."""
    if not inp.runs and not inp.nccl and not inp.torch_ops and not inp.campaign:
        if inp.unfitted:
            lg = inp.unfitted[0]
            raise TraceError(lg.source, "", f"no usable measurements: this is a {lg.collective} log "
                                            f"({len(lg.rows)} rows over {lg.ranks} ranks), point-to-point or rooted "
                                            "results that no collective model of the profile fits (calibrate "
                                            "fits all_reduce, all_gather, reduce_scatter and all_to_all logs)")
        raise TraceError("<inputs>", "", "no usable measurements in the inputs")
    cus = compute_units or compute_units_seen(inp.runs)
    profile: dict = {
        "simfuse_calibration": FORMAT_VERSION,
        "generator": f"simfuse {__version__} calibrate",
        "created_utc": _created_utc(),
        "sources": inp.sources,
    }
    device: dict = {}
    if cus:
        device["compute_units"] = int(cus)
    kernels = []
    points: list[dict] = []
    if inp.runs:
        groups: dict[tuple[str, str, str], list[KernelRun]] = {}
        for r in inp.runs:
            groups.setdefault((r.kernel, r.variant, r.dtype), []).append(r)
        kernels = [fit_kernel_group(groups[k], cus) for k in sorted(groups)]
        selected = median_launches(inp.runs)
        compute = [r for r in selected if r.variant == "compute"] or selected
        lat = np.asarray([r.end_gap_s for r in compute])
        device["kernel_launch_latency_s"] = {"value": _g(queued_launch_latency_s(lat)),
                                             "p10_s": _g(float(np.percentile(lat, 10))),
                                             "p90_s": _g(float(np.percentile(lat, 90))), "points": int(lat.size)}
        device["host_launch_overhead_s"] = _spread([r.launch_latency_s for r in compute])
        points = kernel_points(inp.runs)
    profile["device"] = device
    profile["kernels"] = kernels
    profile["fused_slowdown"] = fused_slowdown(points)
    fabric, fabric_points = fabric_section(inp.nccl)
    profile["fabric"] = fabric
    if inp.torch_ops:
        profile["torch_ops"] = [s.to_dict() for s in inp.torch_ops]
    if inp.dense or inp.dense_skipped:
        from .dense import dense_section

        profile["dense"] = dense_section(inp.dense, inp.dense_sources, inp.dense_skipped)
    profile["points"] = points + fabric_points
    if inp.campaign:
        from .wavefit import fit_campaign

        fits = fit_campaign(inp.campaign)
        kept = [w for w in fits if w.cv.get("median_abs", 0.0) <= WAVE_MAX_CV_MEDIAN]
        profile["wave_kernels"] = [w.to_dict() for w in kept]
        dropped = [f"{w.kernel}/{w.variant}/{w.dtype} (leave-region-out median {w.cv['median_abs']:.0%})"
                   for w in fits if w not in kept]
        if dropped:
            profile["notes"] = ("wave models not written (leave-region-out median error over "
                                f"{WAVE_MAX_CV_MEDIAN:.0%}; these families keep the classic fit or the roofline): "
                                + ", ".join(dropped))
    return profile


#: A wave model whose nested leave-region-out median error exceeds this is not written into the profile: it does not
#: extrapolate, so pricing other shapes with it would be worse than the roofline (on the H200 campaign every family
#: passes since the inner loop falls back to leave-one-shape-out; before, the fp32 GEMM had 79%).
WAVE_MAX_CV_MEDIAN = 0.5


def write_yaml_atomic(path: str | Path, data: dict) -> None:
    """Write YAML through a temporary file in the same directory, then rename (no half-written output)."""
    from ..results.io import atomic_write

    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write("# simfuse calibration profile (format: docs/calibration.md)\n")
            yaml.safe_dump(data, fh, sort_keys=False, default_flow_style=None, width=120)

    atomic_write(path, write)


def calibrate(inputs: Sequence[str | Path], out: str | Path, compute_units: int | None = None,
              collective: str | None = None, skipped: list[str] | None = None, *, ranks: int | None = None,
              nodes: int | None = None, topology=None, force: bool = False,
              warnings: list[str] | None = None, kind: str | None = None) -> dict:
    """Read ``inputs``, fit, validate the result and write the profile to ``out``; returns the mapping.

    The fabric fit is checked by :func:`simfuse.calibrate.plausibility.check_fabric` (line rates against
    ``topology``, a :class:`~simfuse.spec.TopologySpec` or a topology file, when given): an implausible fit raises
    :class:`~simfuse.calibrate.plausibility.ImplausibleFit` and nothing is written, unless ``force`` (then the
    reasons are recorded in the profile's ``notes`` and appended to ``warnings``).  Notes of the nccl-tests reader
    (a crashed run's rows kept, a cut-off last row) are appended to ``warnings`` too.  Files skipped inside input
    directories are appended to ``skipped`` when given."""
    from .plausibility import check_fabric, refuse_or_warn

    if isinstance(topology, (str, Path)):
        from ..spec import load_topology

        topology = load_topology(topology)
    inp = read_inputs(inputs, collective, ranks=ranks, nodes=nodes, kind=kind)
    if skipped is not None:
        skipped.extend(inp.skipped)
    profile = build_profile(inp, compute_units)
    forced = refuse_or_warn(check_fabric(profile, inp.nccl, topology), force, source=str(out))
    notes = [f"{lg.source}: {n}" for lg in inp.nccl for n in lg.notes] + inp.notes
    if forced:
        profile["notes"] = [w.removeprefix("warning: ") for w in forced]
    if warnings is not None:
        warnings.extend(forced + [f"note: {n}" for n in notes])
    profile_from_dict(profile, source=str(out))  # the writer and the loader agree on the format
    write_yaml_atomic(out, profile)
    return profile


__all__ = ["Inputs", "build_profile", "calibrate", "median_launches", "profile_collective", "read_inputs",
           "write_yaml_atomic"]
