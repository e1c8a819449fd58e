"""One GPU shared by concurrent kernels (kernels of different compute streams of one rank).

Model: **processor sharing.**  A kernel's waves hold ``demand`` of the device (the engine passes 1: the whole
device); while the demands of the holds running at once sum to ``D > 1`` every hold progresses at ``1 / D`` of its
speed, so the device's throughput is conserved: two kernels side by side take as long as one after the other.
What a second stream gains is everything that is not a wave on the SMs: the launch latency before a kernel's
first wave (the engine's ``_launch_wait``, not a hold) overlaps the other stream's kernels, as do its
dependency waits.

Why the whole device and not the fraction of slots a partial wave fills: measured on the H200
(``experiments/async_wgrad.py``, 2026-12-04): DLRM-DCNv2's 27 backward GEMMs (cuBLAS, bf16) with the weight
gradients on a second stream take 5.2% / 11.0% / 17.5% less than on one stream at 6,912 / 2,112 / 1,056 rows
(43 / 36 / 39 us: about one launch gap per moved GEMM).  Crediting partial waves with the idle slots (our
128 x 128 tile count over the device's slots) predicted 18% / 30% / 34%; holding the whole device predicts
6.3% / 15.3% / 14.7%.  cuBLAS's Hopper kernels size their grids to the SMs, so a tile count is no measure of the
SMs a library GEMM leaves free.  ``demand < 1`` stays available for kernels whose occupancy is known.

Left out: shared HBM/L2 bandwidth of concurrent kernels beyond the time-sharing, stream priorities.

A rank's share exists only when its program has more than one compute stream with kernels
(:meth:`simfuse.engine.Simulation.enable_share`); a single-stream program never meets one and its timing is
exactly the wave model's (the kernels are serialised by their stream).
"""

from __future__ import annotations

#: a hold whose remaining full-speed time falls below this fraction of its length (or 1e-15 s) is complete
_REL_TOL = 1e-9


class DeviceShare:
    """Processor sharing of one GPU; ``hold(duration_s, demand)`` is a simpy sub-process that ends after
    ``duration_s`` seconds of progress at the speed the concurrent holds leave it."""

    def __init__(self, env):
        self.env = env
        self._active: dict[int, list] = {}  # token -> [remaining full-speed s, demand, event, tolerance s]
        self._t = float(env.now)
        self._rate = 1.0
        self._gen = 0
        self._next = 0
        #: the largest sum of demands seen (diagnostics; > 1 means the kernels slowed each other)
        self.peak_demand = 0.0

    def hold(self, duration_s: float, demand: float):
        if duration_s <= 0:
            return
        self._advance()
        ev = self.env.event()
        d = min(1.0, max(float(demand), 1e-6))
        self._active[self._next] = [float(duration_s), d, ev, max(1e-15, _REL_TOL * float(duration_s))]
        self._next += 1
        self._reschedule()
        yield ev

    def _advance(self) -> None:
        now = float(self.env.now)
        dt = now - self._t
        if dt > 0 and self._active:
            step = dt * self._rate
            for a in self._active.values():
                a[0] -= step
        self._t = now

    def _reschedule(self) -> None:
        self._gen += 1
        if not self._active:
            self._rate = 1.0
            return
        total = sum(a[1] for a in self._active.values())
        self.peak_demand = max(self.peak_demand, total)
        self._rate = 1.0 if total <= 1.0 else 1.0 / total
        dt = max(0.0, min(a[0] for a in self._active.values())) / self._rate
        gen = self._gen
        self.env.timeout(dt).callbacks.append(lambda _ev, gen=gen: self._fire(gen))

    def _fire(self, gen: int) -> None:
        if gen != self._gen:  # superseded by an arrival or a departure since
            return
        self._advance()
        done = [k for k, a in self._active.items() if a[0] <= a[3]]
        if not done:  # round-off left a sliver: finish the nearest one now
            done = [min(self._active, key=lambda k: self._active[k][0])]
        for k in done:
            self._active.pop(k)[2].succeed()
        self._reschedule()
