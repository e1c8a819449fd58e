"""GPU compute: kernels as grids of workgroups dispatched in waves onto the compute units.

Timing assumptions.  A kernel starts ``launch_latency_s`` after it is launched.  The device holds ``slots``
workgroups at once (compute units x resident workgroups per unit, less any occupancy lost to communication
state, capped by a persistent grid size).  Workgroups are dispatched in index order (or the order given);
workgroup ``i`` runs in wave ``i // slots`` and takes ``cost.workgroup_time_s(work, wave_size)`` plus its own
overhead (``wg_overhead_s(i)``, e.g. issuing a put) plus optional jitter.

Two equivalent execution modes:

* aggregated (default): one simpy event per wave; a wave lasts as long as its slowest workgroup.  Exact when
  workgroups of a wave are identical, which is the common case (see ``tests/engine``).
* per-workgroup: ``slots`` worker processes each take the next workgroup when they free up (the hardware
  dispatcher's behaviour); one event per workgroup.  Used to validate the aggregated mode and to produce
  per-workgroup traces.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..costs.base import CostModel, KernelWork
from .simulation import Simulation

CompletionFn = Callable[[np.ndarray, float], None]  # (completed workgroup indices, time_s)


@dataclass
class KernelResult:
    """Outcome of one simulated kernel: total ``time_s`` (launch latency + makespan), waves, slots and, in
    per-workgroup mode, ``records`` of ``(wg_index, start_s, end_s, slot)``."""

    time_s: float
    waves: int
    slots: int
    records: list[tuple[int, float, float, int]] = field(default_factory=list)
    events: int = 0


def effective_slots(cost: CostModel, work: KernelWork, occupancy_loss: float = 0.0,
                    persistent_grid: int | None = None) -> int:
    """Workgroups resident at once: the cost model's slots, less occupancy loss, capped by a persistent grid."""
    slots = cost.slots(work)
    slots = max(1, int(np.floor(slots * (1.0 - occupancy_loss) + 1e-9)))
    if persistent_grid:
        slots = max(1, min(slots, int(persistent_grid)))
    return slots


def _wave_times(cost: CostModel, work: KernelWork, slots: int) -> tuple[float, float]:
    """Workgroup duration in a full wave and in the partial last wave (0 where there is none), seconds."""
    W = int(work.num_workgroups)
    full_t = cost.workgroup_time_s(work, slots) if W >= slots else 0.0
    rem = W % slots
    return full_t, (cost.workgroup_time_s(work, rem) if rem else 0.0)


def kernel_time_s(cost: CostModel, work: KernelWork) -> float:
    """``work``'s duration alone on a GPU (s, launch excluded): its full waves and its partial last wave, as
    :func:`run_kernel_waves` runs them without occupancy loss."""
    slots = effective_slots(cost, work)
    full_t, rem_t = _wave_times(cost, work, slots)
    return (int(work.num_workgroups) // slots) * full_t + rem_t


def _timing(sim: Simulation, cost: CostModel, work: KernelWork, occupancy_loss: float,
            persistent_grid: int | None) -> tuple[int, float, float]:
    """``(slots, full-wave workgroup time, last-wave workgroup time)`` of ``work``, kept per simulation: cost
    models are pure functions of the work (kernels of the same shape recur on every simulated rank and layer)."""
    key = (id(cost), work, occupancy_loss, persistent_grid)
    try:
        hit = sim.kernel_memo.get(key)
    except TypeError:  # a work with an unhashable field: no memo
        slots = effective_slots(cost, work, occupancy_loss, persistent_grid)
        return (slots, *_wave_times(cost, work, slots))
    if hit is None or hit[0] is not cost:
        slots = effective_slots(cost, work, occupancy_loss, persistent_grid)
        hit = sim.kernel_memo[key] = (cost, slots, *_wave_times(cost, work, slots))
    return hit[1:]


def _launch_latency_s(sim: Simulation, cost: CostModel, work: KernelWork) -> float:
    key = ("launch", id(cost), work)
    try:
        hit = sim.kernel_memo.get(key)
    except TypeError:
        return cost.launch_latency_s(work)
    if hit is None or hit[0] is not cost:
        hit = sim.kernel_memo[key] = (cost, cost.launch_latency_s(work))
    return hit[1]


def _launch_wait(sim: Simulation, cost: CostModel, work: KernelWork, launch: bool):
    """simpy sub-process: the kernel's launch latency (nothing when ``launch`` is False)."""
    if launch:
        lat = _launch_latency_s(sim, cost, work)
        if lat > 0:
            yield sim.env.timeout(lat)


def _on_sms(env, share, duration_s: float, demand: float = 1.0):
    """Busy the SMs for ``duration_s`` of work: a plain wait, or, when another compute stream of the rank may run
    beside it (``share``: :class:`~simfuse.engine.share.DeviceShare`), a hold of ``demand`` of the time-shared
    device."""
    if share is not None:
        yield from share.hold(duration_s, demand)
    else:
        yield env.timeout(duration_s)


def run_kernel(sim: Simulation, work: KernelWork, cost: CostModel, *, rank: int = 0,
               order: Sequence[int] | None = None, on_complete: CompletionFn | None = None,
               wg_overhead_s: Callable[[np.ndarray], np.ndarray] | None = None, occupancy_loss: float = 0.0,
               persistent_grid: int | None = None, per_workgroup: bool = False, jitter_cv: float = 0.0,
               launch: bool = True, track: str | None = None, records: list | None = None):
    """simpy process executing ``work`` on one GPU.  ``on_complete(indices, t)`` is called as workgroups finish
    (grouped per wave in aggregated mode).  ``wg_overhead_s(indices) -> seconds`` adds per-workgroup time
    (e.g. put issue).  A plain kernel (nothing observes its waves) waits once for all its waves.  Returns the
    end time (s)."""
    env = sim.env
    W = int(work.num_workgroups)
    plain = (order is None and on_complete is None and wg_overhead_s is None and records is None
             and jitter_cv <= 0 and not per_workgroup)
    idx = None
    if not plain:
        idx = np.arange(W, dtype=np.int64) if order is None else np.asarray(order, dtype=np.int64)
        if len(idx) != W:
            raise ValueError("order must list every workgroup once")
    slots, full_t, rem_t = _timing(sim, cost, work, occupancy_loss, persistent_grid)
    t0 = env.now
    yield from _launch_wait(sim, cost, work, launch)
    t_start = env.now
    rng = sim.rng
    share = sim.shares.get(rank) if sim.shares else None
    if plain:
        # nothing observes the waves: identical waves back to back are one wait (the same end time, one event)
        total = (W // slots) * full_t + (rem_t if W % slots else 0.0)
        if share is not None or total > 0:
            yield from _on_sms(env, share, total)
        sim.recorder.add("kernel", work.name, track or f"gpu{rank}/compute", rank, t_start, env.now,
                         variant=work.variant, workgroups=W, slots=slots, launched_s=t0)
        return env.now

    def durations(lo: int, hi: int) -> np.ndarray:
        size = min(slots, W - (lo // slots) * slots)
        base = full_t if size == slots else rem_t
        d = np.full(hi - lo, base)
        if wg_overhead_s is not None:
            d = d + np.asarray(wg_overhead_s(idx[lo:hi]), dtype=float)
        if jitter_cv > 0:
            d = d * np.maximum(0.05, 1.0 + jitter_cv * rng.standard_normal(hi - lo))
        return d

    if not per_workgroup:
        for lo in range(0, W, slots):
            hi = min(W, lo + slots)
            d = durations(lo, hi)
            yield from _on_sms(env, share, float(d.max()))
            if records is not None:
                records.extend((int(i), env.now - float(d.max()), env.now, j) for j, i in enumerate(idx[lo:hi]))
            if on_complete is not None:
                on_complete(idx[lo:hi], env.now)
    else:
        all_d = np.concatenate([durations(lo, min(W, lo + slots)) for lo in range(0, W, slots)]) if W else []
        state = {"next": 0}

        def worker(slot: int):
            while state["next"] < W:
                k = state["next"]
                state["next"] += 1
                s = env.now
                yield from _on_sms(env, share, float(all_d[k]), 1.0 / slots)
                if records is not None:
                    records.append((int(idx[k]), s, env.now, slot))
                if on_complete is not None:
                    on_complete(idx[k:k + 1], env.now)

        import simpy

        procs = [env.process(worker(s)) for s in range(min(slots, W))]
        if procs:
            yield simpy.AllOf(env, procs)
    sim.recorder.add("kernel", work.name, track or f"gpu{rank}/compute", rank, t_start, env.now,
                     variant=work.variant, workgroups=W, slots=slots, launched_s=t0)
    return env.now


def simulate_kernel(work: KernelWork, cost_model: CostModel, per_workgroup: bool = False, start_s: float = 0.0,
                    *, occupancy_loss: float = 0.0, persistent_grid: int | None = None, jitter_cv: float = 0.0,
                    seed: int = 0) -> KernelResult:
    """Simulate one kernel alone on one GPU: ``time_s`` = launch latency + makespan.  In per-workgroup mode
    ``records`` holds ``(wg_index, start_s, end_s, slot)`` for every workgroup (times offset by ``start_s``)."""
    sim = Simulation(seed=seed, record=False)
    recs: list = []
    proc = sim.process(run_kernel(sim, work, cost_model, per_workgroup=per_workgroup, occupancy_loss=occupancy_loss,
                                  persistent_grid=persistent_grid, jitter_cv=jitter_cv, records=recs))
    sim.run(until=proc)
    slots = effective_slots(cost_model, work, occupancy_loss, persistent_grid)
    waves = -(-int(work.num_workgroups) // slots)
    if start_s:
        recs = [(i, s + start_s, e + start_s, sl) for (i, s, e, sl) in recs]
    return KernelResult(time_s=sim.now, waves=waves, slots=slots, records=recs if per_workgroup else [],
                        events=sim.events)


def run_kernel_waves(sim: Simulation, work: KernelWork, cost: CostModel, *, rank: int = 0,
                     on_wave: Callable[[int, int, float], None] | None = None,
                     wave_overhead_s: Callable[[int, int], float] | None = None, occupancy_loss: float = 0.0,
                     persistent_grid: int | None = None, launch: bool = True, track: str | None = None,
                     max_events: int | None = None):
    """The aggregated mode of :func:`run_kernel` without per-workgroup arrays (for grids of millions of
    workgroups): the caller describes each wave by its execution positions ``[lo, hi)``.
    ``wave_overhead_s(lo, hi)``: the largest per-workgroup overhead in the wave (``run_kernel``'s
    ``max(wg_overhead_s(idx))``); ``on_wave(lo, hi, t)``: called when the wave ends.  Same timing as
    ``run_kernel``: a wave lasts its base workgroup time plus that overhead (``base + max(o)`` equals
    ``max(base + o)`` in floating point: rounding is monotone).

    ``max_events``: with more waves than this, consecutive waves are grouped into at most ``max_events``
    *macro-waves* (one simpy event and one ``on_wave(lo, hi, t)`` call each, lasting the sum of their waves'
    durations): the kernel's end is unchanged (to float round-off), the outputs of a macro-wave leave at its
    end, i.e. at most one macro-wave (``1 / max_events`` of the kernel) late.  Returns the end time (s)."""
    env = sim.env
    W = int(work.num_workgroups)
    slots, full_t, rem_t = _timing(sim, cost, work, occupancy_loss, persistent_grid)
    t0 = env.now
    yield from _launch_wait(sim, cost, work, launch)
    t_start = env.now
    waves = -(-W // slots)
    group = 1 if not max_events or waves <= max_events else -(-waves // int(max_events))
    share = sim.shares.get(rank) if sim.shares else None
    for g0 in range(0, waves, group):
        total = 0.0
        for w in range(g0, min(waves, g0 + group)):
            lo, hi = w * slots, min(W, (w + 1) * slots)
            d = full_t if hi - lo == slots else rem_t
            if wave_overhead_s is not None:
                d = d + float(wave_overhead_s(lo, hi))
            total = d if group == 1 else total + d
        yield from _on_sms(env, share, float(total))
        if on_wave is not None:
            on_wave(g0 * slots, min(W, (g0 + group) * slots), env.now)
    sim.recorder.add("kernel", work.name, track or f"gpu{rank}/compute", rank, t_start, env.now,
                     variant=work.variant, workgroups=W, slots=slots, launched_s=t0)
    return env.now
