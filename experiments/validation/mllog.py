"""A small reader for MLPerf ``:::MLLOG`` result logs and the step-time derivation used by dlrm_validation.py.

A log line is ``[prefix]:::MLLOG {json}`` with the keys ``time_ms``, ``event_type`` and ``key`` (``value`` and
``metadata`` optional).  A file may hold one or more runs, each introduced by a ``# source: ...`` comment line
(the synthetic test fixture does); other ``#`` lines and blank lines are comments.  The result logs themselves are
not redistributed: dlrm_validation.py reads them from a mirrored repository and keeps only the derived numbers.

Step time of one run (keys used: ``global_batch_size``, ``train_samples``, ``eval_stop``, ``eval_start`` and
``metadata.epoch_num`` on the eval events):

    for consecutive evaluations k, k+1:
        steps_k  = (epoch_num(eval_start[k+1]) - epoch_num(eval_stop[k])) * train_samples / global_batch_size
        step_k   = (time_ms(eval_start[k+1]) - time_ms(eval_stop[k])) / 1000 / steps_k
    step time of the run = median over k

The window from ``eval_stop[k]`` to ``eval_start[k+1]`` holds training only (no evaluation, no initialisation); the
first window (``run_start`` to the first ``eval_start``) is left out because it holds warm-up (first CUDA-graph
replays, data-loader start).  ``epoch_num`` is the fraction of ``train_samples`` seen, as HugeCTR's MLPerf logger
writes it, so the step count is the samples in the window divided by the global batch.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path

MARK = ":::MLLOG"

class MLLogError(ValueError):
    """A malformed MLLOG line or a log that lacks what the derivation needs (message names file and line)."""


@dataclass
class Run:
    source: str                      # the '# source:' line of the run (repository, commit, path, blob)
    events: list = field(default_factory=list)  # (lineno, dict) in file order

    def value(self, key: str):
        for _, e in self.events:
            if e["key"] == key:
                return e.get("value")
        raise MLLogError(f"{self.source}: no '{key}' event")


def parse_line(line: str, where: str) -> dict | None:
    """The event of one line, None for lines without the MLLOG mark; MLLogError on a malformed event."""
    i = line.find(MARK)
    if i < 0:
        return None
    body = line[i + len(MARK):].strip()
    try:
        e = json.loads(body)
    except json.JSONDecodeError as exc:
        raise MLLogError(f"{where}: malformed MLLOG JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(e, dict):
        raise MLLogError(f"{where}: MLLOG payload is {type(e).__name__}, not an object")
    for k in ("time_ms", "event_type", "key"):
        if k not in e:
            raise MLLogError(f"{where}: MLLOG event lacks '{k}'")
    if not isinstance(e["time_ms"], (int, float)) or isinstance(e["time_ms"], bool):
        raise MLLogError(f"{where}: time_ms is not a number: {e['time_ms']!r}")
    if e.get("metadata") is not None and not isinstance(e["metadata"], dict):
        raise MLLogError(f"{where}: metadata is not an object")
    return e


def read_runs(path) -> list[Run]:
    """Runs of a file (several, each after a ``# source:`` line, or one raw result log: a single run named after
    the file)."""
    path = Path(path)
    with path.open(encoding="utf-8") as f:
        return parse_runs(f, str(path))


def parse_runs(lines, name: str) -> list[Run]:
    """Runs of the text ``lines`` (an iterable of lines, e.g. ``str.splitlines()`` of a blob); errors name
    ``name`` and the line."""
    runs: list[Run] = []
    for n, line in enumerate(lines, 1):
        s = line.strip()
        if s.startswith("# source:"):
            runs.append(Run(source=s[len("# source:"):].strip()))
            continue
        if not s or s.startswith("#"):
            continue
        e = parse_line(s, f"{name}:{n}")
        if e is None:
            continue
        if not runs:
            runs.append(Run(source=name))
        runs[-1].events.append((n, e))
    if not runs or not any(r.events for r in runs):
        raise MLLogError(f"{name}: no MLLOG events")
    return runs


@dataclass
class RunSteps:
    source: str
    platform: str
    global_batch: int
    train_samples: int
    step_s: float                    # median over windows
    windows: list                    # per window (t_ms, steps, step_s)


def step_times(run: Run) -> RunSteps:
    """The derivation in the module docstring, on one run."""
    B = run.value("global_batch_size")
    N = run.value("train_samples")
    if not isinstance(B, int) or B <= 0 or not isinstance(N, int) or N <= 0:
        raise MLLogError(f"{run.source}: global_batch_size {B!r} / train_samples {N!r} not positive integers")
    stops = [(n, e) for n, e in run.events if e["key"] == "eval_stop"]
    starts = [(n, e) for n, e in run.events if e["key"] == "eval_start"]
    windows = []
    for n, stop in stops:
        nxt = [(m, s) for m, s in starts if m > n]
        if not nxt:
            continue
        m, start = nxt[0]
        try:
            e0, e1 = float(stop["metadata"]["epoch_num"]), float(start["metadata"]["epoch_num"])
        except (KeyError, TypeError, ValueError):
            raise MLLogError(f"{run.source}: eval event at line {n} or {m} lacks metadata.epoch_num") from None
        steps = (e1 - e0) * N / B
        dt = (start["time_ms"] - stop["time_ms"]) / 1000.0
        if steps <= 0 or dt <= 0:
            raise MLLogError(f"{run.source}: lines {n}-{m}: non-increasing epoch_num or time ({steps} steps, {dt} s)")
        windows.append((dt, steps, dt / steps))
    if not windows:
        raise MLLogError(f"{run.source}: no eval_stop followed by an eval_start: no training window")
    return RunSteps(run.source, str(run.value("submission_platform")), B, N,
                    statistics.median(w[2] for w in windows), windows)
