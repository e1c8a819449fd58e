"""The run-length push engine (:class:`RunPushEngine`, used by operator graphs) against the per-workgroup
:class:`PushEngine`: the same kernel end and the same last arrival, to the bit, over tile orders, slice sizes,
persistent grids and fabrics of a few ranks; macro-waves keep the kernel end and bound the push delay."""

import dataclasses

import numpy as np
import pytest

from simfuse.collectives import Layout
from simfuse.engine import Simulation
from simfuse.fused.base import FusedOp, PushEngine, RunPushEngine, fused_work, wg_runs
from simfuse.fused.knobs import FusedKnobs
from simfuse.fused.ops import EmbeddingAllToAll, GemmAllToAll
from simfuse.network import Fabric, FlowNetwork
from simfuse.system import System
from tests.conftest import make_topology

SYSTEM = System.from_topology(make_topology(), calibrated=False)


def _run(engine_cls, op, knobs, nodes, rank, symmetric, max_events=None):
    topo = SYSTEM.topology
    fabric = Fabric(topo, nodes, gpus_per_node=op.layout.gpus_per_node, symmetric=symmetric)
    sim = Simulation(seed=0)
    net = FlowNetwork(sim, fabric.capacities, fabric.names)
    eng = engine_cls(sim, fabric, net, op, SYSTEM.cost, knobs, topo, rank)
    if max_events is not None:
        import simfuse.fused.base as base

        old, base.MAX_PUSH_WAVES = base.MAX_PUSH_WAVES, max_events
    try:
        proc = sim.process(eng.process(fused_work(op, knobs, fabric, rank), 0.1))
        sim.run(until=proc)
    finally:
        if max_events is not None:
            base.MAX_PUSH_WAVES = old
    return proc.value, net.delivered_bytes


def _emb(nodes, g, B, T, bags=4):
    return EmbeddingAllToAll({"tables_per_gpu": T, "global_batch": B, "bags_per_wg": bags, "dim": 64,
                              "rows": 1000, "pooling": 8}, Layout(nodes, g))


@pytest.mark.parametrize("tile_order", ["remote_first", "natural"])
@pytest.mark.parametrize("slice_wgs", [1, 3, 8, 10**9])
@pytest.mark.parametrize("persistent_grid", [0, 7])
@pytest.mark.parametrize("nodes,g,B,T", [(2, 2, 4096, 3), (1, 4, 2048, 2), (3, 2, 6144, 1)])
def test_run_engine_equals_per_workgroup_engine(tile_order, slice_wgs, persistent_grid, nodes, g, B, T):
    op = _emb(nodes, g, B, T)
    kn = FusedKnobs(slice_wgs=slice_wgs, tile_order=tile_order, persistent_grid=persistent_grid)
    for rank in (0, nodes * g - 1):
        for symmetric in (False, True):
            a = _run(PushEngine, op, kn, nodes, rank, symmetric)
            b = _run(RunPushEngine, op, kn, nodes, rank, symmetric, max_events=10**9)  # wave by wave
            assert a == b


def test_closed_form_runs_equal_per_workgroup_runs():
    op = _emb(3, 2, 6144, 2)
    for tile_order in ("remote_first", "natural"):
        for rank in range(6):
            # the closed form against FusedOp's default (read off wg_destinations + order)
            a, b = wg_runs(op, rank, None, tile_order), FusedOp.wg_runs(op, rank, None, tile_order)
            assert (np.repeat(a[0], a[1]) == np.repeat(b[0], b[1])).all()
            assert (np.repeat(a[2], a[1]) == np.repeat(b[2], b[1])).all()


def test_generic_ops_run_the_same():
    op = GemmAllToAll({}, Layout(2, 2))
    kn = FusedKnobs(slice_wgs=2)
    assert _run(PushEngine, op, kn, 2, 1, False) == _run(RunPushEngine, op, kn, 2, 1, False, max_events=10**9)


def test_macro_waves_keep_kernel_end_and_bytes():
    op = _emb(2, 2, 2**16, 2)   # thousands of workgroups: many waves
    kn = FusedKnobs()
    (k_exact, end_exact), bytes_exact = _run(RunPushEngine, op, kn, 2, 0, False)
    (k_coarse, end_coarse), bytes_coarse = _run(RunPushEngine, op, kn, 2, 0, False, max_events=4)
    assert k_coarse == pytest.approx(k_exact, rel=1e-12)
    assert bytes_coarse == bytes_exact
    # pushes leave at most one macro-wave (a quarter of the kernel) late, never early; the last arrival moves by
    # about that much (1.27 macro-waves measured here: a comm-bound case, the flows share the links differently)
    assert end_exact <= end_coarse <= end_exact + 1.5 * k_exact / 4


def test_coarsened_waves_skip_the_tuning_grid():
    from simfuse.fused.base import MAX_PUSH_WAVES
    from simfuse.workloads.dlrm import DLRMExtras
    from simfuse.workloads.dlrm_candidates import KNOB_SCREEN_POST_SHARE, _grid_applies, _tuning_matters
    from simfuse.workloads.result import IterationResult

    r = IterationResult("fused", 0, 0, 0, "classes", 1, 0, 0.0)
    busy = KNOB_SCREEN_POST_SHARE  # posting busy enough for the grid to matter
    assert _tuning_matters(dataclasses.replace(r, extras=DLRMExtras(fused_waves=MAX_PUSH_WAVES, put_post_share=busy)))
    assert not _tuning_matters(dataclasses.replace(r, extras=DLRMExtras(fused_waves=MAX_PUSH_WAVES + 1,
                                                                        put_post_share=busy)))
    assert not _grid_applies(dataclasses.replace(r, extras=DLRMExtras(fused_waves=MAX_PUSH_WAVES + 1)))


@pytest.mark.parametrize("slice_wgs", [1, 3, 10**9])
@pytest.mark.parametrize("engine_cls", [PushEngine, RunPushEngine])
def test_every_slice_posts_one_put(monkeypatch, engine_cls, slice_wgs):
    """The per-destination post rule counts one message per slice (put), however the engine batches them into
    flows: the messages posted over the kernel are the off-node slices, ceil(run length / slice_wgs) per run of
    one destination (slice_wgs beyond the grid: one per destination)."""
    import simfuse.fused.base as base

    posted = {}
    real = base.start_puts

    def spy(net, fabric, gi, src, dsts, sizes, tag, messages=None):
        m = np.ones(len(dsts), dtype=np.int64) if messages is None else np.asarray(messages)
        cls = fabric.route_class(src, np.asarray(dsts))
        for d, k, c in zip(np.asarray(dsts).tolist(), m.tolist(), cls.tolist(), strict=True):
            if c > 1:  # off the node (route classes above INTRA)
                posted[d] = posted.get(d, 0) + k
        return real(net, fabric, gi, src, dsts, sizes, tag, messages)

    monkeypatch.setattr(base, "start_puts", spy)
    nodes, g = 3, 2
    op = _emb(nodes, g, 6144, 2)
    kn = FusedKnobs(slice_wgs=slice_wgs, tile_order="remote_first")
    _run(engine_cls, op, kn, nodes, 0, False, max_events=10**9)
    dst, cnt, _per = wg_runs(op, 0, Fabric(SYSTEM.topology, nodes, gpus_per_node=g), "remote_first")
    expect = {}
    for d, c in zip(dst.tolist(), cnt.tolist(), strict=True):
        if d // g != 0:
            expect[d] = expect.get(d, 0) + (1 if slice_wgs >= cnt.sum() else -(-c // slice_wgs))
    assert posted == expect


@pytest.mark.parametrize("slice_wgs", [1, 8])
def test_run_engine_equals_per_workgroup_engine_with_post_costs(slice_wgs):
    global SYSTEM
    saved = SYSTEM
    SYSTEM = System.from_topology(make_topology(gpu_initiated={"put_post_us": 0.3}), calibrated=False)
    try:
        op = _emb(2, 2, 4096, 3)
        kn = FusedKnobs(slice_wgs=slice_wgs, tile_order="remote_first")
        for symmetric in (False, True):
            assert _run(PushEngine, op, kn, 2, 0, symmetric) == _run(RunPushEngine, op, kn, 2, 0, symmetric,
                                                                   max_events=10**9)
    finally:
        SYSTEM = saved
