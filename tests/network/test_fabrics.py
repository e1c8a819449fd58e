"""Fabric classes: the registry, the 3-tier fat tree with pods (geometry, closed forms, contention, invariants,
symmetric == full), and the validation of its topology fields."""

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from simfuse.collectives import run_collective
from simfuse.collectives.algorithms import Layout, make_algorithm
from simfuse.engine import Simulation
from simfuse.errors import SpecError
from simfuse.network import (
    CLASS_NAMES,
    INTER,
    INTER_CORE,
    INTER_LEAF,
    INTER_SPINE,
    INTER_XRAIL,
    INTRA,
    SELF,
    Fabric,
    FlowNetwork,
    registered_fabrics,
)
from simfuse.network.fabrics import FatTree3TierFabric, FatTreeFabric, RailOptimizedFabric
from simfuse.spec import load_topology
from simfuse.spec.topology import FABRICS

from ..conftest import make_topology

MiB = 1 << 20


def tier3(npl=2, lpp=2, o1=1.0, o2=1.0, hop_ns=100.0, g=2, k=2, nic_gbit=400.0, nic_lat_us=3.0, **kw):
    return make_topology(gpus_per_node=g, nics_per_node=k, nic_gbit=nic_gbit, nic_lat_us=nic_lat_us,
                         fabric="fat_tree_3tier", oversub=o1,
                         scale_out_extra={"nodes_per_leaf": npl, "leaves_per_pod": lpp,
                                          "spine_oversubscription": o2, "hop_latency_ns": hop_ns}, **kw)


def run_flows(fabric, flows, record_usage=True):
    """flows: list of (src, dst, size_bytes, start_s) on a full fabric.  Returns (sim, net, finish times)."""
    sim = Simulation(record=False)
    net = FlowNetwork(sim, fabric.capacities, fabric.names, record_usage=record_usage)
    done = {}

    def one(i, src, dst, size, t0):
        yield sim.env.timeout(t0)
        (grp,) = fabric.flow_groups(src, np.array([dst]), np.array([size]))
        yield net.transfer(grp.links, grp.size_bytes, grp.latency_s, count=grp.count, weights=grp.weights)
        done[i] = sim.now - t0

    for i, f in enumerate(flows):
        sim.process(one(i, *f))
    sim.run()
    return sim, net, done


# -- registry and interface ---------------------------------------------------------------------------------
def test_registry_matches_spec_and_dispatches():
    assert set(registered_fabrics()) == set(FABRICS)
    expect = {"fat_tree": FatTreeFabric, "rail_optimized": RailOptimizedFabric,
              "fat_tree_3tier": FatTree3TierFabric}
    for name, cls in expect.items():
        for symmetric in (True, False):
            f = Fabric(make_topology(fabric=name), 2, symmetric=symmetric)
            assert type(f) is cls and isinstance(f, Fabric) and f.kind == name
    # a class built directly must match the topology's fabric
    with pytest.raises(SpecError) as e:
        FatTree3TierFabric(make_topology(fabric="fat_tree"), 2)
    assert e.value.field == "scale_out.fabric"


def test_route_classes_named_and_leave_node():
    for name in FABRICS:
        f = Fabric(tier3() if name == "fat_tree_3tier" else make_topology(fabric=name, gpus_per_node=2,
                                                                         nics_per_node=2), 8)
        for c in f.route_classes:
            assert f.route_class_name(c) == CLASS_NAMES[c]
            assert f.tier_of(c) in f.tiers
        dsts = np.arange(f.n_ranks)
        for src in (0, f.n_ranks - 1):
            cls = f.route_class(src, dsts)
            assert set(cls.tolist()) <= set(f.route_classes)
            off_node = f.node_of(dsts) != f.node_of(src)
            assert np.array_equal(~np.isin(cls, (SELF, INTRA)), off_node)
    assert {SELF, INTRA, INTER, INTER_XRAIL, INTER_LEAF, INTER_SPINE, INTER_CORE} == set(CLASS_NAMES)


@settings(max_examples=40, deadline=None)
@given(npl=st.integers(1, 3), lpp=st.integers(1, 3), g=st.sampled_from([1, 2, 4]), nodes=st.integers(1, 12),
       data=st.data())
def test_3tier_geometry(npl, lpp, g, nodes, data):
    f = Fabric(tier3(npl=npl, lpp=lpp, g=g, k=g), nodes, symmetric=False)
    src = data.draw(st.integers(0, f.n_ranks - 1))
    dst = data.draw(st.integers(0, f.n_ranks - 1))
    sn, dn = src // g, dst // g
    if src == dst:
        want = SELF
    elif sn == dn:
        want = INTRA
    elif sn // npl == dn // npl:
        want = INTER_LEAF
    elif sn // (npl * lpp) == dn // (npl * lpp):
        want = INTER_SPINE
    else:
        want = INTER_CORE
    assert int(f.route_class(src, np.array([dst]))[0]) == want
    links, lat = f.path(src, dst)
    names = [f.names[i] for i in links]
    kinds = f.route_kinds(want)
    stems = {"nvl": ("nvl_tx", "nvl_rx"), "nic": ("nic_tx", "nic_rx"), "leaf": ("leaf_up", "leaf_down"),
             "spine": ("spine_up", "spine_down")}
    half = len(kinds) // 2
    expect = [f"{stems[kd][0]}[" for kd in kinds[:half]] + [f"{stems[kd][1]}[" for kd in kinds[half:]]
    assert [n[:n.index("[") + 1] for n in names] == expect
    assert lat == f.latency_for(want)


def test_class_links_and_capacity_shares():
    """Symmetric class links carry one rank's share of each tier: n_ranks x share = the tier's total
    capacity in full mode, for every family."""
    npl, lpp, g, k, o1, o2 = 2, 2, 4, 2, 2.0, 3.0
    t = tier3(npl=npl, lpp=lpp, g=g, k=k, o1=o1, o2=o2)
    nodes = npl * lpp * 3
    sym, full = Fabric(t, nodes), Fabric(t, nodes, symmetric=False)
    assert sym.tiers == ("self", "nvlink", "leaf", "spine", "core")
    nic = t.scale_out.effective_nic_bw_bytes_per_s
    per_rank = {"leaf_up": nic * k / g / o1, "spine_up": nic * k / g / (o1 * o2), "nic_tx": nic * k / g}
    for name, share in per_rank.items():
        assert sym.capacities[sym.names.index(name)] == pytest.approx(share)
        total = sum(c for n, c in zip(full.names, full.capacities, strict=True) if n.startswith(name + "["))
        assert total == pytest.approx(sym.n_ranks * share)
    links = sym.class_links(INTER_CORE)
    assert [sym.names[i] for i in links] == ["nic_tx", "leaf_up", "spine_up", "spine_down", "leaf_down", "nic_rx"]
    assert sym.class_links(SELF) == ()
    with pytest.raises(RuntimeError):
        full.class_links(INTER_LEAF)


def test_no_uplinks_when_a_tier_is_not_crossed():
    t = tier3(npl=4, lpp=2)
    assert set(Fabric(t, 3, symmetric=False).families) == {"nvl", "nic"}  # one leaf
    assert set(Fabric(t, 8, symmetric=False).families) == {"nvl", "nic", "leaf"}  # one pod
    assert set(Fabric(t, 9, symmetric=False).families) == {"nvl", "nic", "leaf", "spine"}


# -- closed forms ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dst_node,cls,hops", [(1, INTER_LEAF, 0), (2, INTER_SPINE, 2), (4, INTER_CORE, 4)])
def test_uncongested_transfer_is_alpha_beta_per_tier(dst_node, cls, hops):
    nic_gbit, lat_us, hop_ns, g = 200.0, 2.5, 150.0, 2
    t = tier3(npl=2, lpp=2, g=g, k=g, nic_gbit=nic_gbit, nic_lat_us=lat_us, hop_ns=hop_ns)
    f = Fabric(t, 8, symmetric=False)
    dst = dst_node * g
    assert int(f.route_class(0, np.array([dst]))[0]) == cls
    size = 3 * MiB
    _, _, done = run_flows(f, [(0, dst, size, 0.0)])
    alpha = lat_us * 1e-6 + hops * hop_ns * 1e-9
    beta = size / (nic_gbit * 1e9 / 8)  # a single flow is limited by its NIC; uplinks are wider
    assert done[0] == pytest.approx(alpha + beta, rel=1e-12)
    assert f.latency_for(cls) == pytest.approx(alpha, rel=1e-12)


@pytest.mark.parametrize("o", [1.0, 2.0, 4.0])
def test_leaf_uplink_contention_scales_with_oversubscription(o):
    """Every GPU under leaf 0 sends to its counterpart under leaf 1: the leaf uplink carries the whole leaf's NIC
    bandwidth of demand at capacity 1/o of it, so the transfer takes o times the wire time."""
    npl, g = 2, 2
    t = tier3(npl=npl, lpp=2, g=g, k=g, o1=o, nic_lat_us=0.0)
    f = Fabric(t, 4, symmetric=False)
    size = 8 * MiB
    leaf0 = range(npl * g)
    _, net, done = run_flows(f, [(r, r + npl * g, size, 0.0) for r in leaf0])
    wire = size / t.scale_out.effective_nic_bw_bytes_per_s
    for i in leaf0:
        assert done[i] == pytest.approx(f.latency_for(INTER_SPINE) + o * wire, rel=1e-9)
    up = f.names.index("leaf_up[0]")
    assert net.carried_bytes[up] == pytest.approx(npl * g * size, rel=1e-9)


@pytest.mark.parametrize("o1,o2", [(1.0, 2.0), (2.0, 3.0)])
def test_core_contention_scales_with_both_oversubscriptions(o1, o2):
    """Every GPU of pod 0 sends to its counterpart in pod 1: limited by the pod's core uplinks, which carry
    1 / (o1 o2) of the pod's NIC bandwidth."""
    npl, lpp, g = 2, 2, 1
    t = tier3(npl=npl, lpp=lpp, g=g, k=g, o1=o1, o2=o2, nic_lat_us=0.0, hop_ns=0.0)
    f = Fabric(t, 2 * npl * lpp, symmetric=False)
    per_pod = npl * lpp * g
    size = 4 * MiB
    _, _, done = run_flows(f, [(r, r + per_pod, size, 0.0) for r in range(per_pod)])
    wire = size / t.scale_out.effective_nic_bw_bytes_per_s
    for i in range(per_pod):
        assert done[i] == pytest.approx(o1 * o2 * wire, rel=1e-9)


# -- invariants on random small 3-tier systems -----------------------------------------------------------------
@st.composite
def tier3_systems(draw):
    g = draw(st.sampled_from([1, 2, 4]))
    k = draw(st.sampled_from([d for d in (1, 2, 4) if g % d == 0]))
    t = tier3(npl=draw(st.integers(1, 3)), lpp=draw(st.integers(1, 3)), g=g, k=k,
              o1=draw(st.sampled_from([1.0, 1.5, 3.0])), o2=draw(st.sampled_from([1.0, 2.0])),
              hop_ns=draw(st.floats(0, 500)), nic_gbit=draw(st.floats(50, 800)),
              nic_lat_us=draw(st.floats(0, 5)), nvl_gbps=draw(st.floats(50, 500)))
    nodes = draw(st.integers(1, 10))
    return t, nodes


@settings(max_examples=40, deadline=None)
@given(system=tier3_systems(), data=st.data())
def test_random_flows_invariants(system, data):
    t, nodes = system
    f = Fabric(t, nodes, symmetric=False)
    n = f.n_ranks
    flows = data.draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1), st.floats(1.0, 4e6),
                                         st.floats(0.0, 1e-4)), min_size=1, max_size=16))
    sim, net, done = run_flows(f, flows)
    assert net.delivered_bytes == pytest.approx(net.injected_bytes, rel=1e-9)
    assert net.injected_bytes == pytest.approx(sum(fl[2] for fl in flows), rel=1e-9)
    for _a, _b, loads in net.usage:
        assert np.all(loads <= f.capacities * (1 + 1e-9))
    for i, (src, dst, size, _t0) in enumerate(flows):
        links, lat = f.path(src, dst)
        bottleneck = min((f.capacities[x] for x in links), default=np.inf)
        assert done[i] >= (lat + size / bottleneck) * (1 - 1e-9) - 2e-13  # flows.py's completion tolerance
    assert sim.now >= float(np.max(net.carried_bytes / f.capacities)) * (1 - 1e-9) - 2e-13


@settings(max_examples=25, deadline=None)
@given(system=tier3_systems(), op=st.sampled_from(["all_to_all", "all_reduce", "all_gather"]),
       size=st.integers(1, 4 * MiB))
def test_collective_invariants_on_3tier(system, op, size):
    t, nodes = system
    res, _sim, fabric, net = run_collective(t, nodes, op, size, mode="full", record_usage=True,
                                            include_overheads=False, return_sim=True)
    algo = make_algorithm(op, res.algorithm, Layout(nodes, fabric.gpus_per_node), size)
    scheduled = sum(float(np.sum(sz)) for r in range(fabric.n_ranks) for _d, sz in algo.steps(r))
    assert net.delivered_bytes == pytest.approx(net.injected_bytes, rel=1e-9)
    assert net.injected_bytes == pytest.approx(scheduled, rel=1e-9)
    for _a, _b, loads in net.usage:
        assert np.all(loads <= fabric.capacities * (1 + 1e-9))
    if len(fabric.capacities):
        assert res.time_s >= float(np.max(net.carried_bytes / fabric.capacities)) * (1 - 1e-9) - 2e-13


# -- symmetric (representative rank) == full simulation ------------------------------------------------------
@settings(max_examples=25, deadline=None)
@given(npl=st.integers(1, 3), lpp=st.integers(1, 2), pods=st.integers(1, 3), g=st.sampled_from([1, 2, 4]),
       o1=st.sampled_from([1.0, 2.0]), o2=st.sampled_from([1.0, 3.0]), hop_ns=st.floats(0, 400),
       size=st.integers(1, 8 * MiB), alg=st.sampled_from(["direct", "hierarchical"]))
def test_symmetric_equals_full_all_to_all(npl, lpp, pods, g, o1, o2, hop_ns, size, alg):
    k = 1 if g == 1 else 2
    t = tier3(npl=npl, lpp=lpp, g=g, k=k, o1=o1, o2=o2, hop_ns=hop_ns)
    nodes = npl * lpp * pods
    full = run_collective(t, nodes, "all_to_all", size, algorithm=alg, mode="full", include_overheads=False)
    sym = run_collective(t, nodes, "all_to_all", size, algorithm=alg, mode="symmetric", include_overheads=False)
    assert sym.mode == "symmetric" and full.mode == "full"
    assert sym.time_s == pytest.approx(full.time_s, rel=1e-9)
    assert sym.delivered_bytes == pytest.approx(full.delivered_bytes, rel=1e-9)  # both: every rank's bytes


def test_rings_across_leaves_are_not_taken_as_symmetric():
    """A ring's inter-node hop crosses a leaf boundary only at some nodes: auto mode runs the ranks of one leaf
    (the quotient mode: a shift by a leaf maps the fabric onto itself) and gives the full simulation's time, an
    explicit symmetric mode is refused; on one leaf the ring stays symmetric."""
    t = tier3(npl=2, lpp=2, g=2, k=2)
    auto = run_collective(t, 4, "all_reduce", MiB, algorithm="ring")
    full = run_collective(t, 4, "all_reduce", MiB, algorithm="ring", mode="full")
    assert auto.mode == "quotient" and full.mode == "full"
    assert auto.time_s == pytest.approx(full.time_s, rel=1e-9)
    with pytest.raises(SpecError) as e:
        run_collective(t, 4, "all_reduce", MiB, algorithm="ring", mode="symmetric")
    assert e.value.field == "mode"
    one_leaf = run_collective(t, 2, "all_reduce", MiB, algorithm="ring")
    assert one_leaf.mode == "symmetric"
    assert one_leaf.time_s == pytest.approx(run_collective(t, 2, "all_reduce", MiB, algorithm="ring",
                                                           mode="full").time_s, rel=1e-9)


def test_symmetric_mode_needs_whole_leaves_and_pods():
    t = tier3(npl=2, lpp=2)
    with pytest.raises(SpecError) as e:
        Fabric(t, 3)
    assert e.value.field == "scale_out.nodes_per_leaf"
    with pytest.raises(SpecError) as e:
        Fabric(t, 6)  # 3 leaves: two pods, the second half full
    assert e.value.field == "scale_out.leaves_per_pod"
    Fabric(t, 3, symmetric=False)  # full mode takes any node count
    assert run_collective(t, 3, "all_to_all", MiB).mode == "full"  # auto falls back


# -- the shipped topology and validation ----------------------------------------------------------------------
def test_shipped_3tier_topology(root):
    t = load_topology(root / "topologies" / "h200_3tier_pods.yaml")
    so = t.scale_out
    f = Fabric(t, 128)
    d = f.describe()
    assert d["leaves"] == 128 // so.nodes_per_leaf and d["pods"] == d["leaves"] // so.leaves_per_pod
    base = load_topology(root / "topologies" / "h200_nvl8_ib_ndr.yaml")
    assert t.device == base.device and t.scale_up == base.scale_up
    assert so.latency_s == base.scale_out.latency_s
    assert f.latency_for(INTER_CORE) == pytest.approx(so.latency_s + 4 * so.hop_latency_s)


def _dict(**so):
    d = {
        "name": "x",
        "device": {"name": "d", "compute_units": 1, "max_workgroups_per_cu": 1, "peak_tflops": {"bf16": 1},
                   "hbm_bw_gbps": 1},
        "scale_up": {"gpus_per_node": 8, "bw_gbps": 450, "latency_us": 1},
        "scale_out": {"nics_per_node": 8, "nic_bw_gbit": 400, "latency_us": 3, "fabric": "fat_tree_3tier"},
    }
    d["scale_out"].update(so)
    return d


@pytest.mark.parametrize("so,field", [
    ({"nodes_per_leaf": 0}, "scale_out.nodes_per_leaf"),
    ({"nodes_per_leaf": 2.5}, "scale_out.nodes_per_leaf"),
    ({"leaves_per_pod": "eight"}, "scale_out.leaves_per_pod"),
    ({"spine_oversubscription": 0.5}, "scale_out.spine_oversubscription"),
    ({"hop_latency_ns": -1}, "scale_out.hop_latency_ns"),
    ({"oversubscription": 0.9}, "scale_out.oversubscription"),
    ({"fabric": "fat_tree", "nodes_per_leaf": 4}, "scale_out.nodes_per_leaf"),
    ({"fabric": "rail_optimized", "spine_oversubscription": 2}, "scale_out.spine_oversubscription"),
    ({"fabric": "dragonfly"}, "scale_out.fabric"),
    ({"leaves_per_pods": 4}, "scale_out.leaves_per_pods"),
])
def test_bad_3tier_fields_name_file_and_field(tmp_path, so, field):
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(_dict(**so)))
    with pytest.raises(SpecError) as e:
        load_topology(p)
    assert e.value.field == field and e.value.source == str(p)


def test_3tier_defaults():
    from simfuse.spec import topology_from_dict
    from simfuse.spec.topology import ScaleOutSpec

    so = topology_from_dict(_dict(), "<t>").scale_out
    for name in ("nodes_per_leaf", "leaves_per_pod", "spine_oversubscription", "hop_latency_s"):
        assert getattr(so, name) == getattr(ScaleOutSpec, name)


# -- symmetry on 3-tier fabrics from the algorithms' declared node relabellings --------------------------------
def _as_sets(steps):
    return [sorted(zip(np.asarray(d).tolist(), np.broadcast_to(np.asarray(s, dtype=float), np.shape(d)).tolist(),
                       strict=True)) for d, s in steps]


@settings(max_examples=30, deadline=None)
@given(nodes=st.sampled_from([2, 3, 4, 8]), g=st.sampled_from([1, 2, 4]),
       alg=st.sampled_from([("all_to_all", "direct"), ("all_to_all", "hierarchical"), ("all_reduce", "direct"),
                            ("reduce_scatter", "direct"), ("all_gather", "direct"),
                            ("all_reduce", "hierarchical_rhd")]), data=st.data())
def test_declared_relabellings_hold(nodes, g, alg, data):
    """An algorithm declaring ``any`` has every rank's schedule equal to rank 0's mapped by any node permutation
    (with the local index kept); ``xor``: by node -> node XOR t.  Checked on every rank."""
    op, name = alg
    algo = make_algorithm(op, name, Layout(nodes, g), 4 * MiB)
    if algo.relabelling == "shift":
        assert name == "hierarchical_rhd" and nodes & (nodes - 1)  # a ring between nodes off powers of two
        return
    if algo.relabelling == "any":
        perm = np.array(data.draw(st.permutations(range(nodes))), dtype=np.int64)
    else:
        t = data.draw(st.integers(0, nodes - 1))
        perm = np.arange(nodes, dtype=np.int64) ^ t
    ranks = np.arange(nodes * g, dtype=np.int64)
    image = perm[ranks // g] * g + ranks % g  # the relabelling of every rank
    for r in range(nodes * g):
        mapped = [(image[np.asarray(d, dtype=np.int64)], s) for d, s in algo.steps(r)]
        assert _as_sets(algo.steps(int(image[r]))) == _as_sets(mapped)


def test_declared_relabelling_reads_no_schedule():
    """With ``any`` (or ``xor`` on powers of two) the 3-tier fabric decides from its automorphisms alone: no rank's
    schedule is read (what took 35 s and 1.7 GB for a 4,096-GPU all-to-all)."""
    def never(_rank):
        raise AssertionError("schedule read")

    t = tier3(npl=2, lpp=2, g=2, k=2)
    assert Fabric.symmetry_problem(t, 8, steps_of_rank=never, relabelling="any") is None
    assert Fabric.symmetry_problem(t, 8, steps_of_rank=never, relabelling="xor") is None
    t3 = tier3(npl=3, lpp=2, g=2, k=2)  # 3 nodes per leaf: XOR translations are no automorphism
    with pytest.raises(AssertionError, match="schedule read"):
        Fabric.symmetry_problem(t3, 6, steps_of_rank=never, relabelling="xor")
    with pytest.raises(ValueError):
        Fabric.symmetry_problem(t, 8, steps_of_rank=never, relabelling="rotate")


@settings(max_examples=20, deadline=None)
@given(npl=st.sampled_from([1, 2, 4]), lpp=st.sampled_from([1, 2]), pods=st.sampled_from([1, 2]),
       g=st.sampled_from([1, 2]), o1=st.sampled_from([1.0, 2.0]), o2=st.sampled_from([1.0, 3.0]),
       hop_ns=st.floats(0, 400), size=st.integers(1, 8 * MiB),
       alg=st.sampled_from([("all_reduce", "hierarchical_rhd"), ("all_reduce", "direct"),
                            ("reduce_scatter", "direct"), ("all_gather", "direct")]))
def test_symmetric_equals_full_declared_relabellings(npl, lpp, pods, g, o1, o2, hop_ns, size, alg):
    """Recursive halving/doubling (xor) and the direct algorithms (any) on 3-tier fabrics of power-of-two leaves
    and pods: the representative rank equals full simulation."""
    t = tier3(npl=npl, lpp=lpp, g=g, k=g, o1=o1, o2=o2, hop_ns=hop_ns)
    nodes = npl * lpp * pods
    op, name = alg
    sym = run_collective(t, nodes, op, size, algorithm=name, mode="symmetric", include_overheads=False)
    full = run_collective(t, nodes, op, size, algorithm=name, mode="full", include_overheads=False)
    assert sym.mode == "symmetric"
    assert sym.time_s == pytest.approx(full.time_s, rel=1e-9)
