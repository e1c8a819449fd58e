"""TwrwEmbeddingPush's closed form (slice ranges, per-range reducer counts) against the per-workgroup model.

The reference below is the per-workgroup implementation the closed form replaced (PushEngine over the kernel's
workgroups, a count per reducer position): DLRM planned runs with table-row-wise shards must give the same
iteration times with either, in full simulation and on the fast path."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simfuse.collectives import Layout
from simfuse.costs import KernelWork
from simfuse.fused import base, twrw
from simfuse.fused.base import PushEngine, _slices, fused_work, start_puts
from simfuse.fused.knobs import FusedKnobs
from simfuse.network import Fabric
from simfuse.spec import workload_from_dict
from simfuse.system import System
from simfuse.workloads.dlrm import simulate_dlrm
from simfuse.workloads.plan_file import load_plan

from ..conftest import make_topology


def _reference_member_process(self, ctx, inst, entity, rank, knobs):
    """The per-workgroup TwrwEmbeddingPush.member_process (before the closed form)."""
    env = ctx.sim.env
    inst.enter(entity)
    if self.t == 0:
        inst.start(entity)
        return env.now
    topology, g = ctx.topology, self.layout.gpus_per_node
    gi, dev = topology.gpu_initiated, topology.device
    symmetric = ctx.fabric.symmetric
    reduce_s = g * max(1, int(knobs.slice_wgs)) * self.wg_bytes / (
        dev.hbm_bw_bytes_per_s * dev.hbm_efficiency / dev.compute_units)
    tag = f"{self.name}:rail"
    batch = -(-self.Q // twrw.MAX_STAGE2_PUTS)
    state = inst.__dict__.setdefault("twrw_state", {})

    def reducer_state(r):
        s = state.get(r)
        if s is None:
            s = state[r] = {"count": np.zeros(self.Q, dtype=np.int64), "reduced": 0, "procs": [],
                            "done": env.event(), "ready": [], "n_ready": 0}
        return s

    def stage2(r, q):
        yield env.timeout(reduce_s)
        owners = self.owners(r, q)
        away = owners != r
        if away.any():
            yield env.timeout(gi.put_issue_s)
            uo, inv = np.unique(owners[away], return_inverse=True)
            sizes = np.bincount(inv.reshape(-1), minlength=len(uo)) * self.wg_bytes
            for grp, done in start_puts(ctx.net, ctx.fabric, gi, r, uo, sizes, tag):
                inst.register(grp, done)

    def land(reducers, q):
        for r in np.unique(reducers).tolist():
            rs = reducer_state(r)
            qq = q[reducers == r]
            np.add.at(rs["count"], qq, 1)
            uq = np.unique(qq)
            full = uq[rs["count"][uq] == g]
            if len(full):
                rs["reduced"] += len(full)
                rs["ready"].append(full)
                rs["n_ready"] += len(full)
                if rs["n_ready"] >= batch or rs["reduced"] == self.Q:
                    rs["procs"].append(env.process(stage2(r, np.concatenate(rs["ready"]))))
                    rs["ready"], rs["n_ready"] = [], 0
                if rs["reduced"] == self.Q:
                    env.process(twrw._all_then(env, list(rs["procs"]), rs["done"]))

    _, q_of = self._wgs(rank)
    eng = None

    def on_arrival(dsts, slices, _t, _src):
        sl = np.asarray(slices, dtype=np.int64)
        wgs = np.concatenate([eng.wgs_of_slice[s] for s in sl.tolist()])
        reducers = np.full(len(wgs), rank) if symmetric else eng.dst[wgs]
        land(reducers, q_of[wgs])

    eng = PushEngine(ctx.sim, ctx.fabric, ctx.net, self, ctx.cost, knobs, topology, rank, on_arrival=on_arrival,
                     on_transfer=inst.register)
    by_slice = np.argsort(eng.slice_of, kind="stable")
    cuts = np.searchsorted(eng.slice_of[by_slice], np.arange(len(eng.slice_left) + 1))
    eng.wgs_of_slice = [by_slice[cuts[i]:cuts[i + 1]] for i in range(len(cuts) - 1)]
    occ = knobs.effective_occupancy_loss(topology)
    res = yield env.process(eng.process(fused_work(self, knobs, ctx.fabric, rank), occ, wait=False))
    done = reducer_state(rank)["done"]

    def finish():
        yield done
        inst.start(entity)

    env.process(finish())
    return res[0]


# ---------------------------------------------------------------- unit level: the schedule and the counting

@settings(max_examples=60, deadline=None)
@given(g=st.integers(1, 4), N=st.integers(1, 3), t=st.integers(1, 3), kb=st.integers(1, 5), s=st.integers(1, 9),
       natural=st.booleans(), rank_seed=st.integers(0, 1000))
def test_schedule_closed_form_matches_the_workgroup_arrays(g, N, t, kb, s, natural, rank_seed):
    """kappas, F and the issue overheads against the per-workgroup order, slices and positions."""
    lay = Layout(N, g)
    n = lay.n
    bags = 2
    B = n * kb * bags
    tables = np.full(n, t)
    rank = rank_seed % n
    work = KernelWork("embedding_bag", t * B // bags, 1.0, 1.0)
    op = twrw.TwrwEmbeddingPush(work, lay, tables, rank, B, bags, 8, 4)
    topo = System.from_topology(make_topology(gpus_per_node=g, nics_per_node=g)).topology
    fabric = Fabric(topo, N, gpus_per_node=g, symmetric=False)
    knobs = FusedKnobs(slice_wgs=s, tile_order="natural" if natural else "remote_first")
    sched = twrw._TwrwStage1(op, rank, fabric, topo, knobs)
    reducer, q = op._wgs(rank)
    order = op.order(rank, fabric, knobs.tile_order, s)
    slice_of = _slices(order, reducer, s)
    W = len(order)
    assert W == sched.W
    pos = np.empty(W, dtype=np.int64)
    pos[order] = np.arange(W)
    n_sl = int(slice_of.max()) + 1
    last = np.full(n_sl, -1)
    np.maximum.at(last, slice_of, pos)
    sl_dst = np.zeros(n_sl, dtype=np.int64)
    sl_dst[slice_of] = reducer
    # per reducer offset: its slices in execution order, with the positions (q) each covers
    for h in range(g):
        r = int(sched.reducers[h])
        mine = np.flatnonzero(sl_dst == r)
        mine = mine[np.argsort(last[mine])]
        assert len(mine) == sched.K
        for kappa, sid in enumerate(mine.tolist()):
            qs = np.sort(q[slice_of == sid])
            # F: slice kappa covers F(kappa + 1) - F(kappa) positions; the same set for every sender of the node
            assert len(qs) == sched.F(kappa + 1) - sched.F(kappa)
            cnt = sched.owner_counts([(kappa, kappa + 1)])
            own = op.owners(r, qs) // g
            np.testing.assert_array_equal(cnt, np.bincount(own, minlength=N))
        for p in range(W + 1):
            assert sched.kappas(p)[h] == int(np.sum(last[mine] < p))
    # the wave overhead: the costliest issue among the slices ending in [lo, hi)
    issue = np.array(sched.issue)[[int(np.flatnonzero(sched.reducers == d)[0]) for d in sl_dst]]
    for lo in range(0, W, 3):
        for hi in sorted({lo + 1, min(W, lo + 5), min(W, lo + g * s), min(W, lo + g * kb), W}):
            ends = (last >= lo) & (last < hi)
            assert sched.wave_overhead_s(lo, hi) == (issue[ends].max() if ends.any() else 0.0)


@settings(max_examples=60, deadline=None)
@given(K=st.integers(1, 30), g=st.integers(1, 4), seed=st.integers(0, 10_000), per_call=st.integers(1, 3))
def test_coverage_matches_a_count_array(K, g, seed, per_call):
    """Ranges arriving g times each, in random order and grouping: the ranges reported full are exactly the
    positions whose count reached g in that call."""
    rng = np.random.default_rng(seed)
    ranges = []
    for _ in range(g):
        cuts = np.unique(np.concatenate([[0, K], rng.integers(0, K + 1, size=rng.integers(0, 5))]))
        ranges += list(zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True))
    rng.shuffle(ranges)
    cov, count = twrw._Coverage(K, g), np.zeros(K, dtype=int)
    seen = np.zeros(K, dtype=bool)
    for i in range(0, len(ranges), per_call):
        call = ranges[i:i + per_call]
        before = count == g
        for a, b in call:
            count[a:b] += 1
        got = np.zeros(K, dtype=bool)
        full = cov.add(call)
        for a, b in full:
            assert not got[a:b].any()
            got[a:b] = True
        assert all(b0 < a1 for (_, b0), (a1, _) in zip(full, full[1:], strict=False))  # disjoint, ordered
        np.testing.assert_array_equal(got, (count == g) & ~before)
        seen |= got
    assert seen.all() and (count == g).all()
    assert cov.starts == [0]  # everything done: one segment


def test_coverage_ranges_are_sorted_segments():
    cov = twrw._Coverage(10, 2)
    assert cov.add([(2, 5)]) == []
    assert cov.add([(0, 3), (3, 6)]) == [(2, 5)]
    assert cov.add([(0, 2), (5, 10)]) == [(0, 2), (5, 6)]
    assert cov.add([(6, 10)]) == [(6, 10)]


# ---------------------------------------------------------------- DLRM runs: closed form == per-workgroup model

D, EB = 32, 4


def _spec(tables, batch):
    return workload_from_dict({"name": "t", "kind": "dlrm", "global_batch": batch, "dense_features": 13,
                               "bottom_mlp": [64, D], "top_mlp": [64, 1], "interaction": {"kind": "dot"},
                               "embedding": {"dim": D, "placement": "planned", "memory_fraction": 0.5,
                                             "optimizer_state_factor": 1.0,
                                             "tables": [{"rows": r, "pooling": p} for r, p in tables]}}, "<test>")


def _twrw_plan(tmp_path, spec, system, nodes, g, n_twrw):
    """Tables 0..n_twrw-1 table-row-wise on node (i mod nodes), the rest table-wise round-robin."""
    rows = []
    for i in range(len(spec.tables)):
        if i < n_twrw:
            node = i % nodes
            rows.append((f"t{i}", "table_row_wise", f"{node * g}-{node * g + g - 1}"))
        else:
            rows.append((f"t{i}", "table_wise", str(i % (nodes * g))))
    p = tmp_path / "plan.csv"
    pd.DataFrame(rows, columns=["table", "sharding", "ranks"]).to_csv(p, index=False)
    return load_plan(p, spec, system, nodes, g, "fused")


def _both(monkeypatch, spec, system, nodes, g, plan, knobs, sim_mode):
    kw = {"gpus_per_node": g, "mode": "fused", "sim_mode": sim_mode, "plan": plan, "knobs": knobs}
    calls = []
    real = twrw.TwrwEmbeddingPush.member_process

    def counted(self, ctx, inst, entity, rank, kn):
        calls.append(self.t)
        return (yield from real(self, ctx, inst, entity, rank, kn))

    with monkeypatch.context() as m:
        m.setattr(twrw.TwrwEmbeddingPush, "member_process", counted)
        new = simulate_dlrm(spec, system, nodes, **kw).iteration_time_s
    assert sum(calls) > 0  # the hierarchical push ran, with shards
    with monkeypatch.context() as m:
        m.setattr(twrw.TwrwEmbeddingPush, "member_process", _reference_member_process)
        ref = simulate_dlrm(spec, system, nodes, **kw).iteration_time_s
    return new, ref


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(g=st.sampled_from([1, 2, 4]), nodes=st.integers(1, 3), batch_per_rank=st.sampled_from([4, 12, 40, 96]),
       n_twrw=st.integers(1, 3), slice_wgs=st.sampled_from([1, 3, 8, 1000]),
       tile_order=st.sampled_from(["remote_first", "natural"]), sim_mode=st.sampled_from(["full", "classes"]),
       poolings=st.lists(st.integers(1, 30), min_size=3, max_size=4))
def test_dlrm_iteration_equals_the_per_workgroup_model(tmp_path_factory, monkeypatch, g, nodes, batch_per_rank,
                                                       n_twrw, slice_wgs, tile_order, sim_mode, poolings):
    tmp_path = tmp_path_factory.mktemp("plan")
    system = System.from_topology(make_topology(gpus_per_node=g, nics_per_node=g))
    spec = _spec([(5000 + 1000 * i, p) for i, p in enumerate(poolings)], batch_per_rank * nodes * g)
    plan = _twrw_plan(tmp_path, spec, system, nodes, g, min(n_twrw, len(poolings)))
    knobs = FusedKnobs(slice_wgs=slice_wgs, tile_order=tile_order)
    new, ref = _both(monkeypatch, spec, system, nodes, g, plan, knobs, sim_mode)
    assert new == pytest.approx(ref, rel=1e-12, abs=0)


@pytest.mark.parametrize("sim_mode", ["full", "classes"])
def test_many_waves_equal_the_per_workgroup_model(tmp_path, monkeypatch, sim_mode):
    """Kernels of more waves than MAX_PUSH_WAVES / MAX_TWRW_PUSH_WAVES allow, with the coarsening off (one push
    point per wave, as the per-workgroup model): still the same iteration."""
    g, nodes = 4, 2
    system = System.from_topology(make_topology(gpus_per_node=g, nics_per_node=g))
    spec = _spec([(5000, 20), (6000, 3), (7000, 9)], 32768)  # 4,096 bags per rank: 32 waves per table shard
    plan = _twrw_plan(tmp_path, spec, system, nodes, g, 2)
    monkeypatch.setattr(base, "MAX_PUSH_WAVES", 4)
    monkeypatch.setattr(twrw, "MAX_TWRW_PUSH_WAVES", 10**9)
    coarse = simulate_dlrm(spec, system, nodes, gpus_per_node=g, mode="fused", sim_mode=sim_mode,
                           plan=plan).iteration_time_s
    monkeypatch.setattr(base, "MAX_PUSH_WAVES", 10**9)
    for s in (1, 8):
        new, ref = _both(monkeypatch, spec, system, nodes, g, plan, FusedKnobs(slice_wgs=s), sim_mode)
        assert new == pytest.approx(ref, rel=1e-12, abs=0)
    # coarsened to 4 macro-waves: pushes leave up to a macro-wave late, never early
    assert coarse >= simulate_dlrm(spec, system, nodes, gpus_per_node=g, mode="fused", sim_mode=sim_mode,
                                   plan=plan).iteration_time_s * (1 - 1e-12)
