"""NCCL's algorithm-level limits on multi-node all-reduces: the tree's rate per channel (``perChMaxTreeBws``), the
pipeline fill of trees and NVLSTree, charged under ``collectives.protocol_model: nccl`` only.

Closed forms from NCCL's constants (NVIDIA/nccl 5067397 src/graph/tuning.cc, src/enqueue.cc, src/transport/nvls.cc)
on round-number systems."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simfuse.collectives import run_collective
from simfuse.collectives.algorithms import Layout, make_algorithm
from simfuse.collectives.protocols import (
    algorithm_rate_factors,
    nccl_generation,
    ring_rate_factor,
    tree_rate_factor,
)

from ..conftest import make_topology

MiB = 2**20
GB = 1e9


@pytest.mark.parametrize("nodes,gpu,rate,line,nics_per_gpu,proto,expect", [
    # beyond two nodes: rate / min(0.92 rate, cap); Hopper cap 36.0 GB/s per channel, one channel per 400 Gb/s NIC
    (4, "H100", 50 * GB, None, 1, "Simple", 50 / 36.0),
    # two nodes: 2 rate / min(0.92 x 2 rate, cap 41.4)
    (2, "H100 80GB HBM3", 50 * GB, None, 1, "Simple", 100 / 41.4),
    # a slow NIC never reaches the cap: only NCCL's 0.92
    (8, "H200", 12.5 * GB, None, 1, "Simple", 1 / 0.92),
    (2, "H200", 12.5 * GB, None, 1, "Simple", 1 / 0.92),
    # Blackwell beyond two nodes: cap 24.0
    (16, "B200", 50 * GB, None, 1, "Simple", 50 / 24.0),
    # A100 two nodes: cap 23.6 against 2 x 25 GB/s
    (2, "A100-SXM4-80GB", 25 * GB, None, 1, "Simple", 50 / 23.6),
    # LL128: min(min(0.92 r, 36) x 120/128, 29.0), its 1/0.92 wire factor taken out
    (4, "H100", 50 * GB, None, 1, "LL128", 0.92 * 50 / 29.0),
    # a topology NIC standing for 4 x 400 Gb/s carries 4 channels (line 200 GB/s / NCCL's 48 GB/s top speed)
    (4, "H100", 192 * GB, 200 * GB, 1, "Simple", 192 / 144.0),
    # a node with 4 NICs per GPU of the group: 4 channels over the GPU's one simulated NIC
    (4, "H100", 48 * GB, 50 * GB, 4, "Simple", 1 / 0.92),
    # LL: min(min(0.92 r, 36) / 3.8, llMaxBws 20.4 / 8 NICs), its x2 wire factor taken out
    (4, "H100", 50 * GB, None, 1, "LL", 0.5 * 50 / min(36.0 / 3.8, 20.4 / 8)),
    (2, "H100", 50 * GB, None, 1, "LL", 0.5 * 100 / min(41.4 / 3.8, 39.0 / 8)),
])
def test_tree_rate_factor_closed_form(nodes, gpu, rate, line, nics_per_gpu, proto, expect):
    f = tree_rate_factor("tree", proto, nodes, gpu, rate, "nccl", line, nics_per_gpu, nics_per_node=8)
    assert f == pytest.approx(expect, rel=1e-9)


def test_tree_rate_factor_is_one_where_it_does_not_apply():
    assert tree_rate_factor("ring", "Simple", 4, "H100", 50 * GB) == 1.0
    assert tree_rate_factor("nvls_tree", "Simple", 4, "H100", 50 * GB) == 1.0
    assert tree_rate_factor("tree", "Simple", 1, "H100", 50 * GB) == 1.0
    assert tree_rate_factor("tree", "Simple", 4, "H100", 50 * GB, model="none") == 1.0
    assert tree_rate_factor("tree", "Simple", 4, "MI300X", 50 * GB) == 1.0  # not in NCCL's tables
    assert nccl_generation("NVIDIA H100 SXM") == "hopper" and nccl_generation("GB200 NVL72") == "blackwell"
    assert nccl_generation("dev") is None


def test_tree_fill_closed_form():
    # 8 GPUs, 2 nodes: 2 x 8 channels, 2 x (7 + 1) stages, 512 KiB chunks: 1 + 15 x 512 KiB x 16 / size
    t = make_algorithm("all_reduce", "tree", Layout(2, 8), 64 * MiB)
    assert t.fill_factor() == pytest.approx(1 + 15 * 0.5 * 16 / 64)
    # 4 nodes: depth 2 -> 2 x (7 + 2) = 18 stages; beyond two nodes each chunk crosses a NIC twice (up and down),
    # so the pipelines carry twice the buffer through their NICs and a stage is half a steady-state chunk time
    t = make_algorithm("all_reduce", "tree", Layout(4, 8), 1024 * MiB)
    assert t.fill_factor() == pytest.approx(1 + 17 * 0.5 * 16 / (2 * 1024))
    # LL and LL128: no fill beyond NCCL's per-hop latencies
    for proto in ("LL", "LL128"):
        assert make_algorithm("all_reduce", "tree", Layout(4, 8), 64 * MiB, protocol=proto).fill_factor() == 1.0


def test_nvls_tree_fill_closed_form():
    # 16 channels x 8 heads, 4 stages on 2 nodes, 128 KiB chunks
    t = make_algorithm("all_reduce", "nvls_tree", Layout(2, 8), 128 * MiB)
    assert t.fill_factor() == pytest.approx(1 + 3 * 128 * 1024 * 128 / (128 * MiB))
    # 4 nodes: 64 KiB chunks, 2 + 2 x 2 stages
    t = make_algorithm("all_reduce", "nvls_tree", Layout(4, 8), 32 * MiB)
    assert t.fill_factor() == pytest.approx(1 + 5 * 65536 * 128 / (2 * 32 * MiB))
    # fewer bytes than the pipelines' chunks: every pipeline carries one partial chunk through every stage
    t = make_algorithm("all_reduce", "nvls_tree", Layout(2, 8), 1 * MiB)
    assert t.fill_factor() == pytest.approx(4.0)


@settings(max_examples=40, deadline=None)
@given(nodes=st.integers(2, 64), g=st.sampled_from([1, 2, 4, 8]), size_mib=st.floats(0.01, 65536),
       algo=st.sampled_from(["tree", "nvls_tree"]))
def test_fill_is_at_least_one_and_fades_with_size(nodes, g, size_mib, algo):
    a = make_algorithm("all_reduce", algo, Layout(nodes, g), size_mib * MiB)
    b = make_algorithm("all_reduce", algo, Layout(nodes, g), 4 * size_mib * MiB)
    assert a.fill_factor() >= b.fill_factor() >= 1.0
    big = make_algorithm("all_reduce", algo, Layout(nodes, g), 2.0**46)
    assert big.fill_factor() == pytest.approx(1.0, abs=1e-3)


def _hopper(g, model, **kw):
    return make_topology(gpus_per_node=g, nics_per_node=g, nvl_gbps=400, nvl_lat_us=1.0, nic_gbit=400,
                         nic_lat_us=3.0, fabric="rail_optimized", device_extra={"name": "H100"},
                         collectives_extra={"protocol_model": model}, **kw)


@pytest.mark.parametrize("nodes", [2, 4, 8])
def test_tree_time_under_nccl_model_closed_form(nodes):
    g, size = 2, 64 * MiB
    r = run_collective(_hopper(g, "nccl"), nodes, "all_reduce", size, algorithm="tree", protocol="Simple")
    depth = int(np.ceil(np.log2(nodes)))
    k = 2 if nodes == 2 else 1
    cap = 41.4e9 if nodes == 2 else 36.0e9
    rate = k * 50e9 / min(0.92 * k * 50e9, cap)
    passes = 1 if nodes == 2 else 2  # times a chunk crosses a NIC each way (up and down beyond two nodes)
    fill = 1 + (2 * ((g - 1) + depth) - 1) * 512 * 1024 * (2 * g) / (passes * size)
    # the fill stretches both parts; the tree's rate per NIC only the network part
    inter = (size / g if nodes == 2 else 2 * size / g) * fill * rate / 50e9
    intra = 2 * size / g * fill / 400e9
    nvl, net = 4.0e-6, 14.0e-6  # NCCL's tree Simple hop latencies (NVLink, network), above the fabric's
    expect = nvl + max(intra + nvl, inter + net) + (2 * depth - 1) * net + nvl
    assert r.time_s == pytest.approx(expect, rel=1e-6)


def test_limits_leave_the_idealised_model_and_one_node_alone():
    t_none, t_nccl = _hopper(8, "none"), _hopper(8, "nccl")
    for nodes, algo in ((2, "tree"), (4, "tree"), (2, "nvls_tree")):
        a = make_algorithm("all_reduce", algo, Layout(nodes, 8), 64 * MiB)
        assert algorithm_rate_factors(t_none, a) == (1.0, 1.0)
        fill, net = algorithm_rate_factors(t_nccl, a)
        assert fill > 1.0 and (net > 1.0) == (algo == "tree")
    ring = make_algorithm("all_reduce", "ring", Layout(4, 8), 64 * MiB)
    assert algorithm_rate_factors(t_nccl, ring) == (1.0, 1.0)
    nvls = make_algorithm("all_reduce", "nvls", Layout(1, 8), 64 * MiB)
    assert algorithm_rate_factors(t_nccl, nvls) == (1.0, 1.0)


@pytest.mark.parametrize("nvl_gbps", [400, 100])
def test_tree_cap_slows_the_network_part_only(nvl_gbps):
    # two nodes, 8 GPUs: each GPU's NVLink port carries 2 size/g to each of 7 peers; the NIC the shard size/g at
    # NCCL's tree rate (factor 2 x 50 / 41.4); with slow NVLink the NVLink part sets the time, cap or not
    g, size = 8, 1024 * MiB
    t = make_topology(gpus_per_node=g, nics_per_node=g, nvl_gbps=nvl_gbps, nvl_lat_us=1.0, nic_gbit=400,
                      nic_lat_us=3.0, fabric="rail_optimized", device_extra={"name": "H100"},
                      collectives_extra={"protocol_model": "nccl"})
    r = run_collective(t, 2, "all_reduce", size, algorithm="tree", protocol="Simple")
    fill = 1 + 15 * 512 * 1024 * 16 / size
    intra = (g - 1) * 2 * size / g * fill / (nvl_gbps * 1e9)
    inter = size / g * fill * (100 / 41.4) / 50e9
    assert (intra > inter) == (nvl_gbps == 100)
    assert r.time_s == pytest.approx(4e-6 + max(intra + 4e-6, inter + 14e-6) + 14e-6 + 4e-6, rel=1e-6)


def test_min_ctas_raises_the_pipelines_of_the_fill():
    # NCCL_MIN_CTAS=24: NVLSTree's 16 channels become 24 (src/transport/nvls.cc ncclNvlsTuning), the tree's
    # 2 x 8 channels become 24 (src/graph/connect.cc copyChannels); below NCCL's own counts it changes nothing
    nv = make_algorithm("all_reduce", "nvls_tree", Layout(8, 8), 64 * MiB)
    assert nv.fill_factor(24) == pytest.approx(1 + 7 * 65536 * 24 * 8 / (2 * 64 * MiB))
    assert nv.fill_factor(8) == nv.fill_factor(0) == pytest.approx(1 + 7 * 65536 * 16 * 8 / (2 * 64 * MiB))
    tr = make_algorithm("all_reduce", "tree", Layout(2, 8), 64 * MiB)
    assert tr.fill_factor(24) == pytest.approx(1 + 15 * 0.5 * 24 / 64)
    assert tr.fill_factor(16) == tr.fill_factor() == pytest.approx(1 + 15 * 0.5 * 16 / 64)


def test_min_ctas_slows_a_mid_size_nvls_tree_through_the_topology():
    def topo(min_ctas):
        return make_topology(gpus_per_node=8, nics_per_node=8, nvl_gbps=400, nvl_lat_us=1.0, nic_gbit=400,
                             nic_lat_us=3.0, fabric="rail_optimized", device_extra={"name": "H100"},
                             scale_up_extra={"nvls": True},
                             collectives_extra={"protocol_model": "nccl", "min_ctas": min_ctas})
    a = make_algorithm("all_reduce", "nvls_tree", Layout(8, 8), 64 * MiB)
    assert algorithm_rate_factors(topo(24), a)[0] == pytest.approx(a.fill_factor(24))
    assert algorithm_rate_factors(topo(0), a)[0] == pytest.approx(a.fill_factor())
    slow = run_collective(topo(24), 8, "all_reduce", 64 * MiB, algorithm="nvls_tree").time_s
    base = run_collective(topo(0), 8, "all_reduce", 64 * MiB, algorithm="nvls_tree").time_s
    assert slow > base


def test_min_channels_per_nic_shares_the_minimum_over_the_nodes_nics():
    from simfuse.collectives.protocols import min_channels_per_nic
    # running channels over the NICs in use, halved: NCCL runs twice its searched channels (connect.cc)
    assert min_channels_per_nic(0, 8, 8, 1) == 0
    assert min_channels_per_nic(32, 8, 8, 1) == 2.0  # 32 running channels over 8 NICs: 2 searched a NIC
    assert min_channels_per_nic(24, 8, 8, 1) == 1.5
    assert min_channels_per_nic(32, 2, 8, 4) == 8.0  # two GPUs of the group drive 4 NICs each: 4 x 32 / (2 x 8)
    assert min_channels_per_nic(16, 8, 8, 1) == 1.0  # NCCL's own 16 on 8 NICs: the default, no change


@pytest.mark.parametrize("per_nic,expect", [(0, 0.92 * 50 / 36.7), (1, 0.92 * 50 / 36.7), (1.2, 0.92 * 50 / 44.04),
                                            (1.5, 1.0), (2, 1.0)])
def test_min_channels_lift_the_ring_ll128_cap(per_nic, expect):
    # NCCL's LL128 ring cap is per searched channel (36.7 GB/s on Hopper): NCCL_MIN_NCHANNELS=24 or 32 on
    # 8 x 400 Gb/s NICs are 1.5 or 2 searched channels a NIC, above its 0.92 x 50 GB/s
    f = ring_rate_factor("LL128", 4, "H100", 50 * GB, "nccl", None, 1, per_nic)
    assert f == pytest.approx(expect)


def test_min_nchannels_reaches_rings_and_trees_but_not_nvls_through_the_topology():
    def topo(**co):
        return make_topology(gpus_per_node=8, nics_per_node=8, nvl_gbps=400, nvl_lat_us=1.0, nic_gbit=400,
                             nic_lat_us=3.0, fabric="rail_optimized", device_extra={"name": "H100"},
                             scale_up_extra={"nvls": True}, collectives_extra={"protocol_model": "nccl", **co})
    ring = make_algorithm("all_reduce", "ring", Layout(4, 8), 256 * MiB, protocol="LL128")
    tree = make_algorithm("all_reduce", "tree", Layout(4, 8), 256 * MiB)
    nvls = make_algorithm("all_reduce", "nvls_tree", Layout(4, 8), 256 * MiB)
    base, more = topo(), topo(min_nchannels=32)
    assert algorithm_rate_factors(more, ring)[1] < algorithm_rate_factors(base, ring)[1]
    assert algorithm_rate_factors(more, tree)[1] < algorithm_rate_factors(base, tree)[1]
    assert algorithm_rate_factors(more, tree)[0] > algorithm_rate_factors(base, tree)[0]  # fill: 32 pipelines
    assert algorithm_rate_factors(more, nvls) == algorithm_rate_factors(base, nvls)
    assert algorithm_rate_factors(topo(min_ctas=32), nvls)[0] > algorithm_rate_factors(base, nvls)[0]
