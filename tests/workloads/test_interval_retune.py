"""An interval's run keeps the point estimate's plans but tunes the fused knobs again on its own inputs, when the
point estimate tuned them: a draw that makes every GPU-posted put dear favours fewer, larger puts."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from simfuse.fused.knobs import parse_execution
from simfuse.spec import load_topology, load_workload
from simfuse.system import System
from simfuse.workloads.run import _simulate_once, scaled_spec

ROOT = Path(__file__).resolve().parents[2]
NODES = 2


@pytest.fixture(scope="module")
def setting():
    ex = parse_execution({"mode": "fused", "uncertainty": "none", "global_batch": 4096})
    spec = scaled_spec(load_workload(ROOT / "models/dlrm_dcnv2_mlperf.yaml"), NODES, 8, ex)
    topo = load_topology(ROOT / "topologies/h100_nvl8_ib_ndr.yaml")
    # gpu_initiated.put_post_us at its range's top (the topology file's uncertain: block)
    dear = topo.replace(gpu_initiated=dataclasses.replace(topo.gpu_initiated, put_post_s=0.1e-6))
    return ex, spec, System.from_topology(topo), System.from_topology(dear)


def test_a_draw_retunes_the_knobs_the_point_estimate_tuned(setting):
    ex, spec, nominal, dear = setting
    point = _simulate_once(spec, nominal, NODES, execution=ex)["fused"]
    assert point.extras.tuned and point.extras.knobs.slice_wgs == 1  # every workgroup puts its own output
    chosen = {"fused": point.extras}
    draw = _simulate_once(spec, dear, NODES, execution=ex, chosen=chosen)["fused"]
    kept = _simulate_once(spec, dear, NODES, execution=parse_execution(
        {"mode": "fused", "uncertainty": "none", "global_batch": 4096, "tune_knobs": "off", "slice_wgs": 1}),
        chosen=None)["fused"]
    assert draw.extras.knobs.slice_wgs == 8  # fewer, larger puts where every put is dear
    assert draw.iteration_time_s < kept.iteration_time_s * 0.95
    assert draw.extras.plan.tables == point.extras.plan.tables  # the plan stays the point estimate's


def test_untuned_knobs_stay_as_given(setting):
    _ex, spec, nominal, dear = setting
    ex = parse_execution({"mode": "fused", "uncertainty": "none", "global_batch": 4096, "tune_knobs": "off"})
    point = _simulate_once(spec, nominal, NODES, execution=ex)["fused"]
    draw = _simulate_once(spec, dear, NODES, execution=ex, chosen={"fused": point.extras})["fused"]
    assert not draw.extras.tuned and draw.extras.knobs == point.extras.knobs
