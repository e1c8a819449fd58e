"""The knob grid's screen (simfuse/workloads/dlrm_candidates.py): the rest of the grid is simulated only where the
first point kept the GPU-initiated post queues busy for a real share of the step."""

import dataclasses

import numpy as np
import pytest

from simfuse.collectives.posting import PostQueue, PostRule
from simfuse.fused.knobs import ExecutionSpec, FusedKnobs
from simfuse.system import System
from simfuse.workloads import dlrm_candidates as cands
from simfuse.workloads.dlrm import simulate_dlrm
from simfuse.workloads.run import _simulate_once, simulate_workload
from tests.workloads.small_models import planned_dlrm

_dlrm = planned_dlrm


def _system(root, put_post_us: float) -> System:
    system = System.load(root / "topologies" / "h100_nvl8_ib_ndr.yaml")
    gi = dataclasses.replace(system.nominal.gpu_initiated, put_post_s=put_post_us * 1e-6)
    return system.with_nominal(system.nominal.replace(gpu_initiated=gi))


def test_post_queue_counts_its_busy_time():
    q = PostQueue(PostRule(0.5))
    q.post(0.0, np.array([3, 2]))  # 5 messages from t=0
    q.post(1.0, np.array([1]))     # queued behind them: busy, not waiting, is what counts
    q.post(10.0, np.array([4]))    # after an idle gap
    assert q.busy_s == pytest.approx(0.5 * 10) and q.free_at == pytest.approx(12.0)


def test_share_is_posting_time_over_the_step(root):
    """The messages a fused run posts do not depend on what posting one costs: the busiest queues' time is
    exactly proportional to ``put_post_us`` (while the step itself may grow)."""
    spec = _dlrm()
    busy = []
    for post_us in (0.01, 0.04):
        r = simulate_dlrm(spec, _system(root, post_us), 2, gpus_per_node=8, mode="fused")
        busy.append(r.extras.put_post_share * r.iteration_time_s)
    assert busy[0] > 0 and busy[1] == pytest.approx(4 * busy[0], rel=1e-12)
    none = simulate_dlrm(spec, _system(root, 0.0), 2, gpus_per_node=8, mode="fused")
    assert none.extras.put_post_share == 0.0
    one_node = simulate_dlrm(spec, _system(root, 0.04), 1, gpus_per_node=8, mode="fused")
    assert one_node.extras.put_post_share == 0.0  # NVLink stores post nothing


def _fused_sims(monkeypatch):
    knobs = []
    orig = cands.simulate_dlrm

    def counted(*a, **k):
        if k.get("mode") == "fused":
            knobs.append(k["knobs"].slice_wgs)
        return orig(*a, **k)

    monkeypatch.setattr(cands, "simulate_dlrm", counted)
    return knobs


@pytest.mark.parametrize("post_us", [0.005, 0.5])
def test_grid_runs_only_where_posting_matters(root, monkeypatch, post_us):
    """Cheap posts (the H100 file's 5 ns): each plan simulates the grid's first point only; dear posts (0.5 us):
    both points, and the run keeps the faster -- as fast as the better of the two simulated on their own."""
    system = _system(root, post_us)
    ex = ExecutionSpec(mode="fused", uncertainty="none")
    seen = _fused_sims(monkeypatch)
    res = simulate_workload(_dlrm(), system, 2, execution=ex, workers=1)["fused"]
    first = res.extras.put_post_share if res.extras.knobs.slice_wgs == 1 else None
    assert res.extras.tuned  # the knobs are the grid's to choose either way (an interval's draw may retune)
    if post_us < 0.01:
        assert seen == [1] * len(seen) and res.extras.knob_points == 1
        assert first is not None and first < cands.KNOB_SCREEN_POST_SHARE
    else:
        assert sorted(set(seen)) == [1, 8] and res.extras.knob_points == 2
        plan = res.extras.plan
        alone = [simulate_dlrm(_dlrm(), system, 2, gpus_per_node=8, mode="fused", plan=plan,
                               knobs=FusedKnobs(slice_wgs=s)).iteration_time_s for s in (1, 8)]
        assert res.iteration_time_s == min(alone) and res.extras.knobs.slice_wgs == 8


def test_a_draw_with_dear_posts_retunes_after_a_screened_point(root, monkeypatch):
    """The point estimate skipped the grid (cheap posts), yet its knobs stay the grid's: a draw whose own posts
    are dear simulates the other point (simfuse.workloads.dlrm_candidates._simulate_chosen)."""
    ex = ExecutionSpec(mode="fused", uncertainty="none")
    point = simulate_workload(_dlrm(), _system(root, 0.005), 2, execution=ex, workers=1)
    assert point["fused"].extras.knob_points == 1 and point["fused"].extras.tuned
    seen = _fused_sims(monkeypatch)
    draw = _simulate_once(_dlrm(), _system(root, 0.5), 2, execution=ex, chosen={"fused": point["fused"].extras})
    assert seen == [1, 8] and draw["fused"].extras.knobs.slice_wgs == 8 and draw["fused"].extras.knob_points == 2
