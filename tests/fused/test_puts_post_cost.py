"""GPU-initiated puts: the off-node puts of one batch serialize their post cost (``gpu_initiated.put_post_us``).

Closed forms: N tiny off-node puts land no sooner than N x put_post_s (exactly N x put_post_s + the wire latency
when the bytes are negligible); NVLink stores post nothing; full fabric and fast path agree; the default (0) keeps
the old cost; bad values are rejected naming the field."""

import numpy as np
import pytest
import simpy

from simfuse.engine import Simulation
from simfuse.errors import SpecError
from simfuse.fused.base import start_puts
from simfuse.network import Fabric, FlowNetwork

from ..conftest import make_topology

LAT_OUT = 3e-6  # make_topology's scale-out latency (us 3.0)
NIC = 50e9      # 400 Gb/s, efficiency 1


def _gi(post_us):
    return {"put_issue_us": 0.0, "store_issue_us": 0.0, "nic_proxy_latency_us": 0.0, "flag_latency_us": 0.0,
            "put_post_us": post_us}


def _run_batch(topo, nodes, g, dsts, size_bytes, symmetric):
    fabric = Fabric(topo, nodes, gpus_per_node=g, symmetric=symmetric)
    sim = Simulation(seed=0, record=False)
    net = FlowNetwork(sim, fabric.capacities, fabric.names)
    dsts = np.asarray(dsts, dtype=np.int64)
    puts = start_puts(net, fabric, topo.gpu_initiated, 0, dsts, np.full(len(dsts), float(size_bytes)), "t")
    ends = {}
    for grp, ev in puts:
        ev.callbacks.append(lambda _e, d=tuple(grp.dsts.tolist()): ends.update({x: sim.now for x in d}))
    sim.run(until=simpy.AllOf(sim.env, [ev for _g, ev in puts]))
    return sim.now, ends


@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("n_peers", [1, 7, 63])
def test_tiny_offnode_puts_take_n_times_the_post_cost(symmetric, n_peers):
    post = 0.8e-6
    topo = make_topology(gpus_per_node=1, nics_per_node=1, gpu_initiated=_gi(post / 1e-6))
    t, ends = _run_batch(topo, n_peers + 1, 1, np.arange(1, n_peers + 1), 8, symmetric)
    assert t >= n_peers * post
    # 8-byte puts: the last one is posted at N x post and lands one wire latency later
    assert t == pytest.approx(n_peers * post + LAT_OUT, rel=1e-9, abs=1e-12)
    if not symmetric:  # each put in shifted destination order: rank k is the k-th post
        for d, te in ends.items():
            assert te == pytest.approx(d * post + LAT_OUT, rel=1e-9)


def test_default_keeps_the_old_cost_and_big_puts_overlap_the_posts():
    n_peers, size = 7, 4 * 2**20
    free = make_topology(gpus_per_node=1, nics_per_node=1, gpu_initiated=_gi(0.0))
    t0, _ = _run_batch(free, n_peers + 1, 1, np.arange(1, n_peers + 1), size, False)
    assert free.gpu_initiated.put_post_s == 0.0
    assert t0 == pytest.approx(n_peers * size / NIC + LAT_OUT, rel=1e-9)  # one NIC shared by the 7 flows
    # 7 x 1 us of posts is far below the 0.59 ms the NIC needs to drain: posting is hidden behind the transfer
    posted = make_topology(gpus_per_node=1, nics_per_node=1, gpu_initiated=_gi(1.0))
    t1, _ = _run_batch(posted, n_peers + 1, 1, np.arange(1, n_peers + 1), size, False)
    assert t1 == pytest.approx(t0, rel=1e-12)


def test_nvlink_stores_post_nothing():
    # 2 nodes x 4 GPUs, rank 0 pushes to its 3 node peers (NVLink) and the 4 ranks of node 1 (NIC)
    topo = make_topology(gpus_per_node=4, nics_per_node=4, gpu_initiated=_gi(2.0))
    _t, ends = _run_batch(topo, 2, 4, np.arange(1, 8), 8, False)
    for d in (1, 2, 3):
        assert ends[d] == pytest.approx(1e-6, abs=1e-9)  # NVLink latency (make_topology: 1 us) + 8 B, no post
    # the off-node puts in shifted order (offsets 4..7): 1st..4th post
    assert [ends[d] for d in (4, 5, 6, 7)] == pytest.approx([k * 2e-6 + LAT_OUT for k in (1, 2, 3, 4)], rel=1e-9)


def test_post_cost_spec_field():
    topo = make_topology(gpu_initiated=_gi(0.25))
    assert topo.gpu_initiated.put_post_s == pytest.approx(0.25e-6)
    assert make_topology().gpu_initiated.put_post_s == 0.0
    with pytest.raises(SpecError, match="put_post_us"):
        make_topology(gpu_initiated=_gi(-1.0))


@pytest.mark.parametrize("name", ["embedding_all_to_all", "gemm_all_to_all"])
def test_fused_op_pays_posts_and_fast_path_agrees(name):
    from simfuse.fused import FusedKnobs, make_op
    from simfuse.workloads.op import run_op

    small = {"embedding_all_to_all": {"tables_per_gpu": 2, "rows": 10000, "dim": 64, "pooling": 8,
                                      "global_batch": 1024},
             "gemm_all_to_all": {"tokens": 256, "hidden": 512, "ffn": 256, "experts_per_gpu": 2, "top_k": 2}}
    nodes, g = 4, 2
    knobs = FusedKnobs(hbm_comm_factor=0.0, tile_order="remote_first")
    times = {}
    for post_us in (0.0, 5.0):
        t = make_topology(gpus_per_node=g, nics_per_node=g, gpu_initiated=_gi(post_us))
        op = make_op(name, small[name], nodes, g)
        full = run_op(op, t, nodes, knobs=knobs, mode="full")
        sym = run_op(op, t, nodes, knobs=knobs, mode="symmetric")
        assert sym.fused_time_s == pytest.approx(full.fused_time_s, rel=0.01)
        times[post_us] = full.fused_time_s
    # the off-node puts now cost their posts (each batch's last post lands k x 5 us after the batch starts)
    assert times[5.0] > times[0.0]
