"""``scale_out.full_node_efficiency``: the NIC efficiency of collectives across nodes whose GPUs drive every NIC of
their nodes.  It replaces ``scale_out.efficiency`` for those collectives only: a collective inside one node, or on
fewer GPUs per node than NICs, never changes."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simfuse.collectives import run_collective
from simfuse.errors import SpecError
from simfuse.network import Fabric

from ..conftest import make_topology

MiB = 2**20


def _topo(full_node=None, efficiency=1.0, **kw):
    extra = {"efficiency": efficiency}
    if full_node is not None:
        extra["full_node_efficiency"] = full_node
    return make_topology(nvl_lat_us=0.0, nic_lat_us=0.0, scale_out_extra=extra, **kw)


@pytest.mark.parametrize("op,factor", [("all_gather", 1), ("all_reduce", 2)])
@pytest.mark.parametrize("nodes", [2, 4])
def test_ring_bus_bandwidth_closed_form(op, factor, nodes):
    # 8 GPUs and 8 NICs of 400 Gb/s (50 GB/s) per node, NVLink 450 GB/s, no latency: a ring's bus bandwidth is
    # the node's NIC rate, 8 x 50 GB/s, times the full-node efficiency
    size, n = 256 * MiB, 8 * nodes
    r = run_collective(_topo(full_node=0.8), nodes, op, size, algorithm="ring")
    busbw = factor * (n - 1) / n * size / r.time_s
    assert busbw == pytest.approx(8 * 50e9 * 0.8, rel=1e-6)
    assert r.busbw_gbps == pytest.approx(320.0, rel=1e-6)


def test_it_replaces_the_efficiency_where_it_applies():
    # every NIC driven: the efficiency no longer matters, the full-node efficiency does
    a = run_collective(_topo(full_node=0.85, efficiency=0.6), 4, "all_reduce", 64 * MiB, algorithm="ring")
    b = run_collective(_topo(full_node=0.85, efficiency=1.0), 4, "all_reduce", 64 * MiB, algorithm="ring")
    c = run_collective(_topo(efficiency=0.85), 4, "all_reduce", 64 * MiB, algorithm="ring")
    assert a.time_s == b.time_s == c.time_s


@settings(max_examples=15, deadline=None)
@given(fn=st.sampled_from([0.5, 0.8, 0.9, 1.0]), op=st.sampled_from(["all_reduce", "all_gather", "all_to_all"]),
       g=st.sampled_from([2, 4, 8]))
def test_intra_node_results_never_change(fn, op, g):
    base = make_topology(gpus_per_node=g, nics_per_node=g, scale_out_extra={"efficiency": 0.9})
    with_term = make_topology(gpus_per_node=g, nics_per_node=g,
                              scale_out_extra={"efficiency": 0.9, "full_node_efficiency": fn})
    assert run_collective(with_term, 1, op, 8 * MiB).time_s == run_collective(base, 1, op, 8 * MiB).time_s


@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "all_to_all"])
def test_fewer_gpus_per_node_than_nics_never_change(op):
    # 4 of a node's 8 GPUs (and so 4 of its 8 NICs) per node: the term does not apply
    base, term = _topo(efficiency=0.9), _topo(full_node=0.7, efficiency=0.9)
    a = run_collective(term, 4, op, 64 * MiB, gpus_per_node=4)
    b = run_collective(base, 4, op, 64 * MiB, gpus_per_node=4)
    assert a.time_s == b.time_s
    # every GPU of the node: it applies, slower at 0.7 than at 0.9
    assert run_collective(term, 4, op, 64 * MiB).time_s > run_collective(base, 4, op, 64 * MiB).time_s


def test_fewer_nics_than_gpus_apply():
    # 8 GPUs sharing 4 NICs drive every NIC
    t = _topo(full_node=0.5, nics_per_node=4)
    assert t.scale_out.applies_full_node(2, 8) and t.scale_out.applies_full_node(2, 4)
    assert not t.scale_out.applies_full_node(2, 2) and not t.scale_out.applies_full_node(1, 8)
    assert Fabric(t, 2).nic_bw == pytest.approx(50e9 * 0.5)
    assert Fabric(t, 2, gpus_per_node=2).nic_bw == pytest.approx(50e9)


@pytest.mark.parametrize("bad", [0.0, -0.5, 1.5, True])
def test_an_override_out_of_range_is_refused(bad):
    t = _topo().with_overrides({"scale_out.full_node_efficiency": bad})
    with pytest.raises(SpecError) as exc:
        run_collective(t, 2, "all_reduce", MiB)
    assert exc.value.field == "scale_out.full_node_efficiency"


def test_the_planners_nic_rate_follows_the_fabrics():
    from simfuse.workloads.planner import Rates

    t = _topo(full_node=0.8, efficiency=0.9)
    assert Rates.from_topology(t, 8).nic_bytes_per_s == pytest.approx(Fabric(t, 2).nic_bw)  # 8 NICs / 8 GPUs
    assert Rates.from_topology(t, 4).nic_bytes_per_s == pytest.approx(8 * 50e9 * 0.9 / 4)  # not every NIC driven
    assert Fabric(t, 2, gpus_per_node=4).nic_bw == pytest.approx(50e9 * 0.9)
