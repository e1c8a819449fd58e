"""The cost guard's count of simulated ranks for a DLRM run (``simulated_rank_count``) is the one the graph
builder uses: every rank, or one per (orbit or load) class."""

from __future__ import annotations

from pathlib import Path

import pytest

from simfuse.spec import load_workload
from simfuse.system import System
from simfuse.workloads.dlrm import build_dlrm_graph, simulated_rank_count

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("model, nodes", [("dlrm_dcnv2_mlperf", 2), ("dlrm_dcnv2_mlperf", 16),
                                          ("dlrm_dcnv2_mlperf", 32), ("dlrm_v1", 16), ("dlrm_dcnv2_tablewise", 32)])
@pytest.mark.parametrize("mode", ["baseline", "fused"])
def test_the_count_is_the_graph_builders(model, nodes, mode):
    spec, system = load_workload(ROOT / f"models/{model}.yaml"), System.load(ROOT / "topologies/h100_nvl8_ib_ndr.yaml")
    g = system.gpus_per_node
    graph = build_dlrm_graph(spec, system, nodes, gpus_per_node=g, mode=mode)
    count, orbit = simulated_rank_count(spec, system, nodes, g, mode)
    assert count == len(graph.programs)
    assert orbit == bool(graph.meta["orbit_classes"])
