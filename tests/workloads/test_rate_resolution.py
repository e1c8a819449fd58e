"""The run setting ``rate_resolution_ns`` reaches the flow network of every workload simulation (and survives a
cost model swapped in for an interval run); 0 is the exact fluid model."""

from __future__ import annotations

from pathlib import Path

import pytest

from simfuse.errors import SpecError
from simfuse.fused.knobs import RATE_RESOLUTION_NS, parse_execution
from simfuse.network import flows
from simfuse.spec import load_workload
from simfuse.system import System
from simfuse.workloads.dlrm import simulate_dlrm
from simfuse.workloads.run import simulate_workload

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "models/dlrm_synthetic.yaml"
TOPOLOGY = ROOT / "topologies/h100_nvl8_ib_ndr.yaml"


@pytest.fixture
def grid_on_every_problem(monkeypatch):
    """The grid on every rate problem, however small (the default keeps small ones exact), so this small run
    feels it."""
    monkeypatch.setattr(flows, "GRID_MIN_ENTRIES", 0)


def _times(res) -> dict:
    return {m: r.iteration_time_s for m, r in res.items()}


def test_the_setting_reaches_the_network_and_zero_is_exact(grid_on_every_problem):
    spec, system = load_workload(MODEL), System.load(TOPOLOGY)
    exact = simulate_workload(spec, system, 2, execution=parse_execution({"rate_resolution_ns": 0,
                                                                          "uncertainty": "none"}))
    grid = simulate_workload(spec, system, 2, execution=parse_execution({"uncertainty": "none"}))
    coarse = simulate_workload(spec, system, 2, execution=parse_execution({"rate_resolution_ns": 5000,
                                                                           "uncertainty": "none"}))
    direct = simulate_dlrm(spec, system.with_rate_resolution(0.0), 2, mode="fused", sim_mode="auto")
    assert exact["fused"].iteration_time_s == direct.iteration_time_s
    assert _times(grid) != _times(exact) or _times(coarse) != _times(exact)  # the grid is felt
    # a grid of r moves each step by at most a few grid points here (a handful of re-sharings on its path)
    for m in exact:
        assert abs(coarse[m].iteration_time_s - exact[m].iteration_time_s) <= 20 * 5e-6


def test_a_cost_model_swapped_in_keeps_the_resolution(grid_on_every_problem):
    spec, system = load_workload(MODEL), System.load(TOPOLOGY).with_rate_resolution(0.0)
    plain = simulate_dlrm(spec, system, 2, mode="fused")
    swapped = simulate_dlrm(spec, system, 2, mode="fused", cost=system.cost)
    assert swapped.iteration_time_s == plain.iteration_time_s


def test_the_default_is_the_documented_grid_and_bad_values_are_refused():
    assert parse_execution({}).rate_resolution_ns == RATE_RESOLUTION_NS == flows.RATE_RESOLUTION_S * 1e9
    assert System.load(TOPOLOGY).rate_resolution_s == flows.RATE_RESOLUTION_S
    for bad in (-1, 1e9, "x"):
        with pytest.raises(SpecError) as exc:
            parse_execution({"rate_resolution_ns": bad})
        assert exc.value.field == "rate_resolution_ns"


def test_the_guard_prices_an_exact_run_above_the_grids():
    from simfuse.guard import DLRM_EXACT_RATE_FACTOR, estimate_run
    from simfuse.spec import load_topology
    from simfuse.workloads.run import scaled_spec

    topo = load_topology(TOPOLOGY)
    spec = load_workload(ROOT / "models/dlrm_dcnv2_mlperf.yaml")
    grid, exact = (parse_execution({"uncertainty": "none", "rate_resolution_ns": r}) for r in (250, 0))
    e_grid = estimate_run(scaled_spec(spec, 4, 8, grid), topo, 4, 8, "auto", grid, 1).seconds
    e_exact = estimate_run(scaled_spec(spec, 4, 8, exact), topo, 4, 8, "auto", exact, 1).seconds
    assert DLRM_EXACT_RATE_FACTOR > 1
    assert e_grid < e_exact < e_grid * DLRM_EXACT_RATE_FACTOR
