"""The :class:`Simulation` object: owns the simpy environment, the random generator and the records.

Nothing is global: many simulations can run in one process (and in parallel processes of a sweep).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import simpy


@dataclass
class Record:
    """One interval on one track of the timeline (compute wave, flow group, collective, fused operator).

    ``track`` names the resource (``gpu0/compute``, ``link nic_tx[3]``, ``collective``); ``rank`` is the
    (representative) rank it belongs to; ``count`` is how many identical instances the record stands for
    (symmetry and flow groups); ``bytes`` is the payload of one instance.
    """

    kind: str
    name: str
    track: str
    rank: int
    start_s: float
    end_s: float
    count: int = 1
    size_bytes: float = 0.0
    args: dict = field(default_factory=dict)


class Recorder:
    """Collects :class:`Record` intervals.  ``enabled=False`` keeps only counters (for big sweeps)."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self.records: list[Record] = []

    def add(self, kind: str, name: str, track: str, rank: int, start_s: float, end_s: float, *,
            count: int = 1, size_bytes: float = 0.0, **args) -> None:
        if self.enabled:
            self.records.append(Record(kind, name, track, rank, start_s, end_s, count, size_bytes, dict(args)))

    def frame(self):
        """Records as a pandas DataFrame (one row per record)."""
        import pandas as pd

        cols = ["kind", "name", "track", "rank", "start_s", "end_s", "count", "size_bytes"]
        rows = [(r.kind, r.name, r.track, r.rank, r.start_s, r.end_s, r.count, r.size_bytes) for r in self.records]
        return pd.DataFrame(rows, columns=cols)


class Simulation:
    """Owns the simpy :class:`~simpy.Environment`, a seeded :class:`numpy.random.Generator` and a recorder.

    Components receive the simulation and schedule their processes on ``sim.env``.  ``events`` counts the
    simpy events processed by :meth:`run` (for performance reporting).
    """

    def __init__(self, seed: int = 0, record: bool = True, progress=None):
        self.env = simpy.Environment()
        #: a :class:`~simfuse.progress.Progress` told the events and simulated time every
        #: :data:`~simfuse.progress.SIMULATION_EVERY_EVENTS` events of :meth:`run` (None: nobody is told)
        self.progress = progress
        self.rng = np.random.default_rng(seed)
        self.recorder = Recorder(enabled=record)
        self.events = 0
        #: kernel timings of this simulation's cost models, by (cost model, work): see engine.compute._timing
        self.kernel_memo: dict = {}
        #: ranks whose kernels share the GPU with kernels of another compute stream (engine.share)
        self.shares: dict = {}
        #: each GPU's post queues (simfuse.collectives.posting.post_queue), by (rank, transport, operation)
        self.post_queues: dict = {}
        #: the relay channels of push kernels that forward what they receive (simfuse.fused.push_kernel)
        self.relay_channels: dict = {}

    def enable_share(self, rank: int):
        """Kernels of ``rank`` from now on share its GPU by occupancy demand (:class:`~simfuse.engine.share.
        DeviceShare`); for programs with more than one compute stream.  Returns the share."""
        from .share import DeviceShare

        hit = self.shares.get(rank)
        if hit is None:
            hit = self.shares[rank] = DeviceShare(self.env)
        return hit

    @property
    def now(self) -> float:
        return float(self.env.now)

    def process(self, generator):
        return self.env.process(generator)

    def run(self, until=None) -> float:
        """Run until ``until`` (an event or a time) or until no events remain; returns the final time (s)."""
        env = self.env
        if until is not None and not isinstance(until, (int, float)):
            stop = until
        else:
            stop = None
        limit = float("inf") if until is None or stop is not None else float(until)
        step = env.step
        n = 0
        hook = self.progress
        if hook is not None:
            from ..progress import SIMULATION_EVERY_EVENTS as every
        next_report = every if hook is not None else -1  # (-1: never equal to n)
        try:
            while True:
                if stop is not None and stop.processed:
                    break
                t = env.peek()
                if t == float("inf") or t > limit:
                    break
                step()
                n += 1
                if n == next_report:
                    hook.simulation(self.events + n, float(env.now))
                    next_report += every
        except simpy.core.EmptySchedule:
            pass
        self.events += n
        if stop is not None and not stop.processed:
            raise RuntimeError("simulation ran out of events before the awaited event fired (deadlock)")
        return self.now
