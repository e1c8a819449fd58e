"""One constructor path for :class:`simfuse.system.System`: however it is built, a fused kernel's workgroup is
never priced below the plain kernel's (``FusedFloor``)."""

from pathlib import Path

from simfuse.costs import RooflineCostModel
from simfuse.costs.base import FusedFloor, KernelWork
from simfuse.system import System

TOPO = Path(__file__).resolve().parents[1] / "topologies" / "h200_nvl8_ib_ndr.yaml"


class _CheapFused(RooflineCostModel):
    """A cost model whose fused workgroups are (wrongly) half the plain ones' time, as a separate fit can be."""

    def workgroup_time_s(self, work, concurrent_wgs):
        t = super().workgroup_time_s(work, concurrent_wgs)
        return t / 2 if work.variant == "fused" else t


def _work(variant):
    return KernelWork("gemm", 128, 2.0e9, 4.0e6, variant=variant)


def test_hand_built_system_keeps_the_fused_floor():
    loaded = System.load(TOPO, calibrated=False)
    s = System(loaded.topology, _CheapFused(loaded.topology.device))
    assert isinstance(s.cost, FusedFloor)
    plain = s.cost.workgroup_time_s(_work("compute"), 4)
    assert s.cost.workgroup_time_s(_work("fused"), 4) == plain
    assert s.cost.inner.workgroup_time_s(_work("fused"), 4) == plain / 2  # the floor, not the model, lifts it


def test_hand_built_equals_loaded_roofline():
    loaded = System.load(TOPO, calibrated=False)
    s = System(loaded.topology, RooflineCostModel(loaded.topology.device))
    for v in ("compute", "fused"):
        assert s.cost.workgroup_time_s(_work(v), 4) == loaded.cost.workgroup_time_s(_work(v), 4)
        assert s.cost.launch_latency_s(_work(v)) == loaded.cost.launch_latency_s(_work(v))


def test_with_cost_keeps_floor_and_launch_mode():
    g = System.load(TOPO, calibrated=False).with_launch("graph")
    s = g.with_cost(_CheapFused(g.topology.device))
    assert s.launch == "graph" and isinstance(s.cost, FusedFloor)
    assert s.cost.workgroup_time_s(_work("fused"), 4) == s.cost.workgroup_time_s(_work("compute"), 4)
    assert s.cost.launch_latency_s(_work("compute")) == g.topology.device.graph_launch_s
    assert not isinstance(s.cost.inner, FusedFloor)  # no floor wrapped in a floor
