"""Node-count sweeps: a local process pool by default, a Dask distributed cluster with ``scheduler``.

Crash safety:

* Every finished point is written at once (temporary file + rename) to ``DIR/points/<hash>.json``, where
  ``<hash>`` is the SHA-256 of the point's key: the contents of the model and topology files and of the calibration
  profile the topology references, the simfuse source code (:func:`code_digest`: a point simulated by another
  version is recomputed, never reused), the node count, GPUs per node, mode and simulation mode.  No part of a file name
  comes from input content (a model ``name: ../../x`` stays a label).
* A point file holds ``{"format", "key", "rows", "checksum"}``; on resume it is used only when its key equals the
  point's and the checksum matches the rows (so ``null``, ``[]``, ``{}``, another point's file, edited numbers, a
  directory or a symbolic link in its place are recomputed, never trusted).
* ``DIR/.sweep.lock`` (``fcntl.flock``) lets one sweep at a time use ``DIR``; a second one fails at once with a
  one-line error.  The lock file is removed when the sweep ends.
* Pool workers die with the sweep: each sets ``PR_SET_PDEATHSIG`` (Linux) and watches its parent's pid, so a
  SIGKILLed sweep leaves no worker running; rerunning it resumes from the points already written.
* Bounds (node counts, GPUs per node, paths under ``DIR``) are checked before anything is created; a sweep that
  fails before finishing any point leaves nothing behind in a ``DIR`` it created.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import shutil
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pandas as pd

from .checks import MAX_NODES, MAX_SWEEP_POINTS, check_out_dir, inside, remove_stale, resolve_gpus_per_node
from .errors import SimfuseError, SpecError, short_repr
from .results.io import atomic_write_df, atomic_write_text
from .spec import load_topology, load_workload
from .workloads.parallel import WAIT_TICK_S
from .workloads.parallel import die_with_parent as _die_with_parent
from .workloads.run import run_point

#: Version of the point-file layout (part of the key: older files are recomputed).
POINT_FORMAT = 2
#: Largest point file read back (bytes); anything larger is not one of ours.
MAX_POINT_BYTES = 1 * 2**20
LOCK_NAME = ".sweep.lock"


def parse_nodes(text: str, field: str = "--nodes") -> list[int]:
    """``1,2,4`` or ``8..1024`` (powers of two from the first) into a sorted list of node counts.

    Every count must lie in 1..:data:`~simfuse.checks.MAX_NODES`, and a sweep has at most
    :data:`~simfuse.checks.MAX_SWEEP_POINTS` points.  ``field``: the argument an error names (a script's own
    ``--oat-nodes``, the API's ``nodes``)."""
    out: set[int] = set()
    text = str(text)
    if len(text) > 10_000:
        raise SpecError("<argument>", field, "list too long")
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if ".." in part:
                lo, hi = (int(x) for x in part.split(".."))
                if not 1 <= lo <= hi <= MAX_NODES:
                    raise SpecError("<argument>", field, f"range {short_repr(part)} must satisfy "
                                    f"1 <= start <= end <= {MAX_NODES}")
                v = lo
                while v <= hi:
                    out.add(v)
                    v *= 2
            else:
                v = int(part)
                if not 1 <= v <= MAX_NODES:
                    raise SpecError("<argument>", field, f"node count {v} not in 1..{MAX_NODES}")
                out.add(v)
        except ValueError:
            raise SpecError("<argument>", field, f"cannot parse {short_repr(part)} (use 1,2,4 or 8..1024)") from None
        if len(out) > MAX_SWEEP_POINTS:
            raise SpecError("<argument>", field, f"more than {MAX_SWEEP_POINTS} node counts")
    if not out:
        raise SpecError("<argument>", field, "node counts must be positive integers")
    return sorted(out)


def _digest(*paths: str) -> str:
    h = hashlib.sha256()
    for p in paths:
        data = Path(p).read_bytes()
        h.update(len(data).to_bytes(8, "little"))  # unambiguous concatenation
        h.update(data)
    return h.hexdigest()


def code_digest() -> str:
    """SHA-256 over the simfuse package's Python sources (each file's path relative to the package and its bytes,
    in sorted order): the code that simulated a point, so a resumed sweep never reuses a point of another version."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root).as_posix().encode()
        data = p.read_bytes()
        for part in (rel, data):
            h.update(len(part).to_bytes(8, "little"))
            h.update(part)
    return h.hexdigest()


def point_key(digest: str, nodes: int, gpus_per_node: int, mode: str, sim_mode: str,
              settings: dict | None = None, code: str | None = None) -> dict:
    """The identity of one sweep point (what its file name hashes and what its file must contain); ``settings``
    (the ``--set`` pairs) and ``code`` (:func:`code_digest`) are part of it when given."""
    key = {"format": POINT_FORMAT, "inputs": digest, "nodes": int(nodes), "gpus_per_node": int(gpus_per_node),
           "mode": mode, "sim_mode": sim_mode}
    if code:
        key["code"] = code
    if settings:
        key["settings"] = {str(k): str(v) for k, v in sorted(settings.items())}
    return key


def _canonical(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)


def point_file_name(key: dict) -> str:
    """``<sha256 of the key>.json`` (64 hex digits): fixed length, no input content."""
    return hashlib.sha256(_canonical(key).encode()).hexdigest() + ".json"


def _checksum(key: dict, rows: list) -> str:
    return hashlib.sha256(_canonical({"key": key, "rows": rows}).encode()).hexdigest()


def json_safe_rows(rows: list[dict]) -> list[dict]:
    """Rows with non-finite floats (a speedup that does not apply, an estimate not made) as None, so that point
    files are strict JSON and fresh and resumed rows are the same."""
    import math

    return [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()} for r in rows]


def encode_point(key: dict, rows: list[dict]) -> str:
    """The text of a point file."""
    return json.dumps({"format": POINT_FORMAT, "key": key, "rows": rows, "checksum": _checksum(key, rows)},
                      allow_nan=False)


_ROW_FIELDS = ("model", "topology", "nodes", "gpus", "mode", "iteration_time_s", "compute_time_s",
               "exposed_comm_time_s")


def _expected_modes(mode: str) -> list[str]:
    return ["baseline", "fused"] if mode == "both" else [mode]


def decode_point(text: str, key: dict) -> list[dict] | None:
    """The rows of a point file, or ``None`` when it is not a valid file of this very point."""
    try:
        d = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(d, dict) or set(d) != {"format", "key", "rows", "checksum"}:
        return None
    if d["format"] != POINT_FORMAT or d["key"] != key:
        return None
    rows = d["rows"]
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        return None
    try:
        if d["checksum"] != _checksum(key, rows):
            return None
    except (TypeError, ValueError):
        return None
    if [r.get("mode") for r in rows] != _expected_modes(key["mode"]):
        return None
    for r in rows:
        if any(f not in r for f in _ROW_FIELDS):
            return None
        if r["nodes"] != key["nodes"] or r["gpus"] != key["nodes"] * key["gpus_per_node"]:
            return None
        for f in ("iteration_time_s", "compute_time_s", "exposed_comm_time_s"):
            v = r[f]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                return None
    return rows


def _read_point(path: Path, key: dict) -> list[dict] | None:
    """Rows of a valid point file at ``path``; anything else there (a directory, a link, junk) is removed."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return None
    import stat as _stat

    if _stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path, ignore_errors=True)
        return None
    if not _stat.S_ISREG(st.st_mode) or st.st_size > MAX_POINT_BYTES:
        path.unlink(missing_ok=True)  # a link (never followed), a fifo, or far too large
        return None
    try:
        rows = decode_point(path.read_text(encoding="utf-8"), key)
    except (OSError, UnicodeDecodeError):
        rows = None
    if rows is None:
        path.unlink(missing_ok=True)
    return rows


# ------------------------------------------------------------------------------------------------ lock file

class SweepLock:
    """An exclusive ``fcntl.flock`` on ``DIR/.sweep.lock`` (non-blocking: a second sweep fails at once)."""

    def __init__(self, out: Path):
        self.path = inside(out, LOCK_NAME)
        self.fd: int | None = None

    def acquire(self) -> None:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX: no locking
            return
        for _ in range(10):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                holder = ""
                with contextlib.suppress(OSError, ValueError):
                    holder = f" (pid {int(os.pread(fd, 32, 0).decode().strip())})"
                os.close(fd)
                raise SpecError("<argument>", "--out", f"{short_repr(str(self.path.parent))} is in use by another "
                                f"sweep{holder}; wait for it to finish or give another --out") from None
            # the holder before us may have removed the file after we opened it: lock the file at the path
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path, follow_symlinks=False).st_ino
            except FileNotFoundError:
                same = False
            if same:
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
                self.fd = fd
                return
            os.close(fd)
        raise SimfuseError(f"{self.path}: could not take the sweep lock")

    def release(self) -> None:
        if self.fd is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        os.close(self.fd)  # closing drops the flock
        self.fd = None


# ------------------------------------------------------------------------------------------ worker lifetime

def eta_by_cost(elapsed_s: float, done_cost: float, todo_cost: float) -> float | None:
    """Seconds left in a sweep whose finished points, of estimated cost ``done_cost`` (the cost guard's seconds,
    :func:`point_cost`), took ``elapsed_s``: the measured seconds per estimated second times the estimated cost of
    the points left (``todo_cost``).  Counting points instead would promise one point's time for the last point of
    a sweep over node counts, which often costs more than all the others together.  None before any point ends."""
    if done_cost <= 0:
        return None
    return elapsed_s * todo_cost / done_cost


def point_cost(spec, topology, nodes: int, gpus_per_node: int, sim_mode: str, execution) -> float:
    """The cost guard's estimate of one point's wall time (s; :func:`~simfuse.guard.estimate_workload`), at
    least 1 ms: the weight of the point in the sweep's time left."""
    from .guard import estimate_workload
    from .workloads.run import scaled_spec

    try:
        est = estimate_workload(scaled_spec(spec, nodes, gpus_per_node, execution), topology, nodes, gpus_per_node,
                                sim_mode, execution)
    except SimfuseError:
        return 1e-3
    return max(float(est.seconds), 1e-3)


class _SweepProgress:
    """The sweep's points on a :class:`~simfuse.progress.Progress`, the time left weighted by each point's
    estimated cost (:func:`eta_by_cost`)."""

    def __init__(self, progress, costs: dict[int, float], clock=None):
        import time

        self.progress, self.costs = progress, costs
        self.clock = clock or time.monotonic
        self.t0 = self.clock()
        self.done_cost = 0.0
        self.todo_cost = sum(costs.values())
        progress.begin("point", len(costs))

    def update(self, n: int) -> None:
        c = self.costs.get(n, 0.0)
        self.done_cost += c
        self.todo_cost -= c
        eta = eta_by_cost(self.clock() - self.t0, self.done_cost, self.todo_cost)
        self.progress.advance(f"last done: {n} nodes", eta_s=eta)


def run_sweep(model: str, topology: str, nodes: list[int], out: Path | str, *, gpus_per_node: int | None = None,
              mode: str = "both", sim_mode: str = "auto", workers: int | None = None, scheduler: str | None = None,
              progress=None, plots: bool = True, settings: dict | None = None) -> pd.DataFrame:
    """Run every node count, write ``results.csv`` (and figures), return the table.  ``settings``: ``--set``
    pairs (execution settings and fused knobs), validated before anything starts.  ``progress``: a
    :class:`~simfuse.progress.Progress` (True: on stderr; None or False: none) told the points, the time left
    (weighted by each point's estimated cost) and how many points a resumed sweep reused; the table's
    ``attrs["reused_points"]`` says the last.

    Workers (processes or Dask) receive the loaded, validated workload spec and the resolved System, not file
    paths, so a Dask worker needs no access to the files and relative paths work anywhere."""
    from .fused.knobs import modes_of, parse_execution
    from .system import System
    from .workloads.run import MODES, check_point

    # --- validate everything before creating anything
    spec = load_workload(model)  # validate before starting anything
    topo = load_topology(topology)
    settings = dict(settings or {})
    parse_execution({**settings, "mode": mode, "sim_mode": sim_mode})
    if mode not in MODES:
        raise SpecError("<argument>", "--mode", f"unknown mode {short_repr(mode)}; expected one of {', '.join(MODES)}")
    nodes = sorted({int(n) for n in nodes})
    if not nodes:
        raise SpecError("<argument>", "--nodes", "no node counts")
    for n in nodes:
        if not 1 <= n <= MAX_NODES:
            raise SpecError("<argument>", "--nodes", f"node count {n} not in 1..{MAX_NODES}")
    g = resolve_gpus_per_node(topo, gpus_per_node)
    if workers is not None and workers < 1:
        raise SpecError("<argument>", "--workers", f"must be >= 1, got {workers}")
    system = System.from_topology(topo)  # resolved once; shipped to the workers
    ex = parse_execution({**settings, "mode": mode, "sim_mode": sim_mode})
    for n in nodes:  # a node count the workload cannot run is an input error: refuse it before any point runs
        check_point(spec, system, n, g, ex, modes_of(mode))
    out = check_out_dir(out)
    # the key covers every input file, the calibration profile the topology references included
    inputs = [model, topology, *([topo.calibration] if topo.calibration else [])]
    for p in inputs:
        if not Path(p).is_file():
            raise SpecError(str(p), "", "file not found")
    digest = _digest(*inputs)
    code = code_digest()
    keys = {n: point_key(digest, n, g, mode, sim_mode, settings, code) for n in nodes}
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    points_dir = inside(out, "points")
    lock = SweepLock(out)
    try:
        lock.acquire()
    except BaseException:
        if created:
            _remove_if_empty(out)
        raise
    finished = 0
    try:
        if points_dir.is_symlink() or (points_dir.exists() and not points_dir.is_dir()):
            raise SpecError("<argument>", "--out", f"{short_repr(str(points_dir))} is not a directory "
                            "(a link or a file); refusing to write there")
        todo, rows = [], []
        for n in nodes:
            path = inside(out, "points", point_file_name(keys[n]))
            cached = _read_point(path, keys[n])
            if cached is not None:
                rows.extend(cached)
            else:
                todo.append((n, path))
        from .progress import as_progress

        reporter = as_progress(progress)
        if len(todo) < len(nodes):
            reporter.note(f"reused {len(nodes) - len(todo)} of {len(nodes)} points already computed in "
                          f"{points_dir} (same inputs, settings and code); computing {len(todo)}")
        bar = _SweepProgress(reporter, {n: point_cost(spec, topo, n, g, sim_mode, ex) for n, _ in todo})

        def finish(n, path, result_rows):
            nonlocal finished
            result_rows = json_safe_rows(result_rows)
            atomic_write_text(path, encode_point(keys[n], result_rows))
            finished += 1
            rows.extend(result_rows)
            bar.update(n)

        try:
            _run_points(todo, finish, spec, system, g, mode, sim_mode, workers, scheduler, settings, reporter)
        finally:
            reporter.close()
        df = pd.DataFrame(rows).sort_values(["nodes", "mode"], kind="stable").reset_index(drop=True)
        df = df.drop(columns=[c for c in ("wall_s",) if c in df.columns])
        sens = _sensitivity_table(df)
        df = df.drop(columns=[c for c in ("sensitivity_json",) if c in df.columns])
        df.attrs["reused_points"] = len(nodes) - len(todo)
        atomic_write_df(df, inside(out, "results.csv"))
        written = {"results.csv"}
        if sens is not None:
            written |= _write_sensitivity(sens, out, plots)
        if plots and len(df):
            from .results.plots import plot_breakdown, plot_speedup_vs_nodes

            if "fused" in set(df["mode"]) and "baseline" in set(df["mode"]):
                plot_speedup_vs_nodes(df, inside(out, "speedup_vs_nodes.png"))
                written.add("speedup_vs_nodes.png")
            plot_breakdown(df, inside(out, "breakdown.png"))
            written.add("breakdown.png")
        remove_stale(out, SWEEP_OUTPUTS, written)
        if os.environ.get("SIMFUSE_SWEEP_KEEP_POINTS", "1") == "0":
            for p in points_dir.glob("*.json"):
                p.unlink()
        return df
    except BaseException:
        if finished == 0 and points_dir.is_dir() and not points_dir.is_symlink():
            _remove_if_empty(points_dir)
        raise
    finally:
        lock.release()
        if created:
            _remove_if_empty(out)


#: every file ``sweep --out`` may write (beside its point cache); those an earlier sweep wrote and this one does
#: not are removed
SWEEP_OUTPUTS = ("results.csv", "sensitivity.csv", "tornado.png", "speedup_vs_nodes.png", "breakdown.png")


def _write_sensitivity(sens: pd.DataFrame, out: Path, plots: bool) -> set[str]:
    """The gathered ``sensitivity.csv`` and the tornado of the one-at-a-time points where there are any, else of
    the draws' conditional ends; returns the names written."""
    from .results.tornado import plot_tornado

    atomic_write_df(sens, inside(out, "sensitivity.csv"))
    shown = sens[sens["method"] == "oat"]
    shown = shown if len(shown) else sens[sens["method"] == "conditional"]
    if plots and len(shown):
        show = _tornado_nodes(sorted(set(shown["nodes"])))
        plot_tornado(shown[shown["nodes"].isin(show)], inside(out, "tornado.png"), group="nodes")
        return {"sensitivity.csv", "tornado.png"}
    return {"sensitivity.csv"}


def _sensitivity_table(df) -> pd.DataFrame | None:
    """The sensitivity rows of every ``uncertainty=inputs`` point, with its node count (None: no such point)."""
    if "sensitivity_json" not in df:
        return None
    parts = []
    for _, row in df.iterrows():
        text = row["sensitivity_json"]
        if isinstance(text, str) and text:
            t = pd.DataFrame(json.loads(text))
            t.insert(0, "nodes", row["nodes"])
            parts.append(t)
    return pd.concat(parts, ignore_index=True) if parts else None


def _tornado_nodes(nodes: list[int]) -> list[int]:
    """The node counts a sweep's tornado plot shows: 128 (the headline scale) where swept, and the largest."""
    show = [n for n in (128,) if n in nodes] + nodes[-1:]
    return sorted(set(show)) or nodes[:1]


def _remove_if_empty(d: Path) -> None:
    with contextlib.suppress(OSError):
        d.rmdir()


def _run_points(todo, finish, model, topology, g, mode, sim_mode, workers, scheduler, settings=None,
                progress=None) -> None:
    """Compute the points of ``todo`` (``[(nodes, path)]``), calling ``finish(nodes, path, rows)`` for each;
    ``progress``: refreshed while waiting on workers, and given to the simulations of a point run here."""
    from .progress import Progress

    progress = progress or Progress()
    if not todo:
        return
    if scheduler:
        try:
            from distributed import Client
        except ImportError:
            raise SpecError("<argument>", "--scheduler", "needs the 'sweep' extra (dask[distributed])") from None
        progress.note(f"connecting to the Dask scheduler at {short_repr(scheduler)}")
        try:
            client = Client(scheduler)
        except (OSError, ValueError, TypeError) as exc:  # a malformed address, or no scheduler listening there
            raise SpecError("<argument>", "--scheduler", f"cannot reach a Dask scheduler at {short_repr(scheduler)}: "
                            "give the address `dask scheduler` prints (tcp://host:8786), or drop --scheduler to use "
                            f"local processes ({short_repr(str(exc), 160)})") from None
        try:
            futs = {client.submit(run_point, model, topology, n, g, mode, sim_mode, settings, pure=False): (n, p)
                    for n, p in todo}
            from distributed import as_completed as d_as_completed

            for fut in d_as_completed(futs):
                n, p = futs[fut]
                finish(n, p, fut.result())
        finally:
            client.close()
    elif (workers or 1) > 1 and len(todo) > 1:
        pool = ProcessPoolExecutor(max_workers=min(workers, len(todo)), initializer=_die_with_parent,
                                   initargs=(os.getpid(),))
        try:
            futs = {pool.submit(run_point, model, topology, n, g, mode, sim_mode, settings): (n, p) for n, p in todo}
            pending = set(futs)
            while pending:
                done, pending = wait(pending, timeout=WAIT_TICK_S, return_when=FIRST_COMPLETED)
                for fut in sorted(done, key=lambda f: futs[f][0]):
                    n, p = futs[fut]
                    try:
                        result = fut.result()
                    except BrokenProcessPool:
                        raise SimfuseError(f"a sweep worker died while computing {n} nodes (out of memory?); "
                                           "rerun to resume from the finished points") from None
                    finish(n, p, result)
                progress.tick()
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
    else:  # one point (or one worker): the point's own simulations get the workers
        for n, p in todo:
            progress.doing(f"{n} nodes")
            finish(n, p, run_point(model, topology, n, g, mode, sim_mode, settings, workers or 1, progress.nested()))
