"""The independent simulations of one run, in worker processes (``simfuse run --workers N``).

A point estimate of a DLRM run with a planned placement simulates the fused mode several times (each fused knob
of :data:`~simfuse.workloads.dlrm_workload.TUNE_GRID`, the fused plan and the baseline's plan), and a prediction interval
repeats the run on three (``bound``) or more (``mc``) cost models.  Those simulations do not depend on each other:
:class:`Pool` runs them in up to ``workers`` processes.  Every simulation is deterministic and the results are
combined in the order the serial loop would combine them, so the outputs are the same bit for bit whatever the
worker count (``tests/workloads/test_parallel_runs.py``); only the wall time changes.

The workers are forked where the platform allows it (Linux): the parent's modules are loaded already, so a
worker costs milliseconds, not the ~1 s of a fresh interpreter.  Elsewhere they are spawned.  A simulation that
records a trace (``record``) stays in the parent: its simulator objects do not cross processes.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys
import threading
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from ..errors import SimfuseError

#: a run whose first simulation took less wall time than this (s) keeps the others in its own process: below it
#: starting workers and shipping the model, the system and the plans to them costs more than it saves (forking
#: and one round trip take ~20-50 ms on the 2-core VM; a 1,024-node DLRM simulation takes 0.3-1.3 s)
MIN_PARALLEL_SIM_S = 0.2
#: a run the cost guard estimates at this many seconds or more sends its first simulations to the workers at once,
#: without running one here first to see whether workers pay: a 64-node MLPerf DLRM run on the 2-core VM spent
#: 2.3 of its 8.9 s on that first (baseline) simulation alone (2026-12-07)
MIN_PARALLEL_RUN_S = 2.0
#: while waiting on worker processes, the progress line is refreshed this often (s)
WAIT_TICK_S = 1.0


def die_with_parent(parent_pid: int) -> None:
    """Pool initializer: the worker exits when its parent process does (even on SIGKILL).

    Linux: ``prctl(PR_SET_PDEATHSIG, SIGKILL)``; everywhere: a daemon thread that polls ``os.getppid()``."""
    import signal

    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)

    def watch() -> None:
        import time

        while True:
            time.sleep(0.5)
            if os.getppid() != parent_pid:
                os._exit(1)

    threading.Thread(target=watch, name="simfuse-parent-watch", daemon=True).start()


class Pool:
    """Up to ``workers`` processes, started on first use (``workers <= 1``: everything runs in this process).
    Use as a context manager; :meth:`map` returns results in task order."""

    def __init__(self, workers: int = 1, expected_run_s: float | None = None):
        self.workers = max(1, int(workers))
        #: the cost guard's estimate of the whole run's wall time (s), where the caller has one
        self.expected_run_s = expected_run_s
        self._pool: ProcessPoolExecutor | None = None

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def long_run(self) -> bool:
        """Whether the run is known (estimated) to be long enough for workers from its first simulation on."""
        return self.workers > 1 and self.expected_run_s is not None and self.expected_run_s >= MIN_PARALLEL_RUN_S

    def parallel(self, n_tasks: int, first_sim_s: float) -> bool:
        """Whether ``n_tasks`` simulations, each about as long as one of ``first_sim_s`` seconds, go to workers."""
        return self.workers > 1 and n_tasks > 1 and first_sim_s >= MIN_PARALLEL_SIM_S

    def map(self, fn, tasks: list[tuple], parallel: bool = True, progress=None) -> list:
        """``[fn(*t) for t in tasks]``, in worker processes when ``parallel`` (and there are workers).
        ``progress``: a :class:`~simfuse.progress.Progress` advanced as each task ends; the tasks run here get it
        as ``fn(*t, progress=progress)`` (a reporter does not cross processes; while waiting on the workers this
        process refreshes it every :data:`WAIT_TICK_S`)."""
        if not parallel or self.workers <= 1 or len(tasks) <= 1 or multiprocessing.current_process().daemon:
            # (a daemonic process, e.g. a multiprocessing.Pool worker, has no children)
            if progress is None:
                return [fn(*t) for t in tasks]
            out = []
            for t in tasks:
                out.append(fn(*t, progress=progress))
                progress.advance()
            return out
        try:
            if self._pool is None:
                method = "fork" if sys.platform.startswith("linux") else "spawn"
                self._pool = ProcessPoolExecutor(max_workers=self.workers,
                                                 mp_context=multiprocessing.get_context(method),
                                                 initializer=die_with_parent, initargs=(os.getpid(),))
            futs = [self._pool.submit(fn, *t) for t in tasks]
        except OSError:  # no process could be started (a process limit, no memory to fork): this process runs them
            self.close()
            self.workers = 1
            return [fn(*t) for t in tasks]
        try:
            if progress is not None:
                pending = set(futs)
                while pending:
                    done, pending = wait(pending, timeout=WAIT_TICK_S, return_when=FIRST_COMPLETED)
                    for _ in done:
                        progress.advance()
                    progress.tick()
            return [f.result() for f in futs]
        except BrokenProcessPool:
            raise SimfuseError("a worker process died during the run (out of memory?); rerun with --workers 1") \
                from None
