"""One per-destination post rule for bulk and fused (``simfuse/collectives/posting.py``).

Closed forms on uncongested 1-GPU nodes (every peer off the node, one NIC of 50 GB/s shared by the sends):
N-1 peers of b bytes each, m messages per peer at ``post_s`` each, one serial queue: the last destination lands
at ``max((N-1) b / B, (N-1) m post_s) + latency`` after the batch starts.  The bulk all-to-all (NCCL's proxy:
``collectives.net_overhead_us``, one message per 128 KiB chunk) adds its launch gap and completion signalling;
the fused puts (``gpu_initiated.put_post_us``, one message per put) add nothing else.  Property: with the same
post cost and message count, both modes' post-and-drain time is the same function."""

import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from simfuse.collectives import run_collective
from simfuse.collectives.posting import NCCL_P2P_NET_CHUNK_BYTES, PostQueue, PostRule, post_ends
from simfuse.collectives.protocols import _HW_LAT_NET_US
from simfuse.engine import Simulation
from simfuse.fused.base import start_puts
from simfuse.network import Fabric, FlowNetwork

from ..conftest import make_topology

NIC = 50e9            # 400 Gb/s, efficiency 1
LAT_OUT = 3e-6        # make_topology's scale-out latency
NCCL_NET_HOP = _HW_LAT_NET_US["ring"]["Simple"] * 1e-6  # 14 us > 3 us: the bulk flows' latency
LAUNCH, SYNC = 5e-6, 2e-6


def _bulk_topo(post_us):
    return make_topology(gpus_per_node=1, nics_per_node=1, launch_us=LAUNCH * 1e6, sync_us=SYNC * 1e6,
                         collectives_extra={"protocol_model": "nccl", "net_overhead_us": post_us})


def _fused_topo(post_us):
    return make_topology(gpus_per_node=1, nics_per_node=1,
                         gpu_initiated={"put_issue_us": 0.0, "store_issue_us": 0.0, "nic_proxy_latency_us": 0.0,
                                        "flag_latency_us": 0.0, "put_post_us": post_us})


def _closed_form(peers, size_bytes, messages, post_s, lat_s):
    return max(peers * size_bytes / NIC, peers * messages * post_s) + lat_s


def _bulk_time(nodes, size_bytes, post_us):
    r = run_collective(_bulk_topo(post_us), nodes, "all_to_all", size_bytes * nodes, algorithm="direct",
                       protocol="Simple", gpus_per_node=1)
    return r.time_s


def _fused_time(nodes, size_bytes, post_us, messages=None, batches=1, symmetric=False):
    topo = _fused_topo(post_us)
    fabric = Fabric(topo, nodes, gpus_per_node=1, symmetric=symmetric)
    sim = Simulation(seed=0, record=False)
    net = FlowNetwork(sim, fabric.capacities, fabric.names)
    dsts = np.arange(1, nodes, dtype=np.int64)
    evs = []
    for _ in range(batches):
        msgs = None if messages is None else np.full(len(dsts), messages)
        evs += [ev for _g, ev in start_puts(net, fabric, topo.gpu_initiated, 0, dsts,
                                            np.full(len(dsts), float(size_bytes)), "t", msgs)]
    sim.run(until=simpy.AllOf(sim.env, evs))
    return sim.now


@pytest.mark.parametrize("nodes", [2, 9, 33])
@pytest.mark.parametrize("size_bytes", [64.0, 96 * 1024.0, 1.5 * 2**20])
def test_bulk_all_to_all_closed_form(nodes, size_bytes):
    post = 1e-6
    m = int(np.ceil(size_bytes / NCCL_P2P_NET_CHUNK_BYTES))
    expect = LAUNCH + _closed_form(nodes - 1, size_bytes, m, post, NCCL_NET_HOP) + SYNC
    assert _bulk_time(nodes, size_bytes, 1.0) == pytest.approx(expect, rel=1e-9)


@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("nodes", [2, 9, 33])
@pytest.mark.parametrize("size_bytes", [64.0, 1.5 * 2**20])
def test_fused_puts_closed_form(symmetric, nodes, size_bytes):
    post = 0.7e-6
    assert _fused_time(nodes, size_bytes, 0.7, symmetric=symmetric) == pytest.approx(
        _closed_form(nodes - 1, size_bytes, 1, post, LAT_OUT), rel=1e-9)
    # a put standing for 3 slices posts 3 messages
    assert _fused_time(nodes, size_bytes, 0.7, messages=3, symmetric=symmetric) == pytest.approx(
        _closed_form(nodes - 1, size_bytes, 3, post, LAT_OUT), rel=1e-9)


def test_fused_batches_queue_behind_each_other():
    # two batches issued at once by the same GPU: the second posts after the first (one queue per GPU), as the
    # bulk exchange's posts to late entities do; tiny puts, so the posts decide
    nodes, post = 9, 1e-6
    t = _fused_time(nodes, 8.0, 1.0, batches=2)
    assert t == pytest.approx(2 * (nodes - 1) * post + LAT_OUT, rel=1e-9)


@settings(max_examples=25, deadline=None)
@given(nodes=st.integers(2, 20), size_bytes=st.floats(1.0, 4 * 2**20), post_us=st.floats(0.0, 3.0))
def test_bulk_and_fused_pay_one_rule(nodes, size_bytes, post_us):
    """The same post cost and message count give both modes the same post-and-drain time; only the fixed terms
    differ (the bulk launch gap, completion signalling and NCCL's hop latency; the puts' latency)."""
    m = int(np.ceil(size_bytes / NCCL_P2P_NET_CHUNK_BYTES))
    bulk = _bulk_time(nodes, size_bytes, post_us) - LAUNCH - SYNC - NCCL_NET_HOP
    fused = _fused_time(nodes, size_bytes, post_us, messages=m) - LAT_OUT
    assert bulk == pytest.approx(fused, rel=1e-9, abs=1e-15)
    assert fused == pytest.approx(_closed_form(nodes - 1, size_bytes, m, post_us * 1e-6, 0.0), rel=1e-9,
                                  abs=1e-15)


@settings(max_examples=50, deadline=None)
@given(msgs=st.lists(st.integers(1, 50), min_size=1, max_size=30), post_s=st.floats(0.0, 1e-5),
       now=st.floats(0.0, 1e-3), src=st.integers(0, 63))
def test_post_queue_invariants(msgs, post_s, now, src):
    n = 64
    dsts = (src + 1 + np.arange(len(msgs))) % n
    dsts = dsts[dsts != src]
    msgs = np.asarray(msgs[: len(dsts)])
    if len(dsts) == 0:
        return
    q = PostQueue(PostRule(post_s))
    ends = post_ends(q, now, src, n, dsts, msgs)
    # the queue ends after exactly all the messages; shifted order: nearer offsets post first
    assert q.free_at == pytest.approx(now + msgs.sum() * post_s, rel=1e-12, abs=1e-18)
    off = [(int(d) - src) % n for d in dsts]
    by_off = [ends[int(d)] for _o, d in sorted(zip(off, dsts, strict=True))]
    assert all(a <= b for a, b in zip(by_off, by_off[1:], strict=False))
    # a second batch starts where the first ended
    again = post_ends(q, now, src, n, dsts[:1], np.array([1]))
    assert again[int(dsts[0])] == pytest.approx(now + (msgs.sum() + 1) * post_s, rel=1e-12, abs=1e-18)


def test_messages_per_transfer():
    rule = PostRule(1e-6, NCCL_P2P_NET_CHUNK_BYTES)
    assert rule.messages([0, 1, 131072, 131073, 10 * 131072]).tolist() == [1, 1, 1, 2, 10]
    assert PostRule(1e-6).messages([5, 1e9]).tolist() == [1, 1]
