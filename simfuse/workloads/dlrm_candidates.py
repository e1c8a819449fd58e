"""The candidates of a DLRM run: the sharding plans each mode tries (its own and the other mode's, a fair
comparison), the fused knob grid (:data:`TUNE_GRID`), simulated serially or in
worker processes, the fastest kept per mode."""

from __future__ import annotations

import dataclasses

from .dlrm import simulate_dlrm

#: fused knobs tried when ``tune_knobs=auto`` and the placement is planned (only knobs left at their defaults are
#: varied).  slice_wgs 1 (every workgroup puts its own output) vs 8 (one put per 8 workgroups: fewer, larger
#: puts, less issue overhead, later first byte); tile_order and persistent_grid keep the paper's choices
#: (remote-first, docs/sources.md S49; one program per tile) to hold the tuning to two extra simulations per run.
TUNE_GRID = ({"slice_wgs": 1}, {"slice_wgs": 8})
#: candidates whose iteration times differ by less than this (relative) tie; the first (plan, knob) order wins.
#: The flow solver's two paths agree within 1e-9 (simfuse/network/flows.py), so a smaller difference is round-off.
TIE_REL = 1e-9
#: the rest of the knob grid is simulated only where the first point's GPU-initiated post queues were busy for at
#: least this share of the iteration (``DLRMExtras.put_post_share``).  Measured (experiments/bench/knob_screen.py,
#: experiments/results/knob_screen.csv: three MLPerf DLRM-DCNv2 files, 1-1,024 H100 nodes, put_post_us
#: 0.005-0.1, 165 points): below a share of 0.1 (94 points) the second point was at most 0.05% faster; every gain
#: above 1% (58 points, up to 2.6x: posting is then the fused step's bottleneck) came at a share of 0.156 or more.
#: A screen, not a bound: a model whose fused kernel is a small part of its step would saturate its queues at a
#: smaller share
KNOB_SCREEN_POST_SHARE = 0.1
#: a planned DLRM point's fused simulation takes at least this many times its baseline's wall time (its kernels
#: push to every peer wave by wave): MLPerf DLRM-DCNv2, 2-core VM, 2026-12-07: 6x at 128 nodes (1.3 / 0.21 s),
#: 17x at 4 nodes (4.6 / 0.26 s); what decides whether its candidates go to the workers before one ran
FUSED_PER_BASELINE = 5.0


def _grid_applies(res) -> bool:
    """Whether the knob grid can move a fused result of this shape at all.  Not when the fused embedding kernel
    has more waves than :data:`~simfuse.fused.base.MAX_PUSH_WAVES`: it then pushes once per macro-wave of at least
    two waves (>= 2 x 1,056 workgroups on an H200), and a slice of at most ``max(slice_wgs)`` = 8 workgroups
    changes only what a macro-wave boundary holds back (< 8 workgroups per run crossing it), far below the
    coarsening's own resolution -- while each grid point is a full simulation (the cost that kept 1,024 nodes
    from finishing)."""
    from ..fused.base import MAX_PUSH_WAVES

    return res.extras.fused_waves <= MAX_PUSH_WAVES


def _tuning_matters(res) -> bool:
    """Whether the rest of :data:`TUNE_GRID` is worth simulating after its first point gave ``res``: the grid
    applies (:func:`_grid_applies`) and the first point kept the GPU-initiated post queues busy for at least
    :data:`KNOB_SCREEN_POST_SHARE` of the iteration.  Larger slices change one thing: fewer puts, so less posting
    (a wave's slices to one destination leave as one flow whatever their size, and every wave of 8 or more
    workgroups pays the put issue overhead either way); where posting is a small share of the step, fewer posts
    cannot buy much, and later first bytes cost (measured: experiments/bench/knob_screen.py)."""
    return _grid_applies(res) and res.extras.put_post_share >= KNOB_SCREEN_POST_SHARE


def _retune_knobs(knobs, ex) -> list:
    """The knob grid's other points around ``knobs`` (a tuned choice): the :data:`TUNE_GRID` keys the run left at
    their defaults, in grid order, those equal to ``knobs`` left out."""
    defaults = type(ex.knobs)()
    out = []
    for pt in TUNE_GRID:
        free = {k: v for k, v in pt.items() if getattr(ex.knobs, k) == getattr(defaults, k)}
        kn = dataclasses.replace(knobs, **free)
        if kn != knobs and kn not in out:
            out.append(kn)
    return out


def _expected_s(done: dict, keys: list) -> float:
    """How long a simulation of the stage ``keys`` is expected to take: the longest so far, a fused one
    :data:`FUSED_PER_BASELINE` times a baseline while only baselines ran (a baseline of 0.1 s opens a run whose
    fused simulations take seconds)."""
    fused = any(k[0] == "fused" for k in keys)
    return max(r.wall_s * (FUSED_PER_BASELINE if m == "baseline" and fused else 1.0)
               for (m, _i, _j), r in done.items())


def _dlrm_one(spec, system, nodes, g, mode, sim_mode, seed, knobs, tuner, plan, progress=None):
    """One DLRM simulation in a worker process (:mod:`~simfuse.workloads.parallel`): the result without its
    simulator objects, which do not cross processes (a run that records a trace does not use workers)."""
    from .dlrm import simulate_dlrm

    r = simulate_dlrm(spec, system, nodes, gpus_per_node=g, mode=mode, sim_mode=sim_mode, seed=seed, knobs=knobs,
                      tuner=tuner, plan=plan, progress=progress)
    r.sim = r.net = None
    return r


def _plan_key(plan) -> tuple:
    """What a plan places where (two plans with equal keys simulate alike)."""
    return tuple((t.table, t.sharding, tuple(t.ranks), t.dim_per_shard) for t in plan.tables)


def _simulate_chosen(spec, system, nodes, g, m, ex, sim_mode, seed, record, tuner, c, progress):
    """Mode ``m`` with the plan and knobs an earlier run chose (``c``): an interval's draw."""
    best = simulate_dlrm(spec, system, nodes, gpus_per_node=g, mode=m, sim_mode=sim_mode, seed=seed,
                         record=record, record_usage=record, knobs=c.knobs, tuner=tuner, plan=c.plan,
                         progress=progress)
    points = 1
    if c.tuned and _tuning_matters(best):
        # knobs the point estimate tuned are tuned again on this run's inputs, as a deployment tunes them on
        # its own hardware: a draw that makes every put dear (gpu_initiated.put_post_us at its range's top)
        # favours fewer, larger puts; keeping the nominal choice there halved the fused step's speed
        for kn in _retune_knobs(c.knobs, ex):
            r = simulate_dlrm(spec, system, nodes, gpus_per_node=g, mode=m, sim_mode=sim_mode, seed=seed,
                              record=record, record_usage=record, knobs=kn, tuner=tuner, plan=c.plan,
                              progress=progress)
            points += 1
            if r.iteration_time_s < best.iteration_time_s * (1 - TIE_REL):
                best = r
    best.extras.tuned, best.extras.knob_points = c.tuned, points
    return best


def simulate_modes(spec, system, nodes, g, modes, ex, sim_mode, seed, record, tuner, chosen=None,
                         pool=None, progress=None) -> dict:
    """Each mode with the faster of two plans (forced from ``plan_file``, else the planner's plan for that mode and
    the one for the other mode) and, in fused mode with ``tune_knobs=auto`` and a planned placement, the fastest
    knobs of :data:`TUNE_GRID`.  ``chosen``: results of
    an earlier run whose plan and knobs each mode reuses as they are (no planning, no tuning).  ``pool``: a
    :class:`~simfuse.workloads.parallel.Pool` for the fused candidates (the same choice as the serial loop).
    ``progress``: a :class:`~simfuse.progress.Progress` told each simulation (and, within one, its events)."""
    from ..progress import Progress
    from ..spec.workload import DLRMSettings
    from .plan_file import load_plan
    from .planner import plan_tables

    progress = progress or Progress()
    out = {}
    own_plans: dict = {}  # mode -> the planner's plan for it (planned once, shared by both modes' candidates)

    def planned(mode):
        if mode not in own_plans:
            own_plans[mode] = plan_tables(spec, system, nodes, g, mode)
        return own_plans[mode]

    if chosen is not None:  # an interval's run: each mode's plan as the point estimate chose it
        return {m: _simulate_chosen(spec, system, nodes, g, m, ex, sim_mode, seed, record, tuner, chosen[m], progress)
                for m in modes}

    plan_file = ex.settings_of(DLRMSettings).plan_file
    cands = {}  # mode -> (candidate plans, knob grid, knobs per grid point)
    for m in modes:
        plan = load_plan(plan_file, spec, system, nodes, g, m) if plan_file else None
        grid = [{}]
        if m == "fused" and ex.tune_knobs == "auto" and spec.placement == "planned":
            defaults = type(ex.knobs)()
            grid = [{k: v for k, v in pt.items() if getattr(ex.knobs, k) == getattr(defaults, k)} for pt in TUNE_GRID]
            grid = [dict(t) for t in dict.fromkeys(tuple(sorted(pt.items())) for pt in grid)]
        # each mode also tries the other mode's plan: plans are chosen on estimates, so the plan made for one
        # mode can simulate faster in the other.  Both modes get the same two candidates (a fair comparison:
        # fusing must not win for want of a plan, nor lose for want of one), whichever modes were asked for.
        plans = [plan]
        if plan is None and spec.placement == "planned":
            other_mode = "fused" if m == "baseline" else "baseline"
            own, other = planned(m), planned(other_mode)
            plans = [own]
            if _plan_key(other) != _plan_key(own):
                plans.append(dataclasses.replace(other, mode=m, candidate=f"{other_mode}:{other.candidate}"))
        cands[m] = (plans, grid, [dataclasses.replace(ex.knobs, **pt) for pt in grid])

    def what(m, i, j):
        plans, grid, _knobs = cands[m]
        return m + (f", plan {i + 1}/{len(plans)}" if len(plans) > 1 else "") + "".join(
            f", {k} {v}" for k, v in grid[j].items())

    def one(m, i, j):
        plans, _grid, knobs = cands[m]
        progress.doing(what(m, i, j))
        r = simulate_dlrm(spec, system, nodes, gpus_per_node=g, mode=m, sim_mode=sim_mode, seed=seed,
                          record=record, record_usage=record, knobs=knobs[j], tuner=tuner, plan=plans[i],
                          progress=progress)
        progress.advance()
        return r

    # an upper bound: the knob grid stops early where tuning cannot matter (_tuning_matters)
    progress.begin("simulation", sum(len(c[0]) * len(c[1]) for c in cands.values()), up_to=True)

    done: dict = {}  # (mode, plan index, grid index) -> result, computed ahead in workers
    n_first = sum(len(c[0]) for c in cands.values())
    if pool is not None and not record and pool.workers > 1 and n_first > 1:
        # the first candidate here (its time says whether workers pay; a run the guard expects to be long skips
        # this), then every mode's other first-grid candidates together, then the knob points of the plans whose
        # first result says tuning matters: exactly what the selection below asks for when the plans agree (the
        # usual case); it computes any it misses
        first = [(m, i, 0) for m in modes for i in range(len(cands[m][0]))]
        if not pool.long_run():
            m0 = modes[0]
            done[(m0, 0, 0)] = one(m0, 0, 0)
            first = first[1:]
        for stage in (first, None):
            keys = stage if stage is not None else [
                (m, i, j) for m in modes for i in range(len(cands[m][0])) for j in range(1, len(cands[m][1]))
                if _tuning_matters(done[(m, i, 0)])]
            if not keys:
                break
            # a stage not worth the workers runs here, in the order the selection below would run it
            if done and not pool.parallel(len(keys), _expected_s(done, keys)):
                done.update((k, one(*k)) for k in keys)
                continue
            tasks = [(spec, system, nodes, g, m, sim_mode, seed, cands[m][2][j], tuner, cands[m][0][i])
                     for m, i, j in keys]
            progress.doing(f"{len(keys)} in {min(pool.workers, len(keys))} worker processes")
            done.update(zip(keys, pool.map(_dlrm_one, tasks, progress=progress), strict=True))
    for m in modes:
        plans, grid, _knobs = cands[m]
        best, points = None, {}  # points: grid points simulated per plan index
        for i in range(len(plans)):
            first = None
            for j in range(len(grid)):
                if j and not _tuning_matters(first):
                    break
                r = done.get((m, i, j))
                if r is None:
                    r = one(m, i, j)
                first = first or r
                points[i] = j + 1
                if plans[i] is None:  # plan once per mode, reuse for every grid point
                    plans[i] = r.extras.plan
                # a later candidate wins only by more than round-off: candidates that tie (the knob grid often
                # does, to 1e-16) keep the first, so the choice (and every run an interval makes with it) does not
                # hang on the last bit of a rate solve
                if best is None or r.iteration_time_s < best.iteration_time_s * (1 - TIE_REL):
                    best, best_i = r, i
        # tuned: the knobs are the grid's to choose (an interval's draw tunes them again where its own inputs make
        # the grid matter); knob_points: how many of the grid's points the chosen plan simulated
        best.extras.tuned = len(grid) > 1 and _grid_applies(best)
        best.extras.knob_points = points[best_i]
        out[m] = best
    return out
