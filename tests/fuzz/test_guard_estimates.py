"""The cost guard's estimates against the measured wall time of the expensive cases (within 3x either way).

Slow: each case runs for seconds to tens of seconds.  The estimate is computed first, then the work is run and
timed; the assertion is on the ratio, the guard's contract, not on the time itself."""

from __future__ import annotations

import time

import pytest

from . import chakra_cases as C
from .conftest import ROOT
from .nccl_cases import all_reduce_log

pytestmark = pytest.mark.slow
TOPO = ROOT / "topologies" / "h200_nvl8_ib_ndr.yaml"


@pytest.fixture(scope="module")
def system():
    from simfuse.system import System

    return System.load(TOPO)


def _within_3x(estimate_s: float, wall_s: float) -> None:
    assert wall_s / 3 <= estimate_s <= wall_s * 3, f"estimate {estimate_s:.2f} s, measured {wall_s:.2f} s"


@pytest.mark.parametrize("op,nodes,size", [("all_gather", 16, 1 << 20), ("all_to_all", 32, 1 << 20),
                                           ("reduce_scatter", 16, 1 << 26), ("all_reduce", 16, 4096)])
def test_collective_full(system, op, nodes, size):
    from simfuse.collectives import run_collective
    from simfuse.guard import estimate_collective_run

    est = estimate_collective_run(system.topology, op, nodes, 8, [size], "full").seconds
    t = time.perf_counter()
    run_collective(system.topology, nodes, op, size, mode="full")
    _within_3x(est, time.perf_counter() - t)


def test_llm_with_monte_carlo_draws(system):
    from simfuse.fused.knobs import parse_execution
    from simfuse.guard import estimate_run
    from simfuse.spec import load_workload
    from simfuse.workloads.run import scaled_spec, simulate_workload

    spec = load_workload(ROOT / "models" / "llm_tp_dp.yaml")
    ex = parse_execution({"uncertainty": "mc", "uncertainty_draws": 4, "mode": "both", "sim_mode": "auto"})
    est = estimate_run(scaled_spec(spec, 1, 8, ex), system.topology, 1, 8, "auto", ex).seconds
    t = time.perf_counter()
    simulate_workload(spec, system, 1, gpus_per_node=8, execution=ex, workers=1)
    _within_3x(est, time.perf_counter() - t)


@pytest.mark.parametrize("make,mode", [(lambda d: C.ring(d, 128, 64), "auto"),
                                       (lambda d: C.many_ranks(d, 256), "full")])
def test_chakra(system, tmp_path, make, mode):
    from simfuse.fused.knobs import parse_execution
    from simfuse.graph.chakra import import_et
    from simfuse.guard import estimate_graph
    from simfuse.workloads.run import simulate_graph

    graph = import_et(make(tmp_path / "t"), node_gpus=8)
    est = estimate_graph(graph, system.topology, mode).seconds
    t = time.perf_counter()
    simulate_graph(graph, system, execution=parse_execution({"sim_mode": mode, "uncertainty": "none"}))
    _within_3x(est, time.perf_counter() - t)


def test_fit_fabric(system, tmp_path):
    from simfuse.calibrate.fabric_fit import fit_fabric
    from simfuse.calibrate.nccl_tests import read_nccl_tests
    from simfuse.guard import estimate_fit_fabric

    p = tmp_path / "log.txt"
    p.write_text(all_reduce_log(50))
    log = read_nccl_tests(p)
    est = estimate_fit_fabric(log, system.topology).seconds
    t = time.perf_counter()
    fit_fabric(log, system.topology, force=True)
    _within_3x(est, time.perf_counter() - t)
