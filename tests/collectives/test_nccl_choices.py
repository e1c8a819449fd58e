"""NCCL's real choices: NVLS, IB SHARP (CollNet), the double binary tree, LL/LL128/Simple, per-peer proxy costs.

Closed forms on uncongested round-number systems (efficiencies 1 unless a test sets one)."""

import json
import subprocess
import sys

import numpy as np
import pytest

from simfuse.collectives import run_collective
from simfuse.collectives.groups import candidate_algorithms, world
from simfuse.collectives.protocols import ProtocolCost
from simfuse.collectives.tuner import Tuner
from simfuse.errors import SpecError

from ..conftest import make_topology

MiB = 2**20


def _nvls_topo(g=8, eff=0.5, model="none", **kw):
    return make_topology(gpus_per_node=g, nics_per_node=g, nvl_gbps=400, nvl_lat_us=1.0,
                         scale_up_extra={"nvls": True, "nvls_efficiency": eff},
                         collectives_extra={"protocol_model": model}, **kw)


@pytest.mark.parametrize("g", [4, 8])
def test_nvls_one_node_closed_form(g):
    size = 64 * MiB
    r = run_collective(_nvls_topo(g), 1, "all_reduce", size, algorithm="nvls")
    # each GPU: size (1 + 1/g) each way through the switch's reduction at 400 GB/s * 0.5
    expect = size * (1 + 1 / g) / 200e9 + 1e-6
    assert r.time_s == pytest.approx(expect, rel=1e-6)
    assert r.busbw_gbps == pytest.approx(2 * (g - 1) / (g + 1) * 200, rel=5e-3)  # latency: 1 us of ~350


def test_nvls_busbw_exceeds_port_rate_and_ring():
    t = _nvls_topo(8, eff=1.0)
    nvls = run_collective(t, 1, "all_reduce", 1024 * MiB, algorithm="nvls")
    ring = run_collective(t, 1, "all_reduce", 1024 * MiB, algorithm="ring")
    assert nvls.busbw_gbps > 400 > ring.busbw_gbps


def test_nvls_protocol_latency_is_ncccls_25us():
    r = run_collective(_nvls_topo(8, model="nccl"), 1, "all_reduce", 64 * MiB, algorithm="nvls")
    assert r.protocol == "Simple"
    assert r.time_s == pytest.approx(64 * MiB * 9 / 8 / 200e9 + 25e-6, rel=1e-6)


def test_nvls_and_sharp_only_when_declared():
    plain = make_topology(gpus_per_node=8, nics_per_node=8)
    with pytest.raises(SpecError, match="scale_up.nvls"):
        run_collective(plain, 1, "all_reduce", MiB, algorithm="nvls")
    with pytest.raises(SpecError, match="scale_out.sharp"):
        run_collective(plain, 2, "all_reduce", MiB, algorithm="collnet")
    names = candidate_algorithms("all_reduce", world(16), 8, symmetric_only=True, topology=plain)
    assert not {"nvls", "nvls_tree", "collnet"} & set(names)
    both = make_topology(gpus_per_node=8, nics_per_node=8, scale_up_extra={"nvls": True},
                         scale_out_extra={"sharp": True})
    names = candidate_algorithms("all_reduce", world(16), 8, symmetric_only=True, topology=both)
    assert {"nvls", "nvls_tree", "collnet", "tree"} <= set(names)
    # one node: no tree, no CollNet
    one = candidate_algorithms("all_reduce", world(8), 8, symmetric_only=True, topology=both)
    assert "nvls" in one and not {"tree", "nvls_tree", "collnet"} & set(one)
    with pytest.raises(SpecError, match="nvls_efficiency"):
        make_topology(scale_up_extra={"nvls_efficiency": 0.5})


def _pipelined(intra_drain_s, nvl_lat_s, inter_drain_s, net_lat_s, inter_hops, nvls=False):
    """NCCL's pipelined hierarchical all-reduce: the intra-node (NVLink/NVLS) and inter-node (NIC) parts move at
    once, the slower sets the time; one NVLink hop before and after (before only through the NVSwitch, NVLS:
    NCCL's model charges NVLS algorithms one ``intraLat``) and the inter-node part's network hops."""
    hops = 1 if nvls else 2
    return hops * nvl_lat_s + max(intra_drain_s + nvl_lat_s, inter_drain_s + net_lat_s) + (inter_hops - 1) * net_lat_s


@pytest.mark.parametrize("nodes", [2, 4, 8])
def test_tree_closed_form(nodes):
    g = 2
    t = make_topology(gpus_per_node=g, nics_per_node=g, nvl_gbps=400, nvl_lat_us=1.0, nic_gbit=400,
                      nic_lat_us=3.0, fabric="rail_optimized")
    size = 64 * MiB
    r = run_collective(t, nodes, "all_reduce", size, algorithm="tree")
    x = size / g
    depth = int(np.ceil(np.log2(nodes)))
    # intra: reduce-scatter + all-gather, size/g to the one peer each; inter: each NIC carries 2x each way
    # (reduce up, broadcast down) -- only x on two nodes, where each node is a leaf of one tree and the root of
    # the other
    inter_bytes = x if nodes == 2 else 2 * x
    expect = _pipelined(2 * size / g / 400e9, 1e-6, inter_bytes / 50e9, 3e-6, 2 * depth)
    assert r.time_s == pytest.approx(expect, rel=1e-6)


def test_collnet_halves_network_bytes():
    g, nodes = 2, 4
    t = make_topology(gpus_per_node=g, nics_per_node=g, nvl_gbps=400, nvl_lat_us=1.0, nic_gbit=400,
                      nic_lat_us=3.0, fabric="rail_optimized", scale_out_extra={"sharp": True, "sharp_efficiency": 0.8})
    size = 64 * MiB
    r = run_collective(t, nodes, "all_reduce", size, algorithm="collnet")
    # the shard once each way through the SHARP links (0.8 x 50 GB/s), pipelined with the NVLink part
    assert r.time_s == pytest.approx(_pipelined(2 * size / g / 400e9, 1e-6, size / g / 40e9, 3e-6, 1), rel=1e-6)
    tree = run_collective(t, nodes, "all_reduce", size, algorithm="tree")
    assert r.time_s < tree.time_s


@pytest.mark.parametrize("g,nodes,nvls_eff", [(4, 2, 0.5), (4, 4, 0.5), (8, 2, 0.25)])
def test_nvls_multi_node_needs_sharp_and_uses_both(g, nodes, nvls_eff):
    t = make_topology(gpus_per_node=g, nics_per_node=g, nvl_gbps=400, nvl_lat_us=1.0, nic_gbit=400, nic_lat_us=3.0,
                      fabric="rail_optimized", scale_up_extra={"nvls": True, "nvls_efficiency": nvls_eff},
                      scale_out_extra={"sharp": True, "sharp_efficiency": 0.5})
    size = 64 * MiB
    r = run_collective(t, nodes, "all_reduce", size, algorithm="nvls")
    n = g * nodes
    # NVLS reduce-scatter and all-gather together: size (1 + 1/g) each way on the NVLS port (400 GB/s x eff);
    # the network part as NCCL's model prices it: 2 (n-1)/n of the shard each way at the NIC's rate (50 GB/s; the
    # SHARP links' efficiency, CollNet's, does not apply)
    expect = _pipelined(size * (1 + 1 / g) / (400e9 * nvls_eff), 1e-6, 2 * (n - 1) / n * size / g / 50e9, 3e-6, 1,
                        nvls=True)
    assert r.time_s == pytest.approx(expect, rel=1e-6)
    with pytest.raises(SpecError, match="scale_out.sharp"):
        run_collective(t.with_overrides({"scale_out.sharp": False}), nodes, "all_reduce", size, algorithm="nvls")


@pytest.mark.parametrize("proto,wire,hop_us,base_us", [("LL", 2.0, 0.6, -1.8), ("LL128", 1 / 0.92, 1.9, 5.6),
                                                       ("Simple", 1.0, 3.4, 0.0)])
def test_protocol_ring_closed_form(proto, wire, hop_us, base_us):
    n = 4
    t = make_topology(gpus_per_node=n, nics_per_node=1, nvl_gbps=400, nvl_lat_us=0.5, launch_us=5.0, sync_us=2.0,
                      collectives_extra={"protocol_model": "nccl"})
    size = 8 * MiB
    r = run_collective(t, 1, "all_reduce", size, algorithm="ring", protocol=proto)
    assert r.protocol == proto
    expect = 5e-6 + base_us * 1e-6 + 2e-6 + 2 * (n - 1) * (wire * size / n / 400e9 + max(0.5, hop_us) * 1e-6)
    assert r.time_s == pytest.approx(expect, rel=1e-6)


def test_protocol_model_none_is_idealised():
    t = make_topology(gpus_per_node=4, nics_per_node=1)
    assert run_collective(t, 1, "all_reduce", MiB, algorithm="ring").protocol == "Simple"
    with pytest.raises(SpecError, match="protocol_model"):
        run_collective(t, 1, "all_reduce", MiB, algorithm="ring", protocol="LL")
    with pytest.raises(SpecError, match="protocol"):
        run_collective(t, 1, "all_reduce", MiB, algorithm="ring", protocol="LL64")
    with pytest.raises(SpecError, match="Simple"):
        ProtocolCost("nvls", "LL", "nccl")


def test_tuner_picks_ll_small_simple_large(h200):
    for nodes in (1, 2):
        small = run_collective(h200, nodes, "all_reduce", 8)
        large = run_collective(h200, nodes, "all_reduce", 1024 * MiB)
        assert small.protocol == "LL", small
        assert large.protocol == "Simple", large
    assert run_collective(h200, 1, "all_reduce", 1024 * MiB).algorithm == "nvls"
    tuner = Tuner(h200, 2, 8)
    assert tuner.choose("all_reduce", world(16), 8).endswith("/LL")
    assert tuner.choose("all_reduce", world(16), 8, algorithm="ring", protocol="Simple") == "ring/Simple"


def test_all_to_all_per_peer_post_cost():
    # 32 nodes of one GPU: 31 network peers at 1 us each to post; the bytes are negligible; the last message
    # then crosses the network at NCCL's Simple network hop latency (14 us > the fabric's 3 us)
    t = make_topology(gpus_per_node=1, nics_per_node=1, nic_lat_us=3.0, collectives_extra={"protocol_model": "nccl"})
    r = run_collective(t, 32, "all_to_all", 32 * 8, algorithm="direct", protocol="Simple")
    assert r.time_s == pytest.approx(31e-6 + 14e-6, rel=1e-3)
    ideal = make_topology(gpus_per_node=1, nics_per_node=1, nic_lat_us=3.0)
    assert run_collective(ideal, 32, "all_to_all", 32 * 8, algorithm="direct").time_s == pytest.approx(3e-6, rel=1e-2)


def test_cli_protocol(root):
    out = subprocess.run([sys.executable, "-m", "simfuse.cli", "collective", "--topology",
                          str(root / "topologies/h100_nvl8_ib_ndr.yaml"), "--op", "all_reduce", "--size", "1MiB",
                          "--algorithm", "ring", "--protocol", "ll128", "--format", "json"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    row = json.loads(out.stdout)
    assert row["algorithm"] == "ring" and row["protocol"] == "LL128"


def test_fixed_cost_is_nccls_simple_base_latency(root):
    """The collectives' fixed cost (launch_us + sync_us) is NCCL's Simple base latency in the spec's default and
    in every shipped topology, so LL runs 1.8 us ahead of it and LL128 5.6 us behind, as in NCCL's model."""
    from simfuse.collectives.protocols import _BASE_LAT_US
    from simfuse.spec.topology import CollectiveOverheadSpec, load_topology

    simple_s = _BASE_LAT_US["ring"]["Simple"] * 1e-6
    assert _BASE_LAT_US["tree"]["Simple"] == _BASE_LAT_US["ring"]["Simple"]
    d = CollectiveOverheadSpec()
    assert d.launch_s + d.sync_s == pytest.approx(simple_s, rel=1e-12)
    files = sorted((root / "topologies").glob("*.yaml"))
    assert files
    for f in files:
        co = load_topology(f).collectives
        assert co.launch_s + co.sync_s == pytest.approx(simple_s, rel=1e-12), f.name
    # a topology that names neither field gets the default: a 2-GPU Simple ring all-reduce of one byte costs
    # the base latency plus its two hops (the wire time of a byte is negligible at 1e-6 relative tolerance)
    from simfuse.spec import topology_from_dict

    d = {"name": "t", "device": {"name": "dev", "compute_units": 100, "max_workgroups_per_cu": 2, "peak_tflops": {"fp32": 100},
                                  "hbm_bw_gbps": 4000},
         "scale_up": {"gpus_per_node": 2, "bw_gbps": 400, "latency_us": 0.5},
         "scale_out": {"nics_per_node": 1, "nic_bw_gbit": 400, "latency_us": 3.0, "fabric": "fat_tree"},
         "collectives": {"protocol_model": "nccl"}}
    t = topology_from_dict(d, "<test>")
    assert t.collectives.launch_s + t.collectives.sync_s == pytest.approx(simple_s, rel=1e-12)
    r = run_collective(t, 1, "all_reduce", 256, algorithm="ring", protocol="Simple")
    assert r.time_s == pytest.approx(simple_s + 2 * 3.4e-6 + 2 * 128 / 400e9, rel=1e-3)


def test_a_named_algorithm_needs_its_hardware_everywhere(root, capsys):
    """`op --set baseline_algorithm=collnet` and `run --set allreduce_algorithm=collnet` on a fabric without SHARP
    are refused like `collective --algorithm collnet` (they used to simulate SHARP the topology lacks)."""
    from simfuse.cli import main

    topo = str(root / "topologies" / "h100_nvl8_ib_ndr.yaml")
    for argv in (["collective", "--topology", topo, "--nodes", "2", "--op", "all_reduce", "--algorithm", "collnet",
                  "--size", "1MiB"],
                 ["op", "--op", "gemv_all_reduce", "--topology", topo, "--nodes", "2",
                  "--set", "baseline_algorithm=collnet"],
                 ["run", "--model", str(root / "models" / "llm_tp_dp.yaml"), "--topology", topo, "--nodes", "2",
                  "--set", "allreduce_algorithm=collnet", "--set", "uncertainty=none"]):
        assert main(argv) == 2, argv
        assert "scale_out.sharp" in capsys.readouterr().err


def test_a_named_algorithm_runs_its_fastest_protocol(root):
    """A baseline that names its algorithm runs that algorithm's fastest protocol, as `simfuse collective
    --algorithm` does (it used to run Simple): the op's baseline collective is the tuner's ring choice."""
    from simfuse import api
    from simfuse.spec import load_topology

    topo_path = root / "topologies" / "h100_nvl8_ib_ndr.yaml"
    named = api.op("gemv_all_reduce", topo_path, 2, baseline_algorithm="ring")
    tuned = api.op("gemv_all_reduce", topo_path, 2)
    choice = named.iloc[0]["baseline_algorithm"]
    assert choice.startswith("ring/")
    size = float(named.iloc[0]["comm_bytes_per_rank"])
    assert choice == Tuner(load_topology(topo_path), 2, 8).choose("all_reduce", world(16), size, algorithm="ring")
    assert named.iloc[0]["baseline_time_s"] >= tuned.iloc[0]["baseline_time_s"]  # the tuner's pick is the fastest


def test_a_named_ring_beyond_16_nodes_still_tunes_its_protocol(root):
    """The candidates leave rings out beyond 16 nodes; a ring named there (a user's choice) still runs its
    fastest protocol instead of Simple."""
    from simfuse.spec import load_topology

    t = load_topology(root / "topologies" / "h100_nvl8_ib_ndr.yaml")
    for nodes in (16, 17):
        choice = Tuner(t, nodes, 8).choose("all_reduce", world(nodes * 8), 4096, algorithm="ring")
        assert choice.startswith("ring/") and choice != "ring/Simple", (nodes, choice)


def _a3mega_like(**kw):
    """2 x 8 H100-like GPUs, NVLink 450 GB/s with NVLS (NCCL's Hopper nvlsEfficiency 0.85), 8 NICs of 200 Gb/s
    per node (GCP A3 Mega's shape), rail-optimized, line rate (efficiencies 1)."""
    return make_topology(gpus_per_node=8, nics_per_node=8, nvl_gbps=450, nvl_lat_us=1.0, nic_gbit=200,
                         nic_lat_us=3.0, fabric="rail_optimized",
                         scale_up_extra={"nvls": True, "nvls_efficiency": 0.85}, **kw)


def test_two_node_allreduce_beyond_the_nic_rate_a3mega():
    """A3 Mega (2 x 8 H100, 8 x 200 Gb/s per node) measures 338.8 GB/s busbw at 8 GiB
    (lessizzmore/create-a3mega-ztan-fork@02dd8f4:ztan-NCCL-test-result).  A ring's busbw is capped by one NIC
    per channel: g x 25 GB/s = 200.  On two nodes NCCL's trees carry only each GPU's 1/g shard per NIC each way
    (each node is a leaf of one tree and the root of the other; NVLSTree's switch reduces the node's buffers
    first), so busbw = 2 (n-1)/n x g x B_nic = 375 GB/s at line rate when the NVLink part keeps up."""
    t = _a3mega_like()
    size, g, n = 8 * 2**30, 8, 16
    nic = 25e9
    bound = 2 * (n - 1) / n * g * nic / 1e9
    ring = run_collective(t, 2, "all_reduce", size, algorithm="ring")
    assert ring.busbw_gbps <= g * nic / 1e9 * 1.0001
    for algo in ("nvls_tree", "tree"):
        r = run_collective(t, 2, "all_reduce", size, algorithm=algo)
        assert r.busbw_gbps == pytest.approx(bound, rel=1e-3)
        assert r.busbw_gbps > 338.8 > ring.busbw_gbps
    # NVLSTree's closed form: NVLS size (1 + 1/g) each way at 450 x 0.85 GB/s, pipelined with the shard
    # (size/g) each way on every NIC, two network hops (up and down the depth-1 trees)
    r = run_collective(t, 2, "all_reduce", size, algorithm="nvls_tree")
    expect = _pipelined(size * (1 + 1 / g) / (450e9 * 0.85), 1e-6, size / g / nic, 3e-6, 2, nvls=True)
    assert r.time_s == pytest.approx(expect, rel=1e-9)
    # the measured figure implies the NICs ran at 338.8 / 375 = 90% of line rate: at that NIC efficiency the
    # simulated two-node trees give the measured busbw (the NVLink part still keeps up)
    measured = 338.8
    slowed = _a3mega_like(scale_out_extra={"efficiency": measured / bound})
    for algo in ("nvls_tree", "tree"):
        assert run_collective(slowed, 2, "all_reduce", size, algorithm=algo).busbw_gbps == \
            pytest.approx(measured, rel=1e-3)
    # the default tuner takes a tree on two nodes at this size, not the ring
    assert run_collective(t, 2, "all_reduce", size).algorithm in ("tree", "nvls_tree")
