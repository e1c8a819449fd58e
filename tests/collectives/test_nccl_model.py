"""NCCL's cost model as the tuner's ranking (simfuse/collectives/nccl_model.py): the graph estimate, closed forms
worked by hand from src/graph/tuning.cc (NVIDIA/nccl 5067397), and the tuner following it."""

import pytest

from simfuse.collectives.groups import candidate_algorithms, world
from simfuse.collectives.nccl_model import graphs_for, nccl_time_s
from simfuse.collectives.protocols import ProtocolCost
from simfuse.collectives.runner import simulate_group_collective
from simfuse.collectives.tuner import Tuner
from simfuse.errors import SpecError
from simfuse.spec.topology import load_topology, topology_from_dict

from ..conftest import make_topology

MiB = 2**20
H100 = "topologies/h100_nvl8_ib_ndr.yaml"


def _hopper(nic_gbit=400, nics=8, g=8, tuner="nccl"):
    return make_topology(gpus_per_node=g, nics_per_node=nics, nvl_gbps=450, nvl_lat_us=1.0, nic_gbit=nic_gbit,
                         nic_lat_us=3.0, fabric="rail_optimized", device_extra={"name": "NVIDIA H100 SXM"},
                         scale_up_extra={"nvls": True},
                         collectives_extra={"protocol_model": "nccl", "tuner": tuner})


def test_graph_of_an_ndr_node_is_eight_channels_at_48():
    # 400 Gb/s = 50 GB/s NICs: the first Hopper speed not above 50 is 48, one channel per NIC, no duplication
    # (sm90, 48 < 50 GB/s and more than 4 channels)
    g = graphs_for(_hopper(), 10, 8)
    assert (g.ring.channels, g.ring.bw_inter, g.ring.bw_intra) == (8, 48.0, 48.0)
    assert (g.tree.channels, g.tree.bw_intra) == (8, 48.0)
    assert g.nvls.channels == 8 and g.generation == "hopper"


def test_graph_of_a_200g_node_raises_the_trees_intra_speed():
    # 200 Gb/s = 25 GB/s: channels at 24; the search's second pass raises a tree's intra-node speed up to twice
    # the network's (48 is in the array and <= 2 x 24)
    g = graphs_for(_hopper(nic_gbit=200), 2, 8)
    assert (g.ring.channels, g.ring.bw_inter) == (8, 24.0)
    assert g.tree.bw_intra == 48.0 and g.tree.bw_inter == 24.0


def test_graph_uses_the_groups_share_of_the_nics():
    # one GPU per node of an 8-GPU, 8-NIC node: one NIC, one channel at 48, duplicated to 2 at 24 (1 channel <= 4)
    g = graphs_for(_hopper(), 16, 1)
    assert g.ring.channels * g.ring.bw_inter == pytest.approx(48.0)
    assert g.ring.channels == 2


def test_no_estimate_on_one_node_or_an_unknown_gpu():
    assert graphs_for(_hopper(), 1, 8) is None
    t = make_topology(gpus_per_node=8, nics_per_node=8, device_extra={"name": "MI300X"})
    assert graphs_for(t, 4, 8) is None


def test_nvls_tree_time_by_hand():
    # 10 nodes x 8: NVLSTree Simple all-reduce, 32 MiB.  Latency: base 0 + NVLink hop 25 + 2 log2i(10) = 6 network
    # hops of 20.9 us.  Bandwidth per channel min(48 x 0.85 x 7/8 x 2, 48, perChMaxNVLSTreeBw 45.5) = 45.5; bus
    # 8 x 45.5, algorithm bandwidth x nRanks / nsteps = 80 / 158
    size = 32 * MiB
    lat_us = 25 + 6 * 20.9
    bw = 8 * 45.5 * 80 / 158
    expect = (lat_us + size / (1000 * bw)) * 1e-6
    assert nccl_time_s("all_reduce", "nvls_tree", "Simple", 10, 8, size, graphs_for(_hopper(), 10, 8)) == \
        pytest.approx(expect, rel=1e-9)


def test_tree_ll128_time_by_hand_with_the_size_correction():
    # 10 x 8, tree LL128, 1 MiB.  Latency 14 + 2 (7 x 1.25 + log2i(10) x 8.5).  Bus bandwidth: 8 x 48 x 0.92 capped
    # at 8 x perChMaxTreeBw 36.0 = 288, then x 120/128 capped at 8 x perChMaxTreeLL128Bw 29.0 = 232, x 0.5 for the
    # tree; treeCorrectionFactor[LL128][log2(1 MiB / 64) = 14] = 0.6
    size = 1 * MiB
    lat_us = 14 + 2 * (7 * 1.25 + 3 * 8.5)
    bw = min(min(8 * 48 * 0.92, 8 * 36.0) * 120 / 128, 8 * 29.0) * 0.5 * 0.6
    expect = (lat_us + size / (1000 * bw)) * 1e-6
    assert nccl_time_s("all_reduce", "tree", "LL128", 10, 8, size, graphs_for(_hopper(), 10, 8)) == \
        pytest.approx(expect, rel=1e-9)


def test_ring_simple_all_reduce_pays_the_plateau_and_ll128_its_cap():
    g = graphs_for(_hopper(), 4, 8)
    size = 256 * MiB
    n, steps, inter = 32, 62, 6
    lat_us = 8.4 + (steps - inter) * max(3.4, 3 * 1.0) + inter * 14.0
    simple = nccl_time_s("all_reduce", "ring", "Simple", 4, 8, size, g)
    assert simple == pytest.approx((1.4 * lat_us + size / (1000 * 8 * 48 * n / steps)) * 1e-6, rel=1e-9)
    ll128 = nccl_time_s("all_reduce", "ring", "LL128", 4, 8, size, g)
    lat128 = 14.0 + (steps - inter) * max(1.9, 1.0) + inter * 4.0
    assert ll128 == pytest.approx((lat128 + size / (1000 * 8 * 36.7 * n / steps)) * 1e-6, rel=1e-9)


def test_models_gaps_are_none_not_zero():
    g = graphs_for(_hopper(), 4, 8)
    assert nccl_time_s("all_to_all", "ring", "Simple", 4, 8, MiB, g) is None
    assert nccl_time_s("all_reduce", "nvls_tree", "LL", 4, 8, MiB, g) is None
    # NVLSTree needs two NVLS channels: not with one GPU a node
    assert nccl_time_s("all_reduce", "nvls_tree", "Simple", 4, 1, MiB, graphs_for(_hopper(), 4, 1)) is None


@pytest.mark.parametrize("nodes,size", [(2, 1 * MiB), (10, 32 * MiB), (10, 128 * MiB), (16, 4096 * MiB)])
def test_tuner_takes_nccls_cheapest(nodes, size):
    t = _hopper()
    group = world(nodes * 8)
    names = candidate_algorithms("all_reduce", group, 8, symmetric_only=True, topology=t, size_bytes=size)
    graphs = graphs_for(t, nodes, 8)

    def cost(name):
        algo, proto = name.split("/")
        family = {"nvls_tree": "nvls_tree", "tree": "tree", "ring": "ring"}[algo]
        return nccl_time_s("all_reduce", family, proto, nodes, 8, size, graphs)

    assert Tuner(t, nodes, 8).choose("all_reduce", group, size) == min(names, key=cost)


def test_simulate_tuner_keeps_the_fastest_simulated():
    t = _hopper(tuner="simulate")
    nodes, size = 4, 32 * MiB
    group = world(nodes * 8)
    names = candidate_algorithms("all_reduce", group, 8, symmetric_only=True, topology=t, size_bytes=size)
    times = {n: simulate_group_collective(t, nodes, 8, "all_reduce", n, group, size) for n in names}
    assert Tuner(t, nodes, 8).choose("all_reduce", group, size) == min(times, key=times.get)


def test_nccls_choice_moves_from_tree_to_nvls_tree_with_size():
    # NCCL's model on 10 H100 NDR nodes: the tree with LL128 for 1 MiB (its latency), NVLSTree for 32 MiB (its
    # bandwidth: 45.5 GB/s a channel against the LL128 tree's 29)
    t = load_topology(H100)
    tuner = Tuner(t, 10, 8)
    assert tuner.choose("all_reduce", world(80), 1 * MiB) == "tree/LL128"
    assert tuner.choose("all_reduce", world(80), 32 * MiB) == "nvls_tree/Simple"


def test_nvls_families_start_without_the_launch_gap():
    # NCCL's base latency is 0 for NVLS, NVLSTree and CollNet; the topology's launch time is the ring's Simple one
    assert ProtocolCost("nvls_tree", "Simple").launch_gap_s(8.4e-6) == 0.0
    assert ProtocolCost("collnet", "Simple").launch_gap_s(8.4e-6) == 0.0
    assert ProtocolCost("tree", "Simple").launch_gap_s(8.4e-6) == pytest.approx(8.4e-6)
    assert ProtocolCost("ring", "LL").launch_gap_s(8.4e-6) == pytest.approx(6.6e-6)


def test_bad_tuner_name_is_refused_with_the_field():
    import yaml

    raw = yaml.safe_load(open(H100))
    raw["collectives"]["tuner"] = "fastest"
    with pytest.raises(SpecError, match="tuner"):
        topology_from_dict(raw, source="bad.yaml")
