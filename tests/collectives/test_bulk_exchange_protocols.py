"""The bulk uneven all-to-all (``AllToAllVNode`` through ``ExchangeInstance.bulk_member``) pays the NCCL protocol
model exactly as ``collective_process``'s all-to-all: a uniform all-to-all-v equals ``run_collective``'s direct
all-to-all (tuner's protocol) in full simulation and on the fast path; closed forms for the proxy's per-peer posts
and the protocol's hop latency; ``protocol_model: none`` keeps the old cost."""

import numpy as np
import pytest

from simfuse.collectives import run_collective
from simfuse.collectives.groups import candidate_algorithms, world
from simfuse.collectives.protocols import _BASE_LAT_US, _HW_LAT_NET_US, ProtocolCost
from simfuse.collectives.tuner import GroupAlgorithms, Tuner
from simfuse.graph import AllToAllVNode, CollectiveNode, Graph
from simfuse.graph.executor import Executor, execute
from simfuse.graph.symmetry import fold
from simfuse.system import System

from ..conftest import make_topology

KiB = 2**10


def _topo(model="nccl", g=4, nics=4, overhead_us=1.0, launch_us=5.0, sync_us=2.0, **kw):
    return make_topology(gpus_per_node=g, nics_per_node=nics, launch_us=launch_us, sync_us=sync_us,
                         collectives_extra={"protocol_model": model, "net_overhead_us": overhead_us}, **kw)


def _uniform_graph(nodes, g, per_peer_bytes):
    n = nodes * g
    graph = Graph(nodes, g)
    graph.add_group(world(n))
    for r in range(n):
        graph.program(r).add(AllToAllVNode(name="a2av", group="world", send_bytes=np.full(n, per_peer_bytes)))
    return graph


@pytest.mark.parametrize("nodes,g", [(2, 4), (3, 2), (1, 4), (4, 1)])
@pytest.mark.parametrize("per_peer", [256.0, 8 * KiB, 4 * 2**20])
def test_uniform_alltoallv_equals_collective_direct(nodes, g, per_peer):
    topo = _topo(g=g, nics=g)
    n = nodes * g
    graph = _uniform_graph(nodes, g, per_peer)
    sysm = System.from_topology(topo)
    full = execute(sysm, graph)
    fast = execute(sysm, fold(graph))
    assert fast.sim_mode == "symmetric"
    ref = run_collective(topo, nodes, "all_to_all", per_peer * n, algorithm="direct", gpus_per_node=g)
    assert full.time_s == pytest.approx(ref.time_s, rel=1e-12)
    assert fast.time_s == pytest.approx(ref.time_s, rel=1e-12)
    # the reference under test is the protocol-priced one: LL for small sizes, Simple for MiB here
    assert ref.protocol == Tuner(topo, nodes, g).choose("all_to_all", world(n), per_peer * n,
                                                        algorithm="direct").split("/")[1]


def test_many_peers_pay_the_proxy_posts_closed_form():
    # 16 nodes x 1 GPU, 64-byte messages: the proxy posts 15 off-node peers at 1 us each, which dominates the
    # wire time (15 x 64 B / 50 GB/s ~ 0.02 us) and the hop latency (3 us); p2p between nodes runs Simple, as
    # NCCL's network connections have no LL buffers by default (protocols.P2P_LL_THRESHOLD_BYTES), so there is
    # no LL head start.  The last peer's message is posted after 15 us and then crosses the network (the
    # per-destination rule of collectives/posting.py, as the fused puts): launch + posts + NCCL's Simple network
    # hop latency (14 us > the fabric's 3 us) + sync
    nodes, per_peer = 16, 64.0
    topo = _topo(g=1, nics=1)
    t = execute(System.from_topology(topo), fold(_uniform_graph(nodes, 1, per_peer))).time_s
    expect = 5e-6 + (nodes - 1) * 1e-6 + _HW_LAT_NET_US["ring"]["Simple"] * 1e-6 + 2e-6
    assert t == pytest.approx(expect, rel=1e-9)
    assert Tuner(topo, nodes, 1).choose("all_to_all", world(nodes), per_peer * nodes, algorithm="direct") == \
        "direct/Simple"
    # without the protocol model: the old cost, launch + fabric latency + wire time + sync, no posts
    t0 = execute(System.from_topology(_topo("none", g=1, nics=1)), fold(_uniform_graph(nodes, 1, per_peer))).time_s
    wire = (nodes - 1) * per_peer / 50e9
    assert t0 == pytest.approx(5e-6 + 3e-6 + wire + 2e-6, rel=1e-9)


def test_hop_latency_and_wire_factor_closed_form():
    # 2 nodes x 1 GPU, one peer, no proxy cost: a big message and a small one, both Simple (NCCL's p2p between
    # nodes: no LL buffers on network connections), NCCL net hop 14 us > fabric 3 us
    topo = _topo(g=1, nics=1, overhead_us=0.0, nic_lat_us=3.0)
    sysm = System.from_topology(topo)
    big, small = 64 * 2**20, 512.0
    t_big = execute(sysm, fold(_uniform_graph(2, 1, big))).time_s
    assert t_big == pytest.approx(5e-6 + big / 50e9 + _HW_LAT_NET_US["ring"]["Simple"] * 1e-6 + 2e-6, rel=1e-9)
    t_small = execute(sysm, fold(_uniform_graph(2, 1, small))).time_s
    assert t_small == pytest.approx(5e-6 + small / 50e9 + _HW_LAT_NET_US["ring"]["Simple"] * 1e-6 + 2e-6, rel=1e-9)


def test_p2p_protocols_follow_nccl():
    """All-to-all is grouped send/recv: NCCL runs it Simple between nodes, and inside a node LL only up to 16 KiB
    per peer; never LL128 (protocols.P2P_LL_THRESHOLD_BYTES)."""
    one, two = _topo(g=4, nics=4), _topo(g=4, nics=4)
    for size_per_peer, expect in ((512.0, "LL"), (16 * KiB, "LL"), (16 * KiB + 1, "Simple"), (8 * 2**20, "Simple")):
        assert Tuner(one, 1, 4).choose("all_to_all", world(4), size_per_peer * 4).split("/")[1] == expect
    for size_per_peer in (512.0, 64 * KiB, 8 * 2**20):
        assert Tuner(two, 2, 4).choose("all_to_all", world(8), size_per_peer * 8).split("/")[1] == "Simple"
    for size_per_peer in (512.0, 8 * 2**20):
        assert all(not n.endswith("LL128") for n in candidate_algorithms(
            "all_to_all", world(4), 4, symmetric_only=True, topology=one, size_bytes=size_per_peer * 4))
    # a forced protocol is a what-if outside the rule: it runs
    forced = Tuner(two, 2, 4).choose("all_to_all", world(8), 8 * 2**20 * 8, protocol="LL")
    assert forced.endswith("/LL")


def test_uneven_alltoallv_fast_path_equals_full_with_protocols():
    # a relabelling-invariant uneven pattern (size by relative node/local offset): fast path == full simulation
    nodes, g = 3, 2
    n = nodes * g
    topo = _topo(g=g, nics=g)
    graph = Graph(nodes, g)
    graph.add_group(world(n))
    for r in range(n):
        node, local = divmod(r, g)
        sizes = np.array([2 * KiB * (1 + ((d // g - node) % nodes) * g + (d % g - local) % g) for d in range(n)])
        graph.program(r).add(AllToAllVNode(name="v", group="world", send_bytes=sizes))
    sysm = System.from_topology(topo)
    full, fast = execute(sysm, graph), execute(sysm, fold(graph))
    assert fast.time_s == pytest.approx(full.time_s, rel=1e-12)
    # each rank posts its 4 off-node peers at 1 us each (serially) before the exchange can end
    off = min(_BASE_LAT_US["ring"][p] - _BASE_LAT_US["ring"]["Simple"] for p in ("LL", "LL128", "Simple")) * 1e-6
    assert full.time_s >= 5e-6 + off + 4 * 1e-6 + 2e-6 - 1e-15


def test_proxy_posts_serialize_across_late_receivers():
    # rank 0 of 3 (3 nodes x 1 GPU) sends to ranks 1 and 2; every rank enters together, so rank 0's posts take
    # 2 x 10 us; the second message then crosses the network (NCCL's Simple hop, 14 us), so the exchange ends at
    # 5 us launch + 20 us + 14 us + 2 us sync (Simple between nodes)
    topo = _topo(g=1, nics=1, overhead_us=10.0)
    graph = _uniform_graph(3, 1, 128.0)
    t = execute(System.from_topology(topo), graph).time_s
    assert t == pytest.approx(5e-6 + 2 * 10e-6 + _HW_LAT_NET_US["ring"]["Simple"] * 1e-6 + 2e-6, rel=1e-9)
    assert ProtocolCost("ring", "LL").net_overhead_s == 1e-6  # the default the topology overrides here


class _CountingTuner(Tuner):
    """A tuner that records what it is asked: ``(op, size_bytes, algorithm restriction)``."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.asked = []

    def choose(self, op, group, size_bytes, **kw):
        self.asked.append((op, float(size_bytes), kw.get("algorithm")))
        return super().choose(op, group, size_bytes, **kw)


def test_collectives_and_bulk_exchanges_share_one_memo_with_the_direct_restriction_kept():
    # every rank runs, twice, a bulk all-to-all collective and a uniform all-to-all-v of the same size on one
    # group: in full simulation (4 ranks) the run asks the tuner once per question, the collective's question
    # (any algorithm) and the exchange's (direct only) kept apart
    nodes, g, per_peer = 2, 2, 8 * KiB
    n = nodes * g
    topo = _topo(g=g, nics=g)
    graph = Graph(nodes, g)
    graph.add_group(world(n))
    for r in range(n):
        prog = graph.program(r)
        for i in range(2):
            prog.add(CollectiveNode(name=f"c{i}", op="all_to_all", group="world", size_bytes=per_peer * n))
            prog.add(AllToAllVNode(name=f"v{i}", group="world", send_bytes=np.full(n, per_peer)))
    tuner = _CountingTuner(topo, nodes, g)
    res = Executor(System.from_topology(topo), graph, tuner=tuner).run()
    assert res.sim_mode == "full"
    assert sorted(tuner.asked, key=str) == sorted([("all_to_all", per_peer * n, None),
                                                   ("all_to_all", per_peer * n, "direct")], key=str)
    fresh = Tuner(topo, nodes, g)
    assert res.algorithms["c0"] == res.algorithms["c1"] == fresh.choose("all_to_all", world(n), per_peer * n,
                                                                        symmetric_only=False)


def test_group_algorithms_named_restricted_and_tuned():
    nodes, g = 2, 2
    topo = _topo(g=g, nics=g)
    grp = world(nodes * g)
    tuner = _CountingTuner(topo, nodes, g)
    algos = GroupAlgorithms(tuner, g, topo.collectives.channels, symmetric_only=True)
    # named with its protocol: as given, the tuner is not asked
    name, algo = algos.get("all_reduce", grp, 1e6, algorithm="ring/LL128")
    assert (name, algo.name, algo.protocol, tuner.asked) == ("ring/LL128", "ring", "LL128", [])
    # named without one: the tuner's fastest protocol of that algorithm, as a restriction
    name, algo = algos.get("all_reduce", grp, 1e6, algorithm="ring")
    assert name == Tuner(topo, nodes, g).choose("all_reduce", grp, 1e6, algorithm="ring") and algo.name == "ring"
    assert tuner.asked == [("all_reduce", 1e6, "ring")]
    tuner.asked.clear()
    # restricted: the tuner's protocol for the direct algorithm; asked once however often it is asked again
    first = algos.get("all_to_all", grp, 1e6, restrict_to="direct")
    assert algos.get("all_to_all", grp, 1e6, restrict_to="direct") is first
    assert first[0] == Tuner(topo, nodes, g).choose("all_to_all", grp, 1e6, algorithm="direct")
    assert first[0].startswith("direct/") and first[1].name == "direct"
    # tuned: a question of its own
    tuned = algos.get("all_to_all", grp, 1e6)
    assert tuned[0] == Tuner(topo, nodes, g).choose("all_to_all", grp, 1e6)
    assert tuner.asked == [("all_to_all", 1e6, "direct"), ("all_to_all", 1e6, None)]
    with pytest.raises(ValueError, match="not both"):
        algos.get("all_to_all", grp, 1e6, algorithm="direct", restrict_to="direct")


def test_an_exchange_waits_for_its_own_posts_only():
    # 2 nodes x 2 GPUs.  Exchange A (stream comm) sends 64 B to the two off-node ranks: 2 posts at 50 us each on
    # the rank's proxy.  Exchange B (stream comm2) sends only to the node peer (no posts).  A compute node after
    # B must not wait for A's posts: the graph ends as the graph without A does (its 300 us compute node is the
    # longest path), not 100 us of posts later
    from simfuse.graph import ComputeNode

    nodes, g = 2, 2
    n = nodes * g
    topo = _topo(g=g, nics=g, overhead_us=50.0)

    def graph(with_a):
        gr = Graph(nodes, g)
        gr.add_group(world(n))
        for r in range(n):
            prog = gr.program(r)
            node, local = divmod(r, g)
            if with_a:
                a = np.zeros(n)
                a[[(1 - node) * g + j for j in range(g)]] = 64.0
                prog.add(AllToAllVNode(name="a", group="world", send_bytes=a))
            b = np.zeros(n)
            b[node * g + (1 - local)] = 64.0
            pre = prog.add(ComputeNode(name="pre", time_s=10e-6))  # B launches while A's posts are queued
            bid = prog.add(AllToAllVNode(name="b", group="world", send_bytes=b, stream="comm2", deps=(pre,)))
            prog.add(ComputeNode(name="c", time_s=300e-6, deps=(bid,)))
        return gr

    sysm = System.from_topology(topo)
    alone = execute(sysm, graph(False)).time_s
    both = execute(sysm, graph(True)).time_s
    assert alone > 310e-6
    # B's NVLink sends pay no network post overhead (NCCL's ring floor max(NVLink hop, 3 x 50 us) is a ring
    # rule, not a p2p one): 10 us + the launch gap + an NVLink hop (a few us) + the 300 us compute node
    assert alone < 330e-6
    assert both == pytest.approx(alone, rel=1e-9)
