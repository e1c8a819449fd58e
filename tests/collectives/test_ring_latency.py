"""A ring's latency under ``protocol_model: nccl`` is NCCL's (src/graph/tuning.cc, ``ncclTopoTuneModel``): of its
``nsteps`` steps only ``nInterSteps`` cross nodes and pay the network hop latency, the others the NVLink hop
latency (at least the Simple post overhead, 3 x 1 us, across nodes).  simfuse runs a ring's steps in lockstep over
every channel, so every flow of a step pays the mean hop latency of one chunk's path; the steps then add up to
NCCL's sum.  The expected times below are derived from those rules and the topologies' round numbers."""

import pytest

from simfuse.collectives import run_collective
from simfuse.collectives.protocols import ProtocolCost, ring_steps

from ..conftest import make_topology

MiB = 2**20
NVL_RING_SIMPLE_US, NET_RING_SIMPLE_US = 3.4, 14.0  # hwLatencies[NVLINK|NET][RING][SIMPLE]
NET_OVERHEAD_SIMPLE_US = 3 * 1.0  # getNetOverhead (1 us, x86) x 3 for Simple


def _topo(g, nic_lat_us=3.0):
    # 400 GB/s NVLink, 400 Gb/s = 50 GB/s NICs (one per GPU, rail fabric), efficiencies 1, no launch / sync cost
    return make_topology(gpus_per_node=g, nics_per_node=g, nvl_gbps=400, nvl_lat_us=1.0, nic_gbit=400,
                         nic_lat_us=nic_lat_us, fabric="rail_optimized", device_extra={"name": "H100"},
                         collectives_extra={"protocol_model": "nccl", "net_overhead_us": 1.0})


def test_ring_steps_are_nccls():
    assert ring_steps("all_reduce", 16, 2) == (30, 2)
    assert ring_steps("all_gather", 80, 10) == (79, 9)
    assert ring_steps("reduce_scatter", 10, 10) == (9, 9)
    assert ring_steps("all_reduce", 8, 1) == (14, 0)
    with pytest.raises(ValueError):
        ring_steps("all_to_all", 16, 2)


def test_step_latency_is_the_mean_over_a_chunks_path():
    cost = ProtocolCost("ring", "Simple", multi_node=True, net_overhead_s=1e-6, ring=(30, 2))
    intra = max(NVL_RING_SIMPLE_US, NET_OVERHEAD_SIMPLE_US)
    # fabric latencies below NCCL's: NCCL's own; a slower fabric hop replaces NCCL's figure, never adds to it
    assert cost.ring_step_latency_s(1e-6, 3e-6) == pytest.approx((28 * intra + 2 * NET_RING_SIMPLE_US) / 30 * 1e-6)
    assert cost.ring_step_latency_s(1e-6, 40e-6) == pytest.approx((28 * intra + 2 * 40.0) / 30 * 1e-6)
    # not a multi-node ring, or no protocol model: no ring accounting
    assert ProtocolCost("ring", "Simple").ring_step_latency_s(1e-6, 3e-6) is None
    assert ProtocolCost("ring", "Simple", model="none", ring=(30, 2)).ring_step_latency_s(1e-6, 3e-6) is None


@pytest.mark.parametrize("nic_lat_us", [3.0, 40.0])
@pytest.mark.parametrize("mode", ["symmetric", "full"])
def test_two_nodes_of_eight_closed_form(mode, nic_lat_us):
    # 16 ranks, 8 channels: each step a rank sends size/16/8 on each channel, 7 over NVLink (7/8 of size/16 through
    # its 400 GB/s port) and 1 over its 50 GB/s NIC, the slower; 30 steps, 2 of them network hops on a chunk's path
    g, nodes, size = 8, 2, 64 * MiB
    r = run_collective(_topo(g, nic_lat_us), nodes, "all_reduce", size, algorithm="ring", protocol="Simple",
                       mode=mode)
    chunk = size / (g * nodes)
    transfer = max(7 * chunk / 8 / 400e9, chunk / 8 / 50e9)
    intra = max(1.0, NVL_RING_SIMPLE_US, NET_OVERHEAD_SIMPLE_US)
    inter = max(nic_lat_us, NET_RING_SIMPLE_US)
    latency = (28 * intra + 2 * inter) * 1e-6  # NCCL: (nsteps - nInterSteps) intraLat + nInterSteps interLat
    assert r.time_s == pytest.approx(latency + 30 * transfer, rel=1e-9)


def test_one_node_pays_the_nvlink_hop_on_every_step():
    # one node: no step crosses nodes, no post overhead; every step pays NCCL's NVLink hop (3.4 us > 1 us fabric)
    g, size = 8, 64 * MiB
    r = run_collective(_topo(g), 1, "all_reduce", size, algorithm="ring", protocol="Simple")
    assert r.time_s == pytest.approx(2 * (g - 1) * (size / g / 400e9 + NVL_RING_SIMPLE_US * 1e-6), rel=1e-9)


def test_ten_nodes_all_gather_counts_nine_network_hops():
    # 10 x 4 ranks, LL128 (NVLink 1.9 us / network 4.0 us; post overhead 1 us, not tripled): 39 steps, 9 cross nodes
    g, nodes, size = 4, 10, 256 * MiB
    r = run_collective(_topo(g), nodes, "all_gather", size, algorithm="ring", protocol="LL128")
    chunk = size / (g * nodes) / 0.92  # LL128 carries 120 of every 128 bytes (NCCL rounds to 0.92)
    # across nodes an LL128 ring channel moves at most NCCL's perChMaxRingLL128Bw (36.7 GB/s on Hopper), one
    # channel per 400 Gb/s NIC: the NIC part runs at 36.7 GB/s of data, not 0.92 x 50
    transfer = max(3 * chunk / 4 / 400e9, chunk * 0.92 / 4 / 36.7e9)
    latency = (30 * max(1.9, 1.0) + 9 * max(3.0, 4.0)) * 1e-6
    assert r.time_s == pytest.approx(latency + 39 * transfer, rel=1e-9)
