"""The cost guard's DLRM estimate counts what a run does: the fused kernel's waves as the kernel cuts its bags, a
table-wise placement's rank classes at any size, and the knob grid where the run's screen would let it run."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from simfuse.fused.knobs import parse_execution
from simfuse.guard import estimate_run
from simfuse.spec import load_workload
from simfuse.system import System
from simfuse.workloads.dlrm import _placement, build_dlrm_graph, simulated_rank_count
from simfuse.workloads.dlrm_workload import DLRMWorkload
from simfuse.workloads.run import scaled_spec

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def system():
    return System.load(ROOT / "topologies/h100_nvl8_ib_ndr.yaml")


def _estimate(system, model: str, nodes: int, **settings):
    spec = load_workload(ROOT / f"models/{model}.yaml")
    g = system.gpus_per_node
    if spec.global_batch % (nodes * g):
        settings.setdefault("batch_per_gpu", math.ceil(spec.global_batch / (nodes * g)))
    ex = parse_execution({"uncertainty": "none", **settings})
    return estimate_run(scaled_spec(spec, nodes, g, ex), system.topology, nodes, g, "auto", ex, 2)


@pytest.mark.parametrize("nodes, waves", [(256, 70), (512, 109), (1024, 218), (4096, 125), (8192, 249)])
def test_waves_follow_the_kernels_bags(system, nodes, waves):
    """A GPU's batch of 7 samples makes blocks of one bag (simfuse.fused.ops.EmbeddingAllToAll), 14 of two, 27 of
    three: the fused kernel's waves the runs measured (a 32-column shard on the busiest rank: one table)."""
    assert _estimate(system, "dlrm_dcnv2_mlperf_hugectr", nodes).waves_per_rank == 2 * waves


@pytest.mark.parametrize("nodes, grid", [(128, False), (256, False), (512, True), (1024, True), (2048, False),
                                         (4096, True), (16384, False)])
def test_knob_grid_where_the_post_queues_would_be_busy(system, nodes, grid):
    """The HugeCTR file's fused step kept its post queues busy for >= 10% of the step at 512, 1,024, 4,096 and
    8,192 nodes (5 ns posts; 0.08-0.09 at 128, 256 and 2,048 nodes; 497 waves at 16,384, beyond the grid's
    reach): the estimate prices the grid's second point there, and only there."""
    tuned = _estimate(system, "dlrm_dcnv2_mlperf_hugectr", nodes).seconds
    fixed = _estimate(system, "dlrm_dcnv2_mlperf_hugectr", nodes, tune_knobs="off").seconds
    assert (tuned > fixed) == grid
    assert tuned >= fixed


def test_post_share_is_posting_over_the_step(system):
    """512 nodes, 14 samples a GPU: 28,672 workgroups, 4,095/4,096 of them off the node, 5 ns each (0.143 ms),
    on a step of 1 ms + 14 x 0.37 us: 0.125 (measured 0.126 and 0.137)."""
    share = DLRMWorkload.post_share(system.topology, 512, 4096, 57344, 28672)
    assert share == pytest.approx(0.125, abs=0.002)
    assert DLRMWorkload.post_share(system.topology, 1, 8, 57344, 28672) == 0.0  # one node: nothing leaves it


@pytest.mark.parametrize("nodes", [4096, 8192])
def test_table_wise_classes_beyond_the_placed_limit(system, nodes):
    """Beyond PLACED_CLASS_MAX_RANKS a table-wise placement's load classes are counted on the ranks holding its
    tables and one empty node: the count the graph builder uses (DLRM v1: 6, not half its 26 tables)."""
    spec = load_workload(ROOT / "models/dlrm_v1.yaml")
    count = simulated_rank_count(spec, system, nodes, system.gpus_per_node, "fused")[0]
    assert count == 6
    assert _estimate(system, "dlrm_v1", nodes).simulated_ranks == count


def test_busiest_units_give_the_graphs_waves(system):
    """The All-to-All shards on a planned placement's busiest rank (its columns over their common column count)
    size the fused kernel the graph builder counts (``fused_waves``)."""
    spec = load_workload(ROOT / "models/dlrm_dcnv2_mlperf_hugectr.yaml")
    nodes, g = 16, system.gpus_per_node
    graph = build_dlrm_graph(spec, system, nodes, gpus_per_node=g, mode="fused")
    posted = DLRMWorkload(spec)._busiest_units(_placement(spec, system, nodes, g, "fused", None)[1])[1]
    bags = 4  # 432 samples a GPU
    assert math.ceil(posted * spec.global_batch / bags / system.topology.device.workgroup_slots) \
        == graph.meta["fused_waves"]


def test_candidates_follow_the_schedule_the_estimate_chooses():
    """The run sends its candidate simulations to the workers at once when the guard's estimate reaches
    MIN_PARALLEL_RUN_S, else runs the first alone: the guard prices the schedule its own figure leads to."""
    import math

    from simfuse.workloads.dlrm_workload import _candidates_wall_s
    from simfuse.workloads.parallel import MIN_PARALLEL_RUN_S

    # long: at once on two workers
    assert _candidates_wall_s([(1, 3.0), (1, 3.0)], 2) == pytest.approx(3.0)
    # short: the first alone, then the rest
    assert _candidates_wall_s([(1, 0.3), (1, 0.6)], 2) == pytest.approx(0.9)
    # in between (at once 1.1 s, staged 2.2 s around the 2 s threshold): their geometric mean
    staged, at_once = 0.4 + 1.8, (0.4 + 1.8) / 2
    assert at_once < MIN_PARALLEL_RUN_S <= staged
    assert _candidates_wall_s([(1, 0.4), (1, 1.8)], 2) == pytest.approx(math.sqrt(staged * at_once))
