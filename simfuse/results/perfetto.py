"""Chrome trace-event JSON (opens in Perfetto, ui.perfetto.dev, and chrome://tracing).

One file holds several runs (e.g. the baseline and the fused execution of one operator):

* per run label and per (representative) rank a *process* (``pid``) named ``"<label> / rank <r>"`` with
  threads ``compute`` (kernels), ``collectives`` (bulk collectives) and ``fused ops``; records on any other
  track get a thread named after the track;
* per run label one process ``"<label> / links"`` holding one counter track (``"C"`` events) per link: the
  link's load in GB/s (1e9 bytes/s) over time, taken from ``FlowNetwork.usage`` (the network must have been
  built with ``record_usage=True``; otherwise no counters).  Links that never carry load are skipped and only
  the ``max_links`` busiest (most bytes carried) are kept, to keep files small.

Timestamps are microseconds (the trace-event convention), rounded to 1 ps; the output is deterministic: the
same input gives a byte-identical file.  Under the symmetric (representative-rank) simulation the ranks shown
stand for every rank of their class and the link loads are those of class links (one rank's share).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from .io import atomic_write_text

_THREADS = {"kernel": (1, "compute"), "collective": (2, "collectives"), "fused": (3, "fused ops")}
_US = 1e6


def unpack_run(run) -> tuple:
    """``(label, sim, net)`` from a ``(label, sim, net)`` or ``(label, sim, fabric, net)`` tuple."""
    if len(run) == 4:
        label, sim, _fabric, net = run
    elif len(run) == 3:
        label, sim, net = run
    else:
        raise ValueError("each run must be (label, sim, net) or (label, sim, fabric, net)")
    return label, sim, net


def _ts(t_s: float) -> float:
    """Seconds -> microseconds, rounded to 1e-6 us (1 ps) so that the text is stable."""
    return round(float(t_s) * _US, 6)


def _clean(v):
    """JSON-safe, deterministic form of a record argument."""
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating, float)):
        f = float(v)
        return round(f, 12) if np.isfinite(f) else str(f)
    if isinstance(v, (str, int, bool)) or v is None:
        return v
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in sorted(v.items(), key=lambda kv: str(kv[0]))}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return str(v)


def link_counter_series(net, max_links: int = 64) -> list[tuple[str, list[tuple[float, float]]]]:
    """``[(link_name, [(t_s, load_GBps), ...]), ...]`` for the ``max_links`` links that carried most bytes.

    Each series is a step function: a point wherever the load changes, a 0 where the link goes idle.  Links
    are returned in the network's link order.
    """
    usage = getattr(net, "usage", None) or []
    n = len(net.names)
    if not usage or n == 0:
        return []
    t0 = np.array([u[0] for u in usage], dtype=float)
    t1 = np.array([u[1] for u in usage], dtype=float)
    loads = np.vstack([np.asarray(u[2], dtype=float) for u in usage])  # [segments, links] bytes/s
    carried = (loads * (t1 - t0)[:, None]).sum(axis=0)
    busy = np.flatnonzero((loads > 0).any(axis=0))
    if len(busy) == 0:
        return []
    # busiest first, ties broken by link index (stable sort): deterministic
    keep = busy[np.argsort(-carried[busy], kind="stable")][:max_links]
    out = []
    for li in sorted(keep.tolist()):
        pts: list[tuple[float, float]] = []
        last_val = None
        last_end = None
        for s in range(len(usage)):
            v = loads[s, li] / 1e9
            if last_end is not None and t0[s] > last_end and last_val != 0.0:
                pts.append((last_end, 0.0))  # gap between segments: idle
                last_val = 0.0
            if v != last_val:
                pts.append((t0[s], v))
                last_val = v
            last_end = t1[s]
        if last_val != 0.0 and last_end is not None:
            pts.append((last_end, 0.0))
        out.append((net.names[li], pts))
    return out


def trace_events(runs: Sequence[tuple], max_links: int = 64) -> list[dict]:
    """Trace events for ``runs``: ``(label, sim, net)`` tuples (``net`` may be ``None``; a 4-tuple
    ``(label, sim, fabric, net)`` as returned by ``run_op(..., return_sims=True)`` is accepted too)."""
    events: list[dict] = []
    pid = 0
    for run in runs:
        label, sim, net = unpack_run(run)
        records = list(sim.recorder.records) if sim is not None else []
        ranks = sorted({int(r.rank) for r in records})
        rank_pid = {}
        for r in ranks:
            pid += 1
            rank_pid[r] = pid
            events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                           "args": {"name": f"{label} / rank {r}"}})
            events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                           "args": {"sort_index": pid}})
        # threads: fixed ids for the known kinds, then other tracks in sorted order
        threads: dict[tuple[int, str], tuple[int, str]] = {}
        extra_tracks = sorted({(int(r.rank), r.track) for r in records if r.kind not in _THREADS})
        for rec in records:
            if rec.kind in _THREADS:
                threads.setdefault((int(rec.rank), rec.kind), _THREADS[rec.kind])
        next_tid: dict[int, int] = {}
        for rk, track in extra_tracks:
            tid = next_tid.get(rk, 10)
            next_tid[rk] = tid + 1
            threads[(rk, "track:" + track)] = (tid, track)
        for (rk, _key), (tid, tname) in sorted(threads.items(), key=lambda kv: (kv[0][0], kv[1][0])):
            events.append({"ph": "M", "name": "thread_name", "pid": rank_pid[rk], "tid": tid,
                           "args": {"name": tname}})
            events.append({"ph": "M", "name": "thread_sort_index", "pid": rank_pid[rk], "tid": tid,
                           "args": {"sort_index": tid}})
        for rec in records:
            key = rec.kind if rec.kind in _THREADS else "track:" + rec.track
            tid = threads[(int(rec.rank), key)][0]
            args = {"track": rec.track, "count": int(rec.count), "size_bytes": _clean(rec.size_bytes)}
            args.update(_clean(dict(rec.args)))
            events.append({"ph": "X", "name": rec.name, "cat": rec.kind, "pid": rank_pid[int(rec.rank)],
                           "tid": tid, "ts": _ts(rec.start_s), "dur": _ts(max(0.0, rec.end_s - rec.start_s)),
                           "args": args})
        if net is not None:
            series = link_counter_series(net, max_links)
            if series:
                pid += 1
                events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                               "args": {"name": f"{label} / links (GB/s)"}})
                events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                               "args": {"sort_index": pid}})
                for name, pts in series:
                    for t, v in pts:
                        events.append({"ph": "C", "name": name, "pid": pid, "tid": 0, "ts": _ts(t),
                                       "args": {"GB/s": round(float(v), 6)}})
    return events


def chrome_trace(runs: Sequence[tuple], max_links: int = 64) -> dict:
    """The trace as a dict: ``{"traceEvents": [...], "displayTimeUnit": "ns"}``."""
    return {"traceEvents": trace_events(runs, max_links), "displayTimeUnit": "ns",
            "otherData": {"generator": "simfuse", "time_unit_of_ts": "us", "counter_unit": "GB/s (1e9 B/s)"}}


def write_chrome_trace(path: Path | str, runs: Iterable[tuple], *, max_links: int = 64) -> Path:
    """Write the Chrome trace-event JSON of ``runs`` (``(label, sim, net)`` tuples) to ``path`` atomically
    (temporary file in the same folder, then ``os.replace``).  Returns the path."""
    path = Path(path)
    text = json.dumps(chrome_trace(list(runs), max_links), separators=(",", ":"), sort_keys=True,
                      allow_nan=False)
    return atomic_write_text(path, text + "\n")
